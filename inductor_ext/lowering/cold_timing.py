"""CPU autotuning that times each run with the caches flushed, as a decoder runs its GEMMs.

Inductor times a CPU choice by calling it back to back for 100 ms (``Benchmarker.benchmark_cpu``),
so a frozen weight stays in the last-level cache from one call to the next. Inside a model it
does not: a decode step streams every layer's weights, and a real LLM's weights are many times
the cache. Timed warm, micro-kernels that differ in how they stream memory rank differently than
they run (measured on the cpu preset's decoder: the vocabulary GEMM's 16x16 micro-kernel won by
8% warm, and its graph ran 10% slower than with Inductor's pick in the benchmark's interleaved
runs). During an ext compile on the cpu preset with autotuning on, every CPU benchmark writes a
buffer 1.25x the last-level cache before each timed call, the way Triton's ``do_bench`` clears
the GPU's L2, and reports the median of the flushed calls.

Neither regime alone predicts the decoder: a micro-kernel that beat Inductor's pick by 8% warm
(the vocabulary GEMM's 16x16, stop 19) and others that beat it by 40% flushed (8x32 for the
fp32 decode projections, where Inductor's 8x48 won warm) each ran 5-10% slower inside it. So each
timed choice is also timed warm, as Inductor would (``warm_ms``), and ext's choices keep
Inductor's pick unless another micro-kernel beats it in both regimes (ext_choices.py's rules).
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch._inductor.runtime.benchmarking import Benchmarker
from torch._inductor.select_algorithm import AlgorithmSelectorCache

TIMED_CALLS = 15  # medians of flushed calls settle by ~10 on a 2-core VM; each flush costs ~20 ms
_FALLBACK_CACHE_BYTES = 64 << 20  # when sysfs does not say: larger than most server LLCs per socket
WARM_REP_MS = 50  # Inductor's own CPU timing, shortened (it runs 100 ms): medians of us-scale calls

# While inside cold_cpu_benchmarks: the choice Inductor is timing, and each timed choice's warm
# median (ms) by id; emptied on exit (ids of dead choices are reused).
_timing: list[Any] = [None]
_warm: dict[int, float] = {}


def warm_ms(choice: Any) -> float | None:
    """The warm median of ``choice`` if it was timed inside ``cold_cpu_benchmarks``, else None."""
    return _warm.get(id(choice))


@functools.lru_cache(maxsize=None)
def last_level_cache_bytes() -> int:
    """The largest CPU cache of this machine, in bytes (Linux sysfs), else 64 MiB."""
    sizes = []
    for size in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = size.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return max(sizes, default=_FALLBACK_CACHE_BYTES)


def flushed_median_ms(fn: Callable[[], Any], flush: torch.Tensor, calls: int = TIMED_CALLS) -> float:
    """Median milliseconds of ``calls`` calls of ``fn``, each after writing all of ``flush``."""
    fn()  # first-call costs (page faults, lazy initialisation) are not the kernel's
    times = []
    for i in range(calls):
        flush.fill_(i & 0xFF)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


@contextlib.contextmanager
def cold_cpu_benchmarks() -> Iterator[None]:
    """Inductor's CPU benchmarks time flushed calls while inside (and warm ones, ``warm_ms``);
    restored on exit."""
    flush = torch.empty(int(last_level_cache_bytes() * 1.25), dtype=torch.uint8)
    warm, choice_timer = Benchmarker.benchmark_cpu, AlgorithmSelectorCache.benchmark_choice.__func__

    def cold(self: Benchmarker, _callable: Callable[[], Any], warmup: int = 20, rep: int = 100, **_: Any) -> float:
        if _timing[0] is not None:
            _warm[id(_timing[0])] = warm(self, _callable, warmup=warmup, rep=min(rep, WARM_REP_MS))
        return flushed_median_ms(_callable, flush)

    def noting_choice(cls: type, choice: Any, autotune_args: Any) -> float:
        _timing[0] = choice
        try:
            return choice_timer(cls, choice, autotune_args)
        finally:
            _timing[0] = None

    Benchmarker.benchmark_cpu = cold  # type: ignore[method-assign]
    AlgorithmSelectorCache.benchmark_choice = classmethod(noting_choice)  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        Benchmarker.benchmark_cpu = warm  # type: ignore[method-assign]
        AlgorithmSelectorCache.benchmark_choice = classmethod(choice_timer)  # type: ignore[method-assign, assignment]
        _timing[0] = None
        _warm.clear()
