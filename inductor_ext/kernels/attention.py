"""Attention reference in plain torch: FlexAttention's semantics (score_mod, mask_mod, GQA), materialised
in fp32 so a kernel's tiling, online softmax or dtype handling cannot hide behind it."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def attention_reference(q: Tensor, k: Tensor, v: Tensor, score_mod: ScoreMod | None = None,
                        mask_mod: MaskMod | None = None, scale: float | None = None) -> Tensor:
    """``softmax(score_mod(q @ k^T * scale) masked by mask_mod) @ v`` for q (B, Hq, Lq, D), k (B, Hkv, Lkv, D),
    v (B, Hkv, Lkv, Dv), Hq a multiple of Hkv (GQA). score_mod(score, b, h, q_idx, kv_idx) and
    mask_mod(b, h, q_idx, kv_idx) see broadcast index tensors, as FlexAttention's do. A fully masked
    row gives zeros (FlexAttention's convention). Returns q's dtype."""
    b, hq, lq, d = q.shape
    hkv, lkv = k.shape[1], k.shape[2]
    if hq % hkv:
        raise ValueError(f"query heads ({hq}) must be a multiple of key/value heads ({hkv})")
    rep = hq // hkv
    kf, vf = k.float().repeat_interleave(rep, dim=1), v.float().repeat_interleave(rep, dim=1)
    scores = q.float() @ kf.transpose(-1, -2) * (d ** -0.5 if scale is None else scale)
    bi = torch.arange(b).view(b, 1, 1, 1)
    hi = torch.arange(hq).view(1, hq, 1, 1)
    qi = torch.arange(lq).view(1, 1, lq, 1)
    ki = torch.arange(lkv).view(1, 1, 1, lkv)
    if score_mod is not None:
        scores = score_mod(scores, bi, hi, qi, ki)
    if mask_mod is not None:
        keep = torch.broadcast_to(mask_mod(bi, hi, qi, ki), scores.shape)
        scores = scores.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a fully masked row: zeros
    return (probs @ vf).to(q.dtype)
