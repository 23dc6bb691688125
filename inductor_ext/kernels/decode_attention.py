"""Decode attention (one query token per sequence) written as plain torch reductions, for Inductor
to compile: what the ``cpp.decode_attention`` family offers beside ATen's SDPA kernel.

With one query, attention is two reductions over the cached keys and values, not two matmuls:
the scores are a dot product per key (a reduction over the head dimension), the output a
softmax-weighted sum of values (a reduction over the keys). Written that way, Inductor's CPU
codegen emits vectorized loops that stream K and V once each, in fp32 whatever the input dtype,
where ATen's flash kernel for the CPU tiles for many queries (measured in
``bench/cpu_decode.py``'s decoder: see ``templates/cpp/decode_attention.py``).

Grouped-query attention (more query heads than key/value heads) is a broadcast over the heads
of one group, never a copy of K or V. A mask (boolean, True where a query attends, or added to
the scores, as SDPA takes it) is applied to the fp32 scores: a decode step over a static KV
cache (Hugging Face's ``cache_implementation="static"``) masks the slots not yet written. A query
that sees no key gives zeros, as ATen's SDPA does.
"""

from __future__ import annotations

import torch
from torch import Tensor

FORMS = ("fp32_reductions",)


def decode_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, form: str = "fp32_reductions",
                     mask: Tensor | None = None) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v`` for q (B, Hq, 1, D), k (B, Hkv, L, D), v (B, Hkv, L, Dv),
    Hq a multiple of Hkv, ``mask`` None or broadcastable to (B, Hq, 1, L); returns (B, Hq, 1, Dv)
    contiguous, in q's dtype, accumulated in fp32."""
    if form not in FORMS:
        raise ValueError(f"decode attention form {form!r} is not one of {FORMS}")
    b, hq, lq, d = q.shape
    hkv, length, dv = k.shape[1], k.shape[2], v.shape[3]
    if lq != 1:
        raise ValueError(f"decode attention takes one query token per sequence, got {lq}")
    if hq % hkv:
        raise ValueError(f"query heads ({hq}) must be a multiple of key/value heads ({hkv})")
    group = hq // hkv
    qf = q.float().reshape(b, hkv, group, 1, d)  # the query heads of each key/value head
    scores = (qf * k.float().unsqueeze(2)).sum(-1) * scale  # (B, Hkv, group, L)
    if mask is not None:
        scores = _masked(scores, torch.broadcast_to(mask, (b, hq, 1, length)).reshape(b, hkv, group, length))
    probs = torch.softmax(scores, dim=-1)
    if mask is not None:  # a query that sees no key: zeros, as ATen's SDPA (softmax's would be NaN)
        probs = torch.where(scores.amax(dim=-1, keepdim=True) == float("-inf"), 0.0, probs)
    out = (probs.unsqueeze(-1) * v.float().unsqueeze(2)).sum(-2)  # (B, Hkv, group, Dv)
    return out.reshape(b, hq, 1, dv).to(q.dtype)


def masked_decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float,
                            form: str = "fp32_reductions") -> Tensor:
    """:func:`decode_attention` with its mask taken fourth, as the op takes its inputs."""
    return decode_attention(q, k, v, scale, form, mask=mask)


def _masked(scores: Tensor, mask: Tensor) -> Tensor:
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    return scores + mask.float()
