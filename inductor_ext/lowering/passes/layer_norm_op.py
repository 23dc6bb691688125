"""Keeps LayerNorm one op through lowering, so template families can be offered for it.

Inductor decomposes ``aten.layer_norm`` (mean, var, rsqrt, mul, add) before lowering and has no
norm op to autotune. Before that, in the graph Dynamo captured (pre-grad), this pass replaces each
``F.layer_norm`` / ``torch.layer_norm`` call (what ``nn.LayerNorm`` becomes) by
``inductor_ext::layer_norm`` (``kernels/layer_norm_ops.py``), whose lowering
(``lowering/ops/layer_norm.py``) autotunes ATen's kernel against the families serving
``layer_norm``.

It rewrites a call only when it can pay off and stay exact (as ``rms_norm_op``):
- autotuning is on and an enabled family claims this target and accepts the instance;
- no gradient flows through it (the op has no backward);
- not a bias without a weight: ATen's choice passes the op's tensors by position
  (``lowering/ops/_spec.py: TensorArgs.aten_kwargs``), so that call keeps the decomposition.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Node

from inductor_ext.kernels.layer_norm_ops import OP
from inductor_ext.lowering.passes.op_offer import OneOpPass, refusal, tensor_spec
from inductor_ext.templates.family import OpSpec

_TARGETS = (torch.layer_norm, torch.nn.functional.layer_norm)
_PARAMS = ("input", "normalized_shape", "weight", "bias", "eps")


def _arguments(node: Node) -> dict[str, Any]:
    """``layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)``'s arguments by name."""
    return {**dict(zip(_PARAMS, node.args)), **node.kwargs}


def _eps(args: dict[str, Any]) -> float:
    eps = args.get("eps")
    return 1e-5 if eps is None else float(eps)


class LayerNormOp(OneOpPass):
    name = "layer_norm_op"
    stage = "pre_grad"
    targets, op, kept = _TARGETS, OP, "decomposed"

    def arguments(self, node: Node) -> dict[str, Any]:
        return _arguments(node)

    def op_args(self, args: dict[str, Any]) -> tuple[Any, ...]:
        return args["input"], args.get("weight"), args.get("bias"), list(args["normalized_shape"]), _eps(args)

    def reason(self, node: Node, args: dict[str, Any]) -> str | None:
        """Why ``node`` keeps Inductor's decomposition, or None when a family may serve it."""
        out = node.meta.get("example_value")
        tensors = [args.get(n) for n in ("input", "weight", "bias")]
        values = [a.meta.get("example_value") if isinstance(a, Node) else a for a in tensors]
        if not isinstance(out, torch.Tensor) or not isinstance(values[0], torch.Tensor):
            return "no example values"
        if out.requires_grad:
            return "a gradient flows through it (the op has no backward)"
        if values[1] is None and values[2] is not None:
            return "a bias without a weight (ATen's choice passes the op's tensors by position)"
        if not all(isinstance(s, int) for s in args["normalized_shape"]):
            return "a symbolic normalized_shape"
        specs = [tensor_spec(v) if v is not None else None for v in values]
        if any(s is None and v is not None for s, v in zip(specs, values)):
            return "dynamic shapes"
        spec = OpSpec("layer_norm", tuple(specs), tensor_spec(out, contiguous=True),
                      {"normalized_shape": list(args["normalized_shape"]), "eps": _eps(args)}, values[0].device.type)
        return refusal(self.config, spec)
