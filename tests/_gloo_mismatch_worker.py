"""Run on 2 gloo ranks by test_collective_check.py (``tests/_gloo_ranks.py`` spawns them): each case
is a pair of hand-made collective descriptions, rank 0's and rank 1's, put through the collective
check's run-time side (``agree.verify``); each rank writes what it raised per case. A module of its
own so that a spawned rank imports little more than torch.distributed and the check.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import time
from pathlib import Path

import torch.distributed as dist

from inductor_ext.comms_passes.collective_check import agree
from inductor_ext.comms_passes.collective_check.fingerprint import Collective, GraphCollectives

# rank 1's second collective (the reduce-scatter) differs from rank 0's in this field only. In a
# real graph the kind follows from the op and the group size from the group; the rest (a bf16
# reduce-scatter against an fp32 one, another shape, another reduce op) are the mismatches that
# would hang the ranks or exchange wrong data undetected.
FIELD_CHANGES = {
    "kind": "all_reduce",
    "op": "reduce_scatter_tensor_coalesced.default",
    "group_size": 4,
    "dtypes": ("bfloat16",),
    "in_shapes": ("[10, 8]",),
    "out_shapes": ("[5, 8]",),
    "extra": "reduce_op=avg",
}


def _sequences(world: str, other: str) -> dict[str, tuple[list[Collective], list[Collective]]]:
    """case -> (rank 0's collectives, rank 1's)."""
    ag = Collective("all_gather", "all_gather_into_tensor.default", world, 2, ("float32",), ("[4, 8]",),
                    ("[8, 8]",), "", node="all_gather_into_tensor", source="model.py:7: h = self.a(x)")
    rs = Collective("reduce_scatter", "reduce_scatter_tensor.default", world, 2, ("float32",), ("[8, 8]",),
                    ("[4, 8]",), "reduce_op=sum", node="reduce_scatter_tensor", source="model.py:8: y = self.b(h)")
    ar = Collective("all_reduce", "all_reduce.default", world, 2, ("float32",), ("[]",), ("[]",), "reduce_op=sum",
                    node="all_reduce", source="model.py:9: return y.sum()")
    base = [ag, rs, ar]
    cases = {f: (base, [ag, dataclasses.replace(rs, **{f: v}), ar]) for f, v in FIELD_CHANGES.items()}
    cases["order"] = (base, [rs, ag, ar])
    cases["count"] = (base, [ag, rs])
    cases["group"] = (base, [ag, dataclasses.replace(rs, group=other), ar])  # the same op on another group
    cases["agree"] = (base, list(base))
    return cases


def mismatch_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    faulthandler.enable()  # a native crash prints each thread's Python stack to the log
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results: dict = {}
    try:
        other = dist.new_group([0, 1])
        names = (dist.group.WORLD.group_name, other.group_name)
        # both ranks check the group they share first (groups are checked in sorted order)
        results["groups_sorted"] = names[0] < names[1]
        for case, sequences in _sequences(*names).items():
            spec = GraphCollectives(f"graph of case {case}", tuple(sequences[rank])).to_json()
            t0 = time.perf_counter()
            try:
                agree.verify(spec, timeout_s=20)
                error = None
            except Exception as e:  # noqa: BLE001 - the test reads type and text
                error = f"{type(e).__name__}: {e}"
            results[case] = {"error": error, "seconds": time.perf_counter() - t0}
    finally:
        (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(results))
        dist.destroy_process_group()
