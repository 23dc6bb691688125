"""ATen-side choices that Inductor's own lowerings do not offer where ext lowers.

ext keeps Inductor's weight-prepack pass off (lowering/install.py) so that the GEMMs of a frozen
graph reach ExtChoices; the one ATen path that pass gave, MKL's packed sgemm for fp32 weights, is
offered here instead, as an ATen choice (no template margin) beside ATen's mm: the cpu preset's
winner is then the fastest of ATen's mm, MKL packed and ext's templates.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.select_algorithm import ExternKernelChoice

from inductor_ext.config import ExtConfig
from inductor_ext.kernels import mkl_packed_ops
from inductor_ext.lowering import op_specs

_MKL_PACKED = torch.ops.inductor_ext.mkl_packed_mm.default
MKL_PACKED_MM = ExternKernelChoice(_MKL_PACKED, name="ext_mkl_packed_mm", has_out_variant=False,
                                   op_overload=_MKL_PACKED)


def mkl_packed_inputs(config: ExtConfig, op_name: str, kernel_inputs: Any) -> op_specs.OpInputs | str:
    """The op's inputs for MKL's packed sgemm, or why it is not offered for this op instance."""
    if config.device_type != "cpu" or kernel_inputs.device_type != "cpu":
        return "not the cpu preset"
    if op_name != "mm":
        return f"op {op_name} (only mm: x @ weight)"
    if not mkl_packed_ops.available():
        return "this torch build has no MKL"
    inputs = op_specs.op_inputs(op_name, kernel_inputs)
    if isinstance(inputs, str):
        return inputs
    x, w_t = inputs.spec.inputs
    if (x.dtype, w_t.dtype) != ("float32", "float32"):
        return f"dtypes {x.dtype}, {w_t.dtype} (MKL packs fp32)"
    if not w_t.constant:
        return "the weight is not a constant (freezing packs inference weights only)"
    return inputs


def extend(config: ExtConfig, op_name: str, kernel_inputs: Any, choices: list[Any]) -> None:
    """Append the ATen-side choices this compile offers for ``op_name`` to ``choices``."""
    inputs = mkl_packed_inputs(config, op_name, kernel_inputs)
    if not isinstance(inputs, str):
        choices.append(MKL_PACKED_MM.bind(inputs.nodes, inputs.layout))
