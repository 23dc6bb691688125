"""Triton fused NVFP4 GEMM template: out = act(alpha * (A_fp4 @ B_fp4^T) + bias).

Both operands are NVFP4 (``inductor_ext.kernels.nvfp4``): packed e2m1 uint8 ``[rows, K // 2]``
(low nibble = even element along K) with one float8_e4m3fn block scale per 16 elements of K.
``A [M, K]`` are the activations, ``B [N, K]`` the weights (an ``nn.Linear`` weight, K-major).
``alpha`` (the product of the two global scales) is applied in fp32 in the epilogue, then the
optional bias ``[N]`` and activation, then one rounding to the output dtype: the math of
``inductor_ext.kernels.scaled_gemm.scaled_mm_reference``.

The main loop is ``tl.dot_scaled(a, a_scale, "e2m1", b, b_scale, "e2m1", acc)`` on uint8 views
with float8e4nv scales of shape ``[BLOCK, BLOCK_K // 16]``; Triton reads that as NVFP4 and, on
sm_100a, emits ``tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16`` (tests/test_nvfp4_templates.py,
tier I). mxf4nvf4 has no transposed operands, so both tiles are K-major: A is loaded
``[BLOCK_M, BLOCK_K // 2]`` and B ``[BLOCK_N, BLOCK_K // 2]`` and passed as ``b.T``. Triton takes
the group size from the scale shape (K // 16 columns: block16) and the scale type from the scales'
element type: uint8 scales give the very same mnemonic with an instruction descriptor that says
ue8m0, so the scale bytes are bitcast to float8e4nv (ue4m3) right before the dot.

Scale layouts (``Nvfp4GemmProblem.scale_layout``), both per operand ``[rows, K // 16]`` logically:
- ``"plain"``: a strided 2-D tensor, what ``quantize_nvfp4`` returns (any strides);
- ``"blocked"``: ``kernels.nvfp4.to_blocked`` (the cuBLAS/CUTLASS 128x4 tiles that
  ``torch._scaled_mm`` and torchao take), read in place, so no un-swizzle pass is needed.
The layout only changes the scale addresses: the MMA reads scales from tensor memory either way.

Limits (``supports``): K a multiple of 16 (whole scale blocks; K // 2 bytes per row need not be
16-byte aligned, tails of K smaller than BLOCK_K are masked with zero codes and zero scales).
M = 1 works; for small M the ``swap_ab`` configs put N on the MMA's M side (acc^T = B A^T).

Programmatic dependent launch (PDL): ``Nvfp4GemmProblem.use_pdl`` sets the ``USE_PDL``
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

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from inductor_ext.templates.base import KernelSource, Tile

if TYPE_CHECKING:  # annotations only: the module itself never imports torch at load
    import torch

    from inductor_ext.kernels.nvfp4 import NVFP4Tensor

FAMILY = "triton.nvfp4_gemm"

# Claimed only where tier I passes (tests/test_nvfp4_templates.py); "cpu" runs in the interpreter.
TARGETS = ("sm_100a", "cpu")

OUT_DTYPES = ("bfloat16", "float16", "float32")
BIAS_DTYPES = ("bfloat16", "float16", "float32")
# None, relu, gelu (erf form, F.gelu), gelu_tanh (F.gelu(approximate="tanh")), silu
ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")
SCALE_LAYOUTS = ("plain", "blocked")
BLOCK_SIZE = 16  # NVFP4: one e4m3 scale per 16 elements of K

_FP = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class Nvfp4GemmProblem:
    """out[m, n] = act(alpha * sum_k A[m, k] B[n, k] + bias[n]), A and B NVFP4."""

    m: int
    n: int
    k: int  # logical K (elements); the packed operands have K // 2 bytes per row
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
class Nvfp4GemmConfig:
    block_m: int
    block_n: int
    block_k: int  # in elements (BLOCK_K // 2 bytes, BLOCK_K // 16 scales per row per step)
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    swap_ab: bool = False  # compute acc^T = B A^T: a small M sits on the MMA's N side

    def name(self) -> str:
        swap = "_swap" if self.swap_ab else ""
        return (f"{self.block_m}x{self.block_n}x{self.block_k}_g{self.group_m}_w{self.num_warps}"
                f"_s{self.num_stages}{swap}")


def supports(problem: Nvfp4GemmProblem) -> str | None:
    """None when the template can serve ``problem``, else the reason it cannot."""
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    if problem.k % BLOCK_SIZE:
        return (f"K={problem.k} is not a multiple of {BLOCK_SIZE}: NVFP4 GEMMs take whole 16-element "
                f"scale blocks (partial last blocks are for reference math only)")
    if problem.out_dtype not in OUT_DTYPES:
        return f"out_dtype {problem.out_dtype} not in {OUT_DTYPES}"
    if problem.bias and problem.result_bias_dtype not in BIAS_DTYPES:
        return f"bias dtype {problem.result_bias_dtype} not in {BIAS_DTYPES}"
    if problem.activation not in ACTIVATIONS:
        return f"activation {problem.activation!r} not in {ACTIVATIONS}"
    if problem.scale_layout not in SCALE_LAYOUTS:
        return f"scale_layout {problem.scale_layout!r} not in {SCALE_LAYOUTS}"
    return None


def check_config(config: Nvfp4GemmConfig, target: str | None = None) -> str | None:
    """None when ``config`` can be rendered (for ``target``), else why not."""
    for name in ("block_m", "block_n", "block_k"):
        value = getattr(config, name)
        if value < 16 or value & (value - 1):
            return f"{name}={value} must be a power of two >= 16"
    if config.block_k < 64:
        # one byte per two codes and whole groups of 4 scales (the 128x4 tiles of the blocked layout)
        return f"block_k={config.block_k} must be >= 64"
    mma_rows = config.block_n if config.swap_ab else config.block_m
    if target == "sm_100a" and mma_rows < 128:
        # measured with Triton 3.9: 64 rows compile to tcgen05 kind::f16 on operands decoded to bf16
        return (f"{mma_rows} rows on the MMA's M side ({'BLOCK_N with swap_ab' if config.swap_ab else 'BLOCK_M'}): "
                f"Triton emits the native block16 MMA on sm_100a only for >= 128, smaller tiles fall back "
                f"to bf16 emulation")
    return None


# sm_100a: the block16 MMA needs >= 128 rows on the MMA's M side (check_config) and BLOCK_K >= 64.
# For small M the swap_ab configs put N on the MMA's M side and M (padded to 16..64) on its N side.
_SM100_CONFIGS = (
    Nvfp4GemmConfig(128, 128, 256, 8, 4, 3),
    Nvfp4GemmConfig(128, 64, 256, 8, 4, 4),
    Nvfp4GemmConfig(128, 128, 128, 8, 4, 4),
)
_SM100_SMALL_M = (
    Nvfp4GemmConfig(16, 128, 256, 1, 4, 4, swap_ab=True),
    Nvfp4GemmConfig(32, 128, 256, 1, 4, 4, swap_ab=True),
    Nvfp4GemmConfig(64, 128, 256, 1, 4, 3, swap_ab=True),
)
# The interpreter runs each program in numpy: few, big tiles are fastest there.
_CPU_CONFIGS = (Nvfp4GemmConfig(32, 32, 128, 8, 4, 1), Nvfp4GemmConfig(64, 64, 64, 8, 4, 1))


def configs(problem: Nvfp4GemmProblem, target: str) -> list[Nvfp4GemmConfig]:
    """The default candidate configs for ``problem`` on ``target``, best guess first."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    if target == "cpu":
        return list(_CPU_CONFIGS)
    out: list[Nvfp4GemmConfig] = []
    if problem.m <= 64:
        out += [c for c in _SM100_SMALL_M if c.block_m >= min(problem.m, 64)][:1]
    fitting = [c for c in _SM100_CONFIGS if c.block_n <= max(64, 2 * problem.n)]
    return [c for c in out + (fitting or [_SM100_CONFIGS[-1]]) if check_config(c, target) is None]


def config_from_tile(tile: Tile, target: str | None = None) -> Nvfp4GemmConfig | None:
    """A policy's tile as this template's config; None for split-K (not supported) and for
    tiles ``check_config`` rejects (on ``target`` when given)."""
    if tile.split_k != 1:
        return None
    config = Nvfp4GemmConfig(tile.block_m, tile.block_n, tile.block_k, 1 if tile.swap_ab else 8,
                             tile.num_warps, tile.num_stages, swap_ab=tile.swap_ab)
    return None if check_config(config, target) else config


# The shared main loop. Inputs: pointers A, A_SCALE, B, B_SCALE; ints M, N, K and strides
# (stride_ak / stride_bk are per packed byte); constexprs BLOCK_M/N/K, GROUP_M, EVEN_K,
# BLOCKED_SCALES, SWAP_AB, USE_PDL. Leaves: acc [BLOCK_M, BLOCK_N] fp32, rn_safe, idx_m, idx_n, mask.
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
    # Two e2m1 codes per byte along K (low nibble first), one e4m3 scale per 16 codes.
    rkp = tl.arange(0, BLOCK_K // 2)
    rks = tl.arange(0, BLOCK_K // 16)
    a_ptrs = A + rm_safe[:, None] * stride_am + rkp[None, :] * stride_ak
    b_ptrs = B + rn_safe[:, None] * stride_bn + rkp[None, :] * stride_bk
    # Scales are read as bytes (a masked load needs an `other` a uint8 can hold) and
    # bitcast to float8e4nv for dot_scaled.
    a_scale_base = A_SCALE.to(tl.pointer_type(tl.uint8), bitcast=True)
    b_scale_base = B_SCALE.to(tl.pointer_type(tl.uint8), bitcast=True)
    if BLOCKED_SCALES:
        # kernels.nvfp4.to_blocked: 128x4 tiles of 512 bytes, row-major over (row tile, col tile);
        # entry (r, c) of a tile at (r % 32) * 16 + (r // 32) * 4 + c.
        tile_stride = tl.cdiv(K // 16, 4) * 512
        a_s_rows = (rm_safe // 128) * tile_stride + (rm_safe % 32) * 16 + (rm_safe // 32 % 4) * 4
        a_s_ptrs = a_scale_base + a_s_rows[:, None] + ((rks // 4) * 512 + rks % 4)[None, :]
        b_s_rows = (rn_safe // 128) * tile_stride + (rn_safe % 32) * 16 + (rn_safe // 32 % 4) * 4
        b_s_ptrs = b_scale_base + b_s_rows[:, None] + ((rks // 4) * 512 + rks % 4)[None, :]
        a_s_step = BLOCK_K // 64 * 512
        b_s_step = BLOCK_K // 64 * 512
    else:
        a_s_ptrs = a_scale_base + rm_safe[:, None] * stride_asm + rks[None, :] * stride_ask
        b_s_ptrs = b_scale_base + rn_safe[:, None] * stride_bsn + rks[None, :] * stride_bsk
        a_s_step = BLOCK_K // 16 * stride_ask
        b_s_step = BLOCK_K // 16 * stride_bsk
    if SWAP_AB:
        acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if USE_PDL:
        # PDL: all above is index math; wait for the previous kernel right before the first load.
        tl.extra.cuda.gdc_wait()
    for k_tile in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
            a_s = tl.load(a_s_ptrs)
            b_s = tl.load(b_s_ptrs)
        else:
            # The K tail: zero codes with zero scales add nothing.
            k_left = K - k_tile * BLOCK_K
            a = tl.load(a_ptrs, mask=rkp[None, :] * 2 < k_left, other=0)
            b = tl.load(b_ptrs, mask=rkp[None, :] * 2 < k_left, other=0)
            a_s = tl.load(a_s_ptrs, mask=rks[None, :] * 16 < k_left, other=0)
            b_s = tl.load(b_s_ptrs, mask=rks[None, :] * 16 < k_left, other=0)
        # uint8 codes and float8e4nv scales with 16 codes per scale: Triton's NVFP4 dot_scaled.
        a = a.to(tl.uint8, bitcast=True)
        b = b.to(tl.uint8, bitcast=True)
        a_s = a_s.to(tl.float8e4nv, bitcast=True)
        b_s = b_s.to(tl.float8e4nv, bitcast=True)
        if SWAP_AB:
            acc_t = tl.dot_scaled(b, b_s, "e2m1", a.T, a_s, "e2m1", acc_t)
        else:
            acc = tl.dot_scaled(a, a_s, "e2m1", b.T, b_s, "e2m1", acc)
        a_ptrs += BLOCK_K // 2 * stride_ak
        b_ptrs += BLOCK_K // 2 * stride_bk
        a_s_ptrs += a_s_step
        b_s_ptrs += b_s_step
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
    # alpha (the product of the NVFP4 global scales) in fp32, before bias and activation.
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


@triton.jit
def {name}(
    A, A_SCALE, B, B_SCALE, C, BIAS, M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_asm, stride_ask, stride_bsn, stride_bsk,
    stride_cm, stride_cn, stride_bias, alpha,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, BLOCKED_SCALES: tl.constexpr, SWAP_AB: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, USE_PDL: tl.constexpr,
):
{body}{epilogue}\
    tl.store(C + idx_m * stride_cm + idx_n * stride_cn, acc.to(C.dtype.element_ty), mask=mask)
"""

# Inputs, in order, as ``torch._scaled_mm`` takes them (so the choice benchmarks against ATen on
# the same inputs): A [M, K // 2] and B [K // 2, N] (the weight's transposed view) as
# float4_e2m1fn_x2 or uint8, A_SCALE, B_SCALE (float8_e4m3fn [rows, K // 16], or flat when
# BLOCKED_SCALES), ALPHA (fp32, one element) and, when HAS_BIAS, BIAS [N]. The template kwargs
# are the constexprs of ``constexprs()``.
_INDUCTOR = """\
{{% if HAS_BIAS %}}{{{{def_kernel("A", "B", "A_SCALE", "B_SCALE", "ALPHA", "BIAS")}}}}\
{{% else %}}{{{{def_kernel("A", "B", "A_SCALE", "B_SCALE", "ALPHA")}}}}{{% endif %}}
    # inductor_ext template: triton.nvfp4_gemm
    M = {{{{size("A", 0)}}}}
    N = {{{{size("B", 1)}}}}
    K = 2 * {{{{size("A", 1)}}}}
    if M * N == 0:
        return
    stride_am = {{{{stride("A", 0)}}}}
    stride_ak = {{{{stride("A", 1)}}}}
    stride_bn = {{{{stride("B", 1)}}}}
    stride_bk = {{{{stride("B", 0)}}}}
{{% if BLOCKED_SCALES %}}\
    stride_asm = 0
    stride_ask = 0
    stride_bsn = 0
    stride_bsk = 0
{{% else %}}\
    stride_asm = {{{{stride("A_SCALE", 0)}}}}
    stride_ask = {{{{stride("A_SCALE", 1)}}}}
    stride_bsn = {{{{stride("B_SCALE", 0)}}}}
    stride_bsk = {{{{stride("B_SCALE", 1)}}}}
{{% endif %}}\
{{% if HAS_BIAS %}}\
    stride_bias = {{{{stride("BIAS", -1)}}}}
{{% else %}}\
    BIAS = A
    stride_bias = 0
{{% endif %}}\
{body}\
    # after the main loop, so that with USE_PDL the first global load comes after gdc_wait()
    alpha = tl.load(ALPHA).to(tl.float32)
{epilogue}\
    {{{{store_output(("idx_m", "idx_n"), "acc", "mask", val_shape=("BLOCK_M", "BLOCK_N"))}}}}
"""


def kernel_name(problem: Nvfp4GemmProblem, config: Nvfp4GemmConfig) -> str:
    parts = ["ext_nvfp4_gemm", problem.out_dtype]
    if problem.bias:
        parts.append(f"bias_{_FP[problem.result_bias_dtype]}")
    if problem.activation:
        parts.append(problem.activation)
    if problem.scale_layout != "plain":
        parts.append(problem.scale_layout)
    if problem.use_pdl:
        parts.append("pdl")
    return "_".join(parts + [config.name()])


def constexprs(problem: Nvfp4GemmProblem, config: Nvfp4GemmConfig) -> dict[str, object]:
    """The tl.constexpr values a launch (or an Inductor template choice) needs."""
    return {
        "BLOCK_M": config.block_m,
        "BLOCK_N": config.block_n,
        "BLOCK_K": config.block_k,
        "GROUP_M": config.group_m,
        "EVEN_K": problem.k % config.block_k == 0,
        "BLOCKED_SCALES": problem.scale_layout == "blocked",
        "SWAP_AB": config.swap_ab,
        "HAS_BIAS": problem.bias,
        "ACTIVATION": problem.activation,
        "USE_PDL": problem.use_pdl,
    }


def render(problem: Nvfp4GemmProblem, config: Nvfp4GemmConfig, target: str = "cpu") -> KernelSource:
    """A standalone Triton module computing ``problem`` with ``config``."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    reason = supports(problem) or check_config(config, target)
    if reason:
        raise ValueError(f"{FAMILY} cannot serve {problem} with {config}: {reason}")
    name = kernel_name(problem, config)
    consts = constexprs(problem, config)
    signature = {
        "A": "*u8", "A_SCALE": "*fp8e4nv", "B": "*u8", "B_SCALE": "*fp8e4nv",
        "C": f"*{_FP[problem.out_dtype]}", "BIAS": f"*{_FP[problem.result_bias_dtype]}",
        **{s: "i32" for s in ("M", "N", "K", "stride_am", "stride_ak", "stride_bn", "stride_bk",
                              "stride_asm", "stride_ask", "stride_bsn", "stride_bsk",
                              "stride_cm", "stride_cn", "stride_bias")},
        "alpha": "fp32",
        **{c: "constexpr" for c in consts},
    }
    return KernelSource(
        name=name,
        source=_STANDALONE.format(name=name, body=BODY, epilogue=EPILOGUE),
        template=FAMILY,
        config=asdict(config),
        constexprs=consts,
        signature=signature,
        launch=_launch(problem, config),
    )


def _launch(problem: Nvfp4GemmProblem, config: Nvfp4GemmConfig) -> dict[str, object]:
    launch: dict[str, object] = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    if problem.use_pdl:
        launch["launch_pdl"] = True  # Triton compile option: launch with the PDL attribute
    return launch


def inductor_source() -> str:
    """The template text for Inductor's TritonTemplate (jinja macros around the shared body).

    Template kwargs: the ``constexprs()`` (with ACTIVATION rendered as a quoted string or None).
    The epilogue (alpha, bias, activation in fp32) is the template's own; Inductor's fused
    epilogues, if any, come after it in ``store_output``.
    """
    return _INDUCTOR.format(body=BODY, epilogue=EPILOGUE)


def run(a: "NVFP4Tensor", b: "NVFP4Tensor", config: Nvfp4GemmConfig, *, alpha: float | None = None,
        bias: "torch.Tensor | None" = None, activation: str | None = None,
        out_dtype: "torch.dtype | None" = None, scale_layout: str = "plain",
        target: str = "cpu", use_pdl: bool = False) -> "torch.Tensor":
    """Render, load and launch the kernel for ``a [M, K] @ b [N, K]^T`` (interpreter on CPU).

    ``a`` and ``b`` are ``kernels.nvfp4.NVFP4Tensor``s; their ``qdata`` and ``scales`` are used
    with whatever strides they have. ``alpha`` defaults to the product of their global scales.
    With ``scale_layout="blocked"`` the plain scales are swizzled with ``to_blocked`` first (the
    kernel then reads the swizzled copies). ``out_dtype`` defaults to bfloat16.
    """
    import torch
    import triton

    from inductor_ext.kernels.nvfp4 import to_blocked
    from inductor_ext.templates.loader import load_kernel

    torch_out = out_dtype or torch.bfloat16
    qa, qb = a.qdata.view(torch.uint8), b.qdata.view(torch.uint8)
    (m, kp), (n, kp2) = qa.shape, qb.shape
    if kp != kp2:
        raise ValueError(f"inner dimensions differ: a is {tuple(qa.shape)}, b is {tuple(qb.shape)} (packed)")
    k = 2 * kp
    if alpha is None:
        alpha = float(a.global_scale) * float(b.global_scale)
    problem = Nvfp4GemmProblem(m, n, k, str(torch_out).removeprefix("torch."), bias=bias is not None,
                               bias_dtype=str(bias.dtype).removeprefix("torch.") if bias is not None else None,
                               activation=activation, scale_layout=scale_layout, use_pdl=use_pdl)
    ks = render(problem, config, target)
    sa, sb = a.scales.view(torch.float8_e4m3fn), b.scales.view(torch.float8_e4m3fn)
    if scale_layout == "blocked":
        sa_arg, sb_arg = to_blocked(sa), to_blocked(sb)
        scale_strides = (0, 0, 0, 0)
    else:
        sa_arg, sb_arg = sa, sb
        scale_strides = (sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1))
    c = torch.empty((m, n), dtype=torch_out, device=qa.device)
    bias_arg = bias if bias is not None else c
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    load_kernel(ks)[grid](
        qa, sa_arg, qb, sb_arg, c, bias_arg, m, n, k,
        qa.stride(0), qa.stride(1), qb.stride(0), qb.stride(1), *scale_strides,
        c.stride(0), c.stride(1), bias.stride(-1) if bias is not None else 0,
        float(alpha), **ks.constexprs, **ks.launch,
    )
    return c
