"""A pre-LayerNorm transformer decoder block: causal self-attention (SDPA) and a GELU MLP, each
with a residual; biases everywhere. One of the models tests/test_backend_models.py compiles with
backend="ext" and checks against eager (forward, no_grad, a training step).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

__all__ = ["TransformerBlock"]


class TransformerBlock(nn.Module):
    """Pre-LayerNorm block: causal self-attention (SDPA) and a GELU MLP, each with a residual."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))
