"""An "extern" template family for tests whose every candidate fails while benchmarked: its
``render`` raises, as a family's render does for a problem it cannot serve, before any kernel
runs. It follows templates/family.py in full, so lowering offers it like any file in templates/."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inductor_ext.runtime.kernel_source import KernelSource
from inductor_ext.templates.allowed import integer, size
from inductor_ext.templates.family import Family, OpSpec

NAME = "fake.broken"
TARGETS = ("cpu",)
OPS = ("mm", "addmm")
CHOICE_KIND = "extern"
RUNS_ON_CPU = True
calls: list = []  # every config call() was asked to run


@dataclass(frozen=True)
class Problem:
    m: int = size()
    n: int = size()
    k: int = size()


@dataclass(frozen=True)
class Config:
    tile: int = integer(16, low=16, high=32)

    def name(self) -> str:
        return f"t{self.tile}"


ALL_CONFIGS = (Config(16), Config(32))


def problem_for(spec: OpSpec) -> Problem | str:
    a, b = spec.inputs[-2:]
    return Problem(a.shape[0], b.shape[1], a.shape[1])


def refuse_problem(problem: Problem) -> str | None:
    return None


def configs(problem: Problem, target: str) -> list[Config]:
    return list(ALL_CONFIGS)


def render(problem: Problem, config: Config, target: str) -> KernelSource:
    raise ValueError(f"{NAME} cannot render {config.name()} (on purpose)")


def call(problem: Problem, config: Config, target: str, *tensors: torch.Tensor) -> torch.Tensor:
    calls.append(config)
    render(problem, config, target)
    raise AssertionError("unreachable: render raised")


FAMILY = Family(
    name=NAME, choice_kind=CHOICE_KIND, ops=OPS, targets=TARGETS, Problem=Problem, Config=Config,
    problem_for=problem_for, refuse_problem=refuse_problem, configs=configs, render=render, call=call, all_configs=ALL_CONFIGS,
    runs_on_cpu=RUNS_ON_CPU, module=__name__)
