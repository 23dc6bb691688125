"""``nvfp4_gemm``: lowers ``inductor_ext::nvfp4_gemm`` (made by the nvfp4_alpha_fold pass) to an
autotuned choice: the unfused ATen path (``_scaled_mm`` then the epilogue) or the template
families that serve the ``nvfp4_gemm`` op (Triton's block16 MMA and on-chip dequant, CuTeDSL's
quack GEMM).

The families read the operands as ``_scaled_mm`` had them: fp4 codes, and e4m3 scales in
cuBLAS's blocked layout, read in place (no un-swizzle kernel).

OpSpec.inputs: (a, b, scale_a, scale_b, alpha, bias|None); scalars ``activation``, ``out_dtype``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.lowering import fallback_handler, lowerings, register_lowering

from inductor_ext.kernels import nvfp4_ops  # noqa: F401  (defines the op lowered here)
from inductor_ext.lowering.ops._select import OpChoice, select
from inductor_ext.lowering.ops._spec import OpInputs, dtype_name, whole

prims = torch.ops.prims
OP = torch.ops.inductor_ext.nvfp4_gemm.default
ATEN_CHOICE = OpChoice(OP, "nvfp4_gemm_aten")
_ROUND = fallback_handler(torch.ops.aten._to_copy.default, add_to_fallback_set=False)


def nvfp4_gemm(kernel_inputs: Any) -> OpInputs | str:
    """a, b, scale_a, scale_b, alpha[, bias] (_scaled_mm's order)."""
    scalars = {"activation": kernel_inputs.get_scalar("activation"),
               "out_dtype": dtype_name(kernel_inputs.get_scalar("out_dtype"))}
    has_bias = len(kernel_inputs.nodes()) > 5
    return whole("nvfp4_gemm", kernel_inputs, kernel_inputs.output_layout(), scalars,
                 optional=() if has_bias else (None,))


SPECS = {"nvfp4_gemm": nvfp4_gemm}


@register_lowering(OP, type_promotion_kind=None)
def lower_nvfp4_gemm(a: Any, b: Any, scale_a: Any, scale_b: Any, alpha: Any, bias: Any,
                     activation: str, out_dtype: torch.dtype, alpha_dtype: torch.dtype) -> Any:
    if alpha_dtype != torch.float32:  # the graph rounded alpha first (torchao): do the same
        # With ATen's copy kernel: inside a generated kernel Inductor drops a down-and-up cast
        # pair (emulate_precision_casts is off), which would silently keep alpha in fp32.
        rounded = _ROUND(alpha, dtype=alpha_dtype)
        alpha = lowerings[prims.convert_element_type](rounded, torch.float32)
    nodes = [a, b, scale_a, scale_b, alpha] + ([bias] if bias is not None else [])
    nodes = [ir.ExternKernel.realize_input(x) for x in nodes]
    m, n = a.get_size()[0], b.get_size()[1]
    layout = ir.FixedLayout(a.get_device(), out_dtype, [m, n])
    # alpha is already rounded here, so the ATen path takes it as fp32
    aten_kwargs = {"bias": None, "activation": activation, "out_dtype": out_dtype, "alpha_dtype": torch.float32}
    if bias is not None:
        aten_kwargs.pop("bias")
    aten = ATEN_CHOICE.bind(tuple(nodes[:5]) + ((nodes[5],) if bias is not None else ()), layout, **aten_kwargs)
    node, _ = select("nvfp4_gemm", aten, nodes, layout, {"activation": activation, "out_dtype": out_dtype})
    return node
