"""The schedule IR of torch.distributed.pipelining as the buffer plan reads it: action kinds,
buffer keys, the rank topology, 2.15's own lowering passes and its single-stage loops."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.pipelining import schedules as _sched
from torch.distributed.pipelining.schedules import _Action, _ComputationType


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


def _gpipe_phase(stage: int, n: int, kinds: tuple[_ComputationType, ...], *, receives: bool,
                 sends: bool) -> list[_Action]:
    """One GPipe phase (all forwards, or all backwards): receive, compute, send per microbatch,
    then wait for every send."""
    recv, compute, send, wait = kinds
    acts: list[_Action] = []
    for k in range(n):
        if receives:
            acts.append(_Action(stage, recv, k))
        acts.append(_Action(stage, compute, k))
        if sends:
            acts.append(_Action(stage, send, k))
    if sends:
        acts += [_Action(stage, wait, k) for k in range(n)]
    return acts


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
            acts += _gpipe_phase(s, n, (RECV_F, F, SEND_F, WAIT_SEND_F), receives=not first, sends=not last)
            acts += _gpipe_phase(s, n, (RECV_B, B, SEND_B, WAIT_SEND_B), receives=not last, sends=not first)
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


