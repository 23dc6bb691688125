"""Tests for inductor_ext.runtime.triton_interp (fixes for Triton's CPU interpreter).

For each fix: one test shows the bug with the fixes removed, one shows that with
the fix the kernel matches plain float32 torch math.

TRITON_INTERPRET is read when @triton.jit decorates a kernel, not when it is
launched (a kernel decorated without it compiles for a GPU on launch), so the
kernels live in tests/_interp_kernels.py and are loaded by the ``kernels``
fixture after the variable is set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from types import ModuleType
from typing import Iterator

import numpy as np
import pytest
import torch

from _logs import records_of
from inductor_ext.runtime.triton_interp import (apply_interpreter_fixes, interpreter_fixes,
                                                remove_interpreter_fixes)

pytestmark = pytest.mark.interp

ALL_FIXES = ["bf16_dot", "nvfp4_dot_scaled", "gdc_noop", "libdevice_math", "bf16_rounding", "tf32_dot"]
_KERNELS = Path(__file__).with_name("_interp_kernels.py")
_KERNELS_MODULE = "_interp_kernels_for_fix_tests"


@pytest.fixture(scope="module")
def kernels() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        spec = importlib.util.spec_from_file_location(_KERNELS_MODULE, _KERNELS)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        mp.setitem(sys.modules, _KERNELS_MODULE, module)
        spec.loader.exec_module(module)
        assert type(module.matmul_kernel).__name__ == "InterpretedFunction"
        try:
            yield module
        finally:
            remove_interpreter_fixes()


@pytest.fixture
def fixed(kernels: ModuleType) -> Iterator[ModuleType]:
    remove_interpreter_fixes()
    assert apply_interpreter_fixes() == ALL_FIXES
    yield kernels
    remove_interpreter_fixes()


@pytest.fixture
def unfixed(kernels: ModuleType) -> ModuleType:
    remove_interpreter_fixes()
    return kernels


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _assert_close_fp32(out: torch.Tensor, ref: torch.Tensor) -> None:
    # Both sides are exact fp32 products summed in a different order, so allow
    # a few ulps of the largest partial sums.
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5 * max(ref.abs().max().item(), 1.0))


# ------------------------------------------------------------------- tf32 tl.dot


def _run_precision_matmul(mod: ModuleType, a: torch.Tensor, b: torch.Tensor, precision: str) -> torch.Tensor:
    (m, k), n = a.shape, b.shape[1]
    c = torch.full((m, n), float("nan"))
    mod.precision_matmul_kernel[(_cdiv(m, 16), _cdiv(n, 16))](a, b, c, m, n, k, 16, 16, 32, precision)
    return c


def _tf32_case() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(32)
    return torch.randn(33, 64, generator=g), torch.randn(64, 20, generator=g)


def _truncated(x: torch.Tensor) -> torch.Tensor:
    # TF32 as the tensor core reads a Triton tf32 operand: the 13 low mantissa bits cleared
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


def test_tf32_dot_exact_without_fix(unfixed: ModuleType) -> None:
    a, b = _tf32_case()
    out = _run_precision_matmul(unfixed, a, b, "tf32")
    _assert_close_fp32(out, a @ b)  # the bug: TF32 looks like full fp32
    assert (out - _truncated(a) @ _truncated(b)).abs().max() > 1e-4


def test_tf32_dot_rounds_inputs_like_the_gpu_with_fix(fixed: ModuleType) -> None:
    a, b = _tf32_case()
    out = _run_precision_matmul(fixed, a, b, "tf32")
    _assert_close_fp32(out, _truncated(a) @ _truncated(b))
    # TF32-level error against fp32 (10 mantissa bits: ~1e-3 relative per product)
    err = ((out - a @ b).abs().max() / (a @ b).abs().max()).item()
    assert 1e-5 < err < 1e-2, err
    # ieee (and tf32x3) stay full fp32
    _assert_close_fp32(_run_precision_matmul(fixed, a, b, "ieee"), a @ b)
    _assert_close_fp32(_run_precision_matmul(fixed, a, b, "tf32x3"), a @ b)


def test_f32_to_tf32_bits() -> None:
    from inductor_ext.runtime.triton_interp import f32_to_tf32

    one_ulp_tf32, below = 1 + 2.0 ** -10, 1 + 2.0 ** -10 - 2.0 ** -23  # TF32 keeps 10 mantissa bits
    x = np.array([1 + 2.0 ** -11, one_ulp_tf32, below, -below, 2.0 ** -140, np.inf, -np.inf, 0.0], np.float32)
    expected = np.array([1.0, one_ulp_tf32, 1.0, -1.0, 0.0, np.inf, -np.inf, 0.0], np.float32)
    np.testing.assert_array_equal(f32_to_tf32(x), expected)  # toward zero, never up: not rounding
    nan_low_payload = np.array([0x7F800001], np.uint32).view(np.float32)  # only bits TF32 drops
    assert np.isnan(f32_to_tf32(nan_low_payload)).all()


# ------------------------------------------------------------------- bf16 tl.dot

BF16_SHAPES = [(1, 16, 16), (33, 20, 50), (64, 48, 96)]  # (M, N, K); BLOCK_K = 32


def _bf16_case(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(m * 10007 + n * 101 + k)
    a = torch.randn(m, k, generator=g).to(torch.bfloat16)
    b = torch.randn(k, n, generator=g).to(torch.bfloat16)
    return a, b, a.float() @ b.float()


def _run_matmul(mod: ModuleType, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    (m, k), n = a.shape, b.shape[1]
    c = torch.full((m, n), float("nan"))
    bm, bn, bk = 16, 16, 32
    mod.matmul_kernel[(_cdiv(m, bm), _cdiv(n, bn))](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), bm, bn, bk)
    return c


@pytest.mark.parametrize("shape", BF16_SHAPES[:2])
def test_bf16_dot_wrong_without_fix(unfixed: ModuleType, shape: tuple[int, int, int]) -> None:
    a, b, ref = _bf16_case(*shape)
    out = _run_matmul(unfixed, a, b)
    # The uint16 bit patterns get multiplied: off by many orders of magnitude.
    assert (out - ref).abs().max() > 1e3 * ref.abs().max()


@pytest.mark.parametrize("shape", BF16_SHAPES)
def test_bf16_dot_matches_torch_with_fix(fixed: ModuleType, shape: tuple[int, int, int]) -> None:
    a, b, ref = _bf16_case(*shape)
    _assert_close_fp32(_run_matmul(fixed, a, b), ref)


def test_fp16_dot_unchanged_by_fix(fixed: ModuleType) -> None:
    a, b, _ = _bf16_case(17, 16, 40)
    a, b = a.half(), b.half()
    _assert_close_fp32(_run_matmul(fixed, a, b), a.float() @ b.float())


# ------------------------------------------------------------ fp4 tl.dot_scaled

E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _dequant_e2m1(packed: torch.Tensor, scale: torch.Tensor, group: int) -> torch.Tensor:
    """Reference dequant: [R, K // 2] packed e2m1 (low nibble first) times one
    float32 ``scale`` per ``group`` elements of K -> [R, K] float32."""
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2).long()
    values = E2M1_VALUES[codes & 0x7]
    values = torch.where(codes & 0x8 != 0, -values, values)
    k = values.shape[-1]
    return values * scale.repeat_interleave(group, dim=-1)[:, :k]


def _fp4_case(m: int, n: int, k: int, group: int) -> dict[str, torch.Tensor]:
    """Random fp4 operands; e4m3 block scales for group 16 (NVFP4), e8m0 for 32 (MXFP4)."""
    g = torch.Generator().manual_seed(m * 10007 + n * 101 + k + group)
    a = torch.randint(0, 256, (m, k // 2), dtype=torch.uint8, generator=g)
    b = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g)
    ks = _cdiv(k, group)
    if group == 16:
        # Spans e4m3 subnormals (< 2**-6) up to 16.
        a_scale = torch.exp2(torch.rand(m, ks, generator=g) * 13 - 9).to(torch.float8_e4m3fn)
        b_scale = torch.exp2(torch.rand(n, ks, generator=g) * 13 - 9).to(torch.float8_e4m3fn)
        a_sf, b_sf = a_scale.float(), b_scale.float()
        a_scale, b_scale = a_scale.view(torch.uint8), b_scale.view(torch.uint8)
    else:
        a_scale = torch.randint(120, 134, (m, ks), dtype=torch.uint8, generator=g)
        b_scale = torch.randint(120, 134, (n, ks), dtype=torch.uint8, generator=g)
        a_sf, b_sf = torch.exp2(a_scale.float() - 127), torch.exp2(b_scale.float() - 127)
    ref = _dequant_e2m1(a, a_sf, group) @ _dequant_e2m1(b, b_sf, group).T
    return dict(a=a, a_scale=a_scale, b=b, b_scale=b_scale, ref=ref)


def _run_fp4(mod: ModuleType, case: dict[str, torch.Tensor], group: int) -> torch.Tensor:
    m, n, k = case["a"].shape[0], case["b"].shape[0], case["a"].shape[1] * 2
    c = torch.full((m, n), float("nan"))
    bm, bn, bk = 16, 16, 64
    mod.fp4_matmul_kernel[(_cdiv(m, bm), _cdiv(n, bn))](case["a"], case["a_scale"], case["b"], case["b_scale"], c, m,
                                                        n, k, bm, bn, bk, group)
    return c


# (M, N, K), BLOCK_K = 64: K=96 is not a multiple of the block, K=40 not even of the scale group.
NVFP4_SHAPES = [(1, 16, 64), (33, 20, 96), (5, 24, 40)]
MXFP4_SHAPES = [(1, 16, 64), (17, 24, 160), (8, 16, 48)]


def test_e4m3_scale_decode_matches_torch() -> None:
    from inductor_ext.runtime.triton_interp import _e4m3fn_lut

    want = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()
    torch.testing.assert_close(torch.from_numpy(_e4m3fn_lut()), want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("shape", NVFP4_SHAPES[:2])
def test_nvfp4_dot_scaled_wrong_without_fix(unfixed: ModuleType, shape: tuple[int, int, int]) -> None:
    case = _fp4_case(*shape, group=16)
    out = _run_fp4(unfixed, case, 16)
    assert (out - case["ref"]).abs().max() > 0.1 * case["ref"].abs().max()


@pytest.mark.parametrize("shape", NVFP4_SHAPES)
def test_nvfp4_dot_scaled_matches_torch_with_fix(fixed: ModuleType, shape: tuple[int, int, int]) -> None:
    case = _fp4_case(*shape, group=16)
    _assert_close_fp32(_run_fp4(fixed, case, 16), case["ref"])


@pytest.mark.parametrize("shape", MXFP4_SHAPES)
def test_mxfp4_dot_scaled_still_right_with_fix(fixed: ModuleType, shape: tuple[int, int, int]) -> None:
    case = _fp4_case(*shape, group=32)
    _assert_close_fp32(_run_fp4(fixed, case, 32), case["ref"])


def test_mxfp4_dot_scaled_right_without_fix(unfixed: ModuleType) -> None:
    # Control: the e8m0 path was never broken, so the fix must leave it alone.
    case = _fp4_case(*MXFP4_SHAPES[1], group=32)
    _assert_close_fp32(_run_fp4(unfixed, case, 32), case["ref"])


# ------------------------------------------------------------------------- gdc

GDC_KERNELS = ["gdc_attr_kernel", "gdc_imported_kernel"]


def _run_gdc(mod: ModuleType, name: str, n: int = 37) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(n, dtype=torch.float32)
    y = torch.full_like(x, float("nan"))
    getattr(mod, name)[(_cdiv(n, 16), )](x, y, n, 16)
    return x, y


@pytest.mark.parametrize("name", GDC_KERNELS)
def test_gdc_raises_without_fix(unfixed: ModuleType, name: str) -> None:
    with pytest.raises(Exception, match="_semantic"):
        _run_gdc(unfixed, name)


@pytest.mark.parametrize("name", GDC_KERNELS)
def test_gdc_is_noop_with_fix(fixed: ModuleType, name: str) -> None:
    x, y = _run_gdc(fixed, name)
    torch.testing.assert_close(y, x * 2 + 1)


def test_gdc_patches_restored_after_launch(fixed: ModuleType) -> None:
    import triton.language.extra.cuda as cuda

    before = (cuda.gdc_wait, cuda.gdc_launch_dependents, fixed.gdc_wait)
    _run_gdc(fixed, "gdc_imported_kernel")
    _run_gdc(fixed, "gdc_attr_kernel")
    assert (cuda.gdc_wait, cuda.gdc_launch_dependents, fixed.gdc_wait) == before


# -------------------------------------------------------------------- libdevice

# (name, torch reference) per output row of each kernel in _interp_kernels.py.
LIBDEVICE_UNARY = [("x*rsqrt", lambda x: x * torch.rsqrt(x)), ("sqrt", torch.sqrt), ("exp", torch.exp),
                   ("log", torch.log), ("log2", torch.log2), ("log10", torch.log10), ("log1p", torch.log1p),
                   ("expm1", torch.expm1), ("floor", torch.floor), ("ceil", torch.ceil), ("trunc", torch.trunc),
                   ("nearbyint", torch.round)]  # torch.round rounds half to even, like nearbyint
LIBDEVICE_ERF_TANH = [("erf", torch.erf), ("erfc", torch.erfc), ("erfinv", torch.erfinv), ("tanh", torch.tanh),
                      ("sinh", torch.sinh), ("cosh", torch.cosh), ("sin", torch.sin), ("cos", torch.cos),
                      ("tan", torch.tan), ("asin", torch.asin), ("acos", torch.acos), ("atan", torch.atan),
                      ("asinh", torch.asinh), ("atanh", torch.atanh)]
LIBDEVICE_PREDICATES = [("isnan", torch.isnan), ("isinf", torch.isinf), ("signbit", torch.signbit)]
LIBDEVICE_BINARY = [("pow", lambda a, b: torch.pow(a.abs(), b)), ("pow_int", lambda a, b: torch.pow(a, 3)),
                    ("atan2", torch.atan2), ("fmod", torch.fmod), ("copysign", torch.copysign),
                    ("hypot", torch.hypot), ("ldexp", lambda a, b: torch.ldexp(a, torch.tensor(3)))]
LIBDEVICE_GROUPS = ["unary", "erf_tanh", "predicates", "binary"]


def _libdevice_inputs(group: str, n: int = 45) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(len(group))
    if group == "unary":  # x > 0, with ties for nearbyint
        return [torch.cat([torch.rand(n, generator=g) * 8 + 0.05, torch.tensor([0.5, 1.5, 2.5, 3.5])])]
    if group == "erf_tanh":  # inside (-1, 1) for erfinv, asin, acos, atanh
        return [torch.cat([torch.rand(n, generator=g) * 1.9 - 0.95, torch.tensor([0.0, -0.0])])]
    if group == "predicates":
        special = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-40, -1e-40, -float("nan")]
        return [torch.cat([torch.randn(n, generator=g), torch.tensor(special)])]
    return [torch.randn(n, generator=g) * 3, torch.randn(n, generator=g) * 3]


def _run_libdevice(mod: ModuleType, group: str) -> tuple[torch.Tensor, torch.Tensor]:
    refs = {"unary": LIBDEVICE_UNARY, "erf_tanh": LIBDEVICE_ERF_TANH, "predicates": LIBDEVICE_PREDICATES,
            "binary": LIBDEVICE_BINARY}[group]
    inputs = _libdevice_inputs(group)
    n = inputs[0].numel()
    dtype = torch.int32 if group == "predicates" else torch.float32
    out = torch.full((len(refs), n), -7, dtype=dtype)
    getattr(mod, f"libdevice_{group}_kernel")[(_cdiv(n, 16), )](*inputs, out, n, 16)
    ref = torch.stack([fn(*inputs) for _, fn in refs]).to(dtype)
    return out, ref


@pytest.mark.parametrize("group", LIBDEVICE_GROUPS)
def test_libdevice_fails_without_fix(unfixed: ModuleType, group: str) -> None:
    # The stubs return None: "'NoneType' object has no attribute 'dtype'" and the like.
    from triton.runtime.errors import InterpreterError

    with pytest.raises(InterpreterError, match="NoneType"):
        _run_libdevice(unfixed, group)


@pytest.mark.parametrize("group", LIBDEVICE_GROUPS)
def test_libdevice_matches_torch_with_fix(fixed: ModuleType, group: str) -> None:
    out, ref = _run_libdevice(fixed, group)
    if group == "predicates":
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
    else:
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_libdevice_patches_restored_after_launch(fixed: ModuleType) -> None:
    from triton.language.extra import libdevice

    names = ["rsqrt", "tanh", "pow", "hypot", "isnan", "isinf", "signbit"]
    before = [getattr(libdevice, n) for n in names] + [fixed.isnan, fixed.signbit]
    for group in LIBDEVICE_GROUPS:
        _run_libdevice(fixed, group)
    assert [getattr(libdevice, n) for n in names] + [fixed.isnan, fixed.signbit] == before
    assert libdevice.rsqrt(None) is None  # still the stub


def test_libdevice_device_function_patches_restored_with_launch(fixed: ModuleType) -> None:
    # A device function call re-runs _patch_lang and the interpreter drops that
    # scope unrestored; libdevice names bound in the device function's own
    # globals must be restored with the launch instead.
    import triton.language as tl
    import triton.runtime.interpreter as interp
    from triton.language.extra import libdevice

    stub = libdevice.pow
    device_fn = types.FunctionType((lambda: None).__code__, {"tl": tl, "my_pow": stub})
    launch = interp._patch_lang(fixed.libdevice_unary_kernel.fn)  # as GridExecutor does
    try:
        assert libdevice.pow is not stub
        interp._patch_lang(device_fn)  # as InterpretedFunction.__call__ does
        assert device_fn.__globals__["my_pow"] is libdevice.pow
    finally:
        launch.restore()
    assert libdevice.pow is stub and device_fn.__globals__["my_pow"] is stub


def test_libdevice_rejects_dtypes_libdevice_rejects(fixed: ModuleType) -> None:
    # libdevice has no float16 pow, so a GPU build fails; so does the interpreter
    # (no silent promotion), as tl.math does for exp & co.
    a = torch.rand(8).half()
    with pytest.raises(Exception, match=r"libdevice\.pow does not take dtypes \('fp16', 'fp16'\)"):
        fixed.libdevice_binary_kernel[(1, )](a, a, torch.empty(7, 8, dtype=torch.half), 8, 16)


_RMSNORM_SCRIPT = textwrap.dedent("""
    import glob, os
    import torch
    import torch.utils._triton

    torch.utils._triton.triton_hash_with_backend = lambda: "X"
    from inductor_ext.runtime.triton_interp import apply_interpreter_fixes

    assert "libdevice_math" in apply_interpreter_fixes()
    torch.manual_seed(0)
    model = torch.nn.RMSNorm(64)
    with torch.no_grad():
        model.weight.copy_(torch.randn(64))
    x = torch.randn(8, 64)
    with torch._inductor.config.patch(cpu_backend="triton"):
        out = torch.compile(model)(x)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    sources = glob.glob(os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "**", "*.py"), recursive=True)
    assert any("libdevice.rsqrt(" in open(p).read() for p in sources), "no kernel called libdevice.rsqrt"
    print("RMSNORM_OK")
""")


def test_inductor_rmsnorm_kernel_with_libdevice_rsqrt(tmp_path: Path) -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"), TORCHINDUCTOR_COMPILE_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", _RMSNORM_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "RMSNORM_OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]


# ---------------------------------------------------------------- bf16 rounding

# fp32 bit patterns, named: what round-to-nearest-even must get right beyond random values.
BF16_SPECIAL_BITS = {
    "tie_to_even_down": 0x3F808000,  # 1 + 2**-8: halfway, kept bit even -> 1.0 (0x3F80)
    "tie_to_even_up": 0x3F818000,  # 1 + 3 * 2**-8: halfway, kept bit odd -> 0x3F82
    "just_above_tie": 0x3F808001,  # -> 0x3F81 (truncation gives 0x3F80)
    "just_below_tie": 0x3F807FFF,  # -> 0x3F80
    "neg_tie_to_even_up": 0xBF818000,  # -> 0xBF82
    "neg_above_tie": 0xC0490FDB,  # -pi -> 0xC049
    "carry_into_exponent": 0x3FFFFFFF,  # 1.99999... -> 2.0 (0x4000)
    "fp32_max_to_inf": 0x7F7FFFFF,  # rounds up to +inf (0x7F80)
    "neg_fp32_max_to_inf": 0xFF7FFFFF,
    "bf16_max_stays": 0x7F7F7FFF,  # just below the tie: bf16 max (0x7F7F)
    "inf": 0x7F800000,
    "neg_inf": 0xFF800000,
    "zero": 0x00000000,
    "neg_zero": 0x80000000,
    "nan": 0x7FC00000,
    "neg_nan": 0xFFC00000,
    "nan_low_payload": 0x7F800001,  # truncation makes this +inf
    "neg_nan_low_payload": 0xFF800001,
    "nan_all_ones": 0xFFFFFFFF,
    "subnormal_min": 0x00000001,  # -> 0 (below half of bf16's smallest subnormal)
    "subnormal_tie_to_even_down": 0x00008000,  # -> 0
    "subnormal_tie_to_even_up": 0x00018000,  # -> 0x0002
    "subnormal_above_tie": 0x00008001,  # -> 0x0001
    "subnormal_to_normal": 0x007FFFFF,  # the largest subnormal rounds to the smallest normal (0x0080)
    "neg_subnormal": 0x80234567,
    "normal_min": 0x00800000,
}


def _bf16_round_inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(1616)
    special = torch.tensor(list(BF16_SPECIAL_BITS.values()), dtype=torch.int64)
    rand_bits = torch.randint(0, 2**32, (4096, ), generator=g, dtype=torch.int64)  # every exponent, NaNs included
    # low halves at and around the tie (0x8000), on every kind of kept bit, with random high halves
    high = torch.randint(0, 2**16, (1024, ), generator=g, dtype=torch.int64) << 16
    low = torch.tensor([0x7FFF, 0x8000, 0x8001, 0x0000, 0xFFFF], dtype=torch.int64).repeat(1024 // 5 + 1)[:1024]
    bits = torch.cat([special, rand_bits, high | low])
    return (bits - (bits >= 2**31).long() * 2**32).to(torch.int32).view(torch.float32)


def _run_bf16_round(mod: ModuleType) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = _bf16_round_inputs()
    n = x.numel()
    cast = torch.full((n, ), 0x1234, dtype=torch.int16)
    stored = torch.full((n, ), 0x1234, dtype=torch.int16).view(torch.bfloat16)
    mod.bf16_round_kernel[(_cdiv(n, 1024), )](x, cast, stored, n, 1024)
    return x, cast, stored.view(torch.int16)


def _assert_bf16_bits_match_torch(x: torch.Tensor, out_bits: torch.Tensor) -> None:
    """Bit-exact against torch's .to(torch.bfloat16), except the NaN payload.

    torch's NaN bits depend on its code path (0xFFFF from its AVX2/AVX-512 kernels, 0x7FC0 from
    c10::BFloat16), a GPU's cvt.rn.bf16.f32 gives the canonical 0x7FFF: the fix gives 0x7FFF.
    """
    ref = x.to(torch.bfloat16)
    nan = x.isnan()
    assert torch.equal(ref.isnan(), nan)
    ok = out_bits == ref.view(torch.int16)
    bad = (~ok & ~nan).nonzero().flatten()[:8].tolist()
    assert not bad, [(hex(x.view(torch.int32)[i].item() & 0xFFFFFFFF), hex(out_bits[i].item() & 0xFFFF),
                      hex(ref.view(torch.int16)[i].item() & 0xFFFF)) for i in bad]
    assert nan.any() and bool((out_bits[nan] == 0x7FFF).all()), out_bits[nan].unique()


def test_bf16_round_wrong_without_fix(unfixed: ModuleType) -> None:
    x, cast, stored = _run_bf16_round(unfixed)
    names = list(BF16_SPECIAL_BITS)
    for bits in (cast, stored):
        got = {name: bits[i].item() & 0xFFFF for i, name in enumerate(names)}
        assert got["tie_to_even_up"] == 0x3F81 and got["just_above_tie"] == 0x3F80  # truncated
        assert got["fp32_max_to_inf"] == 0x7F7F  # stays finite
        assert got["nan_low_payload"] == 0x7F80  # a NaN became +inf
        assert got["subnormal_above_tie"] != 0x0001  # subnormals garbled
        ref = x.to(torch.bfloat16).view(torch.int16)
        assert (bits != ref)[~x.isnan()].float().mean() > 0.3  # not a corner case: ~half of all values


def test_bf16_round_matches_torch_with_fix(fixed: ModuleType) -> None:
    x, cast, stored = _run_bf16_round(fixed)
    _assert_bf16_bits_match_torch(x, cast)  # x.to(tl.bfloat16)
    _assert_bf16_bits_match_torch(x, stored)  # tl.store of fp32 values into a bf16 pointer
    names = list(BF16_SPECIAL_BITS)
    got = {name: cast[i].item() & 0xFFFF for i, name in enumerate(names)}
    # the named cases, spelt out (independent of torch)
    assert got["tie_to_even_down"] == 0x3F80 and got["tie_to_even_up"] == 0x3F82
    assert got["neg_tie_to_even_up"] == 0xBF82 and got["carry_into_exponent"] == 0x4000
    assert got["fp32_max_to_inf"] == 0x7F80 and got["neg_fp32_max_to_inf"] == 0xFF80
    assert got["bf16_max_stays"] == 0x7F7F and got["neg_zero"] == 0x8000
    assert got["subnormal_tie_to_even_down"] == 0 and got["subnormal_tie_to_even_up"] == 2
    assert got["subnormal_to_normal"] == 0x0080


def _all_bf16() -> torch.Tensor:
    return torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def test_bf16_widen_exact_only_with_fix(kernels: ModuleType) -> None:
    # Every bf16 bit pattern -> fp32: exact, bit for bit (0x7FFF stays that NaN, widened).
    x = _all_bf16()
    ref = x.float().view(torch.int32)
    results = {}
    for fixes in (False, True):
        remove_interpreter_fixes()
        if fixes:
            assert "bf16_rounding" in apply_interpreter_fixes()
        y = torch.full((x.numel(), ), -1.0)
        kernels.bf16_widen_kernel[(_cdiv(x.numel(), 4096), )](x, y, x.numel(), 4096)
        results[fixes] = y.view(torch.int32) != ref
    remove_interpreter_fixes()
    subnormal = (x.view(torch.int16) & 0x7F80) == 0
    assert results[False][subnormal & (x != 0)].all() and not results[False][~subnormal].any()  # the bug
    assert not results[True].any(), x[results[True]][:8]


def test_fp16_to_bf16_rounds_with_fix(fixed: ModuleType) -> None:
    # fp16 -> bf16 runs through fp32 (exact), then the rounding above: every fp16 value.
    x = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16)
    out = torch.full((x.numel(), ), 0x1234, dtype=torch.int16)
    fixed.fp16_to_bf16_kernel[(_cdiv(x.numel(), 4096), )](x, out, x.numel(), 4096)
    _assert_bf16_bits_match_torch(x.float(), out)
    assert torch.equal(x.float().to(torch.bfloat16).isnan(), x.to(torch.bfloat16).isnan())
    nan = x.isnan()
    assert torch.equal(out[~nan], x.to(torch.bfloat16).view(torch.int16)[~nan])  # torch's own fp16 -> bf16


def test_bf16_rounding_leaves_other_casts_alone(fixed: ModuleType) -> None:
    # fp32 -> fp16 (numpy, already nearest even) and bf16 -> fp16 go their usual ways.
    from triton.runtime import interpreter as interp
    import triton.language as tl

    builder = interp.InterpreterBuilder()
    x = np.array([1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 65520.0], dtype=np.float32)
    with np.errstate(over="ignore"):  # 65520 overflows fp16
        h = builder.cast_impl(interp.TensorHandle(x, tl.float32), tl.float16)
    assert h.data.dtype == np.float16 and h.data.tolist() == [1.0, 1.0 + 2.0**-9, float("inf")]



# ------------------------------------------------------------- apply / remove


def _patch_points() -> tuple[object, ...]:
    import triton.runtime.interpreter as interp

    builder = interp.InterpreterBuilder
    return (builder.__dict__["create_dot"], interp._prepare_dot_scaled_operand, interp._patch_lang,
            builder.__dict__["cast_impl"], "create_grid_dependency_wait" in builder.__dict__)


def test_noop_without_interpret_env(kernels: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    remove_interpreter_fixes()
    originals = _patch_points()
    for value in (None, "0", "true"):
        if value is None:
            monkeypatch.delenv("TRITON_INTERPRET", raising=False)
        else:
            monkeypatch.setenv("TRITON_INTERPRET", value)
        assert apply_interpreter_fixes() == []
        assert _patch_points() == originals


def test_apply_is_idempotent_and_remove_restores(kernels: ModuleType) -> None:
    remove_interpreter_fixes()
    originals = _patch_points()
    assert originals[-1] is False
    try:
        assert apply_interpreter_fixes() == ALL_FIXES
        patched = _patch_points()
        assert all(p is not o for p, o in zip(patched[:-1], originals[:-1])) and patched[-1] is True
        assert apply_interpreter_fixes() == ALL_FIXES
        assert _patch_points() == patched
    finally:
        assert remove_interpreter_fixes() == ALL_FIXES
    assert _patch_points() == originals
    assert remove_interpreter_fixes() == []


def test_context_manager(kernels: ModuleType) -> None:
    remove_interpreter_fixes()
    originals = _patch_points()
    a, b, ref = _bf16_case(*BF16_SHAPES[0])
    with interpreter_fixes() as names:
        assert names == ALL_FIXES
        _assert_close_fp32(_run_matmul(kernels, a, b), ref)
    assert _patch_points() == originals


@contextlib.contextmanager
def _fix_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Capture the fixes' warnings in ``caplog`` (on the fixes' own logger: see tests/_logs.py)."""
    with records_of(caplog, "inductor_ext.runtime.triton_interp", logging.WARNING):
        yield


def test_missing_patch_point_is_skipped_with_warning(kernels: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    import triton.runtime.interpreter as interp

    remove_interpreter_fixes()
    monkeypatch.delattr(interp, "_prepare_dot_scaled_operand")
    monkeypatch.delattr(interp.InterpreterBuilder, "create_dot")
    try:
        with _fix_warnings(caplog):
            assert apply_interpreter_fixes() == ["gdc_noop", "libdevice_math", "bf16_rounding"]
        messages = " ".join(r.getMessage() for r in caplog.records)
        assert "bf16_dot" in messages and "nvfp4_dot_scaled" in messages and "tf32_dot" in messages
    finally:
        remove_interpreter_fixes()


def test_bf16_rounding_skipped_when_cast_impl_missing(kernels: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    import triton.runtime.interpreter as interp

    remove_interpreter_fixes()
    monkeypatch.delattr(interp.InterpreterBuilder, "cast_impl")
    try:
        with _fix_warnings(caplog):
            assert apply_interpreter_fixes() == [f for f in ALL_FIXES if f != "bf16_rounding"]
        assert any("bf16_rounding" in r.getMessage() and "cast_impl" in r.getMessage() for r in caplog.records)
    finally:
        remove_interpreter_fixes()
