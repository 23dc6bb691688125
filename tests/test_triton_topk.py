"""triton.topk (gfx950): tier G (golden sources), tier I (the gfx950 ISA: 64-bit key compares, the
bitonic network's lane swaps, int64 index stores, no spills) and tier C (Triton's interpreter vs
``kernels.topk.topk_reference`` exactly, and vs ``torch.topk``: the same values, the same indices
wherever a value is unique in its row)."""

from __future__ import annotations

import os
import sys

if "triton" not in sys.modules:  # Triton picks its interpreter at first import (see conftest.py)
    os.environ["TRITON_INTERPRET"] = "1"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from inductor_ext.kernels.topk import topk_reference  # noqa: E402
from inductor_ext.targets import amd  # noqa: E402
from inductor_ext.templates.family import OpSpec, TensorSpec  # noqa: E402
from inductor_ext.templates.triton import topk as tk  # noqa: E402
from inductor_ext.testing import golden, isa  # noqa: E402

Problem, Config = tk.TopkProblem, tk.TopkConfig
GOLDEN_DIR = Path(__file__).parent / "golden" / "triton_topk"
FACTS = amd.INSTRUCTIONS["gfx950"]

# ------------------------------------------------------------------------------ tier G golden

GOLDEN = {
    "bf16_vocab_1x32000_k50": Problem(1, 32000, 50, True, "bfloat16"),
    "fp32_router_4096x128_k8": Problem(4096, 128, 8, True, "float32"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_render_golden(case: str) -> None:
    p = GOLDEN[case]
    golden.assert_golden(GOLDEN_DIR, case, golden.snapshot(tk.render(p, tk.configs(p, "gfx950")[0])))


def test_golden_files_all_have_a_test() -> None:
    assert sorted(p.name for p in GOLDEN_DIR.glob("*.expected") if p.name[:-9] not in GOLDEN) == []


# -------------------------------------------------------------------------------- tier I ISA

ISA_CASES = {
    **{name: (p, tk.configs(p, "gfx950")[0]) for name, p in GOLDEN.items()},
    "fp16_smallest_k1_300": (Problem(16, 300, 1, False, "float16"), Config(1, 1024, 4)),
    "bf16_vocab_k64_4096x8w": (Problem(4, 128256, 64, True, "bfloat16"), Config(1, 4096, 8)),
}


@pytest.fixture(scope="module")
def compiled(isa_cache: str | None) -> dict[str, dict[str, str]]:
    names = sorted(ISA_CASES)
    jobs = [(tk.render(*ISA_CASES[n]), "gfx950") for n in names]
    return dict(zip(names, isa.compile_many(jobs, cache=isa_cache)))


@pytest.mark.isa
@pytest.mark.parametrize("case", sorted(ISA_CASES))
def test_isa_gfx950_compares_keys_and_swaps_lanes(compiled: dict[str, dict[str, str]], case: str) -> None:
    counts = isa.assert_has_instructions(compiled[case], "gfx950", [pattern for _, pattern in tk.KEY_INSTRUCTIONS["gfx950"]])
    problem = ISA_CASES[case][0]
    assert counts[FACTS["cmp_i64"]] >= 2 * tk.k_pad(problem.k), counts  # a network, not a scan
    if problem.k > 1:  # the bitonic merges exchange keys between lane halves (k=1 is a DPP max-reduction)
        isa.assert_has_instructions(compiled[case], "gfx950", [FACTS["permlane_swap"]])
    amdgcn = compiled[case]["amdgcn"]
    assert ".vgpr_spill_count: 0" in amdgcn, "the keys must stay in registers"


def test_key_instructions_are_gfx950_facts() -> None:
    assert [p for _, p in tk.KEY_INSTRUCTIONS["gfx950"]] == [FACTS["cmp_i64"], FACTS["dpp"], FACTS["store_8b"]]


# ----------------------------------------------------------------------- family protocol


def _spec(shape, stride, dtype="bfloat16", k=8, dim=-1, largest=True) -> OpSpec:
    out_shape = (*shape[:-1], k)
    out_stride = tuple(int(torch.Size(out_shape[i + 1:]).numel()) for i in range(len(out_shape)))
    return OpSpec("topk", (TensorSpec(shape, stride, dtype),), TensorSpec(out_shape, out_stride, "int64"),
                  {"k": k, "dim": dim, "largest": largest, "sorted": True}, "cuda")


def test_problem_for_flattens_leading_dims() -> None:
    p = tk.problem_for(_spec((2, 3, 77), (231, 77, 1), "float16", 7, 2, False))
    assert p == Problem(6, 77, 7, False, "float16")
    assert tk.problem_for(_spec((64, 10), (1, 64), "float32", 3)) == Problem(64, 10, 3, True, "float32")  # strided
    unsorted = _spec((4, 100), (100, 1))
    unsorted.scalars["sorted"] = False
    assert tk.problem_for(unsorted) == Problem(4, 100, 8, True, "bfloat16")  # sorted is one valid order


@pytest.mark.parametrize("spec, why", [
    (_spec((8, 100), (100, 1), dim=0), "last dimension only"),
    (_spec((8, 1000), (1000, 1), k=65), "k=65 is outside 1..64"),
    (_spec((8, 5), (5, 1), k=6), "k=6 is outside 1..5"),
    (_spec((8, 100), (100, 1), "float64"), "dtype float64 not in"),
    (_spec((8, 100), (100, 1), "int32"), "dtype int32 not in"),
    (_spec((0, 100), (100, 1)), "empty problem"),
], ids=["dim0", "k_over_64", "k_over_n", "fp64", "int32", "empty"])
def test_refusals_are_reasons(spec: OpSpec, why: str) -> None:
    reason = tk.problem_for(spec)
    assert isinstance(reason, str) and why in reason, reason


def test_configs_fit_the_row() -> None:
    assert {c.block_n for c in tk.configs(Problem(4096, 100, 8), "gfx950")} == {128}
    assert {c.block_m for c in tk.configs(Problem(4096, 64, 8), "gfx950")} == {4, 16}
    assert all(c.block_m == 1 and c.block_n >= 1024 for c in tk.configs(Problem(1, 32000, 64), "gfx950"))
    assert all(c in tk.ALL_CONFIGS for p in GOLDEN.values() for c in tk.configs(p, "gfx950"))
    assert "below k rounded up" in tk.refuse_config(Problem(1, 1000, 33), Config(1, 32), "gfx950")
    with pytest.raises(ValueError, match="not one of"):
        tk.configs(Problem(1, 100, 8), "gfx1250")
    with pytest.raises(ValueError, match="block_n=32 is below"):
        tk.render(Problem(1, 1000, 33), Config(1, 32))


# ---------------------------------------------------------------------- tier C interpreter


def _check(x: torch.Tensor, k: int, largest: bool, config: Config) -> None:
    """The kernel's indices against the reference's exactly (the tie rule), and against torch.topk:
    the same values, and the same indices wherever a value occurs once in its row."""
    p = Problem(x[..., 0].numel(), x.shape[-1], k, largest, str(x.dtype).removeprefix("torch."))
    got = tk.call(p, config, "cpu", x)
    ref_values, ref_indices = topk_reference(x, k, largest)
    assert got.dtype == torch.int64 and got.shape == (*x.shape[:-1], k)
    torch.testing.assert_close(got, ref_indices, rtol=0, atol=0)
    values = x.gather(-1, got)
    want = torch.topk(x, k, largest=largest)
    torch.testing.assert_close(values, want.values, rtol=0, atol=0, equal_nan=True)
    unique = (x.unsqueeze(-1) == values.unsqueeze(-2)).sum(-2) == 1
    assert torch.equal(got[unique], want.indices[unique])


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("make, k, largest, config", [
    (lambda: _rand(1, 1000, dtype=torch.bfloat16), 5, True, Config(1, 256, 4)),  # M=1, 4 chunks, a 232 tail
    (lambda: _rand(3, 300, dtype=torch.float16), 64, False, Config(2, 128, 4)),  # k=64 merges, rows % block_m
    (lambda: _rand(40, 10).t(), 3, True, Config(4, 64, 4)),  # columns of a matrix: stride 10 along the row
    (lambda: _rand(3, 40, 2)[:, :, 1], 3, False, Config(4, 64, 4)),  # every other element
    (lambda: _rand(5, 200), 1, True, Config(4, 256, 4)),  # k=1 (a max), one chunk
    (lambda: _rand(1, 1000, seed=1), 1, False, Config(1, 256, 4)),  # k=1 over chunks
    (lambda: _rand(2, 3, 77, dtype=torch.bfloat16), 7, True, Config(16, 128, 4)),  # leading dims flattened
    (lambda: _rand(33, 64, dtype=torch.float16), 8, True, Config(16, 64, 4)),  # an MoE router, n = block_n
], ids=["m1_bf16_tail", "k64_smallest_fp16", "transposed", "strided", "k1", "k1_chunks", "3d", "router"])
def test_interp_matches_reference(make, k: int, largest: bool, config: Config) -> None:
    _check(make(), k, largest, config)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_interp_ties_go_to_the_lowest_index(largest: bool) -> None:
    """Few distinct values (many ties), signed zeros and NaNs: the kernel keeps the reference's rule
    (lowest index first, -0.0 == 0.0, NaN above every number), and torch.topk's values."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randint(-3, 4, (3, 200), generator=gen).float()
    x[0, ::2], x[0, 1::2], x[0, 100:103] = -0.0, 0.0, 1.0  # signed zeros are equal: index order
    x[1, 5::50] = torch.tensor([0xFFC00000], dtype=torch.int64).to(torch.int32).view(torch.float32)  # a negative NaN
    x[1, 30] = float("nan")
    x[2, :] = 2.0  # a row of one value: the first k indices
    _check(x, 12, largest, Config(1, 64, 4))
    got = tk.call(Problem(3, 200, 12, largest), Config(1, 64, 4), "cpu", x)
    assert got[2].tolist() == list(range(12))
    if largest:
        assert got[0].tolist() == [100, 101, 102, *range(9)]
        assert got[1, :5].tolist() == [5, 30, 55, 105, 155]  # the NaNs first, whatever their sign, in index order
    else:
        assert got[0].tolist() == list(range(12))
        assert not set(got[1].tolist()) & {5, 30, 55, 105, 155}
