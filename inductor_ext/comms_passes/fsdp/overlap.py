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

The work is split by job: ``settings.py`` (the knobs and the option), ``bucketing.py`` (which
collectives move, the buckets and their rewrite), ``scheduling.py`` (the list scheduler and the
order's pinning); this module is the pass and ``optimize``, which picks the plan.

Settings come from ``OverlapSettings`` (``settings.py``), set by ``options={"fsdp_overlap": {...}}``
(``settings.py`` registers that option); the ExtConfig target's datasheet (``targets``: sm_90a ->
H200, sm_100a -> B200, gfx950 -> MI355X) feeds the cost model, H100 for a target without one. ``configure(...)`` overrides
settings for passes built inside its ``with`` block; the settings are part of the pass uuid.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from typing import Any

import torch.fx as fx

from inductor_ext.comms_passes.cost_model import AnalyticalCostModel, CostModel, Timeline, simulate
from inductor_ext.comms_passes.fsdp import bucketing, scheduling, settings as _settings_module
from inductor_ext.comms_passes.fsdp.bucketing import (
    _find_collectives, _has_vals, _RankInvariantModel, _uneven_shard, auto_bucket_cap,
)
from inductor_ext.comms_passes.fsdp.scheduling import PlanSummary, _apply_order, _plan_and_order, pin_order
# The pass's settings and option, importable from here as before the split.
from inductor_ext.comms_passes.fsdp.settings import (  # noqa: F401
    OPTION, PLANNED_ORDER_PATCHES, OverlapSettings, configure, current_settings,
)
from inductor_ext.config import ExtConfig
from inductor_ext.lowering.passes.base import ExtGraphPass

__all__ = ["FsdpOverlapPass", "OverlapSettings", "PlanSummary", "configure", "current_settings", "optimize",
           "auto_bucket_cap", "pin_order", "PLANNED_ORDER_PATCHES"]

log = logging.getLogger("inductor_ext.passes.fsdp_overlap")


# A plan whose exposed communication is within this fraction of the least found competes on
# makespan (see optimize).
EXPOSED_TOLERANCE = 0.02


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
        # The decisions also depend on the code of the cost model and of the modules this pass is
        # split into, and on the settings.
        from inductor_ext.comms_passes import cost_model

        parts = (super().uuid(), *(inspect.getsource(m) for m in (cost_model, _settings_module, bucketing, scheduling)),
                 self.settings.to_json(),
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

