"""CPU autotuning times flushed calls (lowering/cold_timing.py): what runs, and that it is undone."""

import pytest
import torch
from torch._inductor.runtime.benchmarking import Benchmarker, benchmarker

from inductor_ext.lowering import cold_timing


def test_last_level_cache_is_the_largest_cache_sysfs_names():
    size = cold_timing.last_level_cache_bytes()
    assert size >= 1 << 20  # every x86/arm server CPU has at least 1 MiB of it


class Counting:
    def __init__(self, flush):
        self.flush, self.calls, self.seen = flush, 0, []

    def __call__(self):
        self.calls += 1
        self.seen.append(int(self.flush[0]))  # what the flush wrote just before this call


def test_each_timed_call_follows_a_full_flush():
    flush = torch.zeros(4096, dtype=torch.uint8)
    fn = Counting(flush)
    ms = cold_timing.flushed_median_ms(fn, flush, calls=5)
    assert fn.calls == 6  # one untimed first call, then the timed ones
    assert fn.seen == [0, 0, 1, 2, 3, 4]  # each timed call right after its own flush
    assert int(flush[-1]) == 4  # the whole buffer, not its start
    assert ms >= 0


def test_inductors_cpu_benchmarks_time_flushed_calls_only_inside(monkeypatch):
    monkeypatch.setattr(cold_timing, "last_level_cache_bytes", lambda: 1 << 16)
    warm = Benchmarker.benchmark_cpu
    calls = []
    with cold_timing.cold_cpu_benchmarks():
        benchmarker.benchmark_cpu(lambda: calls.append(1))
        assert len(calls) == cold_timing.TIMED_CALLS + 1
    assert Benchmarker.benchmark_cpu is warm
    with pytest.raises(RuntimeError), cold_timing.cold_cpu_benchmarks():
        raise RuntimeError("a failed compile")
    assert Benchmarker.benchmark_cpu is warm  # restored on errors too


def test_the_choice_inductor_times_is_also_timed_warm_while_inside(monkeypatch):
    """Inductor times each choice through AlgorithmSelectorCache.benchmark_choice; inside, its
    warm median is kept for ext's choices (warm_ms) and forgotten on exit."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    monkeypatch.setattr(cold_timing, "last_level_cache_bytes", lambda: 1 << 16)
    timer = AlgorithmSelectorCache.benchmark_choice

    class Choice:
        def benchmark(self, *args, out):
            return benchmarker.benchmark_cpu(lambda: None)

    class Args:
        def get_benchmark_tensors(self, _):
            return type("T", (), {"unpack": lambda self: ((), torch.zeros(1))})()

    choice, untimed = Choice(), Choice()
    with cold_timing.cold_cpu_benchmarks():
        flushed = AlgorithmSelectorCache.benchmark_choice(choice, Args())
        warm = cold_timing.warm_ms(choice)
        assert warm is not None and 0 <= warm < 5 and flushed >= 0
        assert cold_timing.warm_ms(untimed) is None
    assert cold_timing.warm_ms(choice) is None
    assert AlgorithmSelectorCache.benchmark_choice == timer
