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

Limits (``refuse_problem``): K a multiple of 16 (whole scale blocks); K tails shorter than BLOCK_K are
masked (zero codes, zero scales, zero activations). M = 1 works; for small M the ``swap_ab``
configs compute acc^T = W A^T so N fills the 64-row wgmma side.

Programmatic dependent launch (PDL) with ``Nvfp4DequantGemmProblem.use_pdl``: see ``nvfp4_common``,
which holds it with the rest that this family shares with ``nvfp4_gemm``.
"""

from __future__ import annotations

import functools
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inductor_ext.templates import device_case
from inductor_ext.templates.allowed import flag, one_of, size
from inductor_ext.templates.base import KernelSource, Tile
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.triton.launch import FP, dtype_name
from inductor_ext.templates.triton import nvfp4_common as common
from inductor_ext.templates.triton.nvfp4_common import (  # noqa: F401  (public constants)
    ACTIVATIONS, BIAS_DTYPES, BLOCK_SIZE, OUT_DTYPES, SCALE_LAYOUTS)

if TYPE_CHECKING:  # annotations only: the module itself never imports torch at load
    import torch

    from inductor_ext.kernels.nvfp4 import NVFP4Tensor

NAME = "triton.nvfp4_dequant_gemm"

# Claimed only where tier I passes (tests/test_nvfp4_templates.py); "cpu" runs in the interpreter.
TARGETS = ("sm_90a", "cpu")
OPS = ("nvfp4_gemm",)
CHOICE_KIND = "triton_template"
CPU_EXECUTOR = "the Triton interpreter"  # how interpret mode runs it on CPU tensors

A_DTYPES = ("bfloat16", "float16", "nvfp4")


@dataclass(frozen=True)
class Nvfp4DequantGemmProblem:
    """out[m, n] = act(alpha * sum_k A[m, k] dequant(B)[n, k] + bias[n]), B NVFP4."""

    m: int = size()
    n: int = size()
    k: int = size()  # logical K (elements)
    a_dtype: str = one_of(A_DTYPES, "bfloat16")  # "bfloat16" / "float16" activations, or "nvfp4"
    out_dtype: str = one_of(common.OUT_DTYPES, "bfloat16")
    bias: bool = flag(False)
    bias_dtype: str | None = one_of((None, *common.BIAS_DTYPES), None)  # None: same as out_dtype
    activation: str | None = one_of(common.ACTIVATIONS, None)
    scale_layout: str = one_of(common.SCALE_LAYOUTS, "plain")
    use_pdl: bool = flag(False)  # programmatic dependent launch (USE_PDL; see nvfp4_common)

    @property
    def result_bias_dtype(self) -> str:
        return self.bias_dtype or self.out_dtype


@dataclass(frozen=True)
class Nvfp4DequantGemmConfig(common.Nvfp4TileConfig):
    """``nvfp4_common.Nvfp4TileConfig``: block_m/n/k (BLOCK_K in elements), group_m, num_warps,
    num_stages, and swap_ab (compute acc^T = W A^T: a small M sits on the MMA's N side)."""


Problem, Config = Nvfp4DequantGemmProblem, Nvfp4DequantGemmConfig


def problem_for(spec: OpSpec) -> Nvfp4DequantGemmProblem | str:
    """``inductor_ext::nvfp4_gemm`` (NVFP4 A and B, blocked scales): A is decoded on chip too."""
    if spec.op not in OPS:
        return f"{NAME} serves {', '.join(OPS)}, not {spec.op}"
    problem = Nvfp4DequantGemmProblem(**common.problem_fields(spec), a_dtype="nvfp4")
    return refuse_problem(problem) or problem


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> Nvfp4DequantGemmProblem:
    """An MxNxK problem as the nvfp4_gemm op gives it (NVFP4 A too; ``dtype`` is the output's)."""
    return Nvfp4DequantGemmProblem(m, n, k, a_dtype="nvfp4", out_dtype=dtype or "bfloat16", scale_layout="blocked")


def refuse_problem(problem: Nvfp4DequantGemmProblem) -> str | None:
    """None when the template can serve ``problem``, else the reason it cannot."""
    reason = common.check_shape(problem)
    if not reason and problem.a_dtype not in A_DTYPES:
        reason = f"activation dtype {problem.a_dtype} not in {A_DTYPES}"
    return reason or common.check_epilogue(problem)


def check_config(config: Nvfp4DequantGemmConfig, problem: Nvfp4DequantGemmProblem | None = None,
                 target: str | None = None) -> str | None:
    """None when ``config`` can be rendered (for ``problem`` on ``target``), else why not."""
    reason = common.check_tile(config)
    if reason:
        return reason
    if config.block_k < 32:
        return f"block_k={config.block_k} must be >= 32 (16 packed bytes, two scales per row)"
    if problem is not None and problem.scale_layout == "blocked" and config.block_k % 64:
        return f"block_k={config.block_k}: blocked scales come in groups of 4 (64 elements of K)"
    if target == "sm_90a":
        # measured with Triton 3.9: 16 and 32 rows compile to mma.sync (Ampere MMAs), not wgmma
        return common.check_mma_rows(config, 64, "wgmma needs >= 64, smaller tiles fall back to mma.sync")
    return None


# Configs the policies propose that spill registers to local memory (STL + LDL in the SASS), as
# Triton 3.9 compiles them with contiguous operands and NVFP4 or bf16 activations (tier I:
# tests/test_tier_i_configs.py; `inductor-ext asm triton.nvfp4_dequant_gemm --target sm_90a
# --shape MxNxK --all-configs`): the codes are decoded to bf16 in registers, so wide K tiles and
# deep pipelines with 4 warps run out of them. refuse_config refuses them.
_C = Nvfp4DequantGemmConfig
SPILLS: dict[str, dict[Nvfp4DequantGemmConfig, int]] = {"sm_90a": {
    _C(16, 128, 256, 1, 4, 6, swap_ab=True): 48,
    _C(64, 128, 128, 1, 4, 6, swap_ab=True): 58,
    _C(64, 128, 128, 1, 4, 3, swap_ab=True): 58,
    _C(64, 128, 128, 8, 4, 6): 8,
    _C(64, 128, 128, 8, 4, 4): 8,
    _C(128, 128, 128, 8, 4, 8): 348,
    _C(128, 128, 128, 8, 16, 8): 10,
    _C(64, 64, 256, 8, 4, 7): 2,
    _C(128, 64, 128, 8, 4, 8): 5,
    _C(256, 64, 128, 8, 16, 8): 4,
}}


# sm_90a: wgmma needs >= 64 rows on the MMA's M side (check_config); the decode runs in registers,
# so BLOCK_K stays at 64..128. For small M the swap_ab configs put N on the M side.
_SM90_CONFIGS = (
    Nvfp4DequantGemmConfig(128, 128, 128, 8, 8, 3),
    Nvfp4DequantGemmConfig(64, 128, 64, 8, 4, 4),  # BLOCK_K 128 spills with 4 warps (SPILLS)
    Nvfp4DequantGemmConfig(128, 64, 64, 8, 4, 4),
)
_SM90_SMALL_M = (
    Nvfp4DequantGemmConfig(16, 128, 128, 1, 4, 4, swap_ab=True),
    Nvfp4DequantGemmConfig(32, 128, 128, 1, 4, 4, swap_ab=True),
    Nvfp4DequantGemmConfig(64, 128, 64, 1, 4, 3, swap_ab=True),  # BLOCK_K 128 spills (SPILLS)
)
# The interpreter runs each program in numpy: few, big tiles are fastest there.
_CPU_CONFIGS = (Nvfp4DequantGemmConfig(32, 32, 128, 8, 4, 1), Nvfp4DequantGemmConfig(64, 64, 64, 8, 4, 1))


def configs(problem: Nvfp4DequantGemmProblem, target: str) -> list[Nvfp4DequantGemmConfig]:
    """The default candidate configs for ``problem`` on ``target``, best guess first."""
    return common.pick_configs(problem, target, TARGETS, _CPU_CONFIGS, _SM90_CONFIGS, _SM90_SMALL_M,
                               lambda c: check_config(c, problem, target) is None)


def config_from_tile(tile: Tile, target: str | None = None) -> Nvfp4DequantGemmConfig | None:
    """A policy's tile as this template's config; None for split-K (not supported) and for
    tiles ``check_config`` rejects (on ``target`` when given)."""
    config = common.tile_config(tile, Nvfp4DequantGemmConfig)
    return None if config is None or check_config(config, target=target) else config


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


def _load_decoded(x: str, rows: str, out: str, indent: int) -> str:
    """Text that loads one K step of NVFP4 operand ``x`` (from ``<x>_ptrs`` and ``<x>_s_ptrs``, the
    K tail masked to zero codes and scales) and decodes it into ``out`` (``_decode``)."""
    return textwrap.indent(f"""\
if EVEN_K:
    {x}_q = tl.load({x}_ptrs)
    {x}_s = tl.load({x}_s_ptrs)
else:
    {x}_q = tl.load({x}_ptrs, mask=rkp[None, :] * 2 < k_left, other=0)
    {x}_s = tl.load({x}_s_ptrs, mask=rks[None, :] * 16 < k_left, other=0)
{x}_q = {x}_q.to(tl.uint8, bitcast=True)
""", " " * indent) + _decode(f"{x}_q", f"{x}_s", rows, out, indent)


# The shared main loop. Inputs: pointers A, A_SCALE, B, B_SCALE; ints M, N, K and strides
# (stride_bk, and stride_ak when A is NVFP4, are per packed byte); constexprs BLOCK_M/N/K,
# GROUP_M, EVEN_K, A_NVFP4, BLOCKED_SCALES, SWAP_AB, DOT_DTYPE, USE_PDL.
# Leaves: acc [BLOCK_M, BLOCK_N] fp32, rn_safe, idx_m, idx_n, mask.
# The text around the K loop is nvfp4_common's.
BODY = common.TILE_ROWS + """\
    rk = tl.arange(0, BLOCK_K)
""" + common.PACKED_K + """\
    b_ptrs = B + rn_safe[:, None] * stride_bn + rkp[None, :] * stride_bk
    # Scales are read as bytes (a masked load needs an `other` a uint8 can hold).
    b_scale_base = B_SCALE.to(tl.pointer_type(tl.uint8), bitcast=True)
""" + common.scale_pointers("b", step="s_step_{}") + """\
    if A_NVFP4:
        a_ptrs = A + rm_safe[:, None] * stride_am + rkp[None, :] * stride_ak
        a_step = BLOCK_K // 2 * stride_ak
        a_scale_base = A_SCALE.to(tl.pointer_type(tl.uint8), bitcast=True)
""" + common.scale_pointers("a", step="s_step_{}", indent=8, tile_stride=False) + """\
    else:
        a_ptrs = A + rm_safe[:, None] * stride_am + rk[None, :] * stride_ak
        a_step = BLOCK_K * stride_ak
""" + common.MAIN_LOOP_ENTRY + """\
    for k_tile in range(0, tl.cdiv(K, BLOCK_K)):
        # The K tail: zero codes, zero scales and zero activations add nothing.
        k_left = K - k_tile * BLOCK_K
""" + _load_decoded("b", "BLOCK_N", "w", 8) + """\
        if A_NVFP4:
""" + _load_decoded("a", "BLOCK_M", "a", 12) + """\
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
""" + common.MAIN_LOOP_EXIT

# The shared epilogue (nvfp4_common.epilogue): alpha in fp32, then bias, then the activation.
EPILOGUE = common.epilogue("the NVFP4 global scale(s)")

_STANDALONE = common.standalone(flags="A_NVFP4: tl.constexpr, ", preamble="\nDOT_DTYPE = tl.constexpr({dot_dtype})\n")

# Inputs, in order, as ``torch._scaled_mm`` takes them (every choice benchmarks on the same
# inputs as the ATen one): A ([M, K] bf16/fp16, or [M, K // 2] packed when A_NVFP4), B [K // 2, N]
# (the weight's transposed view, uint8 or float4_e2m1fn_x2), A_SCALE (only when A_NVFP4),
# B_SCALE (float8_e4m3fn [rows, K // 16], or flat when BLOCKED_SCALES), ALPHA (fp32, one
# element) and, when HAS_BIAS, BIAS [N]. The template kwargs are the constexprs of
# ``constexprs()`` plus DOT_DTYPE.
_INDUCTOR = common.inductor_frame(
    NAME,
    def_kernel="""\
{{% if A_NVFP4 and HAS_BIAS %}}{{{{def_kernel("A", "B", "A_SCALE", "B_SCALE", "ALPHA", "BIAS")}}}}\
{{% elif A_NVFP4 %}}{{{{def_kernel("A", "B", "A_SCALE", "B_SCALE", "ALPHA")}}}}\
{{% elif HAS_BIAS %}}{{{{def_kernel("A", "B", "B_SCALE", "ALPHA", "BIAS")}}}}\
{{% else %}}{{{{def_kernel("A", "B", "B_SCALE", "ALPHA")}}}}{{% endif %}}""",
    packed_k='"B", 0',
    scale_strides="""\
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
{{% endif %}}""",
    bias_stand_in="B_SCALE",
)


def kernel_name(problem: Nvfp4DequantGemmProblem, config: Nvfp4DequantGemmConfig) -> str:
    a = {"bfloat16": "bf16", "float16": "fp16", "nvfp4": "nvfp4"}[problem.a_dtype]
    return "_".join(["ext_nvfp4_dequant_gemm", f"a{a}", problem.out_dtype, *common.name_parts(problem), config.name()])


def constexprs(problem: Nvfp4DequantGemmProblem, config: Nvfp4DequantGemmConfig) -> dict[str, object]:
    """The tl.constexpr values a launch (or an Inductor template choice, with DOT_DTYPE) needs."""
    return common.kernel_constexprs(problem, config, A_NVFP4=problem.a_dtype == "nvfp4")


def refuse_config(problem: Nvfp4DequantGemmProblem, config: Nvfp4DequantGemmConfig, target: str) -> str | None:
    """check_config, and no config measured spilling on ``target`` (``SPILLS``; render still
    renders those, e.g. for ``inductor-ext asm --config``)."""
    return check_config(config, problem, target) or common.spill_reason(config, target, SPILLS)


def launch_values(problem: Nvfp4DequantGemmProblem) -> dict[str, int]:
    """The integer launch arguments for contiguous operands (``nvfp4_common.launch_values``)."""
    return common.launch_values(problem, a_packed=problem.a_dtype == "nvfp4")


def inductor_kwargs(problem: Nvfp4DequantGemmProblem, config: Nvfp4DequantGemmConfig,
                    target: str) -> dict[str, object]:
    """The TritonTemplate kwargs of a choice, as Inductor renders them into source text."""
    return {**common.inductor_kwargs(constexprs(problem, config)), "DOT_DTYPE": dot_dtype(problem)}


def render(problem: Nvfp4DequantGemmProblem, config: Nvfp4DequantGemmConfig, target: str = "cpu") -> KernelSource:
    """A standalone Triton module computing ``problem`` with ``config``."""
    common.check_render(NAME, TARGETS, problem, config, target,
                        refuse_problem(problem) or check_config(config, problem, target))
    name = kernel_name(problem, config)
    source = _STANDALONE.format(name=name, body=BODY, epilogue=EPILOGUE, dot_dtype=dot_dtype(problem))
    # without NVFP4 activations A_SCALE is unused: run() passes B_SCALE there
    a_type = "*u8" if problem.a_dtype == "nvfp4" else f"*{FP[problem.a_dtype]}"
    return common.kernel_source(NAME, name, source, problem, config, constexprs(problem, config), a_type)


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

    from inductor_ext.kernels.nvfp4 import NVFP4Tensor

    qb = b.qdata.view(torch.uint8)
    _, kp = qb.shape
    k = 2 * kp
    a_nvfp4 = isinstance(a, NVFP4Tensor)
    if a_nvfp4:
        a_arg, a_scales = a.qdata.view(torch.uint8), a.scales
        k_a, a_dtype, default_out = 2 * a_arg.shape[1], "nvfp4", torch.bfloat16
    else:
        a_arg, a_scales = a, None
        (_, k_a), a_dtype, default_out = a.shape, dtype_name(a.dtype), a.dtype
    if k_a != k:
        raise ValueError(f"inner dimensions differ: a has K={k_a}, b has K={k} ({tuple(qb.shape)} packed)")
    if alpha is None:
        alpha = float(b.global_scale) * (float(a.global_scale) if a_nvfp4 else 1.0)
    return common.run_gemm(render, functools.partial(Nvfp4DequantGemmProblem, a_dtype=a_dtype), a_arg, a_scales, b,
                           config, alpha=alpha, bias=bias, activation=activation, out_dtype=out_dtype or default_out,
                           scale_layout=scale_layout, target=target, use_pdl=use_pdl)


def device_cases(target: str) -> list[device_case.DeviceCase]:
    """The device check's cases: bf16 A x NVFP4 weight on decode and prefill shapes, against
    ``torch.mm`` on the dequantized weight (Hopper has no FP4 tensor cores)."""

    def operands(problem: Problem) -> device_case.DeviceOperands:
        import torch

        from inductor_ext.kernels import nvfp4, scaled_gemm

        x, w = device_case.gemm_inputs(problem.m, problem.n, problem.k)
        wq = nvfp4.quantize_nvfp4(w)
        w_deq = nvfp4.dequantize_nvfp4(wq, apply_global_scale=True).to(torch.bfloat16)
        a = x.to(torch.bfloat16)
        return device_case.DeviceOperands(
            lambda config, use_pdl: run(a, wq, config, target=target, use_pdl=use_pdl),
            scaled_gemm.scaled_mm_reference(a.float(), wq, out_dtype=torch.float32), lambda: torch.mm(a, w_deq.t()))

    return device_case.gemm_cases(lambda m, n, k: Problem(m, n, k, a_dtype="bfloat16", out_dtype="bfloat16",
                                                          scale_layout="plain"), operands)

FAMILY = Family.of_module(__name__, pdl=True)
