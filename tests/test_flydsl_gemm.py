"""flydsl.gemm (gfx950): tier I (FlyDSL compile-only, instructions asserted) and the host-side
model of its tiling (every C element written once, K covered once, numerics vs kernels.matmul).

The ISA tests need an AMDGPU ld.lld (``.ci/install_amd_toolchain.sh``); compiles are cached on
disk (pytest's cache, or $INDUCTOR_EXT_ISA_CACHE), so a warm run takes seconds.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from inductor_ext.kernels.matmul import mm_reference
from inductor_ext.targets import amd
from inductor_ext.templates.family import OpSpec, TensorSpec
from inductor_ext.templates.flydsl import gemm
from inductor_ext.testing import isa
from inductor_ext.testing.flydsl_model import Epilogue, Operand, run_gemm

GemmProblem, GemmConfig = gemm.GemmProblem, gemm.GemmConfig
LAYOUTS = [(True, True), (True, False), (False, True), (False, False)]  # (A K-major, B K-major)

# -------------------------------------------------------------------------------- tier I ISA

# Each layout once and each dtype twice (the dtype picks the instruction, the layout the load
# direction: independent); "bfloat16_kn" is also what ``inductor-ext asm flydsl.gemm`` builds.
ISA_LAYOUTS = {"bfloat16": [(True, False), (False, True)], "float16": [(True, True), (False, False)]}
ISA_CASES = {
    **{f"{d}_{'k' if ak else 'm'}{'k' if bk else 'n'}": (GemmProblem(256, 256, 256, d, ak, bk), GemmConfig(128, 128, 64, 2, 2))
       for d, layouts in ISA_LAYOUTS.items() for ak, bk in layouts},
    "bfloat16_strided_vec1": (GemmProblem(100, 90, 70, "bfloat16", True, False, vec_ok=False), GemmConfig(64, 64, 32, 2, 2, 1)),
    "float16_addmm_decode": (GemmProblem(4, 512, 512, "float16", True, True, bias=True), GemmConfig(16, 64, 64, 1, 2)),
}
# gfx1250 runs the same kernel on WMMA: the layouts and the scalar path are enough there.
ISA_JOBS = [(c, "gfx950") for c in sorted(ISA_CASES)] + \
    [(c, "gfx1250") for c in ("bfloat16_kn", "float16_mn", "bfloat16_strided_vec1", "float16_addmm_decode")]


@pytest.fixture(scope="module")
def compiled(isa_cache: str | None) -> dict[tuple[str, str], dict[str, str]]:
    asms = gemm.isa_many([(*ISA_CASES[c], target) for c, target in ISA_JOBS], cache=isa_cache)
    return dict(zip(ISA_JOBS, asms))


@pytest.mark.isa
@pytest.mark.parametrize("case,target", ISA_JOBS)
def test_isa(compiled: dict[tuple[str, str], dict[str, str]], case: str, target: str) -> None:
    problem, config = ISA_CASES[case]
    asm, facts = compiled[case, target], amd.INSTRUCTIONS[target]
    mma = facts[("mfma_" if target == "gfx950" else "wmma_") + ("bf16" if problem.dtype == "bfloat16" else "f16")]
    t = gemm.tiling(problem, config, target)
    loads = facts["global_load_16b"] if config.vec == 8 else facts["global_load_2b"]
    counts = isa.assert_has_instructions(asm, target, [isa.MMA_INSTRUCTION[target], mma, loads, facts["lds_read_16b"],
                                                       facts["store_2b"], facts["barrier"]])
    # One instruction per (rep_m, rep_n, k step) in the unrolled K step: no other matrix instruction.
    assert counts[mma] == counts[isa.MMA_INSTRUCTION[target]] == t.reps_m * t.reps_n * t.k_steps, counts
    meta = json.loads(asm["metadata"])["kernels"]["flydsl_gemm_0"]
    assert meta["vgpr_spill_count"] == 0 and meta["private_segment_fixed_size"] == 0, meta
    assert meta["group_segment_fixed_size"] == t.lds_bytes, meta
    assert meta["wavefront_size"] == t.mma.wave


@pytest.mark.isa
def test_isa_gate_rejects_the_other_targets_mma(compiled: dict[tuple[str, str], dict[str, str]]) -> None:
    with pytest.raises(AssertionError, match="v_wmma"):
        isa.assert_has_instructions(compiled["bfloat16_kn", "gfx950"], "gfx950", [r"v_wmma"])
    with pytest.raises(AssertionError, match="v_mfma"):
        isa.assert_has_instructions(compiled["bfloat16_kn", "gfx1250"], "gfx1250", [r"v_mfma"])


# ----------------------------------------------------------------------- family protocol


def _spec(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, **scalars: float) -> OpSpec:
    def ts(t: torch.Tensor) -> TensorSpec:
        return TensorSpec(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))

    out = TensorSpec((a.shape[0], b.shape[1]), (b.shape[1], 1), ts(a).dtype)
    if bias is None:
        return OpSpec("mm", (ts(a), ts(b)), out, device_type="cuda")
    return OpSpec("addmm", (ts(bias), ts(a), ts(b)), out, scalars, device_type="cuda")


def test_problem_for_reads_layouts_from_strides() -> None:
    a = torch.empty(64, 128, dtype=torch.bfloat16)
    w = torch.empty(96, 128, dtype=torch.bfloat16)
    p = gemm.problem_for(_spec(a, w.t()))
    assert (p.m, p.n, p.k, p.a_k_major, p.b_k_major, p.vec_ok) == (64, 96, 128, True, True, True)
    p = gemm.problem_for(_spec(a.t().contiguous().t(), torch.empty(128, 96, dtype=torch.bfloat16)))
    assert (p.a_k_major, p.b_k_major, p.vec_ok) == (False, False, True)
    # K = 100: 16-byte runs along K would cross row ends -> one element per load
    p = gemm.problem_for(_spec(torch.empty(8, 100, dtype=torch.float16), torch.empty(100, 8, dtype=torch.float16)))
    assert not p.vec_ok and all(c.vec == 1 for c in gemm.configs(p, "gfx950"))
    p = gemm.problem_for(_spec(a, w.t(), torch.empty(96, dtype=torch.bfloat16), alpha=2.0, beta=0.5))
    assert p.bias and (p.alpha, p.beta) == (2.0, 0.5)


def test_problem_for_refuses_with_reasons() -> None:
    f32 = torch.empty(8, 8)
    assert "one dtype of" in gemm.problem_for(_spec(f32, f32))
    assert "one dtype of" in gemm.problem_for(_spec(f32.bfloat16(), f32.half()))
    assert "serves" in gemm.problem_for(OpSpec("bmm", (), TensorSpec((1,), (1,), "bfloat16")))
    with pytest.raises(ValueError, match="not one of"):
        gemm.configs(GemmProblem(8, 8, 8), "gfx942")


def test_every_config_is_a_valid_tiling() -> None:
    for config in gemm.ALL_CONFIGS:
        for ak, bk in LAYOUTS:
            for target in gemm.TARGETS:
                assert gemm.refuse_config(GemmProblem(64, 64, 64, "bfloat16", ak, bk), config, target) is None, config
    assert "vec=1" in gemm.refuse_config(GemmProblem(8, 8, 8, vec_ok=False), GemmConfig(64, 64, 64, 2, 2))


def test_render_is_a_launcher() -> None:
    p = GemmProblem(300, 200, 100, "float16", False, True)
    ks = gemm.render(p, gemm.configs(p, "gfx950")[0], "gfx950")
    assert ks.language == "flydsl" and ks.template == "flydsl.gemm"
    assert ks.launch["grid"] == (3, 2, 1) and ks.launch["mma"] == "v_mfma_f32_16x16x32_f16"
    compile(ks.source, ks.name, "exec")


# ---------------------------------------------------------------------- host-side model


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16)


def _operand(t: torch.Tensor, row_axis: int, k_axis: int, k_major: bool) -> Operand:
    flat = t.as_strided((1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride())),), (1,), t.storage_offset())
    return Operand(flat.float().numpy(), t.stride(row_axis), t.stride(k_axis), k_major)


def _layout(x: torch.Tensor, contiguous_axis: int) -> torch.Tensor:
    """``x`` with the same values and ``contiguous_axis`` of stride 1, padded rows (a strided view)."""
    if contiguous_axis == 1:
        return torch.zeros(x.shape[0], x.shape[1] + 8, dtype=x.dtype)[:, : x.shape[1]].copy_(x)
    return torch.zeros(x.shape[1], x.shape[0] + 8, dtype=x.dtype)[:, : x.shape[0]].t().copy_(x)


MODEL_SHAPES = [(1, 40, 64), (37, 45, 72), (70, 33, 136), (16, 130, 40)]


@pytest.mark.parametrize("target", gemm.TARGETS)
@pytest.mark.parametrize("ak,bk", LAYOUTS)
@pytest.mark.parametrize("m,n,k", MODEL_SHAPES)
def test_model_matches_reference(ak: bool, bk: bool, m: int, n: int, k: int, target: str) -> None:
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    a = _layout(_bf16(torch.randn(m, k, generator=g)), 1 if ak else 0)
    b = _layout(_bf16(torch.randn(k, n, generator=g)), 0 if bk else 1)
    problem = gemm.problem_for(_spec(a, b))
    assert (problem.a_k_major, problem.b_k_major) == (ak, bk)
    for config in [gemm.configs(problem, target)[0], GemmConfig(64, 64, 32, 2, 2, 1)]:
        t = gemm.tiling(problem, config, target)
        res = run_gemm(t, _operand(a, 0, 1, ak), _operand(b, 1, 0, bk), m, n, k)
        assert (res.writes == 1).all(), f"{config}: elements written {sorted(set(res.writes.ravel()))} times"
        want = mm_reference(a, b).float().numpy()
        got = torch.from_numpy(res.out).to(torch.bfloat16).float().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.sqrt(k))


def test_model_addmm_epilogue() -> None:
    m, n, k = 33, 70, 64
    a, b, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
    problem = gemm.problem_for(_spec(a.bfloat16(), b.bfloat16(), bias.bfloat16(), alpha=0.5, beta=2.0))
    t = gemm.tiling(problem, gemm.configs(problem, "gfx950")[0])
    x = bias.expand(m, n)  # what run() passes: a broadcast view, stride 0 over rows
    res = run_gemm(t, _operand(a, 0, 1, True), _operand(b, 1, 0, False), m, n, k,
                   Epilogue(0.5, 2.0, (bias.numpy(), x.stride(0), x.stride(1))))
    np.testing.assert_allclose(res.out, mm_reference(a, b, bias, alpha=0.5, beta=2.0).numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m,n,k", MODEL_SHAPES)
def test_model_covers_k_once(m: int, n: int, k: int) -> None:
    ones_a, ones_b = torch.ones(m, k), torch.ones(k, n)
    problem = GemmProblem(m, n, k, "bfloat16", True, False, vec_ok=k % 8 == 0)
    t = gemm.tiling(problem, gemm.configs(problem, "gfx950")[0])
    res = run_gemm(t, _operand(ones_a, 0, 1, True), _operand(ones_b, 1, 0, False), m, n, k)
    assert (res.out == k).all(), f"K coverage: {sorted(set(res.out.ravel()))} instead of {k}"


def test_model_catches_a_k_run_crossing_row_ends() -> None:
    # vec=8 along K with K % 8 != 0 would read the next row's elements: refuse_config refuses it,
    # and the model shows why (a wrong result, not a crash).
    m, n, k = 8, 16, 36
    a, b = torch.randn(m, k), torch.randn(n, k).t()
    problem = GemmProblem(m, n, k, "bfloat16", True, True, vec_ok=False)
    assert gemm.refuse_config(problem, GemmConfig(16, 64, 64, 1, 2, 8)) is not None
    bad = gemm.tiling(replace(problem, vec_ok=True), GemmConfig(16, 64, 64, 1, 2, 8))
    res = run_gemm(bad, _operand(a, 0, 1, True), _operand(b, 1, 0, True), m, n, k)
    assert (res.writes == 1).all()
    assert not np.allclose(res.out, (a @ b).numpy(), atol=1e-3)
