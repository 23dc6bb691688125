"""The SYCL GEMM / gemv template (inductor_ext/templates/sycl/gemm.py).

- G golden: rendered kernels are snapshots under tests/golden/sycl_gemm/ (rewrite them with
  ``EXPECTTEST_ACCEPT=1 pytest tests/test_sycl_gemm.py``);
- C CPU-executed (``-m sycl``): the kernels rendered for xpu, built by Intel's run-time compiler
  and run on its OpenCL CPU device, against the plain-torch reference (kernels/gemm.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inductor_ext.kernels.gemm import gemm_reference
from inductor_ext.templates.family import OpSpec, TensorSpec
from inductor_ext.templates.sycl import gemm
from inductor_ext.testing import golden
from inductor_ext.testing.sycl_device import needs_sycl

GemmProblem, GemmConfig = gemm.GemmProblem, gemm.GemmConfig
GOLDEN_DIR = Path(__file__).parent / "golden" / "sycl_gemm"

GOLDEN_RENDERS = {
    # the first tiled config, fp32, K tail (70 % 16)
    "fp32_37x45x70_tiled": (GemmProblem(37, 45, 70, "float32"), 0),
    # addmm epilogue in bf16: loads widened and the store narrowed by bits
    "bf16_bias_64x64x64_tiled": (GemmProblem(64, 64, 64, "bfloat16", bias=True, alpha=0.5, beta=2.0), 0),
    # decode: one sub-group per column, reduce_over_group over K
    "fp16_1x4096x4096_gemv": (GemmProblem(1, 4096, 4096, "float16"), 0),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_RENDERS))
def test_render_golden(case: str) -> None:
    problem, index = GOLDEN_RENDERS[case]
    ks = gemm.render(problem, gemm.configs(problem, "xpu")[index], "xpu")
    assert ks.language == "sycl" and "nd_range_kernel<1>" in ks.source
    golden.assert_golden(GOLDEN_DIR, case, golden.snapshot(ks))


def test_golden_files_all_have_a_test() -> None:
    stale = sorted(p.name for p in GOLDEN_DIR.glob("*.expected") if p.stem not in GOLDEN_RENDERS)
    assert not stale, f"golden files no test compares (delete them): {stale}"


# ------------------------------------------------------------------------- problems and configs

def _spec(op: str, *shapes: tuple[int, ...] | None, dtype: str = "float32", **scalars: float) -> OpSpec:
    def tensor(shape: tuple[int, ...] | None) -> TensorSpec | None:
        if shape is None:
            return None
        stride, step = [], 1
        for size in reversed(shape):
            stride.insert(0, step)
            step *= size
        return TensorSpec(tuple(shape), tuple(stride), dtype)

    inputs = tuple(tensor(s) for s in shapes)
    m, n = shapes[-2][0], shapes[-1][1]
    return OpSpec(op, inputs, tensor((m, n)), dict(scalars), "xpu")


def test_problem_for_mm_and_addmm() -> None:
    assert gemm.problem_for(_spec("mm", (5, 7), (7, 9))) == GemmProblem(5, 9, 7)
    assert gemm.problem_for(_spec("addmm", (9,), (5, 7), (7, 9), alpha=2.0, beta=0.5)) == \
        GemmProblem(5, 9, 7, bias=True, alpha=2.0, beta=0.5)


def test_problem_for_gives_reasons() -> None:
    assert "serves" in gemm.problem_for(_spec("bmm", (2, 5, 7), (2, 7, 9)))
    assert "float64" in gemm.problem_for(_spec("mm", (5, 7), (7, 9), dtype="float64"))
    assert "does not broadcast" in gemm.problem_for(_spec("addmm", (4,), (5, 7), (7, 9)))


def test_configs_offer_gemv_for_decode_only() -> None:
    assert gemm.configs(GemmProblem(3, 64, 64), "xpu")[0] == GemmConfig("gemv", rows=4, sub_groups=8)
    assert all(c.kind == "tiled" for c in gemm.configs(GemmProblem(9, 64, 64), "xpu"))
    assert all(c.check() is None for p in (GemmProblem(1, 8, 8), GemmProblem(500, 8, 8))
               for c in gemm.configs(p, "xpu"))
    with pytest.raises(ValueError, match="not one of"):
        gemm.configs(GemmProblem(3, 64, 64), "sm_90a")


def test_bad_configs_say_why() -> None:
    assert "sg_rows" in GemmConfig("tiled", 64, 64, 16, 7, 2).check()
    assert "positive" in GemmConfig("tiled").check()
    assert "multiple of 16" in GemmConfig("tiled", 64, 40, 16, 8, 2).check()
    assert "exceeds 256" in GemmConfig("tiled", 128, 128, 16, 8, 2).check()
    with pytest.raises(ValueError, match="cannot serve M=5"):
        gemm.render(GemmProblem(5, 8, 8), GemmConfig("gemv", rows=4, sub_groups=8))


# ------------------------------------------------------------------------------ tier C

TOLERANCE = {"float32": (1e-5, 1e-5), "float16": (1e-3, 1e-3), "bfloat16": (8e-3, 8e-3)}

# (m, n, k): M=1 and small M (gemv), K not a multiple of any tile_k, N not a multiple of 16
SHAPES = [(1, 96, 160), (3, 50, 70), (37, 45, 70), (100, 130, 33)]
DTYPES = ["float32", "float16", "bfloat16"]


def _pairs() -> list[tuple[GemmProblem, GemmConfig]]:
    pairs = [(GemmProblem(m, n, k, dtype), c) for dtype in DTYPES for m, n, k in SHAPES
             for c in gemm.configs(GemmProblem(m, n, k, dtype), "xpu")]
    pairs += [(GemmProblem(m, n, k, "float32", bias=True, alpha=0.5, beta=2.0), c) for m, n, k in SHAPES[:3]
              for c in gemm.configs(GemmProblem(m, n, k), "xpu")]
    return pairs


@pytest.fixture(scope="module")
def built() -> None:
    """Every kernel of this module in one compiler run (what autotuning candidates do)."""
    gemm.prebuild(_pairs(), device="cpu")


def _check(a: torch.Tensor, b: torch.Tensor, problem: GemmProblem, config: GemmConfig,
           bias: torch.Tensor | None = None) -> None:
    out = gemm.run(problem, config, "xpu", a, b, bias)
    expected = gemm_reference(a, b, bias, problem.alpha, problem.beta)
    rtol, atol = TOLERANCE[problem.dtype]
    torch.testing.assert_close(out, expected, rtol=rtol, atol=atol, msg=lambda m: f"{problem} {config.name()}: {m}")


@needs_sycl
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(built: None, shape: tuple[int, int, int], dtype: str) -> None:
    m, n, k = shape
    torch.manual_seed(m * n + k)
    a, b = torch.randn(m, k).to(getattr(torch, dtype)), torch.randn(k, n).to(getattr(torch, dtype))
    problem = GemmProblem(m, n, k, dtype)
    for config in gemm.configs(problem, "xpu"):
        _check(a, b, problem, config)


@needs_sycl
@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: "x".join(map(str, s)))
def test_non_contiguous_operands_and_addmm(built: None, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    a = torch.randn(k + 3, m).t()[:, 3:]  # transposed and offset: strides (1, m)
    b = torch.randn(k, 2 * n)[:, ::2]  # every other column: strides (2n, 2)
    problem = GemmProblem(m, n, k, "float32", bias=True, alpha=0.5, beta=2.0)
    for config in gemm.configs(problem, "xpu"):
        _check(a, b, problem, config, torch.randn(n))  # row vector, broadcast over M
        _check(a, b, problem, config, torch.randn(m, 1))  # column vector, broadcast over N


@needs_sycl
def test_run_checks_its_inputs() -> None:
    problem = GemmProblem(4, 8, 16)
    config = gemm.configs(problem, "xpu")[0]
    with pytest.raises(ValueError, match="got A"):
        gemm.run(problem, config, "xpu", torch.randn(4, 15), torch.randn(15, 8))
    with pytest.raises(ValueError, match="bias missing"):
        gemm.run(GemmProblem(4, 8, 16, bias=True), config, "xpu", torch.randn(4, 16), torch.randn(16, 8))


@needs_sycl
def test_bench_smoke_path_measures_and_checks() -> None:
    """bench/xpu_kernels.py's GEMM part on the CPU device: every row has a time, its spread, an
    error against the reference and a ratio to ATen (the full script needs an Intel GPU)."""
    import importlib.util
    import json

    path = Path(__file__).parent.parent / "bench" / "xpu_kernels.py"
    spec = importlib.util.spec_from_file_location("xpu_kernels", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.bench_gemm("cpu", torch.float32, [SHAPES[0]], reps=2, inner=1)
    bench.add_ratios(rows)
    arms = [r["arm"] for r in rows]
    assert arms[0] == "aten" and arms[-1] == "sycl.gemm(best)" and any(a.startswith("sycl.gemm[gemv") for a in arms)
    assert all(r["max_abs_err"] < 1e-4 and r["min_us"] <= r["median_us"] <= r["max_us"] for r in rows)
    assert all("speedup_vs_aten" in r for r in rows)
    json.dumps(rows)
