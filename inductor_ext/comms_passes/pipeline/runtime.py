"""The runtime hook: makes a real torch.distributed.pipelining schedule run a planned action
list, with its receive buffers backed by the plan's slots."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.pipelining import schedules as _sched
from torch.distributed.pipelining._utils import PipeliningMetadataError
from torch.distributed.pipelining.schedules import _Action

from inductor_ext.comms_passes.pipeline.ir import (
    BufferKey, COMPUTE, _key, _parts, RECV_ACT, RECV_GRAD, schedule_compute_order, SLOT_BACKED,
)
from inductor_ext.comms_passes.pipeline.buffers import (
    BufferPlan, PipelineBufferPlan,
)

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
        self.inputs: dict[BufferKey, weakref.ref] = {}  # received activations handed out
        self.released: set[tuple[int, int]] = set()  # (stage, mb) whose inputs/grads are dead
        self.allocations = 0
        self.reuses = 0
        self.fallbacks = 0
        self.on_alloc: Callable[[torch.Tensor], None] | None = None

    def new_step(self) -> None:
        self.released.clear()
        self.owner.clear()
        self.inputs.clear()
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
        # an alias of the slot's storage, not a view: a view would keep the slot tensor as its
        # ``_base``, so ``drop_input`` could not free the storage
        buf = torch.empty(0, dtype=meta.dtype, device=self.device).set_(
            base.untyped_storage(), 0, meta.shape, meta.stride
        )
        if key.kind == RECV_ACT:
            self.inputs[key] = weakref.ref(buf)
        if not self.persistent and key in self.release_after[sid]:
            # end of a segment: the occupant alone keeps the storage now
            del self.tensors[sid]
        return buf

    def drop_input(self, stage: int, mb: int) -> None:
        """Detach a consumed input of the last stage from its slot's storage.

        The loss keeps the input leaf reachable (loss -> AccumulateGrad -> leaf) for as long as
        the caller keeps the loss, which would hold the slot's storage to the end of the step
        and beyond; nothing reads the leaf after its full backward, so it gets an empty tensor.
        """
        ref = self.inputs.pop(BufferKey(RECV_ACT, stage, mb), None)
        leaf = ref() if ref is not None else None
        if leaf is not None:
            leaf.data = leaf.new_empty(0)


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
            if stage.is_last and not stage.is_first:
                pool.drop_input(stage.stage_index, bwd_chunk_id)
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
