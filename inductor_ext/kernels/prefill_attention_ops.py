"""``torch.ops.inductor_ext.prefill_attention``: scaled dot-product attention of several query
tokens per sequence, no dropout, with no mask, a boolean one or SDPA's ``is_causal`` flag (no mask
then): what the ``prefill_attention_op`` pass turns such an SDPA call into so that template
families can be autotuned for it (Inductor lowers SDPA on the CPU to ATen's flash kernel, with no
choice to offer).

Its implementation is ATen's SDPA, as the user's call ran it (the ATen choice of that
autotuning). The output is contiguous, (B, Hq, Lq, Dv) in q's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def aten_prefill_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *, scale: float,
                           is_causal: bool = False) -> Tensor:
    """ATen's SDPA, contiguous: the op's implementation, and what a graph inlines where ATen's
    choice wins (``lowering/ops/_attention.py``)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, is_causal=is_causal,
                                         enable_gqa=q.shape[1] != k.shape[1])
    return out.contiguous()


@torch.library.custom_op("inductor_ext::prefill_attention", mutates_args=())
def prefill_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float,
                      is_causal: bool = False) -> Tensor:
    return aten_prefill_attention(q, k, v, mask, scale=scale, is_causal=is_causal)


@prefill_attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, is_causal: bool = False) -> Tensor:
    return q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]))


OP = torch.ops.inductor_ext.prefill_attention.default
