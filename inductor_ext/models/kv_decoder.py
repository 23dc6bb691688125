"""A small Llama-style decoder with a KV cache, run for inference: ``Decoder(shape)(tokens, pos)``
appends ``tokens`` [B, T] at position ``pos`` of each layer's cache and returns the next token's
logits. RoPE in fp32, GQA attention through SDPA over the cache, SwiGLU with gate and up fused,
RMSNorm. ``Shape()`` has llama2.c's stories15M widths; ``SMOKE`` is tiny.

What bench/cpu_decode.py times against Inductor and eager.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Shape", "SMOKE", "Decoder", "make_model"]


@dataclass(frozen=True)
class Shape:
    dim: int = 288
    layers: int = 6
    heads: int = 6
    kv_heads: int = 6
    hidden: int = 768
    vocab: int = 32000
    max_seq: int = 1024
    max_batch: int = 8


SMOKE = Shape(dim=64, layers=1, heads=2, kv_heads=2, hidden=128, vocab=256, max_seq=64, max_batch=2)


def rope_table(shape: Shape) -> torch.Tensor:
    head = shape.dim // shape.heads
    inv = 1.0 / (10000 ** (torch.arange(0, head, 2).float() / head))
    angles = torch.outer(torch.arange(shape.max_seq).float(), inv)
    return torch.stack([angles.cos(), angles.sin()], -1)  # [max_seq, head/2, 2]


def apply_rope(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, D] rotated by table [T, D/2, 2], in fp32."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = table[None, :, None, :, 0], table[None, :, None, :, 1]
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack([even * cos - odd * sin, odd * cos + even * sin], -1).flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.shape, head = shape, shape.dim // shape.heads
        self.wqkv = nn.Linear(shape.dim, (shape.heads + 2 * shape.kv_heads) * head, bias=False)
        self.wo = nn.Linear(shape.heads * head, shape.dim, bias=False)
        cache = (shape.max_batch, shape.kv_heads, shape.max_seq, head)
        self.register_buffer("k_cache", torch.zeros(cache), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache), persistent=False)

    def forward(self, x: torch.Tensor, table: torch.Tensor, pos: int) -> torch.Tensor:
        b, t, _ = x.shape
        s, head = self.shape, self.shape.dim // self.shape.heads
        q, k, v = self.wqkv(x).split([s.heads * head, s.kv_heads * head, s.kv_heads * head], -1)
        q = apply_rope(q.view(b, t, s.heads, head), table)
        k = apply_rope(k.view(b, t, s.kv_heads, head), table)
        self.k_cache[:b, :, pos:pos + t] = k.transpose(1, 2)
        self.v_cache[:b, :, pos:pos + t] = v.view(b, t, s.kv_heads, head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), self.k_cache[:b, :, :pos + t],
                                           self.v_cache[:b, :, :pos + t], is_causal=t > 1,
                                           enable_gqa=s.heads != s.kv_heads)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.attn_norm, self.ffn_norm = nn.RMSNorm(shape.dim, eps=1e-5), nn.RMSNorm(shape.dim, eps=1e-5)
        self.attn = Attention(shape)
        self.w13 = nn.Linear(shape.dim, 2 * shape.hidden, bias=False)  # gate and up, fused
        self.w2 = nn.Linear(shape.hidden, shape.dim, bias=False)

    def forward(self, x: torch.Tensor, table: torch.Tensor, pos: int) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), table, pos)
        gate, up = self.w13(self.ffn_norm(x)).chunk(2, -1)
        return x + self.w2(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.embed = nn.Embedding(shape.vocab, shape.dim)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.RMSNorm(shape.dim, eps=1e-5)
        self.lm_head = nn.Linear(shape.dim, shape.vocab, bias=False)
        self.register_buffer("rope", rope_table(shape), persistent=False)

    def forward(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        x = self.embed(tokens)
        table = self.rope[pos:pos + tokens.shape[1]]
        for block in self.blocks:
            x = block(x, table, pos)
        return self.lm_head(self.norm(x[:, -1:]))  # the next token's logits


def make_model(shape: Shape, dtype: torch.dtype) -> Decoder:
    torch.manual_seed(0)
    model = Decoder(shape).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.02)  # init as LLMs are: keeps bf16 logits meaningful
    return model.to(dtype)
