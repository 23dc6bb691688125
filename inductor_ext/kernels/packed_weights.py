"""Packed copies of constant weights for the ATen-side packed GEMMs (MKL, oneDNN), kept only while
they are the same weight.

A copy is keyed honestly: by the weight's storage (a weak key, so the copy goes with the weight),
its offset, sizes, strides, version counter (any in-place write repacks) and the batch size it
was packed for. A weight without a version counter (an inference tensor) is never cached: the
caller then computes a plain mm. A cache may cap the bytes it keeps: a copy past the cap serves
the call that packed it and is not kept. ``bias_row`` reads the bias a packed linear adds out of an
``addmm`` input.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from torch import Tensor

# (w_t, batch) -> the packed form of w_t (K x N) for batch rows
Pack = Callable[[Tensor, int], Tensor]


class PackedWeights:
    """Packed forms of weights by storage, as one library packs them."""

    def __init__(self, pack: Pack, keep_bytes: Callable[[], int] | None = None) -> None:
        """``keep_bytes``: how many bytes of packed copies may be kept in all (no limit without);
        a copy past it is packed for the call that asked and not kept."""
        self._pack = pack
        self._keep_bytes = keep_bytes
        self._lock = threading.Lock()
        self._by_storage: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Tensor]] = weakref.WeakKeyDictionary()

    def get(self, w_t: Tensor, batch: int) -> Tensor | None:
        """The packed form of ``w_t`` for ``batch`` rows, packed on first use; None when it
        cannot be cached honestly."""
        if w_t.is_inference():
            return None  # no version counter: an in-place write could not be seen
        key = (w_t.storage_offset(), tuple(w_t.shape), w_t.stride(), w_t._version, batch)
        storage = w_t.untyped_storage()
        with self._lock:
            entries = self._by_storage.setdefault(storage, {})
            found = entries.get(key)
            if found is None:
                # An older version of this weight is stale for good: drop it with the new entry.
                for old in [k for k in entries if k[:3] == key[:3] and k[3] != key[3]]:
                    del entries[old]
                found = self._pack(w_t, batch)
                if self._keep_bytes is None or self.nbytes() + found.nbytes <= self._keep_bytes():
                    entries[key] = found
            return found

    def nbytes(self) -> int:
        """Bytes of the packed copies kept."""
        return sum(t.nbytes for entries in list(self._by_storage.values()) for t in entries.values())

    def __len__(self) -> int:  # storages with packed copies
        return len(self._by_storage)

    def __contains__(self, storage: Any) -> bool:
        return storage in self._by_storage

    def __getitem__(self, storage: Any) -> dict[tuple[Any, ...], Tensor]:
        return self._by_storage[storage]


def bias_row(bias: Tensor, cols: int) -> Tensor | None:
    """The one row a linear's bias repeats, as a 1-D tensor of ``cols``; None for any other
    addmm input (a full matrix, a column broadcast): the packed linears add a per-column bias only."""
    if bias.dim() == 1:
        return bias if bias.shape[0] == cols else None
    if bias.dim() == 2 and bias.shape[-1] == cols and (bias.shape[0] == 1 or bias.stride(0) == 0):
        return bias[0]
    return None
