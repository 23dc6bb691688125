"""CPU autotuning that times each run with the caches flushed, as a decoder runs its GEMMs.

Inductor times a CPU choice by calling it back to back for 100 ms (``Benchmarker.benchmark_cpu``),
so a frozen weight stays in the last-level cache from one call to the next. Inside a model it
does not: a decode step streams every layer's weights, and a real LLM's weights are many times
the cache. Timed warm, micro-kernels that differ in how they stream memory rank differently than
they run (measured on the cpu preset's decoder: the vocabulary GEMM's 16x16 micro-kernel won by
8% warm, and its graph ran 10% slower than with Inductor's pick in the benchmark's interleaved
runs). During an ext compile on the cpu preset with autotuning on, every CPU benchmark writes a
buffer ``FLUSH_LLC_MULTIPLE`` times the last-level cache before each timed call, the way Triton's
``do_bench`` clears the GPU's L2, and reports the median of the flushed calls.

Until c8221ce that buffer was made under the compile's FakeTensorMode, so it was fake and its
writes did nothing: every "flushed" time (and the figures quoted below) was a warm one.

Neither regime alone predicts the decoder: a micro-kernel that beat Inductor's pick by 8% warm
(the vocabulary GEMM's 16x16, stop 19) and others that beat it by 40% flushed (8x32 for the
fp32 decode projections, where Inductor's 8x48 won warm) each ran 5-10% slower inside it. So each
timed choice is also timed warm (``warm_ms``: the call again right after each flushed one), and
ext's choices keep Inductor's pick unless another micro-kernel beats it in both regimes
(ext_choices.py's rules).

A timed call during which a thread of this process was switched out (``getrusage``'s
involuntary context switches) measured the OS and is timed again. Issue 29: on a 2-core VM whose cores other
processes kept busy, ATen's 2-thread ``addmm`` 2x96x48 measured 6-48 ms flushed (inside a
cpu-preset compile as much warm) against 4-9 us: the scheduler had put ATen's two OpenMP threads
on one core (/proc showed both on CPU 1 while it was timed) or preempted one, and each call's
parallel region waited a time slice (~12 ms) at its barrier. Every such call counted an
involuntary context switch; those that counted none took 35-170 us flushed, 4-9 us warm. The
cache state and waking ATen's pool asleep after a flush account for tens of microseconds each.
After the flush, a tiny parallel region on memory the timed call never reads wakes ATen's threads
and the dispatcher, as the op before it in a running graph would; the operands stay flushed. A
flushed time its warm one contradicts (``decide.regimes_disagree``) is timed again (``RETIMES``);
a choice with no clean call in a regime is ``disturbed``, and ``autotune/decide.py`` then serves
ATen and compares no time.

Inductor times a choice that writes into an output (ATen's out variants, the templates) into one
buffer reused from call to call, and one that allocates its own (the packed library GEMMs) into
fresh memory each call. Inside the graph an output it returns is fresh memory every call
(``lowering/returned_outputs.py``): for such a problem (``time_as_returned``) the output's pages
are dropped before every timed call (``runtime/fresh_pages.py``), so every choice writes fresh
pages as it will there, and an output a choice allocated itself is freed after the clock stops,
as the caller frees it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch._inductor.runtime.benchmarking import Benchmarker
from torch._inductor.select_algorithm import AlgorithmSelectorCache
from torch._subclasses.fake_tensor import unset_fake_temporarily

from inductor_ext.autotune import decide
from inductor_ext.lowering import parallel_builds
from inductor_ext.runtime import background_builds, fresh_pages

log = logging.getLogger("inductor_ext")

try:
    import resource
except ImportError:  # Windows: no getrusage, so no call is known to have been switched out
    resource = None  # type: ignore[assignment]

TIMED_CALLS = 15  # medians of flushed calls settle by ~10 on a 2-core VM; each flush costs ~20 ms
# A call that takes this long even at its fastest is no short call that waited for a time slice
# (the artifact above: 4-170 us calls measured 6-48 ms), and on a quiet machine it is preempted in
# every run (a 512x768x50257 fp32 mm: 330-420 ms, 10-17 involuntary switches each): its switched
# calls count (they vary by ~25%, not by 1000x). Such a call streams far more than the caches hold,
# so no cache state sets it apart: one timed call per try stands for both regimes, and
# LONG_TIMED_CALLS of them do (a GPT-2 prefill's vocabulary GEMM took 16 calls per candidate, most
# of its first compile; Inductor's own CPU benchmark times about two).
LONG_CALL_S = 0.05
LONG_TIMED_CALLS = 3
ATTEMPTS = 4  # at most this many flushed calls per clean one wanted (a loaded machine switches some)
# A call of 15-35 ms is switched out in 50-75% of its runs on a quiet 2-core machine (the OS ticks
# every 4 ms and the compile has other threads): 15 clean calls per regime took it 60 tries and 6 s
# per candidate, most of a GPT-2 prefill's first compile. Past this many seconds of tries, a
# candidate stops once it has MIN_CLEAN_CALLS clean calls in each regime.
TIME_BUDGET_S = 1.0
MIN_CLEAN_CALLS = 3
RETIMES = 1  # a choice whose flushed time disagrees with its warm one is timed flushed again, once
_GRAIN = 32768  # at::internal::GRAIN_SIZE: the fewest elements per thread ATen's parallel_for gives
_FALLBACK_CACHE_BYTES = 64 << 20  # when sysfs does not say: larger than most server LLCs per socket
# The flush writes this many times the last-level cache sysfs reports (at most FLUSH_MAX_BYTES).
# A decode step streams its whole model between two uses of a weight; on this project's 2-core VMs
# (32 MiB L3 reported) a 1x768x768 cpp.gemm took 16 us warm and, after writes of 1.25x / 2.5x / 5x
# the L3, 42-58 / 74-81 / 91-108 us, against ~100 us per call inside a 2-layer Llama's decode step.
FLUSH_LLC_MULTIPLE = 4
# A VM reports its host's whole L3: a 2-core VM here said 300 MiB (2026-12-06) while a read loop
# slowed to DRAM speed past 48 MiB (1 thread: 25-27 GB/s up to 32 MiB, 13-15 GB/s from 64 MiB on).
# 4x that report was a 1 GiB write, 50-80 ms, before every timed call. 256 MiB is what Triton's
# do_bench writes to clear a GPU's L2, and five times the cache this VM's cores got.
FLUSH_MAX_BYTES = 256 << 20

# While inside cold_cpu_benchmarks: the choice Inductor is timing, and each timed choice's warm
# median (ms) by id; emptied on exit (ids of dead choices are reused).
_timing: list[Any] = [None]
_warm: dict[int, float] = {}
_disturbed: set[int] = set()  # ids of choices with a regime in which every timed call was switched out
# While timing a choice of a problem whose output the graph returns: its output tensors to
# drop (None for any other problem)
_returned_outputs: list[tuple[torch.Tensor, ...] | None] = [None]
_RETURNED = "_inductor_ext_output_returned"  # set on each choice of such a problem


def time_as_returned(choices: list[Any]) -> None:
    """Time ``choices`` as serving an output the graph returns: into fresh pages every call."""
    for choice in choices:
        setattr(choice, _RETURNED, True)


# A decode-shaped GEMM (a few rows against a frozen weight) is timed as a decode loop runs it: one
# call after another over distinct copies of its inputs, together FLUSH_MAX_BYTES or so, so every
# call streams its weight from memory as each layer does after the others' (``time_streamed``).
_STREAMED = "_inductor_ext_streamed"
# Each copy is one benchmark call to collect (a C++ GEMM's packs its weight) and one call per round:
# 512 copies of a test's tiny weights made compiles on a loaded machine take minutes. 64 copies of a
# decode projection (2.4 MB fp32 at 768x768) are 150 MB, several times the cache a core gets here.
STREAMED_MAX_COPIES = 64
STREAMED_BUDGET_S = 2.0  # rounds stop past this (their median taken), clean or not
# While collecting the calls of a streamed choice (one per copy of its inputs): each benchmark
# callable Inductor hands the benchmarker lands here instead of being timed.
_collecting: list[list[Callable[[], Any]] | None] = [None]


def time_streamed(choices: list[Any]) -> None:
    """Time ``choices`` as a decode loop runs them: each call on other copies of its inputs than
    the call before, the copies together larger than the caches (``streamed_timing``)."""
    for choice in choices:
        setattr(choice, _STREAMED, True)


def _copy(t: torch.Tensor) -> torch.Tensor:
    """``t`` on a storage of its own holding the same bytes (a packed layout, strides and offset kept)."""
    return torch.empty(0, dtype=t.dtype).set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())


def input_copies(inputs: tuple[Any, ...], budget: int) -> list[tuple[Any, ...]]:
    """``inputs`` and copies of them (fresh storage each), as many sets as fill about ``budget``
    bytes (at least two, at most ``STREAMED_MAX_COPIES``), or [] where an input is no plain CPU
    tensor. Inputs of ``budget`` bytes or more are not copied: each call streams them already (a
    large model's vocabulary weight would otherwise be copied whole)."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    if not tensors or any(t.layout != torch.strided or t.device.type != "cpu" or t.is_mkldnn for t in tensors):
        return []
    size = sum(t.untyped_storage().nbytes() for t in tensors)
    count = 1 if size >= budget else max(2, min(STREAMED_MAX_COPIES, -(-budget // max(size, 1))))
    return [inputs] + [tuple(_copy(t) if isinstance(t, torch.Tensor) else t for t in inputs) for _ in range(count - 1)]


@contextlib.contextmanager
def _kept_alive(choice: Any) -> Iterator[list[Any]]:
    """Inside: what the data processors around ``choice`` make for each benchmark call (the C++
    GEMM template packs the weight it is timed with: ``DataProcessorChoiceCallerWrapper``) is
    also kept in the list this yields. A C++ benchmark's callable holds only the addresses of its
    tensors, so a call collected now and timed later would read freed memory without it."""
    made: list[Any] = []
    wrappers = [(wrapper, wrapper._preprocessor) for wrapper in parallel_builds.unwrapped(choice)[0]]

    def keeping(preprocess: Callable[..., Any]) -> Callable[..., Any]:
        def preprocessed(args: Any, out: Any) -> Any:
            made.append(preprocess(args, out))
            return made[-1]
        return preprocessed

    for wrapper, preprocess in wrappers:
        wrapper._preprocessor = keeping(preprocess)
    try:
        yield made
    finally:
        for wrapper, preprocess in wrappers:
            wrapper._preprocessor = preprocess


def streamed_timing(calls: list[Callable[[], Any]], rounds: int = TIMED_CALLS) -> Timing:
    """Medians (ms per call) of ``rounds`` rounds, each calling every one of ``calls`` once in
    turn (each on its own copy of the inputs: a round streams them all, as a decode step streams
    its layers' weights); warm, of the first call again right after itself. A round during which
    a thread was switched out measured the OS and is not counted while clean ones are found."""
    for call in calls:
        call()  # first-call costs (page faults, a packed copy made on first use) are not the kernel's
    streamed: tuple[list[float], list[float]] = ([], [])
    warm: tuple[list[float], list[float]] = ([], [])
    start = time.perf_counter()
    for _ in range(rounds * ATTEMPTS):
        wake_threads()
        switches = context_switches()
        began = time.perf_counter()
        for call in calls:
            call()
        elapsed = (time.perf_counter() - began) / len(calls)
        streamed[context_switches() != switches].append(elapsed)
        calls[0]()
        wake_threads()
        warm_elapsed, ok = timed_call(calls[0])
        warm[not ok].append(warm_elapsed)
        if _enough(streamed, warm, rounds, start) or time.perf_counter() - start > STREAMED_BUDGET_S:
            break
    return _medians(streamed, warm)


def _outputs_to_drop(autotune_args: Any) -> tuple[torch.Tensor, ...]:
    """The output tensors Inductor times choices into (one per kind of choice), each only if
    its bytes overlap none of the inputs' (dropping pages zeroes them)."""
    found: list[torch.Tensor] = []
    inputs: list[torch.Tensor] = []
    for extern in (False, True):
        ins, out = autotune_args.get_benchmark_tensors(extern).unpack()
        inputs += [t for t in ins if isinstance(t, torch.Tensor)]
        if isinstance(out, torch.Tensor) and all(out is not t for t in found):
            found.append(out)
    spans = [fresh_pages.span(t) for t in inputs]

    def apart(out: torch.Tensor) -> bool:
        first, end = fresh_pages.span(out)
        return all(their_end <= first or end <= their_first for their_first, their_end in spans)

    return tuple(t for t in found if apart(t))


def _drop_outputs() -> None:
    for t in _returned_outputs[0] or ():
        fresh_pages.drop(t)


def _note(choice: Any, warm_ms: float, clean: bool) -> None:
    """What a benchmark of ``choice`` leaves besides its flushed time: its warm median, and whether
    a regime had no clean call (``disturbed``)."""
    _warm[id(choice)] = warm_ms
    if not clean:
        _disturbed.add(id(choice))


def warm_ms(choice: Any) -> float | None:
    """The warm median of ``choice`` if it was timed inside ``cold_cpu_benchmarks``, else None."""
    return _warm.get(id(choice))


def disturbed(choice: Any) -> bool:
    """Whether every call of ``choice`` timed flushed, or every one timed warm, inside
    ``cold_cpu_benchmarks`` had a thread switched out (its times measured the OS)."""
    return id(choice) in _disturbed


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


def context_switches() -> int:
    """Involuntary context switches of all of this process's threads so far (the OS took a thread
    off its core), 0 where the OS does not count them. Voluntary ones are left out: ATen's OpenMP
    threads go to sleep when a parallel region ends, so a multi-threaded GEMM of a few ms counted
    one in every call (MKL's 2-thread vocabulary GEMM: "switched" in all of them); a thread that
    waits at a barrier for a preempted one is seen through the preempted one's count."""
    if resource is None:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


@functools.lru_cache(maxsize=4)
def _wake_buffer(threads: int) -> torch.Tensor:
    return torch.empty(_GRAIN * threads, dtype=torch.uint8)


def wake_threads() -> None:
    """A parallel region on every ATen intra-op thread (one grain each) over a buffer of its own."""
    _wake_buffer(torch.get_num_threads()).fill_(0)


def timed_call(fn: Callable[[], Any]) -> tuple[float, bool]:
    """Seconds one call of ``fn`` took, and whether no thread of this process was switched out
    meanwhile (a switched call timed the scheduler too). What ``fn`` returns is freed inside the
    timed call, as the graph frees an intermediate, or after it where the graph returns it."""
    switches = context_switches()
    start = time.perf_counter()
    result = fn()
    if _returned_outputs[0] is None:
        result = None  # noqa: F841  (freed now, on the clock)
    elapsed = time.perf_counter() - start
    return elapsed, context_switches() == switches


@dataclasses.dataclass(frozen=True)
class Timing:
    """One choice's medians (ms) flushed and warm, and whether each is of calls no thread was
    switched out in (else of all of them: the OS set it)."""

    flushed_ms: float
    warm_ms: float
    flushed_clean: bool
    warm_clean: bool


def timing(fn: Callable[[], Any], flush: torch.Tensor, calls: int = TIMED_CALLS) -> Timing:
    """Medians of ``calls`` clean calls of ``fn`` (``timed_call``) in at most ``calls * ATTEMPTS``
    tries, each after writing all of ``flush`` and waking ATen's threads; and warm, of the same
    call again right after each (an untimed call and the wake between: operands and code cached,
    as Inductor's back-to-back timing has them). Paired so: timed back to back for 0.5 s inside a
    compile, a 2-thread GEMM whose threads the scheduler had put on one core waited ~12 ms in
    every call, and without the wake every warm call of a template did (18 ms) where its flushed
    calls were clean. A call long at its fastest (``LONG_CALL_S``) is timed once per try, for both;
    past ``TIME_BUDGET_S``, ``MIN_CLEAN_CALLS`` clean calls per regime are enough."""
    fn()  # first-call costs (page faults, lazy initialisation) are not the kernel's
    flushed: tuple[list[float], list[float]] = ([], [])  # (clean, switched) seconds
    warm: tuple[list[float], list[float]] = ([], [])
    long_calls: list[float] = []  # while every call is long (LONG_CALL_S); left out once one is not
    fastest = float("inf")
    start = time.perf_counter()
    for i in range(calls * ATTEMPTS):
        flush.fill_(i & 0xFF)
        _drop_outputs()
        wake_threads()
        elapsed, ok = timed_call(fn)
        fastest = min(fastest, elapsed)
        if fastest >= LONG_CALL_S:  # every call so far is long: this one counts in both regimes
            long_calls.append(elapsed)
            if len(long_calls) >= min(calls, LONG_TIMED_CALLS):
                ms = statistics.median(long_calls) * 1e3
                return Timing(ms, ms, True, True)
            continue
        flushed[not ok].append(elapsed)
        fn()
        _drop_outputs()
        wake_threads()
        warm_elapsed, ok = timed_call(fn)
        warm[not ok].append(warm_elapsed)
        if _enough(flushed, warm, calls, start):
            break
    return _medians(flushed, warm)


Calls = tuple[list[float], list[float]]  # seconds of one regime's calls: (clean, switched out)


def _enough(first: Calls, warm: Calls, wanted: int, start: float) -> bool:
    """Whether both regimes have ``wanted`` clean calls, or ``MIN_CLEAN_CALLS`` once the tries
    begun at ``start`` took ``TIME_BUDGET_S``."""
    enough = wanted if time.perf_counter() - start < TIME_BUDGET_S else min(wanted, MIN_CLEAN_CALLS)
    return len(first[0]) >= enough and len(warm[0]) >= enough


def _medians(first: Calls, warm: Calls) -> Timing:
    """Each regime's median in ms, of its clean calls (of all of them where none was clean)."""
    return Timing(statistics.median(first[0] or first[1]) * 1e3, statistics.median(warm[0] or warm[1]) * 1e3,
                  bool(first[0]), bool(warm[0]))


def flushed_median_ms(fn: Callable[[], Any], flush: torch.Tensor, calls: int = TIMED_CALLS) -> float:
    """``timing``'s flushed median alone."""
    return timing(fn, flush, calls).flushed_ms


@contextlib.contextmanager
def cold_cpu_benchmarks() -> Iterator[None]:
    """Inductor's CPU benchmarks time flushed calls while inside (and warm ones, ``warm_ms``);
    restored on exit."""
    flushes: list[torch.Tensor] = []  # made at the first benchmark: a compile that times nothing holds none
    inductors, choice_timer = Benchmarker.benchmark_cpu, AlgorithmSelectorCache.benchmark_choice.__func__

    def cold(self: Benchmarker, _callable: Callable[[], Any], warmup: int = 20, rep: int = 100, **_: Any) -> float:
        if _collecting[0] is not None:  # a streamed choice's call on one copy of its inputs
            _collecting[0].append(_callable)
            return 0.0
        if not flushes:
            # This context is entered while the compile traces under FakeTensorMode: a buffer made
            # there was fake, its fill_ wrote nothing, and every "flushed" time was a warm one.
            with unset_fake_temporarily():
                size = min(last_level_cache_bytes() * FLUSH_LLC_MULTIPLE, FLUSH_MAX_BYTES)
                flushes.append(torch.empty(size, dtype=torch.uint8))
        flush = flushes[0]
        timed = timing(_callable, flush)
        choice = _timing[0]
        if choice is None:
            return timed.flushed_ms
        flushed, clean = timed.flushed_ms, timed.flushed_clean
        for _ in range(RETIMES):  # the OS, not the caches, set this flushed time: once more
            if clean and not decide.regimes_disagree(flushed, timed.warm_ms):
                break
            again = timing(_callable, flush)
            if again.flushed_clean == clean:
                flushed = min(flushed, again.flushed_ms)
            elif again.flushed_clean:
                flushed, clean = again.flushed_ms, True
        _note(choice, timed.warm_ms, clean and timed.warm_clean)
        return flushed

    def streamed(cls: type, choice: Any, autotune_args: Any) -> float | None:
        """``choice`` timed as a decode loop runs it (``streamed_timing``), or None where its
        inputs cannot be copied (then it is timed flushed)."""
        inputs, output = autotune_args.get_benchmark_tensors(cls._uses_layout_preserving_inputs(choice)).unpack()
        sets = input_copies(tuple(inputs), FLUSH_MAX_BYTES)
        if not sets:
            return None
        calls: list[Callable[[], Any]] = []
        _collecting[0] = calls
        try:
            with _kept_alive(choice) as made:
                for copies in sets:
                    if choice.benchmark(*copies, out=output) == float("inf"):
                        return float("inf")  # it failed, once (candidate_guard dropped it, saying why)
        finally:
            _collecting[0] = None
        if len(calls) != len(sets):  # not timed through the benchmarker once per call: as before
            return None
        timed = streamed_timing(calls)
        del made  # what the calls read, alive until they are timed
        _note(choice, timed.warm_ms, timed.flushed_clean and timed.warm_clean)
        return timed.flushed_ms

    def noting_choice(cls: type, choice: Any, autotune_args: Any) -> float:
        background_builds.wait()  # a g++ started beside the compile would share the CPU with the timing
        if getattr(choice, _STREAMED, False):
            try:
                ms = streamed(cls, choice, autotune_args)
            except Exception as e:  # noqa: BLE001  (timed flushed instead, where a failure is handled)
                log.debug("ext: timing %s streamed failed (%s); timed flushed", getattr(choice, "name", choice), e)
                ms = None
            if ms is not None:
                return ms
        _timing[0] = choice
        _returned_outputs[0] = _outputs_to_drop(autotune_args) if getattr(choice, _RETURNED, False) else None
        try:
            return choice_timer(cls, choice, autotune_args)
        finally:
            _timing[0] = None
            _returned_outputs[0] = None

    Benchmarker.benchmark_cpu = cold  # type: ignore[method-assign]
    AlgorithmSelectorCache.benchmark_choice = classmethod(noting_choice)  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        Benchmarker.benchmark_cpu = inductors  # type: ignore[method-assign]
        AlgorithmSelectorCache.benchmark_choice = classmethod(choice_timer)  # type: ignore[method-assign, assignment]
        _timing[0] = None
        _returned_outputs[0] = None
        _warm.clear()
        _disturbed.clear()
