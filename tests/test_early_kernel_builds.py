"""A graph's C++ kernels start building as Inductor generates each (``lowering/early_kernel_builds``):
the module then waits for those builds instead of starting its own, so each kernel is built once,
and the compiled graph computes what eager does."""

import pytest
import torch
from torch._inductor import codecache
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.utils import fresh_cache

from inductor_ext.lowering import early_kernel_builds, kernel_batches
from inductor_ext.testing.patches import assert_in_force_only_inside

SOURCE = '\n#include "x.h"\nextern "C" void kernel(const float* in_ptr0, float* out_ptr0, const int64_t ks0)\n{\n}\n'
BODY = f"async_compile.cpp_pybinding(['const float*', 'float*', 'const int64_t'], r'''{SOURCE}''')\n"


def test_the_arguments_are_read_as_inductor_wrote_them():
    assert early_kernel_builds.kernel_build_args(BODY) == (["const float*", "float*", "const int64_t"], SOURCE)


@pytest.mark.parametrize("body", [
    "async_compile.triton('triton_poi_fused_0', '''\nimport triton\n''', device_str='cuda')",  # a GPU kernel
    'extern "C" void kernel(const float* in_ptr0) {}',  # a C++ wrapper's kernel: no module call
    "async_compile.cpp_pybinding(['const float*', name], r'''\nvoid kernel() {}\n''')",  # not a list of strings
    "async_compile.cpp_pybinding(['float*'], r'''\n''' + extra + r'''\n''')",  # more than one literal
    "async_compile.cpp(r'''\nvoid kernel() {}\n''')",
    "async_compile.cpp_pybinding(['float*'], r'''\nvoid kernel() {}\n''' )",  # not closed as Inductor closes it
    "async_compile.cpp_pybinding(['float*'])",
])
def test_a_definition_of_any_other_form_is_left_to_the_module(body):
    assert early_kernel_builds.kernel_build_args(body) is None


def test_each_kernel_starts_while_the_graph_is_generated_and_is_built_once(monkeypatch, kernel_builds):
    # kernels built alone (batches are tests/test_kernel_batches.py's)
    monkeypatch.setattr(kernel_batches, "member", lambda argtypes, source: None)
    built = kernel_builds
    events: list[str] = []
    start = early_kernel_builds.start_alone

    def spy_start(argtypes, source):
        started = start(argtypes, source)
        events.append("started" if started else "left")
        return started

    load = codecache.PyCodeCache.load_by_key_path.__func__

    def spy_load(cls, *args, **kwargs):
        events.append("module loaded")
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(early_kernel_builds, "start_alone", spy_start)
    monkeypatch.setattr(codecache.PyCodeCache, "load_by_key_path", classmethod(spy_load))

    def f(x, y):
        return (torch.sin(x) + y).relu().sum(dim=1), torch.cos(x * y) - 1.5

    x, y = torch.randn(33, 17), torch.randn(33, 17)
    torch._dynamo.reset()
    with fresh_cache():
        got = torch.compile(f, backend="ext")(x, y)
    want = f(x, y)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1.3e-6, atol=1e-5)
    started = events.count("started")
    assert started >= 1 and "left" not in events
    assert events.index("module loaded") > max(i for i, e in enumerate(events) if e == "started")
    assert len(built) == len(set(built)) == started  # the module found each build under way: none twice
    assert PythonWrapperCodegen.define_kernel is PythonWrapperCodegen.__dict__["define_kernel"]


def test_inductors_own_function_is_back_after_and_when_a_compile_fails():
    assert_in_force_only_inside(PythonWrapperCodegen, "define_kernel", early_kernel_builds.started_as_generated)


def test_nothing_starts_early_where_inductor_compiles_inline(monkeypatch):
    import torch._inductor.config as inductor_config

    submitted = []
    monkeypatch.setattr(codecache.CppPythonBindingsCodeCache, "load_pybinding_async",
                        classmethod(lambda cls, *a, **k: submitted.append((a, k))))
    with inductor_config.patch(compile_threads=1):
        assert early_kernel_builds.start_alone(*early_kernel_builds.kernel_build_args(BODY)) is False
    with inductor_config.patch(compile_threads=2):
        assert early_kernel_builds.start_alone(*early_kernel_builds.kernel_build_args(BODY)) is True
    # into Inductor's pool, as the module's own call submits it (not built inline when the module loads)
    assert submitted == [((["const float*", "float*", "const int64_t"], SOURCE), {"submit_fn": AsyncCompile.submit})]
