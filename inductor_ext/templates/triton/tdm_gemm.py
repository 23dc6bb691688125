"""Triton GEMM on gfx1250 (MI450) whose A and B tiles arrive by the Tensor Data Mover:
``tl.make_tensor_descriptor`` + ``desc.load`` compile to ``tensor_load_to_lds`` / ``s_wait_tensorcnt``
on gfx1250 (Triton 3.9), software-pipelined over ``num_stages``, feeding ``v_wmma``.

- ``mm`` / ``addmm``: bf16 / fp16 in, same dtype out, fp32 accumulation (``v_wmma_f32_16x16x32_*``);
- ``scaled_mm`` (``aten._scaled_mm``) with fp8 e4m3 operands and fp32 tensor-wise or row-wise scales:
  out = (A @ B) * scale_a * scale_b (+ bias), on ``v_wmma_f32_16x16x128_fp8_fp8``.

Layout ``x @ W.T``: A (M, K) and B (K, N) both contiguous along K (B is the transpose of a (N, K)
weight, what ``_scaled_mm`` requires too), rows 16-byte aligned (a descriptor's rule). The
descriptors zero-fill out-of-bounds rows and K tails, so no shape restriction beyond that.

Like ``triton.gemm`` (whose program tile, configs, tiles and launch helpers this reuses), one body
and two frames: ``render()`` (a standalone module: golden, ISA, interpreter) and
``inductor_source()`` (Inductor's template macros, epilogue fusion). Claimed for gfx1250 only: on
gfx950 the descriptors lower to one-element buffer loads (measured), where ``triton.gemm`` is right.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from inductor_ext.targets import amd
from inductor_ext.templates.base import KernelSource
from inductor_ext.templates import linear
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.triton import gemm
from inductor_ext.templates.triton.gemm import GemmConfig
from inductor_ext.templates.triton.launch import FP, PROGRAM_TILE, launch, launch_options

if TYPE_CHECKING:  # annotations only: the module itself never imports torch at load
    import torch

NAME = "triton.tdm_gemm"
# Claimed only where tier I passes (tests/test_triton_tdm_gemm.py); the interpreter runs it on CPU
# tensors in interpret mode (tier C) under the gfx1250 preset.
TARGETS = ("gfx1250",)
OPS = linear.OPS
CHOICE_KIND = "triton_template"
CPU_EXECUTOR = "the Triton interpreter"  # how interpret mode runs it on CPU tensors

DTYPES, FP8_OUT_DTYPES = linear.DTYPES, linear.FP8_OUT_DTYPES
SCALINGS = {"none": 0, "tensor": 1, "row": 2}
_FP = {**FP, "float8_e4m3fn": "fp8e4nv"}

TdmGemmProblem = linear.LinearProblem
TdmGemmConfig = GemmConfig
Problem, Config = TdmGemmProblem, TdmGemmConfig


def config_from_tile(tile: Any) -> GemmConfig | None:
    """A policy's tile as this template's config; None for split-K and swap-AB tiles (this
    template has no swap-AB body)."""
    return None if getattr(tile, "swap_ab", False) else gemm.config_from_tile(tile)


def refuse_config(problem: TdmGemmProblem, config: GemmConfig, target: str) -> str | None:
    """A swap-AB config (triton.gemm's decode body, e.g. from a shared cache entry) is refused:
    rendered here it would run the plain body under the swapped config's name."""
    return "triton.tdm_gemm has no swap-AB body (swap_ab=True)" if config.swap_ab else None


KEY_INSTRUCTIONS = amd.key_instructions({"gfx1250": ("tdm_load", "tdm_wait", "wmma_bf16")})


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> TdmGemmProblem | str:
    """``inductor-ext asm``'s problem: ``x @ W.T`` (this family's layout), bf16 or fp8 scaled."""
    problem = linear.example_problem(m, n, k, dtype)
    return refuse_problem(problem) or problem


def refuse_problem(problem: TdmGemmProblem) -> str | None:
    reason = linear.dtype_reason(problem)
    if reason:
        return reason
    if problem.k * linear.ELEM_BYTES[problem.dtype] % 16:
        return f"K={problem.k}: rows of {problem.dtype} must be a multiple of 16 bytes for tensor descriptors"
    return None


def problem_for(spec: OpSpec) -> TdmGemmProblem | str:
    """The problem for an ``mm`` / ``addmm`` / ``scaled_mm`` OpSpec, or why not served."""
    problem = linear.linear_problem(spec, NAME)
    return problem if isinstance(problem, str) else refuse_problem(problem) or problem


# Candidates, best first: 4 or 8 waves, 2-3 stages of TDM prefetch (LDS is 320 KB on gfx1250).
_CONFIGS_16 = (GemmConfig(128, 128, 64, 8, 4, 3), GemmConfig(128, 64, 64, 8, 4, 2), GemmConfig(64, 64, 64, 8, 4, 2),
               GemmConfig(16, 128, 128, 8, 4, 2))
_CONFIGS_8 = (GemmConfig(128, 128, 128, 8, 4, 3), GemmConfig(64, 64, 128, 8, 4, 2), GemmConfig(16, 128, 256, 8, 4, 2))
# The interpreter runs one program at a time in numpy: few big tiles are fastest there.
INTERPRETER_CONFIGS = (GemmConfig(32, 32, 32, 8, 4, 1), GemmConfig(16, 64, 64, 8, 4, 1))


def configs(problem: TdmGemmProblem, target: str) -> list[GemmConfig]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    table = _CONFIGS_8 if problem.dtype == "float8_e4m3fn" else _CONFIGS_16
    fitting = [c for c in table if c.block_m <= max(16, 2 * problem.m) and c.block_n <= max(16, 2 * problem.n)]
    return fitting or [min(table, key=lambda c: c.block_m * c.block_n)]


# The shared body: ints M, N, K, stride_am, stride_bn; constexprs BLOCK_M/N/K, GROUP_M, ACC_TYPE.
# Leaves: acc, idx_m, idx_n, mask. A and B are read through descriptors over their (rows, K)
# storage: out-of-bounds rows and the K tail read as zeros.
BODY = PROGRAM_TILE + """\
    a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(B, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k_tile in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k_tile * BLOCK_K])
        b = b_desc.load([pid_n * BLOCK_N, k_tile * BLOCK_K])
        acc = tl.dot(a, b.T, acc, out_dtype=ACC_TYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
"""

_STANDALONE = """\
import triton
import triton.language as tl

ACC_TYPE = tl.constexpr(tl.float32)


@triton.jit
def {name}(
    A, B, C, BIAS, SA, SB, M, N, K,
    stride_am, stride_bn, stride_cm, stride_cn, stride_bias, stride_sa, stride_sb, alpha, beta,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, SCALING: tl.constexpr,
):
{body}\
    if SCALING == 1:  # _scaled_mm, tensor-wise fp32 scales
        acc = acc * tl.load(SA) * tl.load(SB)
    if SCALING == 2:  # row-wise: scale_a [M, 1], scale_b [1, N]
        acc = acc * tl.load(SA + idx_m * stride_sa, mask=idx_m < M, other=0.0) \\
            * tl.load(SB + idx_n * stride_sb, mask=idx_n < N, other=0.0)
    if HAS_BIAS:
        bias = tl.load(BIAS + idx_n * stride_bias, mask=idx_n < N, other=0.0).to(ACC_TYPE)
        if SCALING == 0:  # addmm: beta * bias + alpha * (A @ B)
            acc = acc * alpha + bias * beta
        else:  # _scaled_mm: + bias
            acc = acc + bias
    tl.store(C + idx_m * stride_cm + idx_n * stride_cn, acc.to(C.dtype.element_ty), mask=mask)
"""

# Inductor's frame, one template for every op it serves. SCALING (a constexpr kwarg, which jinja
# sees too) is 0 for mm / addmm, whose bias is Inductor's epilogue (a prefix input, lowering/ops/addmm.py); 1 / 2
# for scaled_mm with tensor- / row-wise fp32 scales. scaled_mm names all its inputs (A, B, SA, SB[,
# BIAS]): the scales and its bias apply to the fp32 accumulator before any fused epilogue, as ATen
# applies them before rounding.
_INDUCTOR = """\
{{% if SCALING and HAS_BIAS %}}{{{{def_kernel("A", "B", "SA", "SB", "BIAS")}}}}{{% elif SCALING %}}\
{{{{def_kernel("A", "B", "SA", "SB")}}}}{{% else %}}{{{{def_kernel("A", "B")}}}}{{% endif %}}
    # inductor_ext template: triton.tdm_gemm
    M = {{{{size("A", 0)}}}}
    N = {{{{size("B", 1)}}}}
    K = {{{{size("A", 1)}}}}
    if M * N == 0:
        return
    stride_am = {{{{stride("A", 0)}}}}
    stride_bn = {{{{stride("B", 1)}}}}
{body}\
{{% if SCALING == 1 %}}
    acc = acc * tl.load(SA) * tl.load(SB)
{{% elif SCALING == 2 %}}
    acc = acc * tl.load(SA + idx_m * {{{{stride("SA", 0)}}}}, mask=idx_m < M, other=0.0) \\
        * tl.load(SB + idx_n * {{{{stride("SB", 1)}}}}, mask=idx_n < N, other=0.0)
{{% endif %}}
{{% if HAS_BIAS %}}
    acc = acc + tl.load(BIAS + idx_n * {{{{stride("BIAS", 0)}}}}, mask=idx_n < N, other=0.0).to(ACC_TYPE)
{{% endif %}}
    {{{{store_output(("idx_m", "idx_n"), "acc", "mask", val_shape=("BLOCK_M", "BLOCK_N"))}}}}
"""


def kernel_name(problem: TdmGemmProblem, config: GemmConfig) -> str:
    scale = "" if problem.scaling == "none" else f"_{problem.scaling}scaled"
    return f"ext_tdm_gemm_{problem.dtype}{scale}{'_bias' if problem.bias else ''}_{config.name()}"


def constexprs(problem: TdmGemmProblem, config: GemmConfig, target: str = "gfx1250") -> dict[str, object]:
    """The tl.constexpr values a launch (or an Inductor template choice) needs."""
    return {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
            "GROUP_M": config.group_m}


def render(problem: TdmGemmProblem, config: GemmConfig, target: str = "gfx1250") -> KernelSource:
    """A standalone Triton module computing ``problem`` with ``config``."""
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem}: {reason}")
    name = kernel_name(problem, config)
    consts = {**constexprs(problem, config, target), "HAS_BIAS": problem.bias,
              "SCALING": SCALINGS[problem.scaling]}
    ptr, out = f"*{_FP[problem.dtype]}", f"*{FP[problem.out_dtype]}"
    signature = {
        "A": ptr, "B": ptr, "C": out, "BIAS": out, "SA": "*fp32", "SB": "*fp32",
        **{s: "i32" for s in ("M", "N", "K", "stride_am", "stride_bn", "stride_cm", "stride_cn", "stride_bias",
                              "stride_sa", "stride_sb")},
        "alpha": "fp32", "beta": "fp32", **{c: "constexpr" for c in consts},
    }
    return KernelSource(name=name, source=_STANDALONE.format(name=name, body=BODY), template=NAME,
                        config=asdict(config), constexprs=consts, signature=signature,
                        launch=launch_options(problem, config))


def inductor_source() -> str:
    """The template text for Inductor's TritonTemplate: the shared body in Inductor's macros, for
    mm / addmm and scaled_mm alike (``SCALING`` picks the inputs and the scale step)."""
    return _INDUCTOR.format(body=BODY)


def inductor_kwargs(problem: TdmGemmProblem, config: GemmConfig, target: str) -> dict[str, object]:
    """The TritonTemplate kwargs of a choice (constexprs, as Inductor renders them into source)."""
    scaled = problem.scaling != "none"
    return {**constexprs(problem, config, target), "SCALING": SCALINGS[problem.scaling],
            "HAS_BIAS": scaled and problem.bias, "ACC_TYPE": "tl.float32"}


def run(problem: TdmGemmProblem, config: GemmConfig, target: str, *tensors: Any) -> "torch.Tensor":
    """Render, load and launch (the interpreter on CPU tensors, or a gfx1250 GPU). ``tensors`` in the
    op's order: (A, B) for mm, (bias, A, B) for addmm, (A, B, scale_a, scale_b[, bias]) for scaled_mm."""
    import torch

    a, b, bias, sa, sb = linear.unpack_tensors(problem, tensors, NAME)
    if a.stride(1) != 1 or b.stride(0) != 1:
        raise ValueError(f"{NAME} needs A and B contiguous along K; got strides {a.stride()}, {b.stride()}")
    m, n, k = problem.m, problem.n, problem.k
    ks = render(problem, config, target)
    c = torch.empty((m, n), dtype=getattr(torch, problem.out_dtype), device=a.device)
    ones = torch.ones(1, dtype=torch.float32, device=a.device)
    sa, sb = (sa if sa is not None else ones), (sb if sb is not None else ones)
    launch(ks, config, m, n,
           a, b, c, bias if bias is not None else c, sa, sb, m, n, k,
           a.stride(0), b.stride(1), c.stride(0), c.stride(1), bias.stride(-1) if bias is not None else 0,
           sa.stride(0) if sa.numel() > 1 else 0, sb.stride(-1) if sb.numel() > 1 else 0,
           problem.alpha, problem.beta)
    return c


__all__ = ["NAME", "FAMILY", "TARGETS", "OPS", "CHOICE_KIND", "CPU_EXECUTOR", "Problem", "Config", "TdmGemmProblem",
           "TdmGemmConfig", "KEY_INSTRUCTIONS", "problem_for", "refuse_problem", "refuse_config", "configs", "config_from_tile", "constexprs",
           "example_problem",
           "render", "inductor_source", "inductor_kwargs", "run"]


FAMILY = Family.of_module(__name__)
