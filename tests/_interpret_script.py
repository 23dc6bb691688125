"""Run by test_interpret_compile.py in a process started with TRITON_INTERPRET=1.

Compiles an MLP with backend="ext" in interpret mode of the hopper preset (ext's Triton GEMM
template as generated for sm_90a, run on CPU tensors in Triton's interpreter, autotuned against
ATen with margin 0), runs a training step, and prints what happened as JSON.
"""

import copy
import json
import sys

import torch

from inductor_ext import dumps
from inductor_ext.lowering import decision_record


class MLP(torch.nn.Module):
    # Odd sizes: K=70 and K=45 are not multiples of any BLOCK_K; N=33 is odd.
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(70, 45)
        self.down = torch.nn.Linear(45, 33, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return MLP()


def step(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = model(x)
    (out * out).sum().backward()
    return out.detach(), [p.grad for p in model.parameters()]


def run(options: dict) -> dict:
    first = len(decision_record.decisions)
    eager = mlp()
    compiled_model = copy.deepcopy(eager)
    x = torch.randn(37, 70)
    want, want_grads = step(eager, x)
    got, got_grads = step(torch.compile(compiled_model, backend="ext", options=options), x)
    index = dumps.read_index(options["dump_dir"])
    return {
        "max_err": (got - want).abs().max().item(),
        "max_grad_err": max((g - w).abs().max().item() for g, w in zip(got_grads, want_grads)),
        "decisions": [{"node": d.node, "op": d.op, "winner": d.winner, "reason": d.reason,
                       "candidates": d.candidates} for d in decision_record.decisions[first:]],
        "kernels": [{"kernel": k["kernel"], "template": k["template"], "graph": k["graph"],
                     "fx_nodes": k["fx_nodes"], "user_source": k["user_source"], "file": k["file"],
                     "config": k["config"]} for k in index["kernels"]],
    }


if __name__ == "__main__":
    out_dir = sys.argv[1]
    base = {"preset": "hopper", "interpret": True, "autotune": "quick", "template_margin": 0.0}
    results = {
        "forced": run({**base, "force_template": "triton.gemm", "dump_dir": f"{out_dir}/forced"}),
        "benchmarked": run({**base, "dump_dir": f"{out_dir}/benchmarked"}),
    }
    print(json.dumps(results))
