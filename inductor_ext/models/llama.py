"""A Llama-style training model: token embedding, ``layers`` pre-norm blocks (GQA attention with
RoPE, SwiGLU feed-forward), a final RMSNorm and an untied head, returning the cross-entropy loss.

What the FSDP work traces (``inductor-ext comms``' report, ``bench/collective_check.py``,
tests/test_comms.py): ``LlamaConfig()`` has Llama-3.2-1B's widths with 16 layers,
``LlamaConfig.tiny()`` is a model small enough to run on CPU in a test.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["LlamaConfig", "Llama"]


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 128256
    dim: int = 2048
    layers: int = 16
    heads: int = 32
    kv_heads: int = 8
    ffn: int = 8192
    seq: int = 2048

    @staticmethod
    def tiny(layers: int = 2) -> "LlamaConfig":
        return LlamaConfig(vocab=256, dim=64, layers=layers, heads=4, kv_heads=2, ffn=128, seq=32)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return y.to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.c, hd = c, c.dim // c.heads
        self.wq = nn.Linear(c.dim, c.heads * hd, bias=False)
        self.wk = nn.Linear(c.dim, c.kv_heads * hd, bias=False)
        self.wv = nn.Linear(c.dim, c.kv_heads * hd, bias=False)
        self.wo = nn.Linear(c.heads * hd, c.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        c, hd = self.c, self.c.dim // self.c.heads
        q = self.wq(x).view(b, t, c.heads, hd).transpose(1, 2)
        k = self.wk(x).view(b, t, c.kv_heads, hd).transpose(1, 2)
        v = self.wv(x).view(b, t, c.kv_heads, hd).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.ffn, bias=False)
        self.w3 = nn.Linear(c.dim, c.ffn, bias=False)
        self.w2 = nn.Linear(c.ffn, c.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(c.dim)
        self.attention = Attention(c)
        self.ffn_norm = RMSNorm(c.dim)
        self.feed_forward = FeedForward(c)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """Embedding, ``layers`` pre-norm blocks (GQA attention with RoPE, SwiGLU), norm, untied head."""

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c.vocab, c.dim)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim)
        self.output = nn.Linear(c.dim, c.vocab, bias=False)
        hd = c.dim // c.heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        freqs = torch.outer(torch.arange(c.seq, dtype=torch.float32), inv)
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        x = self.tok_embeddings(tokens)
        cos, sin = self.cos[:t], self.sin[:t]
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.output(self.norm(x)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
