"""Run by test_comms.py in a subprocess (it needs a fresh fake process group per rank): the
collectives fsdp_overlap issues on rank 0 and rank 1 of an unevenly sharded model.

Prints JSON: per arm ("invariant": the pass as shipped; "per-rank costs": its planning cost
model swapped for the rank's own), per rank, per graph, the (kind, bytes) sequence of collectives
after the pass and the plan's rewrites / uneven_shards.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from inductor_ext.comms_passes.fsdp import overlap as fsdp_overlap  # noqa: E402
from inductor_ext.comms_passes.cost_model import collective_info  # noqa: E402
from inductor_ext.comms_passes.capture import fake_world  # noqa: E402

import test_comms  # noqa: E402

# (data_parallel arguments, pass settings) per case:
# - "mixed": bf16 compute with fp32 norms, small buckets and a budget relative to the peak, the
#   settings under which two gloo ranks once issued different collectives;
# - "no casts": parameters gathered as they are (the shard itself is the gather input on ranks
#   with the longer shard, a pad on the others) at budgets where such plans once diverged.
CASES = {
    "mixed": (dict(fp32_params=["*norm*"]),
              [dict(bucket_cap_bytes=6 << 10, memory_budget_ratio=1.0, default_world_size=2)]),
    "no casts": (dict(param_dtype=None, reduce_dtype=None),
                 [dict(memory_budget_ratio=r, default_world_size=2) for r in (0.25, 0.45, 0.7)]),
}


def collectives(rank: int) -> dict:
    out = {}
    with fake_world(2, rank) as mesh:
        for case, (dp_kwargs, settings) in CASES.items():
            graphs = test_comms._trace(mesh, test_comms.UNEVEN_CFG, **dp_kwargs)
            for kind, gm in graphs.items():
                for k, setting in enumerate(settings):
                    after, plan = test_comms._run_pass(gm, **setting)
                    out[f"{case} {kind} {k}"] = {
                        "collectives": [[i.kind, i.nbytes] for n in after.graph.nodes
                                        if (i := collective_info(n)) is not None],
                        "rewrites": plan.rewrites, "uneven_shards": plan.uneven_shards}
    return out


def main() -> dict:
    result = {"invariant": {r: collectives(r) for r in (0, 1)}}
    fsdp_overlap._RankInvariantModel = lambda model, colls, placeholders=(): model
    result["per-rank costs"] = {r: collectives(r) for r in (0, 1)}
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
