"""The search of the pipeline plan (``plan.py``): ``plan_pipeline`` builds a plan from the moves
of ``placement.py`` (receive lookahead per direction, waits, UNSHARDs), then a local search moves
single receives and waits where a rank's peak is, within a modelled time budget, and stops where
no plan keeping the compute order goes lower (``lower_bound_bytes``, or within the time budget
``timed_bound.py``, which counts the transfer latency). Lifetimes are coloured into reusable slots
per size class (``buffers.py``).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from torch.distributed.pipelining import schedules as _sched
from torch.distributed.pipelining.schedules import _Action, _ComputationType

from inductor_ext.comms_passes.pipeline.ir import (
    COMPUTE, DEFAULT_P2P_LATENCY, _has_comms, _infer_topology, _key, lower_compute_schedule, OUT_ACT,
    OUT_GRAD, _parts, PlanDeadlockError, RECV_ACT, RECV_GRAD, RECVS, SEND_B, SEND_F, SENDS, SizeSpec,
    _Topology, _transfer, UNSHARD, WAITS,
)
from inductor_ext.comms_passes.pipeline.sim import p2p_order_violations, simulate
from inductor_ext.comms_passes.pipeline.buffers import (
    buffer_intervals, BufferPlan, _live_curve, _live_peak, lower_bound_bytes, PipelineBufferPlan, _rank_plan,
)
from inductor_ext.comms_passes.pipeline.timed_bound import TimedBoundOracle
from inductor_ext.comms_passes.pipeline.placement import (
    _defer_recvs, _place_waits, _strip_waits, spread_unshards, _unshard_moves, _place_natural_waits,
)


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
