"""Run by test_extern_adapter.py: a Linear compiled with backend="ext" whose GEMM is served by
a minimal extern family through the generic extern adapter, on CPU."""

import json
import sys
import types

import torch
from torch._inductor.utils import run_and_get_code

import _fake_extern_family as fake
from inductor_ext.lowering import decision_record
from inductor_ext.templates import registry

families = dict(registry.families())
families[fake.NAME] = fake.FAMILY
registry.families = lambda: families  # the family is found as if it were a file in templates/


def main() -> dict:
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(24, 16), torch.randn(8, 24)
    options = {"templates": ["fake.mm"], "autotune": "quick", "force_template": "fake.mm",
               "autotune_cache": sys.argv[1], "inductor": {"fx_graph_cache": False}}
    first = len(decision_record.decisions)
    with torch.no_grad():
        got, codes = run_and_get_code(torch.compile(layer, backend="ext", options=options), x)
        want = layer(x)
    decisions = [{"op": d.op, "winner": d.winner, "reason": d.reason, "candidates": [c["name"] for c in d.candidates]}
                 for d in decision_record.decisions[first:]]
    calls = len(fake.calls)
    return {"max_err": (got - want).abs().max().item(), "code": "\n".join(codes), "decisions": decisions,
            "calls": calls, "grouped": _grouped(options)}


def _grouped(options: dict) -> dict:
    """aten._grouped_mm (MoE experts) through ext's grouped_mm lowering and the same family."""
    torch._dynamo.reset()
    a, b = torch.randn(6, 16, dtype=torch.bfloat16), torch.randn(3, 16, 32, dtype=torch.bfloat16)
    offs = torch.tensor([1, 4, 6], dtype=torch.int32)
    first = len(decision_record.decisions)
    fn = torch.compile(lambda a, b, o: torch._grouped_mm(a, b, offs=o), backend="ext", options=options)
    got, codes = run_and_get_code(fn, a, b, offs)
    (d,) = decision_record.decisions[first:]
    return {"exact": torch.equal(got, torch._grouped_mm(a, b, offs=offs)), "op": d.op, "winner": d.winner,
            "candidates": [c["name"] for c in d.candidates], "called": f"extern_kernels.{d.winner}(" in "\n".join(codes)}


if __name__ == "__main__":
    print(json.dumps(main()))
