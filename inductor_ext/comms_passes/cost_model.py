"""Analytical cost model for compute/communication overlap: GPU datasheets, collectives, roofline.

Everything here is an estimate from public datasheet figures, never a measurement: Inductor's
own roofline returns 0 on a machine without a GPU, so passes and reports that reason about
overlap on CPU need an explicit target. The model is pluggable (``CostModel`` protocol); the
default ``AnalyticalCostModel`` is

* collectives: alpha-beta, ring algorithm, per collective type and world size::

      all_gather / reduce_scatter / all_to_all:  t = launch + (p-1) * step_latency + (p-1)/p * N / BW
      all_reduce (reduce-scatter + all-gather):   t = launch + 2(p-1) * step_latency + 2(p-1)/p * N / BW

  where N is the size of the full (unsharded) buffer, p the group size and BW the achievable
  per-GPU link bandwidth in one direction (NVLink / Infinity Fabric inside a node, the NIC across
  nodes);
* compute: roofline, ``max(flops / (peak[dtype] * eff), bytes / (hbm * eff))`` per FX node, with
  FLOPs from ``torch.utils.flop_counter`` and a simple fusion rule (an intermediate passed between
  two pointwise nodes is not read or written from HBM, as Inductor would fuse them);
* ``simulate(nodes)``: one compute stream and one communication stream per process group; a
  collective starts when it is issued and its stream is free, a ``wait_tensor`` stalls the compute
  stream until its collective ends. It returns the makespan, the exposed communication (compute
  stream stalls), the number of collectives, peak bytes in flight and estimated peak memory.

Determinism: every figure depends only on the graph (shapes, dtypes, order) and the datasheet,
never on the rank, the host or timing, so every rank that evaluates the same graph agrees.

It is one module of a bit over 600 lines on purpose: collective recognition, the roofline, the
storage lifetimes and ``simulate`` are one model whose parts share their node helpers, and the
``fsdp_overlap`` pass keys its cache on this module's source as "the cost model's code".
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from inductor_ext.targets import Datasheet, datasheets

__all__ = [
    "GPUSpec", "GPUS", "get_gpu", "CostModel", "AnalyticalCostModel", "CollectiveInfo",
    "collective_info", "wait_collective", "is_wait", "Timeline", "simulate", "memory_profile",
    "unwrap_control_deps", "Span", "optimizer_step_time",
]

c10d = torch.ops._c10d_functional


# --------------------------------------------------------------------------------------------
# Datasheets
# --------------------------------------------------------------------------------------------

# The figures live with the targets (``targets/<vendor>.py``), one datasheet per part.
GPUSpec = Datasheet
GPUS: dict[str, GPUSpec] = datasheets()


def get_gpu(gpu: str | GPUSpec) -> GPUSpec:
    if isinstance(gpu, GPUSpec):
        return gpu
    key = gpu.upper()
    if key not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; known datasheets: {', '.join(GPUS)}")
    return GPUS[key]


# --------------------------------------------------------------------------------------------
# Recognising collectives
# --------------------------------------------------------------------------------------------

_KINDS: dict[Any, str] = {}


def _register_kinds() -> None:
    table = {
        "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_out": "all_gather",
        "all_gather_into_tensor_coalesced": "all_gather",
        "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
        "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
        "all_to_all_single": "all_to_all", "broadcast": "broadcast",
    }
    for name, kind in table.items():
        packet = getattr(c10d, name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            _KINDS[getattr(packet, overload)] = kind


_register_kinds()


@dataclass(frozen=True)
class CollectiveInfo:
    kind: str  # all_gather | reduce_scatter | all_reduce | all_to_all | broadcast
    group: str
    group_size: int
    nbytes: int  # the full buffer: all_gather output, reduce_scatter input, all_reduce buffer
    in_bytes: int
    out_bytes: int


def _tensors(x: Any) -> list[torch.Tensor]:
    flat, _ = tree_flatten(x)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, fx.Node) else n


def _nbytes(t: torch.Tensor) -> int:
    try:
        return int(t.numel()) * t.element_size()
    except Exception:  # symbolic sizes without hints
        return 0


def _group_size(group_name: str, default: int) -> int:
    try:
        from torch.distributed.distributed_c10d import _resolve_process_group

        return _resolve_process_group(group_name).size()
    except Exception:
        return default


def collective_info(node: fx.Node, default_world_size: int = 8) -> CollectiveInfo | None:
    """What a ``_c10d_functional`` collective node moves, or None if ``node`` is not one."""
    if node.op != "call_function":
        return None
    kind = _KINDS.get(node.target)
    if kind is None:
        return None
    schema = node.target._schema  # type: ignore[union-attr]
    bound = dict(zip((a.name for a in schema.arguments), node.args))
    bound.update(node.kwargs)
    group = str(bound.get("group_name", ""))
    size = bound.get("group_size")
    if not isinstance(size, int):
        size = _group_size(group, default_world_size)
    first = node.args[0] if node.args else None  # the input (the out= buffer of *_out is not one)
    in_bytes = sum(_nbytes(t) for t in _tensors(
        [_val(a) for a in (first if isinstance(first, (list, tuple)) else [first])]))
    out_bytes = sum(_nbytes(t) for t in _tensors(_val(node)))
    full = {"all_gather": out_bytes, "reduce_scatter": in_bytes}.get(kind, max(in_bytes, out_bytes))
    return CollectiveInfo(kind, group, int(size), full, in_bytes, out_bytes)


def unwrap_control_deps(node: fx.Node) -> fx.Node:
    """The op a ``control_deps`` node runs (the node of its subgraph), or ``node`` itself.

    2.15's overlap scheduler and ``fsdp_overlap.pin_order`` wrap ops in ``control_deps`` to pin
    their order; the wrapped op keeps its metadata, and its subgraph's inputs the values."""
    target = getattr(torch.ops.higher_order, "control_deps", None)
    if target is None or node.op != "call_function" or node.target is not target:
        return node
    sub = node.args[1]
    gm = getattr(sub.graph.owning_module, sub.target) if isinstance(sub, fx.Node) else sub
    return next(n for n in gm.graph.nodes if n.op == "call_function")


def is_wait(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is c10d.wait_tensor.default


def wait_collective(node: fx.Node) -> fx.Node | None:
    """The collective a ``wait_tensor`` waits on (through a getitem for coalesced ones)."""
    if not is_wait(node):
        return None
    arg = node.args[0]
    if isinstance(arg, fx.Node) and arg.op == "call_function" and arg.target is operator.getitem:
        arg = arg.args[0]
    if isinstance(arg, fx.Node) and arg.op == "call_function" and arg.target in _KINDS:
        return arg
    return None


# --------------------------------------------------------------------------------------------
# The cost model
# --------------------------------------------------------------------------------------------

@runtime_checkable
class CostModel(Protocol):
    """What passes and reports ask of a cost model (times in seconds)."""

    def collective_time(self, kind: str, nbytes: int, group_size: int) -> float: ...

    def node_time(self, node: fx.Node) -> float:
        """Compute-stream time of a non-collective node (0 for views and bookkeeping)."""
        ...


_FREE_TARGETS = {operator.getitem}
_aten = torch.ops.aten
_GATHER_OPS = {_aten.embedding, _aten.index_select, _aten.gather, _aten._unsafe_index, _aten.index}
_SCATTER_OPS = {_aten.index_put, _aten._unsafe_index_put, _aten.index_add, _aten.scatter_add,
                _aten._unsafe_masked_index_put_accumulate}


def _is_view_like(node: fx.Node) -> bool:
    t = node.target
    if t in _FREE_TARGETS or is_wait(node):
        return True
    if t in (torch.ops.aten.reshape.default, torch.ops.aten.contiguous.default):
        # a view when the strides allow it, else a copy (as eager and Inductor do)
        out, src = _val(node), _val(node.args[0]) if node.args else None
        if isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor):
            try:
                return torch._C._is_alias_of(out, src)
            except Exception:
                return True
        return True
    if getattr(t, "is_view", False):
        return True
    schema = getattr(t, "_schema", None)
    if schema is not None and schema.returns and schema.returns[0].alias_info is not None \
            and not schema.returns[0].alias_info.is_write:
        return True
    return t in (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
                 torch.ops.aten.reshape.default, torch.ops.aten.expand.default,
                 torch.ops.aten.permute.default, torch.ops.aten.t.default)


def _is_pointwise(node: fx.Node) -> bool:
    return node.op == "call_function" and torch.Tag.pointwise in getattr(node.target, "tags", ())


def _group_size_arg(node: fx.Node) -> int:
    size = node.args[1] if len(node.args) > 1 else node.kwargs.get("group_size", 1)
    return size if isinstance(size, int) else 1


def _flop_count(node: fx.Node) -> float:
    from torch.utils.flop_counter import flop_registry

    target = node.target
    key = getattr(target, "overloadpacket", None)
    fn = flop_registry.get(key) or flop_registry.get(target)  # type: ignore[call-overload]
    if fn is None:
        return 0.0
    args = [_val(a) if isinstance(a, fx.Node) else a for a in node.args]
    kwargs = {k: (_val(v) if isinstance(v, fx.Node) else v) for k, v in node.kwargs.items()}
    try:
        return float(fn(*args, **kwargs, out_val=_val(node)))
    except Exception:
        return 0.0


@dataclass
class AnalyticalCostModel:
    """Alpha-beta ring collectives and per-node roofline over an explicit GPU datasheet."""

    gpu: GPUSpec | str = "H100"
    default_world_size: int = 8
    model_fusion: bool = True

    def __post_init__(self) -> None:
        self.gpu = get_gpu(self.gpu)
        self._cache: dict[fx.Node, float] = {}

    # -- collectives ---------------------------------------------------------------------
    def collective_time(self, kind: str, nbytes: int, group_size: int) -> float:
        g = self.gpu
        p = max(int(group_size), 1)
        if p == 1 or nbytes <= 0:
            return g.collective_launch if p > 1 else 0.0
        intra = p <= g.gpus_per_node
        bw = (g.link_bandwidth * g.link_efficiency) if intra else (g.internode_bandwidth * g.link_efficiency)
        step = g.link_latency if intra else g.internode_latency
        if kind == "all_reduce":
            steps, moved = 2 * (p - 1), 2 * (p - 1) / p * nbytes
        elif kind == "broadcast":
            steps, moved = p - 1, float(nbytes)
        else:  # all_gather, reduce_scatter, all_to_all
            steps, moved = p - 1, (p - 1) / p * nbytes
        return g.collective_launch + steps * step + moved / bw

    def collective_node_time(self, node: fx.Node) -> float:
        info = collective_info(node, self.default_world_size)
        if info is None:
            return 0.0
        return self.collective_time(info.kind, info.nbytes, info.group_size)

    # -- compute ---------------------------------------------------------------------------
    def node_time(self, node: fx.Node) -> float:
        cached = self._cache.get(node)
        if cached is not None:
            return cached
        t = self._node_time(node)
        self._cache[node] = t
        return t

    def invalidate(self) -> None:
        self._cache.clear()

    def _node_time(self, node: fx.Node) -> float:
        if node.op != "call_function" or _is_view_like(node) or node.target in _KINDS:
            return 0.0
        g = self.gpu
        outs = _tensors(_val(node))
        if not outs:
            return 0.0
        flops = _flop_count(node)
        pointwise = _is_pointwise(node)
        read = 0
        for a in node.all_input_nodes:
            if self.model_fusion and pointwise and self._fused_intermediate(a):
                continue
            read += sum(_nbytes(t) for t in _tensors(_val(a)))
        written = 0 if (self.model_fusion and self._fused_intermediate(node)) else sum(_nbytes(t) for t in outs)
        packet = getattr(node.target, "overloadpacket", None)
        if packet in _GATHER_OPS:  # reads the rows it returns, not the whole table
            written = sum(_nbytes(t) for t in outs)
            read = written + sum(_nbytes(t) for a in node.all_input_nodes[1:] for t in _tensors(_val(a)))
        elif packet in _SCATTER_OPS:  # accumulates the values into the table in place
            values = sum(_nbytes(t) for a in node.all_input_nodes[1:] for t in _tensors(_val(a)))
            read, written = values, values
        elif "_pre_bucket_all_gather" in str(node.target):
            # Inductor's bucketing op: allocates the gathered buffer, writes only this rank's slot
            read = sum(_nbytes(t) for a in node.all_input_nodes for t in _tensors(_val(a)))
            written = sum(_nbytes(t) for t in outs) // max(1, _group_size_arg(node))
        elif node.target is _aten.cat.default and self.model_fusion:
            # Inductor computes pointwise producers straight into their slice of the output.
            direct = sum(_nbytes(t) for a in node.all_input_nodes if self._writes_into(a, node)
                         for t in _tensors(_val(a)))
            read -= direct
            written -= direct
        dtype = next((t.dtype for t in outs if t.is_floating_point()), torch.bfloat16)
        if flops:
            in_dtypes = [t.dtype for a in node.all_input_nodes for t in _tensors(_val(a)) if t.is_floating_point()]
            dtype = in_dtypes[0] if in_dtypes else dtype
        t_compute = flops / (g.flops_for(dtype) * g.flops_efficiency) if flops else 0.0
        t_memory = (read + written) / (g.hbm_bandwidth * g.memory_efficiency)
        if t_compute == 0.0 and t_memory == 0.0:
            return 0.0
        # A fused intermediate costs no kernel of its own.
        launch = 0.0 if (self.model_fusion and self._fused_intermediate(node)) else g.kernel_launch
        return max(t_compute, t_memory) + launch

    def _writes_into(self, node: fx.Node, consumer: fx.Node) -> bool:
        """``node`` is a single-use pointwise result (through views) consumed only by ``consumer``."""
        while True:
            if len(node.users) != 1 or next(iter(node.users)) is not consumer and consumer not in node.users:
                return False
            if _is_pointwise(node):
                return True
            if node.op != "call_function" or not _is_view_like(node) or not node.all_input_nodes:
                return False
            consumer, node = node, node.all_input_nodes[0]

    def _fused_intermediate(self, node: fx.Node) -> bool:
        """A pointwise result consumed only by pointwise nodes: Inductor keeps it in registers."""
        if not _is_pointwise(node) or not node.users:
            return False
        return all(_is_pointwise(u) for u in node.users)

    # -- Inductor adapter ----------------------------------------------------------------------
    def inductor_estimator(self) -> Callable[[fx.Node, int | None], float | None]:
        """``custom_runtime_estimation(node, override_size) -> ms`` for Inductor's overlap scheduler."""

        def estimate(node: fx.Node, override_size: int | None = None) -> float | None:
            info = collective_info(node, self.default_world_size)
            if info is not None:
                nbytes = info.nbytes if override_size is None else int(override_size)
                return self.collective_time(info.kind, nbytes, info.group_size) * 1e3
            if node.op != "call_function":
                return None
            return self.node_time(node) * 1e3

        return estimate


def optimizer_step_time(elements: int, model: AnalyticalCostModel, bytes_per_element: int = 28) -> float:
    """Seconds of an elementwise optimizer step over ``elements`` local parameter elements: memory
    bound; the default 28 bytes are AdamW on fp32 (read parameter, gradient and both moments,
    write parameter and both moments)."""
    g = model.gpu
    return elements * bytes_per_element / (g.hbm_bandwidth * g.memory_efficiency) + g.kernel_launch


def node_duration(model: CostModel, node: fx.Node, default_world_size: int = 8) -> float:
    info = collective_info(node, default_world_size)
    if info is not None:
        return model.collective_time(info.kind, info.nbytes, info.group_size)
    return model.node_time(node)


# --------------------------------------------------------------------------------------------
# Memory: storage lifetimes along an order
# --------------------------------------------------------------------------------------------

def is_view_like(node: fx.Node) -> bool:
    """Whether ``node`` returns a view of its input (no kernel, no new storage)."""
    return _is_view_like(node)


def _alias_root(node: fx.Node, roots: dict[fx.Node, fx.Node]) -> fx.Node:
    if node.op == "call_function" and (_is_view_like(node) or _returns_alias(node)):
        src = next((a for a in node.all_input_nodes if _tensors(_val(a))), None)
        if src is not None:
            return roots.get(src, src)
    return node


def _returns_alias(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.returns and schema.returns[0].alias_info is not None)


def memory_profile(nodes: Sequence[fx.Node], default_world_size: int = 8,
                   size_overrides: Mapping[str, int] | None = None) -> tuple[list[int], int]:
    """Live bytes after each node of ``nodes`` (an execution order) and the baseline.

    ``size_overrides`` (node name -> bytes) replaces the size of those nodes' storages.

    A storage is allocated by the node that creates it (views, getitem and wait_tensor alias their
    input) and freed after the last use of any of its aliases. Placeholders and graph outputs live
    throughout. A collective's inputs stay alive until its wait (the communication stream reads
    them), and its output is allocated when it is issued.
    """
    order = {n: i for i, n in enumerate(nodes)}
    roots: dict[fx.Node, fx.Node] = {}
    size: dict[fx.Node, int] = {}
    last: dict[fx.Node, int] = {}
    pinned: set[fx.Node] = set()
    coll_wait: dict[fx.Node, int] = {}
    for n in nodes:
        c = wait_collective(n)
        if c is not None:
            coll_wait[c] = max(coll_wait.get(c, -1), order[n])
    for n in nodes:
        r = _alias_root(n, roots)
        roots[n] = r
        if r is n:
            size[n] = sum(_nbytes(t) for t in _tensors(_val(n))) if n.op != "output" else 0
            if size_overrides is not None and n.name in size_overrides:
                size[n] = size_overrides[n.name]
            last[n] = order[n]
        if n.op == "placeholder":
            pinned.add(n)
        if n.op == "output":
            for a in n.all_input_nodes:
                pinned.add(roots.get(a, a))
    for n in nodes:
        i = order[n]
        for a in n.all_input_nodes:
            ra = roots.get(a, a)
            if ra in last:
                last[ra] = max(last[ra], i)
        if n in coll_wait:  # inputs of a collective stay alive until its wait
            for a in n.all_input_nodes:
                ra = roots.get(a, a)
                if ra in last:
                    last[ra] = max(last[ra], coll_wait[n])
            if n in last:
                last[n] = max(last[n], coll_wait[n])
    baseline = sum(size[p] for p in pinned if p.op == "placeholder")
    delta = [0] * (len(nodes) + 1)
    for r, s in size.items():
        if r.op == "placeholder" or s == 0:
            continue
        delta[order[r]] += s
        if r not in pinned:
            delta[last[r] + 1] -= s
    live, cur = [], baseline
    for i in range(len(nodes)):
        cur += delta[i]
        live.append(cur)
        # frees scheduled after node i happen before node i+1 allocates (delta[i+1] holds both)
    return live, baseline


_EMPTY = {_aten.empty.memory_format, _aten.empty_strided.default, _aten.empty_like.default,
          _aten.new_empty.default, _aten.new_empty_strided.default}


def _written_args(node: fx.Node) -> list[fx.Node]:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    out: list[fx.Node] = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        v = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, fx.Node):
                out.append(x)
    return out


def uninitialized_reads(nodes: Sequence[fx.Node]) -> list[tuple[fx.Node, fx.Node]]:
    """(reader, buffer) pairs where a node reads an ``empty`` buffer before anything wrote it.

    Bucketing that allocates outputs with ``empty`` and fills them with an ``out=`` copy after the
    wait relies on the copy preceding every reader; a reordering that ignores those mutations
    produces a schedule whose readers see uninitialised memory. Such a schedule is not a valid
    candidate, whatever its timeline says.
    """
    roots: dict[fx.Node, fx.Node] = {}
    written: set[fx.Node] = set()
    bad: list[tuple[fx.Node, fx.Node]] = []
    for n in nodes:
        roots[n] = _alias_root(n, roots)
        if n.op != "call_function":
            continue
        writes = {roots.get(a, a) for a in _written_args(n)}
        if not (_is_view_like(n) or _returns_alias(n)):
            for a in n.all_input_nodes:
                r = roots.get(a, a)
                if r.op == "call_function" and r.target in _EMPTY and r not in written and r not in writes:
                    bad.append((n, r))
        written |= writes
    return bad


# --------------------------------------------------------------------------------------------
# Timeline simulation
# --------------------------------------------------------------------------------------------

@dataclass
class Timeline:
    makespan: float = 0.0  # seconds
    compute: float = 0.0  # busy time of the compute stream
    communication: float = 0.0  # sum of collective durations
    exposed: float = 0.0  # compute-stream stalls waiting on collectives
    collectives: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    peak_in_flight: int = 0  # bytes (inputs + outputs) of issued, not yet waited collectives
    peak_memory: int = 0  # estimated live bytes at the peak, placeholders included
    baseline_memory: int = 0  # placeholders (parameters shards, saved activations, inputs)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __add__(self, other: "Timeline") -> "Timeline":
        kinds = dict(self.by_kind)
        for k, v in other.by_kind.items():
            kinds[k] = kinds.get(k, 0) + v
        return Timeline(self.makespan + other.makespan, self.compute + other.compute,
                        self.communication + other.communication, self.exposed + other.exposed,
                        self.collectives + other.collectives, kinds,
                        max(self.peak_in_flight, other.peak_in_flight), max(self.peak_memory, other.peak_memory),
                        max(self.baseline_memory, other.baseline_memory))


@dataclass
class Span:
    """One piece of work on a stream of the simulated timeline (seconds)."""

    stream: str  # "compute", "comm <group>" or "wait" (compute stalled on a collective)
    name: str
    start: float
    end: float
    args: dict[str, Any] = field(default_factory=dict)


def simulate(nodes: Iterable[fx.Node] | fx.Graph, model: CostModel, default_world_size: int = 8,
             with_memory: bool = True, record: list[Span] | None = None,
             ready: Mapping[str, float] | None = None) -> Timeline:
    """Run ``nodes`` (in this order) on one compute stream and one stream per process group.

    ``record``: a list that receives a ``Span`` per compute node, collective and stall (traces).
    ``ready``: graph inputs that are collectives issued before the graph (a prefetch), by name:
    when, from the graph's start, they complete; a wait on one stalls until then."""
    nodes = list(nodes.nodes if isinstance(nodes, fx.Graph) else nodes)
    tl = Timeline()
    t = 0.0
    stream_free: dict[str, float] = {}
    end: dict[fx.Node, float] = {}
    in_flight: dict[fx.Node, int] = {}
    cur_in_flight = 0
    at: list[float] = []  # compute-stream time when each node is reached (for record)
    for n in nodes:
        at.append(t)
        info = collective_info(n, default_world_size)
        if info is not None:
            dur = model.collective_time(info.kind, info.nbytes, info.group_size)
            start = max(t, stream_free.get(info.group, 0.0))
            end[n] = stream_free[info.group] = start + dur
            if record is not None:
                record.append(Span(f"comm {info.group}", n.name, start, start + dur,
                                   {"kind": info.kind, "bytes": info.nbytes}))
            tl.communication += dur
            tl.collectives += 1
            tl.by_kind[info.kind] = tl.by_kind.get(info.kind, 0) + 1
            in_flight[n] = info.in_bytes + info.out_bytes
            cur_in_flight += in_flight[n]
            tl.peak_in_flight = max(tl.peak_in_flight, cur_in_flight)
            continue
        c = wait_collective(n)
        if c is not None:
            done = end.get(c, t)
            if ready is not None and c.op == "placeholder" and c.name in ready:
                done = max(t, ready[c.name])
            if done > t:
                if record is not None:
                    record.append(Span("wait", f"wait {c.name}", t, done))
                tl.exposed += done - t
                t = done
            cur_in_flight -= in_flight.pop(c, 0)
            continue
        dt = model.node_time(n)
        if record is not None and dt > 0:
            record.append(Span("compute", n.name, t, t + dt, {"op": str(n.target)}))
        t += dt
        tl.compute += dt
    tl.makespan = max([t, *stream_free.values()])
    tl.exposed += max(0.0, tl.makespan - t)  # collectives nobody waited for still end the step
    if with_memory:
        # a model may size some storages itself (fsdp_overlap's rank-invariant planning)
        live, base = memory_profile(nodes, default_world_size, getattr(model, "size_overrides", None))
        tl.peak_memory = max(live, default=base)
        tl.baseline_memory = base
        if record is not None:  # live bytes where they change
            prev = None
            for when, v in zip(at, live):
                if v != prev:
                    record.append(Span("memory", "live", when, when, {"bytes": v}))
                    prev = v
    return tl
