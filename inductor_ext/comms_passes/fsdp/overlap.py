"""``fsdp_overlap``: bucket FSDP all-gathers / reduce-scatters and schedule them under compute.

A post-grad pass (stage ``post_grad_post``) over graphs whose collectives are
``_c10d_functional.all_gather_into_tensor`` / ``reduce_scatter_tensor`` followed by
``wait_tensor`` -- what ``comms_passes.data_parallel`` (SimpleFSDP style) produces. It

1. **buckets** consecutive all-gathers (and consecutive reduce-scatters) of one process group up
   to a byte cap. All-gather buckets may mix dtypes (bf16 weights with fp32 norms or routers): the
   shards are viewed as bytes, packed 16-byte aligned into one uint8 buffer and gathered by ONE
   all-gather, then viewed back per parameter. Reduce-scatters are summed, so a bucket holds one
   dtype and one reduce op.
2. **schedules** with a list scheduler over the cost model (``cost_model.py``): compute nodes keep
   their order; all-gathers of parameters are issued ahead of their first use (prefetch, up to
   ``max_prefetch`` buckets and only where the memory budget allows), their waits stay right
   before the first use; where a wait would still stall, the packing work of later buckets
   (casting shards to the compute dtype, copying them into the bucket) runs first, since it
   depends on nothing in flight; reduce-scatters are issued as soon as their gradients exist and
   waited where the model says they have finished (or earlier under memory pressure). Bucket
   boundaries follow the same model: the first buckets of a graph stay small so compute starts
   as soon as its first parameters arrive, later ones grow to the cap.

The schedule is an FX order: Inductor lowers nodes in that order, and its own scheduler-level
passes (``simple_overlap``, ``reorder_for_compute_comm_overlap``) may still move things after it.

Guarantees (checked by tests/test_comms.py):

* the result is a valid topological order, every wait follows its collective;
* all-gathers keep their relative order, and so do reduce-scatters, per process group (an
  all-gather may be issued ahead of a reduce-scatter: every rank runs the same deterministic
  pass over the same graph, so all ranks issue the same sequence);
* decisions depend only on the graph and the config (never the rank, host or timing);
* the estimated peak memory of the result stays within ``memory_budget`` of the input's.

Settings come from ``OverlapSettings`` (defaults below), set by ``options={"fsdp_overlap": {...}}``
(this module registers that option); the ExtConfig target's datasheet (``targets``: sm_90a ->
H200, sm_100a -> B200, gfx950 -> MI355X) feeds the cost model, H100 for a target without one. ``configure(...)`` overrides
settings for passes built inside its ``with`` block; the settings are part of the pass uuid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import inspect
import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import torch
import torch.fx as fx

from inductor_ext.comms_passes.cost_model import (
    AnalyticalCostModel, CostModel, Timeline, collective_info, is_view_like, is_wait, memory_profile, simulate,
    wait_collective,
)
from inductor_ext import targets
from inductor_ext.config import ExtConfig, ExtOptionError, OptionSpec, register_option
from inductor_ext.lowering.passes.base import ExtGraphPass

log = logging.getLogger("inductor_ext.passes.fsdp_overlap")

aten = torch.ops.aten
c10d = torch.ops._c10d_functional

# A plan whose exposed communication is within this fraction of the least found competes on
# makespan (see optimize).
EXPOSED_TOLERANCE = 0.02
_ALIGN = 16  # bytes: every segment of a packed all-gather buffer starts 16-byte aligned


@dataclass(frozen=True)
class OverlapSettings:
    """Knobs of the pass. Sizes are bytes; None means "derive it from the cost model"."""

    gpu: str | None = None  # datasheet for the cost model; None: from the ExtConfig target
    bucket_all_gathers: bool = True
    bucket_reduce_scatters: bool = True
    bucket_cap_bytes: int | None = None  # None: the size at which latency is <= 5% of a collective
    reorder: bool = True  # prefetch all-gathers and place reduce-scatter waits by the cost model
    max_prefetch: int = 2  # all-gather buckets issued ahead of the one being used
    max_in_flight_bytes: int | None = None  # inputs + outputs of issued, not yet waited collectives
    pin_order: bool = True  # control_deps keep the planned order through Inductor's scheduler
    memory_budget_bytes: int = 0  # extra estimated peak memory allowed over the input graph
    memory_budget_ratio: float = 0.0  # ... or this fraction of the input graph's peak (the larger)
    default_world_size: int = 8  # for groups whose size cannot be resolved

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def check(cls, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` checked field by field (``options={"fsdp_overlap": {...}}``); raises
        ValueError naming the bad key or value and what is allowed."""
        from inductor_ext.comms_passes.cost_model import GPUS

        if not isinstance(values, dict):
            raise ValueError(f"expected a dict of fsdp_overlap settings, got {values!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key, value in values.items():
            if key not in fields:
                close = difflib.get_close_matches(str(key), fields, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown fsdp_overlap setting {key!r}{hint}; valid: {', '.join(sorted(fields))}")
            kind = fields[key].type
            if key == "gpu":
                ok = value is None or (isinstance(value, str) and value.upper() in GPUS)
                allowed = f"None or one of {', '.join(GPUS)}"
            elif kind == "bool":
                ok, allowed = isinstance(value, bool), "True or False"
            elif kind == "float":
                ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                      and math.isfinite(value) and value >= 0)
                allowed = "a finite number >= 0"
            else:  # int or int | None: sizes in bytes and counts
                ok = (value is None and "None" in kind) or (isinstance(value, int) and not isinstance(value, bool)
                                                            and value >= (1 if key == "default_world_size" else 0))
                allowed = "an int >= 0" + (" or None" if "None" in kind else "")
            if not ok:
                raise ValueError(f"fsdp_overlap setting {key}={value!r}: expected {allowed}")
        return dict(values)


OPTION = "fsdp_overlap"

# What pin_order asks of Inductor's scheduler besides the control_deps (see FsdpOverlapPass).
PLANNED_ORDER_PATCHES = {"reorder_for_peak_memory": False,
                         "aten_distributed_optimizations.enable_simple_overlap": False}


def _check_option(key: str, value: Any) -> dict[str, Any]:
    try:
        return OverlapSettings.check(value)
    except ValueError as e:
        raise ExtOptionError(f"options[{key!r}]: {e}") from None


register_option(OPTION, OptionSpec("settings of the fsdp_overlap pass, e.g. {'bucket_cap_bytes': 64 << 20, "
                                   "'max_prefetch': 2, 'memory_budget_ratio': 0.1}", _check_option))


_overrides: list[dict[str, Any]] = []


@contextlib.contextmanager
def configure(**overrides: Any) -> Iterator[None]:
    """Override ``OverlapSettings`` fields for passes created inside the block."""
    unknown = set(overrides) - {f.name for f in dataclasses.fields(OverlapSettings)}
    if unknown:
        raise ValueError(f"unknown fsdp_overlap settings {sorted(unknown)}; "
                         f"valid: {[f.name for f in dataclasses.fields(OverlapSettings)]}")
    _overrides.append(overrides)
    try:
        yield
    finally:
        _overrides.pop()


def current_settings(config: ExtConfig | None = None) -> OverlapSettings:
    values: dict[str, Any] = {}
    if config is not None:
        values.update(config.plugin_options.get(OPTION, {}))  # options={"fsdp_overlap": {...}}; configure() wins
    for o in _overrides:
        values.update(o)
    s = OverlapSettings(**values)
    if s.gpu is None:
        target = getattr(config, "target", "") if config is not None else ""
        sheet = targets.datasheet(target)
        s = dataclasses.replace(s, gpu=sheet.name if sheet is not None else "H100")
    return s


# ----------------------------------------------------------------------------------------------
# Plan structures
# ----------------------------------------------------------------------------------------------

@dataclass
class _Coll:
    node: fx.Node
    wait: fx.Node
    kind: str
    group: str
    group_size: int
    order: int  # index in the input graph


@dataclass
class _Unit:
    """One (possibly bucketed) collective with the nodes that travel with it."""

    kind: str
    group: str
    coll: fx.Node
    wait: fx.Node
    members: list[_Coll]
    pre: list[fx.Node] = field(default_factory=list)  # emitted right before ``coll``
    post: list[fx.Node] = field(default_factory=list)  # emitted right after ``wait``
    ready: int = 0  # earliest backbone anchor
    first_use: int = 0  # anchor of the first backbone user
    duration: float = 0.0
    bytes_in_flight: int = 0
    hold_bytes: int = 0  # extra live bytes while issued and not yet waited/used
    issued_at: int = -1
    waited_at: int = -1


@dataclass
class PlanSummary:
    """What one run decided (for reports and tests)."""

    buckets: dict[str, list[int]] = field(default_factory=dict)  # kind -> members per bucket
    mixed_dtype_buckets: int = 0  # all-gather buckets packed as bytes (several dtypes, one gather)
    prefetched: int = 0
    deferred_waits: int = 0
    bucket_cap_bytes: int = 0
    max_prefetch: int = 0
    memory_limit: int = 0
    input_peak: int = 0
    peak: int = 0
    exposed_before: float = 0.0
    exposed_after: float = 0.0
    rewrites: int = 0
    uneven_shards: str | None = None  # set when shards are uneven (planned on rank-invariant costs)
    pinned: int = 0  # nodes given ordering dependencies (pin_order)


def auto_bucket_cap(model: AnalyticalCostModel, group_size: int = 8) -> int:
    """Smallest size whose fixed latency is <= 5% of the collective's time, clamped to [16, 256] MB."""
    lat = model.collective_time("all_gather", 1, group_size)
    per_byte = (model.collective_time("all_gather", 1 << 30, group_size) - lat) / (1 << 30)
    size = int(lat / 0.05 / per_byte) if per_byte > 0 else 64 << 20
    return max(16 << 20, min(256 << 20, size))


# ----------------------------------------------------------------------------------------------
# The pass
# ----------------------------------------------------------------------------------------------

class FsdpOverlapPass(ExtGraphPass):
    name = "fsdp_overlap"
    stage = "post_grad_post"

    def __init__(self, config: ExtConfig, settings: OverlapSettings | None = None,
                 cost_model: CostModel | None = None) -> None:
        super().__init__(config)
        self.settings = settings or current_settings(config)
        self.cost_model = cost_model or AnalyticalCostModel(self.settings.gpu or "H100",
                                                            self.settings.default_world_size)
        self.last_plan: PlanSummary | None = None

    def uuid(self) -> str:
        # The decisions also depend on the cost model's code and on the settings.
        from inductor_ext.comms_passes import cost_model

        parts = (super().uuid(), inspect.getsource(cost_model), self.settings.to_json(),
                 type(self.cost_model).__qualname__, repr(getattr(self.cost_model, "gpu", "")))
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def inductor_patches(self) -> dict[str, Any]:
        # Inductor's scheduler would move the planned collectives and waits: simple_overlap issues
        # collectives earlier and waits later, the peak-memory reorder issues gathers later. The
        # plan already weighed both against the cost model and the memory budget.
        return dict(PLANNED_ORDER_PATCHES) if self.settings.pin_order else {}

    def run(self, graph: fx.Graph) -> int:
        plan = optimize(graph, self.settings, self.cost_model)
        self.last_plan = plan
        return plan.rewrites


def optimize(graph: fx.Graph, settings: OverlapSettings, model: CostModel | None = None) -> PlanSummary:
    """Bucket and schedule the collectives of ``graph`` in place; returns what was decided."""
    model = model or AnalyticalCostModel(settings.gpu or "H100", settings.default_world_size)
    summary = PlanSummary()
    nodes = list(graph.nodes)
    colls = _find_collectives(nodes, settings)
    if not any(colls.values()):
        return summary
    if not _has_vals(nodes):
        log.warning("fsdp_overlap: graph has no fake tensor metadata; left unchanged")
        return summary
    world = settings.default_world_size
    real_model = model
    uneven = _uneven_shard(colls)
    if uneven:
        # Ranks holding a shorter shard pad it before the gather, so their graphs and cost
        # estimates differ, and plans made from them could issue different collectives. Plan
        # on what every rank has alike instead (see _RankInvariantModel).
        log.info("fsdp_overlap: %s is sharded unevenly across ranks; planning on rank-invariant costs", uneven)
        model = _RankInvariantModel(model, colls, [n for n in nodes if n.op == "placeholder"])
    input_tl = simulate(nodes, model, world)
    budget = max(settings.memory_budget_bytes, int(settings.memory_budget_ratio * input_tl.peak_memory))
    limit = input_tl.peak_memory + budget

    def trial(cap: int, prefetch: int) -> Timeline:
        copy = fx.Graph()
        copy.output(copy.graph_copy(graph, {}))
        order, _ = _plan_and_order(copy, settings, model, cap, prefetch, limit)
        return simulate(order, model, world)

    cap = settings.bucket_cap_bytes
    explore = cap is None  # an explicit cap is the user's choice; the derived one is a guess
    if cap is None:
        cap = auto_bucket_cap(real_model, world) if isinstance(real_model, AnalyticalCostModel) else 64 << 20
    prefetch = settings.max_prefetch if settings.reorder else 0
    # Plans are compared by the cost model: among those whose estimated peak fits the budget and
    # whose exposed communication is within EXPOSED_TOLERANCE of the least, the shortest
    # makespan wins (buckets save collective latency but cost copies in and out). Without a
    # fitting plan: less prefetch and smaller buckets, down to none, which places every
    # collective where the input had it and so keeps the input's memory behaviour.
    smaller = []  # cap / 2, cap / 4, ... down to 1 MB
    c = cap // 2
    while c >= (1 << 20):
        smaller.append(c)
        c //= 2
    if explore:
        tried = [(c, p) for c in dict.fromkeys([cap, cap // 4, 0]) for p in range(prefetch, -1, -1)]
        tried += [(c, 0) for c in smaller if c != cap // 4]
    else:
        tried = [(cap, p) for p in range(prefetch, -1, -1)]
    fitting: list[tuple[float, float, int, int]] = []
    for cap_i, pre_i in tried:
        tl = trial(cap_i, pre_i)
        if tl.peak_memory <= limit:
            fitting.append((tl.exposed, tl.makespan, cap_i, pre_i))
    if not fitting and not explore:  # the explicit cap does not fit: smaller ones, first that fits
        for cap_i in [*smaller, 0]:
            tl = trial(cap_i, 0)
            if tl.peak_memory <= limit:
                fitting.append((tl.exposed, tl.makespan, cap_i, 0))
                break
    if not fitting:
        log.warning("fsdp_overlap: no plan fits the memory budget (%d bytes); graph left unchanged", limit)
        summary.input_peak = summary.peak = summary.memory_limit = input_tl.peak_memory
        summary.exposed_before = summary.exposed_after = input_tl.exposed
        return summary
    least = min(f[0] for f in fitting)
    near = [f for f in fitting if f[0] <= least * (1 + EXPOSED_TOLERANCE) + 1e-9]
    # ties: the earlier trial (bigger buckets, more prefetch) wins
    _, _, cap_i, pre_i = min(near, key=lambda f: f[1])
    order, final = _plan_and_order(graph, settings, model, cap_i, pre_i, limit)
    _apply_order(graph, order)
    graph.lint()
    final.uneven_shards = uneven
    tl = simulate(list(graph.nodes), model, world)
    final.input_peak, final.exposed_before, final.memory_limit = input_tl.peak_memory, input_tl.exposed, limit
    final.peak, final.exposed_after = tl.peak_memory, tl.exposed
    final.bucket_cap_bytes, final.max_prefetch = cap_i, pre_i
    log.info("fsdp_overlap: buckets %s, prefetched %d, exposed %.3f -> %.3f ms, "
             "peak %.1f -> %.1f MB", {k: len(v) for k, v in final.buckets.items()}, final.prefetched,
             input_tl.exposed * 1e3, tl.exposed * 1e3, input_tl.peak_memory / 2**20,
             tl.peak_memory / 2**20)
    if settings.pin_order:
        final.pinned = pin_order(graph, model, world)
    return final


def _kernel(node: fx.Node, model: CostModel, world: int) -> bool:
    """A compute node Inductor runs as a kernel of its own (matmul, reduction, attention, ...):
    an anchor that ordering dependencies can use without keeping a pointwise op from fusing."""
    return (node.op == "call_function" and collective_info(node, world) is None and not is_wait(node)
            and not is_view_like(node) and torch.Tag.pointwise not in getattr(node.target, "tags", ())
            and model.node_time(node) > 0)


def pin_order(graph: fx.Graph, model: CostModel, world: int) -> int:
    """Make Inductor's scheduler run each collective and its wait where the plan put them.

    Inductor's scheduler (``simple_overlap`` moves collectives earlier and waits later;
    ``reorder_for_peak_memory`` may move either) would otherwise change the exposure the plan
    was chosen for. With 2.15's ``control_deps`` (what its own overlap scheduler pins with),
    every collective follows the last kernel before it and precedes the first kernel after it,
    and every wait follows the last kernel before it and precedes the first kernel after it.
    Anchors are non-pointwise kernels only, so no fusion is lost. Returns the number of nodes
    that got ordering dependencies.
    """
    from torch._inductor.fx_passes.control_dependencies import preserve_node_ordering
    from torch.utils._ordered_set import OrderedSet

    nodes = list(graph.nodes)
    kernels = [i for i, n in enumerate(nodes) if _kernel(n, model, world)]
    pos = {n: i for i, n in enumerate(nodes)}
    deps: dict[fx.Node, OrderedSet[fx.Node]] = {}

    def before(i: int) -> fx.Node | None:
        k = next((k for k in reversed(kernels) if k < i), None)
        return None if k is None else nodes[k]

    def after(i: int) -> fx.Node | None:
        k = next((k for k in kernels if k > i), None)
        return None if k is None else nodes[k]

    for n in nodes:
        c = wait_collective(n)
        if c is None or c not in pos:
            continue
        for x in (c, n):
            prev, nxt = before(pos[x]), after(pos[x])
            if prev is not None:
                deps.setdefault(x, OrderedSet()).add(prev)
            if nxt is not None and nxt.op != "output":
                deps.setdefault(nxt, OrderedSet()).add(x)
    # outermost first: a node wrapped later keeps the name its dependants refer to
    preserve_node_ordering(graph, {k: deps[k] for k in sorted(deps, key=pos.__getitem__)})
    return len(deps)


# ----------------------------------------------------------------------------------------------
# Analysis
# ----------------------------------------------------------------------------------------------

def _has_vals(nodes: Sequence[fx.Node]) -> bool:
    return all("val" in n.meta for n in nodes if n.op == "call_function" and collective_info(n) is not None)


def _find_collectives(nodes: Sequence[fx.Node], settings: OverlapSettings) -> dict[tuple[str, str], list[_Coll]]:
    """Movable all-gathers / reduce-scatters by (kind, group), in graph order.

    A class (kind, group) is movable only when every member is a plain single-tensor collective
    with exactly one wait, and (all-gathers) gathers a value computed from graph inputs alone,
    so moving members never reorders them against an unmovable one.
    """
    pos = {n: i for i, n in enumerate(nodes)}
    from_inputs: set[fx.Node] = set()
    for n in nodes:
        if n.op in ("placeholder", "get_attr"):
            from_inputs.add(n)
        elif (n.op == "call_function" and collective_info(n) is None and not is_wait(n)
              and not n.is_impure() and all(a in from_inputs for a in n.all_input_nodes)):
            from_inputs.add(n)
    classes: dict[tuple[str, str], list[_Coll]] = {}
    fixed: set[tuple[str, str]] = set()
    for n in nodes:
        info = collective_info(n, settings.default_world_size)
        if info is None:
            continue
        key = (info.kind, info.group)
        plain = n.target in (c10d.all_gather_into_tensor.default, c10d.reduce_scatter_tensor.default)
        users = list(n.users)
        ok = plain and len(users) == 1 and is_wait(users[0])
        if ok and info.kind == "all_gather":
            ok = all(a in from_inputs for a in n.all_input_nodes)
        if not ok:
            fixed.add(key)
            continue
        classes.setdefault(key, []).append(_Coll(n, users[0], info.kind, info.group, info.group_size, pos[n]))
    return {k: v for k, v in classes.items() if k not in fixed and k[0] in ("all_gather", "reduce_scatter")}


def _uneven_shard(colls: dict[tuple[str, str], list[_Coll]]) -> str | None:
    """A collective of a parameter whose dim 0 does not divide by the group, found by what every
    rank's graph has: the gathered tensor sliced back to fewer rows, or a gradient padded with
    zero rows before its reduce-scatter. None when all shards are even."""
    for members in colls.values():
        for c in members:
            if c.kind == "all_gather":
                rows = _val(c.wait).shape[0] if _val(c.wait).dim() else 0
                for u in c.wait.users:
                    if (u.op == "call_function" and u.target is torch.ops.aten.slice.Tensor
                            and (u.args[1] if len(u.args) > 1 else 0) == 0
                            and _val(u).shape[0] < rows):
                        return f"{c.node.name} ({_val(u).shape[0]} rows over {c.group_size} ranks)"
            else:
                src = _arg(c.node, "input")
                parts = src.args[0] if src.target is torch.ops.aten.cat.default else [src]
                if any(isinstance(p, fx.Node) and p.target is torch.ops.aten.constant_pad_nd.default
                       for p in parts):
                    return f"{c.node.name} (gradient padded to {_val(src).shape[0]} rows over {c.group_size} ranks)"
    return None


class _RankInvariantModel:
    """A cost model whose answers are equal on every rank of an unevenly sharded graph.

    What differs between ranks is upstream of each all-gather's input: the shard (a row more
    or less) and its cast, plus a pad on the ranks with the shorter shard. The gather input
    itself is padded to one size everywhere; the reduce-scatters' outputs are sliced to the
    shard on some ranks only, but slices are views. So this model charges nothing for the nodes
    that compute a gather's input from the shards (a cast of 1/world of a parameter) and gives
    graph inputs, those intermediates and the gather input itself no size (the gather input is
    a graph input on some ranks and a pad on others; the collective's own in-flight bytes still
    count it); every other node keeps its own time and size. Plans are made with it; nodes are matched by name,
    which graph copies keep.
    """

    def __init__(self, model: CostModel, colls: dict[tuple[str, str], list[_Coll]],
                 placeholders: Sequence[fx.Node] = ()) -> None:
        self.model = model
        self.free: set[str] = set()  # computed from the shards only: no time
        # what feeds a gather input, and every graph input (shards of other parameters come in
        # too, unused or not): no size. Inputs live throughout, so this only moves the baseline.
        self.size_overrides: dict[str, int] = {n.name: 0 for n in placeholders}
        self.gather_inputs: set[str] = set()
        # A bucket's packing copy is modelled as fused with the cast that made a gather input on
        # some ranks and not behind the pad on others: cost it unfused everywhere.
        self.unfused = (dataclasses.replace(model, model_fusion=False)
                        if isinstance(model, AnalyticalCostModel) and model.model_fusion else model)
        for members in colls.values():
            for c in members:
                if c.kind != "all_gather":
                    continue
                gather_input = _arg(c.node, "input")
                self.gather_inputs.add(gather_input.name)
                stack = [gather_input]
                while stack:
                    n = stack.pop()
                    if n.name in self.free or n.name in self.size_overrides:
                        continue
                    if n.op == "placeholder":
                        self.size_overrides[n.name] = 0
                        continue
                    self.free.add(n.name)
                    self.size_overrides[n.name] = 0
                    stack.extend(n.all_input_nodes)

    def collective_time(self, kind: str, nbytes: int, group_size: int) -> float:
        return self.model.collective_time(kind, nbytes, group_size)

    def node_time(self, node: fx.Node) -> float:
        if node.name in self.free:
            return 0.0
        if node.target is aten.cat.default and any(self._reads_gather_input(a) for a in node.all_input_nodes):
            return self.unfused.node_time(node)
        return self.model.node_time(node)

    def _reads_gather_input(self, node: fx.Node) -> bool:
        while node.name not in self.gather_inputs:
            if node.op != "call_function" or not is_view_like(node) or not node.all_input_nodes:
                return False
            node = node.all_input_nodes[0]
        return True


def _val(n: fx.Node) -> torch.Tensor:
    return n.meta["val"]


def _arg(node: fx.Node, name: str) -> Any:
    """An argument of an op node by its schema name, positional or keyword."""
    for i, a in enumerate(node.target._schema.arguments):  # type: ignore[union-attr]
        if a.name == name:
            return node.args[i] if i < len(node.args) else node.kwargs[name]
    raise KeyError(name)


def _rs_key(c: _Coll) -> tuple:
    return (_val(_arg(c.node, "input")).dtype, _arg(c.node, "reduce_op"))


def _fake_mode(nodes: Sequence[fx.Node]):
    for n in nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and hasattr(v, "fake_mode"):
            return v.fake_mode
    return None


def _buckets(colls: list[_Coll], cap: int, kind: str, model: CostModel | None = None,
             ready_time: dict[fx.Node, float] | None = None) -> list[list[_Coll]]:
    """Consecutive members (class order) grouped up to ``cap`` bytes.

    Reduce-scatter buckets hold one dtype and reduce op. All-gather buckets also close early
    when growing this bucket would make it the latest to arrive: with every bucket gathered back
    to back, its lateness (arrival minus ``ready_time`` of its first member, the compute before
    that use) would exceed the stall already unavoidable, the lateness the remaining members
    will have anyway (a lower bound: all of them gathered at ``cap``) and the lateness of
    starting a new bucket instead (one more latency). That keeps the first buckets of a graph
    small, so compute starts as soon as its first parameters arrive, without splitting buckets
    where that only adds latency.
    """
    out: list[list[_Coll]] = []
    cur: list[_Coll] = []
    cur_bytes = 0
    done = 0.0  # when the buckets already closed would finish, gathered back to back
    slack = 0.0  # stall that no bucketing avoids (the first gather has nothing to hide under)

    def comm(nbytes: int) -> float:
        assert model is not None
        return model.collective_time("all_gather", nbytes, colls[0].group_size)

    def close() -> None:
        nonlocal cur, cur_bytes, done, slack
        if kind == "all_gather" and model is not None and ready_time is not None:
            done += comm(cur_bytes)
            slack = max(slack, done - ready_time.get(cur[0].wait, 0.0))
        out.append(cur)
        cur, cur_bytes = [], 0

    sizes = [_nbytes(_val(c.node)) if kind == "all_gather" else 0 for c in colls]
    remaining = sum(sizes)
    last_need = ready_time.get(colls[-1].wait, 0.0) if ready_time and colls else 0.0

    def projected(nbytes: int) -> float:
        # everything still to gather, in buckets of ``cap``: one latency per bucket
        n_buckets = max(1, -(-nbytes // cap)) if cap > 0 else 1
        one = comm(nbytes)
        return one + (n_buckets - 1) * comm(0)

    for k, c in enumerate(colls):
        if kind == "all_gather":
            size = sizes[k]
            same = True
        else:
            size = _nbytes(_val(_arg(c.node, "input")))
            same = not cur or _rs_key(cur[0]) == _rs_key(c)
        if cur:
            late = False
            if kind == "all_gather" and model is not None and ready_time is not None:
                need_cur, need_new = ready_time.get(cur[0].wait, 0.0), ready_time.get(c.wait, 0.0)
                grown = done + comm(cur_bytes + size) - need_cur  # lateness if ``c`` joins
                split = max(done + comm(cur_bytes) - need_cur,  # ... if it starts the next bucket
                            done + comm(cur_bytes) + comm(size) - need_new)
                bound = done + projected(cur_bytes + remaining) - last_need
                late = grown > max(slack, bound, split)
            if cap <= 0 or cur_bytes + size > cap or not same or late:
                close()
        cur.append(c)
        cur_bytes += size
        remaining -= size
    if cur:
        close()
    return out


def _compute_before_use(nodes: Sequence[fx.Node], model: CostModel, world: int) -> dict[fx.Node, float]:
    """For each wait: compute-stream time (no stalls) before its first user runs."""
    t = 0.0
    at: dict[fx.Node, float] = {}
    for n in nodes:
        if collective_info(n, world) is None and not is_wait(n):
            at[n] = t
            t += model.node_time(n)
    out: dict[fx.Node, float] = {}
    for n in nodes:
        if is_wait(n):
            users = [at[u] for u in n.users if u in at]
            out[n] = min(users) if users else t
    return out


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()


def _tensors_of(n: fx.Node) -> list[torch.Tensor]:
    v = n.meta.get("val")
    vals = v if isinstance(v, (list, tuple)) else [v]
    return [x for x in vals if isinstance(x, torch.Tensor)]


def _aliases(n: fx.Node) -> bool:
    """A view-like node: allocates nothing."""
    schema = getattr(n.target, "_schema", None)
    return bool(schema is not None and schema.returns and schema.returns[0].alias_info is not None) \
        or n.target in (aten.reshape.default, aten.view.default, aten.view.dtype)


# ----------------------------------------------------------------------------------------------
# Rewriting buckets
# ----------------------------------------------------------------------------------------------

class _Builder:
    """Creates nodes with fake-tensor metadata (computed by running the op on the fake values)."""

    def __init__(self, graph: fx.Graph, fake_mode) -> None:  # noqa: ANN001
        self.graph = graph
        self.fake_mode = fake_mode
        self.created: list[fx.Node] = []

    def __call__(self, target, args: tuple, anchor: fx.Node) -> fx.Node:  # noqa: ANN001
        with self.graph.inserting_before(anchor):
            node = self.graph.call_function(target, args)
        fake_args = tuple(_val(a) if isinstance(a, fx.Node) else
                          [(_val(x) if isinstance(x, fx.Node) else x) for x in a] if isinstance(a, list) else a
                          for a in args)
        ctx = self.fake_mode if self.fake_mode is not None else contextlib.nullcontext()
        with ctx:
            node.meta["val"] = target(*fake_args)
        self.created.append(node)
        return node


def _keep_provenance(coll: fx.Node, bucket: list[_Coll]) -> None:
    """A bucket's collective names what it merged and where the first member came from (the
    collective check and flight-recorder annotations show them)."""
    coll.meta["ext_bucket_of"] = [c.node.name for c in bucket]
    trace = next((c.node.meta["stack_trace"] for c in bucket if c.node.meta.get("stack_trace")), None)
    if trace is not None:
        coll.meta["stack_trace"] = trace


def _merge_all_gather(graph: fx.Graph, bucket: list[_Coll], b: _Builder, anchor: fx.Node) -> tuple[fx.Node, fx.Node, list, list]:
    """One all-gather for ``bucket``: pack shards as bytes (mixed dtypes) or elements, gather, unpack."""
    w, group = bucket[0].group_size, bucket[0].group
    ins = [_arg(c.node, "input") for c in bucket]
    dtypes = {_val(x).dtype for x in ins}
    as_bytes = len(dtypes) > 1
    pre: list[fx.Node] = []
    segs: list[tuple[int, int]] = []  # (offset, length) in buffer units
    parts = []
    off = 0
    for x in ins:
        flat = b(aten.reshape.default, (x, [-1]), anchor)
        pre.append(flat)
        if as_bytes:
            flat = b(aten.view.dtype, (flat, torch.uint8), anchor)
            pre.append(flat)
            n = _val(flat).numel()
            pad = (-n) % _ALIGN
            if pad:
                flat = b(aten.constant_pad_nd.default, (flat, [0, pad], 0.0), anchor)
                pre.append(flat)
            segs.append((off, n))
            off += n + pad
        else:
            n = _val(flat).numel()
            segs.append((off, n))
            off += n
        parts.append(flat)
    buf = b(aten.cat.default, (parts,), anchor)
    pre.append(buf)
    coll = b(c10d.all_gather_into_tensor.default, (buf, w, group), anchor)
    _keep_provenance(coll, bucket)
    wait = b(c10d.wait_tensor.default, (coll,), anchor)
    post: list[fx.Node] = []
    rows = b(aten.reshape.default, (wait, [w, off]), anchor)
    post.append(rows)
    for c, x, (o, n) in zip(bucket, ins, segs):
        seg = b(aten.slice.Tensor, (rows, 1, o, o + n), anchor)
        post.append(seg)
        if as_bytes:
            seg = b(aten.view.dtype, (seg, _val(x).dtype), anchor)
            post.append(seg)
        out_shape = list(_val(c.wait).shape)
        res = b(aten.reshape.default, (seg, out_shape), anchor)
        post.append(res)
        c.wait.replace_all_uses_with(res)
    for c in bucket:
        graph.erase_node(c.wait)
        graph.erase_node(c.node)
    return coll, wait, pre, post


def _merge_reduce_scatter(graph: fx.Graph, bucket: list[_Coll], b: _Builder, anchor: fx.Node) -> tuple[fx.Node, fx.Node, list, list]:
    """One reduce-scatter for ``bucket``: rank-major [W, sum(n_i)] packing, scatter, slice out."""
    w, group = bucket[0].group_size, bucket[0].group
    op = _arg(bucket[0].node, "reduce_op")
    pre: list[fx.Node] = []
    parts, sizes = [], []
    for c in bucket:
        x = _arg(c.node, "input")
        r = b(aten.reshape.default, (x, [w, -1]), anchor)
        pre.append(r)
        parts.append(r)
        sizes.append(_val(r).shape[1])
    cat = b(aten.cat.default, (parts, 1), anchor)
    flat = b(aten.reshape.default, (cat, [-1]), anchor)
    pre += [cat, flat]
    coll = b(c10d.reduce_scatter_tensor.default, (flat, op, w, group), anchor)
    _keep_provenance(coll, bucket)
    wait = b(c10d.wait_tensor.default, (coll,), anchor)
    post: list[fx.Node] = []
    off = 0
    for c, n in zip(bucket, sizes):
        seg = b(aten.slice.Tensor, (wait, 0, off, off + n), anchor)
        res = b(aten.reshape.default, (seg, list(_val(c.wait).shape)), anchor)
        post += [seg, res]
        c.wait.replace_all_uses_with(res)
        off += n
    for c in bucket:
        graph.erase_node(c.wait)
        graph.erase_node(c.node)
    return coll, wait, pre, post


def _exclusive_input_chain(coll: fx.Node, pre: list[fx.Node], pure: set[fx.Node]) -> list[fx.Node]:
    """Input-only ancestors of ``coll``/``pre`` used by nothing else: they travel with the unit."""
    members = set(pre) | {coll}
    chain: set[fx.Node] = set()
    frontier = [a for n in [*pre, coll] for a in n.all_input_nodes]
    cand: list[fx.Node] = []
    seen: set[fx.Node] = set()
    while frontier:
        a = frontier.pop()
        if a in seen or a in members or a not in pure or a.op != "call_function":
            continue
        seen.add(a)
        cand.append(a)
        frontier.extend(a.all_input_nodes)
    changed = True
    while changed:
        changed = False
        for a in cand:
            if a not in chain and all(u in chain or u in members for u in a.users):
                chain.add(a)
                changed = True
    return [a for a in cand if a in chain]


# ----------------------------------------------------------------------------------------------
# Planning and scheduling
# ----------------------------------------------------------------------------------------------

def _plan_and_order(graph: fx.Graph, settings: OverlapSettings, model: CostModel, cap: int, prefetch: int,
                    limit: int) -> tuple[list[fx.Node], PlanSummary]:
    world = settings.default_world_size
    summary = PlanSummary()
    nodes = list(graph.nodes)
    colls = _find_collectives(nodes, settings)
    orig_pos = {n: i for i, n in enumerate(nodes)}
    pure: set[fx.Node] = set()
    for n in nodes:
        if n.op in ("placeholder", "get_attr"):
            pure.add(n)
        elif (n.op == "call_function" and collective_info(n) is None and not is_wait(n)
              and not n.is_impure() and all(a in pure for a in n.all_input_nodes)):
            pure.add(n)
    output = next(n for n in reversed(nodes) if n.op == "output")
    ready_time = _compute_before_use(nodes, model, world)
    builder = _Builder(graph, _fake_mode(nodes))
    units: list[_Unit] = []
    rewrites = 0
    for (kind, group), members in colls.items():
        do_bucket = settings.bucket_all_gathers if kind == "all_gather" else settings.bucket_reduce_scatters
        buckets = _buckets(members, cap if do_bucket else 0, kind, model, ready_time)
        summary.buckets.setdefault(kind, []).extend(len(bk) for bk in buckets)
        for bk in buckets:
            if len(bk) == 1:
                coll, wait, pre, post = bk[0].node, bk[0].wait, [], []
            else:
                merge = _merge_all_gather if kind == "all_gather" else _merge_reduce_scatter
                summary.mixed_dtype_buckets += kind == "all_gather" and len(
                    {_val(_arg(c.node, "input")).dtype for c in bk}) > 1
                coll, wait, pre, post = merge(graph, bk, builder, output)
                rewrites += len(bk) - 1
            if kind == "all_gather":
                pre = _exclusive_input_chain(coll, pre, pure) + pre
            else:
                post = post + _views_for_output(wait, post, output)
            units.append(_Unit(kind, group, coll, wait, bk, pre, post))
    # Nodes created by merging sit before the output for now; order them among themselves.
    created = set(builder.created)
    for k, n in enumerate(builder.created):
        orig_pos[n] = len(nodes) + k
    in_unit: set[fx.Node] = set()
    for u in units:
        in_unit.update(u.pre)
        in_unit.update(u.post)
        in_unit.update((u.coll, u.wait))
        u.pre.sort(key=lambda n: orig_pos[n])
    rest = [n for n in graph.nodes if n not in in_unit]
    assert not (set(rest) & created)
    # Input-only values that an all-gather needs but that other nodes use too stay in the
    # backbone; they move up to right after the placeholders, so no all-gather waits for them.
    hoist: set[fx.Node] = set()
    for u in units:
        if u.kind == "all_gather":
            stack = [a for m in [*u.pre, u.coll] for a in m.all_input_nodes]
            while stack:
                a = stack.pop()
                if a in hoist or a in in_unit or a.op != "call_function" or a not in pure:
                    continue
                hoist.add(a)
                stack.extend(a.all_input_nodes)
    lead = [n for n in rest if n.op == "placeholder"]
    backbone = lead + [n for n in rest if n in hoist] + [n for n in rest if n.op != "placeholder" and n not in hoist]
    n_lead = len(lead)
    bpos = {n: i for i, n in enumerate(backbone)}
    for u in units:
        u.ready = _unit_ready(u, bpos, n_lead)
        outs = set(u.post) | {u.wait}
        users = [bpos[x] for n in outs for x in n.users if x in bpos]
        u.first_use = min(users) if users else bpos[output]
        info = collective_info(u.coll, world)
        assert info is not None
        u.duration = model.collective_time(info.kind, info.nbytes, info.group_size)
        u.bytes_in_flight = info.in_bytes + info.out_bytes
        # While issued and not yet used (all-gather) or finished (reduce-scatter), the unit keeps
        # its packed input and its output alive.
        u.hold_bytes = info.in_bytes + info.out_bytes
        if u.ready > u.first_use:
            raise AssertionError(f"fsdp_overlap: {u.coll} is needed before its inputs exist")
    summary.rewrites = rewrites
    base_curve = _baseline_curve(backbone, units, world, getattr(model, "size_overrides", None))
    anchors = _schedule(backbone, units, model, settings, prefetch, limit, base_curve, world, summary)
    order = _emit(backbone, anchors)
    return order, summary


def _views_for_output(wait: fx.Node, post: list[fx.Node], output: fx.Node) -> list[fx.Node]:
    """Views of a reduce-scatter's result that only the graph output uses (ranks with a shorter
    shard slice the padded one): they go with the wait, so they do not make it due earlier."""
    found: list[fx.Node] = []
    frontier = [wait, *post]
    while frontier:
        n = frontier.pop()
        for u in n.users:
            if (u is not output and u not in found and u not in post and u.op == "call_function"
                    and is_view_like(u) and all(x is output or is_view_like(x) for x in u.users)):
                found.append(u)
                frontier.append(u)
    return found


def _unit_ready(u: _Unit, bpos: dict[fx.Node, int], n_lead: int) -> int:
    deps = [bpos[a] for n in [*u.pre, u.coll] for a in n.all_input_nodes if a in bpos]
    return max([n_lead, *(d + 1 for d in deps)])


def _emit(backbone: list[fx.Node], anchors: dict[int, list[fx.Node]]) -> list[fx.Node]:
    order: list[fx.Node] = []
    emitted: set[fx.Node] = set()
    for i, n in enumerate(backbone):
        for m in anchors.get(i, ()):
            if m not in emitted:
                emitted.add(m)
                order.append(m)
        order.append(n)
    return order


def _jit_anchors(units: list[_Unit]) -> dict[int, list[fx.Node]]:
    """No overlap: all-gathers right before their first use, reduce-scatters waited at once."""
    anchors: dict[int, list[fx.Node]] = {}
    for u in sorted(units, key=lambda u: (u.first_use if u.kind == "all_gather" else u.ready, u.members[0].order)):
        at = u.first_use if u.kind == "all_gather" else u.ready
        anchors.setdefault(at, []).extend([*u.pre, u.coll, u.wait, *u.post])
    return anchors


def _baseline_curve(backbone: list[fx.Node], units: list[_Unit], world: int,
                    size_overrides: dict[str, int] | None = None) -> list[int]:
    """Live bytes at each backbone anchor for the no-overlap placement of the units."""
    anchors = _jit_anchors(units)
    order = _emit(backbone, anchors)
    live, _ = memory_profile(order, world, size_overrides)
    curve = [0] * (len(backbone) + 1)
    i = 0
    cur_max = 0
    bset = {n: k for k, n in enumerate(backbone)}
    for n, v in zip(order, live):
        cur_max = max(cur_max, v)
        if n in bset:
            curve[bset[n]] = cur_max
            cur_max = 0
            i += 1
    curve[-1] = curve[-2] if len(curve) > 1 else 0
    return curve


def _schedule(backbone: list[fx.Node], units: list[_Unit], model: CostModel, settings: OverlapSettings,
              prefetch: int, limit: int, base: list[int], world: int, summary: PlanSummary) -> dict[int, list[fx.Node]]:
    """List scheduling over the fixed compute order; returns nodes to emit before each anchor."""
    n = len(backbone)
    base_arr = np.asarray(base, dtype=np.int64)
    extra = np.zeros(n + 1, dtype=np.int64)  # committed extra live bytes (prefetched all-gathers)
    needed_at: dict[int, list[_Unit]] = {}
    for u in units:
        if u.kind == "all_gather":
            needed_at.setdefault(u.first_use, []).append(u)
    queues: dict[tuple[str, str], list[_Unit]] = {}
    for u in sorted(units, key=lambda u: u.members[0].order):
        queues.setdefault((u.kind, u.group), []).append(u)
    heads = {k: 0 for k in queues}
    anchors: dict[int, list[fx.Node]] = {}
    stream_free: dict[str, float] = {}
    end: dict[fx.Node, float] = {}
    t = 0.0
    waiting_ag: list[_Unit] = []  # issued all-gathers, waited at their first use
    waiting_rs: list[_Unit] = []  # issued reduce-scatters, waited when done or under pressure
    in_flight = 0
    max_in_flight = settings.max_in_flight_bytes

    emitted: set[fx.Node] = set()

    def emit(at: int, nodes: Sequence[fx.Node]) -> None:
        nonlocal t
        for m in nodes:
            if m not in emitted:  # packing / unpacking runs on the compute stream
                emitted.add(m)
                t += model.node_time(m)
        anchors.setdefault(at, []).extend(nodes)

    overrides = getattr(model, "size_overrides", None) or {}

    def pre_bytes(u: _Unit) -> int:
        return sum(overrides[m.name] if m.name in overrides else sum(_nbytes(v) for v in _tensors_of(m))
                   for m in u.pre if m not in emitted and not _aliases(m))

    def issue(u: _Unit, at: int) -> None:
        nonlocal in_flight
        emit(at, u.pre)
        start = max(t, stream_free.get(u.group, 0.0))
        end[u.coll] = stream_free[u.group] = start + u.duration
        u.issued_at = at
        emit(at, [u.coll])
        in_flight += u.bytes_in_flight
        (waiting_ag if u.kind == "all_gather" else waiting_rs).append(u)

    def wait(u: _Unit, at: int) -> None:
        nonlocal t, in_flight
        t = max(t, end[u.coll])
        u.waited_at = at
        emit(at, [u.wait, *u.post])
        in_flight -= u.bytes_in_flight
        (waiting_ag if u.kind == "all_gather" else waiting_rs).remove(u)

    def fits(u: _Unit, at: int) -> bool:
        """Whether issuing all-gather ``u`` at ``at`` keeps within the in-flight and memory limits."""
        if max_in_flight is not None and in_flight + u.bytes_in_flight > max_in_flight:
            return False
        window = int((base_arr[at:u.first_use + 1] + extra[at:u.first_use + 1]).max())
        return window + rs_held() + u.hold_bytes <= limit

    def issue_ahead(key: tuple[str, str], u: _Unit, at: int) -> None:
        """Issue all-gather ``u`` (the head of its queue) at ``at``; it holds memory until used."""
        extra[at:u.first_use] += u.hold_bytes
        heads[key] += 1
        issue(u, at)

    def rs_held() -> int:
        return sum(u.hold_bytes for u in waiting_rs)

    def issue_through(key: tuple[str, str], target: _Unit, at: int) -> None:
        q = queues[key]
        while heads[key] < len(q) and q[heads[key]].issued_at < 0:
            u = q[heads[key]]
            heads[key] += 1
            issue(u, at)
            if u is target:
                break

    for i in range(n):
        node = backbone[i]
        # 1. finished reduce-scatters: wait now, free their buffers (no stall)
        for u in list(waiting_rs):
            if end[u.coll] <= t and u.first_use > i:
                wait(u, i)
                if u.first_use > i + 1:
                    summary.deferred_waits += 1
        # 2. memory pressure: wait for the oldest reduce-scatters
        while waiting_rs and int(base_arr[i] + extra[i]) + rs_held() > limit:
            wait(waiting_rs[0], i)
        # 3. all-gathers needed by this node (issue late if they were not prefetched)
        for u in needed_at.get(i, ()):
            if u.issued_at < 0:
                issue_through((u.kind, u.group), u, i)
        # 4. prefetch: issue following all-gathers while the window and the memory budget allow
        for key, q in queues.items():
            if key[0] != "all_gather" or prefetch <= 0:
                continue
            while heads[key] < len(q):
                u = q[heads[key]]
                if u.issued_at >= 0 or u.ready > i:
                    break
                ahead = sum(1 for w in waiting_ag if w.group == u.group and w.first_use > i)
                if ahead >= prefetch or not fits(u, i):
                    break
                issue_ahead(key, u, i)
                if u.first_use > i:
                    summary.prefetched += 1
        # 5. reduce-scatters whose gradients exist
        for key, q in queues.items():
            if key[0] != "reduce_scatter":
                continue
            while heads[key] < len(q) and q[heads[key]].ready <= i:
                u = q[heads[key]]
                heads[key] += 1
                issue(u, i)
        # 6. a stall is coming: use it. Issue the next all-gathers beyond the prefetch depth
        #    (their packing -- casts, copies -- runs now, their transfers queue behind), while
        #    the memory budget allows; past that, run only the packing of later buckets.
        needed = [u for u in waiting_ag + waiting_rs if u.first_use == i]
        stall_until = max((end[u.coll] for u in needed), default=t)
        if settings.reorder and stall_until > t:
            for key, q in queues.items():
                if key[0] != "all_gather":
                    continue
                while heads[key] < len(q) and t < stall_until:
                    u = q[heads[key]]
                    if u.issued_at >= 0 or u.ready > i or not fits(u, i):
                        break
                    issue_ahead(key, u, i)
                    summary.prefetched += 1
                for u in q[heads[key]:]:
                    if t >= stall_until:
                        break
                    # A bucket's packing is a kernel of its own here (the cat materialises it);
                    # a lone cast would only run where its collective does.
                    if u.issued_at >= 0 or u.ready > i or len(u.members) < 2 or all(m in emitted for m in u.pre):
                        continue
                    held = pre_bytes(u)
                    window = int((base_arr[i:u.first_use + 1] + extra[i:u.first_use + 1]).max())
                    if window + rs_held() + held > limit:
                        break
                    extra[i:u.first_use] += held
                    emit(i, u.pre)
        # 7. waits this node needs (in issue order)
        for u in sorted([u for u in waiting_ag + waiting_rs if u.first_use == i], key=lambda u: u.issued_at):
            if u in waiting_ag or u in waiting_rs:
                wait(u, i)
        if not settings.reorder:
            for u in list(waiting_rs):
                wait(u, i)
        # 8. the node itself
        info = collective_info(node, world)
        if info is not None:
            dur = model.collective_time(info.kind, info.nbytes, info.group_size)
            start = max(t, stream_free.get(info.group, 0.0))
            end[node] = stream_free[info.group] = start + dur
        elif (c := wait_collective(node)) is not None:
            t = max(t, end.get(c, t))
        else:
            t += model.node_time(node)
    leftover = [u for u in units if u.issued_at < 0 or u.waited_at < 0]
    if leftover:
        raise AssertionError(f"fsdp_overlap: unscheduled collectives {[u.coll.name for u in leftover]}")
    return anchors


def _apply_order(graph: fx.Graph, order: list[fx.Node]) -> None:
    """Move nodes so the graph's order is ``order`` (a permutation of its nodes)."""
    current = list(graph.nodes)
    if len(order) != len(current) or set(order) != set(current):
        raise AssertionError("fsdp_overlap: the new order is not a permutation of the graph")
    seen: set[fx.Node] = set()
    for n in order:
        for a in n.all_input_nodes:
            if a not in seen:
                raise AssertionError(f"fsdp_overlap: {n.name} would run before its input {a.name}")
        seen.add(n)
    prev = order[0]
    if current[0] is not prev:
        current[0].prepend(prev)
    for n in order[1:]:
        if prev.next is not n:
            prev.append(n)
        prev = n
