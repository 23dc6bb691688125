"""Metal template families (target mps): tier G (golden MSL under tests/golden/metal/) and tier C
(every default config run by the Metal-on-CPU executor, compared with the plain-torch references
in inductor_ext.kernels at odd shapes, with tolerances of about one unit in the last place of
the output dtype). On a Mac the same numerics tests also run on the GPU (tier D, ``device``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inductor_ext.templates import registry

from inductor_ext.kernels.matmul import grouped_mm_reference
from inductor_ext.kernels.scaled_gemm import scaled_mm_reference
from inductor_ext.kernels.softmax import softmax_reference
from inductor_ext.templates.family import OpSpec, TensorSpec
from inductor_ext.templates.metal import grouped_mm, linear_gemv, scaled_mm, softmax
from inductor_ext.testing.golden import assert_golden, snapshot

pytestmark = pytest.mark.metal_cpu

GOLDEN = Path(__file__).parent / "golden" / "metal"
FAMILIES = (scaled_mm, linear_gemv, grouped_mm, softmax)
# About one unit in the last place of each output dtype (fp32: accumulation order).
TOL = {torch.bfloat16: dict(rtol=2**-7, atol=1e-5), torch.float16: dict(rtol=2**-10, atol=1e-5),
       torch.float32: dict(rtol=2e-5, atol=1e-6)}


DEVICES = ["cpu", pytest.param("mps", marks=[pytest.mark.device, pytest.mark.skipif(
    not torch.backends.mps.is_available(), reason="needs an Apple GPU (MPS); the cpu case runs the same kernels")])]


def on(device: str, *tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """The tensors on ``device``, strides and storage offsets kept (their whole storage moves)."""
    def move(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None or device == "cpu":
            return t
        flat = torch.as_strided(t, (t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
        return torch.as_strided(flat.to(device), t.shape, t.stride(), t.storage_offset())

    return [move(t) for t in tensors]


def spec_of(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))


def strided(rows: int, cols: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """A [rows, cols] view with a row stride wider than cols (not contiguous)."""
    return (torch.randn(rows, cols + 3) * scale).to(dtype)[:, :cols]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.NAME)
def test_family_protocol(family):
    assert family.TARGETS == ("mps",) and family.CHOICE_KIND == "extern" and family.OPS
    for name in ("problem_for", "refuse_problem", "configs", "render", "call", "ALL_CONFIGS", "Problem", "Config",
                 "compile_asm"):
        assert hasattr(family, name), name
    assert family.CPU_EXECUTOR == "the Metal-on-CPU executor"  # interpret mode runs it on CPU tensors
    registry.check(family)  # what the registry requires of a family


# ------------------------------------------------------------------------ tier G
GOLDEN_CASES = {
    "scaled_mm_gemv_rowwise_bias_bf16": (scaled_mm, scaled_mm.Problem(2, 4096, 4096, "rowwise", "bfloat16", True),
                                         scaled_mm.Config("gemv", 4, 2, 8)),
    "scaled_mm_tiled_tensorwise_fp32": (scaled_mm, scaled_mm.Problem(64, 512, 512, "tensorwise", "float32"),
                                        scaled_mm.Config("tiled", block_m=64, block_n=64, block_k=16)),
    "scaled_mm_mma_rowwise_bf16": (scaled_mm, scaled_mm.Problem(128, 4096, 4096, "rowwise", "bfloat16", True),
                                   scaled_mm.Config("tiled", block_m=64, block_n=64, block_k=32, mma=True)),
    "linear_gemv_bf16_bias_silu": (linear_gemv, linear_gemv.Problem(1, 4096, 4096, "bfloat16", True, "silu"),
                                   linear_gemv.Config(4, 2, 8)),
    "grouped_mm_gemv_bf16": (grouped_mm, grouped_mm.Problem(8, 1408, 2048, 64, "bfloat16"), grouped_mm.Config(4, 2, 8)),
    "softmax_split_bf16_to_fp32": (softmax, softmax.Problem(1, 128256, "bfloat16", "float32"), softmax.Config(256, 32)),
    "softmax_row_fp16": (softmax, softmax.Problem(8, 32000, "float16"), softmax.Config(1024, 1)),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_msl(case):
    family, problem, config = GOLDEN_CASES[case]
    ks = family.render(problem, config, "mps")
    assert ks.language == "msl" and ks.template == family.NAME
    assert_golden(GOLDEN, case, snapshot(ks))


# ------------------------------------------------------------------------ scaled_mm
def _fp8_operands(m, n, k, scaling, b_layout):
    a = strided(m, k, torch.float8_e4m3fn, scale=4.0)
    w = (torch.randn(n, k) * 4.0).to(torch.float8_e4m3fn)
    b = w.t() if b_layout == "nk" else w.t().contiguous()  # column-major (usual) or row-major B
    if scaling == "tensorwise":
        sa, sb = torch.tensor(0.37), torch.tensor(1.7)
    else:
        sa, sb = torch.rand(m, 1) + 0.25, torch.rand(1, n) + 0.25
    return a, w, b, sa, sb


SCALED_CASES = [  # m, n, k, scaling, out dtype, bias, B layout
    (1, 37, 100, "tensorwise", torch.bfloat16, True, "nk"),
    (3, 64, 131, "rowwise", torch.float16, False, "nk"),
    (4, 33, 257, "rowwise", torch.float32, True, "nk"),
    (17, 45, 70, "rowwise", torch.bfloat16, True, "nk"),
    (9, 31, 50, "tensorwise", torch.float32, False, "kn"),
]


@pytest.mark.parametrize("m, n, k, scaling, out_dtype, bias, layout", SCALED_CASES)
@pytest.mark.parametrize("device", DEVICES)
def test_scaled_mm_matches_reference(device, m, n, k, scaling, out_dtype, bias, layout):
    torch.manual_seed(m * 1000 + n)
    a, w, b, sa, sb = _fp8_operands(m, n, k, scaling, layout)
    bias_t = torch.randn(n).to(out_dtype) if bias else None
    spec = OpSpec("scaled_mm", (spec_of(a), spec_of(b), spec_of(sa), spec_of(sb), bias_t is not None and spec_of(bias_t) or None),
                  TensorSpec((m, n), (n, 1), str(out_dtype).removeprefix("torch.")), device_type="mps")
    problem = scaled_mm.problem_for(spec)
    assert isinstance(problem, scaled_mm.Problem) and problem.scaling == scaling
    cfgs = scaled_mm.configs(problem, "mps")
    assert {c.path for c in cfgs} == {"gemv" if m <= 4 and layout == "nk" else "tiled"}
    want = scaled_mm_reference(a, w, alpha=sa * sb, bias=bias_t, out_dtype=out_dtype)
    # ATen's CPU fp8 GEMM sums and scales in another order than the reference: on an AVX2 CPU one
    # fp32 output of 279 differed by 3e-6 (relative 6e-4, from cancellation), so it gets a wider
    # atol; ours are held to TOL
    aten_tol = {**TOL[out_dtype], "atol": 1e-5}
    torch.testing.assert_close(torch._scaled_mm(a, b, sa, sb, bias=bias_t, out_dtype=out_dtype), want, **aten_tol)
    for config in cfgs:
        got = scaled_mm.call(problem, config, "mps", *on(device, a, b, sa, sb, bias_t)).cpu()
        assert got.dtype == out_dtype
        torch.testing.assert_close(got, want, **TOL[out_dtype], msg=lambda s: f"{config}: {s}")


def test_scaled_mm_e4m3_decode_is_exact():
    """Every e4m3 byte (NaN excluded) times 1 decodes to torch's value, through both paths."""
    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8).view(torch.float8_e4m3fn)
    k = codes.numel()
    eye = torch.eye(k).to(torch.float8_e4m3fn)  # B = I: out row = the decoded codes
    for m, config in ((1, scaled_mm.Config("gemv")), (5, scaled_mm.Config("tiled")),
                      (5, scaled_mm.Config("tiled", block_m=32, block_n=32, block_k=32, mma=True))):
        a = codes.view(1, k).expand(m, k).contiguous()
        problem = scaled_mm.Problem(m, k, k, "tensorwise", "float32")
        got = scaled_mm.call(problem, config, "mps", a, eye.t(), torch.tensor(1.0), torch.tensor(1.0))
        assert torch.equal(got, codes.float().view(1, k).expand(m, k)), config


def test_scaled_mm_refusals():
    a = torch.zeros(2, 16, dtype=torch.float8_e5m2)
    b = torch.zeros(16, 8, dtype=torch.float8_e5m2)
    out = TensorSpec((2, 8), (8, 1), "bfloat16")
    s = spec_of(torch.tensor(1.0))
    assert "float8_e4m3fn" in scaled_mm.problem_for(OpSpec("scaled_mm", (spec_of(a), spec_of(b), s, s), out))
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    blockwise = spec_of(torch.ones(2, 4))
    assert "neither tensorwise nor rowwise" in scaled_mm.problem_for(
        OpSpec("scaled_mm", (spec_of(a8), spec_of(b8), blockwise, s), out))
    assert "empty" in scaled_mm.refuse_problem(scaled_mm.Problem(0, 8, 16, "tensorwise"))
    with pytest.raises(ValueError, match="gemv path serves M <= 4"):
        scaled_mm.render(scaled_mm.Problem(8, 8, 16, "tensorwise"), scaled_mm.Config("gemv"), "mps")
    with pytest.raises(ValueError, match="bytes of threadgroup memory"):
        scaled_mm.render(scaled_mm.Problem(8, 8, 16, "tensorwise"),
                         scaled_mm.Config("tiled", block_m=128, block_n=128, block_k=32, mma=True, warps_m=4, warps_n=4),
                         "mps")


# ------------------------------------------------------------------------ linear gemv
LINEAR_CASES = [  # m, n, k, dtype, bias, activation
    (1, 37, 100, torch.bfloat16, True, "gelu"),
    (4, 64, 131, torch.float16, True, "silu"),
    (3, 9, 64, torch.float32, True, "relu"),
    (2, 130, 259, torch.bfloat16, False, None),
]


@pytest.mark.parametrize("m, n, k, dtype, bias, act", LINEAR_CASES)
@pytest.mark.parametrize("device", DEVICES)
def test_linear_gemv_matches_reference(device, m, n, k, dtype, bias, act):
    torch.manual_seed(n * 7 + k)
    x = strided(m, k, dtype)
    w = torch.randn(n, k + 5).to(dtype)[:, :k]  # weight rows strided too
    bias_t = torch.randn(n).to(dtype) if bias else None
    inputs = (spec_of(bias_t), spec_of(x), spec_of(w.t())) if bias else (spec_of(x), spec_of(w.t()))
    spec = OpSpec("addmm" if bias else "mm", inputs, TensorSpec((m, n), (n, 1), str(dtype).removeprefix("torch.")),
                  {"activation": act}, "mps")
    problem = linear_gemv.problem_for(spec)
    assert problem == linear_gemv.Problem(m, n, k, str(dtype).removeprefix("torch."), bias, act)
    want = scaled_mm_reference(x, w, bias=bias_t, activation=act, out_dtype=dtype)
    tensors = (bias_t, x, w.t()) if bias else (x, w.t())  # the op's order: addmm(bias, x, b), mm(x, b)
    for config in linear_gemv.configs(problem, "mps"):
        got = linear_gemv.call(problem, config, "mps", *on(device, *tensors)).cpu()
        torch.testing.assert_close(got, want, **TOL[dtype], msg=lambda s: f"{config}: {s}")


def test_linear_gemv_bias_broadcast_over_rows():
    """Inductor's addmm hands the bias over as a row expanded to [M, N] (stride 0)."""
    torch.manual_seed(3)
    x, w, bias = torch.randn(3, 70), torch.randn(45, 70), torch.randn(45)
    row = bias.expand(3, 45)
    spec = OpSpec("addmm", (spec_of(row), spec_of(x), spec_of(w.t())), TensorSpec((3, 45), (45, 1), "float32"))
    problem = linear_gemv.problem_for(spec)
    assert problem == linear_gemv.Problem(3, 45, 70, "float32", True)
    got = linear_gemv.call(problem, linear_gemv.ALL_CONFIGS[0], "mps", row, x, w.t())
    torch.testing.assert_close(got, scaled_mm_reference(x, w, bias=bias, out_dtype=torch.float32), **TOL[torch.float32])
    assert "not one row" in linear_gemv.problem_for(
        OpSpec("addmm", (spec_of(torch.randn(3, 45)), spec_of(x), spec_of(w.t())), spec.out))


def test_linear_gemv_refusals():
    x, w = torch.zeros(8, 16, dtype=torch.bfloat16), torch.zeros(4, 16, dtype=torch.bfloat16)
    out = TensorSpec((8, 4), (4, 1), "bfloat16")
    problem = linear_gemv.problem_for(OpSpec("mm", (spec_of(x), spec_of(w.t())), out))
    assert "not a gemv" in linear_gemv.refuse_problem(problem)
    assert "contiguous along K" in linear_gemv.problem_for(
        OpSpec("mm", (spec_of(x[:2]), spec_of(w.t().contiguous())), TensorSpec((2, 4), (4, 1), "bfloat16")))
    assert "alpha or beta" in linear_gemv.problem_for(
        OpSpec("addmm", (spec_of(w[0]), spec_of(x[:2]), spec_of(w.t())), out, {"beta": 0.5}))


# ------------------------------------------------------------------------ grouped gemv
@pytest.mark.parametrize("rows, n, k, groups, offs, dtype", [
    (7, 40, 64, 5, [1, 1, 3, 6, 6], torch.bfloat16),  # an empty group, a row past the last offset
    (1, 37, 100, 3, [0, 1, 1], torch.float16),  # M=1, K % vec != 0, odd N
    (16, 33, 96, 8, [2, 4, 6, 8, 10, 12, 14, 16], torch.float32),
])
@pytest.mark.parametrize("device", DEVICES)
def test_grouped_mm_matches_reference(device, rows, n, k, groups, offs, dtype):
    torch.manual_seed(rows + n)
    a = strided(rows, k, dtype)
    w = torch.randn(groups, n, k).to(dtype)
    b = w.transpose(-2, -1)  # [G, K, N], contiguous along K
    offs_t = torch.tensor(offs, dtype=torch.int32)
    out_spec = TensorSpec((rows, n), (n, 1), str(dtype).removeprefix("torch."))
    problem = grouped_mm.problem_for(OpSpec("grouped_mm", (spec_of(a), spec_of(b), spec_of(offs_t)), out_spec))
    assert problem == grouped_mm.Problem(rows, n, k, groups, str(dtype).removeprefix("torch."))
    want = grouped_mm_reference(a, b, offs_t)
    if dtype == torch.bfloat16 and k % 16 == 0:  # torch's own kernel (needs 16-byte strides): rows in groups only
        torch.testing.assert_close(torch._grouped_mm(a.contiguous(), b, offs=offs_t)[:offs[-1]], want[:offs[-1]])
    for config in grouped_mm.configs(problem, "mps"):
        got = grouped_mm.call(problem, config, "mps", *on(device, a, b, offs_t)).cpu()
        torch.testing.assert_close(got, want, **TOL[dtype], msg=lambda s: f"{config}: {s}")


def test_grouped_mm_refusals():
    a, b = torch.zeros(100, 16, dtype=torch.bfloat16), torch.zeros(4, 8, 16, dtype=torch.bfloat16).transpose(-2, -1)
    offs = torch.tensor([25, 50, 75, 100], dtype=torch.int32)
    out = TensorSpec((100, 8), (8, 1), "bfloat16")
    problem = grouped_mm.problem_for(OpSpec("grouped_mm", (spec_of(a), spec_of(b), spec_of(offs)), out))
    assert "prefill" in grouped_mm.refuse_problem(problem)
    assert "contiguous along K" in grouped_mm.problem_for(
        OpSpec("grouped_mm", (spec_of(a), spec_of(b.contiguous()), spec_of(offs)), out))


# ------------------------------------------------------------------------ softmax
@pytest.mark.parametrize("rows, n, dtype, out_dtype", [
    (1, 128256, torch.float32, torch.float32),  # a decode step's logits
    (3, 5003, torch.bfloat16, torch.bfloat16),
    (2, 32000, torch.float16, torch.float32),  # half_to_float
])
@pytest.mark.parametrize("device", DEVICES)
def test_softmax_matches_reference(device, rows, n, dtype, out_dtype):
    torch.manual_seed(n)
    x = strided(rows, n, dtype, scale=6.0)
    x[0, 7] = float("-inf")  # masked logit: probability 0
    spec = OpSpec("softmax", (spec_of(x.contiguous()),), TensorSpec((rows, n), (n, 1), str(out_dtype).removeprefix("torch.")),
                  {"dim": -1})
    problem = softmax.problem_for(spec)
    assert problem.rows == rows and problem.n == n and problem.result_dtype == str(out_dtype).removeprefix("torch.")
    want = softmax_reference(x, out_dtype=out_dtype)
    for config in softmax.configs(problem, "mps"):
        got = softmax.call(problem, config, "mps", *on(device, x)).cpu()
        assert got.dtype == out_dtype and got[0, 7] == 0
        torch.testing.assert_close(got, want, **TOL[out_dtype], msg=lambda s: f"{config}: {s}")


def test_softmax_nan_row_is_nan():
    x = torch.randn(2, 4096)
    x[1, 100] = float("nan")
    problem = softmax.Problem(2, 4096)
    for config in softmax.configs(problem, "mps"):
        got = softmax.call(problem, config, "mps", x)
        assert got[1].isnan().all() and not got[0].isnan().any()


def test_softmax_refusals():
    x = torch.zeros(4, 100)
    out = TensorSpec((4, 100), (100, 1), "float32")
    assert "short rows" in softmax.refuse_problem(softmax.problem_for(OpSpec("softmax", (spec_of(x),), out, {"dim": -1})))
    assert "not the last" in softmax.problem_for(OpSpec("softmax", (spec_of(x),), out, {"dim": 0}))
