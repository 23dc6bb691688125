"""Turns a softmax over the last dimension that a template family would serve (a decode step's
softmax over a large vocabulary) into ``inductor_ext.softmax``, which ext lowers to an autotuned
choice between ATen's softmax and those families (``lowering/ops/softmax.py``).

Inductor decomposes softmax (amax, sub, exp, sum, div) before any lowering could offer a
template, so the rewrite happens before that, on the pre-grad graph: ``torch.softmax``,
``F.softmax``, ``torch.special.softmax``, ``nn.Softmax`` and ``Tensor.softmax``, with or without
``dtype=``. An exact upcast feeding only the softmax (``softmax(logits.float(), -1)``) is folded
into its output dtype, so a bf16 row is read once. It fires only where a family enabled for
this compile accepts the problem (its ``problem_for`` and ``refuse_problem``): elsewhere Inductor's
fused softmax stays. Training works: the op's backward is ATen's softmax backward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.fx import Graph, Node

from inductor_ext.kernels import softmax_ops  # noqa: F401  (registers torch.ops.inductor_ext.softmax)
from inductor_ext.lowering.ext_choices import offered_families
from inductor_ext.lowering.passes.base import ExtGraphPass
from inductor_ext.templates.family import OpSpec, TensorSpec

OP = torch.ops.inductor_ext.softmax.default
# Softmax functions as Dynamo records them -> the position of dtype among their arguments
# (F.softmax has _stacklevel before it).
_FUNCTIONS = {torch.softmax: 2, F.softmax: 3, torch.special.softmax: 2}
# Casts that only widen, so softmax(x.to(wide)) equals a softmax of x written in `wide`.
_WIDENS = {torch.float32: (torch.float16, torch.bfloat16)}


def _value(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, Node) else None


def _arg(node: Node, index: int, name: str, default: Any = None) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _softmax_call(node: Node) -> tuple[Node, int, torch.dtype | None] | None:
    """(x, dim, dtype) when ``node`` is a softmax call."""
    if node.op == "call_function" and node.target in _FUNCTIONS:
        x, dim, dtype = _arg(node, 0, "input"), _arg(node, 1, "dim"), _arg(node, _FUNCTIONS[node.target], "dtype")
    elif node.op == "call_method" and node.target == "softmax":
        x, dim, dtype = node.args[0], _arg(node, 1, "dim"), _arg(node, 2, "dtype")
    else:
        return None
    if not isinstance(x, Node) or not isinstance(dim, int) or not (dtype is None or isinstance(dtype, torch.dtype)):
        return None
    return x, dim, dtype


def _widening_source(x: Node, to: torch.dtype) -> Node | None:
    """The tensor ``x`` upcasts to ``to`` when x is such a cast (``.float()``, ``.to(float32)``)
    with no other user."""
    if x.op != "call_method" or len(x.users) != 1 or not isinstance(x.args[0], Node):
        return None
    if x.target == "float" and len(x.args) == 1 and not x.kwargs:
        target = torch.float32
    elif x.target == "to" and len(x.args) == 2 and not x.kwargs and isinstance(x.args[1], torch.dtype):
        target = x.args[1]
    else:
        return None
    source = _value(x.args[0])
    if target != to or not isinstance(source, torch.Tensor) or source.dtype not in _WIDENS.get(to, ()):
        return None
    return x.args[0]


def _static(shape: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(s) for s in shape)
    except TypeError:  # symbolic sizes
        return None


def _spec(x: torch.Tensor, shape: tuple[int, ...], out_dtype: torch.dtype) -> OpSpec:
    """The softmax as the lowering will describe it: x made contiguous, output contiguous."""
    stride, step = [], 1
    for size in reversed(shape):
        stride.insert(0, step)
        step *= max(size, 1)

    def spec(dtype: torch.dtype) -> TensorSpec:
        return TensorSpec(shape, tuple(stride), str(dtype).removeprefix("torch."))

    return OpSpec("softmax", (spec(x.dtype),), spec(out_dtype),
                  {"dim": -1, "out_dtype": str(out_dtype).removeprefix("torch.")}, x.device.type)


class VocabSoftmax(ExtGraphPass):
    name = "vocab_softmax"
    stage = "pre_grad"

    def run(self, graph: Graph) -> int:
        rewrites = 0
        for node in list(graph.nodes):
            call = _softmax_call(node)
            if call is not None and self._rewrite(graph, node, *call):
                rewrites += 1
        return rewrites

    def _served(self, spec: OpSpec) -> bool:
        for family in offered_families(self.config, "softmax", spec.device_type):
            problem = family.problem_for(spec)
            if not isinstance(problem, str) and family.refuse_problem(problem) is None:
                return True
        return False

    def _rewrite(self, graph: Graph, node: Node, x: Node, dim: int, dtype: torch.dtype | None) -> bool:
        x_val, out_val = _value(x), _value(node)
        if not isinstance(x_val, torch.Tensor) or not isinstance(out_val, torch.Tensor) or x_val.dim() == 0:
            return False
        shape = _static(x_val.shape)
        if shape is None or dim not in (-1, x_val.dim() - 1):
            return False
        if dtype is not None and dtype != x_val.dtype and x_val.dtype not in _WIDENS.get(dtype, ()):
            return False  # a narrowing dtype= rounds x first: leave it to Inductor
        cast = _widening_source(x, out_val.dtype) if dtype is None else None
        source = cast if cast is not None else x
        if not self._served(_spec(_value(source), shape, out_val.dtype)):
            return False
        out_dtype = out_val.dtype if out_val.dtype != _value(source).dtype else None
        with graph.inserting_before(node):
            fused = graph.call_function(OP, (source, -1, out_dtype))
        fused.meta.update(node.meta)  # example_value, stack trace, module stack: dumps keep the user's line
        node.replace_all_uses_with(fused)
        graph.erase_node(node)
        if cast is not None and not x.users:
            graph.erase_node(x)
        return True
