"""A small non-GEMM template family that claims an NVIDIA target (sm_90a), for tests only: it
serves ``rms_norm`` (``inductor_ext::rms_norm``, made by the ``rms_norm_op`` pass) by computing
the reference in torch. Its Problem has rows and columns, no m, n, k, and it declares no
``config_from_tile``: the GEMM tile policies must leave it alone (they used to read
``problem.m`` of every family on an NVIDIA target)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inductor_ext.kernels.norms import rms_norm_reference
from inductor_ext.runtime.kernel_source import KernelSource
from inductor_ext.templates.allowed import flag, integer, number, one_of, size
from inductor_ext.templates.device_case import DeviceCase, DeviceOperands
from inductor_ext.templates.family import Family, OpSpec

NAME = "fake.rms_norm_rows"
TARGETS = ("sm_90a",)
OPS = ("rms_norm",)
CHOICE_KIND = "extern"
CPU_EXECUTOR = "torch (a test family: the reference computes it)"
calls: list[tuple] = []


@dataclass(frozen=True)
class Problem:
    rows: int = size()
    cols: int = size()
    eps: float = number(1e-6)
    weight: bool = flag(True)
    dtype: str = one_of(("float32", "bfloat16", "float16"), default="float32")


@dataclass(frozen=True)
class Config:
    rows_per_program: int = integer(1, low=1, high=4)

    def name(self) -> str:
        return f"r{self.rows_per_program}"


ALL_CONFIGS = (Config(1), Config(4))


def problem_for(spec: OpSpec) -> Problem | str:
    x, w = spec.inputs
    if list(spec.scalars["normalized_shape"]) != [x.shape[-1]]:
        return "normalizes the last dim only"
    rows = 1
    for d in x.shape[:-1]:
        rows *= d
    return Problem(rows, x.shape[-1], float(spec.scalars["eps"]), w is not None, x.dtype)


def refuse_problem(problem: Problem) -> str | None:
    return None


def configs(problem: Problem, target: str) -> list[Config]:
    return list(ALL_CONFIGS)


def render(problem: Problem, config: Config, target: str) -> KernelSource:
    return KernelSource(name=f"fake_rms_norm_rows_{config.name()}", source="# computed by torch", template=NAME,
                        config={"rows_per_program": config.rows_per_program}, language="python")


def call(problem: Problem, config: Config, target: str, *tensors: torch.Tensor) -> torch.Tensor:
    calls.append((problem, config, target))
    x, *rest = tensors
    weight = rest[0] if problem.weight else None
    return rms_norm_reference(x, weight, problem.eps).to(x.dtype)


def device_cases(target: str) -> list[DeviceCase]:
    """One row-wise case for the device check (``bench/device_check.py``), against ATen's rms_norm."""

    def operands(problem: Problem) -> DeviceOperands:
        torch.manual_seed(0)
        x = torch.randn(problem.rows, problem.cols, device="cuda")
        w = torch.randn(problem.cols, device="cuda")
        return DeviceOperands(lambda config, use_pdl: call(problem, config, target, x, w),
                              rms_norm_reference(x.double(), w.double(), problem.eps),
                              lambda: torch.rms_norm(x, [problem.cols], w, problem.eps))

    problem = Problem(4096, 4096)
    return [DeviceCase("rows 4096x4096", problem, lambda: operands(problem))]


FAMILY = Family(
    name=NAME, choice_kind=CHOICE_KIND, ops=OPS, targets=TARGETS, Problem=Problem, Config=Config,
    problem_for=problem_for, refuse_problem=refuse_problem, configs=configs, render=render, call=call, all_configs=ALL_CONFIGS,
    cpu_executor=CPU_EXECUTOR, device_cases=device_cases, module=__name__)
