"""Moves of the pipeline plan (``plan.py``): where receives, send waits and FSDP UNSHARDs go in a
lowered schedule whose compute order stays 2.15's. ``_defer_recvs`` posts each receive k compute
actions before its consumer (per-peer FIFO and 2.15's rank-parity rule kept); ``_place_waits``
puts each send wait at the earliest point where the transfer is done in the timing model or the
receive is known posted, enforcing a send budget with forced waits checked for deadlock;
``spread_unshards`` moves UNSHARDs into idle steps (warmup bubble first). ``search.py`` chooses
among these moves.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from torch.distributed.pipelining.schedules import _Action, _ComputationType

from inductor_ext.comms_passes.pipeline.ir import (
    COMPUTE, DEFAULT_P2P_LATENCY, _infer_topology, _key, _parts, PlanDeadlockError, RECVS, RESHARD, SEND_F,
    SENDS, _Topology, _transfer, UNSHARD, WAIT_SEND_B, WAIT_SEND_F, WAITS,
)
from inductor_ext.comms_passes.pipeline.sim import simulate, _Trace


LookaheadSpec = int | None | Callable[[int, tuple[str, int, int]], int | None]


def _defer_recvs(
    actions: dict[int, list[_Action]], topo: _Topology, lookahead: LookaheadSpec
) -> dict[int, list[_Action]]:
    """Post each RECV ``lookahead`` compute actions before its consumer (never earlier than now).

    ``lookahead`` may be a function of (rank, transfer); None keeps the receive where it is.

    Keeps, per (rank, peer), the receives in their original order (P2P matches FIFO per peer),
    and applies 2.15's rank-parity rule: a rank lower than its peer posts a receive from the
    peer before any later send to that peer.
    """
    out: dict[int, list[_Action]] = {}
    for rank, lst in actions.items():
        anchors: list[_Action] = []
        recvs: list[tuple[_Action, int]] = []  # (recv, original anchor index)
        for a in lst:
            if a.computation_type in RECVS:
                recvs.append((a, len(anchors)))
            else:
                anchors.append(a)
        compute_idx = [i for i, a in enumerate(anchors) if a.is_compute_op]
        consumer: dict[tuple[str, int, int], int] = {}
        for i, a in enumerate(anchors):
            for p in _parts(a):
                if p.computation_type in COMPUTE:
                    t = topo.remote_input(p)
                    if t is not None:
                        consumer.setdefault(t, i)
        deadline: list[int] = []
        for recv, orig in recvs:
            t = _transfer(recv)
            if t not in consumer:
                raise ValueError(f"rank {rank}: {recv} has no consumer")
            c = consumer[t]
            la = lookahead(rank, t) if callable(lookahead) else lookahead
            if la is None:
                deadline.append(orig)
                continue
            ci = compute_idx.index(c)
            d = compute_idx[max(0, ci - la)] if la > 0 else c
            d = min(d, c)
            peer = topo.recv_peer(recv)
            if rank < peer:  # parity rule: before the next send to that peer
                for i in range(orig, len(anchors)):
                    a = anchors[i]
                    if a.computation_type in SENDS and topo.send_peer(a) == peer:
                        d = min(d, i)
                        break
            deadline.append(max(d, orig))
        # per-peer FIFO: a receive may not pass a later receive from the same peer
        nxt: dict[int, int] = {}
        for j in range(len(recvs) - 1, -1, -1):
            peer = topo.recv_peer(recvs[j][0])
            if peer in nxt:
                deadline[j] = min(deadline[j], nxt[peer])
            nxt[peer] = deadline[j]
        before: dict[int, list[_Action]] = defaultdict(list)
        for (recv, _), d in zip(recvs, deadline):
            before[d].append(recv)
        new: list[_Action] = []
        for i, a in enumerate(anchors):
            new.extend(before.pop(i, ()))
            new.append(a)
        for i in sorted(before):
            new.extend(before[i])
        out[rank] = new
    return out


def _strip_waits(actions: Mapping[int, Sequence[_Action]]) -> dict[int, list[_Action]]:
    return {r: [a for a in lst if a.computation_type not in WAITS] for r, lst in actions.items()}


def _wait_action(send: tuple[_ComputationType, int, int]) -> _Action:
    ct, s, m = send
    return _Action(s, WAIT_SEND_F if ct == SEND_F else WAIT_SEND_B, m)


def _insert_forced(
    base: dict[int, list[_Action]], forced: dict[int, dict[tuple, tuple]]
) -> dict[int, list[_Action]]:
    """Insert forced waits right before their anchor SEND (anchor keyed by action key)."""
    out: dict[int, list[_Action]] = {}
    for r, lst in base.items():
        by_anchor: dict[tuple, list[tuple]] = defaultdict(list)
        for send, anchor in forced.get(r, {}).items():
            by_anchor[anchor].append(send)
        new: list[_Action] = []
        sent: set[tuple] = set()
        for a in lst:
            for send in sorted(by_anchor.get(_key(a), ()), key=lambda k: (k[0].value, k[1], k[2])):
                if send not in sent:  # the anchor moved ahead of the send (receive levels)
                    raise ValueError(f"rank {r}: wait for {send} would precede its send")
                new.append(_wait_action(send))
            if a.computation_type in SENDS:
                sent.add(_key(a))
            new.append(a)
        out[r] = new
    return out


def _place_natural_waits(
    lists: dict[int, list[_Action]], topo: _Topology, costs, latency
) -> tuple[dict[int, list[_Action]], _Trace]:
    """Add a wait for every send without one, right after the first position at which the
    matching receive is known to be posted: by happens-before, or because the timing model
    has the transfer done by then (non-stalling under the model; deadlock-free either way).
    At the end of the list if never."""
    trace = simulate(lists, costs=costs, p2p_latency=latency, _topo=topo)
    out: dict[int, list[_Action]] = {}
    for r, lst in lists.items():
        waited = {_transfer(a) for a in lst if a.computation_type in WAITS}
        after: dict[int, list[_Action]] = defaultdict(list)
        for p, a in enumerate(lst):
            if a.computation_type not in SENDS:
                continue
            t = _transfer(a)
            if t in waited:
                continue
            place = len(lst) - 1
            t_recv = trace.recv_at[t][2]
            done = max(t_recv, trace.send_at[t][2]) + latency
            for q in range(p + 1, len(lst)):
                # (a) timing: the transfer is done before action q starts (q may start late
                # because it waits for data anyway), so a wait right before q stalls nothing;
                # the receive's causal past ends before q's time, so no cycle either
                start_q = trace.start[r][q]
                if done <= start_q and t_recv < start_q:
                    place = q - 1
                    break
                # (b) happens-before: the receive is posted before q completes
                if trace.recv_known_at(r, q, t):
                    place = q
                    break
            after[place].append(_wait_action(_key(a)))
        new: list[_Action] = []
        for p, a in enumerate(lst):
            new.append(a)
            new.extend(after.get(p, ()))
        out[r] = new
    return out, trace


def _place_waits(
    base: dict[int, list[_Action]],
    topo: _Topology,
    max_outstanding_sends: int | None,
    costs,
    latency,
    early: Mapping[int, Mapping[tuple, tuple]] | None = None,
) -> tuple[dict[int, list[_Action]], _Trace]:
    """Place every send's wait: ``early`` ones right before their anchor action, budget-forced
    ones before the send that would exceed ``max_outstanding_sends``, the rest as early as
    they do not stall (``_place_natural_waits``)."""
    if max_outstanding_sends is not None and max_outstanding_sends < 1:
        raise ValueError("max_outstanding_sends must be >= 1 for the ext plan")
    forced: dict[int, dict[tuple, tuple]] = defaultdict(dict)
    for r, m in (early or {}).items():
        forced[r].update(m)
    def violations(lists: dict[int, list[_Action]], trace: _Trace, batch: bool):
        """Budget violations as (rank, anchor SEND, chosen pending send); the pending send
        expected to complete first is chosen (least stall). With ``batch``, one scan fixes
        every violation assuming the earlier fixes; otherwise only the first is returned."""
        found = []
        for r in sorted(lists):
            pending: dict[tuple, tuple] = {}
            for a in lists[r]:
                ct = a.computation_type
                if ct in SENDS:
                    while len(pending) >= max_outstanding_sends:
                        t, send_key = min(
                            pending.items(),
                            key=lambda kv: trace.recv_at[kv[0]][2]
                            if kv[0] in trace.recv_at else math.inf,
                        )
                        found.append((r, a, send_key, dict(pending)))
                        if not batch:
                            return found
                        del pending[t]
                    pending[_transfer(a)] = _key(a)
                elif ct in WAITS:
                    pending.pop(_transfer(a), None)
        return found

    batch = True
    while True:
        lists = _insert_forced(base, forced)
        # natural waits do not stall in the model, so the trace before them keeps its times
        lists, trace = _place_natural_waits(lists, topo, costs, latency)
        if max_outstanding_sends is None:
            return lists, trace
        found = violations(lists, trace, batch)
        if not found:
            return lists, trace
        if batch:
            trial = {r: dict(m) for r, m in forced.items()}
            for r, anchor, send_key, _ in found:
                trial.setdefault(r, {})[send_key] = _key(anchor)
            try:
                simulate(_insert_forced(base, trial), costs=costs, p2p_latency=latency, _topo=topo)
            except PlanDeadlockError:
                batch = False  # fix one at a time, trying every pending send
                continue
            forced = defaultdict(dict, trial)
            continue
        r, anchor, _, pending = found[0]
        cands = sorted(
            pending.items(),
            key=lambda kv: trace.recv_at[kv[0]][2] if kv[0] in trace.recv_at else math.inf,
        )
        for _, send_key in cands:
            trial_r = {**forced[r], send_key: _key(anchor)}
            test = {**forced, r: trial_r}
            try:
                simulate(_insert_forced(base, test), costs=costs, p2p_latency=latency, _topo=topo)
            except PlanDeadlockError:
                continue
            forced[r] = trial_r
            batch = True
            break
        else:
            raise ValueError(
                f"cannot satisfy max_outstanding_sends={max_outstanding_sends} on rank {r} "
                f"before {anchor} without a deadlock"
            )


def spread_unshards(
    actions: Mapping[int, Sequence[_Action]],
    *,
    max_active_stages: int = 3,
    unshard_cost: float = 1.0,
    trace: _Trace | None = None,
    stage_to_rank: Mapping[int, int] | None = None,
    costs: Mapping[_ComputationType, float] | None = None,
    p2p_latency: float = DEFAULT_P2P_LATENCY,
) -> tuple[dict[int, list[_Action]], dict[int, list[tuple[int, int, int]]]]:
    """Move FSDP UNSHARDs earlier into idle steps (the warmup bubble first).

    An UNSHARD of stage s may move to just before a compute action that the timing model shows
    starting after an idle gap, provided the move stays after the previous RESHARD of s, stays
    before s's next compute (it only moves earlier) and keeps at most ``max_active_stages``
    stages unsharded at every point. UNSHARDs are served in list order (order of need); each
    idle gap takes ``ceil(gap / unshard_cost)`` of them, so they spread over the bubble.
    Returns the new lists and, per rank, (stage, old position, new position) of every move.
    """
    lists = {r: [a for a in lst if a is not None] for r, lst in actions.items()}
    topo = _infer_topology(lists, stage_to_rank)
    if trace is None:
        trace = simulate(lists, costs=costs, p2p_latency=p2p_latency, _topo=topo)
    out: dict[int, list[_Action]] = {}
    moves: dict[int, list[tuple[int, int, int]]] = {}
    for r, lst in lists.items():
        # idle gaps before compute actions
        gaps: dict[int, int] = {}
        prev_end = 0.0
        for p, a in enumerate(lst):
            if a.is_compute_op:
                gap = trace.start[r][p] - prev_end
                if gap > 1e-9:
                    gaps[p] = max(1, math.ceil(gap / unshard_cost - 1e-9))
                prev_end = trace.end[r][p]
        lst = list(lst)
        rank_moves: list[tuple[int, int, int]] = []
        p = 0
        while p < len(lst):
            a = lst[p]
            if a.computation_type != UNSHARD:
                p += 1
                continue
            s = a.stage_index
            lower = 0
            for q in range(p - 1, -1, -1):
                if lst[q].computation_type == RESHARD and lst[q].stage_index == s:
                    lower = q + 1
                    break
            # residency after each position (without this UNSHARD)
            active: set[int] = set()
            after: list[int] = []
            for q, b in enumerate(lst):
                if q != p:
                    if b.computation_type == UNSHARD:
                        active.add(b.stage_index)
                    elif b.computation_type == RESHARD:
                        active.discard(b.stage_index)
                after.append(len(active))
            target = None
            for q in sorted(gaps):
                if q >= p or gaps[q] <= 0 or q < lower:
                    continue
                # s becomes resident at q (before the action at q) through p-1
                before_q = after[q - 1] if q > 0 else 0
                if before_q + 1 > max_active_stages:
                    continue
                if all(after[x] + 1 <= max_active_stages for x in range(q, p)):
                    target = q
                    break
            if target is None:
                p += 1
                continue
            gaps[target] -= 1
            lst.pop(p)
            lst.insert(target, a)
            # positions of later gaps shift by one
            gaps = {(q + 1 if target <= q < p else q): c for q, c in gaps.items()}
            rank_moves.append((s, p, target))
            p += 1
        out[r] = lst
        moves[r] = rank_moves
    return out, moves


def _unshard_moves(
    before: Sequence[_Action], after: Sequence[_Action]
) -> list[tuple[int, int, int]]:
    """(stage, computes before it in ``before``, in ``after``) per moved UNSHARD."""

    def where(lst: Sequence[_Action]) -> list[tuple[int, int]]:
        out, n = [], 0
        for a in lst:
            if a.is_compute_op:
                n += 1
            elif a.computation_type == UNSHARD:
                out.append((a.stage_index, n))
        return out

    old, new = where(before), where(after)
    seen: dict[int, int] = defaultdict(int)
    moves = []
    by_stage_new: dict[int, list[int]] = defaultdict(list)
    for s, n in new:
        by_stage_new[s].append(n)
    for s, n in old:
        k = seen[s]
        seen[s] += 1
        m = by_stage_new[s][k]
        if m != n:
            moves.append((s, n, m))
    return moves
