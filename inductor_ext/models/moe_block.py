"""The decoder block of ``inductor-ext demo``: pre-norm causal attention, a GELU MLP and a top-k
routed SwiGLU mixture of experts, each with a residual. Every expert runs densely (einsum over
all experts, weighted by the router), so the graph has no data-dependent shapes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DecoderBlock"]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class MoE(nn.Module):
    """Top-k routed SwiGLU experts; every expert runs densely so the graph has no data-dependent shapes."""

    def __init__(self, dim: int, hidden: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(dim, experts, bias=False)
        self.gate_up = nn.Parameter(torch.randn(experts, dim, 2 * hidden) / dim**0.5)
        self.down = nn.Parameter(torch.randn(experts, hidden, dim) / hidden**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.router(tokens), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        dense = torch.zeros_like(probs).scatter(-1, chosen, weights)  # [tokens, experts]
        gate, up = torch.einsum("td,edh->eth", tokens, self.gate_up).chunk(2, dim=-1)
        out = torch.einsum("eth,ehd->etd", F.silu(gate) * up, self.down)
        return torch.einsum("etd,te->td", out, dense).view_as(x)


class DecoderBlock(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4, hidden: int = 512, experts: int = 4, top_k: int = 2) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.RMSNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.norm3 = nn.RMSNorm(dim)
        self.moe = MoE(dim, hidden, experts, top_k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x + self.moe(self.norm3(x))
