"""Whether the FX node being lowered is returned by the graph (itself or through views).

Inductor plans each call's buffers: an op's output may reuse one that died earlier in the call,
but a returned output escapes to the caller and is fresh memory in every call (a large one is
mapped anew and faulted in page by page as the kernel writes it). A GPT-2 prefill's vocabulary
GEMM (512x50257 bf16, 51 MB, returned) took 96 ms into a reused buffer and 107 ms into fresh
pages, while oneDNN's packed linear, which allocates its own output, took 106: timed into a
reused buffer, ATen's mm beat it by 9%, and inside the graph it ran 9% slower
(``lowering/cold_timing.py`` times such a choice into fresh pages).
"""

from __future__ import annotations

import torch


# a view whose schema does not say it aliases its input (it does: no copy)
_UNFLAGGED_VIEWS = (torch.ops.aten._unsafe_view.default,)


def _is_view(node: torch.fx.Node) -> bool:
    target = node.target
    return node.op == "call_function" and (bool(getattr(target, "is_view", False)) or target in _UNFLAGGED_VIEWS)


def returned(node: torch.fx.Node | None) -> bool:
    """Whether ``node``'s value, or a view of it, is one of its graph's outputs; False for None."""
    pending, seen = [node] if node is not None else [], set()
    while pending:
        current = pending.pop()
        for user in current.users:
            if user.op == "output":
                return True
            if user not in seen and _is_view(user):
                seen.add(user)
                pending.append(user)
    return False
