"""ATen-side choices that Inductor's own lowerings do not offer where ext lowers.

ext keeps Inductor's weight-prepack pass off (lowering/install.py) so that the GEMMs of a frozen
graph reach ExtChoices; the ATen paths that pass gave, MKL's packed sgemm for fp32 weights and
oneDNN's packed linear for bf16 ones, are offered here instead, as ATen choices (no template
margin) beside ATen's mm: the cpu preset's winner is then the fastest of ATen's mm, the packed
library GEMM and ext's templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch._inductor.select_algorithm import ExternKernelChoice

from inductor_ext.config import ExtConfig
from inductor_ext.kernels import mkl_packed_ops, mkldnn_packed_ops
from inductor_ext.lowering import op_specs


@dataclass(frozen=True)
class PackedGemm:
    """A library GEMM on a weight packed once (``kernels/*_packed_ops``), for one dtype."""

    choice: ExternKernelChoice
    dtype: str
    library: str
    available: Callable[[], bool]  # whether the library serves the dtype here


def _packed_gemm(op_name: str, dtype: str, library: str, available: Callable[[], bool]) -> PackedGemm:
    op = getattr(torch.ops.inductor_ext, op_name).default
    return PackedGemm(ExternKernelChoice(op, name=f"ext_{op_name}", has_out_variant=False, op_overload=op),
                      dtype, library, available)


PACKED_GEMMS = (
    _packed_gemm("mkl_packed_mm", "float32", "MKL", mkl_packed_ops.available),
    _packed_gemm("mkldnn_packed_mm", "bfloat16", "oneDNN", mkldnn_packed_ops.available),
)


def packed_inputs(gemm: PackedGemm, config: ExtConfig, op_name: str, kernel_inputs: Any) -> op_specs.OpInputs | str:
    """The op's inputs for ``gemm``, or why it is not offered for this op instance."""
    if config.device_type != "cpu" or kernel_inputs.device_type != "cpu":
        return "not the cpu preset"
    if op_name != "mm":
        return f"op {op_name} (only mm: x @ weight)"
    inputs = op_specs.op_inputs(op_name, kernel_inputs)
    if isinstance(inputs, str):
        return inputs
    x, w_t = inputs.spec.inputs
    if (x.dtype, w_t.dtype) != (gemm.dtype, gemm.dtype):
        return f"dtypes {x.dtype}, {w_t.dtype} ({gemm.library} packs {gemm.dtype})"
    if not gemm.available():
        return f"{gemm.library} cannot serve {gemm.dtype} here"
    if not w_t.constant:
        return "the weight is not a constant (freezing packs inference weights only)"
    return inputs


def extend(config: ExtConfig, op_name: str, kernel_inputs: Any, choices: list[Any]) -> None:
    """Append the ATen-side choices this compile offers for ``op_name`` to ``choices``."""
    for gemm in PACKED_GEMMS:
        inputs = packed_inputs(gemm, config, op_name, kernel_inputs)
        if not isinstance(inputs, str):
            choices.append(gemm.choice.bind(inputs.nodes, inputs.layout))
