"""What the collective check costs: its one tiny collective per compiled graph, once, and the
per-call price of the op afterwards, next to the step it guards.

2 ranks (gloo on CPU by default; ``--backend nccl`` on a GPU machine), a data_parallel Llama
compiled with ``backend="ext"`` and the check on. Per rank: the seconds spent in the check at the
first call of each graph (the agreement: one ``world x 16``-byte all-gather per group and graph),
the collectives it issued, the op's time per call once verified (it returns at once) and the
step time with the check on and off (median of ``--steps`` steps after warm-up).

    python bench/collective_check.py [--json] [--steps 20] [--backend gloo|nccl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _worker(rank: int, world: int, init_file: str, out_dir: str, backend: str, steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from inductor_ext.models.llama import Llama, LlamaConfig
    from inductor_ext.comms_passes.collective_check import agree
    from inductor_ext.comms_passes.fsdp.data_parallel import data_parallel

    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    mesh = init_device_mesh(device.type, (world,))
    cfg = LlamaConfig(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=256, seq=64)
    tokens = torch.randint(0, cfg.vocab, (2, cfg.seq), device=device, generator=None)
    out: dict[str, Any] = {}
    models = {}
    for label, option in (("check on", True), ("check off", False)):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = data_parallel(Llama(cfg).to(device), mesh, param_dtype=torch.float32)
        compiled = torch.compile(model, backend="ext", options={"preset": "cpu" if device.type == "cpu" else "auto",
                                                                "collective_check": option})
        before = dict(agree.stats)
        t0 = time.perf_counter()
        compiled(tokens, tokens).backward()  # compile + first call (the check runs here)
        out[label] = {"first_call_s": round(time.perf_counter() - t0, 3),
                      "check": {k: agree.stats[k] - before[k] for k in agree.stats}}
        models[label] = compiled
    times: dict[str, list[float]] = {label: [] for label in models}
    for _ in range(steps):  # interleaved, so both see the same machine
        for label, compiled in models.items():
            dist.barrier()
            t1 = time.perf_counter()
            compiled(tokens, tokens).backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[label].append(time.perf_counter() - t1)
    for label, ts in times.items():
        out[label].update(step_ms_median=round(statistics.median(ts) * 1e3, 3),
                          step_ms_spread=[round(min(ts) * 1e3, 3), round(max(ts) * 1e3, 3)])
    # the op once its graph is verified: what every later call of a compiled graph pays
    spec = next(iter(agree._verified))
    op = torch.ops.inductor_ext.collective_check.default
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        op(spec, device, 300.0)
    out["op_us_per_call_after_first"] = round((time.perf_counter() - t0) / n * 1e6, 2)
    out["digest_bytes_per_rank"] = agree._DIGEST_BYTES
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    args = ap.parse_args()
    import torch.multiprocessing as mp

    world = 2
    with tempfile.TemporaryDirectory() as d:
        mp.start_processes(_worker, args=(world, os.path.join(d, "init"), d, args.backend, args.steps),
                           nprocs=world, join=True, start_method="spawn")
        ranks = [json.loads(Path(d, f"rank{r}.json").read_text()) for r in range(world)]
    on, off = ranks[0]["check on"], ranks[0]["check off"]
    report = {
        "backend": args.backend, "world": world, "ranks": ranks,
        "check_seconds_first_call": [r["check on"]["check"]["seconds"] for r in ranks],
        "check_collectives": [r["check on"]["check"]["collectives"] for r in ranks],
        "check_collectives_when_off": [r["check off"]["check"]["collectives"] for r in ranks],
        "op_us_per_call_after_first": [r["op_us_per_call_after_first"] for r in ranks],
        "step_ms_on_over_off": round(on["step_ms_median"] / off["step_ms_median"], 3),
        "note": "the check's seconds include waiting for the slower rank to reach it (compile skew); "
                "the step ratio is of medians, compare it with the spreads",
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"check at the first call: {report['check_seconds_first_call']} s per rank, "
              f"{report['check_collectives']} collectives (off: {report['check_collectives_when_off']})")
        print(f"the op after that: {report['op_us_per_call_after_first']} us per call")
        print(f"step: on {on['step_ms_median']} ms {on['step_ms_spread']}, off {off['step_ms_median']} ms "
              f"{off['step_ms_spread']} -> {report['step_ms_on_over_off']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
