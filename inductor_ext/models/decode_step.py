"""A decoder whose forward is one decode step over a KV cache: ``Decoder(...)(tokens, pos)`` embeds
``tokens`` [B], writes their keys and values at position ``pos`` of each layer's cache and returns
the softmax over the vocabulary. Weights are plain parameters used through ``F.linear``: RMSNorm,
GQA attention, a SwiGLU MLP, or with ``experts`` a top-k router whose experts run through
``torch._grouped_mm``; the LM head is tied to the embedding.

What bench/mps_decode.py times on a Mac (and smoke-runs on CPU).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["Decoder"]


class Decoder(torch.nn.Module):
    """A decoder whose forward is one decode step: tokens [B] at position ``pos`` of a KV cache."""

    def __init__(self, layers: int, dim: int, heads: int, kv_heads: int, ffn: int, vocab: int, experts: int,
                 top_k: int, cache: int, batch: int, dtype: torch.dtype):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.top_k = heads, kv_heads, dim // heads, top_k
        p = lambda *shape: torch.nn.Parameter(torch.randn(*shape, dtype=dtype) * shape[-1] ** -0.5)  # noqa: E731
        self.embed = p(vocab, dim)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            layer = torch.nn.Module()
            layer.qkv = p((heads + 2 * kv_heads) * self.head_dim, dim)
            layer.o = p(dim, dim)
            layer.norm1, layer.norm2 = (torch.nn.Parameter(torch.ones(dim, dtype=dtype)) for _ in range(2))
            if experts:
                layer.router = p(experts, dim)
                layer.gate_up = p(experts, 2 * ffn, dim)
                layer.down = p(experts, dim, ffn)
            else:
                layer.gate_up = p(2 * ffn, dim)
                layer.down = p(dim, ffn)
            layer.register_buffer("k_cache", torch.randn(batch, kv_heads, cache, self.head_dim, dtype=dtype))
            layer.register_buffer("v_cache", torch.randn(batch, kv_heads, cache, self.head_dim, dtype=dtype))
            self.layers.append(layer)
        self.norm = torch.nn.Parameter(torch.ones(dim, dtype=dtype))
        self.experts = experts

    def mlp(self, layer: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
        if not self.experts:
            gate, up = F.linear(h, layer.gate_up).chunk(2, -1)
            return F.linear(F.silu(gate) * up, layer.down)
        weights, chosen = torch.topk(torch.softmax(F.linear(h, layer.router).float(), -1), self.top_k)
        weights = (weights / weights.sum(-1, keepdim=True)).to(h.dtype)
        flat = chosen.flatten()
        order = flat.argsort()
        rows = h.repeat_interleave(self.top_k, 0)[order]
        # counts per expert with a static shape (bincount's depends on the data: a graph break)
        counts = torch.zeros(self.experts, dtype=torch.int64, device=h.device).index_add_(0, flat, torch.ones_like(flat))
        offs = counts.cumsum(0).to(torch.int32)
        gate, up = torch._grouped_mm(rows, layer.gate_up.transpose(-2, -1), offs=offs).chunk(2, -1)
        out = torch._grouped_mm(F.silu(gate) * up, layer.down.transpose(-2, -1), offs=offs)
        out = torch.empty_like(out).index_copy_(0, order, out)
        return (out.view(h.shape[0], self.top_k, -1) * weights.unsqueeze(-1)).sum(1)

    def forward(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        h = self.embed[tokens]
        b = h.shape[0]
        for layer in self.layers:
            x = F.rms_norm(h, (h.shape[-1],), layer.norm1)
            q, k, v = F.linear(x, layer.qkv).split(
                [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], -1)
            layer.k_cache[:, :, pos] = k.view(b, self.kv_heads, self.head_dim)
            layer.v_cache[:, :, pos] = v.view(b, self.kv_heads, self.head_dim)
            att = F.scaled_dot_product_attention(q.view(b, self.heads, 1, self.head_dim), layer.k_cache[:, :, :pos + 1],
                                                 layer.v_cache[:, :, :pos + 1], enable_gqa=True)
            h = h + F.linear(att.reshape(b, -1), layer.o)
            h = h + self.mlp(layer, F.rms_norm(h, (h.shape[-1],), layer.norm2))
        logits = F.linear(F.rms_norm(h, (h.shape[-1],), self.norm), self.embed)
        return torch.softmax(logits.float(), -1)
