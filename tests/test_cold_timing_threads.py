"""Issue 29: the flushed regime timed the OS, not the caches, for a 2-thread ATen GEMM.

On a 2-core machine whose cores other processes keep busy, the scheduler put ATen's two OpenMP
threads on one core (seen in a cpu-preset compile: both on CPU 1 while the GEMM was timed) or
preempted one; a 2-thread GEMM then waits a time slice (4-30 ms) at its barrier. The old flushed
timing took that as the GEMM's cost: ``addmm 2x96x48`` ATen 6773 us flushed against 7.9 us warm,
shown as a 1526x speed-up. A subprocess pinned to two cores reproduces it with two spinning
processes per core (each of ATen's threads then gets about a third of one). The timing before
this issue failed these tests in every run (ATen 11-48 ms flushed against ~0.5 ms)."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, os, resource, subprocess, sys, time
cpus = sorted(os.sched_getaffinity(0))[:2]
os.sched_setaffinity(0, cpus)  # before torch starts its threads: two cores, as the issue's machine
import torch
torch.set_num_threads(2)
from torch._inductor.select_algorithm import AlgorithmSelectorCache
from torch._inductor.runtime.benchmarking import benchmarker
from inductor_ext.lowering import cold_timing

b, x, w = torch.randn(48), torch.randn(2, 96), torch.randn(96, 48)
out = torch.empty(2, 48)
cols = [w[:, j].contiguous() for j in range(48)]

def aten():  # ATen's addmm on two threads
    torch.addmm(b, x, w, out=out)

def by_columns():  # the same GEMM as 96 single-threaded matrix-vector calls: far slower
    for _ in range(2):
        for j in range(48):
            torch.mv(x, cols[j], out=out[:, j])

def switches():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw

def warm_min_us(fn, clean_calls=50, patience_s=3.0):  # side by side, no flush: the true ranking
    fn(); times = []; give_up = time.perf_counter() + patience_s
    while len(times) < clean_calls and time.perf_counter() < give_up:
        before = switches(); s = time.perf_counter(); fn(); t = time.perf_counter() - s
        if switches() == before:  # a call a thread was switched out in timed the OS
            times.append(t)
    return min(times, default=float("inf")) * 1e6

class Choice:  # what Inductor times: choice.benchmark -> benchmarker.benchmark_cpu
    def __init__(self, fn): self.fn = fn
    def benchmark(self, *args, out): return benchmarker.benchmark_cpu(self.fn)

class Args:
    def get_benchmark_tensors(self, _):
        return type("T", (), {"unpack": lambda self: ((), torch.zeros(1))})()

def timed(spinner_cpus):
    spin = "import os\nos.sched_setaffinity(0, {%d})\nwhile True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin % c]) for c in spinner_cpus]
    try:
        result, choices = {}, {"aten": Choice(aten), "by_columns": Choice(by_columns)}
        with cold_timing.cold_cpu_benchmarks():
            for name, choice in choices.items():
                result[name + "_ms"] = AlgorithmSelectorCache.benchmark_choice(choice, Args())
            flagged = getattr(cold_timing, "disturbed", lambda _: False)  # the timing before issue 29 flagged nothing
            result["aten_disturbed"] = flagged(choices["aten"])
            result["aten_warm_ms"] = cold_timing.warm_ms(choices["aten"])
        return result
    finally:
        for p in spinners:
            p.kill()

torch.set_num_threads(1)  # the work side by side: a loaded machine can switch out every 2-thread call
results = {"warm_aten_us": warm_min_us(aten), "warm_by_columns_us": warm_min_us(by_columns)}
torch.set_num_threads(2)
results["busy"] = timed([c for c in cpus for _ in range(2)])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def timed():
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores to pin to (Linux sched_setaffinity): the artifact is a 2-thread GEMM's")
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_setup_ranks_aten_first_side_by_side(timed):
    """Warm and side by side (one thread each), ATen's GEMM is many times faster than the
    column-by-column one."""
    assert timed["warm_aten_us"] * 5 < timed["warm_by_columns_us"], timed


def test_a_loaded_machine_does_not_rank_a_two_thread_aten_gemm_last(timed):
    """Flushed on a loaded machine ATen still ranks first: its operands and code refetched from
    DRAM cost it tens of microseconds, where the old timing reported a scheduler slice (measured:
    13-47 ms against ~0.5 ms for the column-by-column GEMM). A flushed time the OS set in every
    call is flagged (``disturbed``), never compared."""
    t = timed["busy"]
    assert t["aten_ms"] < t["by_columns_ms"] or t["aten_disturbed"], t


def test_atens_flushed_time_is_a_cache_effect_not_a_time_slice(timed):
    """Generous, physical bounds: 19 KB of operands and a cold code path cost under 1 ms flushed
    (measured 45-170 us); a time slice costs 4 ms or more. Unless flagged, as above."""
    t = timed["busy"]
    assert t["aten_ms"] < 1.0 or t["aten_disturbed"], t
