"""The GEMM a Linear layer makes, ``x @ W.T`` (A (M, K) and B = W.T both contiguous along K), read
from ``mm`` / ``addmm`` / ``scaled_mm`` OpSpecs (lowering/ops/ has their input orders). Shared by the families that only serve that
layout (the Tensor Data Mover GEMMs of FlyDSL and Triton): the op decoding lives here once, and
each family's ``refuse_problem`` adds its own limits.

- ``mm`` / ``addmm``: bf16/fp16, one dtype throughout, addmm's bias over N with alpha and beta;
- ``scaled_mm`` (``aten._scaled_mm``): fp8 e4m3 with fp32 tensor-wise (one value each) or row-wise ([M, 1], [1, N])
  scales, an optional bias [N] in the output dtype; MX block scales are another family's.
"""

from __future__ import annotations

from dataclasses import dataclass

from inductor_ext.templates.allowed import flag, number, one_of, size
from inductor_ext.templates.family import OpSpec, TensorSpec

OPS = ("mm", "addmm", "scaled_mm")
DTYPES = ("bfloat16", "float16", "float8_e4m3fn")
FP8_OUT_DTYPES = ("bfloat16", "float16", "float32")
ELEM_BYTES = {"bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float32": 4}
SCALINGS = ("none", "tensor", "row")  # unscaled, fp8 with tensor-wise or row-wise scales


@dataclass(frozen=True)
class LinearProblem:
    """C = A @ B for K-major A (M, K) and B (K, N). Unscaled (``scaling="none"``): mm / addmm,
    beta * bias + alpha * A @ B in the input dtype. fp8: (A @ B) * scale_a * scale_b (+ bias)."""

    m: int = size()
    n: int = size()
    k: int = size()
    dtype: str = one_of(DTYPES, "bfloat16")
    out_dtype: str = one_of(tuple(dict.fromkeys(DTYPES + FP8_OUT_DTYPES)), "bfloat16")
    bias: bool = flag(False)
    alpha: float = number(1.0)
    beta: float = number(1.0)
    scaling: str = one_of(SCALINGS, "none")
    use_pdl = False  # not a field: AMD has no programmatic dependent launch (Triton's launch_options reads it)


def _over_n(bias: TensorSpec, m: int, n: int) -> bool:
    """A bias [N], or [M, N] broadcast over rows (stride 0 along M: how Inductor's addmm passes it)."""
    return tuple(bias.shape) == (n,) or (tuple(bias.shape) == (m, n) and (bias.stride[0] == 0 or m == 1))


def linear_problem(spec: OpSpec, family: str) -> LinearProblem | str:
    """The problem an OpSpec describes, or why it is not an ``x @ W.T`` GEMM ``family`` serves."""
    if spec.op not in OPS:
        return f"{family} serves {OPS}, not {spec.op}"
    if spec.op == "scaled_mm":
        a, b, sa, sb, bias, scale_result = (*spec.inputs, None, None, None, None, None, None)[:6]
        if a is None or b is None or sa is None or sb is None:
            return "scaled_mm needs A, B and both scales"
        if a.dtype != "float8_e4m3fn" or b.dtype != a.dtype:
            return f"{family} takes fp8 e4m3 operands for scaled_mm, got {a.dtype}, {b.dtype}"
        if sa.dtype != "float32" or sb.dtype != "float32" or scale_result is not None:
            return "fp32 tensor-wise or row-wise scales only (MX: flydsl.mx_scaled_mm), no scale_result"
        m, n = a.shape[0], b.shape[1]
        if all(d == 1 for d in sa.shape) and all(d == 1 for d in sb.shape):
            scaling = "tensor"
        elif tuple(sa.shape) == (m, 1) and tuple(sb.shape) == (1, n):
            scaling = "row"
        else:
            return f"scales must be one value each or [M, 1] and [1, N]; got {sa.shape}, {sb.shape}"
        if bias is not None and (not _over_n(bias, m, n) or bias.dtype != spec.out.dtype):
            return f"bias must be [{n}] in the output dtype {spec.out.dtype}"
        problem = LinearProblem(m, n, a.shape[1], a.dtype, spec.out.dtype, bias is not None, scaling=scaling)
    else:
        bias = spec.inputs[0] if spec.op == "addmm" else None
        a, b = spec.inputs[-2], spec.inputs[-1]
        if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
            return "mm needs two 2-D operands"
        dtypes = {a.dtype, b.dtype, spec.out.dtype} | ({bias.dtype} if bias is not None else set())
        if len(dtypes) != 1 or a.dtype not in ("bfloat16", "float16"):
            return f"{family} mm takes one dtype of bfloat16/float16 for A, B, bias and C; got {sorted(dtypes)}"
        if bias is not None and not _over_n(bias, a.shape[0], b.shape[1]):
            return f"{family} adds a bias over N ([{b.shape[1]}], or broadcast over rows), got {bias.shape} {bias.stride}"
        problem = LinearProblem(a.shape[0], b.shape[1], a.shape[1], a.dtype, a.dtype, bias is not None,
                                float(spec.scalars.get("alpha", 1.0)), float(spec.scalars.get("beta", 1.0)))
    if a.stride[1] != 1 or b.stride[0] != 1:
        return f"{family} needs A and B contiguous along K (x @ W.T); got strides {a.stride}, {b.stride}"
    if (a.stride[0] * ELEM_BYTES[a.dtype]) % 16 or (b.stride[1] * ELEM_BYTES[b.dtype]) % 16:
        return "rows of A and B must start 16-byte aligned (tensor descriptors)"
    return problem


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> LinearProblem:
    """``inductor-ext asm``'s ``x @ W.T`` of an MxNxK shape: bf16 (or the given 16-bit dtype), or
    for ``float8_e4m3fn`` a scaled_mm with tensor-wise scales and a bf16 result."""
    dtype = dtype or "bfloat16"
    if dtype == "float8_e4m3fn":
        return LinearProblem(m, n, k, dtype, "bfloat16", scaling="tensor")
    return LinearProblem(m, n, k, dtype, dtype)


def dtype_reason(problem: LinearProblem) -> str | None:
    """The combinations both TDM families accept: fp8 scaled into one of ``FP8_OUT_DTYPES``, or
    16-bit unscaled in its own dtype."""
    fp8 = problem.dtype == "float8_e4m3fn"
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if fp8 and (problem.scaling not in ("tensor", "row") or problem.out_dtype not in FP8_OUT_DTYPES):
        return f"fp8 needs tensor or row scaling and an out dtype in {FP8_OUT_DTYPES}"
    if not fp8 and (problem.scaling != "none" or problem.out_dtype != problem.dtype):
        return "bf16/fp16 GEMMs are unscaled and keep their dtype"
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    return None


def unpack_tensors(problem: LinearProblem, tensors: tuple, family: str) -> tuple:
    """(A, B, bias, scale_a, scale_b) from a launch's tensors in the op's order: (A, B) for mm,
    (bias, A, B) for addmm, (A, B, scale_a, scale_b[, bias[, scale_result]]) for scaled_mm."""
    if problem.scaling == "none":
        bias, a, b = tensors if problem.bias else (None, *tensors)
        return a, b, bias, None, None
    a, b, sa, sb, bias, *rest = (*tensors, None, None)
    if any(r is not None for r in rest):
        raise ValueError(f"{family}: scale_result is not supported")
    return a, b, bias, sa, sb
