"""``addmm``: Inductor's own lowering asks ext's choices for it, so this module holds only its
glue, with the extra TritonTemplate arguments its bias epilogue needs.

OpSpec.inputs: (bias, A, B); scalars ``alpha``, ``beta``, ``fp32_precision``.
"""

from __future__ import annotations

from typing import Any

from torch._inductor.kernel.mm_common import addmm_epilogue, mm_args

from inductor_ext.lowering.ops._spec import OpInputs, box, fp32_matmul_precision, spec


def addmm(kernel_inputs: Any) -> OpInputs | str:
    nodes = [box(n) for n in kernel_inputs.nodes()]
    m, n, k, layout, mat1, mat2, bias = mm_args(nodes[1], nodes[2], nodes[0])
    alpha, beta = kernel_inputs.get_scalar("alpha"), kernel_inputs.get_scalar("beta")
    op_spec = spec("addmm", (bias, mat1, mat2), layout, kernel_inputs.device_type,
                   {"alpha": alpha, "beta": beta, "fp32_precision": fp32_matmul_precision()})
    # Inductor's epilogue applies beta * bias + alpha * acc, the bias being a prefix input.
    extra = {"prefix_args": 1, "epilogue_fn": addmm_epilogue(layout.dtype, alpha, beta),
             "epilogue_fn_hash": f"addmm_{alpha}_{beta}"}
    return OpInputs(op_spec, (bias, mat1, mat2), layout, extra)


SPECS = {"addmm": addmm}
