"""Give a CPU tensor's memory back to the OS, so that the next write faults it in afresh.

A large allocation (glibc maps anything over 32 MiB on its own) is untouched memory: the kernel
that first writes it takes a page fault per 4 KiB page (about 15 ms for 51 MB on this project's
VMs). ``madvise(MADV_DONTNEED)`` on a private anonymous mapping drops its pages the same way, so a
kernel timed into an output buffer dropped before each call pays what it pays writing a fresh
one, without the buffer being reallocated. Linux only; elsewhere nothing is dropped.

Smaller allocations are often fresh too: allocated, written and freed six times in a row here
(torch 2.15, glibc), 128 KiB-8 MiB tensors faulted every page in 5-6 of the 6, 24-31 MiB ones in
1-3 of them, 33 MiB and larger in all of them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import sys

import torch


@functools.cache
def _madvise() -> object | None:
    """libc's madvise, or None where pages cannot be dropped (not Linux, no libc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def supported() -> bool:
    """Whether this OS lets ``drop`` give pages back."""
    return _madvise() is not None


def span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes ``t`` can touch: [first, end) addresses of its elements."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def drop(t: torch.Tensor) -> int:
    """Drop the whole pages inside ``t``'s span (its contents there become zeros); the bytes dropped.

    Only what lies wholly inside the span: the partial pages at its ends may hold another
    allocation's bytes. Nothing on a non-CPU tensor or where ``supported()`` is False."""
    madvise = _madvise()
    if madvise is None or t.device.type != "cpu":
        return 0
    page = mmap.PAGESIZE
    first, end = span(t)
    start, stop = -(-first // page) * page, end // page * page
    if stop <= start:
        return 0
    if madvise(start, stop - start, mmap.MADV_DONTNEED) != 0:  # the mmap module has it wherever madvise is
        return 0  # e.g. memory not mapped privately: left as it is, the timing as before
    return stop - start
