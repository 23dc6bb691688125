"""Run by test_cache_keys.py with TRITON_INTERPRET=1: a winner cached through the real lowering
path is found again, and is not found once the template's source hash changes (an edit) or on
another host CPU."""

import dataclasses
import json
import sys
from pathlib import Path

import torch

from inductor_ext import tune
from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.lowering import decision_record, template_keys
from inductor_ext.templates.triton import gemm


def compile_once(options: dict) -> list[dict]:
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(24, 16), torch.randn(8, 24)
    with tune.fresh_inductor_caches(), torch.no_grad():  # lowering runs every time
        got = torch.compile(layer, backend="ext", options=options)(x)
    assert (got - layer(x)).abs().max().item() < 1e-4
    return [{"winner": d.winner, "served": served(d), "reason": d.reason, "key": d.key.digest() if d.key else None}
            for d in decision_record.decisions[first:]]


def served(decision) -> list:
    """What the winner is, apart from its generated name (a Triton choice's name counts the
    choices made in the process so far): its family and config, or ATen's op."""
    winner = next((c for c in decision.candidates if c["name"] == decision.winner), None)
    if winner is None or winner["kind"] != "template":
        return ["aten", decision.winner]
    return [winner["family"], winner["config_dict"]]


if __name__ == "__main__":
    cache = str(Path(sys.argv[1]) / "autotune.db")
    base = {"preset": "hopper", "interpret": True, "templates": ["triton.gemm"], "autotune_cache": cache}
    first = len(decision_record.decisions)
    results = {"tuned": compile_once({**base, "autotune": "quick"}),
               "reused": compile_once({**base, "autotune": "cache-only"})}
    # ATen usually wins this small GEMM: a cache naming one of the timed Triton configs instead
    # (as a build on another machine may) is served as that config, through the same path.
    decision = decision_record.decisions[first]
    template = next(c for c in decision.candidates if c["kind"] == "template")
    with AutotuneCache(cache) as entries:
        (entry,) = entries.entries()
        entries.put(dataclasses.replace(entry, winner=template["family"], config=template["config_dict"]))
    results["template_cached"] = [template["family"], template["config_dict"]]
    results["template_reused"] = compile_once({**base, "autotune": "cache-only"})
    # Another CPU (here another thread count, a part of the host's name in the key): not a reuse.
    threads = torch.get_num_threads()
    torch.set_num_threads(2 if threads == 1 else 1)
    results["other_host"] = compile_once({**base, "autotune": "cache-only"})
    torch.set_num_threads(threads)
    # Edit-equivalent: the template module's source hash changes, nothing else does.
    original = template_keys.module_source_hash
    template_keys.module_source_hash = lambda m: "edited" + original(m) if m is gemm else original(m)
    results["edited"] = compile_once({**base, "autotune": "cache-only"})
    results["edited_tuned"] = compile_once({**base, "autotune": "quick"})
    print(json.dumps(results))
