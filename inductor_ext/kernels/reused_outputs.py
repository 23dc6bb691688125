"""Memory for a wide op's output that stays mapped after the output dies, for the next one to use.

A vocabulary projection's logits (512 x 50257 fp32: 103 MB) are allocated anew on every call, and
glibc maps a block that large anew each time and unmaps it when it is freed, so every call pays a
page fault per 4 KiB page as it writes: ~30 ms of the ~300 ms GEMM on the 2-core AVX2 EPYC
(``bench/wide_gemm.py``, its ``panels_new_memory`` arm). Here an output's memory is a private
anonymous mapping handed back to a small pool when the output's storage is freed, that is when no
tensor, view or storage refers to it any more (the storage's own deleter says so, not a guess), and
the next output of the same size is written there. An output the caller still holds is never
written. What differs from a new tensor: its storage cannot be resized in place.

Only outputs of ``REUSE_FROM`` bytes or more: glibc keeps a freed block under its largest mmap
threshold (32 MiB on 64-bit) in its heap for the next allocation anyway, and there a missed pool
(a new mapping, faulted in page by page) ran slower than glibc's reused heap (0.88x at 512 x 8192).

At most ``SLOTS`` unused mappings are kept; ``release()`` unmaps them.
"""

from __future__ import annotations

import math
import mmap
import threading
import weakref

import torch
from torch import Tensor

REUSE_FROM = 32 << 20  # bytes: glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit, above which it unmaps a freed block
SLOTS = 2  # unused mappings kept: a loop's wide output, and one more (a second wide op's, a decode step's)

_lock = threading.RLock()  # reentrant: a mapping comes back from a finalizer, which may run anywhere
_unused: list[mmap.mmap] = []  # oldest first


def _give_back(block: mmap.mmap) -> None:
    with _lock:
        _unused.append(block)
        del _unused[:-SLOTS]


def _take(nbytes: int) -> mmap.mmap:
    with _lock:
        for i in range(len(_unused) - 1, -1, -1):
            if len(_unused[i]) == nbytes:
                return _unused.pop(i)
    # private: a forked child writing its outputs never writes the parent's
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)


def empty(like: Tensor, shape: tuple[int, ...]) -> Tensor:
    """An uninitialised contiguous tensor of ``shape`` with ``like``'s dtype: of ``REUSE_FROM`` bytes
    or more on the CPU, in memory an earlier output of the same size left (a new mapping where none
    is free); otherwise ``new_empty``'s."""
    nbytes = math.prod(shape) * like.element_size()
    if like.device.type != "cpu" or nbytes < REUSE_FROM:
        return like.new_empty(shape)
    block = _take(nbytes)
    view = memoryview(block)  # the storage holds this view; it dies with the storage's last reference
    weakref.finalize(view, _give_back, block)
    return torch.frombuffer(view, dtype=like.dtype).view(shape)


def release() -> None:
    """Unmap the unused mappings; one a live output holds comes back to the pool when it dies."""
    with _lock:
        _unused.clear()
