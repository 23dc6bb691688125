"""Offers templates/triton/gemm.py to Inductor's mm/addmm lowerings as autotune choices."""

from __future__ import annotations

from typing import Any

from torch._inductor import ir
from torch._inductor.kernel.mm_common import addmm_epilogue, mm_args, mm_grid
from torch._inductor.select_algorithm import TritonTemplate

from inductor_ext.config import ExtConfig
from inductor_ext.templates.triton import gemm

FAMILY = gemm.FAMILY
TEMPLATE = TritonTemplate(name="ext_gemm", grid=mm_grid, source=gemm.inductor_source())


def _box(node: Any) -> ir.TensorBox:
    return node if isinstance(node, ir.TensorBox) else ir.TensorBox(node)


def append_choices(choices: list[Any], kernel_inputs: Any, op_name: str, config: ExtConfig) -> tuple[str | None, dict[str, Any]]:
    """Append one choice per config; returns (reason when none was offered, problem description)."""
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
    dtype = str(mat1.get_dtype()).removeprefix("torch.")
    problem_info = {"op": op_name, "m": m, "n": n, "k": k, "dtype": dtype}
    if not all(isinstance(x, int) or getattr(x, "is_integer", False) and x.is_number for x in (m, n, k)):
        return "dynamic shapes are not supported yet", problem_info
    problem = gemm.GemmProblem(int(m), int(n), int(k), dtype, str(layout.dtype).removeprefix("torch."))
    reason = gemm.supports(problem)
    if reason:
        return reason, problem_info
    offered = 0
    for cfg in gemm.configs(problem, config.target):
        kwargs = gemm.constexprs(problem, cfg, config.target)
        # Inductor renders template kwargs as source text: strings need quotes, dtypes do not.
        kwargs["INPUT_PRECISION"] = repr(kwargs["INPUT_PRECISION"])
        kwargs["ACC_TYPE"] = gemm.acc_type(problem)
        err = TEMPLATE.maybe_append_choice(choices, input_nodes=inputs, layout=layout,
                                           num_stages=cfg.num_stages, num_warps=cfg.num_warps, **extra, **kwargs)
        offered += err is None
    return (None if offered else "no config could be generated"), problem_info
