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
  time budget; FSDP UNSHARDs move into idle steps (warmup bubble first). Lifetimes are coloured
  into reusable slots per size class (optimal: slots == max overlap); receive slots are real
  tensors at run time (``apply_plan``), which also makes the last stage's lingering inputs
  harmless and drops the ``.grad`` copy of sent input gradients after an input backward.

Everything here is static: it only needs the action lists. ``apply_plan`` makes a real schedule
run the planned action list and back its receive buffers with the slots.
"""

from __future__ import annotations

import heapq
import math
import weakref
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.pipelining import schedules as _sched
from torch.distributed.pipelining._utils import PipeliningMetadataError
from torch.distributed.pipelining.schedules import _Action, _ComputationType

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

F = _ComputationType.FORWARD
I = _ComputationType.BACKWARD_INPUT  # noqa: E741
W = _ComputationType.BACKWARD_WEIGHT
B = _ComputationType.FULL_BACKWARD
OVERLAP_F_B = _ComputationType.OVERLAP_F_B
UNSHARD = _ComputationType.UNSHARD
RESHARD = _ComputationType.RESHARD
SEND_F = _ComputationType.SEND_F
RECV_F = _ComputationType.RECV_F
SEND_B = _ComputationType.SEND_B
RECV_B = _ComputationType.RECV_B
WAIT_SEND_F = _ComputationType.WAIT_SEND_F
WAIT_SEND_B = _ComputationType.WAIT_SEND_B
REDUCE_GRAD = _ComputationType.REDUCE_GRAD
WAIT_REDUCE_GRAD = _ComputationType.WAIT_REDUCE_GRAD

COMPUTE = (F, I, W, B)
RECVS = (RECV_F, RECV_B)
SENDS = (SEND_F, SEND_B)
WAITS = (WAIT_SEND_F, WAIT_SEND_B)

RECV_ACT = "recv_act"
RECV_GRAD = "recv_grad"
OUT_ACT = "out_act"
OUT_GRAD = "out_grad"
SLOT_BACKED = (RECV_ACT, RECV_GRAD)

POLICIES = (
    "torch-default",
    "max_outstanding_sends=<k>",
    "defer_pp_recv",
    "defer_pp_recv+max_outstanding_sends=<k>",
    "ext-plan",
    "ext-plan+max_outstanding_sends=<k>",
)

# Relative costs used by the timing model (F = 1). Only ratios matter; the model decides which
# gaps are idle (UNSHARD spreading) and estimates stalls, never correctness.
DEFAULT_COSTS: dict[_ComputationType, float] = {F: 1.0, B: 2.0, I: 1.0, W: 1.0}
DEFAULT_P2P_LATENCY = 0.5


class PlanDeadlockError(RuntimeError):
    """The action lists cannot all run to completion (a wait or consumer never unblocks)."""


# --------------------------------------------------------------------------------------------
# small helpers


@dataclass(frozen=True, order=True)
class BufferKey:
    kind: str  # recv_act | recv_grad | out_act | out_grad
    stage: int
    microbatch: int

    def __str__(self) -> str:
        return f"{self.kind}[s{self.stage},mb{self.microbatch}]"


@dataclass(frozen=True)
class BufferInterval:
    """One buffer's lifetime on one rank: alive at action positions start..end (inclusive)."""

    key: BufferKey
    nbytes: int
    start: int
    end: int

    @property
    def pool(self) -> str:
        return "recv" if self.key.kind in SLOT_BACKED else "send"


@dataclass
class Slot:
    """A reusable buffer: every interval assigned to it fits, and no two of them overlap."""

    id: int
    nbytes: int
    pool: str  # "recv": backed by a preallocated tensor at run time; "send": module-owned
    keys: list[BufferKey] = field(default_factory=list)
    first: int = 0  # first position any occupant is alive
    last: int = 0  # last position any occupant is alive
    # receive slots: occupants after whose hand-out the pool drops the slot tensor (the last
    # one, and those followed by an idle gap that would raise the peak); see _segment_slots
    release_after: list[BufferKey] = field(default_factory=list)


def activation_bytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    """Bytes of one microbatch activation of ``shape`` and ``dtype``."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return int(math.prod(shape)) * itemsize


def _parts(action: _Action) -> tuple[_Action, ...]:
    return action.sub_actions if action.sub_actions is not None else (action,)


def _key(action: _Action) -> tuple[_ComputationType, int, int | None]:
    return (action.computation_type, action.stage_index, action.microbatch_index)


SizeSpec = int | Mapping[int, int] | Callable[[BufferKey], int]


def _size_fn(sizes: SizeSpec) -> Callable[[BufferKey], int]:
    """``sizes``: bytes per activation (all stages), or {stage: bytes of that stage's output}."""
    if isinstance(sizes, bool):
        raise TypeError("sizes must be an int, a mapping or a callable")
    if isinstance(sizes, int):
        return lambda key: sizes
    if isinstance(sizes, Mapping):
        table = dict(sizes)

        def by_stage(key: BufferKey) -> int:
            # the input of stage s (and its gradient) is the output of stage s-1
            s = key.stage - 1 if key.kind in (RECV_ACT, OUT_GRAD) else key.stage
            return int(table[s])

        return by_stage
    if callable(sizes):
        return lambda key: int(sizes(key))
    raise TypeError("sizes must be an int, a mapping or a callable")


@dataclass(frozen=True)
class _Topology:
    stage_to_rank: dict[int, int]
    num_stages: int
    n_microbatches: int

    def rank(self, stage: int) -> int:
        return self.stage_to_rank[stage]

    def recv_peer(self, action: _Action) -> int:
        s = action.stage_index
        return self.rank(s - 1) if action.computation_type == RECV_F else self.rank(s + 1)

    def send_peer(self, action: _Action) -> int:
        s = action.stage_index
        return self.rank(s + 1) if action.computation_type == SEND_F else self.rank(s - 1)

    def remote_input(self, part: _Action) -> tuple[str, int, int] | None:
        """The transfer a compute action consumes from another rank, if any."""
        s, m, ct = part.stage_index, part.microbatch_index, part.computation_type
        if ct == F and s > 0 and self.rank(s - 1) != self.rank(s):
            return ("act", s, m)
        if ct in (B, I) and s < self.num_stages - 1 and self.rank(s + 1) != self.rank(s):
            return ("grad", s, m)
        return None


def _transfer(action: _Action) -> tuple[str, int, int]:
    """Transfer id (direction, receiving stage, microbatch) of a SEND/RECV/WAIT action."""
    ct, s, m = action.computation_type, action.stage_index, action.microbatch_index
    if ct == SEND_F or ct == WAIT_SEND_F:
        return ("act", s + 1, m)
    if ct == RECV_F:
        return ("act", s, m)
    if ct == SEND_B or ct == WAIT_SEND_B:
        return ("grad", s - 1, m)
    if ct == RECV_B:
        return ("grad", s, m)
    raise ValueError(f"{action} is not a P2P action")


def _infer_topology(
    actions: Mapping[int, Sequence[_Action | None]],
    stage_to_rank: Mapping[int, int] | None = None,
    num_stages: int | None = None,
    n_microbatches: int | None = None,
) -> _Topology:
    mapping: dict[int, int] = dict(stage_to_rank or {})
    max_mb = -1
    for rank, lst in actions.items():
        for a in lst:
            if a is None:
                continue
            for p in _parts(a):
                if p.computation_type in COMPUTE:
                    mapping.setdefault(p.stage_index, rank)
                if p.microbatch_index is not None:
                    max_mb = max(max_mb, p.microbatch_index)
    if num_stages is None:
        num_stages = max(mapping) + 1
    if n_microbatches is None:
        n_microbatches = max_mb + 1
    return _Topology(mapping, num_stages, n_microbatches)


def _has_comms(actions: Mapping[int, Sequence[_Action | None]]) -> bool:
    return any(
        a is not None and not a.is_compute_op
        for lst in actions.values()
        for a in lst
        if a is not None and a.computation_type not in (REDUCE_GRAD, WAIT_REDUCE_GRAD)
    )


# --------------------------------------------------------------------------------------------
# lowering (2.15's own passes) and 2.15's single-stage loops


def lower_compute_schedule(
    compute_actions: Mapping[int, Sequence[_Action | None]],
    *,
    stage_to_rank: Mapping[int, int] | None = None,
    num_stages: int | None = None,
    n_microbatches: int | None = None,
    max_active_stages: int = 3,
    unshard_lookahead: Any = "full",
    defer_pp_recv: bool = False,
    max_outstanding_sends: int | None = None,
) -> dict[int, list[_Action]]:
    """Lower a compute-only schedule exactly as 2.15's ``_prepare_schedule_with_comms`` does.

    Calls torch's own lowering passes (UNSHARD/RESHARD, REDUCE_GRAD, SEND/RECV, send waits and,
    when asked, ``defer_pp_recv`` and the ``max_outstanding_sends`` budget).
    """
    cleaned = {
        r: [
            a
            for a in lst
            if a is not None and a.computation_type not in (REDUCE_GRAD, WAIT_REDUCE_GRAD)
        ]
        for r, lst in compute_actions.items()
    }
    topo = _infer_topology(cleaned, stage_to_rank, num_stages, n_microbatches)
    lookahead = _sched._resolve_unshard_lookahead(
        unshard_lookahead, num_pp_ranks=len(cleaned), max_active_stages=max_active_stages
    )
    lowered: dict[int, list[_Action]] = {}
    for rank in sorted(cleaned):
        with_fsdp = _sched._add_unshard_reshard(
            list(cleaned[rank]),
            max_active_stages=max_active_stages,
            unshard_lookahead=lookahead[rank],
        )
        lowered[rank] = _sched._add_reduce_grad(with_fsdp, topo.n_microbatches)
    lowered = _sched._add_send_recv(
        lowered, stage_to_rank=topo.rank, num_stages=topo.num_stages
    )
    lowered = _sched._add_wait_send(lowered)
    if defer_pp_recv:
        lowered = _sched._defer_recv_ops(lowered, stage_to_rank=topo.rank)
    _sched._validate_send_waits(lowered)
    if max_outstanding_sends is not None:
        lowered = _sched._add_wait_send_budget(
            lowered, stage_to_rank=topo.rank, max_outstanding_sends=max_outstanding_sends
        )
        _sched._validate_send_waits(lowered)
    return {r: list(v) for r, v in lowered.items()}


def torch_single_stage_actions(
    kind: str, pp_size: int, n_microbatches: int
) -> dict[int, list[_Action]]:
    """What 2.15's hand-written ``ScheduleGPipe`` / ``Schedule1F1B`` loops do, as action lists.

    These two schedules do not run the lowered IR: their ``_step_microbatches`` issue P2P directly.
    The lists below mirror those loops action by action (allocation in ``get_*_recv_ops``,
    ``_wait_and_release_fwd_send``, the fused send/recv batches), so that their buffer lifetimes
    can be replayed like any other schedule. A WAIT_SEND here marks where the loop drops its
    last reference to the sent tensor (in 1F1B's steady state that is after the next backward,
    although the batch itself was waited earlier).
    """
    n, N = n_microbatches, pp_size
    out: dict[int, list[_Action]] = {}
    for s in range(N):
        acts: list[_Action] = []
        first, last = s == 0, s == N - 1
        if kind.lower() == "gpipe":
            for k in range(n):
                if not first:
                    acts.append(_Action(s, RECV_F, k))
                acts.append(_Action(s, F, k))
                if not last:
                    acts.append(_Action(s, SEND_F, k))
            if not last:
                acts += [_Action(s, WAIT_SEND_F, k) for k in range(n)]
            for k in range(n):
                if not last:
                    acts.append(_Action(s, RECV_B, k))
                acts.append(_Action(s, B, k))
                if not first:
                    acts.append(_Action(s, SEND_B, k))
            if not first:
                acts += [_Action(s, WAIT_SEND_B, k) for k in range(n)]
        elif kind.lower() == "1f1b":
            warmup = min(n, N - s)
            for k in range(warmup):
                if not first:
                    acts.append(_Action(s, RECV_F, k))
                acts.append(_Action(s, F, k))
                if k > 0 and not last:
                    acts.append(_Action(s, WAIT_SEND_F, k - 1))
                if not last and k != warmup - 1:
                    acts.append(_Action(s, SEND_F, k))
            f, b = warmup, 0
            while True:
                if not last:
                    acts.append(_Action(s, RECV_B, b))
                    acts.append(_Action(s, SEND_F, f - 1))
                    acts.append(_Action(s, WAIT_SEND_F, f - 1))
                acts.append(_Action(s, B, b))
                if not first and b > 0:
                    # the fused batch was waited before F, but the loop's ``bwd_sends`` list
                    # keeps the gradient until it is rebound after this backward
                    acts.append(_Action(s, WAIT_SEND_B, b - 1))
                b += 1
                if f == n:
                    break
                if not first:
                    acts.append(_Action(s, RECV_F, f))
                    acts.append(_Action(s, SEND_B, b - 1))
                acts.append(_Action(s, F, f))
                f += 1
            if not first:
                acts.append(_Action(s, SEND_B, b - 1))
            while b < n:
                if not last:
                    acts.append(_Action(s, RECV_B, b))
                acts.append(_Action(s, B, b))
                if not first:
                    acts.append(_Action(s, WAIT_SEND_B, b - 1))
                    acts.append(_Action(s, SEND_B, b))
                b += 1
            if not first:
                acts.append(_Action(s, WAIT_SEND_B, b - 1))
        else:
            raise ValueError(f"unknown single-stage schedule {kind!r} (gpipe, 1f1b)")
        out[s] = acts
    return out


def static_schedule(
    schedule: str | type, pp_size: int, n_microbatches: int, stages_per_rank: int | None = None,
    **kwargs: Any,
) -> Any:
    """Build a schedule object without processes or modules (stages are autospec mocks).

    Enough to read ``pipeline_order`` / ``pipeline_order_with_comms`` and to call
    ``analyze_pipeline_activation_liveness``; it cannot run. ``kwargs`` go to the schedule
    (e.g. ``max_outstanding_sends=1``, ``defer_pp_recv=True``).
    """
    from unittest import mock

    from torch.distributed.pipelining.stage import PipelineStage

    cls = _sched.get_schedule_class(schedule) if isinstance(schedule, str) else schedule
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank = 0
    stage.group_size = pp_size
    stage.submod = None
    if issubclass(cls, _sched.PipelineScheduleSingle):
        stage.num_stages = pp_size
        return cls(stage, n_microbatches, **kwargs)
    per_rank = stages_per_rank or 2
    stages = [stage] * per_rank
    stage.num_stages = per_rank * pp_size
    return cls(stages, n_microbatches, **kwargs)


def schedule_compute_order(schedule: Any) -> dict[int, list[_Action | None]]:
    """The compute-only IR of a real schedule object.

    Runtime schedules: ``pipeline_order``. ``ScheduleGPipe``/``Schedule1F1B``: the compute order
    of their hand-written loops (2.15's ``Schedule1F1B._get_pipeline_order`` is only used for
    visualisation and is wrong on the last rank: it starts at F1 and ends at F{n}).
    """
    if isinstance(schedule, _sched.ScheduleGPipe) or isinstance(schedule, _sched.Schedule1F1B):
        kind = "gpipe" if isinstance(schedule, _sched.ScheduleGPipe) else "1f1b"
        loops = torch_single_stage_actions(kind, schedule._num_stages, schedule._n_microbatches)
        return {r: [a for a in lst if a.is_compute_op] for r, lst in loops.items()}
    order = getattr(schedule, "pipeline_order", None)
    if not order:
        getter = getattr(schedule, "_get_pipeline_order", None)
        order = getter() if getter is not None else None
    if not order:
        raise ValueError(f"{type(schedule).__name__} exposes no pipeline_order")
    return {r: list(v) for r, v in order.items()}


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
    slots: list[Slot], intervals: list[BufferInterval], n: int, lingering: set[BufferKey]
) -> int:
    """Decide where each receive slot keeps its tensor between occupants; return the resident peak.

    A slot's tensor stays allocated from one occupant to the next (that is the reuse) unless the
    idle gap lies where it would raise the rank's peak above the live peak; there the slot
    releases its tensor after the earlier occupant and allocates again for the next one
    (``Slot.release_after``). A slot that held a ``lingering`` key (a last-stage input with a
    full backward: the loss keeps that leaf reachable) keeps its storage to the end of the step,
    so its gaps are always kept.
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
        if any(k in lingering for k in slot.keys):
            last = max(by_key[k].end for k in slot.keys)
            if last < n - 1:  # the final storage lingers to the end of the step
                delta[last + 1] += slot.nbytes
                delta[n] -= slot.nbytes
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

    lingering_slots = {id(sl) for sl in slots if any(k in lingering for k in sl.keys)}
    cur = curve()
    while max(cur, default=0) > live_peak:
        top = max(cur)
        hot = [i for i, v in enumerate(cur) if v == top]
        choice = None
        for gi, (lo, hi, nb, sl, _) in enumerate(gaps):
            if kept[gi] and id(sl) not in lingering_slots and any(lo <= h <= hi for h in hot):
                if choice is None or hi - lo > gaps[choice][1] - gaps[choice][0]:
                    choice = gi
        if choice is None:
            break
        kept[choice] = False
        cur = curve()
    for (lo, hi, nb, sl, before), keep in zip(gaps, kept):
        if not keep:
            sl.release_after.append(before)
    return max(cur, default=0)


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
        last = topo.num_stages - 1
        full_bwd = {
            p.microbatch_index for a in acts for p in _parts(a)
            if p.computation_type == B and p.stage_index == last
        }
        lingering = {
            iv.key for iv in plain
            if iv.key.kind == RECV_ACT and iv.key.stage == last and iv.key.microbatch in full_bwd
        }
        resident = _segment_slots(slots, plain, n, lingering)
    else:
        resident = peak
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
    )


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
        for a in lst:
            for send in sorted(by_anchor.get(_key(a), ()), key=lambda k: (k[0].value, k[1], k[2])):
                new.append(_wait_action(send))
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
    max_evals: int = 300,
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
        ranks = {
            r: _rank_plan(
                r, final[r], topo, sizes, slot_backed=True,
                max_outstanding_sends=budget,
                unshard_moves=_unshard_moves(acts[r], final[r]), makespan=trace.makespan,
            )
            for r in sorted(final)
        }
        plan = PipelineBufferPlan(
            ranks, dict(topo.stage_to_rank), topo.num_stages, topo.n_microbatches, uniform, sizes
        )
        peaks = [p.resident_peak_bytes for p in ranks.values()]
        slow = max(0.0, trace.makespan - budget_time)
        top = max(peaks)
        plateau = sum(_peak_width(p) for p in ranks.values() if p.resident_peak_bytes == top)
        worst_ratio = max(
            p.resident_peak_bytes / max(1, ref_peaks.get(r, 1)) for r, p in ranks.items()
        )
        score = (slow, top, sum(peaks), round(worst_ratio, 6), plateau, trace.makespan)
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
            if got is not None and (best is None or got[1] < best[2][1]):
                best = (budget, la, got)
    if best is None:
        raise ValueError("no valid buffer plan for this schedule (see PlanDeadlockError)")
    budget, uniform, (plan, score) = best
    overrides: dict[tuple, Any] = {}
    evals = len(cache)
    while search and evals < max_evals:
        accepted = False
        for change, _ in _candidate_moves(plan, topo, uniform, overrides):
            trial = {**overrides, **change}
            got = build(budget, uniform, trial)
            evals += 1
            if got is not None and got[1] < score:  # first improvement
                overrides, (plan, score) = trial, got
                accepted = True
                break
            if evals >= max_evals:
                break
        if not accepted:
            break
    plan.recv_lookahead = uniform
    return plan


def _dir_level(uniform: Any, t: tuple) -> int | None:
    """The default receive level of transfer ``t`` (a level, or (activation, gradient) levels)."""
    if isinstance(uniform, tuple):
        return uniform[0] if t[0] == "act" else uniform[1]
    return uniform


def _live_curve(rp: BufferPlan) -> list[int]:
    n = len(rp.actions)
    delta = [0] * (n + 1)
    for iv in rp.intervals:
        delta[iv.start] += iv.nbytes
        delta[iv.end + 1] -= iv.nbytes
    acc, curve = 0, []
    for x in delta[:n]:
        acc += x
        curve.append(acc)
    return curve


def _peak_width(rp: BufferPlan) -> int:
    curve = _live_curve(rp)
    top = max(curve, default=0)
    return sum(1 for v in curve if v == top)


def _candidate_moves(
    plan: PipelineBufferPlan, topo: _Topology, uniform: Any,
    overrides: dict[tuple, Any],
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
        curve = _live_curve(rp)
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


# --------------------------------------------------------------------------------------------
# runtime hook


class _SlotPool:
    """Receive buffers of one rank served from the plan's slots.

    Each slot is one byte tensor, allocated at its first occupant's receive and dropped by the
    pool when an occupant in ``Slot.release_after`` is handed out (the occupant alone keeps the
    storage then; the next occupant, if any, gets a new tensor). Occupants get views of it.
    A slot is reused only after the previous occupant's releasing backward (B, or W when split)
    has run in this step; otherwise the pool falls back to a fresh allocation and counts it.
    ``persistent`` keeps every slot tensor across steps instead.
    """

    def __init__(self, plan: BufferPlan, device: torch.device, *, persistent: bool = False):
        self.plan = plan
        self.device = torch.device(device)
        self.persistent = persistent
        self.slot_of = {k: sid for k, sid in plan.assignments.items() if k.kind in SLOT_BACKED}
        self.slots = {s.id: s for s in plan.slots if s.pool == "recv"}
        self.release_after = {
            sid: set(s.release_after or s.keys[-1:]) for sid, s in self.slots.items()
        }
        self.tensors: dict[int, torch.Tensor] = {}
        self.owner: dict[int, BufferKey] = {}
        self.released: set[tuple[int, int]] = set()  # (stage, mb) whose inputs/grads are dead
        self.allocations = 0
        self.reuses = 0
        self.fallbacks = 0
        self.on_alloc: Callable[[torch.Tensor], None] | None = None

    def new_step(self) -> None:
        self.released.clear()
        self.owner.clear()
        if not self.persistent:
            self.tensors.clear()

    def mark_released(self, stage: int, mb: int) -> None:
        self.released.add((stage, mb))

    def _fresh(self, meta: Any) -> torch.Tensor:
        return torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, device=self.device)

    def buffer_for(self, key: BufferKey, meta: Any) -> torch.Tensor:
        sid = self.slot_of.get(key)
        if sid is None:
            self.fallbacks += 1
            return self._fresh(meta)
        itemsize = torch.empty((), dtype=meta.dtype).element_size()
        span = 1 + sum((n - 1) * st for n, st in zip(meta.shape, meta.stride)) if all(
            n > 0 for n in meta.shape) else 0
        need = span * itemsize
        slot = self.slots[sid]
        prev = self.owner.get(sid)
        if need > slot.nbytes or (
            prev is not None and (prev.stage, prev.microbatch) not in self.released
        ):
            self.fallbacks += 1
            return self._fresh(meta)
        base = self.tensors.get(sid)
        if base is None:
            base = torch.empty(slot.nbytes, dtype=torch.uint8, device=self.device)
            self.tensors[sid] = base
            self.allocations += 1
            if self.on_alloc is not None:
                self.on_alloc(base)
        else:
            self.reuses += 1
        self.owner[sid] = key
        flat = base[:need].view(meta.dtype) if need else base[:0].view(meta.dtype)
        view = flat.as_strided(meta.shape, meta.stride)
        if not self.persistent and key in self.release_after[sid]:
            # end of a segment: the occupant alone keeps the storage now
            del self.tensors[sid]
        return view


@dataclass
class PlanHandle:
    """What ``apply_plan`` installed; ``remove()`` restores the schedule."""

    schedule: Any
    plan: BufferPlan
    pools: list[_SlotPool]
    _undo: list[Callable[[], None]]

    @property
    def stats(self) -> dict[str, int]:
        return {
            "slot_allocations": sum(p.allocations for p in self.pools),
            "slot_reuses": sum(p.reuses for p in self.pools),
            "fallbacks": sum(p.fallbacks for p in self.pools),
        }

    def set_alloc_callback(self, fn: Callable[[torch.Tensor], None] | None) -> None:
        for p in self.pools:
            p.on_alloc = fn

    def remove(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def _compute_sequence(actions: Sequence[_Action | None]) -> list[tuple]:
    return [
        _key(p)
        for a in actions
        if a is not None
        for p in _parts(a)
        if p.computation_type in COMPUTE
    ]


def _make_single_stage_runtime(schedule: Any, actions: dict[int, list[_Action]]) -> Any:
    """A runtime executor for a single-stage schedule's stage, running ``actions``."""
    stage = schedule._stage
    runtime = _sched._PipelineScheduleRuntime(
        [stage],
        schedule._n_microbatches,
        loss_fn=schedule._loss_fn,
        scale_grads=schedule.scale_grads,
    )
    runtime.pipeline_order_with_comms = {r: list(v) for r, v in actions.items()}
    return runtime


def apply_plan(
    schedule: Any, plan: PipelineBufferPlan | BufferPlan, *, persistent_slots: bool = False
) -> PlanHandle:
    """Make a real pipelining schedule run ``plan`` on this rank.

    * Runtime schedules (``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble``,
      ``ScheduleLoopedBFS``, ...): this rank's ``pipeline_order_with_comms`` becomes the plan's
      action list (same compute order; receives, send waits and UNSHARDs moved).
    * ``ScheduleGPipe`` / ``Schedule1F1B`` (hand-written loops): ``_step_microbatches`` is routed
      to 2.15's runtime executor running the plan's list for the same stage.
    * Receive buffers: each ``_RecvInfo`` of the local stages gets an instance-level
      ``allocate_buffer`` that serves the slot the plan assigned to (stage, microbatch) - the
      one place 2.15 allocates receive buffers, for both directions. The binding happens in
      per-stage wrappers of ``get_fwd_recv_ops``/``get_bwd_recv_ops`` (descriptors are created
      lazily on the first step); ``backward_one_chunk``/``backward_weight_one_chunk`` wrappers
      tell the pool when a microbatch's buffers are dead, and after an input backward drop the
      ``.grad`` copy of the input gradients (non-first stages; the send holds them).

    Call it on every rank, before the first step (the plans of all ranks come from one
    ``plan_pipeline`` call). ``PlanHandle.remove()`` undoes it.
    """
    multi = isinstance(schedule, _sched.PipelineScheduleMulti)
    if multi:
        stages = list(schedule._stages)
        rank = schedule.rank
    else:
        stages = [schedule._stage]
        rank = schedule._stage.group_rank
    if isinstance(plan, PipelineBufferPlan):
        all_actions = plan.actions
        rank_plan = plan.ranks[rank]
    else:
        rank_plan = plan
        all_actions = {rank: list(plan.actions)}
    undo: list[Callable[[], None]] = []

    if multi:
        if not isinstance(schedule, _sched._PipelineScheduleRuntime):
            raise TypeError(
                f"{type(schedule).__name__} does not run a lowered action list; "
                "use a runtime schedule"
            )
        current = schedule.pipeline_order_with_comms[rank]
        if _compute_sequence(current) != _compute_sequence(rank_plan.actions):
            raise ValueError("the plan's compute order differs from this schedule's")
        _sched._validate_send_waits({rank: list(rank_plan.actions)})
        pool = _SlotPool(rank_plan, stages[0].device, persistent=persistent_slots)
        saved = {r: list(v) for r, v in schedule.pipeline_order_with_comms.items()}
        for r, lst in all_actions.items():
            schedule.pipeline_order_with_comms[r] = list(lst)
        inner = schedule._step_microbatches

        def step_multi(*args: Any, **kwargs: Any) -> Any:
            pool.new_step()
            return inner(*args, **kwargs)

        schedule._step_microbatches = step_multi

        def restore_multi() -> None:
            schedule.pipeline_order_with_comms = saved
            vars(schedule).pop("_step_microbatches", None)

        undo.append(restore_multi)
    else:
        order = schedule_compute_order(schedule)
        if _compute_sequence(order[rank]) != _compute_sequence(rank_plan.actions):
            raise ValueError("the plan's compute order differs from this schedule's")
        _sched._validate_send_waits({rank: list(rank_plan.actions)})
        pool = _SlotPool(rank_plan, stages[0].device, persistent=persistent_slots)
        executor = _make_single_stage_runtime(schedule, {rank: list(rank_plan.actions)})

        def step_single(*args: Any, **kwargs: Any) -> Any:
            pool.new_step()
            executor._finalize_gradients = schedule._finalize_gradients
            executor._has_backward = schedule._has_backward  # eval() flips it on the schedule
            return executor._step_microbatches(*args, **kwargs)

        schedule._step_microbatches = step_single
        schedule._ext_plan_executor = executor

        def restore_single() -> None:
            vars(schedule).pop("_step_microbatches", None)
            vars(schedule).pop("_ext_plan_executor", None)

        undo.append(restore_single)

    pools = [pool]
    for stage in stages:
        _install_stage_hooks(stage, pool, undo)
    return PlanHandle(schedule, rank_plan, pools, undo)


def _install_stage_hooks(stage: Any, pool: _SlotPool, undo: list[Callable[[], None]]) -> None:
    sref = weakref.ref(stage)

    def bind(infos: Sequence[Any], kind: str, mb: int) -> None:
        for info in infos:
            if getattr(info, "is_root_arg", False) or info.tensor_meta is None:
                continue
            if vars(info).get("_ext_plan_key") == (kind, mb):
                continue
            key = BufferKey(kind, sref().stage_index, mb)

            def allocate_buffer(device: Any, _info=info, _key=key) -> torch.Tensor:
                if _info.buffer is not None:
                    raise PipeliningMetadataError(
                        f"Receive buffer for {_info.input_name!r} is still owned by an "
                        "incomplete pipeline step"
                    )
                buf = pool.buffer_for(_key, _info.tensor_meta)
                _info.buffer = buf
                return buf

            info.allocate_buffer = allocate_buffer
            info._ext_plan_key = (kind, mb)

    orig_fwd = stage.get_fwd_recv_ops
    orig_bwd = stage.get_bwd_recv_ops
    orig_b = stage.backward_one_chunk
    orig_w = stage.backward_weight_one_chunk

    def get_fwd_recv_ops(fwd_chunk_id: int) -> Any:
        bind(stage.args_recv_info[fwd_chunk_id], RECV_ACT, fwd_chunk_id)
        return orig_fwd(fwd_chunk_id)

    def get_bwd_recv_ops(bwd_chunk_id: int) -> Any:
        if stage.has_backward and not stage.is_last:
            bind(stage.grad_recv_info[bwd_chunk_id], RECV_GRAD, bwd_chunk_id)
        return orig_bwd(bwd_chunk_id)

    def backward_one_chunk(bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        out = orig_b(bwd_chunk_id, *args, **kwargs)
        if kwargs.get("full_backward", args[1] if len(args) > 1 else True):
            pool.mark_released(stage.stage_index, bwd_chunk_id)
        elif not stage.is_first:
            # the input backward left each input gradient in the input leaf's .grad as well;
            # the send owns it now, and the weight backward of a non-first stage never reads it
            state = stage.backward_state.get(bwd_chunk_id)
            for value in (state[0] if state else ()):
                if isinstance(value, torch.Tensor):
                    value.grad = None
        return out

    def backward_weight_one_chunk(bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        out = orig_w(bwd_chunk_id, *args, **kwargs)
        pool.mark_released(stage.stage_index, bwd_chunk_id)
        return out

    stage.get_fwd_recv_ops = get_fwd_recv_ops
    stage.get_bwd_recv_ops = get_bwd_recv_ops
    stage.backward_one_chunk = backward_one_chunk
    stage.backward_weight_one_chunk = backward_weight_one_chunk

    def restore() -> None:
        for name in (
            "get_fwd_recv_ops", "get_bwd_recv_ops", "backward_one_chunk",
            "backward_weight_one_chunk",
        ):
            vars(stage).pop(name, None)
        for infos in list(stage.args_recv_info.values()) + list(stage.grad_recv_info.values()):
            for info in infos:
                vars(info).pop("allocate_buffer", None)
                vars(info).pop("_ext_plan_key", None)

    undo.append(restore)
