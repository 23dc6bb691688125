"""CPU autotuning times flushed calls (lowering/cold_timing.py): what runs, and that it is undone."""

import itertools
import time

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


@pytest.fixture
def unswitched(monkeypatch):
    """No thread is ever switched out (a loaded test machine would otherwise add calls)."""
    monkeypatch.setattr(cold_timing, "context_switches", lambda: 0)


def test_each_timed_call_follows_a_full_flush(unswitched):
    flush = torch.zeros(4096, dtype=torch.uint8)
    fn = Counting(flush)
    ms = cold_timing.flushed_median_ms(fn, flush, calls=5)
    assert fn.calls == 1 + 5 * 3  # one untimed first call, then per flush: timed, untimed, timed warm
    assert fn.seen[1::3] == [0, 1, 2, 3, 4]  # each timed flushed call right after its own flush
    assert int(flush[-1]) == 4  # the whole buffer, not its start
    assert ms >= 0


def test_inductors_cpu_benchmarks_time_flushed_calls_only_inside(monkeypatch, unswitched):
    monkeypatch.setattr(cold_timing, "last_level_cache_bytes", lambda: 1 << 16)
    warm = Benchmarker.benchmark_cpu
    calls = []
    with cold_timing.cold_cpu_benchmarks():
        benchmarker.benchmark_cpu(lambda: calls.append(1))
        assert len(calls) == 1 + cold_timing.TIMED_CALLS * 3  # each flushed call, then the same twice warm
    assert Benchmarker.benchmark_cpu is warm
    with pytest.raises(RuntimeError), cold_timing.cold_cpu_benchmarks():
        raise RuntimeError("a failed compile")
    assert Benchmarker.benchmark_cpu is warm  # restored on errors too


def test_the_flush_is_real_memory_when_entered_while_the_compile_traces_fake(monkeypatch, unswitched):
    """compile_context enters cold_cpu_benchmarks under the compile's FakeTensorMode: a flush made
    there was a FakeTensor, its fill_ wrote nothing, and every flushed time was a warm one."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    monkeypatch.setattr(cold_timing, "last_level_cache_bytes", lambda: 1 << 16)
    flushes = []
    timing = cold_timing.timing
    monkeypatch.setattr(cold_timing, "timing", lambda fn, flush, *a: flushes.append(flush) or timing(fn, flush, *a))
    with FakeTensorMode(), cold_timing.cold_cpu_benchmarks():
        with torch._subclasses.fake_tensor.unset_fake_temporarily():  # Inductor benchmarks outside it
            benchmarker.benchmark_cpu(lambda: None)
    assert flushes and not isinstance(flushes[0], FakeTensor)
    assert flushes[0].untyped_storage().nbytes() == (1 << 16) * cold_timing.FLUSH_LLC_MULTIPLE
    assert int(flushes[0][-1]) == (cold_timing.TIMED_CALLS - 1) & 0xFF  # written by the last try


def test_a_cache_reported_larger_than_any_core_gets_is_flushed_with_at_most_256_mib(monkeypatch, unswitched):
    """A VM reports its host's whole L3 (300 MiB on a 2-core VM here): four times that, written
    before every timed call, cost 50-80 ms a call; the flush stops at FLUSH_MAX_BYTES."""
    monkeypatch.setattr(cold_timing, "last_level_cache_bytes", lambda: 300 << 20)
    sizes = []
    timing = cold_timing.timing
    monkeypatch.setattr(cold_timing, "timing", lambda fn, flush, *a: sizes.append(flush.numel()) or timing(fn, flush, *a))
    with cold_timing.cold_cpu_benchmarks():
        benchmarker.benchmark_cpu(lambda: None)
    assert sizes == [256 << 20] == [cold_timing.FLUSH_MAX_BYTES]


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


def test_a_choice_is_timed_only_once_a_background_build_of_the_weight_check_is_done(monkeypatch):
    """A machine's first compile builds the frozen graphs' C++ weight check in a thread
    (runtime/tensor_watch, runtime/background_builds); a benchmark waits for it rather than share
    the CPU with g++."""
    import threading

    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    from inductor_ext.runtime import background_builds

    monkeypatch.setattr(cold_timing, "last_level_cache_bytes", lambda: 1 << 16)
    release, order = threading.Event(), []
    background_builds.start(lambda: (release.wait(), order.append("built")), "test-build")

    class Choice:
        def benchmark(self, *args, out):
            order.append("timed")
            return benchmarker.benchmark_cpu(lambda: None)

    class Args:
        def get_benchmark_tensors(self, _):
            return type("T", (), {"unpack": lambda self: ((), torch.zeros(1))})()

    threading.Timer(0.2, release.set).start()
    with cold_timing.cold_cpu_benchmarks():
        AlgorithmSelectorCache.benchmark_choice(Choice(), Args())
    assert order == ["built", "timed"]


# ------------------------------------------- calls the OS switched out are not the kernel's (issue 29)

class Switches:
    """A fake ``context_switches``: ``switched[i]`` says whether timed call i had a thread switched out."""

    def __init__(self, switched):
        self.switched, self.count, self.reads = list(switched), 0, 0

    def __call__(self):
        self.reads += 1
        if self.reads % 2 == 0 and self.switched and self.switched.pop(0):  # read after the call
            self.count += 1
        return self.count


def test_a_timed_call_a_thread_was_switched_out_in_is_timed_again(monkeypatch):
    # per try: the flushed call, then the warm one; the second try's flushed call was switched out
    monkeypatch.setattr(cold_timing, "context_switches", Switches([False, False, True, False, False, False]))
    flush = torch.zeros(4096, dtype=torch.uint8)
    fn = Counting(flush)
    timed = cold_timing.timing(fn, flush, calls=2)
    assert timed.flushed_clean and timed.warm_clean
    # three tries for two clean flushed calls: each try's calls (timed, untimed, timed warm) after its own flush
    assert fn.seen == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_when_no_call_is_clean_the_switched_ones_are_all_there_is(monkeypatch):
    monkeypatch.setattr(cold_timing, "context_switches", Switches([True] * 8))
    timed = cold_timing.timing(lambda: None, torch.zeros(64, dtype=torch.uint8), calls=1)
    assert not timed.flushed_clean and not timed.warm_clean  # ATTEMPTS tries, every one switched


def test_calls_too_long_to_be_a_time_slice_count_though_switched(monkeypatch):
    """A 340 ms GEMM is preempted in every call on a quiet machine: its calls count (not
    "switched out by the OS"), and fewer of them are made."""
    monkeypatch.setattr(cold_timing, "LONG_CALL_S", 0.01)
    monkeypatch.setattr(cold_timing, "context_switches", Switches([True] * 100))
    calls = []
    timed = cold_timing.timing(lambda: calls.append(time.sleep(0.012)), torch.zeros(64, dtype=torch.uint8))
    assert timed.flushed_clean and timed.warm_clean and timed.flushed_ms >= 12 and timed.warm_ms >= 12
    assert len(calls) == 1 + cold_timing.LONG_TIMED_CALLS  # the first call, then one timed call per try


def test_a_call_that_turns_short_is_timed_in_both_regimes_again(monkeypatch, unswitched):
    """Long first tries (a cold page-faulting start, say) do not excuse the short calls after
    them from the flushed + warm pairs."""
    monkeypatch.setattr(cold_timing, "LONG_CALL_S", 0.01)
    seconds = iter([0.012, 0.012] + [0.0] * 100)  # the first call and the first try are long
    calls = []
    timed = cold_timing.timing(lambda: calls.append(time.sleep(next(seconds))), torch.zeros(64, dtype=torch.uint8),
                               calls=2)
    assert timed.flushed_clean and timed.warm_clean and timed.flushed_ms < 12 and timed.warm_ms < 12
    assert len(calls) == 1 + 1 + 3 * 2  # the first call, the long try, then two tries of three calls


def test_the_threads_are_woken_after_the_flush_on_memory_the_call_never_reads(monkeypatch, unswitched):
    order = []
    flush = torch.zeros(4096, dtype=torch.uint8)
    monkeypatch.setattr(cold_timing, "wake_threads", lambda: order.append(("wake", int(flush[-1]))))
    cold_timing.flushed_median_ms(lambda: order.append(("call", int(flush[-1]))), flush, calls=1)
    assert order == [("call", 0), ("wake", 0), ("call", 0), ("call", 0), ("wake", 0), ("call", 0)]
    wake = cold_timing._wake_buffer(torch.get_num_threads())
    assert wake.numel() >= cold_timing._GRAIN * torch.get_num_threads()  # a grain per thread: all of them run
    assert wake.data_ptr() != flush.data_ptr()


def test_switched_calls_are_left_out_of_both_medians(monkeypatch):
    """A switched call waited for a core: 12 ms among 5 us calls is in neither median."""
    calls = itertools.chain([(0.001, True), (0.012, False)],  # try 1: flushed clean, warm switched
                            itertools.cycle([(0.012, False), (5e-6, True)]))  # then flushed switched, warm clean
    monkeypatch.setattr(cold_timing, "timed_call", lambda fn: next(calls))
    timed = cold_timing.timing(lambda: None, torch.zeros(64, dtype=torch.uint8), calls=1)
    assert timed == cold_timing.Timing(pytest.approx(1.0), pytest.approx(5e-3), True, True)


@pytest.mark.parametrize("flushed, retimes, want_ms, disturbed", [
    ([(0.05, True)], 0, 0.05, False),                     # agrees with 5 us warm: timed once
    ([(6.77, True), (0.06, True)], 1, 0.06, False),       # 1354x: timed again, the lower kept
    ([(6.77, False), (0.07, True)], 1, 0.07, False),      # no clean call: timed again, clean now
    ([(6.77, False), (7.0, False)], 1, 6.77, True),       # never clean: flagged
    ([(0.05, True, False)], 0, 0.05, True),               # no clean warm call: flagged
])
def test_a_flushed_time_that_disagrees_with_the_warm_one_is_timed_again(monkeypatch, flushed, retimes, want_ms,
                                                                       disturbed):
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    monkeypatch.setattr(cold_timing, "last_level_cache_bytes", lambda: 1 << 16)
    results = iter(flushed)
    monkeypatch.setattr(cold_timing, "timing", lambda fn, flush: cold_timing.Timing(
        (r := next(results))[0], 0.005, r[1], r[2] if len(r) > 2 else True))

    class Choice:
        def benchmark(self, *args, out):
            return benchmarker.benchmark_cpu(lambda: None)

    class Args:
        def get_benchmark_tensors(self, _):
            return type("T", (), {"unpack": lambda self: ((), torch.zeros(1))})()

    choice = Choice()
    with cold_timing.cold_cpu_benchmarks():
        assert AlgorithmSelectorCache.benchmark_choice(choice, Args()) == want_ms
        assert cold_timing.disturbed(choice) is disturbed
        assert len(list(results)) == len(flushed) - 1 - retimes  # nothing left: each timing was used
    assert not cold_timing.disturbed(choice)  # forgotten on exit


def test_a_candidate_mostly_switched_out_stops_at_the_time_budget(monkeypatch):
    """A 15-35 ms call is switched out in most runs: past the budget, a few clean calls per regime
    do instead of ``calls`` of them (60 tries, 6 s a candidate, before)."""
    monkeypatch.setattr(cold_timing, "TIME_BUDGET_S", 0.05)
    monkeypatch.setattr(cold_timing, "MIN_CLEAN_CALLS", 2)
    every_other_try_clean = Switches([True, True, False, False] * 100)
    monkeypatch.setattr(cold_timing, "context_switches", every_other_try_clean)
    calls = []
    timed = cold_timing.timing(lambda: calls.append(time.sleep(0.005)), torch.zeros(64, dtype=torch.uint8), calls=15)
    assert timed.flushed_clean and timed.warm_clean
    # 2 tries before the budget (15 ms each) and 2 after: 2 clean pairs; without it, 30 tries
    assert len(calls) < 1 + 3 * 8, len(calls)


def test_a_thread_that_went_to_sleep_is_not_a_switched_out_call(monkeypatch):
    """ATen's OpenMP threads sleep when a parallel region ends (a voluntary switch, in every call of
    a multi-threaded GEMM); only a thread the OS took off its core (involuntary) marks a call."""
    import resource
    from types import SimpleNamespace

    usage = {"ru_nvcsw": 0, "ru_nivcsw": 0}
    monkeypatch.setattr(resource, "getrusage", lambda who: SimpleNamespace(**usage))

    def sleeps_at_the_barrier():
        usage["ru_nvcsw"] += 3

    def preempted():
        usage["ru_nivcsw"] += 1

    assert cold_timing.timed_call(sleeps_at_the_barrier)[1] is True
    assert cold_timing.timed_call(preempted)[1] is False


# ------------------------------------------- a decode-shaped GEMM timed as a decode loop runs it

def test_input_copies_are_the_same_bytes_on_storages_of_their_own():
    weight = torch.randn(96, 64).t()[8:]  # a transposed view with an offset, as Inductor hands weights
    x = torch.randn(1, 96)
    size = (96 * 64 + 96) * 4  # the weight's whole storage (the view starts 8 in) and x
    sets = cold_timing.input_copies((x, weight), budget=10 * size)
    assert len(sets) == 10 and sets[0] == (x, weight)  # the originals count as one set
    storages = {t.untyped_storage().data_ptr() for copies in sets for t in copies}
    assert len(storages) == 20
    for cx, cw in sets[1:]:
        assert cw.stride() == weight.stride() and cw.storage_offset() == weight.storage_offset()
        assert torch.equal(cw, weight) and torch.equal(cx, x)
    assert len(cold_timing.input_copies((x, weight), budget=size + 1)) == 2  # at least two: one after another
    assert cold_timing.input_copies((x, weight), budget=size) == [(x, weight)]  # as large as the flush: streams itself
    with_none = cold_timing.input_copies((x, weight, None), budget=3 * size)  # a missing input stays missing
    assert len(with_none) == 3 and all(copies[2] is None for copies in with_none)
    assert len(cold_timing.input_copies((torch.ones(1),), budget=1 << 30)) == cold_timing.STREAMED_MAX_COPIES
    assert cold_timing.input_copies((x, torch.eye(4).to_sparse()), 1 << 20) == []  # no plain tensor: timed flushed


def test_a_streamed_round_calls_every_copy_once_in_turn_and_reports_per_call(monkeypatch, unswitched):
    order = []
    ticks = iter(range(10**6))
    monkeypatch.setattr(cold_timing.time, "perf_counter", lambda: next(ticks) * 1e-3)
    calls = [lambda i=i: order.append(i) for i in range(4)]
    timed = cold_timing.streamed_timing(calls, rounds=3)
    assert order[:4] == [0, 1, 2, 3]  # each once, untimed first (a packed copy is made on first use)
    assert order[4:9] == [0, 1, 2, 3, 0]  # a round in turn, then the first again before its warm call
    # a round: four calls between two clock reads 1 ms apart -> 0.25 ms per call; warm: one call, 1 ms
    assert timed.flushed_ms == pytest.approx(0.25) and timed.warm_ms == pytest.approx(1.0)
    assert timed.flushed_clean and timed.warm_clean


def test_a_decode_shaped_choice_is_timed_over_copies_of_its_inputs(monkeypatch, unswitched):
    """Inside cold_cpu_benchmarks, a choice marked streamed is benchmarked once per copy of its
    inputs; the calls it would have timed are timed in rounds instead of after a flush."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    monkeypatch.setattr(cold_timing, "FLUSH_MAX_BYTES", 8 * 4 * (64 * 96 + 64))
    seen = []

    class Choice:
        name = "template"

        def benchmark(self, x, w, out):
            return benchmarker.benchmark_cpu(lambda: seen.append(w.untyped_storage().data_ptr()))

    class Args:
        def get_benchmark_tensors(self, _):
            return type("T", (), {"unpack": lambda self: ((torch.randn(1, 64), torch.randn(64, 96)),
                                                          torch.zeros(1, 96))})()

    flushes = []
    monkeypatch.setattr(cold_timing, "timing", lambda *a, **k: flushes.append(a))
    choice = Choice()
    cold_timing.time_streamed([choice])
    with cold_timing.cold_cpu_benchmarks():
        ms = AlgorithmSelectorCache.benchmark_choice(choice, Args())
        assert cold_timing.warm_ms(choice) is not None and ms >= 0
    assert flushes == []  # never timed after a flush
    assert len(set(seen)) == 8  # every copy of the weight called


class DecodeAndPrefill(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 96, bias=False), torch.nn.Linear(64, 96, bias=False)

    def forward(self, token, tokens):
        return self.a(token).sum() + self.b(tokens).sum()


def test_an_ext_compile_times_a_one_row_gemm_streamed_and_a_sixteen_row_one_flushed(monkeypatch, tmp_path):
    streamed, flushed = [], []
    streamed_timing, timing = cold_timing.streamed_timing, cold_timing.timing
    monkeypatch.setattr(cold_timing, "streamed_timing", lambda calls, *a: streamed.append(len(calls))
                        or streamed_timing(calls, *a))
    monkeypatch.setattr(cold_timing, "timing", lambda fn, flush, *a: flushed.append(1) or timing(fn, flush, *a))
    torch.manual_seed(0)
    model, token, tokens = DecodeAndPrefill().eval(), torch.randn(1, 64), torch.randn(16, 64)
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend="ext", options={"autotune": "full", "templates": ["cpp.gemm"],
                                                           "autotune_cache": str(tmp_path / "at.db")})(token, tokens)
    torch.testing.assert_close(out, model(token, tokens), rtol=1e-4, atol=1e-3)
    assert streamed and all(n >= 2 for n in streamed)  # the 1-row GEMM's choices, each over copies
    assert flushed  # the 16-row GEMM's, after a flush


def test_what_a_data_processor_makes_for_a_streamed_call_lives_until_it_is_timed(monkeypatch, unswitched):
    """The C++ GEMM template is timed through ``DataProcessorChoiceCallerWrapper``, whose
    preprocessor packs the weight per call, and a C++ benchmark's callable holds only its tensors'
    addresses: collected now and timed later, it read freed memory (a 98 MB vocabulary weight's
    copies segfaulted) unless what the preprocessor made is kept until the calls are timed."""
    import weakref

    from torch._inductor.select_algorithm import AlgorithmSelectorCache, DataProcessorChoiceCallerWrapper

    monkeypatch.setattr(cold_timing, "FLUSH_MAX_BYTES", 4 * 4 * (64 * 96 + 64))
    alive = []

    class Inner:
        name = "template"

        def benchmark(self, x, w, out):
            packed = weakref.ref(w)  # what a C++ benchmark keeps of it: not the tensor
            return benchmarker.benchmark_cpu(lambda: alive.append(packed() is not None))

    def pack(args, out):
        return tuple(t.clone() for t in args), out

    class Args:
        def get_benchmark_tensors(self, _):
            return type("T", (), {"unpack": lambda self: ((torch.randn(1, 64), torch.randn(64, 96)),
                                                          torch.zeros(1, 96))})()

    wrapper = DataProcessorChoiceCallerWrapper(Inner(), pack, None)
    cold_timing.time_streamed([wrapper])
    # streamed, not the flushed timing a failure falls back to (which would keep its inputs alive)
    monkeypatch.setattr(cold_timing, "timing", lambda *a, **k: pytest.fail("timed flushed, not streamed"))
    with cold_timing.cold_cpu_benchmarks():
        AlgorithmSelectorCache.benchmark_choice(wrapper, Args())
    assert len(alive) > 4 and all(alive)
    assert wrapper._preprocessor is pack  # put back


@pytest.mark.parametrize("rows, constant, refused, streamed", [
    (8, True, False, True),  # STREAMED_MAX_ROWS rows: a decode step's (a batch of 8 sequences)
    (9, True, False, False),
    (1, False, False, False),  # a weight that is no frozen constant streams nothing of its own
    (1, True, True, False),  # an op instance ext's lowering refuses
])
def test_a_decode_shaped_gemm_has_few_static_rows_and_a_frozen_weight(monkeypatch, rows, constant, refused, streamed):
    from types import SimpleNamespace

    from inductor_ext.lowering import ext_choices
    from inductor_ext.templates.family import TensorSpec

    x = TensorSpec((rows, 64), (64, 1), "float32")
    w_t = TensorSpec((64, 96), (1, 64), "float32", constant=constant)
    spec = SimpleNamespace(spec=SimpleNamespace(inputs=[x, w_t]))
    monkeypatch.setattr(ext_choices.ops, "op_inputs", lambda op, ki: "refused: why" if refused else spec)
    assert ext_choices.decode_shaped("mm", SimpleNamespace(device_type="cpu")) is streamed
    assert ext_choices.decode_shaped("addmm", SimpleNamespace(device_type="cpu")) is streamed
    assert ext_choices.decode_shaped("bmm", SimpleNamespace(device_type="cpu")) is False
    assert ext_choices.decode_shaped("mm", SimpleNamespace(device_type="cuda")) is False
    # a decode step's attention reads its layer's KV cache once a step, whatever its shapes
    assert ext_choices.decode_shaped("decode_attention", SimpleNamespace(device_type="cpu")) is True
    assert ext_choices.decode_shaped("prefill_attention", SimpleNamespace(device_type="cpu")) is False
    assert ext_choices.decode_shaped("decode_attention", SimpleNamespace(device_type="cuda")) is False


def test_streamed_rounds_that_are_all_switched_out_stop_at_the_budget(monkeypatch):
    """On a loaded machine every round of many calls is switched out; they stop at the budget
    (their median taken) instead of running every try."""
    ticks, switches = iter(range(10**6)), iter(range(10**6))
    monkeypatch.setattr(cold_timing.time, "perf_counter", lambda: next(ticks) * 1e-3)
    monkeypatch.setattr(cold_timing, "context_switches", lambda: next(switches))
    monkeypatch.setattr(cold_timing, "STREAMED_BUDGET_S", 0.05)
    rounds = []
    timed = cold_timing.streamed_timing([lambda: rounds.append(1)], rounds=15)
    assert 2 < len(rounds) < 2 * 15  # one untimed call, then two calls a round (streamed, warm): 60 tries unbudgeted
    assert not timed.flushed_clean and timed.flushed_ms > 0
