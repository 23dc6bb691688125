"""The graphs Inductor would lower, captured on one CPU process: the fake process group
(``fake_world``), ``capture_graphs`` (forward and backward as Inductor's inner compile receives
them), Inductor's post-grad passes on a copy (``post_grad``) and the kernel order its scheduler
would produce (``scheduled_order``, with the analytical cost model as its runtime estimate).

The comms report (``schedule_comparison.py``), the FSDP benches and tests/test_comms.py judge
communication schedules on these graphs with the cost model (``cost_model.py``).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn

from inductor_ext.comms_passes.cost_model import AnalyticalCostModel, collective_info, is_wait

__all__ = ["CapturedGraph", "fake_world", "capture_graphs", "strip_control_deps", "copy_graph_module", "post_grad",
           "inductor_estimator_for_scheduler", "scheduled_order"]


@dataclass
class CapturedGraph:
    """A forward or backward graph as Inductor's inner compile receives it (before post-grad)."""

    gm: torch.fx.GraphModule
    example_inputs: list[Any]
    is_backward: bool
    is_inference: bool
    fake_mode: Any = None

    @property
    def kind(self) -> str:
        return "backward" if self.is_backward else ("inference" if self.is_inference else "forward")


@contextlib.contextmanager
def fake_world(world_size: int = 8, rank: int = 0):
    """The fake process group (FakeStore) as the default group, with a 1-D DeviceMesh over it,
    seen from ``rank`` (its shards are the ones traced)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    elif dist.get_world_size() != world_size:
        raise RuntimeError(f"a process group of size {dist.get_world_size()} already exists; need {world_size}")
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        if created:
            dist.destroy_process_group()


def capture_graphs(model: nn.Module, inputs: Sequence[Any]) -> list[CapturedGraph]:
    """Compile ``model(*inputs)`` and return the graphs Inductor would lower, without lowering them.

    Runs ``compile_fx`` (joint graph passes, partitioner with the recompute tags) with an inner
    compile that records each graph after Inductor's own pre-steps (view_to_reshape, fake tensor
    propagation) and returns it uncompiled. The backward is captured eagerly.
    """
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor.compile_fx import compile_fx, fake_tensor_prop
    from torch._inductor.fx_passes.post_grad import view_to_reshape

    captured: list[CapturedGraph] = []

    def inner(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        runnable = copy.copy(gm)  # keep a callable for the fake run before we touch the graph
        view_to_reshape(gm)
        with torch.no_grad():
            fake_mode = fake_tensor_prop(gm, example_inputs)
        captured.append(CapturedGraph(gm, list(example_inputs), bool(kwargs.get("is_backward")),
                                      bool(kwargs.get("is_inference")), fake_mode))
        return make_boxed_func(runnable.forward)

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return compile_fx(gm, example_inputs, inner_compile=inner)

    torch._dynamo.reset()
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=True, enable_autograd_cache=False):
        compiled = torch.compile(model, backend=backend, fullgraph=True)
        compiled(*inputs)
    torch._dynamo.reset()
    return captured


def strip_control_deps(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` with every ``control_deps`` node replaced by the op it wraps, same order.

    Inductor's overlap scheduler pins its order with ``control_deps`` (``insert_overlap_deps``);
    they only add ordering edges, so the flat graph in the same order costs the same.
    """
    out = copy_graph_module(gm)
    graph = out.graph
    control_deps = getattr(torch.ops.higher_order, "control_deps", None)
    for node in list(graph.nodes):
        if control_deps is None or node.target is not control_deps:
            continue
        sub = getattr(out, node.args[1].target)
        inner = next(n for n in sub.graph.nodes if n.op == "call_function")
        env = dict(zip([p for p in sub.graph.nodes if p.op == "placeholder"], node.args[2:]))
        args = torch.fx.node.map_arg(inner.args, lambda a: env[a])
        kwargs = torch.fx.node.map_arg(inner.kwargs, lambda a: env[a])
        with graph.inserting_before(node):
            flat = graph.call_function(inner.target, args, kwargs)
        flat.meta = dict(node.meta)
        name = node.name
        node.replace_all_uses_with(flat)
        graph.erase_node(node)
        flat.name = name
    graph.eliminate_dead_code()
    out.recompile()
    return out


def copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


def post_grad(cap: CapturedGraph, patches: dict[str, Any]) -> torch.fx.GraphModule:
    """A copy of ``cap`` after Inductor's post-grad passes under ``patches``."""
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import _recursive_post_grad_passes
    from torch._inductor.virtualized import V

    gm = copy_graph_module(cap.gm)
    with inductor_config.patch(patches), V.set_fake_mode(cap.fake_mode):
        _recursive_post_grad_passes(gm, is_inference=cap.is_inference)
    return gm


def inductor_estimator_for_scheduler(model: AnalyticalCostModel) -> Callable[[Any], float]:
    """``config.estimate_op_runtime`` (ms per scheduler node) from the cost model.

    A scheduler node costs what its FX origins cost: a collective kernel its collective, a wait
    nothing, a (fused) kernel its compute nodes.
    """
    from torch._inductor import ir

    def estimate(snode: Any) -> float:
        total = 0.0
        for sub in snode.get_nodes():
            node = sub.node
            if node is None:
                continue
            coll = isinstance(node, ir._CollectiveKernel)
            for origin in node.origins:
                info = collective_info(origin, model.default_world_size)
                if info is not None:
                    total += model.collective_time(info.kind, info.nbytes, info.group_size) if coll else 0.0
                elif not is_wait(origin):
                    total += model.node_time(origin)
        return total * 1e3

    return estimate


def scheduled_order(cap: CapturedGraph, gm: torch.fx.GraphModule, patches: dict[str, Any],
                    model: AnalyticalCostModel) -> list[torch.fx.Node]:
    """The FX nodes of ``gm`` in the order Inductor's scheduler would run their kernels.

    Lowers ``gm`` (GraphLowering) and builds the Scheduler under ``patches``: fusion, then the
    scheduler-level passes (``simple_overlap``, on by default in 2.15, and
    ``reorder_for_compute_comm_overlap`` when enabled), with the cost model as their runtime
    estimate. Each FX node is placed at the first kernel it is an origin of (collectives at their
    collective kernel, waits at their wait kernel), after any input not placed yet.
    """
    from torch._inductor import config as inductor_config, ir
    from torch._inductor.debug import DebugContext
    from torch._inductor.graph import GraphLowering
    from torch._inductor.scheduler import Scheduler
    from torch._inductor.virtualized import V

    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    est = inductor_estimator_for_scheduler(model)
    with inductor_config.patch({**patches, "estimate_op_runtime": est}), V.set_fake_mode(cap.fake_mode):
        graph = GraphLowering(gm, example_inputs=cap.example_inputs, shape_env=None,
                              is_inference=cap.is_inference, is_backward=cap.is_backward)
        with V.set_graph_handler(graph), V.set_debug_handler(DebugContext()):
            graph.run(*cap.example_inputs)
            snodes = Scheduler(graph.operations).nodes
    order: list[torch.fx.Node] = []
    done: set[torch.fx.Node] = set()
    # FX nodes no kernel claims (views, out= copies folded into a kernel of another node) run as
    # soon as their inputs exist.
    claimed = {o for sn in snodes for sub in sn.get_nodes() if sub.node is not None for o in sub.node.origins}
    orphan = {n for n in nodes if n not in claimed and n.op == "call_function"}

    def emit(n: torch.fx.Node) -> None:
        stack = [(n, False)]
        while stack:
            x, inputs_done = stack.pop()
            if x in done:
                continue
            if inputs_done:
                done.add(x)
                order.append(x)
                stack.extend((u, False) for u in x.users if u in orphan and u not in done
                             and all(a in done for a in u.all_input_nodes))
                continue
            stack.append((x, True))
            stack.extend((a, False) for a in reversed(x.all_input_nodes) if a not in done)

    for n in nodes:
        if n.op == "placeholder":
            emit(n)
    for sn in snodes:
        for sub in sn.get_nodes():
            node = sub.node
            if node is None:
                continue
            kind = "coll" if isinstance(node, ir._CollectiveKernel) else "wait" if isinstance(node, ir._WaitKernel) else ""
            for origin in sorted((o for o in node.origins if o in pos), key=pos.__getitem__):
                if collective_info(origin) is not None and kind != "coll":
                    continue
                if is_wait(origin) and kind != "wait":
                    continue
                emit(origin)
    for n in nodes:
        emit(n)
    return order
