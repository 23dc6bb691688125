"""The cost-model figures of a communication schedule: ``evaluate`` (exposed communication,
makespan, collectives, peak bytes in flight and peak memory of graphs run in a given node order,
and whether the order reads a bucket buffer before its copy-out), ``unhideable_ms`` (what no
schedule of those graphs hides) and ``add_arm_to_trace`` (the timeline as a Chrome/Perfetto
trace). The comms report (``schedule_comparison.py``) and tests/test_comms.py compare schedules
with them; every figure comes from the analytical model (``cost_model.py``), not a measurement.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from inductor_ext.comms_passes.cost_model import (
    AnalyticalCostModel, Timeline, collective_info, is_wait, node_duration, simulate, uninitialized_reads,
    wait_collective,
)

__all__ = ["evaluate", "unhideable_ms", "add_arm_to_trace"]


def evaluate(orders: Sequence[Sequence[torch.fx.Node]], model: AnalyticalCostModel, world: int,
             ready: Sequence[dict[str, float]] | None = None) -> dict[str, Any]:
    """The cost-model figures of one arm: its graphs' node orders, run one after the other
    (``ready``: per graph, when prefetched inputs are done; see ``simulate``)."""
    total = Timeline()
    per_graph = []
    stale: list[str] = []
    for k, nodes in enumerate(orders):
        tl = simulate(nodes, model, world, ready=ready[k] if ready else None)
        total = total + tl
        per_graph.append(tl)
        stale += [f"{r.name} reads {b.name}" for r, b in uninitialized_reads(nodes)]
    return {
        "exposed_comm_ms": total.exposed * 1e3, "makespan_ms": total.makespan * 1e3,
        "compute_ms": total.compute * 1e3, "comm_ms": total.communication * 1e3,
        "collectives": total.collectives, "by_kind": total.by_kind,
        "peak_in_flight_bytes": total.peak_in_flight, "peak_memory_bytes": total.peak_memory,
        "valid": not stale, "invalid_reason": (f"{len(stale)} reads of uninitialised bucket buffers "
                                              f"before their copy-out, e.g. {stale[0]}") if stale else None,
        "per_graph": [{"exposed_comm_ms": t.exposed * 1e3, "makespan_ms": t.makespan * 1e3,
                       "collectives": t.collectives, "peak_memory_bytes": t.peak_memory} for t in per_graph],
    }


def unhideable_ms(graphs: Sequence[torch.fx.GraphModule], model: AnalyticalCostModel, world: int,
                  ready: Sequence[dict[str, float]] | None = None) -> float:
    """Communication no schedule of these graphs hides (keeping compute and per-kind collective order).

    Per graph: the first collective waited on, minus the compute that does not depend on any
    collective (all of it could run first); and the last reduce-scatter, which the last gradient
    feeds, minus the compute that does not lead to it. A prefetched input (``ready``) counts
    with what is left of its gather when the graph starts.
    """
    total = 0.0
    for k, gm in enumerate(graphs):
        nodes = list(gm.graph.nodes)
        dep: set[torch.fx.Node] = set()
        free = 0.0
        first_wait = None
        for n in nodes:
            info = collective_info(n, world)
            if info is not None or is_wait(n) or any(a in dep for a in n.all_input_nodes):
                dep.add(n)
                if first_wait is None and is_wait(n):
                    first_wait = wait_collective(n)
            else:
                free += model.node_time(n)
        if first_wait is not None:
            left = (ready[k].get(first_wait.name, 0.0) if ready and first_wait.op == "placeholder"
                    else node_duration(model, first_wait, world))
            total += max(0.0, left - free)
        rs = [n for n in nodes if (i := collective_info(n, world)) is not None and i.kind == "reduce_scatter"]
        if rs:
            last = rs[-1]
            anc: set[torch.fx.Node] = set()
            stack = list(last.all_input_nodes)
            while stack:
                a = stack.pop()
                if a not in anc:
                    anc.add(a)
                    stack.extend(a.all_input_nodes)
            pos = {n: i for i, n in enumerate(nodes)}
            after = sum(model.node_time(n) for n in nodes if n not in anc and n is not last
                        and collective_info(n, world) is None and not is_wait(n) and pos[n] > max(
                            (pos[a] for a in anc), default=0))
            total += max(0.0, node_duration(model, last, world) - after)
    return total * 1e3


def add_arm_to_trace(trace: Any, arm: str, kinds: Sequence[str], orders: Sequence[Sequence[torch.fx.Node]],
                     cm: AnalyticalCostModel, world: int, ready: Sequence[dict[str, float]] | None = None) -> None:
    """The arm's graphs one after the other on rank 0's compute stream and one communication stream
    per process group, with the estimated live bytes as a counter (every rank of this SPMD model
    runs the same schedule)."""
    from inductor_ext.comms_passes.cost_model import Span

    pid = trace.process(f"{arm} (rank 0)")
    graphs, compute = trace.thread(pid, "graph"), trace.thread(pid, "compute")
    offset = 0.0
    for k, (kind, order) in enumerate(zip(kinds, orders)):
        spans: list[Span] = []
        tl = simulate(order, cm, world, record=spans, ready=ready[k] if ready else None)
        us = lambda x: (offset + x) * 1e6  # noqa: E731
        trace.slice(pid, graphs, f"{kind} graph", us(0.0), tl.makespan * 1e6, "graph",
                    exposed_comm_ms=tl.exposed * 1e3, peak_memory_GiB=tl.peak_memory / 2**30)
        for sp in spans:
            if sp.stream == "memory":
                trace.counter(pid, "live memory", us(sp.start), GiB=sp.args["bytes"] / 2**30)
            elif sp.stream == "compute":
                trace.slice(pid, compute, sp.name, us(sp.start), (sp.end - sp.start) * 1e6, "compute", **sp.args)
            elif sp.stream == "wait":
                trace.slice(pid, compute, sp.name, us(sp.start), (sp.end - sp.start) * 1e6, "exposed communication")
            else:
                tid = trace.thread(pid, f"communication (group {sp.stream.split()[1]})")
                trace.slice(pid, tid, sp.name, us(sp.start), (sp.end - sp.start) * 1e6, "communication", **sp.args)
        offset += tl.makespan
