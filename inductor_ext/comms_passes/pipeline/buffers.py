"""Pipeline buffer lifetimes as 2.15 gives them, optimal interval colouring into reusable
slots, and the per-rank plan data."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch.distributed.pipelining.schedules import _Action, _ComputationType

from inductor_ext.comms_passes.pipeline.ir import (
    B, BufferInterval, BufferKey, F, I, _key, OUT_ACT, OUT_GRAD, _parts, RECV_ACT, RECV_B,
    RECV_F, RECV_GRAD, SENDS, _size_fn, SizeSpec, Slot, _Topology, _transfer, W, WAIT_SEND_B,
    WAIT_SEND_F, WAITS,
)

# --------------------------------------------------------------------------------------------
# buffer lifetimes, colouring, peaks


def buffer_intervals(
    actions: Sequence[_Action],
    *,
    rank: int,
    stage_to_rank: Mapping[int, int],
    num_stages: int,
    sizes: SizeSpec,
    linger_last_stage_inputs: bool = True,
    input_grad_until_weight: bool = True,
) -> list[BufferInterval]:
    """Lifetimes of the pipeline buffers of one rank's lowered action list (see module doc).

    ``linger_last_stage_inputs``: with a full backward (B), the last stage's loss keeps the
    stage's input leaf (its receive buffer) reachable until the step ends; with plain allocation
    that storage stays alive to the end of the list (measured on 2.15; the input backward of
    zero-bubble schedules detaches the loss, so no linger there). Pass False for slot-backed
    buffers.

    ``input_grad_until_weight``: 2.15's input backward also stores each input gradient in the
    input leaf's ``.grad``, which keeps it until the weight backward drops the input. The ext
    runtime hook clears that field after the input backward (``apply_plan``); pass False then.
    """
    size = _size_fn(sizes)
    acts = [a for a in actions if a is not None]
    topo = _Topology(dict(stage_to_rank), num_stages, 0)
    pos: dict[tuple[_ComputationType, int, int | None], int] = {}
    for p, a in enumerate(acts):
        for part in _parts(a):
            pos.setdefault(_key(part), p)
    last_pos = len(acts) - 1

    def input_release(s: int, m: int) -> int:
        for ct in (W, B, I):
            if (ct, s, m) in pos:
                return pos[(ct, s, m)]
        return pos.get((F, s, m), last_pos)

    def grad_release(s: int, m: int) -> int:
        for ct in (W, B, I):
            if (ct, s, m) in pos:
                return pos[(ct, s, m)]
        return last_pos

    out: list[BufferInterval] = []
    for p, a in enumerate(acts):
        for part in _parts(a):
            ct, s, m = part.computation_type, part.stage_index, part.microbatch_index
            if ct == RECV_F:
                end = input_release(s, m)
                if linger_last_stage_inputs and s == num_stages - 1 and (B, s, m) in pos:
                    end = last_pos
                key = BufferKey(RECV_ACT, s, m)
                out.append(BufferInterval(key, size(key), p, max(end, p)))
            elif ct == RECV_B:
                key = BufferKey(RECV_GRAD, s, m)
                out.append(BufferInterval(key, size(key), p, max(grad_release(s, m), p)))
            elif ct == F and s < num_stages - 1:
                key = BufferKey(OUT_ACT, s, m)
                if topo.rank(s + 1) == rank:  # same-rank hand-off: becomes s+1's input
                    end = input_release(s + 1, m)
                    if (
                        linger_last_stage_inputs and s + 1 == num_stages - 1
                        and (B, s + 1, m) in pos
                    ):
                        end = last_pos
                else:
                    end = pos.get((WAIT_SEND_F, s, m), last_pos)
                    if (I, s, m) in pos and end > pos[(I, s, m)]:
                        # still live at the input backward: backward_state keeps the tensor
                        # (not its gradient edge) until the weight backward
                        end = max(end, input_release(s, m))
                out.append(BufferInterval(key, size(key), p, max(end, p)))
            elif ct in (B, I) and s > 0:
                key = BufferKey(OUT_GRAD, s, m)
                if topo.rank(s - 1) == rank:
                    end = grad_release(s - 1, m)
                else:
                    end = pos.get((WAIT_SEND_B, s, m), last_pos)
                if ct == I and input_grad_until_weight:
                    # stage_backward_input stores the gradient in the input leaf's .grad,
                    # which lives until the weight backward drops the input
                    end = max(end, input_release(s, m))
                out.append(BufferInterval(key, size(key), p, max(end, p)))
    return out


def lower_bound_bytes(
    actions: Mapping[int, Sequence[_Action | None]],
    sizes: SizeSpec,
    *,
    stage_to_rank: Mapping[int, int] | None = None,
    num_stages: int | None = None,
    hide_latency: bool = False,
) -> dict[int, int]:
    """Per rank, a peak that no placement of receives and send waits goes below while the compute
    order of ``actions`` stays (every buffer is live at least across the compute actions that
    produce or use it):

    * a received activation from its forward to its last backward (B, or W when split);
    * a received gradient from its backward (B or I) to its last (B, or W);
    * a forward output sent to another rank during its forward, an input gradient sent to
      another rank during its backward (same-rank hand-offs: until the next stage's release);

    that is 2.15's activation liveness plus the gradients and the sends. With ``hide_latency``
    a transfer also needs a compute action on each side to hide behind: the sender keeps its
    buffer through its next compute action and the receiver posts before its previous one, so
    the result bounds the plans that never stall (where an idle gap hides the transfer instead,
    a plan can do better than that figure).
    """
    size = _size_fn(sizes)
    acts = {r: [a for a in lst if a is not None] for r, lst in actions.items()}
    from inductor_ext.comms_passes.pipeline.ir import _infer_topology

    topo = _infer_topology(acts, stage_to_rank, num_stages)
    out: dict[int, int] = {}
    for rank, lst in acts.items():
        comp = [p for a in lst for p in _parts(a) if p.computation_type in (F, B, I, W)]
        n = len(comp)
        pos: dict[tuple, int] = {}
        for i, p in enumerate(comp):
            pos.setdefault(_key(p), i)

        def release(s: int, m: int, at: int) -> int:
            return next((pos[(ct, s, m)] for ct in (W, B, I) if (ct, s, m) in pos), at)

        ext = 1 if hide_latency else 0
        spans: list[tuple[int, int, int]] = []
        for i, p in enumerate(comp):
            ct, s, m = p.computation_type, p.stage_index, p.microbatch_index
            last = topo.num_stages - 1
            if ct == F:
                if s > 0 and topo.rank(s - 1) != rank:
                    spans.append((max(0, i - ext), release(s, m, i), size(BufferKey(RECV_ACT, s, m))))
                if s < last:
                    own = topo.rank(s + 1) == rank
                    end = release(s + 1, m, i) if own else min(n - 1, i + ext)
                    spans.append((i, end, size(BufferKey(OUT_ACT, s, m))))
            elif ct in (B, I):
                if s < last and topo.rank(s + 1) != rank:
                    spans.append((max(0, i - ext), release(s, m, i), size(BufferKey(RECV_GRAD, s, m))))
                if s > 0:
                    own = topo.rank(s - 1) == rank
                    end = release(s - 1, m, i) if own else min(n - 1, i + ext)
                    spans.append((i, end, size(BufferKey(OUT_GRAD, s, m))))
        out[rank] = _live_peak(spans, n)
    return out


def max_overlap(intervals: Sequence[tuple[int, int]] | Sequence[BufferInterval]) -> int:
    """Maximum number of inclusive intervals alive at one point (the clique number)."""
    events: list[tuple[int, int]] = []
    for iv in intervals:
        s, e = (iv.start, iv.end) if isinstance(iv, BufferInterval) else iv
        events.append((s, 0))  # starts sort before ends at the same point (inclusive)
        events.append((e, 1))
    best = cur = 0
    for _, kind in sorted(events):
        cur += 1 if kind == 0 else -1
        best = max(best, cur)
    return best


def colour_intervals(
    intervals: Sequence[BufferInterval], *, pool: str | None = None
) -> tuple[list[Slot], dict[BufferKey, int]]:
    """Assign intervals to reusable slots, separately per (pool, byte size) class.

    Greedy in start order, reusing the slot freed earliest: optimal for interval graphs, so each
    class gets exactly ``max_overlap`` slots. Slot ids are global across classes.
    """
    classes: dict[tuple[str, int], list[BufferInterval]] = defaultdict(list)
    for iv in intervals:
        classes[(pool or iv.pool, iv.nbytes)].append(iv)
    slots: list[Slot] = []
    assign: dict[BufferKey, int] = {}
    for (cls_pool, nbytes), ivs in sorted(classes.items()):
        active: list[tuple[int, int]] = []  # (end, slot id)
        free: list[tuple[int, int]] = []  # (freed at, slot id)
        for iv in sorted(ivs, key=lambda x: (x.start, x.end, x.key)):
            while active and active[0][0] < iv.start:
                heapq.heappush(free, heapq.heappop(active))
            if free:
                _, sid = heapq.heappop(free)
            else:
                sid = len(slots)
                slots.append(Slot(sid, nbytes, cls_pool, first=iv.start, last=iv.end))
            slot = slots[sid]
            slot.keys.append(iv.key)
            slot.first = min(slot.first, iv.start)
            slot.last = max(slot.last, iv.end)
            assign[iv.key] = sid
            heapq.heappush(active, (iv.end, sid))
    return slots, assign


def _live_curve(intervals: Sequence[BufferInterval], n: int) -> list[int]:
    """Live bytes of ``intervals`` at each of ``n`` positions."""
    delta = [0] * (n + 1)
    for iv in intervals:
        delta[iv.start] += iv.nbytes
        delta[iv.end + 1] -= iv.nbytes
    acc, curve = 0, []
    for x in delta[:n]:
        acc += x
        curve.append(acc)
    return curve


def _live_peak(spans: Sequence[tuple[int, int, int]], length: int) -> int:
    """max over positions of the bytes of spans (start, end, nbytes) alive there."""
    delta = [0] * (length + 2)
    for s, e, b in spans:
        delta[s] += b
        delta[e + 1] -= b
    best = cur = 0
    for d in delta:
        cur += d
        best = max(best, cur)
    return best


# --------------------------------------------------------------------------------------------
# plan data


@dataclass
class BufferPlan:
    """The static buffer plan of one pipeline rank."""

    rank: int
    actions: list[_Action]
    intervals: list[BufferInterval]
    slots: list[Slot]
    assignments: dict[BufferKey, int]
    peak_bytes: int  # max live bytes of all pipeline buffers (plan lifetimes)
    resident_peak_bytes: int  # with receive slots resident from first to last occupant
    slot_bytes: int  # bytes of the receive slots (allocated by apply_plan)
    max_outstanding_sends: int | None
    peak_outstanding_sends: int
    # UNSHARDs moved by spread_unshards: (stage, compute actions before it in 2.15's lowering,
    # compute actions before it in the plan)
    unshard_moves: list[tuple[int, int, int]]
    makespan: float  # timing model, F = 1
    resident_curve: list[int] = field(default_factory=list)  # resident bytes at each position

    @property
    def recv_slots(self) -> list[Slot]:
        return [s for s in self.slots if s.pool == "recv"]

    def slot_of(self, key: BufferKey) -> int:
        return self.assignments[key]


@dataclass
class PipelineBufferPlan:
    """Per-rank plans of one schedule (the wait/recv placement couples the ranks)."""

    ranks: dict[int, BufferPlan]
    stage_to_rank: dict[int, int]
    num_stages: int
    n_microbatches: int
    recv_lookahead: Any  # the uniform receive level(s) the plan started from
    sizes: Any = None

    @property
    def actions(self) -> dict[int, list[_Action]]:
        return {r: list(p.actions) for r, p in self.ranks.items()}

    def __getitem__(self, rank: int) -> BufferPlan:
        return self.ranks[rank]


def _peak_outstanding_sends(actions: Sequence[_Action]) -> int:
    pending: set[tuple[str, int, int]] = set()
    best = 0
    for a in actions:
        for p in _parts(a):
            if p.computation_type in SENDS:
                pending.add(_transfer(p))
                best = max(best, len(pending))
            elif p.computation_type in WAITS:
                pending.discard(_transfer(p))
    return best


def _segment_slots(
    slots: list[Slot], intervals: list[BufferInterval], n: int
) -> tuple[int, list[int]]:
    """Decide where each receive slot keeps its tensor between occupants; return the resident
    peak and the resident bytes at every position.

    A slot's tensor stays allocated from one occupant to the next (that is the reuse) unless the
    idle gap lies where it would raise the rank's peak above the live peak; there the slot
    releases its tensor after the earlier occupant and allocates again for the next one
    (``Slot.release_after``). The last stage's inputs do not linger here: ``apply_plan`` detaches
    each from its slot after its full backward (``_SlotPool.drop_input``).
    """
    by_key = {iv.key: iv for iv in intervals}
    delta = [0] * (n + 2)
    for iv in intervals:
        delta[iv.start] += iv.nbytes
        delta[iv.end + 1] -= iv.nbytes
    gaps: list[tuple[int, int, int, Slot, BufferKey]] = []  # (lo, hi, nbytes, slot, key before)
    for slot in slots:
        if slot.pool != "recv":
            continue
        occ = sorted((by_key[k] for k in slot.keys), key=lambda iv: iv.start)
        slot.release_after = [occ[-1].key]
        for a, b in zip(occ, occ[1:]):
            if b.start > a.end + 1:
                gaps.append((a.end + 1, b.start - 1, slot.nbytes, slot, a.key))
    live_peak = 0
    acc = 0
    base = []
    for x in delta[:n]:
        acc += x
        base.append(acc)
        live_peak = max(live_peak, acc)
    kept = [True] * len(gaps)

    def curve() -> list[int]:
        d = [0] * (n + 1)
        for g, keep in zip(gaps, kept):
            if keep:
                d[g[0]] += g[2]
                d[g[1] + 1] -= g[2]
        out, a = [], 0
        for i in range(n):
            a += d[i]
            out.append(base[i] + a)
        return out

    cur = curve()
    while max(cur, default=0) > live_peak:
        top = max(cur)
        hot = [i for i, v in enumerate(cur) if v == top]
        choice = None
        for gi, (lo, hi, nb, sl, _) in enumerate(gaps):
            if kept[gi] and any(lo <= h <= hi for h in hot):
                if choice is None or hi - lo > gaps[choice][1] - gaps[choice][0]:
                    choice = gi
        if choice is None:
            break
        kept[choice] = False
        cur = curve()
    for (lo, hi, nb, sl, before), keep in zip(gaps, kept):
        if not keep:
            sl.release_after.append(before)
    return max(cur, default=0), cur


def _rank_plan(
    rank: int,
    acts: list[_Action],
    topo: _Topology,
    sizes: SizeSpec,
    *,
    slot_backed: bool,
    max_outstanding_sends: int | None,
    unshard_moves: list[tuple[int, int, int]],
    makespan: float,
) -> BufferPlan:
    plain = buffer_intervals(
        acts, rank=rank, stage_to_rank=topo.stage_to_rank, num_stages=topo.num_stages,
        sizes=sizes, linger_last_stage_inputs=not slot_backed,
        input_grad_until_weight=not slot_backed,
    )
    slots, assign = colour_intervals(plain)
    n = len(acts)
    peak = _live_peak([(iv.start, iv.end, iv.nbytes) for iv in plain], n)
    if slot_backed:
        resident, curve = _segment_slots(slots, plain, n)
    else:
        resident = peak
        curve = _live_curve(plain, n)
    return BufferPlan(
        rank=rank,
        actions=list(acts),
        intervals=plain,
        slots=slots,
        assignments=assign,
        peak_bytes=peak,
        resident_peak_bytes=resident,
        slot_bytes=sum(s.nbytes for s in slots if s.pool == "recv"),
        max_outstanding_sends=max_outstanding_sends,
        peak_outstanding_sends=_peak_outstanding_sends(acts),
        unshard_moves=unshard_moves,
        makespan=makespan,
        resident_curve=curve,
    )


