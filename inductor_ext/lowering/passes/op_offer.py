"""What the passes that keep an op whole for template families (``rms_norm_op``, ``topk_op``,
``decode_attention_op``) ask before rewriting a call: the call's example values as plain data, and
whether any enabled family would serve the op instance they describe; and ``OneOpPass``, the
rewrite of one call into one op that those with a single output share."""

from __future__ import annotations

import hashlib
import inspect
import sys
from typing import Any, ClassVar

import torch
from torch._inductor import config as inductor_config
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import has_guarding_hint, optimization_hint

from inductor_ext.config import ExtConfig
from inductor_ext.lowering import refusals
from inductor_ext.lowering.ext_choices import offered_families
from inductor_ext.logs import passes_log as log
from inductor_ext.lowering.ops import dtype_name
from inductor_ext.lowering.passes.base import ExtGraphPass
from inductor_ext.templates.family import OpSpec, TensorSpec


def tensor_spec(value: Any, contiguous: bool = False) -> TensorSpec | None:
    """An example value as plain data (``contiguous``: the strides of the op's output, which is),
    symbolic sizes as their hints and marked ``dynamic``, as lowering describes them
    (``lowering/ops/_spec.py``); None when a symbolic size has no hint."""
    sizes, strides = list(value.shape), list(value.stride())
    if not all(isinstance(s, int) or has_guarding_hint(s) for s in (*sizes, *strides)):
        return None
    shape, stride = tuple(optimization_hint(s) for s in sizes), tuple(optimization_hint(s) for s in strides)
    dynamic = tuple(not isinstance(s, int) for s in sizes)
    dynamic_strides = tuple(not isinstance(s, int) for s in strides)
    if contiguous:
        stride = tuple(int(torch.Size(shape[i + 1:]).numel()) for i in range(len(shape)))
        dynamic_strides = ()  # the output's: follow from its sizes
    return TensorSpec(shape, stride, dtype_name(value.dtype), dynamic=dynamic if any(dynamic) else (),
                      dynamic_strides=dynamic_strides if any(dynamic_strides) else ())


def refusal(config: ExtConfig, spec: OpSpec) -> str | None:
    """None when an enabled family claiming this target accepts ``spec`` and the graph's wrapper
    can call its kernels (lowering asks the same stages: ``lowering/refusals.py``); else every
    family's refusal, joined."""
    why = []
    for family in offered_families(config, spec.op, spec.device_type):
        problem = (refusals.here(config, family, spec.device_type, bool(inductor_config.cpp_wrapper))
                   or refusals.problem(family, spec))
        if not isinstance(problem, refusals.Refusal):
            return None
        why.append(f"{family.name}: {problem} ({problem.stage})")
    return "; ".join(why) or f"no family enabled for {spec.op} serves this target and device"


class OneOpPass(ExtGraphPass):
    """Replaces each call of ``targets`` that a family may serve by one call of ``op``, which
    takes the call's place (one output). Subclasses say how a call's arguments read
    (``arguments``), why a call stays as it is (``reason``: None when it may be rewritten), and
    what ``op`` is called with (``op_args``); ``kept`` says what a call stays, for the log."""

    targets: ClassVar[tuple[Any, ...]]
    op: ClassVar[Any]
    kept: ClassVar[str]

    def arguments(self, node: Node) -> dict[str, Any]:
        raise NotImplementedError

    def reason(self, node: Node, args: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def op_args(self, args: dict[str, Any]) -> tuple[Any, ...]:
        raise NotImplementedError

    def run(self, graph: Graph) -> int:
        rewrites = 0
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in self.targets:
                continue
            args = self.arguments(node)
            reason = self.reason(node, args)
            if reason:
                log.debug("%s: %s stays %s: %s", self.name, node.name, self.kept, reason)
                continue
            with graph.inserting_before(node):
                new = graph.call_function(self.op, self.op_args(args))
            new.meta.update(node.meta)  # example_value, stack trace, module stack: dumps keep the user's line
            node.replace_all_uses_with(new)
            graph.erase_node(node)
            rewrites += 1
        return rewrites

    def uuid(self) -> str:
        """The pass's own uuid and this module's source: the rewrite happens here."""
        own = inspect.getsource(sys.modules[__name__])
        return hashlib.sha256((super().uuid() + own).encode()).hexdigest()
