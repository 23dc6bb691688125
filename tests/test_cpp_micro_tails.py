"""The vector micro-GEMM's row-tail switch narrowed where M is static (``lowering/cpp_micro_tails.py``).

Inductor instantiates its unrolled micro-kernel once per row tail (1 .. block_m - 1); a static M
leaves one tail. Here: what the narrowed C++ holds, what is left as Inductor renders it, and
compiled GEMMs of several M (1, a tail, whole blocks, K and N off the blocks) matching eager's
numbers, also when every tail goes through the row-by-row fallback.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import sympy
import torch
from torch._inductor.codecache import CppCodeCache
from torch._inductor.sizevars import SizeVarAllocator
from torch._inductor.virtualized import V

from inductor_ext import tune
from inductor_ext.autotune import policy
from inductor_ext.lowering import cpp_gemm, cpp_micro_tails
from torch._inductor.codegen import cpp_micro_gemm  # noqa: E402  (after lowering: alone it is a circular import)
from inductor_ext.templates.cpp import gemm

pytestmark = pytest.mark.skipif(not gemm.host_isas(), reason="this CPU has neither AVX2 nor AVX-512: Inductor has "
                                "no vector micro-GEMM to build here")


class _Kernel:
    assert_function = "TORCH_CHECK"


def _micro(m, dtype=torch.float32, isa=None):
    problem = gemm.CppGemmProblem("mm", 1, 64, 64, "float32" if dtype == torch.float32 else "bfloat16")
    config = next(c for c in gemm.configs(problem, "cpu") if isa in (None, c.isa) and not c.cache_blocked())
    with V.set_graph_handler(SimpleNamespace(sizevars=SizeVarAllocator())):  # as in a lowering
        micro = cpp_gemm._micro_kernel(problem, config)
    return micro, cpp_micro_tails.narrow(micro, m)


def _cases(source):
    return sorted(int(c) for c in re.findall(r"case (\d+):", source))


@pytest.mark.parametrize("m", [33, 34, 37])  # tails of 1 (the one-row kernel itself), 2 and 5 rows
def test_a_static_m_keeps_only_its_tail_and_sends_any_other_tail_row_by_row(m):
    micro, narrowed = _micro(m)
    block_m = micro.register_blocking.block_m
    source = micro.codegen_define(_Kernel())
    assert narrowed
    assert _cases(source) == ([m % block_m] if m % block_m > 1 else [])
    assert "for (int64_t row = 0; row < block_m; ++row)" in source and "_kernel<1, " in source
    assert "Unsupported block_m" not in source


def test_whole_blocks_keep_no_tail_case():
    micro, narrowed = _micro(sympy.Integer(64))  # Inductor's sizes are sympy integers
    assert narrowed and _cases(micro.codegen_define(_Kernel())) == []


def test_a_symbolic_m_keeps_every_tail_as_inductor_renders_it():
    micro, narrowed = _micro(sympy.Symbol("s0", positive=True, integer=True))
    block_m = micro.register_blocking.block_m
    assert not narrowed and _cases(micro.codegen_define(_Kernel())) == list(range(1, block_m))


def test_a_template_this_module_does_not_know_is_left_alone(monkeypatch):
    monkeypatch.setattr(cpp_micro_gemm.CppMicroGemmFP32Vec, "TEMPLATE_ENTRY",
                        cpp_micro_gemm.CppMicroGemmFP32Vec.TEMPLATE_ENTRY.replace("range(block_m - 1, 0, -1)",
                                                                                  "range(block_m - 1, 0, -2)"))
    micro, narrowed = _micro(37)
    assert not narrowed and "TEMPLATE_ENTRY" not in vars(micro)


@pytest.mark.skipif("amx" not in gemm.host_isas(), reason="this CPU has no AMX tiles")
def test_amx_micro_kernels_are_not_narrowed():
    micro, narrowed = _micro(37, torch.bfloat16, isa="amx")
    assert not narrowed and type(micro) is not cpp_micro_gemm.CppMicroGemmFP32Vec


ROWS = (1, 5, 15, 17, 32, 37)


class Gemms(torch.nn.Module):
    """One GEMM per M: 1 (decode), 5 (a tail only), 15 and 17 (a 16-row block less or more one row),
    32 (whole blocks), 37 (blocks and a tail); K=70 and N=45 are off every register block."""

    def __init__(self) -> None:
        super().__init__()
        self.linears = torch.nn.ModuleList(torch.nn.Linear(70, 45, bias=i % 2 == 0) for i in range(len(ROWS)))

    def forward(self, *xs: torch.Tensor) -> list[torch.Tensor]:
        return [linear(x) for linear, x in zip(self.linears, xs)]


def _compiled(tmp_path) -> dict:
    """The model compiled with cpp.gemm forced for every GEMM; its outputs, eager's, and the
    template sources Inductor compiled."""
    torch.manual_seed(0)
    model = Gemms().eval()
    xs = [torch.randn(m, 70) for m in ROWS]
    sources, load_async = [], CppCodeCache.load_async.__func__

    def noting(cls, source, *args, **kwargs):
        if cpp_gemm.MARKER in source:
            sources.append(source)
        return load_async(cls, source, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CppCodeCache, "load_async", classmethod(noting))
        mp.setitem(policy.EFFORT_BUDGET, "quick", 1)  # Inductor's own micro-kernel and one more
        torch._dynamo.reset()
        with tune.fresh_inductor_caches(), torch.no_grad():
            compiled = torch.compile(model, backend="ext", options={
                "autotune": "quick", "templates": ["cpp.gemm"], "force_template": ["cpp.gemm"],
                "autotune_cache": str(tmp_path / "cache.db")})
            got = compiled(*xs)
            want = model(*xs)
    return {"got": got, "want": want, "sources": sources}


def _assert_matches(run):
    assert len(run["got"]) == len(ROWS)
    for m, got, want in zip(ROWS, run["got"], run["want"]):
        assert got.dtype == want.dtype == torch.float32 and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda s: f"M={m}: {s}")


def test_compiled_gemms_of_every_m_match_eager_with_their_tails_narrowed(tmp_path):
    run = _compiled(tmp_path)
    _assert_matches(run)
    vector = [s for s in run["sources"] if "Unsupported block_m" not in s and "_kernel<1, " in s]
    assert vector, "no narrowed vector micro-kernel was compiled"
    assert all(len(_cases(s)) <= 1 for s in vector), [_cases(s) for s in vector]


def test_compiled_gemms_match_eager_where_every_tail_runs_row_by_row(tmp_path, monkeypatch):
    """Narrowed for an M that leaves no tail: the tails these M do leave take the fallback."""
    narrow = cpp_micro_tails.narrow
    monkeypatch.setattr(cpp_micro_tails, "narrow", lambda micro, m: narrow(micro, 1024))
    run = _compiled(tmp_path)
    _assert_matches(run)
    assert run["sources"] and all(_cases(s) == [] for s in run["sources"] if "_kernel<1, " in s)
