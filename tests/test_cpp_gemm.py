"""The cpu preset's C++ GEMM family (``templates/cpp/gemm.py`` + ``lowering/cpp_gemm.py``).

- the family as data: problems, refusals, configs per host ISA;
- Inductor's template through ext's choices on small odd shapes, fp32 and bf16: numerics against
  eager, every candidate timed against ATen, dumps naming the kernel's config, which is the one
  benchmarked; an offline build (``tune.build``) that stores real decisions, and a
  ``cache-only`` compile that reuses them with zero benchmarks;
- freezing's guard: a weight changed after the compile is never used stale;
- each micro-kernel at its register block's edges (M, N, K at 1, block-1, block, block+1,
  2*block+1) against float64.

Each graph is compiled once per module (fixtures), with Inductor's caches fresh.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import cpp_builder
from torch._inductor.codecache import CppCodeCache
from torch._inductor.utils import fresh_cache

from _logs import ext_log_lines, records_of

from inductor_ext import dumps, presets, tune
from inductor_ext.autotune import cache_layers, policy
from inductor_ext.autotune.cache import AutotuneCache, Entry
from inductor_ext.kernels import mkldnn_packed_ops
from inductor_ext.lowering import (cold_timing, cpp_gemm, decision_record, ext_choices, frozen_params, jinja_templates,
                                   opaque_constants, refusals)
from inductor_ext.lowering.prepared import Prepared
from inductor_ext.runtime import fresh_pages
from inductor_ext.templates import registry
from inductor_ext.templates.cpp import gemm
from inductor_ext.templates.family import OpSpec, TensorSpec

FP32 = "float32"


# ------------------------------------------------------------------------- the family as data


def _spec(op, a_shape, b_shape, dtype=FP32, constant=True, a_stride=None, scalars=None):
    a = TensorSpec(a_shape, a_stride or tuple(torch.empty(a_shape).stride()), dtype)
    b = TensorSpec(b_shape, tuple(torch.empty(b_shape).stride()), dtype, constant)
    out_shape = (*a_shape[:-1], b_shape[-1])
    out = TensorSpec(out_shape, tuple(torch.empty(out_shape).stride()), dtype)
    inputs = (TensorSpec((b_shape[-1],), (1,), dtype), a, b) if op == "addmm" else (a, b)
    return OpSpec(op, inputs, out, scalars or {}, "cpu")


def test_family_follows_the_protocol_and_claims_the_cpu_only():
    assert registry.get("cpp.gemm").module is gemm
    assert gemm.CHOICE_KIND == "inductor_template" and gemm.TARGETS == ("cpu",) and gemm.RUNS_ON_CPU


def test_cpu_preset_lists_only_families_that_run_on_the_cpu():
    config = presets.resolve({"preset": "cpu"})
    assert config.templates == ("cpp.gemm", "cpp.decode_attention", "cpp.flash_attention") and config.freezing \
        and config.autotune != "off"
    assert all(registry.get(f).runs_on_cpu for f in config.templates)


@pytest.mark.parametrize("op, a, b, expected", [
    ("mm", (1, 70), (70, 45), gemm.CppGemmProblem("mm", 1, 45, 70, constant_weight=True)),
    ("addmm", (6, 64), (64, 96), gemm.CppGemmProblem("addmm", 6, 96, 64, constant_weight=True)),
    ("bmm", (3, 5, 48), (3, 48, 16), gemm.CppGemmProblem("bmm", 5, 16, 48, batch=3)),
])
def test_problem_for_each_op(op, a, b, expected):
    assert gemm.problem_for(_spec(op, a, b)) == expected


@pytest.mark.parametrize("spec, why", [
    (_spec("mm", (4, 8), (8, 16), constant=False), "not a compile-time constant"),
    (_spec("mm", (4, 8), (8, 16), a_stride=(1, 4)), "A is not row-major"),
    (_spec("mm", (4, 8), (8, 16), dtype="float16"), "dtype float16 not in"),
    (_spec("_scaled_mm", (4, 8), (8, 16)), "serves mm, addmm, bmm, not _scaled_mm"),
])
def test_problem_for_refuses_with_a_reason(spec, why):
    reason = gemm.problem_for(spec)
    assert isinstance(reason, str) and why in reason, reason


def test_problem_for_refuses_a_weight_that_is_not_constant_saying_what_serves_it():
    assert gemm.problem_for(_spec("mm", (4, 8), (8, 16), constant=False)) == (
        "the weight is not a compile-time constant: the C++ GEMM template packs it once under freezing "
        "(inference under torch.no_grad() with the cpu preset); ATen serves training")


@pytest.mark.parametrize("dynamic, named", [((True, False), "K"), ((False, True), "N"), ((True, True), "K and N")])
def test_problem_for_refuses_a_symbolic_k_or_n_naming_it(dynamic, named):
    spec = _spec("mm", (4, 8), (8, 16))
    a, b = spec.inputs
    reason = gemm.problem_for(dataclasses.replace(spec, inputs=(a, dataclasses.replace(b, dynamic=dynamic))))
    assert reason == (f"{named} symbolic (dynamic shapes): Inductor's C++ GEMM template takes only M "
                      "(and bmm's batch) at run time")


@pytest.mark.parametrize("op, a, b, expected", [
    ("mm", (1, 70), (70, 45), gemm.CppGemmProblem("mm", 1, 45, 70, "bfloat16", constant_weight=True)),
    ("bmm", (3, 5, 48), (3, 48, 16), gemm.CppGemmProblem("bmm", 5, 16, 48, "bfloat16", batch=3)),
])
def test_problem_for_keeps_the_dtype(op, a, b, expected):
    assert gemm.problem_for(_spec(op, a, b, dtype="bfloat16")) == expected


@pytest.mark.parametrize("capability, amx, isas", [
    ("AVX512", True, ("amx", "avx512")), ("AVX512", False, ("avx512",)), ("AVX2", False, ("avx2",)),
    ("DEFAULT", False, ()),
])
def test_host_isas_as_torch_sees_the_cpu(monkeypatch, capability, amx, isas):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert gemm.host_isas() == isas


@pytest.mark.parametrize("isas, dtype, m, first_isas", [
    (("amx", "avx512"), "bfloat16", 64, ["amx"] * 4 + ["avx512"] * 3),
    (("amx", "avx512"), "bfloat16", 1, ["avx512"] * 3 + ["amx"] * 4),  # decode: vector kernels first
    (("amx", "avx512"), "bfloat16", 15, ["avx512"] * 3 + ["amx"] * 4),
    (("amx", "avx512"), "bfloat16", 16, ["amx"] * 4 + ["avx512"] * 3),  # an AMX tile's 16 rows filled
    (("amx", "avx512"), FP32, 64, ["avx512"] * 3),  # AMX here multiplies bf16 only
    (("avx2",), FP32, 8, ["avx2"] * 3),
    ((), FP32, 8, []),  # no micro-kernel for this CPU: ATen only
])
def test_configs_follow_the_host_isa(monkeypatch, isas, dtype, m, first_isas):
    monkeypatch.setattr(gemm, "host_isas", lambda: isas)
    found = gemm.configs(gemm.CppGemmProblem("mm", m, 64, 64, dtype), "cpu")
    assert [c.isa for c in found] == first_isas
    assert len(set(found)) == len(found)


def test_amx_needs_even_k_and_unit_alpha(monkeypatch):
    monkeypatch.setattr(gemm, "host_isas", lambda: ("amx", "avx512"))
    odd_k = gemm.CppGemmProblem("mm", 32, 64, 45, "bfloat16")
    assert {c.isa for c in gemm.configs(odd_k, "cpu")} == {"avx512"}
    scaled = gemm.CppGemmProblem("addmm", 32, 64, 64, "bfloat16", alpha=2.0)
    assert "alpha == 1" in gemm.refuse_config(scaled, gemm.CppGemmConfig("amx", 32, 16, 32), "cpu")


_AVX512 = {blocking: gemm.CppGemmConfig("avx512", *blocking) for blocking in ((8, 48, 1), (8, 32, 1), (16, 16, 1))}


@pytest.mark.parametrize("dtype, m, timed", [
    (FP32, 512, [(16, 16, 1)]),  # prefill: the measured winner alone
    (FP32, 16, [(16, 16, 1)]),
    (FP32, 1, [(8, 48, 1), (8, 32, 1)]),  # decode: 16 rows for one is padding
    (FP32, 4, [(8, 48, 1), (8, 32, 1), (16, 16, 1)]),  # not measured: every one is timed
    ("bfloat16", 1, [(8, 48, 1), (8, 32, 1), (16, 16, 1)]),
])
def test_micro_kernels_measured_to_lose_are_ruled_out(monkeypatch, dtype, m, timed):
    monkeypatch.setattr(gemm, "_native_bf16_dot", lambda: True)
    problem = gemm.CppGemmProblem("mm", m, 768, 768, dtype)
    kept = [b for b, c in _AVX512.items() if gemm.refuse_measured(problem, c, "cpu") is None]
    assert kept == timed
    for b, c in _AVX512.items():
        why = gemm.refuse_measured(problem, c, "cpu")
        assert why is None or f"M={m}" in why, why  # the reason names the size it rests on


def test_bf16_prefill_leaves_every_vector_micro_kernel_to_onednn_only_where_it_has_bf16_dot_products(monkeypatch):
    prefill = gemm.CppGemmProblem("mm", 512, 768, 768, "bfloat16")
    monkeypatch.setattr(gemm, "_native_bf16_dot", lambda: True)
    assert all("oneDNN" in gemm.refuse_measured(prefill, c, "cpu") for c in _AVX512.values())
    monkeypatch.setattr(gemm, "_native_bf16_dot", lambda: False)  # AMX hosts, or AVX-512 without BF16
    assert all(gemm.refuse_measured(prefill, c, "cpu") is None for c in _AVX512.values())
    avx2 = gemm.CppGemmProblem("mm", 512, 768, 768, FP32)  # not measured on AVX2: nothing ruled out
    assert all(gemm.refuse_measured(avx2, gemm.CppGemmConfig("avx2", *b), "cpu") is None for b in ((4, 24, 1), (8, 8, 1)))


def test_where_each_family_runs():
    on_cpu = presets.resolve({"templates": ["triton.gemm", "cpp.gemm"], "interpret": True})
    assert refusals.here(on_cpu, gemm.FAMILY, "cpu") is None
    # Triton kernels run on CPU tensors only as a GPU preset's, interpreted: the message says how.
    why = refusals.here(on_cpu, registry.get("triton.gemm"), "cpu").reason
    assert "options={'preset': 'hopper', 'interpret': True}" in why, why
    hopper = presets.resolve({"preset": "hopper", "interpret": True})
    assert refusals.here(hopper, registry.get("triton.gemm"), "cpu") is None
    assert refusals.here(hopper, gemm.FAMILY, "cpu") == refusals.Refusal("here", "cpp.gemm", "verified for cpu, not target sm_90a")


@pytest.mark.skipif(not gemm.host_isas(), reason="this CPU has neither AVX2 nor AVX-512: Inductor has no vector "
                    "micro-kernel for it, so there is no default to compare with")
def test_default_config_is_the_micro_kernel_inductor_picks_unasked():
    from types import SimpleNamespace

    from torch._inductor.sizevars import SizeVarAllocator
    from torch._inductor.virtualized import V

    picks = {}
    for n in (32000, 864):
        problem = gemm.CppGemmProblem("mm", 1, n, 288, constant_weight=True)
        with V.set_graph_handler(SimpleNamespace(sizevars=SizeVarAllocator())):  # as in a lowering
            config = cpp_gemm.default_config(gemm, Prepared(problem, (), None, {}), "cpu")
            unasked, pinned = cpp_gemm._micro_kernel(problem, None), cpp_gemm._micro_kernel(problem, config)
        assert type(pinned) is type(unasked) and pinned.register_blocking == unasked.register_blocking
        picks[n] = config
    # Inductor ranks blocks that divide N first: 32000 is no multiple of 48 (AVX-512) or 24 (AVX2).
    assert picks[32000].block_n != picks[864].block_n, picks


def test_configs_refuse_other_targets():
    with pytest.raises(ValueError, match="target 'sm_90a' is not one of"):
        gemm.configs(gemm.CppGemmProblem("mm", 1, 8, 8), "sm_90a")


# ------------------------------------------------------------------ the freezing guard, unit


def _static(t):
    torch._dynamo.mark_static_address(t, guard=False)
    return t


def _traced():
    def f(x, w, counter):
        counter.add_(1)  # an input the graph mutates itself (as a KV cache): never frozen
        return x @ w + counter

    return torch.fx.symbolic_trace(f)


def test_frozen_graph_is_recompiled_without_freezing_once_a_weight_changes(capfd):
    x, w, counter = torch.randn(2, 3), _static(torch.randn(3, 4)), _static(torch.zeros(4))
    compiles = []

    def compile(gm, inputs, freeze):
        compiles.append((freeze, len(inputs)))
        return gm

    run = frozen_params.compile_frozen(_traced(), [x, w, counter], compile)
    assert compiles == [(True, 1)]  # w and counter became attributes of the frozen graph
    for _ in range(3):  # the graph's own mutations of counter are not a change of weights
        run(x, w, counter)
    assert compiles == [(True, 1)]
    w.mul_(2)  # e.g. an optimizer step
    want = x @ w + counter + 1
    torch.testing.assert_close(run(x, w, counter), want)
    assert compiles == [(True, 1), (False, 3)]
    assert "recompiling it without freezing" in capfd.readouterr().err  # ext's logger writes to stderr
    other = torch.randn(3, 4)
    want = x @ other + counter + 1
    torch.testing.assert_close(run(x, other, counter), want)  # the thawed graph from now on
    assert len(compiles) == 2


def test_graphs_that_communicate_are_not_frozen():
    def gather(x, w):
        return torch.ops._c10d_functional.all_gather_into_tensor(w, 2, "0") @ x

    x, w = torch.randn(4, 3), _static(torch.randn(2, 4))
    compiles = []
    frozen_params.compile_frozen(torch.fx.symbolic_trace(gather), [x, w], lambda g, i, freeze: compiles.append(freeze))
    assert compiles == [False]  # parameters gathered at run time are no constants to fold
    assert not frozen_params.has_collectives(torch.fx.symbolic_trace(lambda x, w: x @ w))


def test_replaced_weight_counts_as_changed():
    x, w = torch.randn(2, 3), _static(torch.randn(3, 4))
    compiles = []

    def compile(gm, inputs, freeze):
        compiles.append(freeze)
        return gm

    run = frozen_params.compile_frozen(torch.fx.symbolic_trace(lambda x, w: x @ w), [x, w], compile)
    run(x, w)
    run(x, _static(w.clone()))  # same values, another tensor: the frozen one is not it
    assert compiles == [True, False]


def test_the_warning_names_the_changed_input_and_the_way_out():
    x, w, bias = torch.randn(2, 3), _static(torch.randn(3, 4)), _static(torch.randn(4))
    run = frozen_params.compile_frozen(torch.fx.symbolic_trace(lambda x, w, bias: x @ w + bias), [x, w, bias],
                                       lambda g, i, freeze: g)
    run(x, w, bias)
    bias.add_(1)  # the second of two frozen weights: the message names its position, not the first's
    with ext_log_lines() as lines:
        torch.testing.assert_close(run(x, w, bias), x @ w + bias)
    assert ("ext: input 2 of a graph compiled with freezing changed after compiling (an optimizer step or "
            "load_state_dict?); recompiling it without freezing. Pass options={'freezing': False} to skip the "
            "frozen compile when weights keep changing.") in lines


def test_graphs_calling_what_has_no_module_name_are_no_collectives():
    assert not hasattr(torch.Tensor.add, "__module__")  # a method descriptor, as a call target
    graph = torch.fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    graph.output(graph.call_function(torch.Tensor.add, (x, y)))
    assert not frozen_params.has_collectives(torch.fx.GraphModule(torch.nn.Module(), graph))


def test_nested_inputs_are_left_to_inductors_own_freezing():
    gm = torch.fx.symbolic_trace(lambda x, ws: x @ ws[0])
    inputs, calls, compiled = [torch.randn(2, 3), [_static(torch.randn(3, 4))]], [], object()
    run = frozen_params.compile_frozen(gm, inputs, lambda g, i, freeze: calls.append((g, i, freeze)) or compiled)
    assert run is compiled and len(calls) == 1
    assert calls[0][0] is gm and calls[0][1] is inputs and calls[0][2] is True


class _Attributed(torch.nn.Module):
    """What Dynamo hands a backend when Inductor's freezing was on while it traced: the weight
    and a buffer the graph mutates itself are attributes of the graph, not inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))
        self.register_buffer("counter", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.counter.add_(1)
        return x @ self.w + self.counter


def test_attributes_installed_by_dynamo_are_watched_too(capfd):
    gm = torch.fx.symbolic_trace(_Attributed())
    x, compiles = torch.randn(2, 3), []

    def compile(g, inputs, freeze):
        compiles.append((freeze, len(inputs)))
        return g

    run = frozen_params.compile_frozen(gm, [x], compile)
    for _ in range(3):  # the graph's own mutations of the buffer are not a change of weights
        run(x)
    assert compiles == [(True, 1)]
    with torch.no_grad():
        gm.w.mul_(2)  # e.g. an optimizer step
    torch.testing.assert_close(run(x), x @ gm.w + gm.counter)
    assert compiles == [(True, 1), (False, 1)]
    assert "frozen attribute 0 of a graph compiled with freezing changed" in capfd.readouterr().err


def test_replaced_attribute_storage_counts_as_changed():
    gm = torch.fx.symbolic_trace(_Attributed())
    compiles = []
    run = frozen_params.compile_frozen(gm, [torch.randn(2, 3)], lambda g, i, freeze: compiles.append(freeze) or g)
    gm.w.data = gm.w.detach().clone()  # same values and version, another storage
    run(torch.randn(2, 3))
    assert compiles == [True, False]


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x) * self.scale


def test_users_own_freezing_never_serves_a_stale_weight(capfd):
    """Inductor's freezing on in the user's config (as PyTorch's CPU tutorials set it): Dynamo
    installs weights and buffers as attributes, and one changed in place still reaches the output,
    then and after (the recompiled graph reads them as they are)."""
    torch.manual_seed(0)
    m = _Scaled().eval()
    x = torch.randn(4, 16)
    torch._dynamo.reset()
    with torch._inductor.config.patch(freezing=True), tune.fresh_inductor_caches(), torch.no_grad():
        compiled = torch.compile(m, backend="ext", options={"autotune": "off"})
        torch.testing.assert_close(compiled(x), m(x))
        m.mlp[0].weight.add_(1.0)
        torch.testing.assert_close(compiled(x), m(x))
        m.scale.mul_(3.0)
        torch.testing.assert_close(compiled(x), m(x))
    assert "frozen attribute" in capfd.readouterr().err


# ------------------------------------------------------------- compiled through ext's choices


class Net(torch.nn.Module):
    """Odd sizes: K=70 is not a multiple of any register block; N=45 and 33 need padding."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(70, 45)  # addmm
        self.down = torch.nn.Linear(45, 33, bias=False)  # mm
        self.mix = torch.nn.Parameter(torch.randn(2, 33, 24) / 33**0.5)  # bmm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(F.relu(self.up(x)))
        return torch.bmm(h.view(2, -1, 33), self.mix)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Net().eval()


def inputs() -> tuple[torch.Tensor]:
    return (torch.randn(6, 70, generator=torch.Generator().manual_seed(1)),)


def _compile(m, args, options):
    options = {"autotune": "quick", **options}  # the timed path (the cpu preset's default times nothing)
    torch._dynamo.reset()
    counters.clear()
    first = len(decision_record.decisions)
    with tune.fresh_inductor_caches(), torch.no_grad():
        compiled = torch.compile(m, backend="ext", options=options)
        out = compiled(*args)
    return compiled, out, decision_record.decisions[first:], counters["inductor"]["select_algorithm_autotune"]


@pytest.fixture(scope="module")
def fewer_configs():
    """Two micro-kernels per problem: enough to choose among, fewer C++ compiles."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(policy.EFFORT_BUDGET, "quick", 2)
        mp.setitem(policy.EFFORT_BUDGET, "full", 2)
        yield


@pytest.fixture(scope="module")
def built(tmp_path_factory, fewer_configs):
    """``inductor-ext tune build`` on CPU for Net, then a cache-only compile whose cache names
    the template as every winner (so its path runs from the cache)."""
    out = tmp_path_factory.mktemp("cpp_tune")
    # the build's CPU timings (lowering/cold_timing.py): flushed, or a decode-shaped GEMM's streamed
    flushed, timed, streamed = [], cold_timing.timing, cold_timing.streamed_timing
    first_loads, load_async = {}, CppCodeCache.load_async.__func__  # each template source's first load: async?

    def noting_load(cls, source, *args, **kwargs):
        if cpp_gemm.MARKER in source:
            first_loads.setdefault(source, kwargs.get("submit_fn") is not None)
        return load_async(cls, source, *args, **kwargs)

    with_pch, build = {}, cpp_builder.CppBuilder.build  # each template source's build: with the prefix PCH?

    def noting_build(self):
        paths = [Path(p) for p in self._sources_args.split() if p.endswith(".cpp")]
        text = "".join(p.read_text() for p in paths if p.exists())
        if cpp_gemm.MARKER in text:
            with_pch.setdefault(text, "precompiled_headers" in self.get_command_line())
        return build(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cold_timing, "timing", lambda fn, flush, *a: flushed.append(fn) or timed(fn, flush, *a))
        mp.setattr(cold_timing, "streamed_timing", lambda calls, *a: flushed.append(calls) or streamed(calls, *a))
        mp.setattr(CppCodeCache, "load_async", classmethod(noting_load))
        mp.setattr(cpp_builder.CppBuilder, "build", noting_build)
        mp.setattr(jinja_templates, "_compiled", {})  # the sources this build's kernels were rendered from
        cache = tune.build("test_cpp_gemm:model", out / "built.db", inputs_spec="test_cpp_gemm:inputs", progress=False)
        jinja_sources = len(jinja_templates._compiled)
    forced = AutotuneCache(out / "template.db")
    for entry in cache.entries():  # the first template candidate of the build's decision, as winner
        if entry.key.op == "mm":  # ...but MKL's packed sgemm, the ATen side's own choice, for the mm
            forced.put(dataclasses.replace(entry, winner="aten", config={"name": "ext_mkl_packed_mm"}))
            continue
        decision = next(d for d in decision_record.decisions if d.key == entry.key)
        config = next(c["config_dict"] for c in decision.candidates if c["kind"] == "template")
        forced.put(dataclasses.replace(entry, winner="cpp.gemm", config=config))
    m, args = model(), inputs()
    _, out_cached, decisions, benchmarks = _compile(copy.deepcopy(m), args, {
        "autotune": "cache-only", "autotune_cache": str(out / "template.db"), "dump_dir": str(out / "dump")})
    with torch.no_grad():
        want = m(*args)
    return {"cache": cache, "flushed": len(flushed), "jinja_sources": jinja_sources, "first_loads": first_loads,
            "with_pch": with_pch, "out": out_cached, "want": want,
            "decisions": decisions, "benchmarks": benchmarks, "index": dumps.read_index(out / "dump"), "dir": out,
            "code": _output_code(out / "dump")}


def _output_code(dump_dir):
    return "\n".join(p.read_text() for p in dump_dir.rglob("*.py"))


def test_build_stores_a_timed_decision_per_gemm(built):
    entries = built["cache"].entries()
    assert sorted(e.key.op for e in entries) == ["addmm", "bmm", "mm"]
    for e in entries:
        timed = {c["name"] for c in e.candidates if c["time_us"] is not None}
        # ATen's op, MKL's packed sgemm for the frozen fp32 x @ weight (with its bias: addmm), the templates
        aten = {e.key.op, f"ext_mkl_packed_{e.key.op}"} if e.key.op in ("mm", "addmm") else {e.key.op}
        assert {n for n in timed if not n.startswith("cpp_")} == aten, e.candidates
        assert any(n.startswith("cpp_") for n in timed), e.candidates
        assert e.winner in ("aten", "cpp.gemm")
        # or, on a machine busy enough that the OS set a time, flagged (autotune/decide.py, issue 29)
        disturbed = e.reason.startswith("fallback: every timed")  # then no time is compared with ATen's
        assert e.reason.startswith("benchmark") or disturbed or e.reason.startswith("fallback: flushed and warm")
        assert (e.aten_time_us is None) is disturbed
        assert e.key.arch == "cpu" and e.key.preset == "cpu"
        # the bmm's output is Net's: fresh memory in every call, and timed so (lowering/returned_outputs.py)
        assert e.key.returned is (e.key.op == "bmm" and fresh_pages.supported()), e.key


def test_build_leaves_a_file_that_is_the_whole_cache(built, tmp_path):
    import shutil

    shutil.copy(built["dir"] / "built.db", tmp_path / "shipped.db")  # without its -wal, as users copy it
    with AutotuneCache(tmp_path / "shipped.db") as shipped:
        assert len(shipped) == len(built["cache"]) == 3


def test_build_times_every_candidate_with_flushed_caches_or_streamed_weights(built):
    timed = sum(c["time_us"] is not None for e in built["cache"].entries() for c in e.candidates)
    assert built["flushed"] >= timed > 0, (built["flushed"], timed)


def test_build_compiles_each_decisions_candidates_side_by_side_before_timing(built):
    """Inductor skips its parallel precompile on Python 3.11.0-3.11.8 (lowering/parallel_builds.py):
    every template candidate's C++ is handed to its compile pool before the first is timed."""
    assert built["first_loads"] and all(built["first_loads"].values()), built["first_loads"].values()


def test_build_compiles_candidates_with_inductors_precompiled_prefix_header(built):
    """Parsing cpp_prefix.h was most of each candidate's build; Inductor's own kernels use its
    precompiled copy, and so do the candidates (lowering/parallel_builds.py)."""
    assert built["with_pch"] and all(built["with_pch"].values()), list(built["with_pch"].values())


def test_build_compiles_a_decisions_candidates_a_few_to_a_compiler_run(built):
    """Each g++ run also pays ~0.6 s for cpp_prefix.h's pending template instantiations; a
    decision's candidates share runs (lowering/candidate_batches.py)."""
    assert any("namespace ext_candidate_1 {" in text for text in built["with_pch"]), len(built["with_pch"])


def test_build_renders_its_cpp_kernels_from_templates_compiled_once(built):
    assert built["jinja_sources"] > 0  # lowering/jinja_templates.py was in place for the build's compiles


def test_build_also_times_every_candidate_warm(built):
    keys = {e.key for e in built["cache"].entries()}
    made = [d for d in decision_record.decisions if d.key in keys and d.reason != "cache"]
    timed = [c for d in made for c in d.candidates if c["time_us"] is not None]
    assert timed and all(c.get("warm_time_us") is not None for c in timed), timed


def test_inductors_own_micro_kernel_is_timed_as_the_default(built):
    """Another micro-kernel must beat Inductor's pick by the margin (ext_choices), so the pick is
    always timed, even beyond the effort's budget (two configs in this module)."""
    keys = {e.key for e in built["cache"].entries()}
    made = [d for d in decision_record.decisions if d.key in keys and d.reason != "cache"]
    assert len(made) == 3, made
    for d in made:
        defaults = [c for c in d.candidates if c.get("default")]
        assert len(defaults) == 1 and defaults[0]["family"] == "cpp.gemm", d.candidates
        assert defaults[0]["time_us"] is not None, d.candidates


def test_cache_only_compile_benchmarks_nothing_and_runs_the_template(built):
    assert built["benchmarks"] == 0
    assert len(built["decisions"]) == 3
    for d in built["decisions"]:
        want = "ext_mkl_packed_mm" if d.op == "mm" else "cpp_"
        assert d.reason == "cache" and d.winner.startswith(want), d
    # MKL's packed sgemm as Inductor's own pass makes it: the weight packed at compile time, a constant
    assert "torch.ops.mkl._mkl_linear.default(" in built["code"] and "ext_mkl_packed_mm(" not in built["code"]
    torch.testing.assert_close(built["out"], built["want"], rtol=1e-5, atol=1e-5)


def test_weight_packed_at_compile_time_is_never_used_stale(built):
    """The packed copy is a constant of the frozen graph: a weight changed in place after
    compiling must reach the output all the same."""
    m, args = model(), inputs()
    compiled, _, decisions, _ = _compile(m, args, {"autotune": "cache-only",
                                                   "autotune_cache": str(built["dir"] / "template.db")})
    assert [d.winner for d in decisions if d.op == "mm"] == ["ext_mkl_packed_mm"]
    with torch.no_grad():
        m.down.weight.mul_(-2.0)
        torch.testing.assert_close(compiled(*args), m(*args), rtol=1e-5, atol=1e-5)


def test_a_graph_compiled_before_the_build_is_not_reused_after_it(built, tmp_path):
    """A cache-only compile against an empty cache falls back to ATen; once the entries are
    there, the next compile must use them, not Inductor's FX-cached graph of the first."""
    m, args = model(), inputs()
    options = {"autotune": "cache-only", "autotune_cache": str(tmp_path / "late.db")}
    reasons = []
    # one Inductor cache for both compiles, its FX graph cache on as a user's is by default
    with tune.fresh_inductor_caches(), torch._inductor.config.patch(fx_graph_cache=True), torch.no_grad():
        for fill in (False, True):
            if fill:  # e.g. `inductor-ext tune build` run in between
                with AutotuneCache(tmp_path / "late.db") as late:
                    for entry in AutotuneCache(built["dir"] / "template.db").entries():
                        late.put(entry)
            torch._dynamo.reset()
            first = len(decision_record.decisions)
            torch.compile(copy.deepcopy(m), backend="ext", options=options)(*args)
            reasons.append(sorted(d.reason for d in decision_record.decisions[first:]))
    assert reasons == [["fallback: cache-only and no cache entry"] * 3, ["cache"] * 3]


def test_a_cached_graph_never_serves_another_models_packed_weights(built, tmp_path):
    """A frozen graph's packed weights are constants of its FX-cached entry. Another model of the
    same shapes (a new checkpoint in the next process) must not be served them; the same weights
    again are, from the cache."""
    m, args = model(), inputs()
    other = copy.deepcopy(m)
    with torch.no_grad():
        for p in other.parameters():
            p.copy_(torch.randn_like(p))
    templates = AutotuneCache(tmp_path / "templates.db")
    for entry in AutotuneCache(built["dir"] / "built.db").entries():  # a template for every GEMM: all cacheable
        decision = next(d for d in decision_record.decisions if d.key == entry.key)
        config = next(c["config_dict"] for c in decision.candidates if c["kind"] == "template")
        templates.put(dataclasses.replace(entry, winner="cpp.gemm", config=config))
    options = {"autotune": "cache-only", "autotune_cache": str(tmp_path / "templates.db")}
    hits = []
    with tune.fresh_inductor_caches(), torch._inductor.config.patch(fx_graph_cache=True), torch.no_grad():
        for weights in (m, other, m):
            torch._dynamo.reset()
            before = counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]
            first = len(decision_record.decisions)
            compiled = torch.compile(copy.deepcopy(weights), backend="ext", options=options)
            torch.testing.assert_close(compiled(*args), weights(*args), rtol=1e-5, atol=1e-5)
            hits.append(counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]
                        > before)
            if not hits[-1]:  # compiled here: with a packed template weight, what the cache would hold
                assert any(d.winner.startswith("cpp_") for d in decision_record.decisions[first:])
    assert hits == [False, False, True]


def _compile_unpicklable(m, args, cache, dump, caplog):
    """A cache-only compile of a graph that holds a weight packed as an opaque tensor, with
    Inductor's FX graph cache on as a user has it (empty: the graph is compiled, then saved).
    Inductor could not pickle it (the graph is not cached) and said nothing of it; ext's log says
    why instead. The output, the decisions and the benchmarks run."""
    torch._dynamo.reset()
    counters.clear()
    first = len(decision_record.decisions)
    with records_of(caplog, opaque_constants.INDUCTOR_CACHE_LOGGER, logging.WARNING), ext_log_lines() as ext_lines, \
            fresh_cache(), torch._inductor.config.patch(fx_graph_cache=True), torch.no_grad():
        got = torch.compile(copy.deepcopy(m), backend="ext", options={
            "autotune": "cache-only", "autotune_cache": str(cache), "dump_dir": str(dump)})(*args)
    assert counters["inductor"]["fxgraph_cache_pickle_error"] == 1
    assert opaque_constants.UNSERIALIZABLE not in [r.getMessage() for r in caplog.records]
    assert any(line.startswith("graph not saved in Inductor's FX graph cache") for line in ext_lines), ext_lines
    return got, decision_record.decisions[first:], counters["inductor"]["select_algorithm_autotune"]


def test_a_linear_with_its_bias_served_by_mkls_packed_gemm_adds_the_bias(built, tmp_path, caplog):
    """The addmm's winner set to MKL's packed GEMM: the graph calls ``mkl::_mkl_linear`` with the
    weight packed at compile time and the bias as a constant row, and adds it. MKL's packed weight
    is an opaque tensor as oneDNN's is: Inductor's FX graph cache (on, as a user has it) cannot
    pickle the graph, and ext says so in one line instead of Inductor's traceback."""
    with AutotuneCache(tmp_path / "packed.db") as packed:
        for entry in built["cache"].entries():
            if entry.key.op == "addmm":
                entry = dataclasses.replace(entry, winner="aten", config={"name": "ext_mkl_packed_addmm"})
            packed.put(entry)
    m, args = model(), inputs()
    got, decisions, benchmarks = _compile_unpicklable(m, args, tmp_path / "packed.db", tmp_path / "dump", caplog)
    with torch.no_grad():
        torch.testing.assert_close(got, m(*args), rtol=1e-5, atol=1e-5)
    addmm = next(d for d in decisions if d.op == "addmm")
    assert addmm.winner == "ext_mkl_packed_addmm" and addmm.reason == "cache" and benchmarks == 0
    code = _output_code(tmp_path / "dump")
    calls = [line for line in code.splitlines() if "torch.ops.mkl._mkl_linear.default(" in line]
    biases = [line.rstrip(")").split(",")[-2].strip() for line in calls]
    # the mm keeps the build's decision, which may itself be MKL's packed GEMM (no bias): one call
    # without a bias per such mm, and the addmm's call with its bias
    packed_mms = sum(d.op == "mm" and d.winner == "ext_mkl_packed_mm" for d in decisions)
    assert biases.count("None") == packed_mms and len(biases) - packed_mms == 1, calls


def test_dump_shows_the_cached_configs(built):
    served = [k for k in built["index"]["kernels"] if k["template"] == "cpp.gemm"]
    assert len(served) == 2, [k["kernel"] for k in built["index"]["kernels"]]  # addmm, bmm (mm: MKL)
    for k in served:
        assert set(k["config"]) == {f.name for f in dataclasses.fields(gemm.CppGemmConfig)}
        assert k["decision"]["reason"] == "cache"
        source = (built["dir"] / "dump" / k["file"]).read_text()
        assert source.lstrip().startswith("// inductor_ext template: cpp.gemm")
        _assert_register_block(source, k["config"])
    assert any(loc.endswith("test_cpp_gemm.py:" + str(_line("h = self.down"))) for k in served for loc in k["user_source"])


def _assert_register_block(source, config):
    """The C++ Inductor rendered uses the config's micro-kernel (not one Inductor picked)."""
    for name, key in (("Mr", "block_m"), ("Nr", "block_n"), ("Kr", "block_k")):
        assert f"constexpr int64_t {name} = {config[key]};" in source, (name, config)


def _line(text):
    return next(i for i, line in enumerate(open(__file__).read().splitlines(), 1) if text in line)


class DecodeNet(torch.nn.Module):
    """bf16 at decode size: M=1 through a linear with bias and one without, a bmm of activations."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 96)  # addmm
        self.head = torch.nn.Linear(64, 40, bias=False)  # mm

    def forward(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.proj(x), torch.bmm(q, k), self.head(x)


@pytest.fixture(scope="module")
def forced_bf16(tmp_path_factory, fewer_configs):
    """DecodeNet in bf16 with the template forced, then a weight changed in place and run again."""
    out = tmp_path_factory.mktemp("cpp_bf16")
    torch.manual_seed(0)
    m = DecodeNet().eval().to(torch.bfloat16)
    g = torch.Generator().manual_seed(2)
    args = (torch.randn(1, 64, generator=g).bfloat16(), torch.randn(4, 3, 32, generator=g).bfloat16(),
            torch.randn(4, 32, 5, generator=g).bfloat16())
    with pytest.MonkeyPatch.context() as mp:  # every micro-kernel "measured to lose": forcing still offers them
        mp.setattr(gemm, "RULED_OUT_M", 1)
        mp.setattr(gemm, "_native_bf16_dot", lambda: True)
        compiled, got, decisions, _ = _compile(m, args, {"force_template": "cpp.gemm", "dump_dir": str(out)})
    reference = copy.deepcopy(m).float()
    with torch.no_grad():
        want = reference(*(a.float() for a in args))
        m.proj.weight.mul_(-1)  # what an optimizer step does to a frozen weight
        reference.proj.weight.mul_(-1)
        after = compiled(*args)
        want_after = reference(*(a.float() for a in args))
    return {"got": got, "want": want, "after": after, "want_after": want_after, "decisions": decisions,
            "index": dumps.read_index(out), "dir": out}


def _assert_bf16_close(got, want):
    # bf16 in and out, fp32 accumulation: within bf16 rounding of the fp32 result
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w, rtol=2**-7, atol=2**-6)


def test_bf16_template_matches_an_fp32_reference(forced_bf16):
    _assert_bf16_close(forced_bf16["got"], forced_bf16["want"])


def test_forced_template_serves_every_gemm_and_was_timed_against_aten(forced_bf16):
    decisions = forced_bf16["decisions"]
    assert sorted(d.op for d in decisions) == ["addmm", "bmm", "mm"]
    for d in decisions:
        assert d.reason == "force_template=cpp.gemm" and d.winner.startswith("cpp_"), d
        kinds = {c["kind"] for c in d.candidates if c["time_us"] is not None}
        assert kinds == {"aten", "template"}, d.candidates
    mm = next(d for d in decisions if d.op == "mm")
    aten = {c["name"] for c in mm.candidates if c["kind"] == "aten" and c["time_us"] is not None}
    # oneDNN's packed linear for the frozen bf16 weight, where oneDNN has bf16 GEMMs
    assert aten == {"mm", "ext_mkldnn_packed_mm"} if mkldnn_packed_ops.available() else {"mm"}, mm.candidates


def test_dumped_config_is_the_one_benchmarked(forced_bf16):
    kernels = forced_bf16["index"]["kernels"]
    frozen = min(k["graph"] for k in kernels)  # the first compile (a later one is the thawed graph)
    served = [k for k in kernels if k["template"] == "cpp.gemm" and k["graph"] == frozen]
    assert len(served) == 3
    for k in served:
        d = k["decision"]
        winner = next(c for c in d["candidates"] if c["name"] == d["winner"])
        assert k["config"] == winner["config_dict"], (k["config"], winner)
        assert winner["time_us"] is not None
        _assert_register_block((forced_bf16["dir"] / k["file"]).read_text(), k["config"])


def test_changed_weight_is_never_used_stale(forced_bf16):
    _assert_bf16_close(forced_bf16["after"], forced_bf16["want_after"])
    assert not torch.allclose(forced_bf16["after"][0].float(), forced_bf16["want"][0], rtol=2**-7, atol=2**-6)
    # The graph recompiled without freezing: the weight is no constant, ATen serves the linear.
    thawed = [k for k in forced_bf16["index"]["kernels"] if k["graph"] != min(k["graph"] for k in
                                                                            forced_bf16["index"]["kernels"])]
    linear = next(k for k in thawed if (k["decision"] or {}).get("problem", {}).get("op") == "addmm")
    assert "not a compile-time constant" in linear["decision"]["reason"]


@pytest.mark.skipif(not mkldnn_packed_ops.available(), reason="oneDNN has no bf16 GEMM on this CPU (needs AVX-512 or AMX bf16)")
def test_cache_only_compile_serves_onednns_packed_linear(forced_bf16, tmp_path, caplog):
    """A cache naming oneDNN's packed linear as the bf16 mm's winner: the compiled graph calls it
    on the weight reordered at compile time (a graph constant) and matches an fp32 reference."""
    mm = next(d for d in forced_bf16["decisions"] if d.op == "mm")
    with AutotuneCache(tmp_path / "onednn.db") as cache:
        cache.put(Entry(key=mm.key, winner="aten", config={"name": "ext_mkldnn_packed_mm"}, winner_time_us=1.0,
                        aten_time_us=1.0, candidates=[], reason="benchmark"))
    torch.manual_seed(0)
    m = DecodeNet().eval().to(torch.bfloat16)
    args = (torch.randn(1, 64).bfloat16(), torch.randn(4, 3, 32).bfloat16(), torch.randn(4, 32, 5).bfloat16())
    got, decisions, benchmarks = _compile_unpicklable(m, args, tmp_path / "onednn.db", tmp_path / "dump", caplog)
    assert [(d.winner, d.reason) for d in decisions if d.op == "mm"] == [("ext_mkldnn_packed_mm", "cache")]
    assert benchmarks == 0
    code = _output_code(tmp_path / "dump")  # reordered at compile time, as Inductor's own pass does
    assert "torch.ops.mkldnn._linear_pointwise.default(" in code and "ext_mkldnn_packed_mm(" not in code
    with torch.no_grad():
        want = copy.deepcopy(m).float()(*(a.float() for a in args))
    _assert_bf16_close(got, want)


class Prefill(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 96, bias=False)  # Inductor picks 8x48 for 16x96x32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


@pytest.mark.skipif("avx512" not in gemm.host_isas(), reason="the micro-kernels ruled out were measured on AVX-512 "
                    "hosts; on this CPU every one is timed")
def test_prefill_gemm_builds_and_times_only_the_micro_kernel_not_ruled_out(tmp_path, caplog):
    torch.manual_seed(0)
    m, x = Prefill().eval(), torch.randn(16, 32, generator=torch.Generator().manual_seed(3))
    with caplog.at_level("INFO", logger="inductor_ext.autotune"):
        _, got, decisions, _ = _compile(m, (x,), {"autotune_cache": str(tmp_path / "autotune.db")})
    with torch.no_grad():
        torch.testing.assert_close(got, m(x), rtol=1e-5, atol=1e-5)
    (decision,) = decisions
    templates = [c for c in decision.candidates if c["kind"] == "template"]
    # Inductor's own pick (8x48 here) is ruled out too: it is neither built nor timed
    assert [(c["config_dict"]["block_m"], c["config_dict"]["block_n"]) for c in templates] == [(16, 16)], templates
    assert templates[0]["time_us"] is not None and not templates[0].get("default")
    assert "(measured: " in caplog.text and "ran 1.1-2.1x faster" in caplog.text, caplog.text
    assert "block_m=8, block_n=48" in caplog.text, caplog.text  # Inductor's pick, ruled out


def test_lowering_module_imports_on_its_own():
    """Importing Inductor's cpp_micro_gemm before the rest of Inductor is a circular import in
    2.15; the glue module imports in a fresh process all the same."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import inductor_ext.lowering.cpp_gemm"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------------------ at the micro-kernel's edges


def _edges(block, step=1):
    """1, block-1, block, block+1 and 2*block+1 (in ``step``s: AMX takes K in pairs, so there
    2, block-2, block, block+2 and 2*block+2)."""
    return sorted({s for s in (step, block - step, block, block + step, 2 * block + step) if s >= step})


def _edge_shapes(block_m, block_n, block_k, k_step):
    """(M, N, K) triples that take every edge size of each dimension at least once, the three
    dimensions' lists walked out of step (so no two triples share all of their edges)."""
    ms, ns, ks = _edges(block_m), _edges(block_n), _edges(block_k, k_step)
    return [(ms[i % len(ms)], ns[(i + 1) % len(ns)], ks[(i + 2) % len(ks)]) for i in range(max(map(len, (ms, ns, ks))))]


def _edge_op(i, m, n, k):
    """addmm, mm and bmm in turn, but where Inductor would decompose the GEMM before lowering (on
    CPU: one row of small sizes in addmm, K=1 in bmm or in a small mm), no template is asked: a
    single row goes through mm, a single K through addmm."""
    return "mm" if m == 1 else "addmm" if k == 1 else ("addmm", "mm", "bmm")[i % 3]


class Edges(torch.nn.Module):
    """One GEMM per shape (``_edge_op``): a linear with a bias (addmm), one without (mm), frozen
    weights as the template takes them, or a bmm of two activations (batch 2)."""

    def __init__(self, shapes):
        super().__init__()
        self.ops = [_edge_op(i, *shape) for i, shape in enumerate(shapes)]
        self.linears = torch.nn.ModuleList(torch.nn.Linear(k, n, bias=op == "addmm")
                                           for op, (m, n, k) in zip(self.ops, shapes))

    def forward(self, *xs):
        return tuple(torch.bmm(x[0], x[1]) if op == "bmm" else linear(x)
                     for op, linear, x in zip(self.ops, self.linears, xs))


def _edge_inputs(shapes, ops, dtype):
    g = torch.Generator().manual_seed(5)
    return tuple((torch.randn(2, m, k, generator=g).to(dtype), (torch.randn(2, k, n, generator=g) / k**0.5).to(dtype))
                 if op == "bmm" else torch.randn(m, k, generator=g).to(dtype) for op, (m, n, k) in zip(ops, shapes))


# The micro-kernels whose edges are computed, by ISA and dtype, in one graph each. Each shape is a
# C++ kernel built (~5 s of a loaded 2-core host): the AVX-512 one is what serves fp32 from M=16 on
# (ruled_out); Inductor's own pick for smaller fp32 GEMMs, 8x48, runs the same vector code.
EDGE_KERNELS = {
    ("avx512", torch.float32): ((16, 16, 1),),
    ("amx", torch.bfloat16): ((32, 16, 32),),  # AMX tiles: 16 rows x 32 bytes, K in pairs
}


@pytest.mark.parametrize("isa, dtype", list(EDGE_KERNELS), ids=lambda p: str(p).removeprefix("torch."))
def test_each_micro_kernel_computes_gemms_at_its_block_edges(monkeypatch, tmp_path, isa, dtype):
    """M, N and K at 1, block-1, block, block+1 and 2*block+1 of each micro-kernel's register block
    (K in pairs under AMX), through mm, addmm and bmm: every GEMM is served by the template with
    its micro-kernel (read as a cached winner, so nothing is timed and the graph is built once; the
    C++ Inductor rendered has that register block), and each output matches a float64 reference."""
    if isa not in gemm.host_isas():
        pytest.skip(f"this CPU does not run the {isa} micro-kernels (it runs {gemm.host_isas()})")
    planned = [(gemm.CppGemmConfig(isa, *block), shape) for block in EDGE_KERNELS[isa, dtype]
               for shape in _edge_shapes(*block, k_step=2 if isa == "amx" else 1)]
    shapes = [shape for _, shape in planned]
    torch.manual_seed(0)
    m = Edges(shapes).eval().to(dtype)
    config_of = {(op, shape): config for op, (config, shape) in zip(m.ops, planned)}

    def cached(self, key):  # each GEMM's decision, as if a build had stored its micro-kernel
        *_, a, b = key.shapes
        config = config_of.get((key.op, (a[-2], b[-1], a[-1])))
        return None if config is None else (Entry(key, "cpp.gemm", dataclasses.asdict(config)), "edges")

    monkeypatch.setattr(cache_layers.DecisionSources, "get", cached)
    args = _edge_inputs(shapes, m.ops, dtype)
    with torch.no_grad():
        want = copy.deepcopy(m).double()(*(tuple(t.double() for t in a) if isinstance(a, tuple) else a.double()
                                           for a in args))
    _, got, decisions, benchmarks = _compile(m, args, {"preset": "cpu", "dump_dir": str(tmp_path)})
    assert benchmarks == 0 and sorted(d.op for d in decisions) == sorted(m.ops), decisions
    assert all(d.reason == "cache" and d.winner.startswith("cpp_") for d in decisions), decisions
    kernels = [k for k in dumps.read_index(tmp_path)["kernels"] if k["template"] == "cpp.gemm"]
    assert sorted(json.dumps(k["config"], sort_keys=True) for k in kernels) == \
        sorted(json.dumps(dataclasses.asdict(config), sort_keys=True) for config, _ in planned), kernels
    for k in kernels:
        _assert_register_block((tmp_path / k["file"]).read_text(), k["config"])
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2**-7, "atol": 2**-6}
    for (config, shape), g, w in zip(planned, got, want):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), w, **tolerance, msg=lambda msg, c=config, s=shape: f"{c.name()} {s}: {msg}")
