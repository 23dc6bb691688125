"""flydsl.tdm_gemm (gfx1250): tier I (tensor_load_to_lds, s_wait_tensorcnt, v_wmma bf16/fp16/fp8)
and the host-side model (tiles split between waves as FlyDSL's descriptors split them, rows past
M/N zero-filled, writes once, K covered, numerics and the _scaled_mm epilogue)."""

from __future__ import annotations

import json
import os
import sys
import zlib

import numpy as np
import pytest
import torch

from inductor_ext.kernels.matmul import mm_reference
from inductor_ext.kernels.scaled_gemm import scaled_mm_reference
from inductor_ext.targets import amd
from inductor_ext.templates.family import OpSpec, TensorSpec
from inductor_ext.templates.flydsl import tdm_gemm as tg
from inductor_ext.testing import isa
from inductor_ext.testing.flydsl_model import Epilogue, Operand, run_gemm

Problem, Config = tg.TdmGemmProblem, tg.TdmGemmConfig
FACTS = amd.INSTRUCTIONS["gfx1250"]
TDM = [FACTS["tdm_load"], FACTS["tdm_wait"], FACTS["lds_read_16b"]]
WMMA = {"bfloat16": FACTS["wmma_bf16"], "float16": FACTS["wmma_f16"], "float8_e4m3fn": FACTS["wmma_fp8"]}

ISA_CASES = {
    "bf16": (Problem(512, 512, 512), Config(128, 128, 64, 2, 2)),
    "fp16_addmm_decode": (Problem(8, 512, 512, "float16", "float16", True, 0.5, 2.0), Config(16, 128, 64, 1, 4)),
    "fp8_tensor": (Problem(512, 512, 512, "float8_e4m3fn", "bfloat16", scaling="tensor"), Config(128, 128, 128, 2, 2)),
    "fp8_row_bias_f32": (Problem(64, 256, 256, "float8_e4m3fn", "float32", True, scaling="row"), Config(64, 64, 128, 2, 2)),
}


@pytest.fixture(scope="module")
def compiled(isa_cache: str | None) -> dict[str, dict[str, str]]:
    names = sorted(ISA_CASES)
    return dict(zip(names, tg.isa_many([(*ISA_CASES[n], "gfx1250") for n in names], cache=isa_cache)))


@pytest.mark.isa
@pytest.mark.parametrize("case", sorted(ISA_CASES))
def test_isa_gfx1250(compiled: dict[str, dict[str, str]], case: str) -> None:
    problem, config = ISA_CASES[case]
    t = tg.tiling(problem, config)
    wmma = WMMA[problem.dtype]
    counts = isa.assert_has_instructions(compiled[case], "gfx1250", [isa.MMA_INSTRUCTION["gfx1250"], wmma, *TDM])
    assert counts[wmma] == counts[isa.MMA_INSTRUCTION["gfx1250"]] == t.reps_m * t.reps_n * t.k_steps, counts
    assert counts[FACTS["tdm_load"]] == 2, counts  # one per operand per K step, no per-thread loads
    assert not isa.instruction_counts(compiled[case], "gfx1250", [r"buffer_load_b128|global_load_b128"])[
        r"buffer_load_b128|global_load_b128"], "operands must come by TDM"
    meta = json.loads(compiled[case]["metadata"])["kernels"]["flydsl_tdm_gemm_0"]
    assert meta["wavefront_size"] == 32 and meta["vgpr_spill_count"] == 0 and meta["private_segment_fixed_size"] == 0


# ----------------------------------------------------------------------- family protocol


def _ts(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))


def test_problem_for() -> None:
    x, w = torch.empty(10, 256, dtype=torch.bfloat16), torch.empty(96, 256, dtype=torch.bfloat16)
    out = TensorSpec((10, 96), (96, 1), "bfloat16")
    p = tg.problem_for(OpSpec("mm", (_ts(x), _ts(w.t())), out))
    assert (p.m, p.n, p.k, p.dtype, p.scaling) == (10, 96, 256, "bfloat16", "none")
    assert "contiguous along K" in tg.problem_for(OpSpec("mm", (_ts(x), _ts(w.t().contiguous())), out))
    assert "multiple of 32" in tg.problem_for(OpSpec("mm", (_ts(x[:, :200]), _ts(w[:, :200].t())), out))
    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    one = torch.empty((), dtype=torch.float32)
    p = tg.problem_for(OpSpec("scaled_mm", (_ts(x8), _ts(w8.t()), _ts(one), _ts(one), None, None), out))
    assert (p.dtype, p.scaling, p.out_dtype) == ("float8_e4m3fn", "tensor", "bfloat16")
    p = tg.problem_for(OpSpec("scaled_mm", (_ts(x8), _ts(w8.t()), _ts(torch.empty(10, 1)), _ts(torch.empty(1, 96)),
                                             None, None), out))
    assert p.scaling == "row"
    e8 = torch.empty(10, 8, dtype=torch.float8_e8m0fnu)
    assert "mx_scaled_mm" in tg.problem_for(OpSpec("scaled_mm", (_ts(x8), _ts(w8.t()), _ts(e8), _ts(e8), None, None), out))


def test_every_config_is_valid_and_k_fits() -> None:
    for table, dtype in ((tg._CONFIGS_16, "bfloat16"), (tg._CONFIGS_8, "float8_e4m3fn")):
        problem = Problem(64, 64, 512, dtype, "bfloat16", scaling="none" if dtype != "float8_e4m3fn" else "tensor")
        for config in table:
            assert tg.refuse_config(problem, config) is None, config
    assert all(96 % c.block_k == 0 for c in tg.configs(Problem(64, 64, 96), "gfx1250"))


# ---------------------------------------------------------------------- host-side model

MODEL_SHAPES = [(1, 40, 128), (37, 45, 192), (70, 33, 64)]


def _operand(t: torch.Tensor, rows_lim: int) -> Operand:
    """A K-major operand (rows, K), as the TDM descriptors address it."""
    return Operand(t.float().reshape(-1).numpy(), t.stride(0), 1, True, tdm_rows_lim=rows_lim)


@pytest.mark.parametrize("m,n,k", MODEL_SHAPES)
def test_model_bf16_matches_reference(m: int, n: int, k: int) -> None:
    g = torch.Generator().manual_seed(m + n + k)
    a, w = torch.randn(m, k, generator=g).bfloat16(), torch.randn(n, k, generator=g).bfloat16()
    problem = Problem(m, n, k)
    for config in tg.configs(problem, "gfx1250")[:2]:
        t = tg.tiling(problem, config)
        res = run_gemm(t, _operand(a, m), _operand(w, n), m, n, k)
        assert (res.writes == 1).all()
        want = mm_reference(a, w.t()).float().numpy()
        np.testing.assert_allclose(torch.from_numpy(res.out).bfloat16().float().numpy(), want, rtol=1e-2,
                                   atol=1e-2 * np.sqrt(k))
        ones = run_gemm(t, _operand(torch.ones(m, k), m), _operand(torch.ones(n, k), n), m, n, k)
        assert (ones.out == k).all(), "every K element must reach every output exactly once"


@pytest.mark.parametrize("scaling", ["tensor", "row"])
@pytest.mark.parametrize("m,n,k", [(1, 40, 128), (37, 45, 256)])
def test_model_fp8_scaled_mm(scaling: str, m: int, n: int, k: int) -> None:
    g = torch.Generator().manual_seed(m * n + k)
    a = (torch.randn(m, k, generator=g) * 4).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, generator=g) * 4).to(torch.float8_e4m3fn)
    sa = torch.rand(m, 1, generator=g) + 0.5 if scaling == "row" else torch.tensor([0.75])
    sb = torch.rand(1, n, generator=g) + 0.5 if scaling == "row" else torch.tensor([1.5])
    bias = torch.randn(n, generator=g)
    problem = Problem(m, n, k, "float8_e4m3fn", "float32", True, scaling=scaling)
    t = tg.tiling(problem, tg.configs(problem, "gfx1250")[0])
    epi = Epilogue(bias=(bias.numpy(), 0, 1), scale_a=(sa.reshape(-1).numpy(), int(scaling == "row")),
                   scale_b=(sb.reshape(-1).numpy(), int(scaling == "row")))
    res = run_gemm(t, _operand(a, m), _operand(w, n), m, n, k, epi)
    want = scaled_mm_reference(a, w, alpha=sa * sb, bias=bias, out_dtype=torch.float32).numpy()
    np.testing.assert_allclose(res.out, want, rtol=1e-5, atol=1e-3)


def _flydsl_split(request: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int, int]]]:
    """Subprocess side: FlyDSL's own split, as (first row, first k, rows, ks) per wave."""
    from flydsl.expr.rocdl.tdm_ops import compute_warp_distribution

    out = []
    for rows, cols, waves in request:
        (w0, _), (p0, p1) = compute_warp_distribution([rows, cols], waves)
        out.append([((w % w0) * p0, (w // w0) * p1, p0, p1) for w in range(waves)])
    return out


def test_tdm_split_matches_flydsl(request: pytest.FixtureRequest) -> None:
    import importlib.metadata

    from inductor_ext.runtime.harness import run_in_subprocess

    cases = [(rows, cols, waves) for rows in (16, 48, 64, 128) for cols in (32, 64, 128) for waves in (1, 2, 4, 8, 16)]
    # FlyDSL's answer depends only on its version: asked once (a FlyDSL import costs seconds), kept in
    # pytest's cache
    key = f"inductor_ext/tdm_split/{importlib.metadata.version('flydsl')}/{zlib.crc32(repr(cases).encode())}"
    cache = getattr(request.config, "cache", None)
    theirs = cache.get(key, None) if cache is not None else None
    if theirs is None:
        theirs = run_in_subprocess("test_flydsl_tdm_gemm:_flydsl_split", cases,
                                   env={**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), *sys.path])},
                                   what="FlyDSL's TDM warp split")
        if cache is not None:
            cache.set(key, theirs)
    for (rows, cols, waves), split in zip(cases, theirs):
        t = tg.tiling(Problem(64, 64, cols), Config(16, 16, cols, 1, 1))
        assert [tuple(s) for s in split] == t.tdm_split(rows, waves), (rows, cols, waves)
    assert "flydsl._mlir" not in sys.modules, "the host model must not load FlyDSL's MLIR in the test process"


def test_model_refuses_a_k_tail() -> None:
    # A TDM tile has no bound along K here: a partial tile would read past the row.
    t = tg.tiling(Problem(16, 16, 96), Config(16, 64, 64, 1, 2))
    with pytest.raises(AssertionError, match="past K"):
        run_gemm(t, _operand(torch.ones(16, 96), 16), _operand(torch.ones(16, 96), 16), 16, 16, 96)
    assert "multiple of block_k" in tg.refuse_config(Problem(16, 16, 96), Config(16, 64, 64, 1, 2))
