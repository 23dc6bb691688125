"""A decision's C++ candidates built a few to a compiler run (``lowering/candidate_batches``): each
candidate, looked up by its own entry name as Inductor's benchmark does, computes from the batch's
library what it computes built alone; a source that could reach past its namespace is built
alone; a batch that fails falls back to one build per candidate; and only ext's compiles serve
batches."""

import ctypes
import logging

import pytest
import torch
from torch._inductor.codecache import CppCodeCache

from inductor_ext.lowering import candidate_batches
from inductor_ext.testing.patches import assert_in_force_only_inside

PREFIX = "#include <torch/csrc/inductor/cpp_prefix.h>\n"


def candidate(factor: float, entry: str = "cpp_Candidate") -> str:
    """A candidate as Inductor's C++ GEMM template writes one: helpers, then one C entry; every
    candidate of a decision has the same entry and helper names."""
    return PREFIX + f"""#include <c10/util/Unroll.h>
static inline float helper(float v) {{ return v * {factor}f; }}
void {entry}_single_thread(const float* X, float* Y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) Y[i] = helper(X[i]); }}
extern "C"
void {entry}(const float* X, float* Y, const int64_t n)
{{
    {entry}_single_thread(X, Y, n);
}}
"""


SOURCES = [candidate(2.0), candidate(3.0), candidate(-1.0)]


def _run(library, entry="cpp_Candidate"):
    x, y = torch.linspace(-1, 1, 9), torch.zeros(9)
    fn = getattr(library, entry)
    fn.argtypes = [ctypes.c_ulonglong] * 3  # as CppBenchmarkRequest calls it
    fn(x.data_ptr(), y.data_ptr(), 9)
    return y


def _load_async(source):
    return CppCodeCache.load_async(source, device_type="cpu")


def test_each_candidate_computes_from_the_batch_what_it_computes_built_alone():
    with candidate_batches.served_from_batches():
        batches, alone = candidate_batches.submit(SOURCES, _load_async)
        assert len(batches) == 1 and alone == []
        served = [CppCodeCache.load(s, device_type="cpu") for s in SOURCES]
        assert all(isinstance(v, candidate_batches.LibraryView) for v in served)
    own = [CppCodeCache.load(s, device_type="cpu") for s in SOURCES]  # outside: Inductor's build of each
    for view, library, factor in zip(served, own, (2.0, 3.0, -1.0)):
        assert torch.equal(_run(view), _run(library))
        assert torch.equal(_run(view), torch.linspace(-1, 1, 9) * factor)  # its own helper


@pytest.mark.parametrize("source", [
    PREFIX + '#define N 4\nextern "C" void cpp_C(float* Y) {}\n',
    PREFIX + 'extern "C" void cpp_C(float* Y) {}\nextern "C" void other() {}\n',
    PREFIX + 'extern "C" int cpp_C(float* Y) { return 0; }\n',  # not a void entry
    PREFIX + 'void cpp_C(float* Y) {}\n',
])
def test_a_source_that_could_reach_past_its_namespace_is_built_alone(source):
    assert not candidate_batches.batchable(source)
    with candidate_batches.served_from_batches():
        batches, alone = candidate_batches.submit([source, *SOURCES[:2]], lambda s: (lambda: None))
    assert alone == [source] and [b.sources for b in batches] == [SOURCES[:2]]


def test_a_lone_batchable_source_and_every_source_outside_ext_compiles_are_built_alone():
    with candidate_batches.served_from_batches():
        assert candidate_batches.submit(SOURCES[:1], lambda s: (lambda: None)) == ([], SOURCES[:1])
    assert candidate_batches.submit(SOURCES, lambda s: (lambda: None)) == ([], SOURCES)  # nothing would serve them
    assert candidate_batches._served == {}


def test_batches_hold_at_most_batch_size_candidates(monkeypatch):
    monkeypatch.setattr(candidate_batches, "BATCH_SIZE", 2)
    with candidate_batches.served_from_batches():
        batches, alone = candidate_batches.submit(SOURCES, lambda s: (lambda: None))
        assert [b.sources for b in batches] == [SOURCES[:2]] and alone == SOURCES[2:]
        assert len(candidate_batches._served) == 2
    assert candidate_batches._served == {}  # cleared when the compile ends


def test_a_batch_that_fails_leaves_each_candidate_to_its_own_build(caplog):
    broken = PREFIX + 'extern "C" void cpp_Candidate(const float* X, float* Y, const int64_t n) { undeclared; }\n'
    with caplog.at_level(logging.WARNING, logger="inductor_ext"), candidate_batches.served_from_batches():
        (batch,), _ = candidate_batches.submit([SOURCES[0], broken], _load_async)
        assert batch.view(0) is None and batch.view(1) is None
        good = CppCodeCache.load(SOURCES[0], device_type="cpu")  # built alone, as Inductor builds it
        with pytest.raises(Exception, match="undeclared") as failed:  # and the broken one fails as it would have
            CppCodeCache.load(broken, device_type="cpu")
    assert not isinstance(good, candidate_batches.LibraryView)
    assert torch.equal(_run(good), torch.linspace(-1, 1, 9) * 2.0)
    lines = [r.getMessage() for r in caplog.records if "did not build as one unit" in r.getMessage()]
    first = str(failed.value).splitlines()[0]  # the batch's compile failed with the same first line
    assert len(lines) == 1 and "2 C++ candidates" in lines[0] and f"(CppCompileError: {first})" in lines[0]


def test_only_inductors_own_loads_of_a_batched_source_are_served(monkeypatch):
    calls = []
    monkeypatch.setattr(CppCodeCache, "load", classmethod(lambda cls, *a, **k: calls.append((cls, a, k)) or "own"))
    with candidate_batches.served_from_batches():
        candidate_batches.submit(SOURCES[:2], lambda s: (lambda: "library"))
        assert isinstance(CppCodeCache.load(SOURCES[0], device_type="cpu"), candidate_batches.LibraryView)
        assert CppCodeCache.load(SOURCES[0], device_type="cpu", extra_flags=("-O0",)) == "own"
        assert CppCodeCache.load(SOURCES[2], device_type="cpu") == "own"
    assert [c[0] for c in calls] == [CppCodeCache, CppCodeCache]  # the two loads not served: Inductor's own


def test_inductors_own_load_is_back_after_and_when_a_compile_fails():
    assert_in_force_only_inside(CppCodeCache, "load", candidate_batches.served_from_batches)


def _build_all_submitting(monkeypatch, sources, submit=None):
    """``parallel_builds.build_all`` over ``sources`` inside ext's serving context, each library's
    build recorded instead of run; returns the sources handed to the compile pool."""
    from inductor_ext.lowering import parallel_builds

    handed: list[str] = []
    waited: list[str] = []
    monkeypatch.setattr(parallel_builds, "cpp_sources", lambda choices: list(sources))
    monkeypatch.setattr(parallel_builds, "_submitted",
                        lambda source: handed.append(source) or (lambda: waited.append(source)))
    if submit is not None:
        monkeypatch.setattr(candidate_batches, "submit", submit)
    with candidate_batches.served_from_batches():
        assert parallel_builds.build_all([object()]) == len(sources)
    return handed, waited  # handed to the pool; waited for before build_all returned


def test_a_decisions_candidates_go_to_the_pool_as_one_batch_and_the_rest_alone(monkeypatch):
    lone = PREFIX + '#define N 4\nextern "C" void cpp_C(float* Y) {}\n'
    handed, waited = _build_all_submitting(monkeypatch, [*SOURCES, lone])
    assert len(handed) == 2 and handed[1] == lone
    assert handed[0] == candidate_batches.batch_source(SOURCES)
    assert waited == handed  # both over before build_all returns (none runs beside the first timing)


def test_a_failed_batchs_candidates_go_to_the_pool_one_by_one(monkeypatch):
    failed = candidate_batches.Batch(SOURCES, get_library=lambda: (_ for _ in ()).throw(RuntimeError("g++")))
    handed, waited = _build_all_submitting(monkeypatch, SOURCES, submit=lambda sources, load_async: ([failed], []))
    assert handed == SOURCES  # side by side, before the first is timed (not one by one as each is timed)
    assert waited == SOURCES  # and over before build_all returns
