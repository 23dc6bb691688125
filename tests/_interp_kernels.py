"""Triton kernels for tests/test_triton_interp_fixes.py.

``@triton.jit`` picks the interpreter when it *decorates* a kernel (it reads
TRITON_INTERPRET then), so this module must be imported only after
TRITON_INTERPRET=1 is set; the test module loads it from a fixture.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
# Inductor's spelling (triton_helpers re-exports this module), and named imports.
from triton.language.extra import libdevice
from triton.language.extra.libdevice import isnan, signbit


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # c[M, N] = a[M, K] @ b[K, N], fp32 accumulation, masked on every edge.
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def precision_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    # c[M, N] = a[M, K] @ b[K, N] for contiguous fp32 a, b, c, with tl.dot's input_precision.
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def fp4_matmul_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr):
    # c[M, N] = dequant(a)[M, K] @ dequant(b)[N, K].T with
    #   a: [M, K // 2] uint8, two e2m1 per byte (low nibble first), a_scale: [M, cdiv(K, GROUP)] uint8
    #   b: [N, K // 2] uint8 (same packing),                        b_scale: [N, cdiv(K, GROUP)] uint8
    # GROUP 16 with e4m3 scales is NVFP4, GROUP 32 with e8m0 scales is MXFP4.
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    KP = K // 2
    KS = tl.cdiv(K, GROUP)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rkp = k0 // 2 + tl.arange(0, BLOCK_K // 2)
        rks = k0 // GROUP + tl.arange(0, BLOCK_K // GROUP)
        a = tl.load(a_ptr + rm[:, None] * KP + rkp[None, :], mask=(rm[:, None] < M) & (rkp[None, :] < KP), other=0)
        b = tl.load(b_ptr + rn[None, :] * KP + rkp[:, None], mask=(rn[None, :] < N) & (rkp[:, None] < KP), other=0)
        a_scale = tl.load(a_scale_ptr + rm[:, None] * KS + rks[None, :], mask=(rm[:, None] < M) & (rks[None, :] < KS),
                          other=0)
        b_scale = tl.load(b_scale_ptr + rn[:, None] * KS + rks[None, :], mask=(rn[:, None] < N) & (rks[None, :] < KS),
                          other=0)
        acc = tl.dot_scaled(a, a_scale, "e2m1", b, b_scale, "e2m1", acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def gdc_attr_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # The spelling Inductor emits for programmatic dependent launch.
    tl.extra.cuda.gdc_wait()
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r, mask=r < n)
    tl.extra.cuda.gdc_launch_dependents()
    tl.store(y_ptr + r, x * 2 + 1, mask=r < n)


@triton.jit
def gdc_imported_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # The same, with the builtins imported by name.
    gdc_wait()
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r, mask=r < n)
    gdc_launch_dependents()
    tl.store(y_ptr + r, x * 2 + 1, mask=r < n)


@triton.jit
def libdevice_unary_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # y[i, :n] = the i-th of LIBDEVICE_UNARY in the tests, for x > 0.
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = r < n
    x = tl.load(x_ptr + r, mask=m, other=1.0)
    tl.store(y_ptr + 0 * n + r, x * libdevice.rsqrt(x), mask=m)  # as in Inductor's RMSNorm kernel
    tl.store(y_ptr + 1 * n + r, libdevice.sqrt(x), mask=m)
    tl.store(y_ptr + 2 * n + r, libdevice.exp(x), mask=m)
    tl.store(y_ptr + 3 * n + r, libdevice.log(x), mask=m)
    tl.store(y_ptr + 4 * n + r, libdevice.log2(x), mask=m)
    tl.store(y_ptr + 5 * n + r, libdevice.log10(x), mask=m)
    tl.store(y_ptr + 6 * n + r, libdevice.log1p(x), mask=m)
    tl.store(y_ptr + 7 * n + r, libdevice.expm1(x), mask=m)
    tl.store(y_ptr + 8 * n + r, libdevice.floor(x), mask=m)
    tl.store(y_ptr + 9 * n + r, libdevice.ceil(x), mask=m)
    tl.store(y_ptr + 10 * n + r, libdevice.trunc(x), mask=m)
    tl.store(y_ptr + 11 * n + r, libdevice.nearbyint(x), mask=m)


@triton.jit
def libdevice_erf_tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # y[i, :n] = the i-th of LIBDEVICE_ERF_TANH in the tests, for |x| < 1.
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = r < n
    x = tl.load(x_ptr + r, mask=m, other=0.0)
    tl.store(y_ptr + 0 * n + r, libdevice.erf(x), mask=m)
    tl.store(y_ptr + 1 * n + r, libdevice.erfc(x), mask=m)
    tl.store(y_ptr + 2 * n + r, libdevice.erfinv(x), mask=m)
    tl.store(y_ptr + 3 * n + r, libdevice.tanh(x), mask=m)
    tl.store(y_ptr + 4 * n + r, libdevice.sinh(x), mask=m)
    tl.store(y_ptr + 5 * n + r, libdevice.cosh(x), mask=m)
    tl.store(y_ptr + 6 * n + r, libdevice.sin(x), mask=m)
    tl.store(y_ptr + 7 * n + r, libdevice.cos(x), mask=m)
    tl.store(y_ptr + 8 * n + r, libdevice.tan(x), mask=m)
    tl.store(y_ptr + 9 * n + r, libdevice.asin(x), mask=m)
    tl.store(y_ptr + 10 * n + r, libdevice.acos(x), mask=m)
    tl.store(y_ptr + 11 * n + r, libdevice.atan(x), mask=m)
    tl.store(y_ptr + 12 * n + r, libdevice.asinh(x), mask=m)
    tl.store(y_ptr + 13 * n + r, libdevice.atanh(x), mask=m)


@triton.jit
def libdevice_predicates_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # y[:, :n] = isnan(x), isinf(x), signbit(x) != 0 as int32, in three spellings.
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = r < n
    x = tl.load(x_ptr + r, mask=m, other=0.0)
    nan = isnan(x)
    inf = tl.extra.libdevice.isinf(x)
    neg = signbit(x)
    tl.static_assert(nan.dtype == tl.int1 and inf.dtype == tl.int1 and neg.dtype == tl.int32)  # as in CUDA's libdevice
    tl.store(y_ptr + 0 * n + r, nan.to(tl.int32), mask=m)
    tl.store(y_ptr + 1 * n + r, inf.to(tl.int32), mask=m)
    tl.store(y_ptr + 2 * n + r, (neg != 0).to(tl.int32), mask=m)  # Inductor's signbit


@triton.jit
def _libdevice_hypot(a, b):
    # A device function, like the triton_helpers that call libdevice.
    return libdevice.hypot(a, b)


@triton.jit
def libdevice_binary_kernel(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # y[i, :n] = the i-th of LIBDEVICE_BINARY in the tests.
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = r < n
    a = tl.load(a_ptr + r, mask=m, other=1.0)
    b = tl.load(b_ptr + r, mask=m, other=1.0)
    tl.store(y_ptr + 0 * n + r, libdevice.pow(libdevice.abs(a), b), mask=m)
    tl.store(y_ptr + 1 * n + r, libdevice.pow(a, 3), mask=m)  # (fp32, int32): powi
    tl.store(y_ptr + 2 * n + r, libdevice.atan2(a, b), mask=m)
    tl.store(y_ptr + 3 * n + r, libdevice.fmod(a, b), mask=m)
    tl.store(y_ptr + 4 * n + r, libdevice.copysign(a, b), mask=m)
    tl.store(y_ptr + 5 * n + r, _libdevice_hypot(a, b), mask=m)
    tl.store(y_ptr + 6 * n + r, libdevice.ldexp(a, 3), mask=m)


@triton.jit
def bf16_round_kernel(x_ptr, cast_ptr, store_ptr, n, BLOCK: tl.constexpr):
    # fp32 -> bf16 both ways a kernel spells it: cast_ptr (int16) gets the bits of
    # x.to(tl.bfloat16); store_ptr (bf16) gets x stored as is (the store casts).
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = r < n
    x = tl.load(x_ptr + r, mask=m, other=0.0)
    tl.store(cast_ptr + r, x.to(tl.bfloat16).to(tl.int16, bitcast=True), mask=m)
    tl.store(store_ptr + r, x, mask=m)


@triton.jit
def bf16_widen_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # y (fp32) = x (bf16).to(tl.float32)
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = r < n
    tl.store(y_ptr + r, tl.load(x_ptr + r, mask=m, other=0.0).to(tl.float32), mask=m)


@triton.jit
def fp16_to_bf16_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # y (int16) = the bits of x (fp16).to(tl.bfloat16)
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = r < n
    x = tl.load(x_ptr + r, mask=m, other=0.0)
    tl.store(y_ptr + r, x.to(tl.bfloat16).to(tl.int16, bitcast=True), mask=m)
