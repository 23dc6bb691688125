"""Keeps RMSNorm one op through lowering, so template families can be offered for it.

Inductor decomposes ``aten.rms_norm`` (pow, mean, rsqrt, mul) before lowering and has no norm op
to autotune. Before that, in the graph Dynamo captured (pre-grad), this pass replaces each
``torch.rms_norm`` call (what ``F.rms_norm`` and ``nn.RMSNorm`` become) by
``inductor_ext::rms_norm`` (``kernels/norm_ops.py``), whose lowering (``lowering/ops/rms_norm.py``)
autotunes ATen's kernel against the families serving ``rms_norm`` (``helion.rmsnorm`` on gfx950).

It rewrites a call only when it can pay off and stay exact:
- autotuning is on and an enabled family claims this target and accepts the instance (its
  ``problem_for`` on the call's example values; e.g. the last dimension only, static shapes);
  otherwise Inductor's fused decomposition stays, as without ext;
- no gradient flows through it (inference, ``torch.no_grad``): the op has no backward, so a
  training graph keeps the decomposition.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Node

from inductor_ext.kernels.norm_ops import OP, default_eps
from inductor_ext.lowering.passes.op_offer import OneOpPass, refusal, tensor_spec
from inductor_ext.templates.family import OpSpec

_TARGETS = (torch.rms_norm, torch.nn.functional.rms_norm)
_PARAMS = ("input", "normalized_shape", "weight", "eps")


def _arguments(node: Node) -> dict[str, Any]:
    """``rms_norm(input, normalized_shape, weight=None, eps=None)``'s arguments by name."""
    return {**dict(zip(_PARAMS, node.args)), **node.kwargs}


def _eps(args: dict[str, Any], x: Any) -> float:
    """The call's eps, PyTorch's default resolved (the op always takes a number)."""
    eps = args.get("eps")
    return default_eps(x.meta["example_value"].dtype) if eps is None else float(eps)


class RmsNormOp(OneOpPass):
    name = "rms_norm_op"
    stage = "pre_grad"
    targets, op, kept = _TARGETS, OP, "decomposed"

    def arguments(self, node: Node) -> dict[str, Any]:
        return _arguments(node)

    def op_args(self, args: dict[str, Any]) -> tuple[Any, ...]:
        x = args["input"]
        return x, args.get("weight"), list(args["normalized_shape"]), _eps(args, x)

    def reason(self, node: Node, args: dict[str, Any]) -> str | None:
        """Why ``node`` keeps Inductor's decomposition, or None when a family may serve it."""
        out = node.meta.get("example_value")
        x, weight = args.get("input"), args.get("weight")
        values = [a.meta.get("example_value") if isinstance(a, Node) else a for a in (x, weight)]
        if not isinstance(out, torch.Tensor) or not isinstance(values[0], torch.Tensor):
            return "no example values"
        if out.requires_grad:
            return "a gradient flows through it (the op has no backward)"
        specs = [tensor_spec(v) if v is not None else None for v in values]
        if specs[0] is None or (values[1] is not None and specs[1] is None):
            return "dynamic shapes"
        spec = OpSpec("rms_norm", tuple(specs), tensor_spec(out, contiguous=True),
                      {"normalized_shape": list(args["normalized_shape"]), "eps": _eps(args, x)}, values[0].device.type)
        return refusal(self.config, spec)
