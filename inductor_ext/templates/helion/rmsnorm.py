"""Helion RMSNorm: ``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last dimension, bf16/fp16/fp32,
fp32 math, one rounding. One Helion kernel body (:func:`rmsnorm_body`); on gfx950 it is compiled
with Helion's FlyDSL backend (one wave per row, cross-lane reductions by DPP/``ds_swizzle``), and on
CPU tensors it runs with Helion's Triton backend in Triton's interpreter.

Tiers: G (the FlyDSL and Triton sources Helion generates), I (the FlyDSL code compiled for gfx950,
``v_sqrt_f32``/``v_rsq_f32``, ``v_rcp_f32`` and the cross-lane ``ds_swizzle_b32`` asserted), C (the
Triton backend in the interpreter vs ``kernels.norms.rms_norm_reference``). D: ``call`` on a gfx950.

Where Helion does not serve: its FlyDSL backend loads one element per lane (no 16-byte loads yet),
generates wave64 code only (no gfx1250), and has no lowering for matmul or topk (``aten.addmm`` /
``aten.topk``: "Aten lowering codegen not registered").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inductor_ext.targets import amd
from inductor_ext.templates.allowed import integer, number, one_of, size
from inductor_ext.templates.base import KernelSource
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.helion import common

NAME = "helion.rmsnorm"
# Claimed only where tier I passes (tests/test_helion_templates.py).
TARGETS = ("gfx950",)
OPS = ("rms_norm",)  # inductor_ext::rms_norm (lowering/ops/rms_norm.py), what the rms_norm_op pass makes of F.rms_norm
CHOICE_KIND = "extern"
CPU_EXECUTOR = "Helion's Triton backend in the Triton interpreter"  # interpret mode, CPU tensors
DTYPES = ("bfloat16", "float16", "float32")
DEFAULT_EPS = 2.0**-23  # torch.rms_norm's eps when none is given: fp32's epsilon (its math dtype) for DTYPES
KEY_INSTRUCTIONS = amd.key_instructions({"gfx950": ("sqrt", "rcp", "cross_lane", "global_load_2b", "store_2b")})


def rmsnorm_body(x, w, eps):  # noqa: ANN001, ANN201 - a Helion kernel body (torch, hl bound by common)
    m, n = x.size()
    out = torch.empty_like(x)  # noqa: F821
    for tile_m in hl.tile(m):  # noqa: F821
        row = x[tile_m, :].to(torch.float32)  # noqa: F821
        var = torch.mean(row * row, dim=-1, keepdim=True)  # noqa: F821
        out[tile_m, :] = (row * torch.rsqrt(var + eps) * w[:].to(torch.float32)).to(out.dtype)  # noqa: F821
    return out


@dataclass(frozen=True)
class RmsNormProblem:
    rows: int = size()  # the leading dimensions, flattened
    n: int = size()  # the normalized (last) dimension
    dtype: str = one_of(DTYPES, "bfloat16")
    eps: float = number(1e-6, low=0.0)


@dataclass(frozen=True)
class RmsNormConfig:
    block_m: int = integer(1, low=1, high=1024)  # rows per program (one wave each)

    def name(self) -> str:
        return f"bm{self.block_m}"


Problem, Config = RmsNormProblem, RmsNormConfig
ALL_CONFIGS = (RmsNormConfig(1), RmsNormConfig(4))


def problem_for(spec: OpSpec) -> RmsNormProblem | str:
    """``rms_norm(input, normalized_shape, weight, eps)``: inputs (input, weight)."""
    if spec.op not in OPS:
        return f"{NAME} serves {OPS}, not {spec.op}"
    x, w = (*spec.inputs, None)[:2]
    if x is None or x.dtype not in DTYPES:
        return f"{NAME} takes an input in {DTYPES}"
    normalized = tuple(spec.scalars.get("normalized_shape", x.shape[-1:]))
    if normalized != tuple(x.shape[-1:]):
        return f"{NAME} normalizes the last dimension only, got normalized_shape {normalized}"
    if not x.is_contiguous or (w is not None and (w.dtype != x.dtype or not w.is_contiguous)):
        return f"{NAME} needs a contiguous input and weight of the input's dtype (Helion bakes strides in)"
    rows = 1
    for s in x.shape[:-1]:
        rows *= s
    eps = spec.scalars.get("eps")
    problem = RmsNormProblem(rows, x.shape[-1], x.dtype, DEFAULT_EPS if eps is None else float(eps))
    return refuse_problem(problem) or problem


def refuse_problem(problem: RmsNormProblem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if problem.rows <= 0 or problem.n <= 0:
        return f"empty problem {problem.rows}x{problem.n}"
    return None


def configs(problem: RmsNormProblem, target: str) -> list[RmsNormConfig]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    return list(ALL_CONFIGS) if problem.rows >= 4 else [RmsNormConfig(1)]


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> RmsNormProblem | str:
    """``inductor-ext asm``'s problem for an MxNxK shape: M rows of N (K unused); or why not."""
    problem = RmsNormProblem(m, n, dtype or "bfloat16")
    return refuse_problem(problem) or problem


def _args(problem: RmsNormProblem) -> tuple[Any, ...]:
    return (common.tensor_arg((problem.rows, problem.n), problem.dtype), common.tensor_arg((problem.n,), problem.dtype),
            problem.eps)


def source(problem: RmsNormProblem, config: RmsNormConfig, backend: str) -> str:
    """The module Helion generates for ``problem`` with ``backend`` ("flydsl" or "triton")."""
    return common.generated_code(rmsnorm_body, backend, config.block_m, _args(problem))


def kernel_name(problem: RmsNormProblem, config: RmsNormConfig) -> str:
    return f"helion_rmsnorm_{problem.dtype}_{problem.rows}x{problem.n}_{config.name()}"


def render(problem: RmsNormProblem, config: RmsNormConfig, target: str = "gfx950") -> KernelSource:
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem}: {reason}")
    return common.render(NAME, rmsnorm_body, kernel_name(problem, config), config, target, problem.rows, _args(problem))


def isa_many(jobs: list[tuple[RmsNormProblem, RmsNormConfig, str]], *, cache: str | None = None) -> list[dict[str, str]]:
    """The FlyDSL backend's code compiled for gfx950 (``amdgcn``, ``hsaco_b64``, ``metadata``)."""
    for problem, _, target in jobs:
        if target not in TARGETS or refuse_problem(problem):
            raise ValueError(f"{NAME} does not compile {problem} for {target}")
    return common.flydsl_isa(rmsnorm_body, [(kernel_name(p, c), c.block_m, _args(p)) for p, c, _ in jobs], cache=cache)


def compile_asm(problem: RmsNormProblem, config: RmsNormConfig, target: str) -> dict[str, str]:
    """``inductor-ext asm``: the FlyDSL backend's module for ``problem`` compiled for gfx950."""
    return isa_many([(problem, config, target)])[0]


def call(problem: RmsNormProblem, config: RmsNormConfig, target: str, x: Any, weight: Any = None) -> Any:
    """RMSNorm of ``x`` (any leading shape): the FlyDSL backend's kernel on ROCm tensors (tier D),
    the Triton backend's in Triton's interpreter on CPU tensors (tier C)."""
    import torch

    w = weight if weight is not None else torch.ones(problem.n, dtype=x.dtype, device=x.device)
    out = common.run(rmsnorm_body, config.block_m, _args(problem), x.reshape(problem.rows, problem.n), w, problem.eps)
    return out.reshape(x.shape)


FAMILY = Family.of_module(__name__)
