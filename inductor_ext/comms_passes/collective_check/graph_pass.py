"""``collective_check``: put the collective check at the top of every graph that holds collectives.

A post-grad pass (stage ``post_grad_post``, after ext's other passes there, e.g. fsdp_overlap's
bucketing, so it describes what is issued). It describes the graph's collectives (kind, group,
dtypes, sizes, order, with FX node and user source line; ``fingerprint.py``), inserts
``inductor_ext::collective_check(spec, device)`` right after the graph inputs, and orders the
first collective of each process group after it with 2.15's ``control_deps`` (the scheduler's
``simple_overlap`` would otherwise move a collective above an op it has no data dependency on).
The description is the op's argument, so it lives in the compiled code and FX-graph-cache hits
keep it. What runs at the first call is ``agree.py``.

On by default when ``torch.distributed`` is initialised (the pass is ``default_on``); off with
``options={"collective_check": False}``; ``{"timeout_s": 60}`` sets how long a rank waits for the
others. Limits: 2.15's own FX bucketing and overlap scheduling run after every custom post-grad
pass, so with those options on, what they change is not in the description (their decisions
depend on the graph, which the check compares only in its collectives).
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

import torch
import torch.fx as fx

from inductor_ext.comms_passes.collective_check import agree
from inductor_ext.comms_passes.collective_check.fingerprint import describe_graph
from inductor_ext.config import ExtConfig, ExtOptionError, OptionSpec, register_option
from inductor_ext.lowering.passes.base import ExtGraphPass

OPTION = "collective_check"


def _check_option(key: str, value: Any) -> bool | dict[str, float]:
    if isinstance(value, bool):
        return value
    if isinstance(value, dict) and set(value) <= {"timeout_s"} and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in value.values()):
        return {k: float(v) for k, v in value.items()}
    raise ExtOptionError(f"options[{key!r}] = {value!r}: expected True, False or {{'timeout_s': seconds > 0}}")


register_option(OPTION, OptionSpec("at the first call of a compiled graph, ranks agree on its collectives "
                                   "(a mismatch raises instead of hanging); on when torch.distributed is "
                                   "initialised; False turns it off, {'timeout_s': 60} sets the wait",
                                   _check_option))


def _distributed() -> bool:
    d = torch.distributed
    return d.is_available() and d.is_initialized()


def _label(graph: fx.Graph) -> str:
    from torch._guards import CompileContext

    names = [n.name for n in graph.nodes if n.op == "placeholder"]
    kind = "backward " if any(n.startswith("tangents") for n in names) else (
        "forward " if any(n.startswith("primals") for n in names) else "")
    cid = CompileContext.current_compile_id()
    return f"compiled {kind}graph" + (f" [{cid}]" if cid is not None else "")


def _fake_mode(graph: fx.Graph) -> Any:
    for n in graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and hasattr(v, "fake_mode"):
            return v.fake_mode
    return None


def _device(first: fx.Node) -> torch.device:
    v = first.meta.get("val")
    v = v[0] if isinstance(v, (list, tuple)) and v else v
    return v.device if isinstance(v, torch.Tensor) else torch.device("cpu")


def insert_check(graph: fx.Graph, label: str = "", timeout_s: float = agree.DEFAULT_TIMEOUT_S) -> fx.Node | None:
    """Insert the check op at the top of ``graph`` and order each group's first collective after
    it; returns the op's node, or None when the graph has no collective."""
    from torch._inductor.fx_passes.control_dependencies import preserve_node_ordering
    from torch.utils._ordered_set import OrderedSet

    nodes = list(graph.nodes)
    desc = describe_graph(nodes, label or _label(graph))
    if not desc.collectives:
        return None
    by_name = {n.name: n for n in nodes}
    firsts = [by_name[desc.on(g)[0].node] for g in desc.groups()]
    device = _device(firsts[0])
    last_input = [n for n in nodes if n.op == "placeholder"]
    anchor = last_input[-1].next if last_input else nodes[0]
    with graph.inserting_before(anchor):
        token = graph.call_function(torch.ops.inductor_ext.collective_check.default, (desc.to_json(), device, float(timeout_s)))
    mode = _fake_mode(graph)
    with (mode if mode is not None else torch._subclasses.fake_tensor.FakeTensorMode()):
        token.meta["val"] = torch.empty(0, dtype=torch.uint8, device=device)
    control_deps = torch.ops.higher_order.control_deps
    pinned = [f for f in firsts if f.target is control_deps]  # already ordered (fsdp_overlap): one more dep
    for f in pinned:
        f.args = ((*f.args[0], token), *f.args[1:])
    preserve_node_ordering(graph, {f: OrderedSet([token]) for f in firsts if f not in pinned})
    return token


class CollectiveCheckPass(ExtGraphPass):
    name = "collective_check"
    stage = "post_grad_post"
    default_on: ClassVar[bool] = True

    @classmethod
    def enabled(cls, config: ExtConfig) -> bool:
        return config.plugin_options.get(OPTION, True) is not False and _distributed()

    def __init__(self, config: ExtConfig) -> None:
        super().__init__(config)
        value = config.plugin_options.get(OPTION, True)
        self.timeout_s = value.get("timeout_s", agree.DEFAULT_TIMEOUT_S) if isinstance(value, dict) \
            else agree.DEFAULT_TIMEOUT_S

    def uuid(self) -> str:
        # what runs at run time (the op's code) is part of what this pass produces
        import inspect

        return hashlib.sha256((super().uuid() + inspect.getsource(agree)).encode()).hexdigest()

    def run(self, graph: fx.Graph) -> int:
        if not self.enabled(self.config):
            return 0
        return int(insert_check(graph, timeout_s=self.timeout_s) is not None)
