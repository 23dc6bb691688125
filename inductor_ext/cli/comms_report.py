"""Cost-model report: ext's ``fsdp_overlap`` against Inductor 2.15's own bucketing and overlap passes.

The ``inductor-ext comms report`` command. Cost-model figures for a GPU datasheet on the fake process group (``FakeStore``, world 8), not
measurements: the arms and how each is run and evaluated are ``comms_passes/schedule_comparison.py``.

The default model has 2 layers (Llama-3.2-1B widths, 128K vocabulary; under 3 minutes on 2
cores, a progress bar per arm on stderr): every front end is traced once in this process, then
the arms run in 2 forked workers. ``--layers N`` or ``--full`` (16 layers) for deeper models.
``--trace FILE`` writes every arm's timeline as a Chrome/Perfetto trace.

This module is the command only: its arguments, the options the harness runs with (the ``cpu``
preset's) and the table it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Sequence

from inductor_ext import presets, tables
from inductor_ext.comms_passes.cost_model import GPUS
from inductor_ext.comms_passes.schedule_comparison import VARIANTS, compare_schedules

__all__ = ["run_report", "format_table", "build_parser", "main"]


def run_report(**kwargs: Any) -> dict[str, Any]:
    """The report's figures (``compare_schedules``' keyword arguments), ext's pass under the
    ``cpu`` preset's options."""
    return compare_schedules(presets.resolve({"preset": "cpu"}), **kwargs)


def format_table(report: dict[str, Any]) -> str:
    m = report["model"]
    lines = [f"# {report['note']}",
             f"# model: Llama-style, {m['params'] / 1e9:.2f}B params, {m['layers']} layers, vocab {m['vocab']}, "
             f"{m['tokens_per_rank']} tokens/rank, bf16 compute, fp32 {m['fp32_params'] or 'none'}, fp32 reduce; "
             f"graphs: {', '.join(report['graphs'])}; traced in {report['trace_s']:.1f}s"]
    rows = []
    for name, r in report["arms"].items():
        fx = r.get("fx_level", r)
        rows.append((name, f"{r['exposed_comm_ms']:.3f}", f"{r['makespan_ms']:.3f}", r["collectives"],
                     r["by_kind"].get("all_gather", 0), r["by_kind"].get("reduce_scatter", 0),
                     f"{r['peak_in_flight_bytes'] / 2**20:.1f}", f"{r['peak_memory_bytes'] / 2**30:.3f}",
                     f"{fx['exposed_comm_ms']:.3f}", "" if fx["valid"] else f"INVALID: {fx['invalid_reason']}"))
    numbers = ("exposed ms", "makespan ms", "colls", "AG", "RS", "in-flight MB", "peak mem GB", "fx exposed")
    lines.append(tables.render(("arm", *numbers, "note"), rows, right=numbers))
    if report.get("unhideable_comm_ms") is not None:
        lines.append(f"unhideable communication (first gather + last reduce-scatter, any schedule): "
                     f"{report['unhideable_comm_ms']:.3f} ms")
    if "ratios_ext_over_best" in report:
        r = report["ratios_ext_over_best"]
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        lines.append(f"ext / best valid 2.15 arm ({report['best_2_15_arm']}): exposed {fmt(r['exposed_comm'])}, "
                     f"makespan {fmt(r['makespan'])}, collectives {fmt(r['collectives'])}, "
                     f"in-flight {fmt(r['peak_in_flight'])}, peak memory {fmt(r['peak_memory'])}")
        lines.append(f"target ({report['target']}): {'MET' if report['target_met'] else 'NOT MET'}")
        if not report["target_reachable"]:
            lines.append(f"  unreachable on these graphs: 0.9x is {report['target_exposed_ms']:.3f} ms, below the "
                         f"{report['unhideable_comm_ms']:.3f} ms no schedule hides (e.g. the embedding's "
                         "gather and gradient reduce-scatter at large vocab)")
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    for name, e in report.get("ext_arms", {}).items():
        r = e["vs_best_2_15"]
        line = f"{name} / {report['best_2_15_arm']}: exposed {fmt(r['exposed_comm'])}, peak memory {fmt(r['peak_memory'])}"
        if "vs_best_2_15_on_same_graphs" in e:
            same = e["vs_best_2_15_on_same_graphs"]
            line += (f"; / {e['same_graphs_best_2_15_arm']}: exposed {fmt(same['exposed_comm'])}, "
                     f"peak memory {fmt(same['peak_memory'])}")
        if "executed_over_planned" in e:
            line += f"; executed / planned exposure {fmt(e['executed_over_planned'])}"
        lines.append(line + (f"  [LOSSY: {e['lossy']}]" if e.get("lossy") else ""))
    t = report.get("targets")
    if t:
        lines.append(f"targets ({t['statement']}): {'MET by ' + ', '.join(t['met_by']) if t['met'] else 'NOT MET'}"
                     + (f"; with a lossy option: {', '.join(t['met_with_lossy_option'])}"
                        if t["met_with_lossy_option"] else ""))
        if "planned_equals_executed" in t:
            pe = t["planned_equals_executed"]
            lines.append(f"planned = executed (within {pe['tolerance']:.0%}): {'MET' if pe['met'] else 'NOT MET'}")
    return "\n".join(lines)


# The default report: Llama-3.2-1B widths and the 128K vocabulary the targets are about, with
# 2 layers so that it runs in under 3 minutes on 2 cores; --full traces the 16-layer model
# (--layers N anything between).
DEFAULT_LAYERS = 2
FULL_LAYERS = 16


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="inductor-ext comms report", description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=None,
                   help=f"transformer blocks (default {DEFAULT_LAYERS}; --full: {FULL_LAYERS})")
    p.add_argument("--full", action="store_true", help=f"the {FULL_LAYERS}-layer model (1.5B parameters; "
                   "about 8x the time of the default)")
    p.add_argument("--dim", type=int, default=2048, help="model width (default %(default)s)")
    p.add_argument("--ffn", type=int, default=8192, help="MLP hidden width (default %(default)s)")
    p.add_argument("--heads", type=int, default=32, help="attention heads (default %(default)s)")
    p.add_argument("--kv-heads", type=int, default=8, help="key/value heads (default %(default)s)")
    p.add_argument("--vocab", type=int, default=128256, help="vocabulary size (default %(default)s)")
    p.add_argument("--seq", type=int, default=2048, help="tokens per sequence (default %(default)s)")
    p.add_argument("--batch", type=int, default=2, help="sequences per rank")
    p.add_argument("--world", type=int, default=8, help="ranks of the fake process group (default %(default)s)")
    p.add_argument("--gpu", default="H100", choices=sorted(GPUS), help="datasheet the cost model uses (default %(default)s)")
    p.add_argument("--no-fp32-norms", action="store_true", help="gather norm weights in bf16 too")
    p.add_argument("--arms", nargs="*", help="only these arms (untouched always runs)")
    p.add_argument("--variants", nargs="*", choices=sorted(VARIANTS), default=None,
                   help="front-end options measured as ext arms of their own (default: all)")
    p.add_argument("--fx-only", action="store_true",
                   help="evaluate post-grad FX orders only, without lowering through Inductor's scheduler")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                   help="processes running arms side by side (default: up to 2)")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of every arm (compute and "
                   "communication streams, live memory as a counter)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from inductor_ext.comms_passes.chrome_trace import ChromeTrace

    args = build_parser().parse_args(argv)
    layers = args.layers if args.layers is not None else (FULL_LAYERS if args.full else DEFAULT_LAYERS)
    trace = ChromeTrace(source="inductor-ext comms report", note="cost-model timelines, not measurements") \
        if args.trace else None
    t0, cpu0 = time.perf_counter(), time.process_time()
    report = run_report(layers=layers, dim=args.dim, ffn=args.ffn, heads=args.heads, kv_heads=args.kv_heads,
                        vocab=args.vocab, seq=args.seq, batch=args.batch, world=args.world, gpu=args.gpu,
                        fp32_norms=not args.no_fp32_norms, only=args.arms, scheduler=not args.fx_only,
                        variants=args.variants, trace=trace, workers=args.workers)
    report["seconds"] = {"wall": round(time.perf_counter() - t0, 1), "cpu": round(time.process_time() - cpu0, 1)}
    if trace is not None:
        trace.write(args.trace)
        report["trace"] = args.trace
    print(json.dumps(report, default=str) if args.json else format_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
