"""ATen-side choices that Inductor's own lowerings do not offer where ext lowers.

ext keeps Inductor's weight-prepack pass off (lowering/install.py) so that the GEMMs of a frozen
graph reach ExtChoices; the ATen paths that pass gave, MKL's packed sgemm for fp32 weights and
oneDNN's packed linear for bf16 ones, for ``mm`` and for ``addmm`` with a linear's bias (the
library adds it), are offered here instead, as ATen choices (no template
margin) beside ATen's mm: the cpu preset's winner is then the fastest of ATen's mm, the packed
library GEMM and ext's templates.

Each is timed as the body of ext's op (``kernels/*_packed_ops``), which packs the weight on
first use and keeps it. Where one wins, the graph gets what Inductor's pass would have made: the
weight packed now, at compile time, as a graph constant, and ``mkl::_mkl_linear`` or
``mkldnn::_linear_pointwise`` called on it (measured: ext's op cost 15-30 us a call more, and a
transpose of the weight view each call). ``PACKED_NAMES`` lets the ATen rule treat them as
Inductor's default under freezing (``ExtChoices._prefer_packed``).

For wide fp32 GEMMs (``panel_gemm_ops.WIDE`` output columns or more), ATen's GEMM called once per
panel of columns (``kernels/panel_gemm_ops.py``) is offered too, packed weight or not: the graph
calls the op itself (an ATen-side choice like the others, timed as its body).

For bf16 GEMMs on a constant weight, ATen's fp32 GEMM on the weight widened once
(``kernels/widened_gemm_ops.py``) is offered the same way: where the CPU has no bf16 dot products
ATen's bf16 GEMM runs several times slower than its fp32 one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch._inductor import ir, mkldnn_ir
from torch._inductor.select_algorithm import ExternKernelChoice
from torch._inductor.virtualized import V

from inductor_ext.config import ExtConfig
from inductor_ext.kernels import mkl_packed_ops, mkldnn_packed_ops, panel_gemm_ops, widened_gemm_ops
from inductor_ext.kernels.packed_weights import bias_row
from inductor_ext.lowering import opaque_constants, ops


@dataclass(frozen=True)
class PackedGemm:
    """A library GEMM on a weight packed once (``kernels/*_packed_ops``), for one dtype."""

    choice: ExternKernelChoice
    dtype: str
    library: str
    available: Callable[[], bool]  # whether the library serves the dtype here
    op: str = "mm"  # "mm" (x @ weight) or "addmm" (a linear with its bias)


def _packed_gemm(op_name: str, dtype: str, library: str, available: Callable[[], bool],
                 creator: Callable[..., ir.ExternKernel] | None = None,
                 timed: Callable[..., torch.Tensor] | None = None, op: str = "mm") -> PackedGemm:
    """``timed``: what autotuning calls instead of the op, where the graph calls no op of ours
    (``creator`` makes the node); ``op``: the GEMM it serves (its inputs in that op's order)."""
    overload = getattr(torch.ops.inductor_ext, op_name).default
    return PackedGemm(ExternKernelChoice(timed or overload, name=f"ext_{op_name}", has_out_variant=False,
                                         op_overload=overload, kernel_creator=creator), dtype, library, available, op)


def constant_value(node: Any) -> torch.Tensor:
    """The tensor a (view of a) graph constant holds, as the node views it."""
    name = ops.constant_name(node)
    assert name is not None, "packed_inputs offers the packed GEMMs for constant weights only"
    layout = node.get_layout()
    return V.graph.constants[name].as_strided([int(s) for s in layout.size], [int(s) for s in layout.stride],
                                              int(layout.offset))


def _bias_constant(bias: Any) -> Any:
    """A linear's bias (a constant ``addmm`` input broadcast over the rows) as a 1-D graph constant."""
    row = bias_row(constant_value(bias), int(bias.get_size()[-1]))
    assert row is not None, "packed_inputs offers the packed addmm for a per-column bias only"
    return V.graph.add_tensor_constant(row.contiguous())


def mkl_linear_on_packed_constant(x: Any, w_t: Any, bias: Any = None) -> ir.ExternKernel:
    """``x @ w_t`` (+ ``bias``) as ``mkl::_mkl_linear`` on ``w_t`` packed now for x's rows (both
    static: ``packed_inputs`` offers the choice only then), the packed copy a constant of the graph."""
    weight = constant_value(w_t).t()  # (N, K), as MKL's packing and its fallback linear read it
    batch = int(x.get_size()[0])
    packed = opaque_constants.add_constant(torch.ops.mkl._mkl_reorder_linear_weight(weight.contiguous(), batch))
    b = None if bias is None else _bias_constant(bias)
    return mkldnn_ir.MKLPackedLinear.create(x, packed, V.graph.add_tensor_constant(weight), b, batch)


def onednn_linear_on_packed_constant(x: Any, w_t: Any, bias: Any = None) -> ir.ExternKernel:
    """``x @ w_t`` (+ ``bias``) as ``mkldnn::_linear_pointwise`` on ``w_t`` reordered now into
    oneDNN's blocked layout for x's rows, the reordered copy a constant of the graph (as Inductor's
    pass makes it)."""
    weight = constant_value(w_t).t()  # (N, K)
    # opaque: Inductor's FX graph cache cannot pickle it (one log line, not a traceback)
    packed = opaque_constants.add_constant(torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(),
                                                                                   int(x.get_size()[0])))
    b = None if bias is None else _bias_constant(bias)
    return mkldnn_ir.LinearUnary.create(x, packed, b, "none", [], "")


def _with_bias(creator: Callable[..., ir.ExternKernel]) -> Callable[..., ir.ExternKernel]:
    """``creator`` for addmm's input order (bias, x, w_t)."""
    return lambda bias, x, w_t: creator(x, w_t, bias)


PACKED_GEMMS = (
    _packed_gemm("mkl_packed_mm", "float32", "MKL", mkl_packed_ops.available, mkl_linear_on_packed_constant,
                 mkl_packed_ops.packed_mm),
    _packed_gemm("mkldnn_packed_mm", "bfloat16", "oneDNN", mkldnn_packed_ops.available, onednn_linear_on_packed_constant,
                 mkldnn_packed_ops.packed_mm),
    _packed_gemm("mkl_packed_addmm", "float32", "MKL", mkl_packed_ops.available,
                 _with_bias(mkl_linear_on_packed_constant), mkl_packed_ops.packed_addmm, op="addmm"),
    _packed_gemm("mkldnn_packed_addmm", "bfloat16", "oneDNN", mkldnn_packed_ops.available,
                 _with_bias(onednn_linear_on_packed_constant), mkldnn_packed_ops.packed_addmm, op="addmm"),
)

PACKED_NAMES = frozenset(g.choice.name for g in PACKED_GEMMS)


def _cpu_gemm_inputs(config: ExtConfig, op_name: str, kernel_inputs: Any, serves: tuple[str, ...],
                     server: str) -> ops.OpInputs | str:
    """The op's inputs where ``server`` (what serves the ops ``serves``, named as the subject of
    "serves") can take them: in the cpu preset, one of its ops, an addmm only as a linear has it
    (alpha and beta 1); or why not."""
    if config.device_type != "cpu" or kernel_inputs.device_type != "cpu":
        return "not the cpu preset"
    if op_name not in serves:
        return f"op {op_name} ({server} serves {', '.join(serves)})"
    inputs = ops.op_inputs(op_name, kernel_inputs)
    if isinstance(inputs, str):
        return inputs
    scalars = inputs.spec.scalars
    if op_name == "addmm" and (float(scalars.get("alpha", 1.0)) != 1.0 or float(scalars.get("beta", 1.0)) != 1.0):
        return f"addmm with alpha={scalars.get('alpha')}, beta={scalars.get('beta')} (a linear's are 1)"
    return inputs


def packed_inputs(gemm: PackedGemm, config: ExtConfig, op_name: str, kernel_inputs: Any) -> ops.OpInputs | str:
    """The op's inputs for ``gemm``, or why it is not offered for this op instance."""
    inputs = _cpu_gemm_inputs(config, op_name, kernel_inputs, (gemm.op,), gemm.choice.name)
    if isinstance(inputs, str):
        return inputs
    x, w_t = inputs.spec.inputs[-2:]
    if op_name == "addmm":
        bias = inputs.spec.inputs[0]
        if not bias.constant or len(bias.shape) != 2 or bias.stride[0] != 0 or bias.stride[-1] != 1:
            return "the bias is not a constant row broadcast over the rows (a linear's)"
    if (x.dtype, w_t.dtype) != (gemm.dtype, gemm.dtype):
        return f"dtypes {x.dtype}, {w_t.dtype} ({gemm.library} packs {gemm.dtype})"
    if not gemm.available():
        return f"{gemm.library} cannot serve {gemm.dtype} here"
    if not w_t.constant:
        return "the weight is not a constant (freezing packs inference weights only)"
    if x.dynamic:  # packing is for one row count, and the node reads it as an int
        return f"symbolic rows (hint {x.shape[0]}): {gemm.library} packs the weight for a fixed row count"
    return inputs


def _op_gemms(kind: str, module: Any) -> dict[str, ExternKernelChoice]:
    """ext's ``<kind>_mm`` and ``<kind>_addmm`` ops as choices, by the op each serves: the graph
    calls the op (a FallbackKernel: Python and C++ wrappers alike), autotuning times its body
    (``module.<kind>_mm``, ``module.<kind>_addmm``)."""
    return {op: ExternKernelChoice(getattr(module, f"{kind}_{op}"), name=f"ext_{kind}_{op}", has_out_variant=False,
                                   use_fallback_kernel=True,
                                   op_overload=getattr(torch.ops.inductor_ext, f"{kind}_{op}").default)
            for op in ("mm", "addmm")}


# ATen's GEMM per panel of output columns, by the op it serves
PANEL_GEMMS = _op_gemms("panel", panel_gemm_ops)


def panel_inputs(config: ExtConfig, op_name: str, kernel_inputs: Any) -> ops.OpInputs | str:
    """The op's inputs for its panel GEMM, or why it is not offered for this op instance."""
    inputs = _cpu_gemm_inputs(config, op_name, kernel_inputs, tuple(PANEL_GEMMS), "each panel GEMM")
    if isinstance(inputs, str):
        return inputs
    x, w_t = inputs.spec.inputs[-2:]
    if (x.dtype, w_t.dtype) != ("float32", "float32"):  # bf16 on AVX2: no gain measured (0.96-1.00x)
        return f"dtypes {x.dtype}, {w_t.dtype} (the panels are offered for float32)"
    if w_t.dynamic:  # how many panels depends on sizes only known when it runs
        return f"a weight with symbolic sizes (hints {list(w_t.shape)})"
    if int(w_t.shape[-1]) < panel_gemm_ops.WIDE:
        return f"{w_t.shape[-1]} output columns (offered from {panel_gemm_ops.WIDE})"
    return inputs


# ATen's fp32 GEMM on a bf16 weight widened once, by the op it serves
WIDENED_GEMMS = _op_gemms("widened", widened_gemm_ops)


def widened_inputs(config: ExtConfig, op_name: str, kernel_inputs: Any) -> ops.OpInputs | str:
    """The op's inputs for its widened GEMM, or why it is not offered for this op instance."""
    inputs = _cpu_gemm_inputs(config, op_name, kernel_inputs, tuple(WIDENED_GEMMS), "each widened GEMM")
    if isinstance(inputs, str):
        return inputs
    x, w_t = inputs.spec.inputs[-2:]
    if (x.dtype, w_t.dtype) != ("bfloat16", "bfloat16"):
        return f"dtypes {x.dtype}, {w_t.dtype} (the widened GEMMs are offered for bfloat16)"
    if not w_t.constant:  # a widened copy per call would cost more than it saves
        return "the weight is not a constant (its fp32 copy is kept for a frozen weight only)"
    return inputs


def extend(config: ExtConfig, op_name: str, kernel_inputs: Any, choices: list[Any]) -> None:
    """Append the ATen-side choices this compile offers for ``op_name`` to ``choices``."""
    for gemm in PACKED_GEMMS:
        inputs = packed_inputs(gemm, config, op_name, kernel_inputs)
        if not isinstance(inputs, str):
            choices.append(gemm.choice.bind(inputs.nodes, inputs.layout))
    for gemms, offered in ((PANEL_GEMMS, panel_inputs), (WIDENED_GEMMS, widened_inputs)):
        inputs = offered(config, op_name, kernel_inputs)
        if not isinstance(inputs, str):
            choices.append(gemms[op_name].bind(inputs.nodes, inputs.layout))
