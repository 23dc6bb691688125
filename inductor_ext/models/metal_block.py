"""The decoder block of the Metal end-to-end test (tests/test_metal_block.py): attention with an
FP8 output projection (rowwise scales, ``torch._scaled_mm``), RMSNorm, a SwiGLU MLP whose down
projection has a bias (addmm), a top-k MoE router with experts through ``torch._grouped_mm``, an
LM head and a softmax over the vocabulary; every Metal template family has an op in it.
``fp8=False`` uses a plain output projection, for training (``_scaled_mm`` has no backward).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DecoderBlock", "quantize_rows", "E4M3_MAX"]

E4M3_MAX = 448.0


# Inductor 2.15's Metal codegen has no float8 casts (its DTYPE_TO_METAL lacks e4m3, on a Mac as
# here), so the block quantizes its activations with an op of its own, which stays an ATen call.
@torch.library.custom_op("inductor_ext_models::quantize_rows", mutates_args=())
def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-6) / E4M3_MAX
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


@quantize_rows.register_fake
def _(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty((x.shape[0], 1), dtype=torch.float32)


class DecoderBlock(nn.Module):
    def __init__(self, dtype: torch.dtype, fp8: bool, dim: int = 64, heads: int = 4, ffn: int = 96, experts: int = 4,
                 top_k: int = 2, vocab: int = 2048) -> None:
        super().__init__()
        self.heads, self.top_k, self.experts, self.fp8 = heads, top_k, experts, fp8
        self.norm1, self.norm2, self.norm3 = nn.RMSNorm(dim), nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim)  # with a bias: addmm
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts_up = nn.Parameter(torch.randn(experts, ffn, dim) / dim**0.5)
        self.experts_down = nn.Parameter(torch.randn(experts, dim, ffn) / ffn**0.5)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.to(dtype)
        w = self.out.weight.detach().float()  # the output projection as FP8 with rowwise scales
        self.register_buffer("out_scale", w.abs().amax(-1).clamp(min=1e-6)[None, :] / E4M3_MAX)
        self.register_buffer("out_e4m3", (w / self.out_scale.t()).to(torch.float8_e4m3fn))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b * s, d)
        if not self.fp8:
            return self.out(y).view(b, s, d)
        y8, y_scale = quantize_rows(y)
        return torch._scaled_mm(y8, self.out_e4m3.t(), y_scale, self.out_scale, out_dtype=x.dtype).view(b, s, d)

    def moe(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.router(tokens).float(), -1)
        weights, chosen = torch.topk(probs, self.top_k, -1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        flat = chosen.flatten()
        order = flat.argsort(stable=True)
        rows = tokens.repeat_interleave(self.top_k, 0)[order]
        counts = torch.zeros(self.experts, dtype=torch.int64).index_add_(0, flat, torch.ones_like(flat))
        offs = counts.cumsum(0).to(torch.int32)
        h = torch._grouped_mm(rows, self.experts_up.transpose(-2, -1), offs=offs)
        out = torch._grouped_mm(F.silu(h), self.experts_down.transpose(-2, -1), offs=offs)
        out = torch.empty_like(out).index_copy_(0, order, out)
        return (out.view(tokens.shape[0], self.top_k, -1) * weights.unsqueeze(-1)).sum(1).view_as(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        h = self.norm2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        x = x + self.moe(self.norm3(x))
        return torch.softmax(self.head(x).float(), -1)
