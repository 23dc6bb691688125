"""Packed copies of constant weights for the ATen-side packed GEMMs (MKL, oneDNN), kept only while
they are the same weight.

A copy is keyed honestly: by the weight's storage (a weak key, so the copy goes with the weight),
its offset, sizes, strides, version counter (any in-place write repacks) and the batch size it
was packed for. A weight without a version counter (an inference tensor) is never cached: the
caller then computes a plain mm.
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

    def __init__(self, pack: Pack) -> None:
        self._pack = pack
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
                found = entries[key] = self._pack(w_t, batch)
            return found

    def __len__(self) -> int:  # storages with packed copies
        return len(self._by_storage)

    def __contains__(self, storage: Any) -> bool:
        return storage in self._by_storage

    def __getitem__(self, storage: Any) -> dict[tuple[Any, ...], Tensor]:
        return self._by_storage[storage]
