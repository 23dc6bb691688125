"""triton.tdm_gemm (gfx1250): tier G (golden sources), tier I (tensor_load_to_lds + v_wmma in the
gfx1250 ISA, bf16/fp16/fp8) and tier C (Triton's interpreter vs kernels.matmul / scaled_gemm,
odd shapes, padded rows, tensor- and row-wise fp8 scales)."""

from __future__ import annotations

import dataclasses
import os
import sys

if "triton" not in sys.modules:  # Triton picks its interpreter at first import (see conftest.py)
    os.environ["TRITON_INTERPRET"] = "1"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from inductor_ext.kernels.matmul import mm_reference  # noqa: E402
from inductor_ext.kernels.scaled_gemm import scaled_mm_reference  # noqa: E402
from inductor_ext.targets import amd  # noqa: E402
from inductor_ext.templates.family import OpSpec, TensorSpec  # noqa: E402
from inductor_ext.templates.triton import tdm_gemm as tt  # noqa: E402
from inductor_ext.testing import golden, isa  # noqa: E402

Problem = tt.TdmGemmProblem
GOLDEN_DIR = Path(__file__).parent / "golden" / "triton_tdm_gemm"
FACTS = amd.INSTRUCTIONS["gfx1250"]

# ------------------------------------------------------------------------------ tier G golden

GOLDEN = {
    "bf16_512x512x512": Problem(512, 512, 512),
    "fp16_addmm_decode_8x4096x4096": Problem(8, 4096, 4096, "float16", "float16", True, 0.5, 2.0),
    "fp8_rowscaled_bias_256x512x1024": Problem(256, 512, 1024, "float8_e4m3fn", "bfloat16", True, scaling="row"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_render_golden(case: str) -> None:
    p = GOLDEN[case]
    golden.assert_golden(GOLDEN_DIR, case, golden.snapshot(tt.render(p, tt.configs(p, "gfx1250")[0])))


def test_inductor_source_golden() -> None:
    """One Inductor template for mm, addmm and scaled_mm (the generic adapter builds one per family):
    SCALING and HAS_BIAS pick the inputs and the scale step."""
    text = tt.inductor_source()
    golden.assert_golden(GOLDEN_DIR, "inductor_source", text)
    assert tt.BODY in text and tt.BODY in tt.render(Problem(64, 64, 64), tt.INTERPRETER_CONFIGS[0]).source
    kwargs = tt.inductor_kwargs(Problem(64, 64, 128, "float8_e4m3fn", "bfloat16", True, scaling="row"),
                                tt.INTERPRETER_CONFIGS[0], "gfx1250")
    assert (kwargs["SCALING"], kwargs["HAS_BIAS"]) == (2, True)
    kwargs = tt.inductor_kwargs(Problem(64, 64, 128, bias=True), tt.INTERPRETER_CONFIGS[0], "gfx1250")
    assert (kwargs["SCALING"], kwargs["HAS_BIAS"]) == (0, False)  # addmm's bias is Inductor's epilogue


def test_golden_files_all_have_a_test() -> None:
    names = {f"{c}.expected" for c in GOLDEN} | {"inductor_source.expected"}
    assert sorted(p.name for p in GOLDEN_DIR.glob("*.expected") if p.name not in names) == []


# -------------------------------------------------------------------------------- tier I ISA

ISA_CASES = {**GOLDEN, "fp8_tensorscaled_64x64x256": Problem(64, 64, 256, "float8_e4m3fn", "float32", scaling="tensor")}
WMMA = {"bfloat16": FACTS["wmma_bf16"], "float16": FACTS["wmma_f16"], "float8_e4m3fn": FACTS["wmma_fp8"]}


@pytest.fixture(scope="module")
def compiled(isa_cache: str | None) -> dict[str, dict[str, str]]:
    names = sorted(ISA_CASES)
    jobs = [(tt.render(ISA_CASES[n], tt.configs(ISA_CASES[n], "gfx1250")[0]), "gfx1250") for n in names]
    return dict(zip(names, isa.compile_many(jobs, cache=isa_cache)))


@pytest.mark.isa
@pytest.mark.parametrize("case", sorted(ISA_CASES))
def test_isa_gfx1250_uses_tdm_and_wmma(compiled: dict[str, dict[str, str]], case: str) -> None:
    problem = ISA_CASES[case]
    config = tt.configs(problem, "gfx1250")[0]
    counts = isa.assert_has_instructions(compiled[case], "gfx1250", [isa.MMA_INSTRUCTION["gfx1250"],
                                                                     WMMA[problem.dtype], FACTS["tdm_load"], FACTS["tdm_wait"]])
    assert counts[WMMA[problem.dtype]] == counts[isa.MMA_INSTRUCTION["gfx1250"]], counts
    # A and B of each pipeline stage (prologue + steady state) come by TDM, never by per-lane loads.
    assert counts[FACTS["tdm_load"]] == 2 * config.num_stages, counts
    assert isa.instruction_counts(compiled[case], "gfx1250", [FACTS["global_load_16b"]])[FACTS["global_load_16b"]] == 0


# ----------------------------------------------------------------------- family protocol


def _ts(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))


def test_problem_for() -> None:
    x, w = torch.empty(10, 256, dtype=torch.bfloat16), torch.empty(96, 256, dtype=torch.bfloat16)
    out = TensorSpec((10, 96), (96, 1), "bfloat16")
    p = tt.problem_for(OpSpec("mm", (_ts(x), _ts(w.t())), out))
    assert (p.m, p.n, p.k, p.dtype, p.scaling) == (10, 96, 256, "bfloat16", "none")
    assert "contiguous along K" in tt.problem_for(OpSpec("mm", (_ts(x), _ts(w.t().contiguous())), out))
    assert "16 bytes" in tt.problem_for(OpSpec("mm", (_ts(x[:, :100]), _ts(w[:, :100].t())), out))
    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    one = torch.empty((), dtype=torch.float32)
    p = tt.problem_for(OpSpec("scaled_mm", (_ts(x8), _ts(w8.t()), _ts(one), _ts(one), None, None), out))
    assert (p.scaling, p.out_dtype) == ("tensor", "bfloat16")
    assert "MX" in tt.problem_for(OpSpec("scaled_mm", (_ts(x8), _ts(w8.t()), _ts(torch.empty(10, 8, dtype=torch.float8_e8m0fnu)),
                                                        _ts(torch.empty(96, 8, dtype=torch.float8_e8m0fnu)), None, None), out))
    with pytest.raises(ValueError, match="not one of"):
        tt.configs(Problem(8, 8, 64), "gfx950")


# ---------------------------------------------------------------------- tier C interpreter


def _padded(rows: int, cols: int, gen: torch.Generator, dtype: torch.dtype, pad: int) -> torch.Tensor:
    """rows x cols values in a view whose rows are ``pad`` elements longer (non-contiguous)."""
    full = torch.randn(rows, cols + pad, generator=gen)
    return full.to(dtype)[:, :cols]


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k,pad,bias", [
    (1, 17, 72, 0, False),  # one row, K tail (72 % 32), N odd
    (37, 45, 88, 8, False),  # odd M and N, padded rows: strides 96, not K
    (33, 20, 64, 16, True),  # addmm
], ids=["m1_ktail", "odd_padded", "addmm"])
@pytest.mark.parametrize("config", tt.INTERPRETER_CONFIGS, ids=lambda c: c.name())
def test_interp_matches_reference(dtype: torch.dtype, m: int, n: int, k: int, pad: int, bias: bool, config) -> None:
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    gen = torch.Generator().manual_seed(m * 1000 + n + k)
    a, w = _padded(m, k, gen, dtype, pad), _padded(n, k, gen, dtype, pad)
    bias_t = torch.randn(n, generator=gen).to(dtype) if bias else None
    out = TensorSpec((m, n), (n, 1), str(dtype).removeprefix("torch."))
    inputs = (_ts(bias_t), _ts(a), _ts(w.t())) if bias else (_ts(a), _ts(w.t()))
    problem = tt.problem_for(OpSpec("addmm" if bias else "mm", inputs, out, {"alpha": 0.5, "beta": 2.0} if bias else {}))
    assert isinstance(problem, Problem), problem
    with interpreter_fixes():
        c = tt.run(problem, config, "gfx1250", *((bias_t, a, w.t()) if bias else (a, w.t())))
    ref = mm_reference(a, w.t(), bias_t, alpha=0.5, beta=2.0)
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(c.float(), ref.float(), **tol)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("scaling", ["tensor", "row"])
@pytest.mark.parametrize("m,n,k,bias", [(1, 40, 64, True), (37, 45, 160, False)], ids=["m1_bias", "odd"])
def test_interp_fp8_scaled_mm(scaling: str, m: int, n: int, k: int, bias: bool) -> None:
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    gen = torch.Generator().manual_seed(m + n + k)
    a = (torch.randn(m, k, generator=gen) * 8).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, generator=gen) * 8).to(torch.float8_e4m3fn)
    sa = (torch.rand(m, 1, generator=gen) + 0.5) if scaling == "row" else torch.tensor(0.25)
    sb = (torch.rand(1, n, generator=gen) + 0.5) if scaling == "row" else torch.tensor(2.0)
    bias_t = torch.randn(n, generator=gen).to(torch.bfloat16) if bias else None
    problem = Problem(m, n, k, "float8_e4m3fn", "bfloat16", bias, scaling=scaling)
    with interpreter_fixes():
        c = tt.run(problem, tt.INTERPRETER_CONFIGS[0], "gfx1250", a, w.t(), sa, sb, bias_t)
    ref = scaled_mm_reference(a, w, alpha=sa * sb, bias=bias_t, out_dtype=torch.bfloat16)
    torch.testing.assert_close(c.float(), ref.float(), rtol=1e-2, atol=1e-2)


def test_swap_ab_configs_are_refused():
    """GemmConfig is shared with triton.gemm, whose decode configs swap A and B; this family has
    no swap-AB body, so such a config (a policy tile, a shared cache entry) is never offered."""
    from inductor_ext.templates.base import Tile
    from inductor_ext.templates.triton import tdm_gemm

    problem = tdm_gemm.example_problem(8, 4096, 4096)
    swapped = dataclasses.replace(tdm_gemm.configs(problem, "gfx1250")[-1], swap_ab=True)
    assert tdm_gemm.refuse_config(problem, swapped, "gfx1250") == "triton.tdm_gemm has no swap-AB body (swap_ab=True)"
    assert tdm_gemm.refuse_config(problem, dataclasses.replace(swapped, swap_ab=False), "gfx1250") is None
    assert tdm_gemm.config_from_tile(Tile(16, 128, 256, swap_ab=True)) is None
