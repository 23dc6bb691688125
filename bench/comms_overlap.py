"""Compile-time FSDP overlap: ext's ``fsdp_overlap`` against Inductor 2.15's own passes.

COST-MODEL FIGURES, NOT MEASUREMENTS. One process, no GPU: a >= 1B-parameter Llama-style model is
wrapped with ``data_parallel`` (SimpleFSDP style, bf16 compute, fp32 norms, fp32 reduce-scatters)
on the fake process group (world 8) and traced under FakeTensorMode. Every arm runs Inductor's
real post-grad passes on its own copy of the forward and backward graphs, and one analytical cost
model (alpha-beta ring collectives, per-node roofline on a GPU datasheet) evaluates them all:
exposed communication, makespan, collectives, peak bytes in flight, estimated peak memory, and
ext / best valid 2.15 arm. Target: exposed comm <= 0.9x at no more estimated peak memory.

    python bench/comms_overlap.py                      # 8 layers, 128K vocabulary (1.01B), H100
    python bench/comms_overlap.py --config 16l-128k    # Llama-3.2-1B depth, untied head (1.50B)
    python bench/comms_overlap.py --config all --json  # every configuration, one JSON object

On 2 CPU cores: ~6 minutes for 8 layers, ~15 for 16 (most of it in Inductor's own
``reorder_for_compute_comm_overlap`` passes, quadratic in the graph size).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inductor_ext.comms_passes.cost_model import GPUS  # noqa: E402
from inductor_ext.cli.comms_report import format_table, run_report  # noqa: E402

# Llama 3.2 1B widths (dim 2048, GQA 32/8 heads, SwiGLU 8192) with an untied output head.
# The first and last collectives of a step are the embedding's, so the vocabulary sets how much
# communication no schedule can hide; the layer count sets how much compute there is to hide under.
CONFIGS = {
    "8l-128k": dict(layers=8, dim=2048, ffn=8192, heads=32, kv_heads=8, vocab=128256, seq=2048, batch=2),  # 1.01B
    "16l-128k": dict(layers=16, dim=2048, ffn=8192, heads=32, kv_heads=8, vocab=128256, seq=2048, batch=2),  # 1.50B
    "16l-32k": dict(layers=16, dim=2048, ffn=8192, heads=32, kv_heads=8, vocab=32000, seq=2048, batch=2),  # 1.10B
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="8l-128k", choices=[*CONFIGS, "all"])
    p.add_argument("--gpu", default="H100", choices=sorted(GPUS))
    p.add_argument("--world", type=int, default=8)
    p.add_argument("--layers", type=int, help="override the configuration's layer count")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    names = list(CONFIGS) if args.config == "all" else [args.config]
    reports = {}
    for name in names:
        cfg = dict(CONFIGS[name])
        if args.layers:
            cfg["layers"] = args.layers
        reports[name] = run_report(**cfg, world=args.world, gpu=args.gpu)
        if not args.json:
            print(f"== {name}")
            print(format_table(reports[name]), flush=True)
    if args.json:
        out = reports[names[0]] if len(names) == 1 else {"configs": reports}
        print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
