"""The graph Dynamo hands a backend: what a pre-grad pass (rms_norm_op, topk_op) sees."""

from __future__ import annotations

import torch


def pre_grad_graph(fn, *args, grad: bool = False) -> tuple[torch.fx.GraphModule, list]:
    """``fn``'s Dynamo graph (example values in its nodes' meta) and the inputs it is called with."""
    captured = []

    def backend(gm, example_inputs):
        captured.append((gm, example_inputs))
        return gm

    torch._dynamo.reset()
    with torch.set_grad_enabled(grad):
        torch.compile(fn, backend=backend)(*args)
    return captured[0]
