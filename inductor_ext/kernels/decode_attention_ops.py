"""``torch.ops.inductor_ext.decode_attention``: scaled dot-product attention of one query token
per sequence, no dropout, with or without a mask, what the ``decode_attention_op`` pass turns such
an SDPA call into so that template families can be autotuned for it (Inductor lowers SDPA on the CPU to ATen's
flash kernel, with no choice to offer).

Its implementation is ATen's SDPA, as the user's call ran it (the ATen choice of that
autotuning). The output is contiguous, (B, Hq, 1, Dv) in q's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._prims_common import make_contiguous_strides_for


def aten_decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *, scale: float) -> Tensor:
    """ATen's SDPA of one query token, contiguous: the op's implementation, and what a graph
    inlines where ATen's choice wins (``lowering/ops/_attention.py``)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    if out.is_contiguous():
        # ATen's CPU kernel writes (B, 1, H, Dv) and returns its transpose: with one query the
        # same memory as a contiguous (B, H, 1, Dv), whose strides the graph expects
        return out.as_strided(out.shape, make_contiguous_strides_for(out.shape))
    return out.contiguous()


@torch.library.custom_op("inductor_ext::decode_attention", mutates_args=())
def decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    return aten_decode_attention(q, k, v, mask, scale=scale)


@decode_attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    return q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]))


OP = torch.ops.inductor_ext.decode_attention.default
