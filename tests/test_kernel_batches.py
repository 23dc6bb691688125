"""A graph's C++ kernels built a few to a compiler run (``lowering/kernel_batches``): each kernel
computes in a batch exactly what it computes built alone, a kernel whose source could change
meaning in a shared unit is built alone, a batch that fails to build falls back to one build per
kernel, and through a real compile each batch is built once and found on disk by the next load."""

import logging

import pytest
import torch
from torch._inductor import codecache
from torch._inductor.codecache import CppPythonBindingsCodeCache
from torch._inductor.utils import fresh_cache

from inductor_ext.lowering import kernel_batches
from inductor_ext.testing.patches import assert_in_force_only_inside

PREFIX = "#include <torch/csrc/inductor/cpp_prefix.h>\n"
# Two kernels define a helper of the same name (their namespaces keep them apart), one takes an
# int64_t, one a float, one uses Inductor's vector types.
DOUBLED = PREFIX + """
static inline float helper(float v) { return v * 2.0f; }
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0, const int64_t ks0)
{
    for (int64_t i = 0; i < ks0; ++i) { out_ptr0[i] = helper(in_ptr0[i]); }
}
"""
SHIFTED = PREFIX + """#include <c10/util/Unroll.h>
static inline float helper(float v) { return v + 1.0f; }
extern "C"
void kernel(const float* in_ptr0, float* out_ptr0, const float scale)
{
    for (int64_t i = 0; i < 5; ++i) { out_ptr0[i] = helper(in_ptr0[i]) * scale; }
}
"""
VECTOR = PREFIX + """
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0)
{
    using Vec = at::vec::Vectorized<float>;
    for (int64_t i = 0; i < 16; i += Vec::size()) { (Vec::loadu(in_ptr0 + i).exp() - Vec(1.0f)).store(out_ptr0 + i); }
}
"""
KERNELS = [
    (["const float*", "float*", "const int64_t"], DOUBLED),
    (["const float*", "float*", "const float"], SHIFTED),
    (["const float*", "float*"], VECTOR),
]


def _run(kernel, argtypes):
    x = torch.linspace(-2, 2, 16)
    out = torch.zeros(16)
    scalars = {"const int64_t": 7, "const float": 0.75}
    kernel(*[x if n == 0 else out if n == 1 else scalars[t] for n, t in enumerate(argtypes)])
    return out


def test_a_kernel_computes_in_a_batch_what_it_computes_built_alone():
    members = [kernel_batches.member(*k) for k in KERNELS]
    module = kernel_batches.start(members, submit_fn=None)()
    for i, (argtypes, source) in enumerate(KERNELS):
        alone = CppPythonBindingsCodeCache.load_pybinding(argtypes, source)
        batched = getattr(module, f"kernel_{i}")
        assert torch.equal(_run(batched, argtypes), _run(alone, argtypes))
    x = torch.linspace(-2, 2, 16)
    assert torch.equal(_run(module.kernel_0, KERNELS[0][0])[:7], x[:7] * 2)  # its own helper, not SHIFTED's
    with pytest.raises(RuntimeError, match="requires 3 args"):
        module.kernel_0(x, x)


def test_openmp_and_loop_pragmas_stay_in_a_batch():
    loop = '#pragma omp parallel\n#pragma omp for\nfor (int i = 0; i < 4; ++i) {\n#pragma GCC ivdep\n#pragma GCC unroll 4\nfor (;;) {}\n}'
    assert kernel_batches.member(["float*"], PREFIX + 'extern "C" void kernel(float* out_ptr0) {\n' + loop + '\n}\n')


def test_includes_are_hoisted_above_the_namespaces_once_each():
    source = kernel_batches.batch_source([kernel_batches.member(*k) for k in KERNELS])
    head, _, rest = source.partition("namespace ext_batch_0 {")
    assert head.count("#include <torch/csrc/inductor/cpp_prefix.h>") == 1
    assert "#include <c10/util/Unroll.h>" in head and "#include" not in rest.partition("// inductor_ext: Python")[0]
    assert 'extern "C"' not in source and source.count("void kernel(") == 3


@pytest.mark.parametrize("argtypes, source", [
    (["float*"], PREFIX + '#define N 4\nextern "C" void kernel(float* out_ptr0) {}\n'),  # a macro leaks
    (["float*"], PREFIX + '#undef N\nextern "C" void kernel(float* out_ptr0) {}\n'),
    (["float*"], PREFIX + '#pragma GCC optimize("O0")\nextern "C" void kernel(float* out_ptr0) {}\n'),
    (["float*"], PREFIX + ' # pragma GCC push_options\nextern "C" void kernel(float* out_ptr0) {}\n'),
    (["float*"], PREFIX + 'namespace at { int x; }\nextern "C" void kernel(float* out_ptr0) {}\n'),
    (["float*"], PREFIX + 'template <> struct S<int> {};\nextern "C" void kernel(float* out_ptr0) {}\n'),
    (["float*"], PREFIX + 'extern "C" void kernel(float* out_ptr0) {}\nextern "C" void other() {}\n'),
    (["float*"], PREFIX + 'extern "C" void kernel(float* out_ptr0) {}\nextern  "C"\nvoid other() {}\n'),
    (["float*"], PREFIX + 'extern "C" void entry(float* out_ptr0) {}\n'),  # not named kernel
    (["float*"], PREFIX + 'void kernel(float* out_ptr0) {}\n'),  # no C entry
    (["float*); system(\"x\"); (void"], PREFIX + 'extern "C" void kernel(float* out_ptr0) {}\n'),
])
def test_a_kernel_that_could_change_meaning_in_a_shared_unit_is_built_alone(argtypes, source):
    assert kernel_batches.member(argtypes, source) is None


def test_a_batch_that_fails_to_build_falls_back_to_one_build_per_kernel(caplog):
    broken = (["float*"], PREFIX + 'extern "C" void kernel(float* out_ptr0) { out_ptr0[0] = undeclared; }\n')
    batch = kernel_batches.Batch(submit_fn=None)
    batch.members += [kernel_batches.member(*k) for k in (KERNELS[0], broken)]
    with caplog.at_level(logging.WARNING, logger="inductor_ext"):
        good = batch.kernel(0)
        with pytest.raises(Exception, match="undeclared"):  # Inductor's own build of it fails as it would have
            batch.kernel(1)
    assert torch.equal(_run(good, KERNELS[0][0]), _run(CppPythonBindingsCodeCache.load_pybinding(*KERNELS[0]), KERNELS[0][0]))
    lines = [r.getMessage() for r in caplog.records if "did not build as one unit" in r.getMessage()]
    assert len(lines) == 1 and "2 C++ kernels" in lines[0]


@pytest.mark.parametrize("message, shown", [("g++ failed\nthe rest of its output", "(RuntimeError: g++ failed)"),
                                            ("", "(RuntimeError: )")])
def test_the_log_line_names_the_error_by_its_type_and_first_line(caplog, message, shown):
    batch = kernel_batches.Batch(submit_fn=None, members=[kernel_batches.member(*KERNELS[0])])

    def failed():
        raise RuntimeError(message)

    batch._get_module = failed
    with caplog.at_level(logging.WARNING, logger="inductor_ext"):
        kernel = batch.kernel(0)
    assert torch.equal(_run(kernel, KERNELS[0][0]), _run(CppPythonBindingsCodeCache.load_pybinding(*KERNELS[0]), KERNELS[0][0]))
    (line,) = [r.getMessage() for r in caplog.records if "did not build as one unit" in r.getMessage()]
    assert shown in line and "the rest" not in line


def test_a_batch_is_submitted_to_the_pool_it_is_given():
    import concurrent.futures

    submitted = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool, fresh_cache():
        def submit(task):
            submitted.append(task)
            return pool.submit(task)

        module = kernel_batches.start([kernel_batches.member(*KERNELS[2])], submit_fn=submit)()
        assert len(submitted) == 1  # built by the pool's worker, not inline when the module is asked for
        assert torch.equal(_run(module.kernel_0, KERNELS[2][0]),
                           _run(CppPythonBindingsCodeCache.load_pybinding(*KERNELS[2]), KERNELS[2][0]))


class _Built:
    """A stand-in batch module: its kernel_<i> is the name asked for."""

    def __getattr__(self, name):
        return name


def test_a_full_batch_starts_at_once_and_a_partial_one_when_a_kernel_is_asked_for(monkeypatch):
    started: list[int] = []
    monkeypatch.setattr(kernel_batches, "start", lambda members, submit_fn: started.append(len(members)) or _Built)
    gatherer = kernel_batches.Gatherer(submit_fn=None, size=2)
    m = kernel_batches.member(*KERNELS[0])
    getters = [gatherer.add(m) for _ in range(3)]
    assert started == [2]
    assert [getters[1](), getters[2]()] == ["kernel_1", "kernel_0"]  # the partial batch started when asked
    assert started == [2, 1]
    gatherer.add(m)  # a started batch takes no more members: a new one opens
    assert started == [2, 1]


def test_a_modules_last_partial_batch_starts_when_it_waits_not_when_a_kernel_is_asked_for(monkeypatch):
    # The module asks its kernels in order: had the partial batch waited for that, it would have
    # built after the full ones instead of beside them (~1.6 s more of the llama row's compile).
    import torch._inductor.config as inductor_config
    from torch._inductor.async_compile import AsyncCompile

    started: list[int] = []
    monkeypatch.setattr(kernel_batches, "start", lambda members, submit_fn: started.append(len(members)) or _Built)
    monkeypatch.setattr(kernel_batches, "BATCH_SIZE", 2)
    with inductor_config.patch(compile_threads=2), kernel_batches.served_in_batches():
        module = AsyncCompile()
        scope = {f"k{i}": module.cpp_pybinding(*KERNELS[i]) for i in range(3)}
        assert started == [2]
        module.wait({})  # nothing asked for yet
        assert started == [2, 1]
        module.wait(scope)
        assert started == [2, 1] and [scope[f"k{i}"] for i in range(3)] == ["kernel_0", "kernel_1", "kernel_0"]
        AsyncCompile().wait({})  # a module with no batchable kernel


def test_at_codegen_a_wrappers_kernels_gather_into_its_own_batches(monkeypatch):
    import torch._inductor.config as inductor_config
    from torch._inductor.async_compile import AsyncCompile

    started: list[tuple[int, object]] = []
    monkeypatch.setattr(kernel_batches, "start",
                        lambda members, submit_fn: started.append((len(members), submit_fn)) or _Built)
    monkeypatch.setattr(kernel_batches, "BATCH_SIZE", 2)

    class Wrapper:
        pass

    first, second = Wrapper(), Wrapper()
    with inductor_config.patch(compile_threads=2):
        assert kernel_batches.prefetch(first, *KERNELS[0]) and kernel_batches.prefetch(second, *KERNELS[1])
        assert started == []  # one kernel each: neither batch is full
        assert kernel_batches.prefetch(first, *KERNELS[2])
        assert kernel_batches.prefetch(first, ["float*"], PREFIX + '#define N 1\nextern "C" void kernel(float* p) {}') is False
    assert started == [(2, AsyncCompile.submit)]  # into Inductor's pool, as the module's own builds go


def _graph(x, y):  # four C++ kernels (three scans, a GEMM) on the cpu preset
    a = torch.cumsum(x, 0)
    b = torch.cumsum(a.t() * 2, 0)
    c = torch.cumsum(b.t().sin(), 1)
    d = (c @ y.t()).relu()
    e = torch.cumsum(d, 1).softmax(0)
    return a, e, d.sum(0) + 1


def test_through_a_compile_each_batch_is_built_once_and_the_next_load_finds_it(monkeypatch, kernel_builds):
    monkeypatch.setattr(kernel_batches, "BATCH_SIZE", 3)
    built = kernel_builds
    events: list[str] = []
    prefetch = kernel_batches.prefetch
    monkeypatch.setattr(kernel_batches, "prefetch", lambda *a: (events.append("gathered"), prefetch(*a))[1])
    load = codecache.PyCodeCache.load_by_key_path.__func__
    monkeypatch.setattr(codecache.PyCodeCache, "load_by_key_path",
                        classmethod(lambda cls, *a, **k: (events.append("module loaded"), load(cls, *a, **k))[1]))
    x, y = torch.randn(33, 17), torch.randn(9, 17)
    want = _graph(x, y)
    with fresh_cache():
        torch._dynamo.reset()
        got = torch.compile(_graph, backend="ext")(x, y)
        assert events.count("gathered") == 4 and events.index("module loaded") == 4
        assert len(built) == len(set(built)) == 2  # one full batch (started during codegen), one of 1
        assert all(open(p.replace(".so", ".cpp")).read().count("namespace ext_batch_") // 2 in (3, 1) for p in built)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        # A new process's load (Inductor's in-memory tables emptied): the same batches, from disk.
        torch._dynamo.reset()
        CppPythonBindingsCodeCache.cache_clear()
        got = torch.compile(_graph, backend="ext")(x, y)
        assert len(built) == 2
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_nothing_is_batched_where_inductor_compiles_inline():
    import torch._inductor.config as inductor_config
    from torch._inductor.async_compile import AsyncCompile

    with inductor_config.patch(compile_threads=1), kernel_batches.served_in_batches():
        assert kernel_batches.prefetch(object(), *KERNELS[0]) is False
        kernel = AsyncCompile().cpp_pybinding(*KERNELS[0])  # Inductor's inline build: a callable
    assert torch.equal(_run(kernel, KERNELS[0][0]), _run(CppPythonBindingsCodeCache.load_pybinding(*KERNELS[0]), KERNELS[0][0]))


def test_inductors_own_function_is_back_after_and_when_a_compile_fails():
    from torch._inductor.async_compile import AsyncCompile

    assert_in_force_only_inside(AsyncCompile, "cpp_pybinding", kernel_batches.served_in_batches)
    assert_in_force_only_inside(AsyncCompile, "wait", kernel_batches.served_in_batches)
