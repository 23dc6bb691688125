"""SimpleFSDP-style data parallelism whose collectives reach the compiled graph.

FSDP2's hooks are ``torch._dynamo.disable``d, so its all-gathers never show up in a compiled graph
and no graph pass can schedule them. ``data_parallel`` instead expresses sharding in the model
itself, the way SimpleFSDP does:

* every parameter becomes a ``DTensor`` sharded on dim 0 (``Shard(0)``) over a 1-D mesh;
* a parametrization turns it back into a full, plain tensor on every access: it casts the local
  shard to the compute dtype and redistributes it to ``Replicate`` (an all-gather of the shard);
* autograd's transpose of that all-gather is a reduce-scatter of the gradient, done in the reduce
  dtype with an ``avg`` over the ranks (the data-parallel mean);
* with ``reshard_after_forward`` the gather runs inside a selective-checkpoint region whose policy
  is "must recompute": the joint graph tags the all-gather chain so the partitioner gathers again
  in the backward instead of keeping full parameters alive between forward and backward.

The result works eagerly and under ``torch.compile(backend="ext")`` (or ``"inductor"``): the
forward graph holds ``_c10d_functional.all_gather_into_tensor`` + ``wait_tensor`` per parameter,
the backward the re-gathers and ``reduce_scatter_tensor`` + ``wait_tensor`` per parameter. The
``fsdp_overlap`` pass buckets and schedules them; with ``fp32_params`` a bucket mixes bf16 and fp32
shards and the pass still gathers it in ONE all-gather (as bytes).

Parameters keep their fully-qualified names in ``named_parameters()`` only through
parametrizations (``layer.weight`` becomes ``layer.parametrizations.weight.original``); use
``sharded_parameter_names(model)`` for the original names.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Callable, Mapping, Sequence, Union

import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import Partial
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

__all__ = ["data_parallel", "ParamGather", "NextStepGather", "sharded_parameter_names", "FP32Predicate"]

# A predicate on (fully-qualified parameter name, parameter), or fnmatch patterns on the name.
FP32Predicate = Union[Callable[[str, nn.Parameter], bool], str, Sequence[str], None]


def _must_recompute(ctx, op, *args, **kwargs) -> CheckpointPolicy:  # noqa: ANN001
    # Everything in the gather region (cast, all_gather, wait, unpad views) is recomputed in the
    # backward: the full parameter is not saved between forward and backward.
    return CheckpointPolicy.MUST_RECOMPUTE


def _recompute_context():
    return create_selective_checkpoint_contexts(_must_recompute)


class ParamGather(nn.Module):
    """The parametrization of one sharded parameter: DTensor shard in, full plain tensor out."""

    def __init__(self, param_dtype: torch.dtype | None, reduce_dtype: torch.dtype | None,
                 reshard_after_forward: bool) -> None:
        super().__init__()
        self.param_dtype = param_dtype
        self.reduce_dtype = reduce_dtype
        self.reshard_after_forward = reshard_after_forward
        # set by NextStepGather: the in-flight gather of this step, issued behind the optimizer step
        self.prefetched: torch.Tensor | None = None

    def extra_repr(self) -> str:
        return (f"param_dtype={self.param_dtype}, reduce_dtype={self.reduce_dtype}, "
                f"reshard_after_forward={self.reshard_after_forward}")

    def _gather(self, shard: DTensor) -> torch.Tensor:
        full = shard.redistribute(shard.device_mesh, [Replicate()] * shard.device_mesh.ndim,
                                  forward_dtype=self.param_dtype, backward_dtype=self.reduce_dtype)
        # The gradient of the replicated value is a per-rank partial gradient of the global mean
        # loss: averaging over the ranks is the data-parallel mean, done by the reduce-scatter.
        return full.to_local(grad_placements=[Partial("avg")] * shard.device_mesh.ndim)

    def _from_prefetched(self, shard: DTensor, raw: torch.Tensor) -> torch.Tensor:
        mesh = shard.device_mesh
        full = torch.ops._c10d_functional.wait_tensor(raw)[:shard.shape[0]]
        return _Gathered.apply(shard.to_local(), full, mesh.get_group().group_name, mesh.size(), self.reduce_dtype)

    def forward(self, shard: torch.Tensor) -> torch.Tensor:
        if not isinstance(shard, DTensor):  # e.g. already gathered by a caller: nothing to do
            return shard
        if self.prefetched is not None:
            raw, self.prefetched = self.prefetched, None
            return self._from_prefetched(shard, raw)
        if self.reshard_after_forward and torch.is_grad_enabled() and shard.requires_grad:
            return checkpoint(self._gather, shard, use_reentrant=False, context_fn=_recompute_context)
        return self._gather(shard)


class _Gathered(torch.autograd.Function):
    """A parameter's full value gathered before the graph (NextStepGather), with the gradient the
    in-graph gather gives it: cast to the reduce dtype, padded to whole shards, averaged and
    scattered over the ranks (what DTensor does for Partial("avg") -> Shard(0)), cast back."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, full: torch.Tensor, group_name: str, world: int,
                reduce_dtype: torch.dtype | None) -> torch.Tensor:
        ctx.meta = (local.shape[0], local.dtype, group_name, world, reduce_dtype)
        return full.view_as(full)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        rows, dtype, group_name, world, reduce_dtype = ctx.meta
        g = grad.to(reduce_dtype) if reduce_dtype is not None else grad
        chunk = -(-g.shape[0] // world)
        if chunk * world != g.shape[0]:
            g = torch.nn.functional.pad(g, [0, 0] * (g.dim() - 1) + [0, chunk * world - g.shape[0]])
        part = funcol.wait_tensor(funcol.reduce_scatter_tensor(g.contiguous(), "avg", 0, group_name))
        return part[:rows].to(dtype), None, None, None, None


class NextStepGather:
    """Gathers some parameters for the next forward right after the optimizer updated them, so the
    transfer runs behind the rest of the optimizer step instead of at the start of the forward.

    ``names``: fnmatch patterns of original parameter names (``sharded_parameter_names``), e.g.
    ``["tok_embeddings.*"]``: the first gather of a step, which nothing in the forward can hide.
    Call the object (``gather()``) when their shards are final for the next step; ``after(opt)``
    does it from ``opt``'s step post-hook, so give those parameters an optimizer of their own that
    steps first, e.g. ``opt_first.step(); opt_rest.step()``. The next forward (eager or compiled)
    waits for the prefetched values where it would have gathered; anything else (no prefetch, an
    extra forward) gathers as usual. The numbers are the same as without it. Compiled graphs take
    the in-flight tensor as an input (``_set_allow_inflight_collective_as_graph_input``); the first
    forward after a prefetch compiles once more (a graph without that gather); ``close()`` sets
    that process-wide flag back to what it was before the first gather.
    """

    def __init__(self, model: nn.Module, names: FP32Predicate) -> None:
        match = _fp32_matcher(names)
        self.targets: list[tuple[str, ParamGather, DTensor]] = []
        for mod_name, module in model.named_modules():
            if not parametrize.is_parametrized(module):
                continue
            for pname, plist in module.parametrizations.items():
                fqn = f"{mod_name}.{pname}" if mod_name else pname
                if match(fqn, plist.original):
                    self.targets.append((fqn, plist[0], plist.original))
        if not self.targets:
            raise ValueError(f"NextStepGather: no data_parallel parameter matches {names!r}")
        self._hooks: list[Any] = []
        self._inflight_flag_before: bool | None = None  # the process-wide flag before the first gather

    def __call__(self) -> None:
        if self._inflight_flag_before is None:
            self._inflight_flag_before = torch._C._distributed_c10d._allow_inflight_collective_as_graph_input()
        torch._C._distributed_c10d._set_allow_inflight_collective_as_graph_input(True)
        with torch.no_grad():
            for _, gather, shard in self.targets:
                mesh = shard.device_mesh
                local = shard.to_local()
                if gather.param_dtype is not None:
                    local = local.to(gather.param_dtype)
                chunk = -(-shard.shape[0] // mesh.size())
                if local.shape[0] < chunk:  # uneven shards: whole chunks on the wire, as DTensor does
                    local = torch.nn.functional.pad(local, [0, 0] * (local.dim() - 1) + [0, chunk - local.shape[0]])
                gather.prefetched = torch.ops._c10d_functional.all_gather_into_tensor(
                    local.contiguous(), mesh.size(), mesh.get_group().group_name)

    def after(self, optimizer: torch.optim.Optimizer) -> Any:
        """Gather after each ``optimizer.step()``; returns the hook handle (``.remove()``)."""
        handle = optimizer.register_step_post_hook(lambda opt, args, kwargs: self())
        self._hooks.append(handle)
        return handle

    def close(self) -> None:
        """Stop prefetching: remove the hooks, wait for and drop gathers no forward consumed, and
        set the in-flight-input flag back (other code in the process may rely on its default)."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        for _, gather, _ in self.targets:
            if gather.prefetched is not None:
                torch.ops._c10d_functional.wait_tensor(gather.prefetched)
                gather.prefetched = None
        if self._inflight_flag_before is not None:
            torch._C._distributed_c10d._set_allow_inflight_collective_as_graph_input(self._inflight_flag_before)
            self._inflight_flag_before = None


def _fp32_matcher(fp32_params: FP32Predicate) -> Callable[[str, nn.Parameter], bool]:
    if fp32_params is None:
        return lambda name, p: False
    if callable(fp32_params):
        return fp32_params
    patterns = (fp32_params,) if isinstance(fp32_params, str) else tuple(fp32_params)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"fp32_params: expected a predicate(name, param) or name patterns, got {fp32_params!r}")
    return lambda name, p: any(fnmatch.fnmatchcase(name, pat) for pat in patterns)


def _keep_matcher(keep: FP32Predicate | int, owners: list, is_fp32: Callable[[str, nn.Parameter], bool],
                  param_dtype: torch.dtype | None) -> Callable[[str, nn.Parameter], bool]:
    """``keep_gathered`` as a predicate; a byte budget picks the last-registered parameters."""
    if isinstance(keep, bool) or (isinstance(keep, int) and keep < 0):
        raise ValueError(f"keep_gathered: expected name patterns, a predicate or a byte budget >= 0, got {keep!r}")
    if not isinstance(keep, int):
        return _fp32_matcher(keep)
    chosen: set[str] = set()
    used = 0
    seen: set[int] = set()
    for _, _, fqn, param in reversed(owners):
        if id(param) in seen:
            continue
        seen.add(id(param))
        dtype = torch.float32 if is_fp32(fqn, param) else (param_dtype or param.dtype)
        nbytes = param.numel() * torch.empty((), dtype=dtype).element_size()
        if used + nbytes > keep:
            break
        used += nbytes
        chosen.add(fqn)
    return lambda name, p: name in chosen


def _reduce_dtype_matcher(table: Mapping[str, torch.dtype] | None) -> Callable[[str, torch.dtype | None],
                                                                                 torch.dtype | None]:
    if table is None:
        return lambda name, default: default
    if not isinstance(table, Mapping) or not all(isinstance(k, str) and isinstance(v, torch.dtype)
                                                 for k, v in table.items()):
        raise TypeError(f"reduce_dtypes: expected {{name pattern: torch.dtype}}, got {table!r}")
    items = list(table.items())
    return lambda name, default: next((d for pat, d in items if fnmatch.fnmatchcase(name, pat)), default)


def _shard(param: nn.Parameter, mesh: DeviceMesh) -> nn.Parameter:
    placements = [Shard(0)] + [Replicate()] * (mesh.ndim - 1)
    # src_data_rank=None: every rank already holds the same initial values (same seed or a
    # reference state dict), so each takes its own chunk without a scatter.
    dt = distribute_tensor(param.detach(), mesh, placements, src_data_rank=None)
    return nn.Parameter(dt, requires_grad=param.requires_grad)


def data_parallel(model: nn.Module, mesh: DeviceMesh, *, param_dtype: torch.dtype | None = torch.bfloat16,
                  reduce_dtype: torch.dtype | None = torch.float32, fp32_params: FP32Predicate = None,
                  reshard_after_forward: bool = True, keep_gathered: FP32Predicate | int = None,
                  reduce_dtypes: Mapping[str, torch.dtype] | None = None) -> nn.Module:
    """Shard ``model``'s parameters over ``mesh`` (SimpleFSDP style), in place; returns ``model``.

    Args:
        model: any module; its parameters must have at least one dimension.
        mesh: a 1-D DeviceMesh (the data-parallel group).
        param_dtype: compute dtype of gathered parameters (None keeps each parameter's dtype).
        reduce_dtype: dtype of the gradient reduce-scatter (None: the parameter's dtype).
        fp32_params: parameters kept in float32 for compute: a predicate ``(name, param) -> bool``
            or fnmatch patterns on the fully-qualified name, e.g. ``["*.router.*", "*norm*"]``.
        reshard_after_forward: free full parameters after forward and gather again in backward.
        keep_gathered: parameters kept gathered from forward to backward even when
            ``reshard_after_forward`` (FSDP2 does this for its root): a predicate or name patterns,
            or a byte budget (int) that takes the last-registered parameters (the output head, the
            final norm, then the last block's, in a model that registers its modules in the order
            it runs them) while their gathered size fits. The backward then starts without
            gathering them again, for that much more memory between forward and backward.
        reduce_dtypes: per-parameter reduce dtype, ``{name pattern: dtype}`` (first match wins),
            e.g. ``{"tok_embeddings.*": torch.bfloat16}``: halves that reduce-scatter, at the cost
            of rounding the gradient sum in bf16 (lossy; only what you ask for changes).
    """
    if mesh.ndim != 1:
        raise ValueError(f"data_parallel needs a 1-D DeviceMesh, got a {mesh.ndim}-D mesh")
    is_fp32 = _fp32_matcher(fp32_params)
    # Tied parameters (one Parameter under two names) are sharded once and parametrized in each
    # owner with the same DTensor, so they stay tied.
    sharded: dict[int, nn.Parameter] = {}
    owners: list[tuple[nn.Module, str, str, nn.Parameter]] = []
    for mod_name, module in model.named_modules():  # a module shared under two names: once
        for pname, param in list(module.named_parameters(recurse=False)):
            if param is None:
                continue
            fqn = f"{mod_name}.{pname}" if mod_name else pname
            owners.append((module, pname, fqn, param))
    keep = _keep_matcher(keep_gathered, owners, is_fp32, param_dtype)
    reduce_of = _reduce_dtype_matcher(reduce_dtypes)
    for module, pname, fqn, param in owners:
        if isinstance(param, DTensor) or parametrize.is_parametrized(module, pname):
            raise ValueError(f"{fqn} is already a DTensor or parametrized; apply data_parallel once")
        if param.dim() == 0:
            raise ValueError(f"{fqn} is a 0-d parameter; data_parallel shards dim 0")
        if id(param) not in sharded:
            sharded[id(param)] = _shard(param, mesh)
        dt_param = sharded[id(param)]
        fp32 = is_fp32(fqn, param)
        reduce = torch.float32 if fp32 and reduce_dtype is not None else reduce_dtype
        gather = ParamGather(torch.float32 if fp32 else param_dtype, reduce_of(fqn, reduce),
                             reshard_after_forward and not keep(fqn, param))
        delattr(module, pname)
        module.register_parameter(pname, dt_param)
        parametrize.register_parametrization(module, pname, gather, unsafe=True)
    return model


def sharded_parameter_names(model: nn.Module) -> dict[str, nn.Parameter]:
    """Original fully-qualified names -> sharded DTensor parameters of a ``data_parallel`` model."""
    out: dict[str, nn.Parameter] = {}
    for mod_name, module in model.named_modules():
        if not parametrize.is_parametrized(module):
            continue
        for pname, plist in module.parametrizations.items():
            fqn = f"{mod_name}.{pname}" if mod_name else pname
            out[fqn] = plist.original
    return out
