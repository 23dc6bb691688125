"""``decode_attention``: lowers ``inductor_ext::decode_attention`` (made by the
``decode_attention_op`` pass) to an autotuned choice: ATen's SDPA (the op's own implementation)
or the families serving ``decode_attention`` (``cpp.decode_attention``: Inductor-compiled
reductions, inlined when they win). The output is contiguous (B, Hq, 1, Dv) in q's dtype
(``_attention.py``: what the two attention ops share).

OpSpec.inputs: (q, k, v, mask|None); scalar ``scale``.
"""

from __future__ import annotations

from typing import Any

from torch._inductor.lowering import register_lowering

from inductor_ext.kernels.decode_attention_ops import OP, aten_decode_attention
from inductor_ext.lowering.ops import _attention
from inductor_ext.lowering.ops._select import OpChoice
from inductor_ext.lowering.ops._spec import OpInputs

ATEN_CHOICE = OpChoice(OP, "decode_attention_aten", inline=aten_decode_attention)


def decode_attention(kernel_inputs: Any) -> OpInputs | str:
    return _attention.spec("decode_attention", kernel_inputs)


SPECS = {"decode_attention": decode_attention}


@register_lowering(OP, type_promotion_kind=None)
def lower_decode_attention(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    return _attention.lower("decode_attention", ATEN_CHOICE, q, k, v, mask, scale)
