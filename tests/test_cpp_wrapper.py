"""ext under Inductor's C++ wrapper (``torch._inductor.config.cpp_wrapper = True``, a CPU inference
setting of PyTorch's own): ext's ops and subgraph templates build and run there, sizes dynamic too
(``lowering/ops/_select.py``'s OpChoice, ``lowering/subgraph.py``).

One graph: decode attention over a KV cache whose length is dynamic (as Hugging Face's dynamic
cache makes it). An autotuning compile, where both ATen and the template must be timed (the
template's benchmark build failed there, and it was dropped), and a cache-only compile in which
ATen's choice wins (it serves ATen's SDPA, as Inductor lowers it). Each compiled once.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from inductor_ext import tune
from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.kernels import prefill_attention_ops  # noqa: F401  (registers inductor_ext::prefill_attention)
from inductor_ext.kernels.attention import attention_reference
from inductor_ext.lowering import decision_record

LENGTHS = (37, 90)  # the cache's length at the first call, and a later one the same graph serves


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v) * 2


def _kv(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(length)
    k, v = torch.randn(1, 6, length, 48, generator=g), torch.randn(1, 6, length, 48, generator=g)
    torch._dynamo.mark_dynamic(k, 2)
    torch._dynamo.mark_dynamic(v, 2)
    return k, v


Q = torch.randn(1, 6, 1, 48, generator=torch.Generator().manual_seed(0))


def _compile(tmp, options):
    """Compile under the C++ wrapper; outputs at every length, decisions, the dumped code."""
    options = {"autotune": "quick", **options}  # the timed path (the cpu preset's default times nothing)
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    dump = tmp / "dump"
    with tune.fresh_inductor_caches(), torch._inductor.config.patch(cpp_wrapper=True), torch.no_grad():
        compiled = torch.compile(attend, backend="ext", options={**options, "dump_dir": str(dump)})
        outs = {n: (compiled(Q, *_kv(n)), attend(Q, *_kv(n))) for n in LENGTHS}
    code = "\n".join(p.read_text() for p in dump.rglob("output_code.py"))
    return {"outs": outs, "decisions": decision_record.decisions[first:], "code": code}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpp_wrapper_tuned")
    return {"dir": tmp, **_compile(tmp, {"autotune_cache": str(tmp / "tuned.db")})}


@pytest.fixture(scope="module")
def aten_from_cache(tuned, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpp_wrapper_aten")
    with AutotuneCache(tmp / "aten.db") as cache:
        for entry in AutotuneCache(tuned["dir"] / "tuned.db").entries():
            cache.put(dataclasses.replace(entry, winner="aten", config={"name": "decode_attention_aten"}))
    return _compile(tmp, {"autotune": "cache-only", "autotune_cache": str(tmp / "aten.db")})


@pytest.mark.parametrize("compiled", ["tuned", "aten_from_cache"])
def test_the_cpp_wrapper_graph_matches_the_reference_at_every_length(compiled, request):
    result = request.getfixturevalue(compiled)
    assert "inductor_entry_impl" in result["code"]  # Inductor's C++ wrapper, not its Python one
    for n, (got, eager) in result["outs"].items():
        want = attention_reference(Q, *_kv(n)) * 2
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-5)


def test_the_template_was_timed_against_aten_in_the_dynamic_graph(tuned):
    decision = next(d for d in tuned["decisions"] if d.op == "decode_attention")
    assert decision.key.dynamic == ((), (2,), (2,)), decision.key  # the length is symbolic: keyed as such
    assert {c["kind"] for c in decision.candidates if c["time_us"] is not None} == {"aten", "template"}, \
        decision.candidates
    assert not [c["error"] for c in decision.candidates if c.get("error")]


def test_where_aten_wins_the_cpp_wrapper_calls_atens_sdpa_not_exts_op(aten_from_cache):
    """ATen's choice served: the user's SDPA as Inductor lowers it (ATen's flash kernel through its
    C shim), not ext's op (Python around the same kernel) through the dispatcher."""
    decision = next(d for d in aten_from_cache["decisions"] if d.op == "decode_attention")
    assert (decision.winner, decision.reason) == ("decode_attention_aten", "cache")
    assert "aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu(" in aten_from_cache["code"]
    assert "inductor_ext::decode_attention" not in aten_from_cache["code"]


def normed(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A graph that calls ext's rms_norm op itself: the cpu preset has no family for it, so ATen's
    choice (the op) serves it."""
    return torch.ops.inductor_ext.rms_norm(x, w, [64], 1e-6) * 2


def test_an_ext_op_served_by_atens_choice_is_called_through_the_dispatcher(tmp_path):
    """The op has no C shim (a plain extern kernel's call of ``aoti_torch_cpu_<op>`` did not
    build, and the compile failed): Inductor's FallbackKernel calls it through the dispatcher."""
    from inductor_ext.kernels import norm_ops  # noqa: F401  (registers inductor_ext::rms_norm)

    torch._dynamo.reset()
    dump = tmp_path / "dump"
    x, w = torch.randn(3, 64), torch.randn(64)
    options = {"preset": "cpu", "autotune_cache": str(tmp_path / "c.db"), "dump_dir": str(dump)}
    with tune.fresh_inductor_caches(), torch._inductor.config.patch(cpp_wrapper=True), torch.no_grad():
        got = torch.compile(normed, backend="ext", options=options)(x, w)
    code = "\n".join(p.read_text() for p in dump.rglob("output_code.py"))
    assert 'findSchemaOrThrow("inductor_ext::rms_norm"' in code or 'dispatcher("inductor_ext::rms_norm"' in code
    torch.testing.assert_close(got, torch.rms_norm(x, [64], w, 1e-6) * 2)


# ------------------------------------------------- a family whose kernels are called from Python


def prefill(q: torch.Tensor) -> torch.Tensor:
    """A graph that calls ext's prefill op itself (no pass in between): lowering alone must refuse."""
    return torch.ops.inductor_ext.prefill_attention(q, q, q, None, 0.125) * 2


def test_a_family_called_from_python_is_refused_and_aten_serves(tmp_path):
    """``cpp.flash_attention`` is called from Python (ctypes): the C++ wrapper has no name for it.
    Forced, it was still offered and Inductor's codegen failed ("Expected name is not None")."""
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    q = torch.randn(1, 2, 40, 64, generator=torch.Generator().manual_seed(1))
    options = {"preset": "cpu", "force_template": "cpp.flash_attention", "autotune_cache": str(tmp_path / "c.db")}
    with tune.fresh_inductor_caches(), torch._inductor.config.patch(cpp_wrapper=True), torch.no_grad():
        got = torch.compile(prefill, backend="ext", options=options)(q)
    (decision,) = [d for d in decision_record.decisions[first:] if d.op == "prefill_attention"]
    assert decision.winner == "prefill_attention_aten", decision
    assert "called from Python" in decision.reason and "C++ wrapper" in decision.reason, decision.reason
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, q, q, scale=0.125) * 2)


def test_a_family_with_an_op_of_its_own_is_called_through_the_dispatcher():
    """An extern family with a ``torch.library`` op (``cutedsl.nvfp4_gemm``) is an ``OpChoice``:
    under the C++ wrapper Inductor's FallbackKernel calls the op, never a C shim it lacks."""
    from inductor_ext import presets
    from inductor_ext.lowering import adapters, refusals
    from inductor_ext.lowering.ops._select import OpChoice
    from inductor_ext.templates import registry

    def wrapper_says(name: str, cpp_wrapper: bool) -> str | None:
        family = registry.get(name)  # a config whose target and device it claims: only the wrapper is left
        preset = next(p for p, d in presets.PRESETS.items() if d["target"] in family.targets)
        config = presets.resolve({"preset": preset, "interpret": family.cpu_executor is not None})
        why = refusals.here(config, family, config.device_type, cpp_wrapper)
        return None if why is None or "C++ wrapper" not in why.reason else why.reason

    family = registry.get("cutedsl.nvfp4_gemm")
    assert wrapper_says("cutedsl.nvfp4_gemm", cpp_wrapper=True) is None
    assert isinstance(adapters.extern_choice(family, family.all_configs[0]), OpChoice)
    for name in ("cpp.flash_attention", "metal.linear_gemv", "sycl.gemm", "flydsl.gemm"):
        assert "C++ wrapper" in wrapper_says(name, cpp_wrapper=True)
        assert wrapper_says(name, cpp_wrapper=False) is None
