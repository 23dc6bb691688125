"""An output the graph returns is fresh memory in every call, and the cpu preset times its
choices so (lowering/returned_outputs.py, runtime/fresh_pages.py, lowering/cold_timing.py).

Before, Inductor's CPU timing wrote ATen's mm into one buffer reused call after call, while
oneDNN's packed linear allocated its output each call: for a GPT-2 prefill's vocabulary GEMM
(512x50257 bf16, returned) ATen won by 9% and ran 9% slower in the graph. Page faults, counted
by the OS, show which regime a timed call ran in, without timing anything.
"""

from __future__ import annotations

import resource
from types import SimpleNamespace

import pytest
import torch
import torch.fx
from torch._inductor.runtime.benchmarking import benchmarker
from torch._inductor.select_algorithm import AlgorithmSelectorCache

from inductor_ext.autotune.cache import ProblemKey
from inductor_ext.lowering import cold_timing, returned_outputs
from inductor_ext.runtime import fresh_pages

needs_madvise = pytest.mark.skipif(not fresh_pages.supported(),
                                   reason="this OS does not let a process give pages back (Linux only)")
PAGE = 4096
MIB = 1 << 20


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# ------------------------------------------------------------------------------ returned(node)

def _graph(body) -> torch.fx.Graph:
    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    body(graph, graph.call_function(torch.ops.aten.mm.default, (a, b)))
    return graph


def _mm(graph: torch.fx.Graph) -> torch.fx.Node:
    return next(n for n in graph.nodes if n.target is torch.ops.aten.mm.default)


@pytest.mark.parametrize("body, want", [
    (lambda g, mm: g.output((mm,)), True),
    (lambda g, mm: g.output((g.call_function(torch.ops.aten.view.default, (mm, [1, -1])),)), True),
    (lambda g, mm: g.output((g.call_function(torch.ops.aten._unsafe_view.default, (
        g.call_function(torch.ops.aten.permute.default, (mm, [1, 0])), [-1])),)), True),  # views of views
    (lambda g, mm: g.output((g.call_function(torch.ops.aten.relu.default, (mm,)),)), False),  # a copy returned
    (lambda g, mm: g.output((g.call_function(torch.ops.aten.relu.default, (mm,)),
                             g.call_function(torch.ops.aten.view.default, (mm, [-1])))), True),  # and a view
])
def test_an_output_is_returned_itself_or_through_views_only(body, want):
    assert returned_outputs.returned(_mm(_graph(body))) is want


def test_no_node_is_not_returned():
    assert returned_outputs.returned(None) is False


# --------------------------------------------------------------------------------- fresh pages

@needs_madvise
def test_dropped_pages_fault_in_afresh_as_zeros():
    t = torch.ones(8 * MIB // 4)
    t.fill_(2.0)  # resident
    before = _minor_faults()
    t.fill_(3.0)
    assert _minor_faults() - before < 64  # resident pages: writing them faults nothing
    assert fresh_pages.drop(t) >= 8 * MIB - 2 * PAGE
    assert float(t[len(t) // 2]) == 0.0  # a dropped page reads as zeros
    before = _minor_faults()
    t.fill_(3.0)
    assert _minor_faults() - before >= (8 * MIB // PAGE) // 2  # a fault per page (4 KiB: THP is off for it)


@needs_madvise
def test_only_whole_pages_inside_the_tensor_are_dropped():
    base = torch.full((4 * PAGE,), 7, dtype=torch.uint8)
    offset = -base.data_ptr() % PAGE + 100  # starts 100 bytes into a page
    inner = base[offset:offset + 2 * PAGE]  # spans one whole page and two partial ones
    assert fresh_pages.drop(inner) == PAGE
    whole = -(-inner.data_ptr() // PAGE) * PAGE - base.data_ptr()
    assert int(base[:whole].min()) == 7 and int(base[whole + PAGE:].min()) == 7  # neighbours kept
    assert int(base[whole:whole + PAGE].max()) == 0
    assert fresh_pages.drop(base[:PAGE // 2]) == 0  # no whole page inside


def test_the_span_of_a_strided_view_covers_its_last_element():
    t = torch.empty(64, 32)
    first, end = fresh_pages.span(t.t())
    assert (first, end) == (t.data_ptr(), t.data_ptr() + t.numel() * 4)
    first, end = fresh_pages.span(t[:0])
    assert first == end  # nothing to drop


# -------------------------------------------------------------- cold_timing with a returned output

class _Args:
    """Inductor's AutotuneArgs as benchmark_choice reads it: one output, here shared by both kinds."""

    def __init__(self, out: torch.Tensor, inputs: tuple[torch.Tensor, ...] = ()):
        self.tensors = type("T", (), {"unpack": lambda _: (list(inputs), out)})()

    def get_benchmark_tensors(self, _extern: bool):
        return self.tensors


class _WritesOut:
    """A choice that writes into the output Inductor hands it (ATen's out variants, templates);
    records the minor page faults of each call."""

    def __init__(self) -> None:
        self.faults: list[int] = []

    def benchmark(self, *inputs, out):
        def call():
            before = _minor_faults()
            out.fill_(1.0)
            self.faults.append(_minor_faults() - before)
        return benchmarker.benchmark_cpu(call)


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.setattr(cold_timing, "context_switches", lambda: 0)
    monkeypatch.setattr(cold_timing, "last_level_cache_bytes", lambda: 1 << 16)


@needs_madvise
@pytest.mark.parametrize("returned", [True, False])
def test_a_returned_outputs_choices_write_fresh_pages_in_every_timed_call(quiet, returned):
    out = torch.zeros(8 * MIB // 4)
    choice = _WritesOut()
    if returned:
        cold_timing.time_as_returned([choice])
    with cold_timing.cold_cpu_benchmarks():
        AlgorithmSelectorCache.benchmark_choice(choice, _Args(out))
    timed = choice.faults[1:]  # after the first, untimed call: flushed, untimed, warm per try
    pages = 8 * MIB // PAGE
    if returned:  # every timed call (flushed and warm) faults its pages in; the untimed one between does not
        assert all(f >= pages // 2 for f in timed[0::3] + timed[2::3]), choice.faults
        assert all(f < pages // 4 for f in timed[1::3]), choice.faults
    else:  # Inductor's reused buffer: resident after the first call
        assert all(f < pages // 4 for f in timed), choice.faults


@needs_madvise
def test_an_output_sharing_memory_with_an_input_is_never_dropped(quiet):
    memory = torch.ones(8 * MIB // 4)
    out = memory[: len(memory) // 2]
    choice = _WritesOut()
    cold_timing.time_as_returned([choice])
    with cold_timing.cold_cpu_benchmarks():
        AlgorithmSelectorCache.benchmark_choice(choice, _Args(out, inputs=(memory,)))
    assert all(f < (8 * MIB // PAGE) // 8 for f in choice.faults[1:]), choice.faults
    assert float(memory[-1]) == 1.0


class _Freed:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __del__(self) -> None:
        self.log.append("freed")


@pytest.mark.parametrize("returned", [True, False])
def test_an_output_a_choice_allocates_is_freed_after_the_clock_only_where_the_graph_returns_it(
        monkeypatch, quiet, returned):
    """The graph frees an intermediate itself (its munmap is the call's), a returned one its caller."""
    log: list[str] = []
    clock = iter(range(1000))
    monkeypatch.setattr(cold_timing, "time", SimpleNamespace(perf_counter=lambda: log.append("clock") or next(clock)))
    monkeypatch.setattr(cold_timing, "_returned_outputs", [() if returned else None])
    cold_timing.timed_call(lambda: _Freed(log))
    assert log == (["clock", "clock", "freed"] if returned else ["clock", "freed", "clock"])


# ---------------------------------------------------------------------------------- the key

def test_the_key_says_the_output_is_returned_and_old_keys_are_unchanged():
    common = dict(op="mm", shapes=((512, 768), (768, 50257)), strides=((768, 1), (1, 768)),
                  dtypes=("bfloat16", "bfloat16"), device_name="cpu", arch="cpu", preset="cpu")
    inner, returned = ProblemKey(**common), ProblemKey(**common, returned=True)
    assert "returned" not in inner.to_dict() and returned.to_dict()["returned"] is True
    assert inner.digest() != returned.digest()
    assert ProblemKey.from_dict(returned.to_dict()) == returned and ProblemKey.from_dict(inner.to_dict()) == inner
    assert returned.describe() == "mm 512x50257x768 bf16 returned"
    with pytest.raises(TypeError, match="returned must be a bool"):
        ProblemKey(**common, returned="yes")
