"""Turns a prefill's scaled dot-product attention into one op template families can serve.

Inductor lowers SDPA on the CPU to ATen's flash kernel and offers nothing else. Before that, in
the graph Dynamo captured (pre-grad), this pass replaces each ``F.scaled_dot_product_attention``
call with several query tokens per sequence by ``inductor_ext::prefill_attention(q, k, v, mask,
scale)`` (``kernels/prefill_attention_ops.py``), whose lowering (``lowering/ops/prefill_attention.py``)
autotunes ATen's SDPA against the families serving ``prefill_attention`` (``cpp.flash_attention`` on
the cpu preset). A call with one query token is the ``decode_attention_op`` pass's.

It rewrites a call only when the op means the same and can pay off:
- more than one query token, no dropout, and for grouped-query attention (fewer key/value heads)
  ``enable_gqa=True``, as SDPA requires; a boolean mask (Hugging Face passes its causal mask as one)
  or the ``is_causal`` flag with no mask (nanoGPT-style code), which makes the op
  ``prefill_attention_causal`` for the families (its own autotune key);
- no gradient flows through it (the op has no backward);
- autotuning is on and an enabled family claims this target and accepts the instance (supported
  dtypes, head dims and masks; a family called from Python is refused under Inductor's C++
  wrapper, ``refusals.here``); otherwise the call stays ATen's SDPA, as without ext.
"""

from __future__ import annotations

from typing import Any

import torch

from inductor_ext.kernels.prefill_attention_ops import OP
from inductor_ext.lowering.passes.decode_attention_op import DecodeAttentionOp


class PrefillAttentionOp(DecodeAttentionOp):
    """``decode_attention_op``'s checks, for calls with several query tokens (and its argument
    reading and rewrite), making ``prefill_attention``."""

    name = "prefill_attention_op"
    op, op_name = OP, "prefill_attention"

    def query_refusal(self, q: torch.Tensor) -> str | None:
        if isinstance(q.shape[-2], int) and q.shape[-2] <= 1:  # a symbolic length: the families decide
            return f"not several query tokens per sequence (query {tuple(q.shape)})"
        return None

    def causal_refusal(self, args: dict[str, Any]) -> str | None:
        if args["is_causal"] is False or (args["is_causal"] is True and args["attn_mask"] is None):
            return None
        return "the is_causal flag with a mask, or not a constant"

    def spec_op(self, args: dict[str, Any]) -> str:
        return "prefill_attention_causal" if args["is_causal"] else self.op_name

    def op_args(self, args: dict[str, Any]) -> tuple[Any, ...]:
        return (*super().op_args(args), bool(args["is_causal"]))
