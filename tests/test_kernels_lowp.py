"""Reference math for NVFP4 / MXFP4 / MXFP8 and the block-scaled GEMM references."""

import math

import pytest
import torch
import torch.nn.functional as F

from inductor_ext.kernels.mx import (
    dequantize_mx,
    e8m0_to_float,
    quantize_mxfp4,
    quantize_mxfp8,
    shared_exponent,
)
from inductor_ext.kernels.nvfp4 import (
    dequantize_nvfp4,
    e2m1_to_float,
    float_to_e2m1,
    from_blocked,
    pack_e2m1,
    quantize_nvfp4,
    to_blocked,
    unpack_e2m1,
)
from inductor_ext.kernels.scaled_gemm import nvfp4_linear_reference, scaled_mm_reference

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
# 16 values on the e2m1 grid: codes 0..7, then 9..15 (negatives), then a trailing +0.
SIGNED_GRID = GRID + [-v for v in GRID[1:]] + [0.0]
SIGNED_CODES = list(range(8)) + list(range(9, 16)) + [0]
# pack_e2m1(SIGNED_CODES), written out by hand: low nibble = even element.
SIGNED_BYTES = [0x10, 0x32, 0x54, 0x76, 0xA9, 0xCB, 0xED, 0x0F]


def u8(t: torch.Tensor) -> list:
    return t.view(torch.uint8).flatten().tolist()


def e2m1_half_ulp(y: torch.Tensor) -> torch.Tensor:
    """Half the e2m1 grid spacing around |y| (grid spacing 0.5 / 1 / 2)."""
    return torch.where(y < 2, 0.25, torch.where(y < 4, 0.5, 1.0))


def e4m3_half_ulp(y: torch.Tensor) -> torch.Tensor:
    """Half the e4m3 spacing around |y| (3 mantissa bits, subnormal spacing 2**-9)."""
    exp = torch.floor(torch.log2(y.clamp(min=2.0**-6)))
    return torch.exp2(exp - 4)


def assert_elementwise_bound(x, xq, step, half_ulp, max_value):
    """|x - xq| <= (half_ulp(y) + saturation overshoot) * step, y = |x| / step, per element."""
    y = x.abs() / step
    bound = (half_ulp(y.clamp(max=max_value)) + (y - max_value).clamp(min=0)) * step
    err = (x - xq).abs()
    assert bool((err <= bound * (1 + 1e-6) + 1e-30).all()), float((err - bound).max())


# ---------------------------------------------------------------- e2m1 codes


def test_e2m1_rounding_ties_to_even_and_saturates():
    y = torch.tensor([0.0, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, 7.0, 100.0])
    assert float_to_e2m1(y).tolist() == [0, 0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 7]
    neg = torch.tensor([-0.1, -0.5, -2.5, -6.0, -9.0, -0.0])
    assert float_to_e2m1(neg).tolist() == [8, 9, 12, 15, 15, 0]  # -0.1 -> -0 (code 8)


def test_e2m1_decode_all_codes():
    assert e2m1_to_float(torch.arange(16, dtype=torch.uint8)).tolist() == GRID + [-v for v in GRID]


def test_pack_unpack_nibble_order():
    codes = torch.tensor([[1, 2, 3, 4], [15, 0, 8, 7]], dtype=torch.uint8)
    packed = pack_e2m1(codes)
    assert packed.tolist() == [[0x21, 0x43], [0x0F, 0x78]]
    assert torch.equal(unpack_e2m1(packed), codes)
    all_bytes = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(pack_e2m1(unpack_e2m1(all_bytes)), all_bytes)
    with pytest.raises(ValueError):
        pack_e2m1(torch.zeros(3, dtype=torch.uint8))


# ---------------------------------------------------------------- NVFP4


def test_nvfp4_hand_computed_codes_and_scales():
    grid = torch.tensor(SIGNED_GRID)
    x = torch.stack([2.0 * grid, 0.25 * grid])  # block amax 12 and 1.5
    t = quantize_nvfp4(x, global_scale=1.0)
    # block scale = amax / 6: 2.0 = e4m3 0x40, 0.25 = e4m3 0x28
    assert u8(t.scales) == [0x40, 0x28]
    assert t.qdata.tolist() == [SIGNED_BYTES, SIGNED_BYTES]
    assert t.scales.shape == (2, 1) and t.qdata.shape == (2, 8) and t.global_scale.dim() == 0
    assert torch.equal(dequantize_nvfp4(t), x)

    t = quantize_nvfp4(3.0 * grid[None], global_scale=0.5)  # scale 18 / 6 / 0.5 = 6 = 0x4C
    assert u8(t.scales) == [0x4C] and t.qdata.tolist() == [SIGNED_BYTES]
    assert torch.equal(dequantize_nvfp4(t), 3.0 * grid[None])


def test_nvfp4_default_global_scale_modelopt():
    x = 2.0 * torch.tensor(SIGNED_GRID)[None]
    t = quantize_nvfp4(x)
    assert t.global_scale.item() == pytest.approx(12.0 / (6 * 448), rel=1e-7)
    assert u8(t.scales) == [0x7E]  # the tensor's amax block uses e4m3 max 448
    assert t.qdata.tolist() == [SIGNED_BYTES]
    torch.testing.assert_close(dequantize_nvfp4(t), x, rtol=1e-6, atol=0)


def test_nvfp4_scale_rounds_to_even_then_element_saturates():
    # block amax / 6 = 1.0625, a tie between e4m3 1.0 and 1.125 -> 1.0 (even mantissa)
    x = torch.zeros(1, 16)
    x[0, 0], x[0, 1] = 6.375, -1.0
    t = quantize_nvfp4(x, global_scale=1.0)
    assert t.scales.float().item() == 1.0
    assert unpack_e2m1(t.qdata)[0, :2].tolist() == [7, 10]  # 6.375 saturates to 6
    assert dequantize_nvfp4(t)[0, :2].tolist() == [6.0, -1.0]


def test_nvfp4_zeros_and_all_equal():
    t = quantize_nvfp4(torch.zeros(3, 32))
    assert t.global_scale.item() == 1.0
    assert u8(t.scales) == [0] * 6 and u8(t.qdata) == [0] * 48
    assert torch.equal(dequantize_nvfp4(t), torch.zeros(3, 32))

    x = torch.randn(2, 48)
    x[:, 16:32] = 0  # an all-zero block in a non-zero tensor gets scale 0
    t = quantize_nvfp4(x)
    assert t.scales[:, 1].float().tolist() == [0.0, 0.0]
    assert torch.equal(dequantize_nvfp4(t)[:, 16:32], torch.zeros(2, 16))

    x = torch.full((2, 32), -3.7)  # every block is the amax block: scale 448, code -6
    t = quantize_nvfp4(x)
    assert u8(t.scales) == [0x7E] * 4 and u8(t.qdata) == [0xFF] * 32
    torch.testing.assert_close(dequantize_nvfp4(t), x, rtol=1e-6, atol=0)


def test_nvfp4_partial_last_block():
    x = torch.full((1, 40), 6.0)
    x[0, 32:] = torch.tensor([0.75, -0.75, 0.375, 0.0, 0.75, 0.75, 0.75, 0.75])
    t = quantize_nvfp4(x, global_scale=1.0)
    assert t.scales.shape == (1, 3) and t.qdata.shape == (1, 20)
    assert t.scales.float().tolist() == [[1.0, 1.0, 0.125]]  # last block: amax 0.75 of 8
    assert unpack_e2m1(t.qdata)[0, 32:].tolist() == [7, 15, 5, 0, 7, 7, 7, 7]
    assert torch.equal(dequantize_nvfp4(t), x)
    with pytest.raises(ValueError):
        quantize_nvfp4(torch.ones(2, 15))


@pytest.mark.parametrize("shape", [(1, 64), (7, 40), (3, 2, 48), (96,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nvfp4_round_trip_error_bound(shape, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g) * torch.exp(2 * torch.randn(shape, generator=g))
    x = x.to(dtype)
    t = quantize_nvfp4(x)
    xq = dequantize_nvfp4(t)
    assert xq.shape == x.shape and xq.dtype == dtype
    assert torch.equal(dequantize_nvfp4(quantize_nvfp4(-x)), -xq)

    rows_x = x.float().reshape(-1, shape[-1])
    step = (t.scales.float() * t.global_scale).repeat_interleave(16, dim=1)[:, : shape[-1]]
    # block scales are the e4m3 rounding of block_amax / 6 / global_scale
    amax = F.pad(rows_x.abs(), (0, -shape[-1] % 16)).view(rows_x.shape[0], -1, 16).amax(-1)
    exact = amax / 6 / t.global_scale
    scale = t.scales.float()
    assert bool(((scale - exact).abs() <= e4m3_half_ulp(exact) * (1 + 1e-6)).all())
    # compare in fp32, before dequantize's final cast back to bf16
    xq_fp32 = dequantize_nvfp4(t, apply_global_scale=False).reshape(rows_x.shape) * t.global_scale
    assert_elementwise_bound(rows_x, xq_fp32, step, e2m1_half_ulp, 6.0)


def test_nvfp4_rejects_bad_global_scale():
    with pytest.raises(ValueError):
        quantize_nvfp4(torch.ones(1, 16), global_scale=0.0)


# ---------------------------------------------------------------- swizzled scale layout


@pytest.mark.parametrize("rows,cols", [(1, 1), (128, 4), (130, 5), (300, 9)])
def test_to_blocked_round_trip(rows, cols):
    s = torch.randint(0, 127, (rows, cols), dtype=torch.uint8).view(torch.float8_e4m3fn)
    blocked = to_blocked(s)
    padded = math.ceil(rows / 128) * 128 * math.ceil(cols / 4) * 4
    assert blocked.shape == (padded,) and blocked.dtype == torch.float8_e4m3fn
    assert torch.equal(from_blocked(blocked, rows, cols).view(torch.uint8), s.view(torch.uint8))
    assert int(blocked.view(torch.uint8).sum()) == int(s.view(torch.uint8).sum())  # zero padding


def test_to_blocked_hand_checked_index():
    rows, cols = 200, 9  # 2 x 3 tiles of 128x4
    s = torch.arange(rows * cols, dtype=torch.int32).view(rows, cols)
    blocked = to_blocked(s)
    # (r, c) -> 512 * (tile_r * 3 + tile_c) + (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4
    assert blocked[598].item() == s[37, 6].item()  # 512 * 1 + 5 * 16 + 1 * 4 + 2
    assert blocked[1569].item() == s[130, 1].item()  # 512 * 3 + 2 * 16 + 0 * 4 + 1
    assert blocked[:4].tolist() == [0, 1, 2, 3]  # row 0, cols 0..3
    assert blocked[4].item() == s[32, 0].item()  # next 4 entries: row 32
    assert blocked[16].item() == s[1, 0].item()  # next 16-entry group: row 1


def test_to_blocked_e8m0():
    s = quantize_mxfp8(torch.randn(5, 96)).scales
    assert torch.equal(from_blocked(to_blocked(s), 5, 3).view(torch.uint8), s.view(torch.uint8))


# ---------------------------------------------------------------- MX


def test_mx_shared_exponent_known_amax():
    amax = torch.tensor([6.0, 1.0, 7.9, 0.0, 0.75, 2.0**-140, 1.5 * 2.0**100])
    assert shared_exponent(amax, 2).tolist() == [0, -2, 0, -127, -3, -127, 98]
    below = torch.nextafter(torch.tensor(2.0**100), torch.tensor(0.0))  # log2 rounds to 100 in fp32
    assert shared_exponent(below[None], 2).tolist() == [97]
    assert shared_exponent(torch.tensor([448.0, 1.0, 500.0]), 8).tolist() == [0, -8, 0]


def test_e8m0_decode():
    codes = torch.tensor([0, 119, 127, 128, 254, 255], dtype=torch.uint8).view(torch.float8_e8m0fnu)
    v = e8m0_to_float(codes)
    assert v[:5].tolist() == [2.0**-127, 2.0**-8, 1.0, 2.0, 2.0**127] and math.isnan(v[5])


def test_mxfp4_hand_computed():
    grid = torch.tensor(SIGNED_GRID)
    x = torch.cat([4.0 * grid, 0.5 * grid])[None]  # one block of 32, amax 24 -> X = 2
    t = quantize_mxfp4(x)
    assert u8(t.scales) == [129] and t.scales.dtype == torch.float8_e8m0fnu
    # 0.5 * grid / 4 = grid / 8: 0.5 / 8 = 0.0625 rounds to 0 etc.
    assert t.qdata[0, :8].tolist() == SIGNED_BYTES
    assert torch.equal(dequantize_mx(t)[0, :16], x[0, :16])

    x = torch.full((1, 32), 3.7)  # X = 1 - 2 = -1: 7.4 saturates to 6 -> 3.0 (floor rule clips)
    t = quantize_mxfp4(x)
    assert u8(t.scales) == [126] and u8(t.qdata) == [0x77] * 16
    assert dequantize_mx(t).unique().tolist() == [3.0]


def test_mxfp8_hand_computed():
    x = torch.zeros(1, 64)
    x[0, :4] = torch.tensor([448.0, -3.5, 0.125, 2.0**-9])  # amax 448 -> X = 0
    x[0, 32:34] = torch.tensor([1.0, -0.01])  # amax 1 -> X = -8, scaled by 256
    t = quantize_mxfp8(x)
    assert u8(t.scales) == [127, 119]
    assert t.qdata.dtype == torch.float8_e4m3fn and t.qdata.shape == (1, 64)
    assert t.qdata[0, :4].float().tolist() == [448.0, -3.5, 0.125, 2.0**-9]  # 2**-9: smallest subnormal
    assert t.qdata[0, 32:34].float().tolist() == [256.0, -2.5]  # -2.56 -> -2.5
    assert dequantize_mx(t)[0, 32:34].tolist() == [1.0, -2.5 / 256]

    t = quantize_mxfp8(torch.full((1, 32), 3.7))  # X = -7: 473.6 saturates to 448 -> 3.5
    assert u8(t.scales) == [120] and dequantize_mx(t).unique().tolist() == [3.5]


def test_mx_zeros_nan_partial_and_m1():
    for q in (quantize_mxfp4, quantize_mxfp8):
        t = q(torch.zeros(1, 64))
        assert u8(t.scales) == [0, 0] and torch.equal(dequantize_mx(t), torch.zeros(1, 64))
        x = torch.randn(1, 40)
        x[0, 3] = float("nan")
        t = q(x)
        assert t.scales.shape == (1, 2) and u8(t.scales)[0] == 255
        y = dequantize_mx(t)
        assert bool(y[0, :32].isnan().all()) and not bool(y[0, 32:].isnan().any())
    with pytest.raises(ValueError):
        quantize_mxfp4(torch.ones(1, 33))


@pytest.mark.parametrize("fmt", ["fp4", "fp8"])
@pytest.mark.parametrize("shape", [(1, 64), (5, 72), (2, 3, 32)])
def test_mx_round_trip_error_bound(fmt, shape):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=g) * torch.exp(2 * torch.randn(shape, generator=g))
    quantize, half_ulp, max_value = {
        "fp4": (quantize_mxfp4, e2m1_half_ulp, 6.0),
        "fp8": (quantize_mxfp8, e4m3_half_ulp, 448.0),
    }[fmt]
    t = quantize(x)
    xq = dequantize_mx(t)
    assert xq.shape == x.shape and xq.dtype == x.dtype
    assert torch.equal(dequantize_mx(quantize(-x)), -xq)
    rows = x.reshape(-1, shape[-1])
    step = e8m0_to_float(t.scales).repeat_interleave(32, dim=1)[:, : shape[-1]]
    assert_elementwise_bound(rows, xq.reshape(rows.shape), step, half_ulp, max_value)


# ---------------------------------------------------------------- scaled GEMM


def test_scaled_mm_reference_matches_dequant_matmul():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(5, 64, generator=g), torch.randn(6, 64, generator=g)
    a_q, b_q = quantize_nvfp4(a), quantize_nvfp4(b)
    expected = dequantize_nvfp4(a_q) @ dequantize_nvfp4(b_q).T
    out = scaled_mm_reference(a_q, b_q, out_dtype=torch.float32)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert scaled_mm_reference(a_q, b_q).dtype == torch.bfloat16

    for q in (quantize_mxfp4, quantize_mxfp8):
        a_q, b_q = q(a), q(b)
        expected = dequantize_mx(a_q) @ dequantize_mx(b_q).T
        torch.testing.assert_close(scaled_mm_reference(a_q, b_q, out_dtype=torch.float32), expected)

    # mixed operands: MXFP8 activations against NVFP4 weights (alpha = weight global scale)
    out = scaled_mm_reference(quantize_mxfp8(a), quantize_nvfp4(b), out_dtype=torch.float32)
    expected = dequantize_mx(quantize_mxfp8(a)) @ dequantize_nvfp4(quantize_nvfp4(b)).T
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_scaled_mm_reference_hand_computed_epilogue():
    pad = [0.0] * 14
    a = torch.tensor([[1.5, 3.0] + pad])  # block scale 0.5, exact
    b = torch.tensor([[6.0, -1.0] + pad, [0.5, 1.5] + pad])  # block scales 1 and 0.25, exact
    a_q, b_q = quantize_nvfp4(a, global_scale=1.0), quantize_nvfp4(b, global_scale=1.0)
    assert torch.equal(dequantize_nvfp4(a_q), a) and torch.equal(dequantize_nvfp4(b_q), b)
    # A @ B.T = [[9 - 3, 0.75 + 4.5]]
    kw = dict(out_dtype=torch.float32)
    assert scaled_mm_reference(a_q, b_q, **kw).tolist() == [[6.0, 5.25]]
    assert scaled_mm_reference(a_q, b_q, alpha=-2.0, **kw).tolist() == [[-12.0, -10.5]]
    bias = torch.tensor([0.5, -11.0])
    assert scaled_mm_reference(a_q, b_q, alpha=2.0, bias=bias, **kw).tolist() == [[12.5, -0.5]]
    out = scaled_mm_reference(a_q, b_q, alpha=2.0, bias=bias, activation="relu", **kw)
    assert out.tolist() == [[12.5, 0.0]]
    pre = torch.tensor([[12.5, -0.5]])
    for name, fn in [("gelu", F.gelu), ("silu", F.silu)]:
        out = scaled_mm_reference(a_q, b_q, alpha=2.0, bias=bias, activation=name, **kw)
        torch.testing.assert_close(out, fn(pre))
    with pytest.raises(ValueError):
        scaled_mm_reference(a_q, b_q, activation="tanh")


def test_scaled_mm_reference_default_alpha_is_global_scale_product():
    x = torch.tensor([[1.5, 3.0] + [0.0] * 14])
    a_q = quantize_nvfp4(x, global_scale=0.5)  # block-scaled values [3, 6]
    b_q = quantize_nvfp4(x, global_scale=0.25)  # block-scaled values [6, 12]
    assert scaled_mm_reference(a_q, b_q, out_dtype=torch.float32).item() == 11.25  # 90 * 0.125
    assert scaled_mm_reference(a_q, b_q, alpha=1.0, out_dtype=torch.float32).item() == 90.0


def test_nvfp4_linear_reference_torchao_rounding():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 64, generator=g, dtype=torch.float32).to(torch.bfloat16)
    w = torch.randn(8, 64, generator=g).to(torch.bfloat16)
    bias = torch.randn(8, generator=g).to(torch.bfloat16)
    w_q = quantize_nvfp4(w)
    out = nvfp4_linear_reference(x, w_q, bias)
    assert out.shape == (4, 3, 8) and out.dtype == torch.bfloat16

    # the exact torchao sequence: bf16 GEMM output, * bf16(alpha), + bias, each rounded
    x_q = quantize_nvfp4(x)
    acc = dequantize_nvfp4(x_q, apply_global_scale=False) @ dequantize_nvfp4(w_q, apply_global_scale=False).T
    alpha = (x_q.global_scale * w_q.global_scale).to(torch.bfloat16)
    assert torch.equal(out, acc.to(torch.bfloat16) * alpha + bias)

    # vs. alpha fused in fp32 (one rounding): a few bf16 ulps apart, not bit-identical in general
    fused = scaled_mm_reference(x_q, w_q, bias=bias, out_dtype=torch.bfloat16)
    torch.testing.assert_close(out.float(), fused.float(), rtol=2**-6, atol=2**-6 * fused.abs().max().item())
    assert nvfp4_linear_reference(x, w_q).shape == (4, 3, 8)
