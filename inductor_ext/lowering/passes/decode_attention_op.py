"""Turns a decode step's scaled dot-product attention into one op template families can serve.

Inductor lowers SDPA on the CPU to ATen's flash kernel and offers nothing else. Before that, in
the graph Dynamo captured (pre-grad), this pass replaces each ``F.scaled_dot_product_attention``
call with one query token per sequence by ``inductor_ext::decode_attention(q, k, v, mask, scale)``
(``kernels/decode_attention_ops.py``), whose lowering (``lowering/ops/decode_attention.py``)
autotunes ATen's SDPA against the families serving ``decode_attention``
(``cpp.decode_attention`` on the cpu preset).

It rewrites a call only when the op means the same and can pay off:
- one query token, no dropout, not causal (PyTorch's causal mask is aligned top-left: one causal
  query sees only the first key, which is not a decode step), and for grouped-query attention
  (fewer key/value heads) ``enable_gqa=True``, as SDPA requires; an attention mask is kept (a
  static KV cache masks its unwritten slots: Hugging Face's ``cache_implementation="static"``),
  and the family says which masks its kernel applies;
- no gradient flows through it (the op has no backward);
- autotuning is on and an enabled family claims this target and accepts the instance (static
  shapes, supported dtypes); otherwise the call stays ATen's SDPA, as without ext.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.fx import Node

from inductor_ext.kernels.decode_attention_ops import OP
from inductor_ext.lowering.passes.op_offer import OneOpPass, refusal, tensor_spec
from inductor_ext.templates.family import OpSpec

_TARGETS = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}


def _arguments(node: Node) -> dict[str, Any]:
    """``scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
    is_causal=False, scale=None, enable_gqa=False)``'s arguments by name."""
    return {**_DEFAULTS, **dict(zip(_PARAMS, node.args)), **node.kwargs}


def _example(value: Any) -> Any:
    return value.meta.get("example_value") if isinstance(value, Node) else None


def _scale(args: dict[str, Any], q: torch.Tensor) -> float:
    """The call's scale, SDPA's default (1/sqrt(head dim)) resolved: the op always takes a number."""
    return 1.0 / math.sqrt(q.shape[-1]) if args["scale"] is None else float(args["scale"])


class DecodeAttentionOp(OneOpPass):
    name = "decode_attention_op"
    stage = "pre_grad"
    targets, op, kept = _TARGETS, OP, "ATen's SDPA"
    op_name = "decode_attention"  # the op's name for the families (OpSpec.op)

    def query_refusal(self, q: torch.Tensor) -> str | None:
        """Why this pass leaves a call with query ``q`` (B, H, Lq, D) to another, or None."""
        return None if q.shape[-2] == 1 else f"not one query token per sequence (query {tuple(q.shape)})"

    def causal_refusal(self, args: dict[str, Any]) -> str | None:
        """Why the call's ``is_causal`` flag keeps it ATen's, or None (one causal query, aligned
        top-left as PyTorch aligns it, sees only the first key: not a decode step)."""
        return None if args["is_causal"] is False else "the is_causal flag"

    def spec_op(self, args: dict[str, Any]) -> str:
        """The op the families are asked to serve for this call."""
        return self.op_name

    def arguments(self, node: Node) -> dict[str, Any]:
        return _arguments(node)

    def op_args(self, args: dict[str, Any]) -> tuple[Any, ...]:
        return args["query"], args["key"], args["value"], args["attn_mask"], _scale(args, _example(args["query"]))

    def reason(self, node: Node, args: dict[str, Any]) -> str | None:
        """Why ``node`` stays ATen's SDPA, or None when a family may serve it."""
        out = node.meta.get("example_value")
        q, k, v, mask = (_example(args[a]) for a in ("query", "key", "value", "attn_mask"))
        if not all(isinstance(t, torch.Tensor) for t in (out, q, k, v)):
            return "no example values"
        if args["attn_mask"] is not None and not isinstance(mask, torch.Tensor):
            return "a mask with no example value"
        if args["dropout_p"] != 0.0:
            return "dropout"
        if (why := self.causal_refusal(args)) is not None:
            return why
        scale = args["scale"]
        if not isinstance(args["enable_gqa"], bool) or isinstance(scale, bool) or \
                not (scale is None or isinstance(scale, (int, float))):
            return "scale or enable_gqa is not a constant"
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            return f"not 4-D (query {tuple(q.shape)})"
        if (why := self.query_refusal(q)) is not None:
            return why
        if q.shape[1] != k.shape[1] and not args["enable_gqa"]:
            return "fewer key/value heads than query heads without enable_gqa"
        if out.requires_grad:
            return "a gradient flows through it (the op has no backward)"
        specs = [tensor_spec(t) for t in (q, k, v)]
        mask_spec = None if mask is None else tensor_spec(mask)
        if None in specs or (mask is not None and mask_spec is None):
            return "a data-dependent size with no hint"
        spec = OpSpec(self.spec_op(args), (*specs, mask_spec), tensor_spec(out, contiguous=True),
                      {"scale": _scale(args, q)}, q.device.type)
        return refusal(self.config, spec)
