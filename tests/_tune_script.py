"""Run by test_autotune_integration.py with TRITON_INTERPRET=1: offline build, then cache-only compiles
(the hopper preset in interpret mode: its sm_90a Triton kernels run in Triton's interpreter)."""

import copy
import dataclasses
import json
import sys
from pathlib import Path

import torch
from torch._dynamo.utils import counters

from inductor_ext import tune
from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.lowering import decision_record


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(40, 24)
        self.down = torch.nn.Linear(24, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return MLP()


def inputs() -> tuple[torch.Tensor]:
    torch.manual_seed(1)
    return (torch.randn(12, 40),)


def compile_once(options: dict) -> dict:
    torch._dynamo.reset()
    counters.clear()
    first = len(decision_record.decisions)
    m, (x,) = model(), inputs()
    with tune.fresh_inductor_caches(), torch.no_grad():
        got = torch.compile(copy.deepcopy(m), backend="ext", options=options)(x)
    return {
        "max_err": (got - m(x)).abs().max().item(),
        "benchmarks": counters["inductor"]["select_algorithm_autotune"],
        "decisions": [{"op": d.op, "winner": d.winner, "reason": d.reason} for d in decision_record.decisions[first:]],
    }


if __name__ == "__main__":
    out = Path(sys.argv[1])
    built = tune.build("_tune_script:model", out / "built.db",
                       inputs_spec="_tune_script:inputs", preset="hopper", interpret=True, progress=False)
    results = {"built": [{"problem": e.key.describe(), "winner": e.winner, "reason": e.reason,
                          "timed": sum(c["time_us"] is not None for c in e.candidates)} for e in built.entries()]}
    base = {"preset": "hopper", "interpret": True, "autotune": "cache-only"}
    results["cached"] = compile_once({**base, "autotune_cache": str(out / "built.db")})
    results["empty"] = compile_once({**base, "autotune_cache": str(out / "empty.db")})
    # A cache whose winners are the template (as a GPU build would record): used with no benchmarks.
    forced = AutotuneCache(out / "template.db")
    for e in built.entries():
        forced.put(dataclasses.replace(e, winner="triton.gemm", config={
            "block_m": 32, "block_n": 32, "block_k": 32, "group_m": 8, "num_warps": 4, "num_stages": 1}))
    results["template"] = compile_once({**base, "autotune_cache": str(out / "template.db"),
                                        "dump_dir": str(out / "dump")})
    print(json.dumps(results))
