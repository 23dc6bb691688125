"""What the CPU attention families (``cpp.decode_attention``, ``cpp.flash_attention``) read alike
from an attention op's spec: q, k, v as (batch, heads, tokens, head dim) and the optional mask."""

from __future__ import annotations

from inductor_ext.templates.family import OpSpec, TensorSpec


def qkv_refusal(spec: OpSpec, name: str, ops: tuple[str, ...]) -> str | None:
    """Why family ``name`` cannot read ``spec`` as attention over CPU tensors, or None."""
    if spec.op not in ops:
        return f"{name} serves {', '.join(ops)}, not {spec.op}"
    if spec.device_type != "cpu":
        return f"{name} serves CPU tensors, not {spec.device_type}"
    q, k, v = spec.inputs[:3]
    if q is None or k is None or v is None or not len(q.shape) == len(k.shape) == len(v.shape) == 4:
        return "q, k and v must be 4-D (batch, heads, tokens, head dim)"
    if not q.dtype == k.dtype == v.dtype:
        return f"mixed dtypes q {q.dtype}, k {k.dtype}, v {v.dtype}"
    if k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        return f"shapes q {q.shape}, k {k.shape}, v {v.shape} do not fit together"
    return None


def mask_of(spec: OpSpec) -> TensorSpec | None:
    return spec.inputs[3] if len(spec.inputs) > 3 else None


def broadcast_refusal(mask: TensorSpec, attended: tuple[int, ...]) -> str | None:
    """Why ``mask`` does not broadcast to ``attended`` (batch, query heads, queries, keys), or None."""
    shape = tuple(mask.shape)
    if len(shape) > 4 or any(m not in (1, a) for m, a in zip(reversed(shape), reversed(attended))):
        return f"a mask of shape {shape} does not broadcast to {attended}"
    return None
