"""An extern ``mm`` family for sm_90a: ``triton.gemm``'s kernel called from the wrapper with two
fixed big-tile configs (no epilogue fusion, no tile policies). A second family for an existing op,
made to check that it is one new file (issue 48); it reuses ``triton.gemm``'s problem, kernel and
device cases."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inductor_ext.templates import device_case
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.triton import gemm

if TYPE_CHECKING:
    import torch

NAME = "triton.mm_extern"
TARGETS = ("sm_90a",)
OPS = ("mm",)
Problem, Config = gemm.GemmProblem, gemm.GemmConfig
ALL_CONFIGS = (Config(128, 128, 64, 8, 8, 3), Config(64, 64, 64, 8, 4, 3))


def problem_for(spec: OpSpec) -> Problem | str:
    return gemm.problem_for(spec) if spec.op in OPS else f"{NAME} serves mm, not {spec.op}"


def configs(problem: Problem, target: str) -> list[Config]:
    return list(ALL_CONFIGS)


def call(problem: Problem, config: Config, target: str, a: "torch.Tensor", b: "torch.Tensor") -> "torch.Tensor":
    return gemm.run(a, b, config, target=target, allow_tf32=problem.allow_tf32)


def device_cases(target: str) -> list[device_case.DeviceCase]:
    def operands(problem: Problem) -> device_case.DeviceOperands:
        from inductor_ext.kernels import matmul

        x, w = device_case.gemm_inputs(problem.m, problem.n, problem.k)
        a, b = x.bfloat16(), w.t().contiguous().bfloat16()
        return device_case.DeviceOperands(lambda config, use_pdl: call(problem, config, target, a, b),
                                          matmul.mm_reference(a.double(), b.double()), lambda: gemm.torch_mm(a, b))

    return device_case.gemm_cases(lambda m, n, k: Problem(m, n, k, "bfloat16"), operands)


FAMILY = Family(
    name=NAME, choice_kind="extern", ops=OPS, targets=TARGETS, Problem=Problem, Config=Config,
    problem_for=problem_for, supports=gemm.supports, configs=configs, render=gemm.render, call=call,
    all_configs=ALL_CONFIGS, cpu_executor="the Triton interpreter", launch_values=gemm.launch_values,
    device_cases=device_cases, module=__name__)
