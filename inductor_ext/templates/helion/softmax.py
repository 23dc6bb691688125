"""Helion softmax over the last dimension, bf16/fp16/fp32 in and out, fp32 math. The same Helion
kernel body compiles with Helion's FlyDSL backend for gfx950 (one wave per row; ``v_exp_f32``,
cross-lane max and sum by DPP/``ds_swizzle``) and runs with its Triton backend in Triton's
interpreter on CPU tensors. Tiers and limits as ``helion.rmsnorm``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inductor_ext.targets import amd
from inductor_ext.templates.allowed import one_of, size
from inductor_ext.templates.base import KernelSource
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.helion import common
from inductor_ext.templates.helion.rmsnorm import ALL_CONFIGS, DTYPES, RmsNormConfig as SoftmaxConfig

NAME = "helion.softmax"
# Claimed only where tier I passes (tests/test_helion_templates.py).
TARGETS = ("gfx950",)
OPS = ("softmax",)  # inductor_ext::softmax (the op and pass are being added with the Metal softmax family)
CHOICE_KIND = "extern"
CPU_EXECUTOR = "Helion's Triton backend in the Triton interpreter"  # interpret mode, CPU tensors
KEY_INSTRUCTIONS = amd.key_instructions({"gfx950": ("exp", "rcp", "cross_lane", "max", "store_2b")})


def softmax_body(x):  # noqa: ANN001, ANN201 - a Helion kernel body (torch, hl bound by common)
    m, n = x.size()
    out = torch.empty_like(x)  # noqa: F821
    for tile_m in hl.tile(m):  # noqa: F821
        out[tile_m, :] = torch.nn.functional.softmax(x[tile_m, :].to(torch.float32), dim=-1).to(out.dtype)  # noqa: F821
    return out


@dataclass(frozen=True)
class SoftmaxProblem:
    rows: int = size()
    n: int = size()
    dtype: str = one_of(DTYPES, "bfloat16")


Problem, Config = SoftmaxProblem, SoftmaxConfig


def problem_for(spec: OpSpec) -> SoftmaxProblem | str:
    """``_softmax(input, dim, half_to_float)`` over the last dimension of a contiguous input."""
    if spec.op not in OPS:
        return f"{NAME} serves {OPS}, not {spec.op}"
    x = spec.inputs[0] if spec.inputs else None
    if x is None or x.dtype not in DTYPES or spec.out.dtype != x.dtype:
        return f"{NAME} takes and returns one dtype of {DTYPES}"
    if spec.scalars.get("dim", -1) not in (-1, len(x.shape) - 1):
        return f"{NAME} reduces the last dimension only"
    if not x.is_contiguous:
        return f"{NAME} needs a contiguous input (Helion bakes strides in)"
    rows = 1
    for s in x.shape[:-1]:
        rows *= s
    problem = SoftmaxProblem(rows, x.shape[-1], x.dtype)
    return refuse_problem(problem) or problem


def refuse_problem(problem: SoftmaxProblem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if problem.rows <= 0 or problem.n <= 0:
        return f"empty problem {problem.rows}x{problem.n}"
    return None


def configs(problem: SoftmaxProblem, target: str) -> list[SoftmaxConfig]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    return list(ALL_CONFIGS) if problem.rows >= 4 else [SoftmaxConfig(1)]


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> SoftmaxProblem | str:
    """``inductor-ext asm``'s problem for an MxNxK shape: M rows of N (K unused); or why not."""
    problem = SoftmaxProblem(m, n, dtype or "bfloat16")
    return refuse_problem(problem) or problem


def _args(problem: SoftmaxProblem) -> tuple[Any, ...]:
    return (common.tensor_arg((problem.rows, problem.n), problem.dtype),)


def source(problem: SoftmaxProblem, config: SoftmaxConfig, backend: str) -> str:
    return common.generated_code(softmax_body, backend, config.block_m, _args(problem))


def kernel_name(problem: SoftmaxProblem, config: SoftmaxConfig) -> str:
    return f"helion_softmax_{problem.dtype}_{problem.rows}x{problem.n}_{config.name()}"


def render(problem: SoftmaxProblem, config: SoftmaxConfig, target: str = "gfx950") -> KernelSource:
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem}: {reason}")
    return common.render(NAME, softmax_body, kernel_name(problem, config), config, target, problem.rows, _args(problem))


def isa_many(jobs: list[tuple[SoftmaxProblem, SoftmaxConfig, str]], *, cache: str | None = None) -> list[dict[str, str]]:
    for problem, _, target in jobs:
        if target not in TARGETS or refuse_problem(problem):
            raise ValueError(f"{NAME} does not compile {problem} for {target}")
    return common.flydsl_isa(softmax_body, [(kernel_name(p, c), c.block_m, _args(p)) for p, c, _ in jobs], cache=cache)


def compile_asm(problem: SoftmaxProblem, config: SoftmaxConfig, target: str) -> dict[str, str]:
    """``inductor-ext asm``: the FlyDSL backend's module for ``problem`` compiled for gfx950."""
    return isa_many([(problem, config, target)])[0]


def call(problem: SoftmaxProblem, config: SoftmaxConfig, target: str, x: Any, *rest: Any) -> Any:
    """Softmax of ``x`` over its last dimension: FlyDSL backend on ROCm tensors (tier D), Triton
    backend in the interpreter on CPU tensors (tier C)."""
    return common.run(softmax_body, config.block_m, _args(problem), x.reshape(problem.rows, problem.n)).reshape(x.shape)


FAMILY = Family.of_module(__name__)
