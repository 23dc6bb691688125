"""Cache blockings as ``cpp.gemm`` configs (``templates/cpp/gemm.py``, ``lowering/cpp_gemm.py``).

Inductor derives its C++ GEMM template's cache blocking from the cache sizes with fixed factors;
on large fp32 GEMMs (a vocabulary's projection) ext also offers the 16x16 AVX-512 micro-kernel
with two fixed blockings, timed beside Inductor's. Here: which problems get them, what refuses
them, and a forced one compiled: the C++ Inductor renders carries the config's blocking, and the
numbers match eager's.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from inductor_ext import dumps, tune
from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.lowering import decision_record
from inductor_ext.templates import registry
from inductor_ext.templates.allowed import InvalidField
from inductor_ext.templates.cpp import gemm
from inductor_ext.templates.family import OpSpec, TensorSpec

LM_HEAD = gemm.CppGemmProblem("mm", 512, 50257, 768, constant_weight=True)  # GPT-2's, at a 512-token prefill


def _blocked(configs):
    return [(c.cache_m, c.cache_n, c.cache_k) for c in configs if c.cache_blocked()]


@pytest.fixture
def avx512(monkeypatch):
    monkeypatch.setattr(gemm, "host_isas", lambda: ("avx512",))


def test_large_fp32_gemm_gets_the_cache_blocked_candidates_after_the_micro_kernels(avx512):
    found = gemm.configs(LM_HEAD, "cpu")
    assert _blocked(found) == list(gemm.CACHE_BLOCKINGS)
    assert not any(c.cache_blocked() for c in found[:3])  # Inductor's blocking first: it is what max-autotune runs
    assert {(c.block_m, c.block_n) for c in found if c.cache_blocked()} == {(16, 16)}
    assert [c.name() for c in found if c.cache_blocked()] == ["avx512_16x16x1_cache512x16x128",
                                                              "avx512_16x16x1_cache512x32x128"]
    # the micro-kernel they use is the one kept at this M, so neither is ruled out
    assert all(gemm.refuse_measured(LM_HEAD, c, "cpu") is None for c in found if c.cache_blocked())


@pytest.mark.parametrize("problem", [
    dataclasses.replace(LM_HEAD, dtype="bfloat16"),  # oneDNN's bf16 GEMM serves there
    dataclasses.replace(LM_HEAD, m=128),  # measured at M = 256 and 512 only
    gemm.CppGemmProblem("mm", 512, 768, 768),  # 0.3e9 multiply-adds: two more builds would not repay
    gemm.CppGemmProblem("bmm", 512, 4096, 768, batch=8),
    dataclasses.replace(LM_HEAD, dynamic_m=True),  # Inductor blocks a symbolic M at run time
], ids=["bf16", "m128", "small", "bmm", "dynamic_m"])
def test_other_gemms_get_inductors_blocking_only(avx512, problem):
    assert _blocked(gemm.configs(problem, "cpu")) == []


@pytest.mark.parametrize("m, n, k, blocked", [
    (256, 4096, 4096, True),  # at both thresholds: M = 256, 2**32 multiply-adds
    (255, 4096, 4128, False),  # one row fewer (with more multiply-adds)
    (256, 4096, 4095, False),  # one depth fewer: below 2**32
], ids=["at", "m-1", "macs-1"])
def test_the_thresholds_are_inclusive(avx512, m, n, k, blocked):
    assert _blocked(gemm.configs(gemm.CppGemmProblem("mm", m, n, k, constant_weight=True), "cpu")) == \
        (list(gemm.CACHE_BLOCKINGS) if blocked else [])


def test_an_avx2_host_gets_none(monkeypatch):
    monkeypatch.setattr(gemm, "host_isas", lambda: ("avx2",))
    assert _blocked(gemm.configs(LM_HEAD, "cpu")) == []


def test_a_blocking_that_is_not_whole_register_blocks_or_meets_a_symbolic_m_is_refused():
    odd = gemm.CppGemmConfig("avx512", 16, 16, 1, cache_m=500, cache_n=16, cache_k=128)
    assert "not whole register blocks of 16x16x1" in gemm.refuse_config(LM_HEAD, odd, "cpu")
    partial = gemm.CppGemmConfig("avx512", 16, 16, 1, cache_k=128)  # rows and columns left at 0
    assert "0x0x128 is not whole register blocks" in gemm.refuse_config(LM_HEAD, partial, "cpu")
    fixed = gemm.CppGemmConfig("avx512", 16, 16, 1, 512, 16, 128)
    assert gemm.refuse_config(LM_HEAD, fixed, "cpu") is None
    dynamic = dataclasses.replace(LM_HEAD, dynamic_m=True)
    assert "symbolic" in gemm.refuse_config(dynamic, fixed, "cpu")
    assert gemm.refuse_config(dynamic, gemm.CppGemmConfig("avx512", 16, 16, 1), "cpu") is None


def _mm(a_dynamic):
    a = TensorSpec((512, 768), (768, 1), "float32", dynamic=a_dynamic)
    b = TensorSpec((768, 50257), (50257, 1), "float32", True)
    out = TensorSpec((512, 50257), (50257, 1), "float32")
    return OpSpec("mm", (a, b), out, {}, "cpu")


def test_problem_says_whether_m_is_symbolic():
    assert gemm.problem_for(_mm(())).dynamic_m is False
    assert gemm.problem_for(_mm((True, False))).dynamic_m is True


def test_a_cached_config_from_before_the_blocking_fields_reads_as_inductors_blocking():
    old = {"isa": "avx512", "block_m": 8, "block_n": 48, "block_k": 1}
    config = registry.from_dict(gemm.CppGemmConfig, old)
    assert not config.cache_blocked() and config.name() == "avx512_8x48x1"
    with pytest.raises(InvalidField, match="cache_k"):
        registry.from_dict(gemm.CppGemmConfig, {**old, "cache_k": -128})


# ------------------------------------------------------------------- compiled, on an AVX-512 host

class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(320, 72, bias=False)  # K = 320: 2.5 cache blocks of depth 128

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _compile(m, x, options):
    options = {"autotune": "quick", **options}  # the timed path (the cpu preset's default times nothing)
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    with tune.fresh_inductor_caches(), torch.no_grad():
        got = torch.compile(m, backend="ext", options=options)(x)
    return got, decision_record.decisions[first:]


@pytest.mark.skipif("avx512" not in gemm.host_isas(), reason="the cache-blocked candidates are AVX-512 micro-kernels; "
                    "this CPU has no AVX-512")
def test_cache_blocked_candidates_are_timed_and_a_cached_one_renders_its_blocking(tmp_path, monkeypatch):
    monkeypatch.setattr(gemm, "CACHE_BLOCKED_MIN_M", 1)  # offered on a small GEMM, to keep the test quick
    monkeypatch.setattr(gemm, "CACHE_BLOCKED_MIN_MACS", 1)
    torch.manual_seed(0)
    m = Head().eval()
    x = torch.randn(200, 320, generator=torch.Generator().manual_seed(4))  # M: 12.5 register blocks
    with torch.no_grad():
        want = m(x)
    got, (decision,) = _compile(copy.deepcopy(m), x, {"autotune_cache": str(tmp_path / "tuned.db")})
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    blocked = [c for c in decision.candidates if c["kind"] == "template" and c["config_dict"]["cache_k"]]
    assert [c["config_dict"]["cache_n"] for c in blocked] == [16, 32], decision.candidates
    assert all(c["time_us"] is not None for c in blocked), blocked

    # the 512x32x128 blocking as the cached winner: served without timing, rendered with its blocking
    config = blocked[1]["config_dict"]
    with AutotuneCache(tmp_path / "tuned.db") as tuned, AutotuneCache(tmp_path / "forced.db") as forced:
        (entry,) = tuned.entries()
        forced.put(dataclasses.replace(entry, winner="cpp.gemm", config=config))
    got, (decision,) = _compile(copy.deepcopy(m), x, {"autotune": "cache-only", "autotune_cache": str(tmp_path / "forced.db"),
                                                      "dump_dir": str(tmp_path / "dump")})
    assert decision.reason == "cache" and decision.winner.startswith("cpp_"), decision
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    (kernel,) = [k for k in dumps.read_index(tmp_path / "dump")["kernels"] if k["template"] == "cpp.gemm"]
    assert kernel["config"] == config
    source = (tmp_path / "dump" / kernel["file"]).read_text()
    # in register blocks, Inductor's caps applied: depth 128 of K's 320; columns 2 blocks; rows all of a thread's
    assert "constexpr int64_t Kc_blocks = 128;" in source
    assert "constexpr int64_t Nc_blocks = 2;" in source
