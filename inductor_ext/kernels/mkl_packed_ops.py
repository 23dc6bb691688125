"""``torch.ops.inductor_ext.mkl_packed_mm``: ``x @ w_t`` through MKL's packed sgemm, the weight
packed on first use and kept while it is unchanged.

Inductor reaches MKL's packed GEMM only through its weight-prepack pass (``cpp.weight_prepack``
under freezing), which rewrites fp32 linears to ``mkl._mkl_linear`` before any lowering could
offer ext's templates. ext keeps that pass off and offers this op as one more ATen-side choice
for a frozen fp32 weight, so autotuning picks among ATen's mm, MKL packed and ext's templates.

The packed copy is keyed honestly: by the weight's storage (a weak key, so it goes with the
weight), its offset, sizes, strides, version counter (any in-place write repacks) and the batch
size MKL packed for. A weight without a version counter (an inference tensor) is never cached:
the op then computes ATen's mm. The result is ``torch.mm(x, w_t)`` up to fp32 rounding.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
from torch import Tensor

_lock = threading.Lock()
_packed: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Tensor]] = weakref.WeakKeyDictionary()


def available() -> bool:
    """Whether this torch build has MKL's packed GEMM (x86 builds of PyTorch do)."""
    return bool(torch._C.has_mkl)


def _key(w_t: Tensor, batch: int) -> tuple[Any, ...] | None:
    if w_t.is_inference():
        return None  # no version counter: an in-place write could not be seen
    return (w_t.storage_offset(), tuple(w_t.shape), w_t.stride(), w_t._version, batch)


def packed_weight(w_t: Tensor, batch: int) -> Tensor | None:
    """MKL's packed form of ``w_t`` (K x N) for ``batch`` rows, cached; None when it cannot be
    cached honestly."""
    key = _key(w_t, batch)
    if key is None:
        return None
    storage = w_t.untyped_storage()
    with _lock:
        entries = _packed.setdefault(storage, {})
        found = entries.get(key)
        if found is None:
            # An older version of this weight is stale for good: drop it with the new entry.
            for old in [k for k in entries if k[:3] == key[:3] and k[3] != key[3]]:
                del entries[old]
            found = entries[key] = torch.ops.mkl._mkl_reorder_linear_weight(w_t.t().contiguous(), batch)
        return found


@torch.library.custom_op("inductor_ext::mkl_packed_mm", mutates_args=())
def mkl_packed_mm(x: Tensor, w_t: Tensor) -> Tensor:
    if x.dtype != torch.float32 or w_t.dtype != torch.float32 or x.device.type != "cpu" or not available():
        return torch.mm(x, w_t)
    batch = x.shape[0]
    packed = packed_weight(w_t, batch)
    if packed is None:
        return torch.mm(x, w_t)
    # MKL reads x with a leading dimension of K: it must be row-major contiguous.
    return torch.ops.mkl._mkl_linear(x.contiguous(), packed, w_t.t(), None, batch)


@mkl_packed_mm.register_fake
def _(x: Tensor, w_t: Tensor) -> Tensor:
    return x.new_empty((x.shape[0], w_t.shape[1]))
