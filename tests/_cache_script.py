"""Run in a fresh process by test_passes.py: compile with an ext pass installed, report cache counters."""

import json
import sys

import torch
from torch._dynamo.utils import counters

from inductor_ext.lowering.passes import base as pass_base
from inductor_ext.lowering.passes import register_pass


@register_pass
class DoubleNegation(pass_base.ExtGraphPass):
    """Removes neg(neg(x)): a real rewrite, small enough to check by eye."""

    name = "test_double_negation"
    stage = "post_grad_pre"

    def run(self, graph: torch.fx.Graph) -> int:
        neg = torch.ops.aten.neg.default
        rewrites = 0
        for node in list(graph.nodes):
            if node.target is neg and isinstance(node.args[0], torch.fx.Node) and node.args[0].target is neg:
                node.replace_all_uses_with(node.args[0].args[0])
                graph.erase_node(node)
                rewrites += 1
        graph.eliminate_dead_code()
        return rewrites


def model(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(-(-x)) * 3


if __name__ == "__main__":
    options = {"passes": ["test_double_negation"], **json.loads(sys.argv[1])}
    x = torch.randn(8, 16)
    out = torch.compile(model, backend="ext", options=options)(x)
    print(json.dumps({
        "ok": bool(torch.equal(out, model(x))),
        "hits": counters["inductor"]["fxgraph_cache_hit"],
        "misses": counters["inductor"]["fxgraph_cache_miss"],
        "applied": pass_base.applied,
    }))
