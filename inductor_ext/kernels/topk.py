"""Reference top-k in plain torch, with the tie rule ext's top-k kernels keep.

``torch.topk`` does not promise which of several equal elements it returns. ext's kernels (and
this reference) do: along the last dimension, the k largest (or smallest) values, sorted, and
among equal values the lowest index first. Equal means what ``==`` says (``-0.0 == 0.0``);
NaN counts as larger than every number (``torch.topk``'s and ``torch.sort``'s order), so
``largest=True`` returns NaNs first and ``largest=False`` returns them last.
"""

from __future__ import annotations

import torch
from torch import Tensor


def topk_reference(x: Tensor, k: int, largest: bool = True) -> tuple[Tensor, Tensor]:
    """``(values, indices)`` of the top ``k`` along the last dimension, ties to the lowest index.

    A stable sort keeps equal elements in index order whichever direction it sorts, and orders
    NaN above every number and ``-0.0`` equal to ``0.0``: exactly the rule above."""
    values, indices = torch.sort(x, dim=-1, descending=largest, stable=True)
    return values[..., :k].contiguous(), indices[..., :k].contiguous()
