"""Triton NVFP4 weight-dequant GEMM template for GPUs without FP4 tensor cores (Hopper).

out = act(alpha * (A @ dequant(B)^T) + bias) with ``B [N, K]`` NVFP4 weights (packed e2m1 uint8
``[N, K // 2]``, low nibble = even element, one float8_e4m3fn scale per 16 elements of K; see
``inductor_ext.kernels.nvfp4``) and ``A [M, K]`` activations in bf16 or fp16 (weight-only NVFP4,
the usual decode case) or NVFP4 themselves (``a_dtype="nvfp4"``, decoded the same way).
``alpha`` is applied in fp32 in the epilogue (the weight's global scale, times the activation's
when A is NVFP4), then the optional bias ``[N]`` and activation, then one rounding: the math of
``inductor_ext.kernels.scaled_gemm.scaled_mm_reference``.

Hopper has no FP4 MMA, so each packed tile is decoded on chip: the two nibbles of a byte are
split and interleaved (``tl.join``), each e2m1 code becomes the bits of an fp32 (exponent rebias;
code 1 = 0.5 is the one subnormal and is special-cased), is multiplied by its e4m3 block scale
and rounded to the MMA dtype. ``e2m1 * e4m3`` has at most 6 significant bits and lies in
[2**-10, 2688], so that rounding is exact in bf16 and fp16: only the accumulation order differs
from the reference. ``tl.dot`` on the decoded bf16/fp16 tiles is ``wgmma.mma_async ... .bf16.bf16``
(``.f16.f16``) on sm_90a (tests/test_nvfp4_templates.py, tier I).

Scale layouts (``scale_layout``) as in ``nvfp4_gemm``: ``"plain"`` strided ``[rows, K // 16]`` or
``"blocked"`` (``kernels.nvfp4.to_blocked``, read in place; needs BLOCK_K a multiple of 64).

Limits (``supports``): K a multiple of 16 (whole scale blocks); K tails shorter than BLOCK_K are
masked (zero codes, zero scales, zero activations). M = 1 works; for small M the ``swap_ab``
configs compute acc^T = W A^T so N fills the 64-row wgmma side.

Programmatic dependent launch (PDL): ``Nvfp4DequantGemmProblem.use_pdl`` sets the ``USE_PDL``
constexpr, as in ``triton.gemm``: ``tl.extra.cuda.gdc_wait()`` after the index, pointer and
scale-address setup,
right before the first global load (the first K tile of the operands; the Inductor frame loads
ALPHA after the main loop for this reason), and ``tl.extra.cuda.gdc_launch_dependents()`` right
after the K loop, before alpha, bias, activation and the store. ``render()`` adds the compile
option ``launch_pdl=True`` to ``KernelSource.launch``. It is a problem field, not a config field:
it depends on the GEMM's place in the graph (``inductor_ext.autotune.pdl_policy.use_pdl``) and is
the same for every candidate config.
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from inductor_ext.templates.base import KernelSource, Tile

if TYPE_CHECKING:  # annotations only: the module itself never imports torch at load
    import torch

    from inductor_ext.kernels.nvfp4 import NVFP4Tensor

FAMILY = "triton.nvfp4_dequant_gemm"

# Claimed only where tier I passes (tests/test_nvfp4_templates.py); "cpu" runs in the interpreter.
TARGETS = ("sm_90a", "cpu")

A_DTYPES = ("bfloat16", "float16", "nvfp4")
OUT_DTYPES = ("bfloat16", "float16", "float32")
BIAS_DTYPES = ("bfloat16", "float16", "float32")
# None, relu, gelu (erf form, F.gelu), gelu_tanh (F.gelu(approximate="tanh")), silu
ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")
SCALE_LAYOUTS = ("plain", "blocked")
BLOCK_SIZE = 16  # NVFP4: one e4m3 scale per 16 elements of K

_FP = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class Nvfp4DequantGemmProblem:
    """out[m, n] = act(alpha * sum_k A[m, k] dequant(B)[n, k] + bias[n]), B NVFP4."""

    m: int
    n: int
    k: int  # logical K (elements)
    a_dtype: str = "bfloat16"  # "bfloat16" / "float16" activations, or "nvfp4"
    out_dtype: str = "bfloat16"
    bias: bool = False
    bias_dtype: str | None = None  # None: same as out_dtype
    activation: str | None = None
    scale_layout: str = "plain"
    use_pdl: bool = False  # programmatic dependent launch (USE_PDL; see the module docstring)

    @property
    def result_bias_dtype(self) -> str:
        return self.bias_dtype or self.out_dtype


@dataclass(frozen=True)
class Nvfp4DequantGemmConfig:
    block_m: int
    block_n: int
    block_k: int  # in elements
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    swap_ab: bool = False  # compute acc^T = W A^T: a small M sits on the MMA's N side

    def name(self) -> str:
        swap = "_swap" if self.swap_ab else ""
        return (f"{self.block_m}x{self.block_n}x{self.block_k}_g{self.group_m}_w{self.num_warps}"
                f"_s{self.num_stages}{swap}")


def supports(problem: Nvfp4DequantGemmProblem) -> str | None:
    """None when the template can serve ``problem``, else the reason it cannot."""
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    if problem.k % BLOCK_SIZE:
        return (f"K={problem.k} is not a multiple of {BLOCK_SIZE}: NVFP4 GEMMs take whole 16-element "
                f"scale blocks (partial last blocks are for reference math only)")
    if problem.a_dtype not in A_DTYPES:
        return f"activation dtype {problem.a_dtype} not in {A_DTYPES}"
    if problem.out_dtype not in OUT_DTYPES:
        return f"out_dtype {problem.out_dtype} not in {OUT_DTYPES}"
    if problem.bias and problem.result_bias_dtype not in BIAS_DTYPES:
        return f"bias dtype {problem.result_bias_dtype} not in {BIAS_DTYPES}"
    if problem.activation not in ACTIVATIONS:
        return f"activation {problem.activation!r} not in {ACTIVATIONS}"
    if problem.scale_layout not in SCALE_LAYOUTS:
        return f"scale_layout {problem.scale_layout!r} not in {SCALE_LAYOUTS}"
    return None


def check_config(config: Nvfp4DequantGemmConfig, problem: Nvfp4DequantGemmProblem | None = None,
                 target: str | None = None) -> str | None:
    """None when ``config`` can be rendered (for ``problem`` on ``target``), else why not."""
    for name in ("block_m", "block_n", "block_k"):
        value = getattr(config, name)
        if value < 16 or value & (value - 1):
            return f"{name}={value} must be a power of two >= 16"
    if config.block_k < 32:
        return f"block_k={config.block_k} must be >= 32 (16 packed bytes, two scales per row)"
    if problem is not None and problem.scale_layout == "blocked" and config.block_k % 64:
        return f"block_k={config.block_k}: blocked scales come in groups of 4 (64 elements of K)"
    mma_rows = config.block_n if config.swap_ab else config.block_m
    if target == "sm_90a" and mma_rows < 64:
        # measured with Triton 3.9: 16 and 32 rows compile to mma.sync (Ampere MMAs), not wgmma
        return (f"{mma_rows} rows on the MMA's M side ({'BLOCK_N with swap_ab' if config.swap_ab else 'BLOCK_M'}): "
                f"wgmma needs >= 64, smaller tiles fall back to mma.sync")
    return None


# sm_90a: wgmma needs >= 64 rows on the MMA's M side (check_config); the decode runs in registers,
# so BLOCK_K stays at 64..128. For small M the swap_ab configs put N on the M side.
_SM90_CONFIGS = (
    Nvfp4DequantGemmConfig(128, 128, 128, 8, 8, 3),
    Nvfp4DequantGemmConfig(64, 128, 128, 8, 4, 4),
    Nvfp4DequantGemmConfig(128, 64, 64, 8, 4, 4),
)
_SM90_SMALL_M = (
    Nvfp4DequantGemmConfig(16, 128, 128, 1, 4, 4, swap_ab=True),
    Nvfp4DequantGemmConfig(32, 128, 128, 1, 4, 4, swap_ab=True),
    Nvfp4DequantGemmConfig(64, 128, 128, 1, 4, 3, swap_ab=True),
)
# The interpreter runs each program in numpy: few, big tiles are fastest there.
_CPU_CONFIGS = (Nvfp4DequantGemmConfig(32, 32, 128, 8, 4, 1), Nvfp4DequantGemmConfig(64, 64, 64, 8, 4, 1))


def configs(problem: Nvfp4DequantGemmProblem, target: str) -> list[Nvfp4DequantGemmConfig]:
    """The default candidate configs for ``problem`` on ``target``, best guess first."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    if target == "cpu":
        return list(_CPU_CONFIGS)
    out: list[Nvfp4DequantGemmConfig] = []
    if problem.m <= 64:
        out += [c for c in _SM90_SMALL_M if c.block_m >= min(problem.m, 64)][:1]
    fitting = [c for c in _SM90_CONFIGS if c.block_n <= max(64, 2 * problem.n)]
    return [c for c in out + (fitting or [_SM90_CONFIGS[-1]]) if check_config(c, problem, target) is None]


def config_from_tile(tile: Tile, target: str | None = None) -> Nvfp4DequantGemmConfig | None:
    """A policy's tile as this template's config; None for split-K (not supported) and for
    tiles ``check_config`` rejects (on ``target`` when given)."""
    if tile.split_k != 1:
        return None
    config = Nvfp4DequantGemmConfig(tile.block_m, tile.block_n, tile.block_k, 1 if tile.swap_ab else 8,
                                    tile.num_warps, tile.num_stages, swap_ab=tile.swap_ab)
    return None if check_config(config, target=target) else config


def dot_dtype(problem: Nvfp4DequantGemmProblem) -> str:
    """The MMA input dtype: fp16 for fp16 activations, else bf16 (the DOT_DTYPE constexpr)."""
    return "tl.float16" if problem.a_dtype == "float16" else "tl.bfloat16"


def _decode(packed: str, scales: str, rows: str, out: str, indent: int) -> str:
    """Text that decodes ``packed`` [rows, BLOCK_K // 2] e2m1 bytes and their ``scales``
    [rows, BLOCK_K // 16] e4m3 bytes into ``out`` [rows, BLOCK_K] of DOT_DTYPE."""
    return textwrap.indent(f"""\
# (low, high) nibble = (even, odd) element along K
codes = tl.join({packed} & 0xF, {packed} >> 4).to(tl.uint32)
mag = codes & 0x7
# e2m1 -> fp32 bits: magnitude m >= 2 is 2**((m >> 1) - 1) * (1 + (m & 1) / 2), i.e. the
# bits (m << 22) rebiased by 126 << 23; m = 1 (0.5) is e2m1's one subnormal.
bits = tl.where(mag < 2, mag * 0x3F000000, (mag << 22) + 0x3F000000) | ((codes & 0x8) << 28)
vals = bits.to(tl.float32, bitcast=True).reshape({rows}, BLOCK_K // 16, 16)
scale = {scales}.to(tl.float8e4nv, bitcast=True).to(tl.float32)
# e2m1 * e4m3 has <= 6 significant bits: exact in bf16 and fp16.
{out} = (vals * scale[:, :, None]).reshape({rows}, BLOCK_K).to(DOT_DTYPE)
""", " " * indent)


# The shared main loop. Inputs: pointers A, A_SCALE, B, B_SCALE; ints M, N, K and strides
# (stride_bk, and stride_ak when A is NVFP4, are per packed byte); constexprs BLOCK_M/N/K,
# GROUP_M, EVEN_K, A_NVFP4, BLOCKED_SCALES, SWAP_AB, DOT_DTYPE, USE_PDL.
# Leaves: acc [BLOCK_M, BLOCK_N] fp32, rn_safe, idx_m, idx_n, mask.
BODY = """\
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    # Group programs along M so programs running together share tiles of B in L2.
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Lanes past M/N reload a valid row (no mask on the hot loads); the store mask drops them.
    rm_safe = rm % M
    rn_safe = rn % N
    rk = tl.arange(0, BLOCK_K)
    # Two e2m1 codes per byte along K (low nibble first), one e4m3 scale per 16 codes.
    rkp = tl.arange(0, BLOCK_K // 2)
    rks = tl.arange(0, BLOCK_K // 16)
    b_ptrs = B + rn_safe[:, None] * stride_bn + rkp[None, :] * stride_bk
    # Scales are read as bytes (a masked load needs an `other` a uint8 can hold).
    b_scale_base = B_SCALE.to(tl.pointer_type(tl.uint8), bitcast=True)
    if BLOCKED_SCALES:
        # kernels.nvfp4.to_blocked: 128x4 tiles of 512 bytes, row-major over (row tile, col tile);
        # entry (r, c) of a tile at (r % 32) * 16 + (r // 32) * 4 + c.
        tile_stride = tl.cdiv(K // 16, 4) * 512
        b_s_rows = (rn_safe // 128) * tile_stride + (rn_safe % 32) * 16 + (rn_safe // 32 % 4) * 4
        b_s_ptrs = b_scale_base + b_s_rows[:, None] + ((rks // 4) * 512 + rks % 4)[None, :]
        s_step_b = BLOCK_K // 64 * 512
    else:
        b_s_ptrs = b_scale_base + rn_safe[:, None] * stride_bsn + rks[None, :] * stride_bsk
        s_step_b = BLOCK_K // 16 * stride_bsk
    if A_NVFP4:
        a_ptrs = A + rm_safe[:, None] * stride_am + rkp[None, :] * stride_ak
        a_step = BLOCK_K // 2 * stride_ak
        a_scale_base = A_SCALE.to(tl.pointer_type(tl.uint8), bitcast=True)
        if BLOCKED_SCALES:
            a_s_rows = (rm_safe // 128) * tile_stride + (rm_safe % 32) * 16 + (rm_safe // 32 % 4) * 4
            a_s_ptrs = a_scale_base + a_s_rows[:, None] + ((rks // 4) * 512 + rks % 4)[None, :]
            s_step_a = BLOCK_K // 64 * 512
        else:
            a_s_ptrs = a_scale_base + rm_safe[:, None] * stride_asm + rks[None, :] * stride_ask
            s_step_a = BLOCK_K // 16 * stride_ask
    else:
        a_ptrs = A + rm_safe[:, None] * stride_am + rk[None, :] * stride_ak
        a_step = BLOCK_K * stride_ak
    if SWAP_AB:
        acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if USE_PDL:
        # PDL: all above is index math; wait for the previous kernel right before the first load.
        tl.extra.cuda.gdc_wait()
    for k_tile in range(0, tl.cdiv(K, BLOCK_K)):
        # The K tail: zero codes, zero scales and zero activations add nothing.
        k_left = K - k_tile * BLOCK_K
        if EVEN_K:
            b_q = tl.load(b_ptrs)
            b_s = tl.load(b_s_ptrs)
        else:
            b_q = tl.load(b_ptrs, mask=rkp[None, :] * 2 < k_left, other=0)
            b_s = tl.load(b_s_ptrs, mask=rks[None, :] * 16 < k_left, other=0)
        b_q = b_q.to(tl.uint8, bitcast=True)
""" + _decode("b_q", "b_s", "BLOCK_N", "w", 8) + """\
        if A_NVFP4:
            if EVEN_K:
                a_q = tl.load(a_ptrs)
                a_s = tl.load(a_s_ptrs)
            else:
                a_q = tl.load(a_ptrs, mask=rkp[None, :] * 2 < k_left, other=0)
                a_s = tl.load(a_s_ptrs, mask=rks[None, :] * 16 < k_left, other=0)
            a_q = a_q.to(tl.uint8, bitcast=True)
""" + _decode("a_q", "a_s", "BLOCK_M", "a", 12) + """\
            a_s_ptrs += s_step_a
        else:
            if EVEN_K:
                a = tl.load(a_ptrs)
            else:
                a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            a = a.to(DOT_DTYPE)
        if SWAP_AB:
            acc_t = tl.dot(w, tl.trans(a), acc_t, out_dtype=tl.float32)
        else:
            acc = tl.dot(a, tl.trans(w), acc, out_dtype=tl.float32)
        a_ptrs += a_step
        b_ptrs += BLOCK_K // 2 * stride_bk
        b_s_ptrs += s_step_b
    if USE_PDL:
        # PDL: the main loop is done; the next kernel may start its prologue during the epilogue.
        tl.extra.cuda.gdc_launch_dependents()
    if SWAP_AB:
        acc = tl.trans(acc_t)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
"""

# The shared epilogue: alpha in fp32, then bias, then the activation, all before the one rounding.
# Inputs: acc, alpha, rn_safe; BIAS, stride_bias; constexprs HAS_BIAS, ACTIVATION.
EPILOGUE = """\
    # alpha (the NVFP4 global scale(s)) in fp32, before bias and activation.
    acc = acc * alpha
    if HAS_BIAS:
        bias = tl.load(BIAS + rn_safe * stride_bias).to(tl.float32)
        acc = acc + bias[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "gelu":  # erf form
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":  # 0.5 * x * (1 + tanh(u)) == x * sigmoid(2 * u)
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    elif ACTIVATION == "silu":
        acc = acc * tl.sigmoid(acc)
"""

_STANDALONE = """\
import triton
import triton.language as tl

DOT_DTYPE = tl.constexpr({dot_dtype})


@triton.jit
def {name}(
    A, A_SCALE, B, B_SCALE, C, BIAS, M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_asm, stride_ask, stride_bsn, stride_bsk,
    stride_cm, stride_cn, stride_bias, alpha,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, A_NVFP4: tl.constexpr, BLOCKED_SCALES: tl.constexpr, SWAP_AB: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, USE_PDL: tl.constexpr,
):
{body}{epilogue}\
    tl.store(C + idx_m * stride_cm + idx_n * stride_cn, acc.to(C.dtype.element_ty), mask=mask)
"""

# Inputs, in order, as ``torch._scaled_mm`` takes them (every choice benchmarks on the same
# inputs as the ATen one): A ([M, K] bf16/fp16, or [M, K // 2] packed when A_NVFP4), B [K // 2, N]
# (the weight's transposed view, uint8 or float4_e2m1fn_x2), A_SCALE (only when A_NVFP4),
# B_SCALE (float8_e4m3fn [rows, K // 16], or flat when BLOCKED_SCALES), ALPHA (fp32, one
# element) and, when HAS_BIAS, BIAS [N]. The template kwargs are the constexprs of
# ``constexprs()`` plus DOT_DTYPE.
_INDUCTOR = """\
{{% if A_NVFP4 and HAS_BIAS %}}{{{{def_kernel("A", "B", "A_SCALE", "B_SCALE", "ALPHA", "BIAS")}}}}\
{{% elif A_NVFP4 %}}{{{{def_kernel("A", "B", "A_SCALE", "B_SCALE", "ALPHA")}}}}\
{{% elif HAS_BIAS %}}{{{{def_kernel("A", "B", "B_SCALE", "ALPHA", "BIAS")}}}}\
{{% else %}}{{{{def_kernel("A", "B", "B_SCALE", "ALPHA")}}}}{{% endif %}}
    # inductor_ext template: triton.nvfp4_dequant_gemm
    M = {{{{size("A", 0)}}}}
    N = {{{{size("B", 1)}}}}
    K = 2 * {{{{size("B", 0)}}}}
    if M * N == 0:
        return
    stride_am = {{{{stride("A", 0)}}}}
    stride_ak = {{{{stride("A", 1)}}}}
    stride_bn = {{{{stride("B", 1)}}}}
    stride_bk = {{{{stride("B", 0)}}}}
{{% if BLOCKED_SCALES %}}\
    stride_bsn = 0
    stride_bsk = 0
{{% else %}}\
    stride_bsn = {{{{stride("B_SCALE", 0)}}}}
    stride_bsk = {{{{stride("B_SCALE", 1)}}}}
{{% endif %}}\
{{% if A_NVFP4 and not BLOCKED_SCALES %}}\
    stride_asm = {{{{stride("A_SCALE", 0)}}}}
    stride_ask = {{{{stride("A_SCALE", 1)}}}}
{{% elif A_NVFP4 %}}\
    stride_asm = 0
    stride_ask = 0
{{% else %}}\
    A_SCALE = B_SCALE
    stride_asm = 0
    stride_ask = 0
{{% endif %}}\
{{% if HAS_BIAS %}}\
    stride_bias = {{{{stride("BIAS", -1)}}}}
{{% else %}}\
    BIAS = B_SCALE
    stride_bias = 0
{{% endif %}}\
{body}\
    # after the main loop, so that with USE_PDL the first global load comes after gdc_wait()
    alpha = tl.load(ALPHA).to(tl.float32)
{epilogue}\
    {{{{store_output(("idx_m", "idx_n"), "acc", "mask", val_shape=("BLOCK_M", "BLOCK_N"))}}}}
"""


def kernel_name(problem: Nvfp4DequantGemmProblem, config: Nvfp4DequantGemmConfig) -> str:
    a = {"bfloat16": "bf16", "float16": "fp16", "nvfp4": "nvfp4"}[problem.a_dtype]
    parts = ["ext_nvfp4_dequant_gemm", f"a{a}", problem.out_dtype]
    if problem.bias:
        parts.append(f"bias_{_FP[problem.result_bias_dtype]}")
    if problem.activation:
        parts.append(problem.activation)
    if problem.scale_layout != "plain":
        parts.append(problem.scale_layout)
    if problem.use_pdl:
        parts.append("pdl")
    return "_".join(parts + [config.name()])


def constexprs(problem: Nvfp4DequantGemmProblem, config: Nvfp4DequantGemmConfig) -> dict[str, object]:
    """The tl.constexpr values a launch (or an Inductor template choice, with DOT_DTYPE) needs."""
    return {
        "BLOCK_M": config.block_m,
        "BLOCK_N": config.block_n,
        "BLOCK_K": config.block_k,
        "GROUP_M": config.group_m,
        "EVEN_K": problem.k % config.block_k == 0,
        "A_NVFP4": problem.a_dtype == "nvfp4",
        "BLOCKED_SCALES": problem.scale_layout == "blocked",
        "SWAP_AB": config.swap_ab,
        "HAS_BIAS": problem.bias,
        "ACTIVATION": problem.activation,
        "USE_PDL": problem.use_pdl,
    }


def render(problem: Nvfp4DequantGemmProblem, config: Nvfp4DequantGemmConfig, target: str = "cpu") -> KernelSource:
    """A standalone Triton module computing ``problem`` with ``config``."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    reason = supports(problem) or check_config(config, problem, target)
    if reason:
        raise ValueError(f"{FAMILY} cannot serve {problem} with {config}: {reason}")
    name = kernel_name(problem, config)
    consts = constexprs(problem, config)
    a_nvfp4 = problem.a_dtype == "nvfp4"
    signature = {
        "A": "*u8" if a_nvfp4 else f"*{_FP[problem.a_dtype]}",
        # without NVFP4 activations A_SCALE is unused: run() passes B_SCALE there
        "A_SCALE": "*fp8e4nv", "B": "*u8", "B_SCALE": "*fp8e4nv",
        "C": f"*{_FP[problem.out_dtype]}", "BIAS": f"*{_FP[problem.result_bias_dtype]}",
        **{s: "i32" for s in ("M", "N", "K", "stride_am", "stride_ak", "stride_bn", "stride_bk",
                              "stride_asm", "stride_ask", "stride_bsn", "stride_bsk",
                              "stride_cm", "stride_cn", "stride_bias")},
        "alpha": "fp32",
        **{c: "constexpr" for c in consts},
    }
    return KernelSource(
        name=name,
        source=_STANDALONE.format(name=name, body=BODY, epilogue=EPILOGUE, dot_dtype=dot_dtype(problem)),
        template=FAMILY,
        config=asdict(config),
        constexprs=consts,
        signature=signature,
        launch=_launch(problem, config),
    )


def _launch(problem: Nvfp4DequantGemmProblem, config: Nvfp4DequantGemmConfig) -> dict[str, object]:
    launch: dict[str, object] = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    if problem.use_pdl:
        launch["launch_pdl"] = True  # Triton compile option: launch with the PDL attribute
    return launch


def inductor_source() -> str:
    """The template text for Inductor's TritonTemplate (jinja macros around the shared body).

    Template kwargs: the ``constexprs()`` (ACTIVATION as a quoted string or None) and DOT_DTYPE.
    The epilogue (alpha, bias, activation in fp32) is the template's own; Inductor's fused
    epilogues, if any, come after it in ``store_output``.
    """
    return _INDUCTOR.format(body=BODY, epilogue=EPILOGUE)


def run(a: "torch.Tensor | NVFP4Tensor", b: "NVFP4Tensor", config: Nvfp4DequantGemmConfig, *,
        alpha: float | None = None, bias: "torch.Tensor | None" = None, activation: str | None = None,
        out_dtype: "torch.dtype | None" = None, scale_layout: str = "plain",
        target: str = "cpu", use_pdl: bool = False) -> "torch.Tensor":
    """Render, load and launch the kernel for ``a [M, K] @ dequant(b) [N, K]^T`` (interpreter on CPU).

    ``a`` is a bf16/fp16 tensor (any strides) or an ``NVFP4Tensor``; ``b`` an ``NVFP4Tensor``.
    ``alpha`` defaults to the product of the NVFP4 global scales. With ``scale_layout="blocked"``
    the plain scales are swizzled with ``to_blocked`` first. ``out_dtype`` defaults to a's dtype
    (bfloat16 for NVFP4 activations).
    """
    import torch
    import triton

    from inductor_ext.kernels.nvfp4 import NVFP4Tensor, to_blocked
    from inductor_ext.templates.loader import load_kernel

    qb = b.qdata.view(torch.uint8)
    n, kp = qb.shape
    k = 2 * kp
    a_nvfp4 = isinstance(a, NVFP4Tensor)
    if a_nvfp4:
        a_arg = a.qdata.view(torch.uint8)
        m, k_a = a_arg.shape[0], 2 * a_arg.shape[1]
        a_dtype, default_out = "nvfp4", torch.bfloat16
    else:
        a_arg = a
        (m, k_a), a_dtype, default_out = a.shape, str(a.dtype).removeprefix("torch."), a.dtype
    if k_a != k:
        raise ValueError(f"inner dimensions differ: a has K={k_a}, b has K={k} ({tuple(qb.shape)} packed)")
    if alpha is None:
        alpha = float(b.global_scale) * (float(a.global_scale) if a_nvfp4 else 1.0)
    torch_out = out_dtype or default_out
    problem = Nvfp4DequantGemmProblem(m, n, k, a_dtype, str(torch_out).removeprefix("torch."),
                                      bias=bias is not None,
                                      bias_dtype=str(bias.dtype).removeprefix("torch.") if bias is not None else None,
                                      activation=activation, scale_layout=scale_layout, use_pdl=use_pdl)
    ks = render(problem, config, target)
    sb = b.scales.view(torch.float8_e4m3fn)
    sa = a.scales.view(torch.float8_e4m3fn) if a_nvfp4 else sb
    if scale_layout == "blocked":
        sb_arg = to_blocked(sb)
        sa_arg = to_blocked(sa) if a_nvfp4 else sb_arg
        scale_strides = (0, 0, 0, 0)
    else:
        sa_arg, sb_arg = sa, sb
        scale_strides = ((sa.stride(0), sa.stride(1)) if a_nvfp4 else (0, 0)) + (sb.stride(0), sb.stride(1))
    c = torch.empty((m, n), dtype=torch_out, device=qb.device)
    bias_arg = bias if bias is not None else c
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    load_kernel(ks)[grid](
        a_arg, sa_arg, qb, sb_arg, c, bias_arg, m, n, k,
        a_arg.stride(0), a_arg.stride(1), qb.stride(0), qb.stride(1), *scale_strides,
        c.stride(0), c.stride(1), bias.stride(-1) if bias is not None else 0,
        float(alpha), **ks.constexprs, **ks.launch,
    )
    return c
