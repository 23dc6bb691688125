"""Static buffer plan for torch.distributed.pipelining schedules.

The pass reads the lowered schedule IR of ``torch.distributed.pipelining`` (``_Action`` lists with
F/I/W/B compute and SEND_F/RECV_F/SEND_B/RECV_B/WAIT_SEND_*/UNSHARD/RESHARD actions, as produced
by ``_PipelineScheduleRuntime._prepare_schedule_with_comms``) and computes, for every pipeline
rank, when each pipeline buffer is allocated and freed and which reusable slot holds it.

Buffers (per stage ``s`` and microbatch ``m``; sizes come from the activation shape/dtype), with
the lifetimes 2.15 gives them (``buffer_intervals``; replayed figures equal live bytes measured on
2 gloo ranks, see bench/pipeline_buffers.py):

* ``recv_act``  the forward receive buffer. 2.15 allocates it in ``_RecvInfo.allocate_buffer``
  when RECV_F runs; it becomes the stage's input leaf and lives until the backward that consumes
  it (B, or W when input and weight backward are split). On the last stage with a full backward
  the loss keeps the input leaf reachable until the step ends, so that storage lingers.
* ``recv_grad`` the backward receive buffer: RECV_B .. B, or .. W when split (the weight
  backward needs it).
* ``out_act``   the forward output of a non-last stage: F .. the WAIT_SEND_F of its send
  (``release_fwd_send_outputs``; assumes the stage's own autograd graph does not save its output,
  e.g. the stage ends with a Linear). If still live at an input backward, ``backward_state``
  keeps the tensor until W.
* ``out_grad``  the input gradient of a non-first stage: B/I .. WAIT_SEND_B; after an input
  backward 2.15 also leaves it in the input leaf's ``.grad`` until W.

What 2.15 already does and what this pass adds:

* 2.15 (runtime schedules) posts every RECV as early as its lowering can, waits for a forward
  send after the local backward of that microbatch and for every backward send at the end of the
  step; ``defer_pp_recv`` moves each RECV right before its consumer; ``max_outstanding_sends=k``
  moves waits so that at most k sends are pending (possibly stalling). ``ScheduleGPipe`` and
  ``Schedule1F1B`` run hand-written loops instead (``torch_single_stage_actions`` mirrors them).
* The plan (``plan_pipeline``) keeps 2.15's compute order and moves only receives, send waits
  and UNSHARDs: each wait goes to the earliest point where the transfer is done in the timing
  model or the receive is known posted by happens-before (no stall, no new dependency cycle);
  receives go k compute actions before their consumer, per direction, keeping per-peer FIFO order
  and 2.15's rank-parity rule; a send budget is enforced with forced waits checked for deadlock;
  a local search then moves single receives and waits where a rank's peak is, within a modelled
  time budget, and stops where no plan keeping the compute order goes lower (``lower_bound_bytes``,
  or within the time budget ``timed_bound.py``, which counts the transfer latency); FSDP UNSHARDs move into idle steps (warmup bubble first). Lifetimes are coloured
  into reusable slots per size class (optimal: slots == max overlap); receive slots are real
  tensors at run time (``apply_plan``), which also makes the last stage's lingering inputs
  harmless and drops the ``.grad`` copy of sent input gradients after an input backward.

Everything here is static: it only needs the action lists. ``apply_plan`` makes a real schedule
run the planned action list and back its receive buffers with the slots.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch.distributed.pipelining import schedules as _sched
from torch.distributed.pipelining.schedules import _Action, _ComputationType

from inductor_ext.comms_passes.pipeline.ir import (  # noqa: F401 (public API re-exported below)
    activation_bytes, BufferInterval, BufferKey, COMPUTE, DEFAULT_P2P_LATENCY, _has_comms,
    _infer_topology, _key, lower_compute_schedule, OUT_ACT, OUT_GRAD, _parts, PlanDeadlockError,
    POLICIES, RECV_ACT, RECV_B, RECV_GRAD, RECVS, RESHARD, schedule_compute_order, SEND_B,
    SEND_F, SENDS, SizeSpec, Slot, static_schedule, _Topology, torch_single_stage_actions,
    _transfer, UNSHARD, WAIT_SEND_B, WAIT_SEND_F, WAITS,
)
from inductor_ext.comms_passes.pipeline.sim import (  # noqa: F401 (public API re-exported below)
    p2p_order_violations, simulate, _Trace,
)
from inductor_ext.comms_passes.pipeline.buffers import (  # noqa: F401 (public API re-exported below)
    buffer_intervals, BufferPlan, colour_intervals, _live_curve, _live_peak, lower_bound_bytes,
    max_overlap, PipelineBufferPlan, _rank_plan,
)
from inductor_ext.comms_passes.pipeline.runtime import (  # noqa: F401 (public API re-exported below)
    apply_plan,
)
from inductor_ext.comms_passes.pipeline.timed_bound import TimedBoundOracle

# Kept importable from here as before the split (not in __all__): action kinds, the default
# relative costs and the handle apply_plan returns.
from inductor_ext.comms_passes.pipeline.ir import (  # noqa: F401,E402
    B, DEFAULT_COSTS, F, I, OVERLAP_F_B, RECV_F, REDUCE_GRAD, SLOT_BACKED, W, WAIT_REDUCE_GRAD,
)
from inductor_ext.comms_passes.pipeline.runtime import PlanHandle  # noqa: F401,E402

__all__ = [
    "BufferKey",
    "BufferInterval",
    "Slot",
    "BufferPlan",
    "PipelineBufferPlan",
    "PlanDeadlockError",
    "p2p_order_violations",
    "activation_bytes",
    "buffer_intervals",
    "colour_intervals",
    "max_overlap",
    "lower_bound_bytes",
    "lower_compute_schedule",
    "torch_single_stage_actions",
    "schedule_compute_order",
    "static_schedule",
    "simulate",
    "spread_unshards",
    "plan_pipeline",
    "plan_for_schedule",
    "replay_peak_bytes",
    "apply_plan",
    "POLICIES",
]

# --------------------------------------------------------------------------------------------
# the ext passes


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


_SEARCH_LOG: list | None = None  # set to a list to record (overrides, score) of every build

_LEVELS: tuple[int | None, ...] = (0, 1, 2, 3, None)  # later .. earlier (None: 2.15's spot)


def plan_pipeline(
    actions: Mapping[int, Sequence[_Action | None]],
    sizes: SizeSpec,
    *,
    max_outstanding_sends: int | None = None,
    recv_lookahead: int | None | str = "auto",
    search: bool = True,
    max_slowdown: float = 0.02,
    max_evals: int = 800,
    max_active_stages: int = 3,
    unshard_lookahead: Any = "full",
    spread_fsdp_unshards: bool = True,
    stage_to_rank: Mapping[int, int] | None = None,
    num_stages: int | None = None,
    n_microbatches: int | None = None,
    costs: Mapping[_ComputationType, float] | None = None,
    p2p_latency: float = DEFAULT_P2P_LATENCY,
    reference_actions: Mapping[int, Sequence[_Action]] | None = None,
) -> PipelineBufferPlan:
    """Compute the static buffer plan of every rank.

    ``actions``: a compute-only schedule (``schedule.pipeline_order``; lowered here with 2.15's
    own passes) or an already lowered one (``pipeline_order_with_comms``).

    Each transfer needs a moment where the sender's and the receiver's buffer coexist; posting
    the receive early moves bytes to the receiver, posting it late keeps them on the sender
    (whose wait cannot come before the receive). ``recv_lookahead`` sets where receives go:
    k compute actions before their consumer (0 = right before it, like ``defer_pp_recv``),
    None = 2.15's early spot, "auto" = the best of all (activation level, gradient level) pairs.
    Send waits go where they cannot stall (``_place_natural_waits``), budget-forced ones where
    ``max_outstanding_sends`` requires (None: no limit is imposed, but the plan may still pick
    1 or 2 when that lowers the peak; ``BufferPlan.max_outstanding_sends`` says which it used).
    With ``search`` the plan then tries, where a rank's peak
    lies, other levels for single receives and earlier (possibly stalling) waits for pending
    sends, keeping a move when it lowers (max peak over ranks, sum of peaks, ...) while the
    modelled step time stays within ``max_slowdown`` of what 2.15 runs (``reference_actions``;
    default: 2.15's lowering of ``actions``). ``max_evals`` bounds the number of plans built.
    Every plan is checked for deadlock on the dependency model (``simulate``).
    """
    acts = {r: [a for a in lst if a is not None] for r, lst in actions.items()}
    topo = _infer_topology(acts, stage_to_rank, num_stages, n_microbatches)
    if not _has_comms(acts):
        acts = lower_compute_schedule(
            acts,
            stage_to_rank=topo.stage_to_rank,
            num_stages=topo.num_stages,
            n_microbatches=topo.n_microbatches,
            max_active_stages=max_active_stages,
            unshard_lookahead=unshard_lookahead,
        )
    reference = simulate(
        reference_actions if reference_actions is not None else acts,
        costs=costs, p2p_latency=p2p_latency, _topo=topo,
    ).makespan
    base = _strip_waits(acts)
    if spread_fsdp_unshards and any(
        a.computation_type == UNSHARD for lst in base.values() for a in lst
    ):
        # idle gaps of the schedule with non-stalling waits; UNSHARD positions relative to the
        # compute actions then stay fixed while receives move
        probe, _ = _place_natural_waits(base, topo, costs, p2p_latency)
        probe_trace = simulate(probe, costs=costs, p2p_latency=p2p_latency, _topo=topo)
        spread, _ = spread_unshards(
            probe, max_active_stages=max_active_stages, trace=probe_trace,
            stage_to_rank=topo.stage_to_rank,
        )
        base = _strip_waits(spread)
    budget_time = reference * (1.0 + max_slowdown) + 1e-9
    ref_lists = reference_actions if reference_actions is not None else acts
    ref_peaks = {
        r: _live_peak(
            [(i.start, i.end, i.nbytes) for i in buffer_intervals(
                [a for a in lst if a is not None], rank=r, stage_to_rank=topo.stage_to_rank,
                num_stages=topo.num_stages, sizes=sizes)],
            len(lst),
        )
        for r, lst in ref_lists.items()
    }
    cache: dict[Any, tuple[PipelineBufferPlan, tuple] | None] = {}
    rank_cache: dict[tuple, BufferPlan] = {}

    def rank_plan(r: int, lst: list[_Action], budget: int | None, makespan: float) -> BufferPlan:
        # most moves change one or two ranks' lists: the others' plans are reused
        rk = (r, budget, tuple(lst))
        if rk not in rank_cache:
            rank_cache[rk] = _rank_plan(
                r, lst, topo, sizes, slot_backed=True, max_outstanding_sends=budget,
                unshard_moves=_unshard_moves(acts[r], lst), makespan=makespan,
            )
        return dataclasses.replace(rank_cache[rk], makespan=makespan)

    def build(budget: int | None, uniform: Any, overrides: dict[tuple, Any]):
        ck = (budget, uniform, tuple(sorted(overrides.items(), key=repr)))
        if ck in cache:
            return cache[ck]

        def la_fn(rank: int, t: tuple[str, int, int]) -> int | None:
            return overrides.get(("recv", rank, t), _dir_level(uniform, t))

        early: dict[int, dict[tuple, tuple]] = defaultdict(dict)
        for k, anchor in overrides.items():
            if k[0] == "wait":
                early[k[1]][k[2]] = anchor
        lists = _defer_recvs(base, topo, la_fn)
        try:
            final, trace = _place_waits(lists, topo, budget, costs, p2p_latency, early=early)
            for lst in final.values():
                _sched._validate_send_waits({0: lst})
            if p2p_order_violations(final, topo.stage_to_rank):
                raise ValueError("receive order differs from send order")
        except (PlanDeadlockError, ValueError, AssertionError):
            cache[ck] = None
            return None
        ranks = {r: rank_plan(r, final[r], budget, trace.makespan) for r in sorted(final)}
        plan = PipelineBufferPlan(
            ranks, dict(topo.stage_to_rank), topo.num_stages, topo.n_microbatches, uniform, sizes
        )
        peaks = [p.resident_peak_bytes for p in ranks.values()]
        slow = max(0.0, trace.makespan - budget_time)
        top = max(peaks)
        plateau = sum(_peak_width(p, False) for p in ranks.values() if p.resident_peak_bytes == top)
        # each rank's peak and how many positions sit at it, worst rank first: narrowing a
        # lower rank's plateau is progress too (its peak falls once every position has moved)
        profile = tuple(sorted(((p.resident_peak_bytes, _peak_width(p, True)) for p in ranks.values()),
                               reverse=True))
        worst_ratio = max(
            p.resident_peak_bytes / max(1, ref_peaks.get(r, 1)) for r, p in ranks.items()
        )
        # every rank's peak counts, worst first (leximax): a move that lowers one rank without
        # raising the sorted profile is progress even when the worst rank cannot move
        head = (slow, tuple(sorted(peaks, reverse=True)), sum(peaks))
        tail = (round(worst_ratio, 6), plateau, trace.makespan)
        # two rankings, one search each (see _local_search): ``False`` as before, ``True`` also
        # counts every rank's peak plateau
        score = {False: head + tail, True: head + (profile,) + tail}
        cache[ck] = (plan, score)
        if _SEARCH_LOG is not None:
            _SEARCH_LOG.append((dict(overrides), score))
        return cache[ck]

    if recv_lookahead == "auto":
        # one level for activation receives, one for gradient receives
        uniforms: list[Any] = [(a, g) for a in (2, 1, 0, None) for g in (2, 1, 0, None)]
    else:
        uniforms = [recv_lookahead]  # type: ignore[list-item]
    # without a budget from the caller, a send budget is one more thing the plan may choose
    budgets = [max_outstanding_sends] if max_outstanding_sends is not None else [None, 1, 2]
    best = None
    for budget in budgets:
        for la in uniforms:
            got = build(budget, la, {})
            if got is not None and (best is None or got[1][False] < best[2][1][False]):
                best = (budget, la, got)
    if best is None:
        raise ValueError("no valid buffer plan for this schedule (see PlanDeadlockError)")
    budget, uniform, got = best
    plan = got[0]
    if search:
        # no placement goes below the bound, nor within the time budget below the timed bound
        # (asked only for ranks above the first): a plan there on every rank, on time, is final
        bound = lower_bound_bytes(acts, sizes, stage_to_rank=topo.stage_to_rank,
                                  num_stages=topo.num_stages)
        timed = _timed_oracle(acts, sizes, budget_time, topo, costs, p2p_latency)

        def at_timed_bound(r: int, peak: int) -> bool:
            try:
                return timed is not None and not timed.lowerable(r, peak)
            except RuntimeError:  # HiGHS undecided: keep searching
                return False

        def at_bound(res) -> bool:
            return res[1][False][0] == 0 and all(
                p.resident_peak_bytes <= bound[r] or at_timed_bound(r, p.resident_peak_bytes)
                for r, p in res[0].ranks.items())

        # the search is greedy (first improvement), so where it ends depends on how it ranks
        # plans: the second ranking (every rank's plateau too) runs only when the first one
        # leaves a rank above the bound (the better end, by the first ranking, is kept); the
        # searches together build at most ``max_evals`` plans
        first = _local_search(build, got, budget, uniform, topo, False, max_evals, at_bound)
        ends = [first[:2]]
        if not at_bound(ends[0]) and first[2] < max_evals:
            second = _local_search(build, got, budget, uniform, topo, True, max_evals - first[2],
                                   at_bound)
            ends.append(second[:2])
        plan = min(ends, key=lambda e: e[1][False])[0]
    plan.recv_lookahead = uniform
    return plan


def _timed_oracle(acts, sizes, budget_time, topo, costs, latency) -> TimedBoundOracle | None:
    """The timed bound's oracle (``timed_bound.py``), or None without scipy: the search then
    stops early only at the latency-free bound."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        return None
    return TimedBoundOracle(acts, sizes, budget_time, stage_to_rank=topo.stage_to_rank,
                            num_stages=topo.num_stages, costs=costs, p2p_latency=latency)


def _local_search(build, got, budget, uniform, topo, fine: bool, max_evals: int, done):
    """First-improvement search over receive levels and early waits, from the plan ``got``,
    ranking plans by ``score[fine]`` (see ``build`` in ``plan_pipeline``); stops early once
    ``done((plan, scores))`` holds. Returns the plan, its scores and the plans built."""
    plan, scores = got
    overrides: dict[tuple, Any] = {}
    evals = 0
    while evals < max_evals and not done((plan, scores)):
        accepted = False
        for change, _ in _candidate_moves(plan, topo, uniform, overrides, anchor_receives=fine):
            trial = {**overrides, **change}
            res = build(budget, uniform, trial)
            evals += 1
            if res is not None and res[1][fine] < scores[fine]:  # first improvement
                overrides, (plan, scores) = trial, res
                accepted = True
                break
            if evals >= max_evals:
                break
        if not accepted:
            break
    return plan, scores, evals


def _dir_level(uniform: Any, t: tuple) -> int | None:
    """The default receive level of transfer ``t`` (a level, or (activation, gradient) levels)."""
    if isinstance(uniform, tuple):
        return uniform[0] if t[0] == "act" else uniform[1]
    return uniform


def _peak_width(rp: BufferPlan, resident: bool) -> int:
    """Positions at which the rank is at its resident peak (or its live peak)."""
    curve = rp.resident_curve if resident else _live_curve(rp.intervals, len(rp.actions))
    top = max(curve, default=0)
    return sum(1 for v in curve if v == top)


def _candidate_moves(
    plan: PipelineBufferPlan, topo: _Topology, uniform: Any,
    overrides: dict[tuple, Any], *, anchor_receives: bool = False,
) -> list[tuple[dict, None]]:
    """Moves that can lower the peak of a rank (see ``plan_pipeline``), most promising first.

    ("recv", rank, transfer) -> level: post that receive at another level.
    ("wait", rank, send key) -> anchor: wait for that send right before the compute action at
    (or last before) a peak position, accepting a stall if the time budget allows it.
    Per rank (worst peak first): all its peak waits at once, each wait alone, each wait with its
    receiver posting at 2.15's early spot, then single receive moves.
    """
    ranked = sorted(plan.ranks.values(), key=lambda p: -p.resident_peak_bytes)
    moves: list[tuple[dict, None]] = []
    seen: set = set()

    def push(change: dict) -> None:
        sig = tuple(sorted(((k, repr(v)) for k, v in change.items()), key=repr))
        if sig in seen or all(overrides.get(k, "∅") == v for k, v in change.items()):
            return
        seen.add(sig)
        moves.append((change, None))

    for rp in ranked:
        curve = rp.resident_curve if anchor_receives else _live_curve(rp.intervals, len(rp.actions))
        top = max(curve, default=0)
        peaks = [p for p, v in enumerate(curve) if v == top]
        consumer_pos: dict[tuple, int] = {}
        send_pos: dict[tuple, int] = {}
        for q, a in enumerate(rp.actions):
            for part in _parts(a):
                if part.computation_type in COMPUTE:
                    t = topo.remote_input(part)
                    if t is not None:
                        consumer_pos.setdefault(t, q)
                elif part.computation_type in SENDS:
                    send_pos[_transfer(part)] = q
        waits: list[dict] = []
        joints: list[dict] = []
        recv_moves: list[dict] = []
        for p in peaks:
            anchor_pos = next(
                (q for q in range(p, -1, -1) if rp.actions[q].is_compute_op), None
            )
            # with ``anchor_receives``, a receive posted between that compute action and the
            # peak: waiting before it frees the send buffer before the received one is allocated
            q = p if anchor_receives else -1
            while q >= 0 and rp.actions[q].computation_type in RECVS + WAITS:
                if rp.actions[q].computation_type in RECVS:
                    anchor_pos = q
                q -= 1
            for iv in rp.intervals:
                if not iv.start <= p <= iv.end:
                    continue
                k = iv.key
                if k.kind in (OUT_ACT, OUT_GRAD):
                    if k.kind == OUT_ACT:
                        t, peer = ("act", k.stage + 1, k.microbatch), topo.rank(k.stage + 1)
                    else:
                        t, peer = ("grad", k.stage - 1, k.microbatch), topo.rank(k.stage - 1)
                    if peer == rp.rank or t not in send_pos:
                        continue
                    rkey = ("recv", peer, t)
                    cur = _LEVELS.index(overrides.get(rkey, _dir_level(uniform, t)))
                    for li in range(cur + 1, len(_LEVELS)):  # the receiver posts earlier
                        recv_moves.append({rkey: _LEVELS[li]})
                    if anchor_pos is not None and anchor_pos > send_pos[t]:
                        send_key = (SEND_F if k.kind == OUT_ACT else SEND_B, k.stage, k.microbatch)
                        wkey = ("wait", rp.rank, send_key)
                        anchor = _key(rp.actions[anchor_pos])
                        waits.append({wkey: anchor})
                        joints.append({wkey: anchor, rkey: None})
                elif k.kind in (RECV_ACT, RECV_GRAD):
                    t = ("act" if k.kind == RECV_ACT else "grad", k.stage, k.microbatch)
                    if p < consumer_pos.get(t, -1):
                        rkey = ("recv", rp.rank, t)
                        cur = _LEVELS.index(overrides.get(rkey, _dir_level(uniform, t)))
                        for li in range(cur - 1, -1, -1):  # this rank posts later
                            recv_moves.append({rkey: _LEVELS[li]})
        if len(waits) > 1:
            push({k: v for w in waits for k, v in w.items()})
            push({k: v for w in joints for k, v in w.items()})
        for change in waits + joints + recv_moves:
            push(change)
        # coarser: every receive of this rank in one direction at one level (a rank whose
        # neighbours' peaks leave it room posts later or earlier than the uniform level)
        received: dict[str, list[tuple]] = defaultdict(list)
        for iv in rp.intervals:
            if iv.key.kind in (RECV_ACT, RECV_GRAD):
                d = "act" if iv.key.kind == RECV_ACT else "grad"
                received[d].append((d, iv.key.stage, iv.key.microbatch))
        for d, ts in sorted(received.items()):
            for level in _LEVELS:
                push({("recv", rp.rank, t): level for t in ts})
    return moves


def plan_for_schedule(schedule: Any, sizes: SizeSpec, **kwargs: Any) -> PipelineBufferPlan:
    """Plan a real schedule object (runtime or single-stage) from its compute-only IR."""
    order = schedule_compute_order(schedule)
    stage_to_rank = getattr(schedule, "stage_index_to_group_rank", None)
    if isinstance(schedule, (_sched.ScheduleGPipe, _sched.Schedule1F1B)):
        stage_to_rank = {s: s for s in range(schedule._num_stages)}
        kind = "gpipe" if isinstance(schedule, _sched.ScheduleGPipe) else "1f1b"
        kwargs.setdefault(
            "reference_actions",
            torch_single_stage_actions(kind, schedule._num_stages, schedule._n_microbatches),
        )
    kwargs.setdefault("max_active_stages", getattr(schedule, "_max_active_stages", 3))
    kwargs.setdefault("unshard_lookahead", getattr(schedule, "_unshard_lookahead", "full"))
    return plan_pipeline(
        order,
        sizes,
        stage_to_rank=stage_to_rank,
        num_stages=schedule._num_stages,
        n_microbatches=schedule._n_microbatches,
        **kwargs,
    )


# --------------------------------------------------------------------------------------------
# replay


def _parse_policy(policy: str) -> tuple[str, bool, int | None]:
    parts = [p.strip() for p in policy.split("+")]
    base, defer, k = None, False, None
    for p in parts:
        if p in ("torch-default", "ext-plan"):
            base = p
        elif p == "defer_pp_recv":
            defer = True
        elif p.startswith("max_outstanding_sends="):
            k = int(p.split("=", 1)[1])
        else:
            raise ValueError(f"unknown policy {policy!r}; one of {POLICIES}")
    if base is None:
        base = "torch-default"
    if base == "ext-plan" and defer:
        raise ValueError("ext-plan places receives itself; do not combine with defer_pp_recv")
    return base, defer, k


def replay_peak_bytes(
    actions: Mapping[int, Sequence[_Action | None]] | Sequence[_Action | None],
    sizes: SizeSpec,
    policy: str = "torch-default",
    *,
    stage_to_rank: Mapping[int, int] | None = None,
    num_stages: int | None = None,
    n_microbatches: int | None = None,
    max_active_stages: int = 3,
    unshard_lookahead: Any = "full",
    **plan_kwargs: Any,
) -> dict[int, int]:
    """Peak pipeline-buffer bytes per rank when the schedule runs under ``policy``.

    ``actions``: a compute-only or a lowered schedule for all ranks (dict rank -> list), or one
    rank's lowered list (then only "torch-default" replays, i.e. the list as it is).
    Policies: "torch-default" (2.15's lowering, or the lowered list as given: alloc at RECV,
    fwd outputs freed at their send's wait, activations kept until backward, backward sends
    waited where 2.15 puts them); "max_outstanding_sends=k" and "defer_pp_recv" (2.15's own
    passes on top; combinable with "+"); "ext-plan" (this module's plan, slots resident from
    first to last occupant; "+max_outstanding_sends=k" adds the budget).
    """
    if not isinstance(actions, Mapping):
        lst = [a for a in actions if a is not None]
        base, defer, k = _parse_policy(policy)
        if base != "torch-default" or defer or k is not None:
            raise ValueError("a single rank's list can only be replayed as it is (torch-default)")
        mine = {p.stage_index for a in lst for p in _parts(a) if p.computation_type in COMPUTE}
        if stage_to_rank is not None:
            mapping = dict(stage_to_rank)
            rank = mapping[min(mine)]
        else:  # one stage per rank (GPipe/1F1B): the rank is the stage; peers are elsewhere
            rank = min(mine)
            mapping = {}
        peers = {
            p.stage_index + (1 if p.computation_type in (SEND_F, RECV_B) else -1)
            for a in lst for p in _parts(a) if p.computation_type in SENDS + RECVS
        }
        for st in mine:
            mapping.setdefault(st, rank)
        for st in peers:
            mapping.setdefault(st, -1 - st)
        if num_stages is None:
            num_stages = max(mine | peers) + 1
        ivs = buffer_intervals(
            lst, rank=rank, stage_to_rank=mapping, num_stages=num_stages, sizes=sizes
        )
        return {rank: _live_peak([(i.start, i.end, i.nbytes) for i in ivs], len(lst))}
    acts = {r: [a for a in v if a is not None] for r, v in actions.items()}
    topo = _infer_topology(acts, stage_to_rank, num_stages, n_microbatches)
    base, defer, k = _parse_policy(policy)
    if base == "ext-plan":
        plan = plan_pipeline(
            acts, sizes, max_outstanding_sends=k, stage_to_rank=topo.stage_to_rank,
            num_stages=topo.num_stages, n_microbatches=topo.n_microbatches,
            max_active_stages=max_active_stages, unshard_lookahead=unshard_lookahead,
            **plan_kwargs,
        )
        return {r: p.resident_peak_bytes for r, p in plan.ranks.items()}
    if _has_comms(acts):
        lowered = acts
        if defer:
            lowered = _sched._defer_recv_ops(lowered, stage_to_rank=topo.rank)
        if k is not None:
            lowered = _sched._add_wait_send_budget(
                lowered, stage_to_rank=topo.rank, max_outstanding_sends=k
            )
    else:
        lowered = lower_compute_schedule(
            acts, stage_to_rank=topo.stage_to_rank, num_stages=topo.num_stages,
            n_microbatches=topo.n_microbatches, max_active_stages=max_active_stages,
            unshard_lookahead=unshard_lookahead, defer_pp_recv=defer, max_outstanding_sends=k,
        )
    out: dict[int, int] = {}
    for r, lst in lowered.items():
        ivs = buffer_intervals(
            lst, rank=r, stage_to_rank=topo.stage_to_rank, num_stages=topo.num_stages, sizes=sizes
        )
        out[r] = _live_peak([(i.start, i.end, i.nbytes) for i in ivs], len(lst))
    return out


