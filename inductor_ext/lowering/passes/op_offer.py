"""What the passes that keep an op whole for template families (``rms_norm_op``, ``topk_op``) ask
before rewriting a call: the call's example values as plain data, and whether any enabled family
would serve the op instance they describe."""

from __future__ import annotations

from typing import Any

import torch

from inductor_ext.config import ExtConfig
from inductor_ext.lowering.ext_choices import offered_families
from inductor_ext.lowering.op_specs import dtype_name
from inductor_ext.templates.family import OpSpec, TensorSpec


def tensor_spec(value: Any, contiguous: bool = False) -> TensorSpec | None:
    """An example value as plain data (``contiguous``: the strides of the op's output, which is);
    None when its sizes are symbolic (dynamic shapes)."""
    if not all(isinstance(s, int) for s in (*value.shape, *value.stride())):
        return None
    shape, stride = tuple(value.shape), tuple(value.stride())
    if contiguous:
        stride = tuple(int(torch.Size(shape[i + 1:]).numel()) for i in range(len(shape)))
    return TensorSpec(shape, stride, dtype_name(value.dtype))


def refusal(config: ExtConfig, spec: OpSpec) -> str | None:
    """None when an enabled family claiming this target accepts ``spec``; else every family's reason."""
    why = []
    for family in offered_families(config, spec.op, spec.device_type):
        problem = family.problem_for(spec)
        if not isinstance(problem, str):
            return None
        why.append(f"{family.FAMILY}: {problem}")
    return "; ".join(why) or f"no family enabled for {spec.op} serves this target and device"
