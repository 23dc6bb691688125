"""Execution model of lowered pipeline action lists: a timing model, happens-before (vector
clocks) between ranks, and deadlock detection."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch.distributed.pipelining.schedules import _Action, _ComputationType

from inductor_ext.comms_passes.pipeline.ir import (
    COMPUTE, DEFAULT_COSTS, DEFAULT_P2P_LATENCY, _infer_topology, _parts, PlanDeadlockError,
    RECVS, SENDS, _Topology, _transfer, WAITS,
)

# --------------------------------------------------------------------------------------------
# execution model: timing + happens-before (vector clocks) + deadlock detection


@dataclass
class _Trace:
    start: dict[int, list[float]]
    end: dict[int, list[float]]
    vc: dict[int, list[tuple[int, ...]]]
    recv_at: dict[tuple[str, int, int], tuple[int, int, float]]  # transfer -> (rank, pos, time)
    send_at: dict[tuple[str, int, int], tuple[int, int, float]]
    makespan: float
    rank_index: dict[int, int]

    def recv_known_at(self, rank: int, pos: int, transfer: tuple[str, int, int]) -> bool:
        """Whether the receive of ``transfer`` is posted before ``pos`` of ``rank`` ends."""
        r_rank, r_pos, _ = self.recv_at[transfer]
        return self.vc[rank][pos][self.rank_index[r_rank]] >= r_pos


def simulate(
    actions: Mapping[int, Sequence[_Action]],
    stage_to_rank: Mapping[int, int] | None = None,
    *,
    num_stages: int | None = None,
    costs: Mapping[_ComputationType, float] | None = None,
    p2p_latency: float = DEFAULT_P2P_LATENCY,
    _topo: _Topology | None = None,
) -> _Trace:
    """Run the action lists of all ranks on the dependency model and time them.

    Model: SEND/RECV/UNSHARD/RESHARD post work and return; a compute action blocks until every
    transfer it consumes was sent and received (``max(send, recv post) + p2p_latency``); a
    WAIT_SEND blocks until the peer posted the matching receive (rendezvous transfer). Raises
    ``PlanDeadlockError`` when no rank can proceed; that check does not depend on the costs.
    """
    acts = {r: [a for a in lst if a is not None] for r, lst in actions.items()}
    topo = _topo or _infer_topology(acts, stage_to_rank, num_stages)
    costs = dict(DEFAULT_COSTS if costs is None else costs)
    ranks = sorted(acts)
    ridx = {r: i for i, r in enumerate(ranks)}
    nr = len(ranks)
    ptr = dict.fromkeys(ranks, 0)
    clock = dict.fromkeys(ranks, 0.0)
    vcur = {r: [-1] * nr for r in ranks}
    start: dict[int, list[float]] = {r: [] for r in ranks}
    end: dict[int, list[float]] = {r: [] for r in ranks}
    vcs: dict[int, list[tuple[int, ...]]] = {r: [] for r in ranks}
    send_at: dict[tuple[str, int, int], tuple[int, int, float]] = {}
    recv_at: dict[tuple[str, int, int], tuple[int, int, float]] = {}
    send_vc: dict[tuple[str, int, int], tuple[int, ...]] = {}
    recv_vc: dict[tuple[str, int, int], tuple[int, ...]] = {}
    posted: dict[int, set[tuple[str, int, int]]] = {r: set() for r in ranks}

    # per action: (deps, cost, sends, recvs), computed once
    info: dict[int, list[tuple[list, float, list, list]]] = {}
    for r in ranks:
        rows = []
        for a in acts[r]:
            deps: list[tuple[str, tuple[str, int, int]]] = []
            sends: list[tuple[str, int, int]] = []
            recvs: list[tuple[str, int, int]] = []
            cost = 0.0
            for p in _parts(a):
                ct = p.computation_type
                cost += costs.get(ct, 0.0)
                if ct in COMPUTE:
                    t = topo.remote_input(p)
                    if t is not None:
                        deps.append(("send", t))
                elif ct in WAITS:
                    deps.append(("recv", _transfer(p)))
                elif ct in SENDS:
                    sends.append(_transfer(p))
                elif ct in RECVS:
                    recvs.append(_transfer(p))
            rows.append((deps, cost, sends, recvs))
        info[r] = rows

    remaining = sum(len(v) for v in acts.values())
    while remaining:
        progressed = False
        for r in ranks:
            lst = acts[r]
            rows = info[r]
            while ptr[r] < len(lst):
                pos = ptr[r]
                deps, cost, sends, recvs = rows[pos]
                blocked = False
                for kind, t in deps:
                    if kind == "send":
                        if t not in posted[r]:
                            raise ValueError(
                                f"rank {r}: {lst[pos]} consumes {t} before its RECV was posted"
                            )
                        if t not in send_at:
                            blocked = True
                            break
                    elif t not in recv_at:
                        blocked = True
                        break
                if blocked:
                    break
                ready = clock[r]
                v = vcur[r]
                for kind, t in deps:
                    ready = max(ready, max(send_at[t][2], recv_at[t][2]) + p2p_latency)
                    other = send_vc[t] if kind == "send" else recv_vc[t]
                    v = [x if x >= y else y for x, y in zip(v, other)]
                else:
                    v = list(v)
                v[ridx[r]] = pos
                vcur[r] = v
                start[r].append(ready)
                clock[r] = ready + cost
                end[r].append(clock[r])
                snap = tuple(v)
                vcs[r].append(snap)
                for t in sends:
                    send_at[t] = (r, pos, ready)
                    send_vc[t] = snap
                for t in recvs:
                    recv_at[t] = (r, pos, ready)
                    recv_vc[t] = snap
                    posted[r].add(t)
                ptr[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            blocked = {
                r: str(acts[r][ptr[r]]) for r in ranks if ptr[r] < len(acts[r])
            }
            raise PlanDeadlockError(f"pipeline action lists deadlock; blocked at {blocked}")
    makespan = max((e[-1] for e in end.values() if e), default=0.0)
    return _Trace(start, end, vcs, recv_at, send_at, makespan, ridx)


def p2p_order_violations(
    actions: Mapping[int, Sequence[_Action | None]],
    stage_to_rank: Mapping[int, int] | None = None,
) -> list[str]:
    """Rank pairs whose receives are posted in another order than the sends are issued.

    Point-to-point messages between two ranks (same group, same tag) match in issue order, so a
    receive posted out of order gets another microbatch's (or stage's) tensor: silently wrong
    when the shapes agree. Returns one line per mismatching (sender, receiver) pair.
    """
    acts = {r: [a for a in lst if a is not None] for r, lst in actions.items()}
    topo = _infer_topology(acts, stage_to_rank)
    sends: dict[tuple[int, int], list] = defaultdict(list)
    recvs: dict[tuple[int, int], list] = defaultdict(list)
    for r, lst in acts.items():
        for a in lst:
            for p in _parts(a):
                if p.computation_type in SENDS:
                    sends[(r, topo.send_peer(p))].append(_transfer(p))
                elif p.computation_type in RECVS:
                    recvs[(topo.recv_peer(p), r)].append(_transfer(p))
    out = []
    for pair in sorted(set(sends) | set(recvs)):
        a, b = sends.get(pair, []), recvs.get(pair, [])
        if a != b:
            i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            out.append(
                f"rank {pair[0]} -> rank {pair[1]}: message {i} is sent as "
                f"{a[i] if i < len(a) else None} but received as {b[i] if i < len(b) else None}"
            )
    return out


