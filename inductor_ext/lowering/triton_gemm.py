"""Offers templates/triton/gemm.py to Inductor's mm/addmm lowerings as autotune choices."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch._inductor import ir
from torch._inductor.kernel.mm_common import addmm_epilogue, mm_args, mm_grid
from torch._inductor.select_algorithm import TritonTemplate

from inductor_ext.lowering import pdl_consumers
from inductor_ext.lowering.prepared import Prepared
from inductor_ext.templates.triton import gemm

FAMILY = gemm.FAMILY
TEMPLATE_MODULE = gemm
OPS = ("mm", "addmm")
TEMPLATE = TritonTemplate(name="ext_gemm", grid=mm_grid, source=gemm.inductor_source())


def _box(node: Any) -> ir.TensorBox:
    return node if isinstance(node, ir.TensorBox) else ir.TensorBox(node)


def prepare(kernel_inputs: Any, op_name: str) -> Prepared | str:
    """The problem for ``kernel_inputs``, or the reason the template cannot serve it."""
    nodes = [_box(n) for n in kernel_inputs.nodes()]
    if op_name == "mm":
        m, n, k, layout, mat1, mat2 = mm_args(*nodes)
        inputs, extra = (mat1, mat2), {}
    else:  # addmm: bias first; Inductor's epilogue applies beta * bias + alpha * acc
        m, n, k, layout, mat1, mat2, bias = mm_args(nodes[1], nodes[2], nodes[0])
        alpha, beta = kernel_inputs.get_scalar("alpha"), kernel_inputs.get_scalar("beta")
        inputs = (bias, mat1, mat2)
        extra = {"prefix_args": 1, "epilogue_fn": addmm_epilogue(layout.dtype, alpha, beta),
                 "epilogue_fn_hash": f"addmm_{alpha}_{beta}"}
    if not all(getattr(x, "is_number", True) for x in (m, n, k)):
        return "dynamic shapes are not supported yet"
    problem = gemm.GemmProblem(int(m), int(n), int(k), str(mat1.get_dtype()).removeprefix("torch."),
                               str(layout.dtype).removeprefix("torch."))
    return gemm.supports(problem) or Prepared(problem, inputs, layout, extra)


def append(choices: list[Any], prepared: Prepared, config: gemm.GemmConfig, target: str) -> Any | None:
    """Append the choice for ``config``; returns it, or None when Inductor could not generate it."""
    kwargs: dict[str, Any] = gemm.constexprs(prepared.problem, config, target)
    # Inductor renders template kwargs as source text: strings need quotes, dtypes do not.
    kwargs["INPUT_PRECISION"] = repr(kwargs["INPUT_PRECISION"])
    kwargs["ACC_TYPE"] = gemm.acc_type(prepared.problem)
    before = len(choices)
    TEMPLATE.maybe_append_choice(choices, input_nodes=prepared.inputs, layout=prepared.layout,
                                 num_stages=config.num_stages, num_warps=config.num_warps,
                                 **pdl_consumers.template_launch_kwargs(prepared.problem),
                                 **prepared.extra, **kwargs)
    return choices[-1] if len(choices) > before else None


def config_to_dict(config: gemm.GemmConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_from_dict(data: dict[str, Any]) -> gemm.GemmConfig:
    return gemm.GemmConfig(**data)
