"""flydsl.grouped_mm (gfx950, ragged MoE): tier I and the host-side model of its grid (group
boundaries respected, every row below offs[-1] written once, numerics vs kernels.matmul)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inductor_ext.kernels.matmul import grouped_mm_reference
from inductor_ext.targets import amd
from inductor_ext.templates.family import OpSpec, TensorSpec
from inductor_ext.templates.flydsl import grouped_mm as gm
from inductor_ext.testing import isa
from inductor_ext.testing.flydsl_model import Epilogue, Operand, run_grouped

Problem, Config = gm.GroupedMmProblem, gm.GroupedMmConfig

ISA_CASES = {
    "bf16_kn": (Problem(4096, 512, 256, 8), Config(16, 128, 128, 1, 4)),  # what `inductor-ext asm` builds too
    "fp16_kk_f32out_bias": (Problem(4096, 512, 256, 8, "float16", "float32", True, True, bias=True), Config(64, 64, 64, 2, 2)),
    "bf16_mn_vec1": (Problem(100, 90, 70, 3, a_k_major=False, vec_ok=False), Config(64, 64, 32, 2, 2, 1)),
}
ISA_JOBS = [(c, target) for c in sorted(ISA_CASES) for target in gm.TARGETS]


@pytest.fixture(scope="module")
def compiled(isa_cache: str | None) -> dict[tuple[str, str], dict[str, str]]:
    return dict(zip(ISA_JOBS, gm.isa_many([(*ISA_CASES[c], target) for c, target in ISA_JOBS], cache=isa_cache)))


@pytest.mark.isa
@pytest.mark.parametrize("case,target", ISA_JOBS)
def test_isa(compiled: dict[tuple[str, str], dict[str, str]], case: str, target: str) -> None:
    problem, config = ISA_CASES[case]
    t, facts = gm.tiling(problem, config, target), amd.INSTRUCTIONS[target]
    mma = facts[("mfma_" if target == "gfx950" else "wmma_") + ("bf16" if problem.dtype == "bfloat16" else "f16")]
    store = facts["store_4b"] if problem.out_dtype == "float32" else facts["store_2b"]
    loads = facts["global_load_16b"] if config.vec == 8 else facts["global_load_2b"]
    counts = isa.assert_has_instructions(compiled[case, target], target, [mma, facts["lds_read_16b"], loads, store])
    assert counts[mma] == t.reps_m * t.reps_n * t.k_steps, counts  # one K step, unrolled, per group


def _ts(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))


def test_problem_for() -> None:
    a, w = torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(4, 48, 32, dtype=torch.bfloat16)
    offs = torch.empty(4, dtype=torch.int32)
    out = TensorSpec((64, 48), (48, 1), "bfloat16")
    p = gm.problem_for(OpSpec("grouped_mm", (_ts(a), _ts(w.transpose(1, 2)), _ts(offs)), out))
    assert (p.t, p.n, p.k, p.groups, p.a_k_major, p.b_k_major, p.vec_ok) == (64, 48, 32, 4, True, True, True)
    assert "ragged MoE form" in gm.problem_for(OpSpec("grouped_mm", (_ts(a), _ts(a.t()), _ts(offs)), out))
    assert "int32" in gm.problem_for(OpSpec("grouped_mm", (_ts(a), _ts(w.transpose(1, 2)), _ts(offs.long())), out))


def _flat(t: torch.Tensor) -> np.ndarray:
    """The storage a kernel's flat view covers, as numbers."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.as_strided((span,), (1,)).float().numpy()


OFFS_CASES = {
    # (T, offs): empty groups, a group ending inside a tile, rows past offs[-1], one-row groups
    "uneven": (150, [17, 17, 80, 81, 140]),
    "leading_empty": (64, [0, 0, 64]),
    "single_token": (1, [0, 1, 1]),
    "many_small": (40, list(range(2, 41, 2))),
}


@pytest.mark.parametrize("case", sorted(OFFS_CASES))
@pytest.mark.parametrize("ak,bk", [(True, True), (True, False), (False, True), (False, False)])
def test_model_respects_groups(case: str, ak: bool, bk: bool) -> None:
    rows, offs = OFFS_CASES[case]
    n, k, groups = 40, 72, len(offs)
    g = torch.Generator().manual_seed(rows + n)
    a = torch.randn(rows, k, generator=g).bfloat16()
    b = torch.randn(groups, k, n, generator=g).bfloat16()
    a_l = a if ak else a.t().contiguous().t()
    b_l = b.transpose(1, 2).contiguous().transpose(1, 2) if bk else b
    offs_t = torch.tensor(offs, dtype=torch.int32)
    problem = gm.problem_for(OpSpec("grouped_mm", (_ts(a_l), _ts(b_l), _ts(offs_t)), TensorSpec((rows, n), (n, 1), "bfloat16")))
    assert problem.b_k_major == bk and (problem.a_k_major == ak or rows == 1)  # one row: both layouts
    config = gm.configs(problem, "gfx950")[0]
    t = gm.tiling(problem, config)
    res = run_grouped(t, Operand(_flat(a_l), a_l.stride(0), a_l.stride(1), problem.a_k_major),
                      Operand(_flat(b_l), b_l.stride(2), b_l.stride(1), bk), offs, rows, n, k, b_l.stride(0))
    end = offs[-1]
    assert (res.writes[:end] == 1).all() and (res.writes[end:] == 0).all(), res.writes.sum(axis=1)
    want = grouped_mm_reference(a, b, offs_t).float().numpy()
    got = torch.from_numpy(res.out[:end]).bfloat16().float().numpy()
    np.testing.assert_allclose(got, want[:end], rtol=1e-2, atol=2e-2 * np.sqrt(k))


def test_model_adds_each_groups_bias() -> None:
    rows, offs, n, k = 50, [10, 10, 33, 50], 24, 32
    a, b = torch.randn(rows, k), torch.randn(len(offs), k, n)
    bias = torch.randn(len(offs), n)
    problem = Problem(rows, n, k, len(offs), "bfloat16", "float32", True, False, bias=True)
    t = gm.tiling(problem, gm.configs(problem, "gfx950")[0])
    res = run_grouped(t, Operand(_flat(a), k, 1, True), Operand(_flat(b), 1, n, False), offs, rows, n, k, k * n,
                      epilogue=lambda g: Epilogue(bias=(_flat(bias), 0, 1), bias_base=g * n))
    want = grouped_mm_reference(a, b, torch.tensor(offs, dtype=torch.int32), bias, out_dtype=torch.float32).numpy()
    np.testing.assert_allclose(res.out, want, rtol=1e-5, atol=1e-4)
