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

from inductor_ext.comms_passes import fsdp_overlap  # noqa: E402
from inductor_ext.comms_passes.cost_model import collective_info  # noqa: E402
from inductor_ext.comms_passes.report import fake_world  # noqa: E402

import test_comms  # noqa: E402

# Small buckets and a budget relative to the peak: the settings under which two gloo ranks
# once issued different collectives.
SETTINGS = dict(bucket_cap_bytes=6 << 10, memory_budget_ratio=1.0, default_world_size=2)


def collectives(rank: int) -> dict:
    out = {}
    with fake_world(2, rank) as mesh:
        graphs = test_comms._trace(mesh, test_comms.UNEVEN_CFG, fp32_params=["*norm*"])
        for kind, gm in graphs.items():
            after, plan = test_comms._run_pass(gm, **SETTINGS)
            out[kind] = {"collectives": [[i.kind, i.nbytes] for n in after.graph.nodes
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
