"""Turns ``torch.topk`` into one op with one output, so template families can be offered for top-k.

Inductor lowers ``aten.topk`` to ATen's kernel (a fallback with two outputs, values and indices),
and ``autotune_select_algorithm`` chooses among kernels of one output. Before that, in the graph
Dynamo captured (pre-grad), this pass replaces each ``torch.topk`` / ``Tensor.topk`` call whose
values and indices are read through ``[0]`` / ``[1]`` (what ``v, i = x.topk(k)`` and
``.values`` / ``.indices`` become) by

    indices = inductor_ext::topk_indices(x, k, dim, largest, sorted)   # kernels/topk_ops.py
    values = torch.gather(x, dim, indices)                             # exact: elements of x

whose lowering (``lowering/ops/topk.py``) autotunes ATen's topk against the families serving ``topk``
(``triton.topk`` on gfx950). It rewrites a call only when it can pay off and stay exact:
- autotuning is on and an enabled family claims this target and accepts the instance (its
  ``problem_for`` on the call's example values: last dimension, small k, static shapes);
  otherwise the call stays ATen's, as without ext;
- no gradient flows through it (inference, ``torch.no_grad``): the op has no backward.

Ties: ``torch.topk`` leaves the choice among equal values open; ext's families return the lowest
index first (``kernels/topk.py``), so indices of equal values may differ from eager ATen's, never
the values.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Graph, Node

from inductor_ext.kernels.topk_ops import OP
from inductor_ext.logs import passes_log as log
from inductor_ext.lowering.passes.base import ExtGraphPass
from inductor_ext.lowering.passes.op_offer import refusal, tensor_spec
from inductor_ext.templates.family import OpSpec

_PARAMS = ("input", "k", "dim", "largest", "sorted")
_DEFAULTS = {"dim": -1, "largest": True, "sorted": True}


def _is_topk(node: Node) -> bool:
    return ((node.op == "call_function" and node.target is torch.topk)
            or (node.op == "call_method" and node.target == "topk"))


def _arguments(node: Node) -> dict[str, Any]:
    """``topk(input, k, dim=-1, largest=True, sorted=True)``'s arguments by name."""
    return {**_DEFAULTS, **dict(zip(_PARAMS, node.args)), **node.kwargs}


class TopkOp(ExtGraphPass):
    name = "topk_op"
    stage = "pre_grad"

    def run(self, graph: Graph) -> int:
        rewrites = 0
        for node in list(graph.nodes):
            if not _is_topk(node):
                continue
            args = _arguments(node)
            reason = self._reason(node, args)
            if reason:
                log.debug("topk_op: %s stays ATen's topk: %s", node.name, reason)
                continue
            x, dim = args["input"], args["dim"]
            with graph.inserting_before(node):
                indices = graph.call_function(OP, (x, args["k"], dim, args["largest"], args["sorted"]))
                values = graph.call_function(torch.gather, (x, dim, indices))
            out_values, out_indices = node.meta["example_value"]
            for new, example in ((values, out_values), (indices, out_indices)):
                new.meta.update(node.meta)  # stack trace, module stack: dumps keep the user's line
                new.meta["example_value"] = example
            for user in list(node.users):
                user.replace_all_uses_with(values if user.args[1] == 0 else indices)
                graph.erase_node(user)
            graph.erase_node(node)
            rewrites += 1
        return rewrites

    def _reason(self, node: Node, args: dict[str, Any]) -> str | None:
        """Why ``node`` stays ATen's topk, or None when a family may serve it."""
        out, x = node.meta.get("example_value"), args.get("input")
        value = x.meta.get("example_value") if isinstance(x, Node) else None
        if not isinstance(value, torch.Tensor) or not isinstance(out, tuple) or len(out) != 2:
            return "no example values"
        if any(u.op != "call_function" or u.target is not operator.getitem or u.args[1] not in (0, 1)
               for u in node.users):
            return "its result is used other than through values/indices"
        if not all(isinstance(args[a], int) and not isinstance(args[a], bool) for a in ("k", "dim")) or \
                not all(isinstance(args[a], bool) for a in ("largest", "sorted")):
            return "k, dim, largest or sorted is not a constant"
        if out[0].requires_grad:
            return "a gradient flows through it (the op has no backward)"
        spec = tensor_spec(value)
        if spec is None:
            return "dynamic shapes"
        scalars = {"k": args["k"], "dim": args["dim"], "largest": args["largest"], "sorted": args["sorted"]}
        return refusal(self.config, OpSpec("topk", (spec,), tensor_spec(out[1], contiguous=True), scalars,
                                           value.device.type))
