"""Communication passes: data_parallel (SimpleFSDP style), the cost model, fsdp_overlap, the report.

Unit tests run on graphs traced in this process on the fake process group (world 8) under
FakeTensorMode: the pass must keep a valid order with every wait after its collective, keep
all-gathers (and reduce-scatters) in their relative order, decide the same way every time and on
every rank, gather a bucket of mixed bf16/fp32 shards with ONE all-gather, and stay within the
memory budget. ``dist`` tests run two gloo ranks on CPU: losses and gradients of data_parallel
(eager) and of ``backend="ext"`` with ``fsdp_overlap`` equal a single-process eager reference.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
from pathlib import Path

import pytest
import torch
import torch.fx as fx

from inductor_ext import presets
from inductor_ext.comms_passes.fsdp import overlap as fsdp_overlap
from inductor_ext.comms_passes.fsdp import scheduling as fsdp_scheduling
from inductor_ext.comms_passes.cost_model import (
    GPUS, AnalyticalCostModel, CostModel, collective_info, is_wait, memory_profile, simulate,
    uninitialized_reads, unwrap_control_deps, wait_collective,
)
from inductor_ext.comms_passes.fsdp.data_parallel import ParamGather, data_parallel, sharded_parameter_names
from inductor_ext.comms_passes.fsdp.overlap import FsdpOverlapPass, OverlapSettings, configure, optimize
from inductor_ext.cli.comms_report import format_table, run_report
from inductor_ext.comms_passes.capture import capture_graphs, copy_graph_module, fake_world, post_grad
from inductor_ext.models.llama import Llama, LlamaConfig
from inductor_ext.lowering import passes as pass_manager
from _script_runner import run_json_script

aten = torch.ops.aten
c10d = torch.ops._c10d_functional
H100 = AnalyticalCostModel("H100")
# Small enough to trace in seconds, large enough that compute can hide communication on an H100.
SMALL = LlamaConfig(vocab=4096, dim=512, layers=2, heads=8, kv_heads=4, ffn=1024, seq=256)


# ----------------------------------------------------------------------------------------------
# Graphs traced on the fake process group
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def world():
    with fake_world(8) as mesh:
        yield mesh


def _trace(mesh, cfg: LlamaConfig, **dp_kwargs):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        model = Llama(cfg)
        data_parallel(model, mesh, **dp_kwargs)
        tokens = torch.randint(0, cfg.vocab, (2, cfg.seq))
        captured = capture_graphs(model, (tokens, tokens))
    return {c.kind: post_grad(c, {}) for c in captured}


@pytest.fixture(scope="module")
def graphs(world):
    """forward and backward post-grad graphs: bf16 compute, fp32 norms, fp32 reduce-scatters."""
    return _trace(world, SMALL, fp32_params=["*norm*"])


def _settings(**kw) -> OverlapSettings:
    # pin_order off: these tests read the planned FX order itself (test_pin_order covers the pins)
    kw.setdefault("pin_order", False)
    return dataclasses.replace(fsdp_overlap.current_settings(presets.resolve({"preset": "cpu"})), **kw)


def _run_pass(gm: fx.GraphModule, **kw) -> tuple[fx.GraphModule, fsdp_overlap.PlanSummary]:
    out = copy_graph_module(gm)
    plan = optimize(out.graph, _settings(**kw), H100)
    out.recompile()
    return out, plan


def _colls(gm: fx.GraphModule, kind: str | None = None) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if (i := collective_info(n)) is not None and (kind is None or i.kind == kind)]


def test_data_parallel_graphs_carry_fsdp_collectives(graphs):
    fw, bw = graphs["forward"], graphs["backward"]
    n_params = 2 + SMALL.layers * 9 + 1  # embedding, output, final norm; 7 weights + 2 norms per layer
    assert len(_colls(fw, "all_gather")) == n_params
    assert len(_colls(bw, "reduce_scatter")) == n_params
    # reshard after forward: the backward gathers again (all but the embedding, unused there)
    assert len(_colls(bw, "all_gather")) == n_params - 1
    dtypes = {c.args[0].meta["val"].dtype for c in _colls(fw, "all_gather")}
    assert dtypes == {torch.bfloat16, torch.float32}
    assert {c.args[0].meta["val"].dtype for c in _colls(bw, "reduce_scatter")} == {torch.float32}
    assert {c.args[1] for c in _colls(bw, "reduce_scatter")} == {"avg"}


def test_no_reshard_keeps_gathered_parameters_for_backward(world):
    graphs = _trace(world, LlamaConfig.tiny(1), reshard_after_forward=False)
    assert _colls(graphs["forward"], "all_gather")
    assert not _colls(graphs["backward"], "all_gather")


@pytest.fixture(scope="module")
def uneven_ranks():
    return run_json_script("_uneven_ranks_script.py", timeout=600)


def test_uneven_shards_give_every_rank_the_same_collectives(uneven_ranks):
    """vocab 65 and ffn 63 over 2 ranks: rank 1 pads its shorter shards before gathering, so its
    graphs differ from rank 0's; the plans must still issue the same collectives, in order."""
    ranks = uneven_ranks["invariant"]
    assert len(ranks["0"]) == 2 + 2 * 3  # mixed: forward, backward; no casts: both at 3 budgets
    for case in ranks["0"]:
        r0, r1 = ranks["0"][case], ranks["1"][case]
        assert r0["collectives"] == r1["collectives"], case
        assert "over 2 ranks" in r0["uneven_shards"] and r0["uneven_shards"] == r1["uneven_shards"]
    for kind in ("forward", "backward"):
        assert ranks["0"][f"mixed {kind} 0"]["rewrites"] > 0, kind  # bucketed, not left alone


def test_uneven_shards_with_per_rank_costs_would_diverge(uneven_ranks):
    """Why the pass plans on rank-invariant costs: with each rank's own estimates the same
    settings make rank 0 and rank 1 issue different collectives (a hang or a size mismatch)."""
    ranks = uneven_ranks["per-rank costs"]
    assert any(ranks["0"][k]["collectives"] != ranks["1"][k]["collectives"] for k in ranks["0"])


def test_even_shards_are_not_taken_for_uneven(graphs):
    for gm in graphs.values():
        assert fsdp_overlap._uneven_shard(fsdp_overlap._find_collectives(
            list(gm.graph.nodes), _settings())) is None


def _check_order(gm: fx.GraphModule) -> None:
    gm.graph.lint()  # topological order
    pos = {n: i for i, n in enumerate(gm.graph.nodes)}
    for n in gm.graph.nodes:
        for a in n.all_input_nodes:
            assert pos[a] < pos[n], f"{n} before its input {a}"
        if is_wait(n):
            c = wait_collective(n)
            assert c is not None and pos[c] < pos[n]
    for c in _colls(gm):
        waits = [u for u in c.users if is_wait(u)]
        assert len(waits) == 1, f"{c} must be waited exactly once"


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_pass_keeps_topological_order_and_waits_after_collectives(graphs, kind):
    out, plan = _run_pass(graphs[kind])
    _check_order(out)
    assert plan.rewrites > 0
    # something overlaps: compute runs between some collective and its wait
    nodes = list(out.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    overlapped = [c for c in _colls(out) if any(H100.node_time(n) > 0 for n in
                                                nodes[pos[c] + 1:pos[next(iter(c.users))]])]
    assert overlapped


def test_pin_order_keeps_the_plan_through_inductors_scheduler(graphs):
    """Pinned: every collective and wait sits between the same kernels as planned, the flat graph
    is the planned order, and Inductor's scheduler runs the collectives and waits where planned."""
    from inductor_ext.comms_passes.capture import strip_control_deps

    for kind in ("forward", "backward"):
        pinned, plan = _run_pass(graphs[kind], pin_order=True)
        assert plan.pinned > 0
        control = [n for n in pinned.graph.nodes if n.target is torch.ops.higher_order.control_deps]
        assert len(control) == plan.pinned
        # every collective and wait follows the kernel planned before it
        for n in control:
            inner = unwrap_control_deps(n)
            if collective_info(inner) is not None or is_wait(inner):
                (anchor, *_) = n.args[0]
                assert fsdp_scheduling._kernel(unwrap_control_deps(anchor), H100, 8)
        flat = strip_control_deps(pinned)  # the planned order, as the plan evaluated it
        assert simulate(list(flat.graph.nodes), H100).exposed == pytest.approx(plan.exposed_after)
    pass_ = FsdpOverlapPass(presets.resolve({"preset": "cpu"}))
    assert pass_.inductor_patches() == fsdp_overlap.PLANNED_ORDER_PATCHES
    with configure(pin_order=False):
        assert FsdpOverlapPass(presets.resolve({"preset": "cpu"})).inductor_patches() == {}


def _origins(before: fx.GraphModule) -> dict[str, tuple[str, int]]:
    """Name of each collective's input in ``before`` -> (kind, index among its kind)."""
    seen: dict[str, int] = {}
    out = {}
    for c in _colls(before):
        kind = collective_info(c).kind
        out[c.args[0].name] = (kind, seen.get(kind, 0))
        seen[kind] = seen.get(kind, 0) + 1
    return out


def _covered(after: fx.GraphModule, origins: dict[str, tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Original collective -> position (among collectives) of the one that now carries it."""
    where: dict[tuple[str, int], int] = {}
    for k, c in enumerate(_colls(after)):
        stack, seen = [c.args[0]], set()
        while stack:
            a = stack.pop()
            if a in seen:
                continue
            seen.add(a)
            if a.name in origins and collective_info(a) is None:
                assert origins[a.name] not in where, f"{a.name} gathered twice"
                where[origins[a.name]] = k
                continue
            stack.extend(x for x in a.all_input_nodes if collective_info(x) is None and not is_wait(x))
    return where


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_collectives_keep_their_relative_order(graphs, kind):
    before = graphs[kind]
    origins = _origins(before)
    out, _ = _run_pass(before, bucket_cap_bytes=1 << 20)  # several buckets
    where = _covered(out, origins)
    assert set(where) == set(origins.values())  # every original collective is carried exactly once
    for coll_kind in {k for k, _ in origins.values()}:
        seq = [where[(coll_kind, i)] for i in range(sum(1 for k, _ in origins.values() if k == coll_kind))]
        assert seq == sorted(seq), f"{coll_kind}s were reordered: {seq}"


def _signature(gm: fx.GraphModule) -> list[tuple]:
    return [(n.op, str(n.target), n.name, tuple(str(a) for a in n.args)) for n in gm.graph.nodes]


def test_decisions_are_deterministic_and_rank_independent(graphs, monkeypatch):
    first, plan1 = _run_pass(graphs["backward"])
    monkeypatch.setattr("inductor_ext.lowering.passes.base.current_rank", lambda: 5)
    second, plan2 = _run_pass(graphs["backward"])
    assert _signature(first) == _signature(second)
    assert plan1 == plan2


@pytest.mark.parametrize("cap", [0, 1 << 16, 1 << 20, 1 << 30])
def test_bucketing_counts(graphs, cap):
    for kind in ("forward", "backward"):
        before = graphs[kind]
        out, plan = _run_pass(before, bucket_cap_bytes=cap, reorder=False, memory_budget_ratio=1.0)
        for coll_kind in ("all_gather", "reduce_scatter"):
            n_before = len(_colls(before, coll_kind))
            sizes = plan.buckets.get(coll_kind, [])
            assert sum(sizes) == n_before
            assert len(_colls(out, coll_kind)) == len(sizes)
            if cap == 0:
                assert sizes == [1] * n_before
        if cap == 1 << 30:
            assert len(_colls(out, "all_gather")) < len(_colls(before, "all_gather"))
        for rs in _colls(out, "reduce_scatter"):
            assert collective_info(rs).nbytes <= max(cap, max(collective_info(c).nbytes
                                                              for c in _colls(before, "reduce_scatter")))


def test_switching_bucketing_off(graphs):
    out, plan = _run_pass(graphs["forward"], bucket_all_gathers=False)
    assert len(_colls(out, "all_gather")) == len(_colls(graphs["forward"], "all_gather"))


def test_fp32_params_give_one_all_gather_per_bucket(graphs):
    """Mixed bf16/fp32 buckets: ONE uint8 all-gather each, unpacked to both dtypes."""
    before = graphs["forward"]
    # (a generous memory budget: this test is about packing, not about the budget's fallbacks)
    out, plan = _run_pass(before, bucket_cap_bytes=1 << 30, reorder=False, memory_budget_ratio=1.0)
    ags = _colls(out, "all_gather")
    assert len(ags) == len(plan.buckets["all_gather"])
    mixed = 0
    for ag in ags:
        wait = next(iter(ag.users))
        unpacked = set()
        stack = [wait]
        while stack:
            n = stack.pop()
            for u in n.users:
                if u.target is aten.view.dtype:
                    unpacked.add(u.meta["val"].dtype)
                if u.target in (aten.reshape.default, aten.slice.Tensor, aten.view.dtype):
                    stack.append(u)
        if unpacked:
            assert ag.args[0].meta["val"].dtype == torch.uint8
            mixed += unpacked == {torch.bfloat16, torch.float32}
    assert mixed >= 1, "no bucket mixed bf16 and fp32 shards"
    fp32 = [c for c in _colls(before, "all_gather") if c.args[0].meta["val"].dtype == torch.float32]
    assert len(ags) < len(fp32)  # fewer all-gathers than there were fp32 parameters alone


def test_memory_budget_is_respected(graphs):
    for kind in ("forward", "backward"):
        before = simulate(list(graphs[kind].graph.nodes), H100)
        for ratio in (0.0, 0.25):
            out, plan = _run_pass(graphs[kind], memory_budget_ratio=ratio, max_prefetch=8)
            after = simulate(list(out.graph.nodes), H100)
            assert after.peak_memory <= before.peak_memory * (1 + ratio)
            assert plan.peak == after.peak_memory <= plan.memory_limit


def test_a_tight_budget_limits_prefetch(graphs):
    loose = _run_pass(graphs["forward"], memory_budget_ratio=1.0, max_prefetch=8)[1]
    assert loose.prefetched > 0
    # With no budget at all, prefetch can still use memory that is free before the peak, never more.
    tight_out, tight = _run_pass(graphs["forward"], memory_budget_ratio=0.0, max_prefetch=8)
    assert tight.peak <= tight.input_peak


def test_overlap_hides_communication(graphs):
    for kind in ("forward", "backward"):
        before = simulate(list(graphs[kind].graph.nodes), H100)
        out, _ = _run_pass(graphs[kind])
        after = simulate(list(out.graph.nodes), H100)
        assert after.exposed < 0.5 * before.exposed
        assert after.makespan < before.makespan
        assert after.collectives < before.collectives


def test_pass_registers_by_name_and_uuid_tracks_settings():
    assert pass_manager.available_passes()["fsdp_overlap"] is FsdpOverlapPass
    config = presets.resolve({"preset": "cpu", "passes": ["fsdp_overlap"]})
    stages = pass_manager.build_stages(config)
    # (with torch.distributed initialised the collective check follows it: test_collective_check)
    assert [type(p) for p in stages["post_grad_post"].passes if p.name != "collective_check"] == [FsdpOverlapPass]
    assert stages["post_grad_post"].passes[0].name == "fsdp_overlap"
    assert FsdpOverlapPass.stage == "post_grad_post"
    base = FsdpOverlapPass(config).uuid()
    assert base == FsdpOverlapPass(config).uuid()
    with configure(max_prefetch=1):
        assert FsdpOverlapPass(config).uuid() != base
    with pytest.raises(ValueError, match="unknown fsdp_overlap settings"):
        with configure(prefetch_depth=3):
            pass
    # the target picks the datasheet
    assert FsdpOverlapPass(presets.resolve({"preset": "blackwell"})).settings.gpu == "B200"


# ----------------------------------------------------------------------------------------------
# Cost model
# ----------------------------------------------------------------------------------------------

def test_datasheets_are_complete():
    assert {"H100", "H200", "B200", "MI355X"} <= set(GPUS)
    for g in GPUS.values():
        assert g.peak_flops["bf16"] > 1e14 and g.hbm_bandwidth > 1e12 and g.link_bandwidth > 1e11
        assert 0 < g.link_latency < 1e-4 and g.source
    assert GPUS["H200"].hbm_bandwidth > GPUS["H100"].hbm_bandwidth
    assert GPUS["B200"].peak_flops["bf16"] > GPUS["H100"].peak_flops["bf16"]


def test_collective_model_sanity():
    m = H100
    ag = lambda n, p=8: m.collective_time("all_gather", n, p)  # noqa: E731
    assert m.collective_time("all_gather", 1 << 20, 1) == 0.0
    assert ag(1 << 10) < ag(1 << 20) < ag(1 << 30)
    # latency dominates small messages, bandwidth large ones: ring moves (p-1)/p of the buffer
    big = 1 << 30
    bw = GPUS["H100"].link_bandwidth * GPUS["H100"].link_efficiency
    assert ag(big) == pytest.approx(7 / 8 * big / bw, rel=0.01)
    assert ag(1) == pytest.approx(GPUS["H100"].collective_launch + 7 * GPUS["H100"].link_latency)
    assert m.collective_time("reduce_scatter", big, 8) == pytest.approx(ag(big))
    assert m.collective_time("all_reduce", big, 8) == pytest.approx(2 * ag(big), rel=0.01)
    assert ag(big, 16) > 5 * ag(big, 8)  # past one node: the NIC, not NVLink
    assert AnalyticalCostModel("B200").collective_time("all_gather", big, 8) < ag(big)
    with pytest.raises(ValueError, match="known datasheets"):
        AnalyticalCostModel("V100")


def _fake_graph(build):
    """An FX graph whose nodes carry fake tensor values (as Inductor's post-grad graphs do)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    g = fx.Graph()

    def node(op, *args):
        n = g.call_function(op, args)
        vals = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
        with mode:
            n.meta["val"] = op(*vals)
        return n

    def placeholder(name, shape, dtype=torch.bfloat16):
        n = g.placeholder(name)
        with mode:
            n.meta["val"] = torch.empty(shape, dtype=dtype)
        return n

    out = build(node, placeholder)
    g.output(out)
    return g


def test_roofline_sanity():
    m = H100
    h = GPUS["H100"]
    g = _fake_graph(lambda node, ph: node(aten.add.Tensor, node(aten.mm.default, ph("a", (8192, 8192)), ph("b", (8192, 8192))),
                                           node(aten.view.default, ph("c", (8192 * 8192,)), [8192, 8192])))
    mm, view, add = [n for n in g.nodes if n.op == "call_function"][::-1][2], \
        [n for n in g.nodes if n.target is aten.view.default][0], [n for n in g.nodes if n.target is aten.add.Tensor][0]
    assert m.node_time(mm) == pytest.approx(2 * 8192**3 / (h.peak_flops["bf16"] * h.flops_efficiency) + h.kernel_launch)
    assert m.node_time(view) == 0.0
    assert m.node_time(add) == pytest.approx(3 * 8192 * 8192 * 2 / (h.hbm_bandwidth * h.memory_efficiency)
                                            + h.kernel_launch)
    assert AnalyticalCostModel("B200").node_time(mm) < m.node_time(mm)


def test_simulate_exposes_what_compute_does_not_hide():
    world = 8
    n_bytes = 64 << 20

    def build(node, ph):
        shard = ph("shard", (n_bytes // 2 // world,))
        ag = node(c10d.all_gather_into_tensor.default, shard, world, "0")
        mm = node(aten.mm.default, ph("a", (4096, 4096)), ph("b", (4096, 4096)))
        w = node(c10d.wait_tensor.default, ag)
        return node(aten.add.Tensor, w, w), mm

    g = _fake_graph(build)
    nodes = list(g.nodes)
    t_ag = H100.collective_time("all_gather", n_bytes, world)
    t_mm = H100.node_time(next(n for n in nodes if n.target is aten.mm.default))
    t_add = H100.node_time(next(n for n in nodes if n.target is aten.add.Tensor))
    tl = simulate(nodes, H100)
    assert tl.exposed == pytest.approx(max(0.0, t_ag - t_mm))
    assert tl.makespan == pytest.approx(max(t_ag, t_mm) + t_add)
    assert tl.collectives == 1 and tl.by_kind == {"all_gather": 1}
    assert tl.peak_in_flight == n_bytes // world + n_bytes
    # waiting right after the collective exposes all of it
    wait = next(n for n in nodes if is_wait(n))
    ag = wait_collective(wait)
    ag.append(wait)
    assert simulate(list(g.nodes), H100).exposed == pytest.approx(t_ag)


def test_cost_model_is_pluggable(graphs):
    class Flat:
        def collective_time(self, kind, nbytes, group_size):
            return 1e-3

        def node_time(self, node):
            return 1e-6 if node.op == "call_function" else 0.0

    assert isinstance(Flat(), CostModel) and isinstance(H100, CostModel)
    tl = simulate(list(graphs["forward"].graph.nodes), Flat())
    assert tl.communication == pytest.approx(1e-3 * tl.collectives)
    out = copy_graph_module(graphs["forward"])
    optimize(out.graph, _settings(bucket_cap_bytes=1 << 20), Flat())
    _check_order(out)


def test_memory_profile_and_uninitialised_reads():
    def build(node, ph):
        x = ph("x", (1024,), torch.float32)
        buf = node(aten.empty.memory_format, [1024])
        early = node(aten.mul.Tensor, buf, 2.0)  # reads garbage
        node(aten.copy_.default, buf, x)
        late = node(aten.mul.Tensor, buf, 3.0)
        return early, late

    g = _fake_graph(build)
    bad = uninitialized_reads(list(g.nodes))
    assert [r.target for r, _ in bad] == [aten.mul.Tensor] and len(bad) == 1
    assert bad[0][0].args[1] == 2.0
    live, base = memory_profile(list(g.nodes))
    assert base == 4096 and max(live) == 4096 * 4  # x, buf, and the two outputs


# ----------------------------------------------------------------------------------------------
# data_parallel
# ----------------------------------------------------------------------------------------------

def test_data_parallel_shards_and_picks_dtypes(world):
    from torch.distributed.tensor import DTensor, Shard

    model = Llama(LlamaConfig.tiny(1))
    data_parallel(model, world, fp32_params=["*norm*"])
    params = sharded_parameter_names(model)
    assert set(params) == {n for n, _ in Llama(LlamaConfig.tiny(1)).named_parameters()}
    for name, p in params.items():
        assert isinstance(p, DTensor) and p.placements == (Shard(0),)
        assert p.to_local().shape[0] == math.ceil(p.shape[0] / 8)
    gathers = {f"{m}.{k}".lstrip("."): pl[0] for m, mod in model.named_modules() if hasattr(mod, "parametrizations")
               for k, pl in mod.parametrizations.items()}
    for name, g in gathers.items():
        assert isinstance(g, ParamGather)
        assert g.param_dtype == (torch.float32 if "norm" in name else torch.bfloat16), name
        assert g.reduce_dtype == torch.float32
    by_predicate = Llama(LlamaConfig.tiny(1))
    data_parallel(by_predicate, world, fp32_params=lambda name, p: p.dim() == 1)
    assert by_predicate.norm.parametrizations.weight[0].param_dtype == torch.float32
    assert by_predicate.output.parametrizations.weight[0].param_dtype == torch.bfloat16
    with pytest.raises(ValueError, match="apply data_parallel once"):
        data_parallel(by_predicate, world)


# ----------------------------------------------------------------------------------------------
# The report (small model: the bench runs the 1B one)
# ----------------------------------------------------------------------------------------------

def test_report_runs_every_arm_with_one_cost_model(tmp_path):
    from inductor_ext.comms_passes.chrome_trace import ChromeTrace, problems

    arms = ["2.15 bucket", "2.15 overlap", "2.15 reorder", "ext"]
    trace = ChromeTrace()
    rep = run_report(layers=1, dim=256, ffn=512, heads=4, kv_heads=2, vocab=1024, seq=128, batch=1, only=arms,
                     variants=["keep_last"], trace=trace)
    best_name = rep["best_2_15_arm"]
    assert set(rep["arms"]) == {"untouched", *arms, "ext keep_last", f"{best_name} on keep_last graphs"}
    # every ext arm against every valid 2.15 arm, the option also against the best on its graphs
    kept = rep["ext_arms"]["ext keep_last"]
    assert set(kept["vs_every_2_15_arm"]) == {a for a in arms if a.startswith("2.15")}
    assert kept["vs_best_2_15_on_same_graphs"]["exposed_comm"] == pytest.approx(
        rep["arms"]["ext keep_last"]["exposed_comm_ms"] / rep["arms"][f"{best_name} on keep_last graphs"]["exposed_comm_ms"])
    t = rep["targets"]
    assert t["met"] == bool(t["met_by"]) and set(t["exposed_le_0.9x"]) == {"ext", "ext keep_last"}
    assert all(isinstance(v, bool) for v in t["peak_memory_le_1.0x"].values())
    assert t["numerics"]["ext keep_last"].startswith("unchanged")
    assert set(t["planned_equals_executed"]["executed_over_planned"]) == {"ext", "ext keep_last"}
    # the trace: one process per arm, compute and communication threads, live memory counters
    path = tmp_path / "report.json"
    trace.write(str(path))
    data = json.loads(path.read_text())
    assert problems(data) == []
    procs = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
    assert procs == {f"{a} (rank 0)" for a in rep["arms"]}
    threads = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    assert {"graph", "compute"} <= threads and any(x.startswith("communication (group") for x in threads)
    assert any(e["ph"] == "C" and e["name"] == "live memory" for e in data["traceEvents"])
    ext_pid = next(e["pid"] for e in data["traceEvents"] if e["name"] == "process_name"
                   and e["args"]["name"] == "ext (rank 0)")
    graphs = [e for e in data["traceEvents"] if e["pid"] == ext_pid and e.get("cat") == "graph"]
    assert [g["name"] for g in graphs] == ["forward graph", "backward graph"]
    assert sum(g["args"]["exposed_comm_ms"] for g in graphs) == pytest.approx(rep["arms"]["ext"]["exposed_comm_ms"])
    ext, untouched = rep["arms"]["ext"], rep["arms"]["untouched"]
    assert ext["fx_level"]["valid"]
    # Inductor's scheduler ran on every arm: its figures and the post-grad order's are both there
    assert ext["fx_level"]["exposed_comm_ms"] < untouched["fx_level"]["exposed_comm_ms"]
    assert ext["exposed_comm_ms"] < untouched["exposed_comm_ms"]
    # the reorder arm only acts in the scheduler: same post-grad graph as untouched, other order
    assert rep["arms"]["2.15 reorder"]["fx_level"]["exposed_comm_ms"] == untouched["fx_level"]["exposed_comm_ms"]
    assert rep["best_2_15_arm"] in arms and isinstance(rep["target_met"], bool)
    assert 0 <= rep["unhideable_comm_ms"] <= untouched["fx_level"]["exposed_comm_ms"]
    table = format_table(rep)
    assert "cost-model figures" in table and "ext / best valid 2.15 arm" in table
    best = rep["arms"][rep["best_2_15_arm"]]
    assert rep["target_exposed_ms"] == pytest.approx(0.9 * best["exposed_comm_ms"])
    assert rep["target_reachable"] == (rep["unhideable_comm_ms"] <= rep["target_exposed_ms"])
    json.dumps(rep, default=str)


def test_report_says_when_the_target_is_below_the_floor():
    rep = {"note": "n", "graphs": ["forward"], "trace_s": 0.0, "arms": {}, "unhideable_comm_ms": 3.2,
           "model": {"params": 1e9, "layers": 4, "vocab": 128256, "tokens_per_rank": 1, "fp32_params": []},
           "best_2_15_arm": "2.15 reorder", "target": "t", "target_met": False, "target_reachable": False,
           "target_exposed_ms": 2.96, "ratios_ext_over_best": dict.fromkeys(
               ("exposed_comm", "makespan", "collectives", "peak_in_flight", "peak_memory"), 1.0)}
    assert "unreachable on these graphs: 0.9x is 2.960 ms, below the 3.200 ms" in format_table(rep)
    assert "unreachable" not in format_table({**rep, "target_reachable": True})


# ----------------------------------------------------------------------------------------------
# Two gloo ranks on CPU
# ----------------------------------------------------------------------------------------------

DIST_CFG = LlamaConfig(vocab=64, dim=32, layers=2, heads=4, kv_heads=2, ffn=64, seq=16)
# vocab 65 and ffn 63: the embedding, output and w1/w3 shards are uneven on 2 ranks (DTensor pads them)
UNEVEN_CFG = dataclasses.replace(DIST_CFG, vocab=65, ffn=63)
STEPS, LR, BATCH = 2, 0.5, 4  # global batch of 4 sequences, 2 per rank


class _Cast(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x):
        return x.to(self.dtype)


def _reference(state, batches, dtype_of, cfg=DIST_CFG):
    """Single-process eager: the whole global batch, parameters cast to their compute dtype on use."""
    import torch.nn.utils.parametrize as P

    model = Llama(cfg)
    model.load_state_dict(state)
    for mod_name, mod in list(model.named_modules()):
        for pname, p in list(mod.named_parameters(recurse=False)):
            dt = dtype_of(f"{mod_name}.{pname}".lstrip("."))
            if dt != torch.float32:
                P.register_parametrization(mod, pname, _Cast(dt), unsafe=True)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, grads = [], []
    for tokens, labels in batches:
        loss = model(tokens, labels)
        loss.backward()
        losses.append(loss.item())
        named = {}
        for n, p in model.named_parameters():
            named[n.replace(".parametrizations", "").replace(".original", "")] = p.grad.clone()
        grads.append(named)
        opt.step()
        opt.zero_grad()
    return losses, grads


def _dp_run(model, batches, rank, compiled=None, prefetch=None):
    """Steps of plain SGD; with ``prefetch`` (a NextStepGather) its parameters get an optimizer
    of their own that steps first and issues their next gathers (the loop the option needs)."""
    import torch.distributed as dist

    named = sharded_parameter_names(model)
    first = {id(p) for _, _, p in prefetch.targets} if prefetch is not None else set()
    opts = [torch.optim.SGD([p for p in named.values() if id(p) in first], lr=LR)] if first else []
    opts.append(torch.optim.SGD([p for p in model.parameters() if id(p) not in first], lr=LR))
    if prefetch is not None:
        prefetch.after(opts[0])
    fn = compiled if compiled is not None else model
    losses, grads = [], []
    for tokens, labels in batches:
        loss = fn(tokens[2 * rank:2 * rank + 2], labels[2 * rank:2 * rank + 2])
        loss.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / dist.get_world_size())
        grads.append({n: p.grad.full_tensor() for n, p in named.items()})
        for opt in opts:
            opt.step()
        for opt in opts:
            opt.zero_grad()
    return losses, grads


def _compare(got, want, rtol, atol, what, norm_rtol=None):
    """Losses and per-step gradients; with ``norm_rtol`` (bf16 runs) each gradient is compared by
    its relative error in norm, which small gradients cannot hide behind an absolute tolerance."""
    (l1, g1), (l2, g2) = got, want
    for a, b in zip(l1, l2):
        assert a == pytest.approx(b, rel=rtol, abs=atol), f"{what}: loss {a} != {b}"
    for step, (ga, gb) in enumerate(zip(g1, g2)):
        assert set(ga) == set(gb)
        for n in ga:
            a, b = ga[n].double(), gb[n].double()
            if norm_rtol is not None:
                err = float((a - b).norm() / b.norm())
                assert err <= norm_rtol, f"{what}: step {step} grad {n}: relative error {err:.3g}"
            else:
                torch.testing.assert_close(a, b, rtol=rtol, atol=atol,
                                           msg=lambda m: f"{what}: step {step} grad {n}: {m}")


def _dist_worker(rank, world, port, out_dir):
    import faulthandler

    import torch.distributed as dist

    faulthandler.enable()  # a native crash (SIGABRT, SIGSEGV) prints each thread's Python stack to the log
    from torch.distributed.device_mesh import init_device_mesh

    from inductor_ext.comms_passes.collective_check import agree, flight_recorder
    from inductor_ext.lowering.passes import base as pass_base

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    summary = {}
    try:
        mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(0)
        state = Llama(DIST_CFG).state_dict()
        g = torch.Generator().manual_seed(1)
        batches = [(torch.randint(0, DIST_CFG.vocab, (BATCH, DIST_CFG.seq), generator=g),
                    torch.randint(0, DIST_CFG.vocab, (BATCH, DIST_CFG.seq), generator=g)) for _ in range(STEPS)]

        # 1. eager data_parallel in fp32 equals the fp32 reference (tight)
        ref32 = _reference(state, batches, lambda n: torch.float32)
        model = Llama(DIST_CFG)
        model.load_state_dict(state)
        data_parallel(model, mesh, param_dtype=torch.float32, reduce_dtype=torch.float32)
        eager32 = _dp_run(model, batches, rank)
        _compare(eager32, ref32, 1e-5, 1e-6, "eager data_parallel fp32")
        summary["eager_fp32_losses"] = eager32[0]

        # 1b. keep_gathered (the head and final norm stay gathered for the backward): the same
        #     numbers to the bit; reduce_dtypes bf16 for the embedding (lossy, asked for): close
        model = Llama(DIST_CFG)
        model.load_state_dict(state)
        data_parallel(model, mesh, param_dtype=torch.float32, reduce_dtype=torch.float32,
                      keep_gathered=["output.*", "norm.*"])
        kept = _dp_run(model, batches, rank)
        summary["keep_gathered_bitwise"] = kept[0] == eager32[0] and all(
            torch.equal(a[n], b[n]) for a, b in zip(kept[1], eager32[1]) for n in a)
        model = Llama(DIST_CFG)
        model.load_state_dict(state)
        data_parallel(model, mesh, param_dtype=torch.float32, reduce_dtype=torch.float32,
                      reduce_dtypes={"tok_embeddings.*": torch.bfloat16})
        lossy = _dp_run(model, batches, rank)
        _compare(lossy, ref32, 1e-2, 0.0, "bf16 embedding reduce", norm_rtol=1e-2)
        summary["bf16_embedding_grad_differs"] = not all(
            torch.equal(a["tok_embeddings.weight"], b["tok_embeddings.weight"]) for a, b in zip(lossy[1], eager32[1]))
        # 1c. the embedding's next-step gather behind the optimizer step (its own optimizer steps
        #     first): the same numbers to the bit, and the forward used the prefetched values
        from inductor_ext.comms_passes.fsdp.data_parallel import NextStepGather

        model = Llama(DIST_CFG)
        model.load_state_dict(state)
        data_parallel(model, mesh, param_dtype=torch.float32, reduce_dtype=torch.float32)
        prefetch = NextStepGather(model, ["tok_embeddings.*"])
        used = []
        gather = prefetch.targets[0][1]
        gather.register_forward_pre_hook(lambda m, a: used.append(m.prefetched is not None))
        got = _dp_run(model, batches, rank, prefetch=prefetch)
        prefetch.close()
        summary["prefetch_bitwise"] = got[0] == eager32[0] and all(
            torch.equal(a[n], b[n]) for a, b in zip(got[1], eager32[1]) for n in a)
        summary["prefetch_used"] = used
        summary["bf16_embedding_grad_others_bitwise"] = all(
            torch.equal(a[n], b[n]) for a, b in zip(lossy[1][:1], eager32[1][:1]) for n in a if "tok_emb" not in n)

        # 2. compiled with fsdp_overlap, bf16 compute with fp32 norms (mixed-dtype buckets):
        #    equals the reference with the same casts (bf16 tolerance), and eager data_parallel
        def dtype_of(name):
            return torch.float32 if "norm" in name else torch.bfloat16

        ref_mixed = _reference(state, batches, dtype_of)
        model = Llama(DIST_CFG)
        model.load_state_dict(state)
        data_parallel(model, mesh, fp32_params=["*norm*"])
        compiled = torch.compile(model, backend="ext", options={"preset": "cpu", "passes": ["fsdp_overlap"]})
        pass_base.applied.clear()
        plans = []
        run_pass = fsdp_overlap.optimize
        fsdp_overlap.optimize = lambda *a, **k: plans.append(run_pass(*a, **k)) or plans[-1]
        # Small buckets, several of them mixing bf16 and fp32 shards; a budget that lets a model
        # this tiny (whose peak is its gathered parameters) bucket at all.
        with configure(bucket_cap_bytes=6 << 10, memory_budget_ratio=1.0):
            got = _dp_run(model, batches, rank, compiled)
        ran = [a for a in pass_base.applied if a[0] == "fsdp_overlap"]
        assert len(ran) == 2 and all(r > 0 for _, _, r in ran), ran  # forward and backward rewritten
        assert sum(p.mixed_dtype_buckets for p in plans) >= 2, plans  # bf16+fp32 gathered as one
        _compare(got, ref_mixed, 1e-3, 0.0, "compiled fsdp_overlap bf16+fp32", norm_rtol=3e-2)
        summary["compiled_losses"] = got[0]
        summary["reference_losses"] = ref_mixed[0]
        summary["applied"] = ran
        # the collective check ran once per graph (forward, backward); the flight recorder's
        # entries of the compiled collectives name their FX node and the user's line
        summary["checks_after_mixed"] = dict(agree.stats)
        entries = flight_recorder.dump()["entries"]
        summary["fr_entries"] = len(entries)
        summary["fr_annotated"] = [(e["ext_fx_node"], e["ext_source"], e["ext_bucket_of"])
                                   for e in entries if "ext_fx_node" in e]
        summary["fr_check_entries"] = sum("collective check" in e.get("ext_note", "") for e in entries)

        # 3. uneven shards: the ranks' graphs differ (rank 1 pads its shorter shards), the pass
        #    still buckets and reorders, every rank issues matching collectives (a mismatch
        #    aborts gloo), and the numbers are the reference's
        torch.manual_seed(0)
        state = Llama(UNEVEN_CFG).state_dict()
        ref_uneven = _reference(state, batches, dtype_of, UNEVEN_CFG)
        model = Llama(UNEVEN_CFG)
        model.load_state_dict(state)
        data_parallel(model, mesh, fp32_params=["*norm*"])
        compiled = torch.compile(model, backend="ext", options={"preset": "cpu", "passes": ["fsdp_overlap"]})
        pass_base.applied.clear()
        plans.clear()
        with configure(bucket_cap_bytes=6 << 10, memory_budget_ratio=1.0):
            got = _dp_run(model, batches, rank, compiled)
        assert len(plans) == 2 and all(p.uneven_shards and p.rewrites > 0 for p in plans), plans
        _compare(got, ref_uneven, 1e-3, 0.0, "compiled fsdp_overlap, uneven shards", norm_rtol=3e-2)
        summary["uneven_losses"] = got[0]
        summary["checks_after_uneven"] = dict(agree.stats)  # graphs differ, collectives agree: no error

        # 4. a model made to differ by rank: without the check the ranks would hang in the
        #    all-gather they disagree on; with it both raise at once, naming it
        torch.manual_seed(0)
        model = data_parallel(_RankModel(rank), mesh, param_dtype=torch.float32)
        compiled = torch.compile(model, backend="ext", options={"preset": "cpu"})
        before = agree.stats["seconds"]
        try:
            compiled(torch.randn(4, 8)).backward()
            summary["mismatch_error"] = None
        except Exception as e:  # noqa: BLE001 - the test reads type and text
            summary["mismatch_error"] = f"{type(e).__name__}: {e}"
        summary["mismatch_check_seconds"] = agree.stats["seconds"] - before
        dist.barrier()  # the process group still works: the check raised before any collective
    finally:
        (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(summary))
        dist.destroy_process_group()


class _RankModel(torch.nn.Module):
    """Two layers; the second is wider on rank 1 (a config read per rank, say)."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8 + 4 * rank)

    def forward(self, x):
        h = self.a(x)
        return self.b(h).sum()  # the line the check names


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gloo_ranks(tmp_path_factory):
    """What ``_dist_worker`` found on each of 2 gloo ranks (a hang fails instead of waiting)."""
    import time

    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("gloo")
    ctx = mp.start_processes(_dist_worker, args=(2, _free_port(), str(out)), nprocs=2, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + 400
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("the 2-rank gloo run did not finish in 400 s (a hang?)")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.dist
def test_two_gloo_ranks_match_single_process_reference(gloo_ranks):
    results = gloo_ranks
    assert results[0]["compiled_losses"] == results[1]["compiled_losses"]  # the all-reduced mean
    assert len(results[0]["compiled_losses"]) == STEPS
    assert results[0]["compiled_losses"][1] < results[0]["compiled_losses"][0]  # it trains


@pytest.mark.dist
def test_collective_check_names_the_first_differing_collective(gloo_ranks):
    """Rank 1's second layer is wider: both ranks raise within seconds (not a timeout), naming
    the first differing all-gather on each side, its FX node and the user's line."""
    import inspect

    line = next(i for i, text in enumerate(inspect.getsource(_RankModel).splitlines())
                if "the line the check names" in text) + inspect.getsourcelines(_RankModel)[1]
    for rank, r in enumerate(gloo_ranks):
        err = r["mismatch_error"]
        assert err is not None and err.startswith("CollectiveMismatchError"), err
        assert f"on group rank {rank}" in err and "collective #2 on this group" in err
        assert "rank 0: all_gather of float32[4, 8] -> [8, 8] over 2 ranks" in err
        assert "rank 1: all_gather of float32[6, 8] -> [12, 8] over 2 ranks" in err
        assert err.count(f"{__file__}:{line}: return self.b(h).sum()") == 2
        assert err.count("FX node all_gather_into_tensor_2") == 2
        assert r["mismatch_check_seconds"] < 30  # the mismatch path, not the 300 s timeout


@pytest.mark.dist
def test_collective_check_agrees_once_per_graph_and_annotates_the_flight_recorder(gloo_ranks):
    for r in gloo_ranks:
        # forward and backward of the fsdp_overlap model: one 16-byte all-gather each, once
        assert r["checks_after_mixed"]["checks"] == 2 and r["checks_after_mixed"]["collectives"] == 2
        assert r["checks_after_mixed"]["calls"] == 2 * STEPS
        # uneven shards: the graphs differ (pads), the collectives agree: checked, no error
        assert r["checks_after_uneven"]["checks"] == 4
        assert r["fr_check_entries"] == 2
        # every compiled collective of the 2 steps carries its node and the user's line
        assert len(r["fr_annotated"]) >= 2 * STEPS
        assert all(node.startswith(("all_gather_into_tensor", "reduce_scatter_tensor")) for node, _, _ in
                   r["fr_annotated"])
        # (the Llama and data_parallel live in ext, so the innermost line outside torch is ext's)
        assert all(re.match(r".*(llama|data_parallel)\.py:\d+: ", src) for _, src, _ in r["fr_annotated"])
        assert any(len(bucket) > 1 for _, _, bucket in r["fr_annotated"])  # fsdp_overlap's buckets


@pytest.mark.dist
def test_keep_gathered_prefetch_and_per_parameter_reduce_dtype_on_two_gloo_ranks(gloo_ranks):
    for r in gloo_ranks:
        assert r["keep_gathered_bitwise"]  # the same values in the same operations
        assert r["prefetch_bitwise"] and r["prefetch_used"] == [False] + [True] * (STEPS - 1)
        assert r["bf16_embedding_grad_differs"]  # the lossy option did change the embedding's gradient
        assert r["bf16_embedding_grad_others_bitwise"]  # ... and nothing else (first step)


def test_keep_gathered_prefetch_and_reduce_dtypes_change_the_graphs(world):
    """The front-end options the report measures: the kept parameters are not gathered again in the
    backward (their full values are saved instead); a prefetched embedding is waited for, not
    gathered, in the forward; the embedding's reduce-scatter runs in bf16."""
    cfg = LlamaConfig.tiny(1)
    kept = _trace(world, cfg, fp32_params=["*norm*"], keep_gathered=["output.*", "norm.*"])
    n_params = 2 + 9 + 1
    assert len(_colls(kept["backward"], "all_gather")) == n_params - 1 - 2  # not embedding, output, norm
    saved = {tuple(n.meta["val"].shape) for n in kept["backward"].graph.nodes if n.op == "placeholder"}
    assert (cfg.vocab, cfg.dim) in saved  # the gathered head comes from the forward
    # the embedding gathered behind the previous optimizer step: the forward waits for an input
    from torch._subclasses.fake_tensor import FakeTensorMode

    from inductor_ext.comms_passes.fsdp.data_parallel import NextStepGather

    inflight_flag = torch._C._distributed_c10d._allow_inflight_collective_as_graph_input
    flag_before = inflight_flag()
    with FakeTensorMode():
        model = data_parallel(Llama(cfg), world, fp32_params=["*norm*"])
        prefetch = NextStepGather(model, ["tok_embeddings.*"])
        prefetch()
        assert inflight_flag()  # the compiled forward may take the in-flight gather as an input
        tokens = torch.randint(0, cfg.vocab, (2, cfg.seq))
        captured = capture_graphs(model, (tokens, tokens))
        prefetch.close()
    assert inflight_flag() == flag_before  # a process-wide flag: close() gives it back
    pre = {c.kind: post_grad(c, {}) for c in captured}
    assert len(_colls(pre["forward"], "all_gather")) == n_params - 1
    waited = [n.args[0] for n in pre["forward"].graph.nodes if is_wait(n) and n.args[0].op == "placeholder"]
    assert [tuple(p.meta["val"].shape) for p in waited] == [(cfg.vocab, cfg.dim)]
    assert len(_colls(pre["backward"], "reduce_scatter")) == n_params  # its gradient still goes home
    with pytest.raises(ValueError, match="no data_parallel parameter matches"):
        NextStepGather(model, ["nothing.*"])
    lossy = _trace(world, cfg, reduce_dtypes={"tok_embeddings.*": torch.bfloat16})
    dtypes = [c.args[0].meta["val"].dtype for c in _colls(lossy["backward"], "reduce_scatter")]
    assert dtypes.count(torch.bfloat16) == 1 and dtypes.count(torch.float32) == n_params - 1
    with pytest.raises(ValueError, match="keep_gathered"):
        data_parallel(Llama(cfg), world, keep_gathered=-1)
    with pytest.raises(TypeError, match="reduce_dtypes"):
        data_parallel(Llama(cfg), world, reduce_dtypes={"*": "bf16"})
    # a byte budget keeps the last-registered parameters that fit: the head (bf16) and the norm
    model = data_parallel(Llama(cfg), world, fp32_params=["*norm*"], keep_gathered=cfg.vocab * cfg.dim * 2 + cfg.dim * 4)
    kept_names = {n for n, m in model.named_modules() for k, pl in getattr(m, "parametrizations", {}).items()
                  if not pl[0].reshard_after_forward}
    assert kept_names == {"output", "norm"}
