"""Per-op Inductor glue: an op's ``KernelInputs`` as plain data (``OpSpec``) for the template
families, plus what every choice of that op takes (input nodes, output layout) and the extra
TritonTemplate arguments the op needs (addmm's bias epilogue).

One entry per op in ``OPS``; an op not listed is not offered to any family.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch._inductor import ir
from torch._inductor.kernel.mm_common import addmm_epilogue, mm_args
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


def _static(values: Any) -> tuple[int, ...] | None:
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
    shape, stride = _static(node.get_size()), _static(node.get_stride())
    if shape is None or stride is None:
        return "dynamic shapes are not supported yet"
    return TensorSpec(shape, stride, dtype_name(node.get_dtype()), is_constant(node))


def _box(node: Any) -> ir.TensorBox:
    return node if isinstance(node, ir.TensorBox) else ir.TensorBox(node)


def _spec(op: str, nodes: tuple[Any, ...], layout: Any, device_type: str, scalars: dict[str, Any],
          optional: tuple[Any, ...] = ()) -> OpSpec | str:
    specs = []
    for node in nodes:
        spec = tensor_spec(node)
        if isinstance(spec, str):
            return spec
        specs.append(spec)
    shape, stride = _static(layout.size), _static(layout.stride)
    if shape is None or stride is None:
        return "dynamic shapes are not supported yet"
    out = TensorSpec(shape, stride, dtype_name(layout.dtype))
    return OpSpec(op, tuple(specs) + optional, out, scalars, device_type)


def _product(op: str, kernel_inputs: Any) -> OpInputs | str:
    """mm (A, B) or bmm (batched A, B): the plain product."""
    mat1, mat2 = (_box(n) for n in kernel_inputs.nodes())
    m, n, k, layout, mat1, mat2 = mm_args(mat1, mat2)
    spec = _spec(op, (mat1, mat2), layout, kernel_inputs.device_type, {"fp32_precision": fp32_matmul_precision()})
    return spec if isinstance(spec, str) else OpInputs(spec, (mat1, mat2), layout)


def _addmm(kernel_inputs: Any) -> OpInputs | str:
    nodes = [_box(n) for n in kernel_inputs.nodes()]
    m, n, k, layout, mat1, mat2, bias = mm_args(nodes[1], nodes[2], nodes[0])
    alpha, beta = kernel_inputs.get_scalar("alpha"), kernel_inputs.get_scalar("beta")
    spec = _spec("addmm", (bias, mat1, mat2), layout, kernel_inputs.device_type,
                 {"alpha": alpha, "beta": beta, "fp32_precision": fp32_matmul_precision()})
    if isinstance(spec, str):
        return spec
    # Inductor's epilogue applies beta * bias + alpha * acc, the bias being a prefix input.
    extra = {"prefix_args": 1, "epilogue_fn": addmm_epilogue(layout.dtype, alpha, beta),
             "epilogue_fn_hash": f"addmm_{alpha}_{beta}"}
    return OpInputs(spec, (bias, mat1, mat2), layout, extra)


def _whole(op: str, kernel_inputs: Any, layout: Any, scalars: dict[str, Any],
           optional: tuple[Any, ...] = ()) -> OpInputs | str:
    """An op whose inputs are Inductor's nodes as given (no epilogue inputs), absent optional
    inputs appended as None."""
    nodes = tuple(kernel_inputs.nodes())
    spec = _spec(op, nodes, layout, kernel_inputs.device_type, scalars, optional=optional)
    return spec if isinstance(spec, str) else OpInputs(spec, nodes, layout)


def _nvfp4_gemm(kernel_inputs: Any) -> OpInputs | str:
    """a, b, scale_a, scale_b, alpha[, bias] (_scaled_mm's order)."""
    scalars = {"activation": kernel_inputs.get_scalar("activation"),
               "out_dtype": dtype_name(kernel_inputs.get_scalar("out_dtype"))}
    has_bias = len(kernel_inputs.nodes()) > 5
    return _whole("nvfp4_gemm", kernel_inputs, kernel_inputs.output_layout(), scalars,
                  optional=() if has_bias else (None,))


def _scaled_mm(kernel_inputs: Any) -> OpInputs | str:
    """Inductor's ``scaled_mm`` lowering: a, b, scale_a, scale_b[, bias] (no scale_result). A
    Triton template names every input in its ``def_kernel`` (no prefix/suffix epilogue inputs): the
    scales and the bias apply to the fp32 accumulator, before any fused epilogue."""
    layout = kernel_inputs.output_layout(flexible=False)  # a Triton template stores through a fixed layout
    optional = (None, None) if len(kernel_inputs.nodes()) == 4 else (None,)  # bias, scale_result
    return _whole("scaled_mm", kernel_inputs, layout, {"out_dtype": dtype_name(layout.dtype)}, optional)


def _grouped_mm(kernel_inputs: Any) -> OpInputs | str:
    """ext's ``grouped_mm`` lowering (lowering/grouped_mm.py): mat_a, mat_b[, offs] (no bias)."""
    layout = kernel_inputs.output_layout()
    optional = (None, None) if len(kernel_inputs.nodes()) == 2 else (None,)  # offs, bias
    return _whole("grouped_mm", kernel_inputs, layout, {"out_dtype": dtype_name(layout.dtype)}, optional)


def _rms_norm(kernel_inputs: Any) -> OpInputs | str:
    """ext's ``rms_norm`` lowering (lowering/rms_norm.py): input[, weight]; normalized_shape, eps."""
    scalars = {"normalized_shape": list(kernel_inputs.get_scalar("normalized_shape")),
               "eps": kernel_inputs.get_scalar("eps")}
    optional = (None,) if len(kernel_inputs.nodes()) == 1 else ()  # weight
    return _whole("rms_norm", kernel_inputs, kernel_inputs.output_layout(), scalars, optional)


def _softmax(kernel_inputs: Any) -> OpInputs | str:
    """ext's ``softmax`` lowering (lowering/softmax.py): x (contiguous); scalars dim, out_dtype."""
    layout = kernel_inputs.output_layout()
    return _whole("softmax", kernel_inputs, layout,
                  {"dim": kernel_inputs.get_scalar("dim"), "out_dtype": dtype_name(layout.dtype)})


def _topk(kernel_inputs: Any) -> OpInputs | str:
    """ext's ``topk`` lowering (lowering/topk.py): x; scalars k, dim, largest, sorted."""
    scalars = {s: kernel_inputs.get_scalar(s) for s in ("k", "dim", "largest", "sorted")}
    return _whole("topk", kernel_inputs, kernel_inputs.output_layout(), scalars)


def _decode_attention(kernel_inputs: Any) -> OpInputs | str:
    """ext's ``decode_attention`` lowering (lowering/decode_attention.py): q, k, v; scalar scale."""
    return _whole("decode_attention", kernel_inputs, kernel_inputs.output_layout(),
                  {"scale": kernel_inputs.get_scalar("scale")})


# Inductor's op name (as passed to get_template_configs, or by our own lowerings) -> glue.
# mm, bmm and addmm carry the scalar fp32_precision ("tf32" or "ieee": fp32_matmul_precision()).
# OpSpec.inputs per op: mm and bmm (A, B); addmm (bias, A, B); nvfp4_gemm (a, b, scale_a,
# scale_b, alpha, bias|None); scaled_mm (a, b, scale_a, scale_b, bias|None, scale_result|None);
# grouped_mm (mat_a, mat_b, offs|None, bias|None); softmax (x,); rms_norm (input, weight|None;
# scalars normalized_shape, eps); topk (x,; scalars k, dim, largest, sorted); decode_attention
# (q, k, v; scalar scale).
OPS: dict[str, Callable[[Any], OpInputs | str]] = {
    "mm": functools.partial(_product, "mm"), "bmm": functools.partial(_product, "bmm"), "addmm": _addmm,
    "nvfp4_gemm": _nvfp4_gemm, "scaled_mm": _scaled_mm, "grouped_mm": _grouped_mm, "softmax": _softmax,
    "rms_norm": _rms_norm, "topk": _topk, "decode_attention": _decode_attention}


def op_inputs(op: str, kernel_inputs: Any) -> OpInputs | str:
    """The op's inputs for the families, or why none can be offered."""
    glue = OPS.get(op)
    if glue is None:
        return f"ext offers no templates for {op!r} (served: {', '.join(OPS)})"
    return glue(kernel_inputs)
