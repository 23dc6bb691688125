"""Timing two or more arms side by side in one run, for the bench scripts that compare kernels
(``cpp_cache_blocking.py``, ``cpu_decode_attention.py``): calls rotate over the arms round by
round, so load from elsewhere hits every arm alike, and a ratio comes with the spread of its
round-by-round values (a spread that holds 1.0 is within noise)."""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable


def percentile(samples: list[float], q: int) -> float:
    """The ``q``-th percentile (10, 20, ... 90) of ``samples``."""
    return statistics.quantiles(samples, n=10, method="inclusive")[q // 10 - 1]


def time_rounds(arms: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each arm's call, ``rounds`` calls each; round r starts at arm r (mod arms)."""
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            arms[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def spread(seconds: list[float], scale: float, unit: str) -> dict[str, float]:
    """Median, p10 and p90 of ``seconds`` times ``scale``, keyed ``median_<unit>`` etc."""
    return {f"median_{unit}": statistics.median(seconds) * scale, f"p10_{unit}": percentile(seconds, 10) * scale,
            f"p90_{unit}": percentile(seconds, 90) * scale}


def gemm_arms(seconds: dict[str, list[float]], flop: int, digits: int) -> dict[str, dict[str, float]]:
    """Each arm's ``spread`` in ms with its GFLOP/s at the median (rounded to ``digits``), for a GEMM
    of ``flop`` floating-point operations a call."""
    figures = {}
    for name, s in seconds.items():
        figures[name] = spread(s, 1e3, "ms")
        figures[name]["gflop_s"] = round(flop / (figures[name]["median_ms"] / 1e3) / 1e9, digits)
    return figures


def speedup(baseline: list[float], arm: list[float]) -> dict[str, object]:
    """How many times faster ``arm`` ran than ``baseline``: the ratio of medians, and the 10th-90th
    percentile of the ratio round by round."""
    per_round = [a / b for a, b in zip(baseline, arm)]
    return {"speedup": statistics.median(baseline) / statistics.median(arm),
            "speedup_p10_p90": [percentile(per_round, 10), percentile(per_round, 90)]}


def versus(case: dict[str, Any], baseline: str, arm: str, unit: str, digits: int) -> str:
    """One table cell per arm of ``case`` (its ``arms`` spreads in ``unit``, its ``speedup``):
    "<baseline> <median> <unit> (<p10>-<p90>)  <arm> ...  x<speedup> (p10-p90 <lo>-<hi>)"."""
    def cell(name: str) -> str:
        t = case["arms"][name]
        return (f"{name} {t[f'median_{unit}']:8.{digits}f} {unit} "
                f"({t[f'p10_{unit}']:.{digits}f}-{t[f'p90_{unit}']:.{digits}f})")
    lo, hi = case["speedup_p10_p90"]
    return f"{cell(baseline)}  {cell(arm)}  x{case['speedup']:.2f} (p10-p90 {lo:.2f}-{hi:.2f})"


def parser(doc: str, rounds: int, quick: str) -> argparse.ArgumentParser:
    """The options every side-by-side script takes: ``--json``, ``--rounds``, ``--quick``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--rounds", type=int, default=rounds, help=f"timed calls per arm (default {rounds})")
    p.add_argument("--quick", action="store_true", help=quick)
    return p


def parse(p: argparse.ArgumentParser, quick: dict[str, object]) -> argparse.Namespace:
    """The command line, with ``quick``'s values under ``--quick``; at least two rounds."""
    args = p.parse_args()
    if args.quick:
        for name, value in quick.items():
            setattr(args, name, value)
    if args.rounds < 2:
        p.error(f"--rounds {args.rounds}: at least 2 rounds are needed for a spread")
    return args
