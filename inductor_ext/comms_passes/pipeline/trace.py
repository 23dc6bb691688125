"""A schedule's action lists as a Chrome/Perfetto trace: per rank a compute track, communication
lanes (each transfer from its post to its end, on the sender and on the receiver), and the live
bytes of its pipeline buffers as a counter. Times are the timing model's (F = 1 unit, shown as
1 ms); buffer lifetimes are those the peaks are computed from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch.distributed.pipelining.schedules import _Action

from inductor_ext.comms_passes.chrome_trace import ChromeTrace
from inductor_ext.comms_passes.pipeline.buffers import buffer_intervals
from inductor_ext.comms_passes.pipeline.ir import (
    COMPUTE, DEFAULT_P2P_LATENCY, RECVS, SENDS, SizeSpec, _infer_topology, _parts, _transfer,
)
from inductor_ext.comms_passes.pipeline.sim import simulate

__all__ = ["add_schedule"]

UNIT_US = 1000.0  # one timing-model unit (a forward) as 1 ms


def add_schedule(trace: ChromeTrace, label: str, actions: Mapping[int, Sequence[_Action | None]],
                 sizes: SizeSpec, *, stage_to_rank: Mapping[int, int] | None = None,
                 slot_backed: bool = False, latency: float = DEFAULT_P2P_LATENCY) -> None:
    """Add one process per rank (``label rank r``) for the lowered ``actions``.

    ``slot_backed``: buffer lifetimes as ext's plan has them (receive slots; no lingering inputs,
    no ``.grad`` copies of sent gradients), otherwise as 2.15 runs them.
    """
    acts = {r: [a for a in lst if a is not None] for r, lst in actions.items()}
    topo = _infer_topology(acts, stage_to_rank)
    sim = simulate(acts, topo.stage_to_rank, p2p_latency=latency)
    done = {t: max(sim.send_at[t][2], sim.recv_at[t][2]) + latency for t in sim.send_at if t in sim.recv_at}
    for r in sorted(acts):
        pid = trace.process(f"{label} rank {r}")
        compute = trace.thread(pid, "compute")
        comm: list[tuple[float, float, str, dict[str, Any]]] = []
        for p, a in enumerate(acts[r]):
            start, end = sim.start[r][p] * UNIT_US, sim.end[r][p] * UNIT_US
            if any(x.computation_type in COMPUTE for x in _parts(a)):
                trace.slice(pid, compute, str(a), start, end - start, "compute")
            for x in _parts(a):
                if x.computation_type in SENDS + RECVS:
                    t = _transfer(x)
                    finish = done.get(t, sim.end[r][p]) * UNIT_US
                    comm.append((start, max(start, finish), str(x), {"transfer": f"{t[0]} to stage {t[1]} mb {t[2]}"}))
        trace.lanes(pid, "communication", comm, "communication")
        # live bytes: +size at the start of the action that allocates, -size after the one that frees
        ivs = buffer_intervals(acts[r], rank=r, stage_to_rank=topo.stage_to_rank, num_stages=topo.num_stages,
                               sizes=sizes, linger_last_stage_inputs=not slot_backed,
                               input_grad_until_weight=not slot_backed)
        changes: dict[float, int] = {0.0: 0}
        for iv in ivs:
            t0 = sim.start[r][iv.start] * UNIT_US
            t1 = sim.end[r][iv.end] * UNIT_US
            changes[t0] = changes.get(t0, 0) + iv.nbytes
            changes[t1] = changes.get(t1, 0) - iv.nbytes
        live = 0
        for ts in sorted(changes):
            live += changes[ts]
            trace.counter(pid, "pipeline buffers", ts, MiB=live / 2**20)
