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

This module is the front: what users and tests import, ``plan_for_schedule`` (a real schedule
object) and ``replay_peak_bytes`` (a schedule's peak under a policy). The moves live in
``placement.py``, the search in ``search.py``, the IR, replay, lifetimes and run-time hook in
``ir.py``, ``sim.py``, ``buffers.py`` and ``runtime.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch.distributed.pipelining import schedules as _sched
from torch.distributed.pipelining.schedules import _Action

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
from inductor_ext.comms_passes.pipeline.placement import spread_unshards  # noqa: F401 (public API re-exported below)
from inductor_ext.comms_passes.pipeline.search import plan_pipeline  # noqa: F401 (public API re-exported below)

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
