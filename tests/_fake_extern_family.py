"""A minimal "extern" template family for tests: C = A @ B computed by torch on CPU tensors,
following templates/family.py, so the generic extern adapter can be checked end to end."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inductor_ext.runtime.kernel_source import KernelSource
from inductor_ext.templates.allowed import flag, integer, number, size
from inductor_ext.templates.family import Family, OpSpec

NAME = "fake.mm"
TARGETS = ("cpu",)
OPS = ("mm", "addmm", "grouped_mm")
CHOICE_KIND = "extern"
RUNS_ON_CPU = True
calls: list[tuple] = []


@dataclass(frozen=True)
class Problem:
    m: int = size()
    n: int = size()
    k: int = size()
    addmm: bool = flag(False)
    alpha: float = number(1.0)
    beta: float = number(1.0)
    groups: int = integer(0, low=0)  # grouped_mm: mat_a [M, K] rows split by offs over G weights [G, K, N]


@dataclass(frozen=True)
class Config:
    split: int = integer(1, low=1, high=2)

    def name(self) -> str:
        return f"s{self.split}"


ALL_CONFIGS = (Config(1), Config(2))


def problem_for(spec: OpSpec) -> Problem | str:
    if spec.op == "grouped_mm":
        a, b, offs, bias = spec.inputs
        if offs is None or len(a.shape) != 2 or len(b.shape) != 3:
            return "only 2-D x 3-D grouped_mm with offs"
        return Problem(a.shape[0], b.shape[2], a.shape[1], groups=b.shape[0])
    a, b = spec.inputs[-2:]
    if a.dtype != "float32":
        return f"{NAME} serves float32 only, not {a.dtype}"
    return Problem(a.shape[0], b.shape[1], a.shape[1], spec.op == "addmm",
                   float(spec.scalars.get("alpha", 1.0)), float(spec.scalars.get("beta", 1.0)))


def refuse_problem(problem: Problem) -> str | None:
    return None


def configs(problem: Problem, target: str) -> list[Config]:
    return list(ALL_CONFIGS)


def render(problem: Problem, config: Config, target: str) -> KernelSource:
    return KernelSource(name=f"fake_mm_{config.name()}", source="# computed by torch", template=NAME,
                        config={"split": config.split}, language="python")


def call(problem: Problem, config: Config, target: str, *tensors: torch.Tensor) -> torch.Tensor:
    calls.append((problem, config, target))
    if problem.groups:
        a, b, offs = tensors
        return torch._grouped_mm(a, b, offs=offs)
    a, b = tensors[-2:]
    # split K in `split` parts: a different summation order, same math
    parts = torch.chunk(torch.arange(problem.k), config.split)
    out = sum(a[:, p] @ b[p, :] for p in parts)
    if problem.addmm:
        out = problem.beta * tensors[0] + problem.alpha * out
    return out


FAMILY = Family(
    name=NAME, choice_kind=CHOICE_KIND, ops=OPS, targets=TARGETS, Problem=Problem, Config=Config,
    problem_for=problem_for, refuse_problem=refuse_problem, configs=configs, render=render, call=call, all_configs=ALL_CONFIGS,
    runs_on_cpu=RUNS_ON_CPU, module=__name__)
