"""Compile-time benchmark, measured side by side in one run (CPU).

(a) overhead of ext's passes and choices: backend="ext" vs backend="inductor", autotuning and
    freezing off;
(b) what an offline autotune cache saves: ext with max autotuning from cold, with an offline
    cache (autotune="cache-only"), and with autotuning off. On CPU, (b) runs the hopper preset's
    Triton templates in the Triton interpreter (the only way they run here), so every arm of (b)
    is in interpret mode and only the autotuning differs. (The cpu preset's own C++ templates:
    bench/cpu_decode.py.)

Every arm is a fresh process with fresh Inductor cache directories (cold caches in every arm);
arms are interleaved over the repeats and the median is reported.

    python bench/compile_time.py [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARMS_A = ("inductor", "ext")
ARMS_B = ("b_off", "b_cold", "b_cached")


def run_arm(arm: str, cache_db: str | None) -> float:
    """In this process: compile the arm's model once and return the first call's seconds."""
    import torch

    from inductor_ext import demo

    if arm in ARMS_A:
        model, x = demo.make_model("cpu")
        # (a) is ext's overhead on the same work: no autotuning, no freezing (the cpu preset has both)
        backend, options = arm, ({"autotune": "off", "freezing": False} if arm == "ext" else None)
    else:
        model, x = demo.make_model("cpu", batch=1, seq=16, dim=64)
        effort = {"b_off": "off", "b_cold": "full", "b_cached": "cache-only"}[arm]
        backend, options = "ext", {"preset": "hopper", "interpret": True, "autotune": effort, "autotune_cache": cache_db}
    kwargs = {"options": options} if options else {}
    compiled = torch.compile(model, backend=backend, **kwargs)
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled(x)
        return time.perf_counter() - t0


def spawn(arm: str, cache_db: str) -> float:
    with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tmp, "INDUCTOR_EXT_CACHE_DIR": tmp,
               "TRITON_CACHE_DIR": os.path.join(tmp, "triton")}
        env.pop("TRITON_INTERPRET", None)
        if arm in ARMS_B:
            env["TRITON_INTERPRET"] = "1"
        done = subprocess.run([sys.executable, __file__, "--arm", arm, "--cache-db", cache_db],
                              env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"arm {arm} failed:\n{done.stderr[-3000:]}")
        return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--cache-db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        print(run_arm(args.arm, args.cache_db))
        return

    work = Path(tempfile.mkdtemp(prefix="bench_compile_cache_"))
    built = str(work / "offline.db")
    spawn("b_cold", built)  # the offline build: its winners feed the b_cached arm
    samples: dict[str, list[float]] = {a: [] for a in (*ARMS_A, *ARMS_B)}
    for _ in range(args.repeats):
        for arm in samples:
            # b_cold always starts from an empty autotune cache; b_cached reads the offline one.
            db = built if arm == "b_cached" else str(work / f"empty_{arm}_{len(samples[arm])}.db")
            samples[arm].append(spawn(arm, db))
    med = {a: statistics.median(s) for a, s in samples.items()}
    figures = {
        "seconds": med,
        "samples": samples,
        "a_ext_over_inductor": med["ext"] / med["inductor"],
        "b_cold_over_off": med["b_cold"] / med["b_off"],
        "b_cached_over_off": med["b_cached"] / med["b_off"],
        "b_cold_over_cached": med["b_cold"] / med["b_cached"],
        "targets": {"a_ext_over_inductor": "<= 1.05", "b_cached_over_off": "<= 1.10"},
        "repeats": args.repeats,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"compile time, median of {args.repeats} fresh processes with cold caches (seconds)")
    print(f"(a) inductor {med['inductor']:.2f}  ext {med['ext']:.2f}  "
          f"ext/inductor = {figures['a_ext_over_inductor']:.3f}x  (target <= 1.05x)")
    print(f"(b) autotune off {med['b_off']:.2f}  full, cold {med['b_cold']:.2f}  cache-only {med['b_cached']:.2f}")
    print(f"    cached/off = {figures['b_cached_over_off']:.3f}x (target <= 1.10x)  "
          f"cold/off = {figures['b_cold_over_off']:.2f}x  cold/cached = {figures['b_cold_over_cached']:.2f}x")


if __name__ == "__main__":
    main()
