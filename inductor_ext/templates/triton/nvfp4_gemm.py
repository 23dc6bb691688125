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

Limits (``refuse_problem``): K a multiple of 16 (whole scale blocks; K // 2 bytes per row need not be
16-byte aligned, tails of K smaller than BLOCK_K are masked with zero codes and zero scales).
M = 1 works; for small M the ``swap_ab`` configs put N on the MMA's M side (acc^T = B A^T).

Programmatic dependent launch (PDL) with ``Nvfp4GemmProblem.use_pdl``: see ``nvfp4_common``,
which holds it with the rest that this family shares with ``nvfp4_dequant_gemm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from inductor_ext.templates import device_case
from inductor_ext.templates.allowed import flag, one_of, size
from inductor_ext.templates.base import KernelSource, Tile
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.triton import nvfp4_common as common
from inductor_ext.templates.triton.nvfp4_common import (  # noqa: F401  (public constants)
    ACTIVATIONS, BIAS_DTYPES, BLOCK_SIZE, OUT_DTYPES, SCALE_LAYOUTS)

if TYPE_CHECKING:  # annotations only: the module itself never imports torch at load
    import torch

    from inductor_ext.kernels.nvfp4 import NVFP4Tensor

NAME = "triton.nvfp4_gemm"

# Claimed only where tier I passes (tests/test_nvfp4_templates.py); "cpu" runs in the interpreter.
TARGETS = ("sm_100a", "cpu")
OPS = ("nvfp4_gemm",)
CHOICE_KIND = "triton_template"
CPU_EXECUTOR = "the Triton interpreter"  # how interpret mode runs it on CPU tensors


@dataclass(frozen=True)
class Nvfp4GemmProblem:
    """out[m, n] = act(alpha * sum_k A[m, k] B[n, k] + bias[n]), A and B NVFP4."""

    m: int = size()
    n: int = size()
    k: int = size()  # logical K (elements); the packed operands have K // 2 bytes per row
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
class Nvfp4GemmConfig(common.Nvfp4TileConfig):
    """``nvfp4_common.Nvfp4TileConfig``: block_m/n/k (BLOCK_K in elements), group_m, num_warps,
    num_stages, and swap_ab (compute acc^T = B A^T: a small M sits on the MMA's N side)."""


Problem, Config = Nvfp4GemmProblem, Nvfp4GemmConfig


def problem_for(spec: OpSpec) -> Nvfp4GemmProblem | str:
    """``inductor_ext::nvfp4_gemm`` (NVFP4 A and B, blocked scales)."""
    if spec.op not in OPS:
        return f"{NAME} serves {', '.join(OPS)}, not {spec.op}"
    problem = Nvfp4GemmProblem(**common.problem_fields(spec))
    return refuse_problem(problem) or problem


# What ``inductor-ext asm`` looks for beyond the target's MMA: the native block16 NVFP4 MMA.
KEY_INSTRUCTIONS = {"sm_100a": [("ptx", r"tcgen05\.mma\.cta_group::1\.kind::mxf4nvf4\.block_scale\.block16")]}


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> Nvfp4GemmProblem:
    """An MxNxK problem as the nvfp4_gemm op gives it (blocked scales; ``dtype`` is the output's)."""
    return Nvfp4GemmProblem(m, n, k, out_dtype=dtype or "bfloat16", scale_layout="blocked")


def refuse_problem(problem: Nvfp4GemmProblem) -> str | None:
    """None when the template can serve ``problem``, else the reason it cannot."""
    return common.check_shape(problem) or common.check_epilogue(problem)


def check_config(config: Nvfp4GemmConfig, target: str | None = None) -> str | None:
    """None when ``config`` can be rendered (for ``target``), else why not."""
    reason = common.check_tile(config)
    if reason:
        return reason
    if config.block_k < 64:
        # one byte per two codes and whole groups of 4 scales (the 128x4 tiles of the blocked layout)
        return f"block_k={config.block_k} must be >= 64"
    if target == "sm_100a":
        if config.num_warps not in (4, 8):
            # measured with Triton 3.9 (tests/test_tier_i_configs.py): 16 warps (nvMatmulHeuristics
            # proposes them for prefill) decode the codes to bf16 and run mma.sync
            return (f"num_warps={config.num_warps}: Triton emits the native block16 MMA on sm_100a only "
                    "with 4 or 8 warps; others fall back to bf16 emulation")
        # measured with Triton 3.9: 64 rows compile to tcgen05 kind::f16 on operands decoded to bf16
        return common.check_mma_rows(config, 128, "Triton emits the native block16 MMA on sm_100a only for >= 128, "
                                     "smaller tiles fall back to bf16 emulation")
    return None


# Configs the policies propose that touch local memory (STL + LDL in the SASS) as Triton 3.9
# compiles them with contiguous operands (tier I: tests/test_tier_i_configs.py; `inductor-ext asm
# triton.nvfp4_gemm --target sm_100a --shape 1x4096x4096 --all-configs`); refuse_config refuses them.
SPILLS: dict[str, dict[Nvfp4GemmConfig, int]] = {"sm_100a": {
    Nvfp4GemmConfig(16, 128, 256, 1, 4, 4, swap_ab=True): 4,  # at M = 1; 70 registers
    Nvfp4GemmConfig(16, 128, 256, 1, 4, 3, swap_ab=True): 4,
}}


def refuse_config(problem: Nvfp4GemmProblem, config: Nvfp4GemmConfig, target: str) -> str | None:
    """check_config, and no config measured touching local memory on ``target`` (``SPILLS``;
    render still renders those, e.g. for ``inductor-ext asm --config``)."""
    return check_config(config, target) or common.spill_reason(config, target, SPILLS)


# sm_100a: the block16 MMA needs >= 128 rows on the MMA's M side (check_config) and BLOCK_K >= 64.
# For small M the swap_ab configs put N on the MMA's M side and M (padded to 16..64) on its N side.
_SM100_CONFIGS = (
    Nvfp4GemmConfig(128, 128, 256, 8, 4, 3),
    Nvfp4GemmConfig(128, 64, 256, 8, 4, 4),
    Nvfp4GemmConfig(128, 128, 128, 8, 4, 4),
)
_SM100_SMALL_M = (
    Nvfp4GemmConfig(16, 128, 128, 1, 4, 4, swap_ab=True),  # BLOCK_K 256 touches local memory (SPILLS)
    Nvfp4GemmConfig(32, 128, 256, 1, 4, 4, swap_ab=True),
    Nvfp4GemmConfig(64, 128, 256, 1, 4, 3, swap_ab=True),
)
# The interpreter runs each program in numpy: few, big tiles are fastest there.
_CPU_CONFIGS = (Nvfp4GemmConfig(32, 32, 128, 8, 4, 1), Nvfp4GemmConfig(64, 64, 64, 8, 4, 1))


def configs(problem: Nvfp4GemmProblem, target: str) -> list[Nvfp4GemmConfig]:
    """The default candidate configs for ``problem`` on ``target``, best guess first."""
    return common.pick_configs(problem, target, TARGETS, _CPU_CONFIGS, _SM100_CONFIGS, _SM100_SMALL_M,
                               lambda c: check_config(c, target) is None)


def config_from_tile(tile: Tile, target: str | None = None) -> Nvfp4GemmConfig | None:
    """A policy's tile as this template's config; None for split-K (not supported) and for
    tiles ``check_config`` rejects (on ``target`` when given)."""
    config = common.tile_config(tile, Nvfp4GemmConfig)
    return None if config is None or check_config(config, target) else config


# The shared main loop. Inputs: pointers A, A_SCALE, B, B_SCALE; ints M, N, K and strides
# (stride_ak / stride_bk are per packed byte); constexprs BLOCK_M/N/K, GROUP_M, EVEN_K,
# BLOCKED_SCALES, SWAP_AB, USE_PDL. Leaves: acc [BLOCK_M, BLOCK_N] fp32, rn_safe, idx_m, idx_n, mask.
# The text around the K loop is nvfp4_common's.
BODY = common.TILE_ROWS + common.PACKED_K + """\
    a_ptrs = A + rm_safe[:, None] * stride_am + rkp[None, :] * stride_ak
    b_ptrs = B + rn_safe[:, None] * stride_bn + rkp[None, :] * stride_bk
    # Scales are read as bytes (a masked load needs an `other` a uint8 can hold) and
    # bitcast to float8e4nv for dot_scaled.
    a_scale_base = A_SCALE.to(tl.pointer_type(tl.uint8), bitcast=True)
    b_scale_base = B_SCALE.to(tl.pointer_type(tl.uint8), bitcast=True)
""" + common.scale_pointers("ab", step="{}_s_step") + common.MAIN_LOOP_ENTRY + """\
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
""" + common.MAIN_LOOP_EXIT

# The shared epilogue (nvfp4_common.epilogue): alpha in fp32, then bias, then the activation.
EPILOGUE = common.epilogue("the product of the NVFP4 global scales")

_STANDALONE = common.standalone()

# Inputs, in order, as ``torch._scaled_mm`` takes them (so the choice benchmarks against ATen on
# the same inputs): A [M, K // 2] and B [K // 2, N] (the weight's transposed view) as
# float4_e2m1fn_x2 or uint8, A_SCALE, B_SCALE (float8_e4m3fn [rows, K // 16], or flat when
# BLOCKED_SCALES), ALPHA (fp32, one element) and, when HAS_BIAS, BIAS [N]. The template kwargs
# are the constexprs of ``constexprs()``.
_INDUCTOR = common.inductor_frame(
    NAME,
    def_kernel="""\
{{% if HAS_BIAS %}}{{{{def_kernel("A", "B", "A_SCALE", "B_SCALE", "ALPHA", "BIAS")}}}}\
{{% else %}}{{{{def_kernel("A", "B", "A_SCALE", "B_SCALE", "ALPHA")}}}}{{% endif %}}""",
    packed_k='"A", 1',
    scale_strides="""\
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
{{% endif %}}""",
    bias_stand_in="A",
)


def kernel_name(problem: Nvfp4GemmProblem, config: Nvfp4GemmConfig) -> str:
    return "_".join(["ext_nvfp4_gemm", problem.out_dtype, *common.name_parts(problem), config.name()])


def constexprs(problem: Nvfp4GemmProblem, config: Nvfp4GemmConfig) -> dict[str, object]:
    """The tl.constexpr values a launch (or an Inductor template choice) needs."""
    return common.kernel_constexprs(problem, config)


def launch_values(problem: Nvfp4GemmProblem) -> dict[str, int]:
    """The integer launch arguments for contiguous operands (``nvfp4_common.launch_values``)."""
    return common.launch_values(problem, a_packed=True)


def inductor_kwargs(problem: Nvfp4GemmProblem, config: Nvfp4GemmConfig, target: str) -> dict[str, object]:
    """The TritonTemplate kwargs of a choice, as Inductor renders them into source text."""
    return common.inductor_kwargs(constexprs(problem, config))


def render(problem: Nvfp4GemmProblem, config: Nvfp4GemmConfig, target: str = "cpu") -> KernelSource:
    """A standalone Triton module computing ``problem`` with ``config``."""
    common.check_render(NAME, TARGETS, problem, config, target, refuse_problem(problem) or check_config(config, target))
    name = kernel_name(problem, config)
    source = _STANDALONE.format(name=name, body=BODY, epilogue=EPILOGUE)
    return common.kernel_source(NAME, name, source, problem, config, constexprs(problem, config), a_type="*u8")


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

    qa, qb = a.qdata.view(torch.uint8), b.qdata.view(torch.uint8)
    (_, kp), (_, kp2) = qa.shape, qb.shape
    if kp != kp2:
        raise ValueError(f"inner dimensions differ: a is {tuple(qa.shape)}, b is {tuple(qb.shape)} (packed)")
    if alpha is None:
        alpha = float(a.global_scale) * float(b.global_scale)
    return common.run_gemm(render, Nvfp4GemmProblem, qa, a.scales, b, config, alpha=alpha, bias=bias,
                           activation=activation, out_dtype=out_dtype or torch.bfloat16, scale_layout=scale_layout,
                           target=target, use_pdl=use_pdl)


def device_cases(target: str) -> list[device_case.DeviceCase]:
    """The device check's cases: NVFP4 x NVFP4 (blocked scales) on decode and prefill shapes,
    against cuBLASLt's block-scaled ``torch._scaled_mm``."""

    def operands(problem: Problem) -> device_case.DeviceOperands:
        return device_case.nvfp4_operands(problem.m, problem.n, problem.k, lambda q, config, use_pdl: run(
            q.xq, q.wq, config, scale_layout="blocked", target=target, use_pdl=use_pdl))

    return device_case.gemm_cases(example_problem, operands)

FAMILY = Family.of_module(__name__, pdl=True)
