"""Turns a prefill's scaled dot-product attention into one op template families can serve.

Inductor lowers SDPA on the CPU to ATen's flash kernel and offers nothing else. Before that, in
the graph Dynamo captured (pre-grad), this pass replaces each ``F.scaled_dot_product_attention``
call with several query tokens per sequence by ``inductor_ext::prefill_attention(q, k, v, mask,
scale)`` (``kernels/prefill_attention_ops.py``), whose lowering (``lowering/ops/prefill_attention.py``)
autotunes ATen's SDPA against the families serving ``prefill_attention`` (``cpp.flash_attention`` on
the cpu preset). A call with one query token is the ``decode_attention_op`` pass's.

It rewrites a call only when the op means the same and can pay off:
- more than one query token, no dropout, no ``is_causal`` flag (a causal mask passed as a tensor,
  as Hugging Face passes it, is a mask like any other), and for grouped-query attention (fewer
  key/value heads) ``enable_gqa=True``, as SDPA requires;
- no gradient flows through it (the op has no backward), and Inductor's C++ wrapper is off (its
  generated C++ cannot call a kernel that is called from Python);
- autotuning is on and an enabled family claims this target and accepts the instance (static
  shapes, supported dtypes and masks); otherwise the call stays ATen's SDPA, as without ext.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import config as inductor_config
from torch.fx import Node

from inductor_ext.kernels.prefill_attention_ops import OP
from inductor_ext.lowering.passes.decode_attention_op import _TARGETS, _arguments, _example, _scale
from inductor_ext.lowering.passes.op_offer import OneOpPass, refusal, tensor_spec
from inductor_ext.templates.family import OpSpec


class PrefillAttentionOp(OneOpPass):
    name = "prefill_attention_op"
    stage = "pre_grad"
    targets, op, kept = _TARGETS, OP, "ATen's SDPA"

    def arguments(self, node: Node) -> dict[str, Any]:
        return _arguments(node)

    def op_args(self, args: dict[str, Any]) -> tuple[Any, ...]:
        return args["query"], args["key"], args["value"], args["attn_mask"], _scale(args, _example(args["query"]))

    def reason(self, node: Node, args: dict[str, Any]) -> str | None:
        """Why ``node`` stays ATen's SDPA, or None when a family may serve it."""
        if inductor_config.cpp_wrapper:
            return "Inductor's C++ wrapper is on: it cannot call the kernels serving prefill_attention (called from Python)"
        out = node.meta.get("example_value")
        q, k, v, mask = (_example(args[a]) for a in ("query", "key", "value", "attn_mask"))
        if not all(isinstance(t, torch.Tensor) for t in (out, q, k, v)):
            return "no example values"
        if args["attn_mask"] is not None and not isinstance(mask, torch.Tensor):
            return "a mask with no example value"
        if args["dropout_p"] != 0.0 or args["is_causal"] is not False:
            return "dropout or the is_causal flag"
        scale = args["scale"]
        if not isinstance(args["enable_gqa"], bool) or isinstance(scale, bool) or \
                not (scale is None or isinstance(scale, (int, float))):
            return "scale or enable_gqa is not a constant"
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            return f"not 4-D (query {tuple(q.shape)})"
        if isinstance(q.shape[-2], int) and q.shape[-2] <= 1:  # a symbolic length: the families decide
            return f"not several query tokens per sequence (query {tuple(q.shape)})"
        if q.shape[1] != k.shape[1] and not args["enable_gqa"]:
            return "fewer key/value heads than query heads without enable_gqa"
        if out.requires_grad:
            return "a gradient flows through it (the op has no backward)"
        specs = [tensor_spec(t) for t in (q, k, v)]
        mask_spec = None if mask is None else tensor_spec(mask)
        if None in specs or (mask is not None and mask_spec is None):
            return "a data-dependent size with no hint"
        spec = OpSpec("prefill_attention", (*specs, mask_spec), tensor_spec(out, contiguous=True),
                      {"scale": _scale(args, q)}, q.device.type)
        return refusal(self.config, spec)
