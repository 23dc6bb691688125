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


def hinted(values: Any) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """Sizes or strides as ints, each symbolic one as its size hint (what Inductor's
    max-autotune tunes dynamic shapes on), and which of them are symbolic."""
    ints, symbolic = [], []
    for v in values:
        number = getattr(v, "is_number", True)
        ints.append(int(v) if number else V.graph.sizevars.optimization_hint(v))
        symbolic.append(not number)
    return tuple(ints), tuple(symbolic)


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


def tensor_spec(node: Any) -> TensorSpec:
    """A node's shape, strides and dtype, symbolic sizes and strides as their size hints;
    ``dynamic`` marks the symbolic dims (a family that specialises on sizes is refused them,
    ``refusals.problem``)."""
    (shape, dynamic), (stride, dynamic_strides) = hinted(node.get_size()), hinted(node.get_stride())
    return TensorSpec(shape, stride, dtype_name(node.get_dtype()), is_constant(node), dynamic if any(dynamic) else (),
                      dynamic_strides if any(dynamic_strides) else ())


def symbolic_indices(nodes: Any) -> tuple[tuple[int, ...], ...]:
    """Each node's symbolic dims by index (``ProblemKey.dynamic``); () when every size is static."""
    found = tuple(tuple(d for d, s in enumerate(n.get_size()) if not getattr(s, "is_number", True)) for n in nodes)
    return found if any(found) else ()


def symbolic_dims(spec: OpSpec) -> list[str]:
    """The symbolic dims and strides of ``spec``'s inputs (of its output when no input has one),
    e.g. ["input 0 dim 0 (hint 7)", "input 1 stride 0 (hint 10)"]."""
    def dims(named: list[tuple[str, TensorSpec | None]]) -> list[str]:
        return [f"{name} {what} {d} (hint {hints[d]})" for name, t in named if t is not None
                for what, marks, hints in (("dim", t.dynamic, t.shape), ("stride", t.dynamic_strides, t.stride))
                for d, symbolic in enumerate(marks) if symbolic]

    return dims([(f"input {i}", t) for i, t in enumerate(spec.inputs)]) or dims([("output", spec.out)])


def box(node: Any) -> ir.TensorBox:
    return node if isinstance(node, ir.TensorBox) else ir.TensorBox(node)


def spec(op: str, nodes: tuple[Any, ...], layout: Any, device_type: str, scalars: dict[str, Any],
         optional: tuple[Any, ...] = ()) -> OpSpec:
    """``op`` on ``nodes`` into ``layout`` as plain data (symbolic sizes as their hints, marked)."""
    (shape, dynamic), (stride, _) = hinted(layout.size), hinted(layout.stride)
    out = TensorSpec(shape, stride, dtype_name(layout.dtype), dynamic=dynamic if any(dynamic) else ())
    return OpSpec(op, tuple(tensor_spec(n) for n in nodes) + optional, out, scalars, device_type)


def whole(op: str, kernel_inputs: Any, layout: Any, scalars: dict[str, Any],
          optional: tuple[Any, ...] = ()) -> OpInputs:
    """An op whose inputs are Inductor's nodes as given (no epilogue inputs), absent optional
    inputs appended as None."""
    nodes = tuple(kernel_inputs.nodes())
    op_spec = spec(op, nodes, layout, kernel_inputs.device_type, scalars, optional=optional)
    return OpInputs(op_spec, nodes, layout)


@dataclass(frozen=True)
class TensorArgs:
    """An op's tensor arguments by name, in its signature's order (``("input", "weight", "bias")``),
    ``optional`` ones allowed to be absent at any position: the named binding an op module declares
    once and uses on both sides of its lowering, so an absent optional input in the middle (a
    LayerNorm without weight but with bias) keeps every other input at its own position.

    - the lowering: :meth:`present` turns the call's tensors (None where absent) into the names
      and nodes every choice takes, which it hands to ``select(..., names=...)``;
    - the glue (``SPECS``): :func:`named` puts each node's spec at its name's position in
      ``OpSpec.inputs``, None at an absent one's (what families read);
    - ATen's choice: :meth:`aten_kwargs`, the absent ones as ``name=None``.
    """

    names: tuple[str, ...]
    optional: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [n for n in self.optional if n not in self.names]
        if unknown or len(set(self.names)) != len(self.names):
            raise ValueError(f"TensorArgs{self.names}: optional {unknown} not among them, or a name twice")

    def present(self, **tensors: Any) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        """The names and tensors given (not None), in signature order; a required one absent, or
        a name the op does not have, is a ValueError."""
        extra = set(tensors) - set(self.names)
        missing = [n for n in self.names if n not in self.optional and tensors.get(n) is None]
        if extra or missing:
            raise ValueError(f"tensor arguments {self.names}: unknown {sorted(extra)}, required but absent {missing}")
        given = [(n, tensors[n]) for n in self.names if tensors.get(n) is not None]
        return tuple(n for n, _ in given), tuple(t for _, t in given)

    def names_of(self, kernel_inputs: Any) -> tuple[str, ...]:
        """The names of ``kernel_inputs``' nodes: those its lowering recorded
        (``FixedKernelInputs.arg_names``), else the first ones of the signature (absent ones last)."""
        names = getattr(kernel_inputs, "arg_names", None)
        if names is None:
            names = self.names[:len(kernel_inputs.nodes())]
        if [n for n in self.names if n in names] != list(names) or \
                any(n not in names and n not in self.optional for n in self.names):
            raise ValueError(f"input names {tuple(names)} do not bind the op's tensor arguments {self.names} "
                             f"(optional: {self.optional})")
        return tuple(names)

    def place(self, names: tuple[str, ...], values: tuple[Any, ...]) -> tuple[Any, ...]:
        """``values`` (one per name in ``names``) at their positions in the signature, None at
        an absent one's."""
        by_name = dict(zip(names, values, strict=True))
        return tuple(by_name.get(n) for n in self.names)

    def aten_kwargs(self, names: tuple[str, ...]) -> dict[str, None]:
        """What ATen's choice (``OpChoice.bind``, tensors by position) adds for the absent ones:
        ``{name: None}``. Positional tensors bind only while every absent one comes after every
        present one; otherwise a ValueError (bind that op's ATen choice through a kernel taking
        its tensors by name)."""
        absent = [n for n in self.names if n not in names]
        if absent and names and self.names.index(absent[0]) < self.names.index(names[-1]):
            raise ValueError(f"ATen's choice passes tensors by position: {names[-1]!r} would take absent "
                             f"{absent[0]!r}'s place in {self.names}")
        return dict.fromkeys(absent)


def named(op: str, kernel_inputs: Any, args: TensorArgs, layout: Any, scalars: dict[str, Any]) -> OpInputs:
    """Like :func:`whole`, with ``OpSpec.inputs`` bound by name (``args``): each input's spec at
    its position in the op's signature, None where an optional one is absent, wherever it is."""
    nodes = tuple(kernel_inputs.nodes())
    inputs = args.place(args.names_of(kernel_inputs), tuple(tensor_spec(n) for n in nodes))
    base = spec(op, (), layout, kernel_inputs.device_type, scalars)
    return OpInputs(OpSpec(op, inputs, base.out, scalars, base.device_type), nodes, layout)

