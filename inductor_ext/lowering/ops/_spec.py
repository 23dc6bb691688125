"""An op's ``KernelInputs`` as plain data (``OpSpec``) for the template families, with what every
choice of that op takes (input nodes, output layout): the helpers each op module's glue
(``SPECS``) is made of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.virtualized import V

from inductor_ext.templates.family import OpSpec, TensorSpec


@dataclass
class OpInputs:
    """One op instance ready for a family: its spec, and the Inductor side of every choice."""

    spec: OpSpec
    nodes: tuple[Any, ...]  # the input nodes every choice takes, in the spec's order
    layout: Any  # the output layout
    triton_extra: dict[str, Any] = field(default_factory=dict)  # extra TritonTemplate kwargs


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def fp32_matmul_precision() -> str:
    """The precision ATen's fp32 GEMMs run at under the user's torch settings, read at compile
    time: "tf32" after ``torch.set_float32_matmul_precision("high")`` (or "medium"),
    ``torch.backends.cuda.matmul.fp32_precision = "tf32"`` or ``allow_tf32 = True``; "ieee"
    (full fp32) otherwise, PyTorch's default. The per-backend getter resolves "none" through
    its parents and, unlike ``get_float32_matmul_precision()``, never raises when the legacy
    and new APIs were mixed. Inductor reads the same setting for its own Triton dots and keys
    its FX graph cache on it."""
    return "tf32" if torch.backends.cuda.matmul.fp32_precision == "tf32" else "ieee"


# The ops whose OpSpec carries the scalar "fp32_precision".
FP32_PRECISION_OPS = ("mm", "bmm", "addmm")


def problem_fp32_precision(op: str, dtypes: tuple[str, ...]) -> str:
    """What an autotune decision for ``op`` on inputs of ``dtypes`` depends on beyond its shapes:
    the fp32 matmul precision for a GEMM with fp32 inputs (both ATen's time and the templates'
    kernels change with it), "" for anything else."""
    return fp32_matmul_precision() if op in FP32_PRECISION_OPS and "float32" in dtypes else ""


def static(values: Any) -> tuple[int, ...] | None:
    out = []
    for v in values:
        if not getattr(v, "is_number", True):
            return None
        out.append(int(v))
    return tuple(out)


def constant_name(node: Any) -> str | None:
    """The graph constant ``node`` is (a view of), by name: a parameter under Inductor's freezing."""
    data = node.data if isinstance(node, ir.TensorBox) else node
    if isinstance(data, ir.BaseView):
        data = data.unwrap_view()
    if isinstance(data, ir.StorageBox) and isinstance(data.data, ir.ConstantBuffer) \
            and data.data.get_name() in V.graph.constants:
        return data.data.get_name()
    return None


def is_constant(node: Any) -> bool:
    """Whether ``node`` is (a view of) a graph constant."""
    return constant_name(node) is not None


def tensor_spec(node: Any) -> TensorSpec | str:
    """A node's shape, strides and dtype, or why it cannot be described (dynamic shapes)."""
    shape, stride = static(node.get_size()), static(node.get_stride())
    if shape is None or stride is None:
        return "dynamic shapes are not supported yet"
    return TensorSpec(shape, stride, dtype_name(node.get_dtype()), is_constant(node))


def box(node: Any) -> ir.TensorBox:
    return node if isinstance(node, ir.TensorBox) else ir.TensorBox(node)


def spec(op: str, nodes: tuple[Any, ...], layout: Any, device_type: str, scalars: dict[str, Any],
         optional: tuple[Any, ...] = ()) -> OpSpec | str:
    """``op`` on ``nodes`` into ``layout`` as plain data, or why it cannot be described."""
    specs = []
    for node in nodes:
        node_spec = tensor_spec(node)
        if isinstance(node_spec, str):
            return node_spec
        specs.append(node_spec)
    shape, stride = static(layout.size), static(layout.stride)
    if shape is None or stride is None:
        return "dynamic shapes are not supported yet"
    out = TensorSpec(shape, stride, dtype_name(layout.dtype))
    return OpSpec(op, tuple(specs) + optional, out, scalars, device_type)


def whole(op: str, kernel_inputs: Any, layout: Any, scalars: dict[str, Any],
          optional: tuple[Any, ...] = ()) -> OpInputs | str:
    """An op whose inputs are Inductor's nodes as given (no epilogue inputs), absent optional
    inputs appended as None."""
    nodes = tuple(kernel_inputs.nodes())
    op_spec = spec(op, nodes, layout, kernel_inputs.device_type, scalars, optional=optional)
    return op_spec if isinstance(op_spec, str) else OpInputs(op_spec, nodes, layout)
