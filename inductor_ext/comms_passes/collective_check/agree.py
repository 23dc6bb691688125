"""The run-time side of the collective check: ranks agree on a graph's collective sequence.

``inductor_ext::collective_check(spec, device)`` sits at the top of every compiled graph that
holds collectives (``graph_pass.py`` puts it there and orders the graph's collectives after it).
At its first call in a process it exchanges, per process group the graph uses, a 16-byte digest
of the graph's sequence on that group with ONE ``all_gather_into_tensor`` (``world x 16`` bytes);
later calls return at once. When the digests differ, the ranks exchange their full descriptions
(only then) and every rank raises ``CollectiveMismatchError`` naming the first differing
collective on each side: what it is, its FX node and the user's source line. Without the check
those ranks would hang in the first collective they disagree on, or exchange wrong data.

Process groups of the ``fake`` backend (tests, cost-model reports) never communicate: skipped.
A rank that never reaches the check (its graph has no collective on that group) makes the others
wait ``timeout`` seconds, then raise saying so, instead of hanging.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.fx.node import has_side_effect

from inductor_ext.comms_passes.collective_check.fingerprint import GraphCollectives, first_difference

__all__ = ["CollectiveMismatchError", "verify", "check_op", "stats", "DEFAULT_TIMEOUT_S"]

log = logging.getLogger("inductor_ext.comms_passes.collective_check")

DEFAULT_TIMEOUT_S = 300.0
_DIGEST_BYTES = 16


class CollectiveMismatchError(RuntimeError):
    """Ranks of one process group compiled graphs that issue different collectives."""


# spec text -> parsed description; specs verified in this process; what the checks cost
_parsed: dict[str, GraphCollectives] = {}
_verified: set[str] = set()
_code_files: dict[str, GraphCollectives] = {}  # Inductor output module -> its graph (flight recorder)
stats: dict[str, Any] = {"checks": 0, "collectives": 0, "seconds": 0.0, "calls": 0}


def _backend(pg: Any) -> str:
    try:
        return str(dist.get_backend(pg))
    except Exception:  # a group without a registered backend (e.g. a ProcessGroup subclass)
        return ""


def _device(pg: Any) -> torch.device:
    from torch.distributed.distributed_c10d import _get_object_coll_device

    return torch.device(_get_object_coll_device(pg))


def _group(name: str) -> Any:
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(name)


def _caller_code_file() -> str | None:
    """The file of the compiled graph's code that called the check (Inductor's output module)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    root = os.path.realpath(cache_dir()) + os.sep
    f = sys._getframe(1)
    while f is not None:
        if os.path.realpath(f.f_code.co_filename).startswith(root):
            return f.f_code.co_filename
        f = f.f_back
    return None


def verify(spec: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Agree with the other ranks of each group on ``spec`` (once per spec and process); a rank
    waits ``timeout_s`` for the others."""
    if spec in _verified:
        return
    graph = _parsed.get(spec)
    if graph is None:
        graph = _parsed[spec] = GraphCollectives.from_json(spec)
    code = _caller_code_file()
    if code is not None:
        _code_files[code] = graph
    t0 = time.perf_counter()
    try:
        for name in graph.groups():
            _agree(graph, name, timeout_s)
    finally:
        stats["seconds"] += time.perf_counter() - t0
    _verified.add(spec)


def _agree(graph: GraphCollectives, name: str, timeout_s: float) -> None:
    pg = _group(name)
    backend = _backend(pg)
    if backend in ("fake", ""):
        return
    size = dist.get_world_size(pg)
    device = _device(pg)
    mine = torch.frombuffer(bytearray(graph.digest(name)), dtype=torch.uint8).to(device)
    every = torch.empty(size * _DIGEST_BYTES, dtype=torch.uint8, device=device)
    work = dist.all_gather_into_tensor(every, mine, group=pg, async_op=True)
    stats["checks"] += 1
    stats["collectives"] += 1
    try:
        work.wait(timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as e:  # noqa: BLE001 - re-raised with what it means here
        raise CollectiveMismatchError(
            f"collective check of {graph.label or 'a compiled graph'} on process group {name!r}: not every rank "
            f"reached the check within {timeout_s:.0f} s ({type(e).__name__}: {e}). A rank whose compiled "
            "graph issues no collective on this group never gets here, and the ranks that do would hang in "
            "their first collective.") from e
    digests = every.cpu().view(size, _DIGEST_BYTES)
    if bool((digests == digests[0]).all()):
        return
    # Only now exchange the descriptions (every rank saw the mismatch, so every rank joins).
    texts: list[Any] = [None] * size
    dist.all_gather_object(texts, graph.to_json(), group=pg)
    stats["collectives"] += 2
    raise CollectiveMismatchError(mismatch_report(name, [GraphCollectives.from_json(t) for t in texts],
                                                  dist.get_rank(pg), dist.get_process_group_ranks(pg)))


def mismatch_report(group: str, graphs: list[GraphCollectives], me: int, ranks: list[int]) -> str:
    """The error text: per distinct sequence, the first collective where it leaves rank 0's."""
    seqs = [g.on(group) for g in graphs]
    ref = seqs[0]
    lines = [f"compiled graphs issue different collectives on process group {group!r} "
             f"(global ranks {ranks}); this is {graphs[me].label or 'a compiled graph'} on group rank {me}. "
             "They would hang in the first differing collective or exchange wrong data."]
    shown: set[tuple] = set()
    for r, seq in enumerate(seqs):
        i = first_difference(ref, seq)
        if i is None or tuple(c.key() for c in seq) in shown:
            continue
        shown.add(tuple(c.key() for c in seq))
        lines.append(f"first difference: collective #{i} on this group (rank 0 issues {len(ref)}, "
                     f"rank {r} issues {len(seq)}):")
        for who, s in ((0, ref), (r, seq)):
            if i < len(s):
                c = s[i]
                lines.append(f"  rank {who}: {c.what()}\n      {c.where()}")
            else:
                lines.append(f"  rank {who}: nothing (its graph ends after {len(s)} collectives)")
        if i < len(ref) and i < len(seq):  # what() leaves some fields out (the op overload)
            lines.append(f"  they differ in {', '.join(ref[i].differences(seq[i]))}")
    lines.append('The check runs at the first call of each compiled graph; options={"collective_check": False} '
                 "turns it off.")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The op the graph pass inserts. Defined with torch.library directly (not ``custom_op``): every
# later call of a compiled graph pays its dispatch, and this path costs less than half.

_lib = torch.library.Library("inductor_ext", "FRAGMENT")
_lib.define("collective_check(str spec, Device device, float timeout_s) -> Tensor")


def check_op(spec: str, device: torch.device, timeout_s: float) -> torch.Tensor:
    """Verify ``spec`` with the other ranks (first call only); returns an empty ordering token."""
    stats["calls"] += 1
    if spec not in _verified:
        verify(spec, timeout_s)
    return torch.empty(0, dtype=torch.uint8, device=device)


_lib.impl("collective_check", check_op, "CompositeExplicitAutograd")


@torch.library.register_fake("inductor_ext::collective_check", lib=_lib)
def _(spec: str, device: torch.device, timeout_s: float) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=device)


# It talks to other processes: never dead code, even though nothing reads its token's values.
has_side_effect(torch.ops.inductor_ext.collective_check.default)
