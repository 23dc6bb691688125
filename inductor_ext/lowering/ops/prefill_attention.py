"""``prefill_attention``: lowers ``inductor_ext::prefill_attention`` (made by the
``prefill_attention_op`` pass) to an autotuned choice: ATen's SDPA (the op's own implementation)
or the families serving ``prefill_attention`` (``cpp.flash_attention``: a C++ kernel of ours).
The output is contiguous (B, Hq, Lq, Dv) in q's dtype (``_attention.py``: what the two attention
ops share).

OpSpec.inputs: (q, k, v, mask|None); scalar ``scale``.
"""

from __future__ import annotations

from typing import Any

from torch._inductor.lowering import register_lowering

from inductor_ext.kernels.prefill_attention_ops import OP, aten_prefill_attention
from inductor_ext.lowering.ops import _attention
from inductor_ext.lowering.ops._select import OpChoice
from inductor_ext.lowering.ops._spec import OpInputs

ATEN_CHOICE = OpChoice(OP, "prefill_attention_aten", inline=aten_prefill_attention)


def prefill_attention(kernel_inputs: Any) -> OpInputs | str:
    return _attention.spec("prefill_attention", kernel_inputs)


def prefill_attention_causal(kernel_inputs: Any) -> OpInputs | str:
    """``is_causal=True`` (no mask): key j attends to query i when j <= i (aligned top-left)."""
    return _attention.spec("prefill_attention_causal", kernel_inputs)


SPECS = {"prefill_attention": prefill_attention, "prefill_attention_causal": prefill_attention_causal}


@register_lowering(OP, type_promotion_kind=None)
def lower_prefill_attention(q: Any, k: Any, v: Any, mask: Any, scale: float, is_causal: bool = False) -> Any:
    if is_causal:
        return _attention.lower("prefill_attention_causal", ATEN_CHOICE, q, k, v, mask, scale, is_causal=True)
    return _attention.lower("prefill_attention", ATEN_CHOICE, q, k, v, mask, scale)
