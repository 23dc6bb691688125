"""flydsl.mx_scaled_mm (gfx950, MXFP8/MXFP4): tier I (scaled MFMA asserted, formats checked) and
the host-side model (writes once, K covered, lane scales, numerics vs kernels.scaled_gemm)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from inductor_ext.kernels.mx import quantize_mxfp4, quantize_mxfp8
from inductor_ext.kernels.nvfp4 import e2m1_to_float, to_blocked, unpack_e2m1
from inductor_ext.kernels.scaled_gemm import scaled_mm_reference
from inductor_ext.targets import amd
from inductor_ext.templates.family import OpSpec, TensorSpec
from inductor_ext.templates.flydsl import mx_scaled_mm as mx
from inductor_ext.templates.flydsl.tiling import cdiv
from inductor_ext.testing import isa
from inductor_ext.testing.flydsl_model import MxScales, Operand, run_gemm

Problem, Config = mx.MxScaledMmProblem, mx.MxScaledMmConfig
SCALED_MFMA = amd.INSTRUCTIONS["gfx950"]["mfma_mx"]

ISA_CASES = {
    "fp8_blocked": (Problem(256, 256, 512, "fp8_e4m3"), Config(128, 128, 128, 2, 2)),
    "fp8_plain_f32_decode": (Problem(8, 512, 512, "fp8_e4m3", "plain", "float32"), Config(16, 64, 128, 1, 2)),
    "fp4_blocked_bias": (Problem(256, 256, 512, "fp4_e2m1", bias=True), Config(128, 128, 256, 2, 2)),
    "fp4_plain_decode": (Problem(4, 1024, 1024, "fp4_e2m1", "plain"), Config(16, 128, 512, 1, 4)),
}


@pytest.fixture(scope="module")
def compiled(isa_cache: str | None) -> dict[str, dict[str, str]]:
    names = sorted(ISA_CASES)
    return dict(zip(names, mx.isa_many([(*ISA_CASES[n], "gfx950") for n in names], cache=isa_cache)))


@pytest.mark.isa
@pytest.mark.parametrize("case", sorted(ISA_CASES))
def test_isa_gfx950(compiled: dict[str, dict[str, str]], case: str) -> None:
    problem, config = ISA_CASES[case]
    asm, t = compiled[case], mx.tiling(problem, config)
    facts = amd.INSTRUCTIONS["gfx950"]
    counts = isa.assert_has_instructions(asm, "gfx950", [SCALED_MFMA, isa.MMA_INSTRUCTION["gfx950"], facts["global_load_16b"],
                                                         facts["global_load_1b"], facts["lds_read_16b"]])
    assert counts[SCALED_MFMA] == counts[isa.MMA_INSTRUCTION["gfx950"]] == t.reps_m * t.reps_n * t.k_steps, counts
    mfmas = [line for line in asm["amdgcn"].splitlines() if "v_mfma" in line]
    if problem.fmt == "fp4_e2m1":  # operand format fp4 for A and B; 4 VGPRs of data each
        assert all("cbsz:4 blgp:4" in line and ", v[" in line for line in mfmas), mfmas[:2]
    else:  # fp8 (format 0, the default: no cbsz/blgp printed); 8 VGPRs each
        assert not any("cbsz" in line or "blgp" in line for line in mfmas), mfmas[:2]
    meta = json.loads(asm["metadata"])["kernels"]["flydsl_mx_scaled_mm_0"]
    assert meta["vgpr_spill_count"] == 0 and meta["private_segment_fixed_size"] == 0, meta


# ----------------------------------------------------------------------- family protocol


def _ts(shape: tuple[int, ...], stride: tuple[int, ...], dtype: str) -> TensorSpec:
    return TensorSpec(shape, stride, dtype)


def _spec(m: int, n: int, k: int, fmt: str = "float8_e4m3fn", scales: str = "blocked", out: str = "bfloat16",
          scale_dtype: str = "float8_e8m0fnu", b_stride: tuple[int, int] | None = None) -> OpSpec:
    kk = k // 2 if fmt == "float4_e2m1fn_x2" else k
    kb = k // 32
    if scales == "blocked":
        sa = _ts((cdiv(m, 128) * 128 * cdiv(kb, 4) * 4,), (1,), scale_dtype)
        sb = _ts((cdiv(n, 128) * 128 * cdiv(kb, 4) * 4,), (1,), scale_dtype)
    else:
        sa, sb = _ts((m, kb), (kb, 1), scale_dtype), _ts((n, kb), (kb, 1), scale_dtype)
    return OpSpec("scaled_mm", (_ts((m, kk), (kk, 1), fmt), _ts((kk, n), b_stride or (1, kk), fmt), sa, sb, None, None),
                  _ts((m, n), (n, 1), out), device_type="cuda")


def test_problem_for() -> None:
    p = mx.problem_for(_spec(100, 64, 256))
    assert (p.m, p.n, p.k, p.fmt, p.scale_layout, p.out_dtype) == (100, 64, 256, "fp8_e4m3", "blocked", "bfloat16")
    p = mx.problem_for(_spec(3, 64, 512, "float4_e2m1fn_x2", "plain", "float32"))
    assert (p.k, p.fmt, p.scale_layout, p.out_dtype) == (512, "fp4_e2m1", "plain", "float32")
    assert "tensor/row-wise" in mx.problem_for(_spec(64, 64, 256, scale_dtype="float32"))
    assert "column-major" in mx.problem_for(_spec(64, 64, 256, b_stride=(64, 1)))
    assert "MX block" in mx.problem_for(_spec(64, 64, 48, scales="plain"))
    assert "float8_e4m3fn" in mx.problem_for(_spec(64, 64, 64, fmt="bfloat16"))


def test_every_config_is_a_valid_tiling() -> None:
    for fmt, table in mx._CONFIGS.items():
        for config in table:
            assert mx.refuse_config(Problem(64, 64, 256, fmt), config) is None, (fmt, config)


# ---------------------------------------------------------------------- host-side model

MODEL_SHAPES = [(1, 40, 128), (37, 45, 160), (70, 33, 96)]


def _decoded(q: torch.Tensor, fmt: str) -> np.ndarray:
    return (e2m1_to_float(unpack_e2m1(q)) if fmt == "fp4_e2m1" else q.float()).reshape(-1).numpy()


@pytest.mark.parametrize("fmt", list(mx.FORMATS))
@pytest.mark.parametrize("layout", mx.SCALE_LAYOUTS)
@pytest.mark.parametrize("m,n,k", MODEL_SHAPES)
def test_model_matches_reference(fmt: str, layout: str, m: int, n: int, k: int) -> None:
    g = torch.Generator().manual_seed(m + n + k)
    quantize = quantize_mxfp4 if fmt == "fp4_e2m1" else quantize_mxfp8
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-4, 4, (m, 1), generator=g).float())
    w = torch.randn(n, k, generator=g)
    xq, wq = quantize(x), quantize(w)
    problem = Problem(m, n, k, fmt, layout)
    config = mx.configs(problem, "gfx950")[0]
    t = mx.tiling(problem, config)
    kb = k // 32

    def scales(q, rows: int) -> MxScales:
        codes = q.scales.view(torch.uint8)
        if layout == "blocked":
            return MxScales(to_blocked(codes).numpy(), layout, 0, 0, cdiv(kb, 4), rows, kb)
        return MxScales(codes.reshape(-1).numpy(), layout, kb, 1, 0, rows, kb)

    a = Operand(_decoded(xq.qdata, fmt), k, 1, True, scales=scales(xq, m))
    b = Operand(_decoded(wq.qdata, fmt), k, 1, True, scales=scales(wq, n))  # B = W.T: column n at n*K
    res = run_gemm(t, a, b, m, n, k)
    assert (res.writes == 1).all(), sorted(set(res.writes.ravel()))
    want = scaled_mm_reference(xq, wq, out_dtype=torch.float32).numpy()
    np.testing.assert_allclose(res.out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_model_fails_when_a_lane_takes_the_wrong_block_scale() -> None:
    # If the lane's scale were looked up one block off, the result changes: the model checks the
    # scale addressing, not only the data.
    m, n, k = 16, 16, 128
    x = torch.randn(m, k) * torch.exp2(torch.arange(k) // 32).float()
    xq, wq = quantize_mxfp8(x), quantize_mxfp8(torch.randn(n, k))
    problem = Problem(m, n, k, "fp8_e4m3", "plain")
    t = mx.tiling(problem, Config(16, 64, 128, 1, 2))
    codes_a, codes_b = xq.scales.view(torch.uint8), wq.scales.view(torch.uint8)
    shifted = torch.roll(codes_a, 1, dims=1)  # block kb's scale stored at kb + 1
    good = run_gemm(t, Operand(_decoded(xq.qdata, "fp8_e4m3"), k, 1, True, scales=MxScales(codes_a.reshape(-1).numpy(), "plain", 4, 1, 0, m, 4)),
                    Operand(_decoded(wq.qdata, "fp8_e4m3"), k, 1, True, scales=MxScales(codes_b.reshape(-1).numpy(), "plain", 4, 1, 0, n, 4)), m, n, k)
    bad = run_gemm(t, Operand(_decoded(xq.qdata, "fp8_e4m3"), k, 1, True, scales=MxScales(shifted.reshape(-1).numpy(), "plain", 4, 1, 0, m, 4)),
                   Operand(_decoded(wq.qdata, "fp8_e4m3"), k, 1, True, scales=MxScales(codes_b.reshape(-1).numpy(), "plain", 4, 1, 0, n, 4)), m, n, k)
    want = scaled_mm_reference(xq, wq, out_dtype=torch.float32).numpy()
    np.testing.assert_allclose(good.out, want, rtol=1e-5, atol=1e-4)
    assert not np.allclose(bad.out, want, rtol=1e-2)
