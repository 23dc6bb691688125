"""Cold compile time on CPU, and where it goes (issue 29, item 3), measured side by side in one run.

Models: ``demo`` (inductor_ext/demo.py's decoder block at its default size) and ``bench``
(bench/cpu_decode.py's stories15M-shaped decoder, fp32, one decode step of batch 1 after a
512-token prefill, the shape cpu_decode.py times its compiles on). On request (``--models gpt2``):
``gpt2``, bench/hf_generate.py's GPT-2 prefill row (fp32, 512 tokens, 2 layers: its GEMMs repeat per
layer, so more layers add graph size, not decisions).

Arms, each a fresh process with a fresh Inductor cache directory (nothing in-process is warm):
  inductor               torch.compile(model)
  inductor_max_autotune  torch.compile(model, mode="max-autotune"), freezing on (PyTorch's CPU tutorial)
  ext_cold               backend="ext" (cpu preset) with an empty autotune cache: a new user's first compile
  ext_cached             backend="ext" with the cache ext_cold filled: every decision cached

Where the time goes (seconds of wall time in the compiling thread, each counted once, innermost wins):
  isa_probe          Inductor's vector-ISA probe (cpu_vec_isa.VecISA.check_build: test builds, each
                     loaded in a fresh Python); ext reuses its outcome from its cache
  candidate_builds   C++ builds of autotuning candidates (select_algorithm's precompile, ext's
                     lowering/parallel_builds.py, and builds that happen inside a benchmark)
  benchmarking       timing the choices (select_algorithm's benchmark; ext's flushed and warm timers,
                     lowering/cold_timing.py, run inside it)
  inductor_builds    C++ builds outside autotuning (the compiled graph's own kernels, waited for)
  rest               the remainder: Dynamo, AOTAutograd, Inductor's lowering, scheduling, codegen
beside: ``builds`` (how many C++ builds per phase) and ``dynamo_timed`` (torch's own compile-time
counters, torch._dynamo.utils.compilation_time_metrics, summed per key, for the largest keys).

Targets (in ``targets``, each with its ratio, ``met`` and, when missed, ``why``):
  first_compile    ext_cold <= 1.5x inductor_max_autotune, on each model
  cached_compile   ext_cached <= 1.3x inductor, on each model

    python bench/compile_time.py [--json] [--models demo,bench] [--repeats 1] [--quick]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from target_report import print_targets  # noqa: E402  (bench/, beside this script)

ARMS = ("inductor", "inductor_max_autotune", "ext_cold", "ext_cached")
MODELS = ("demo", "bench", "gpt2")
DEFAULT_MODELS = ("demo", "bench")  # item 3's two models; gpt2 is hf_generate.py's prefill row, on request
PHASES = ("isa_probe", "candidate_builds", "benchmarking", "inductor_builds")
TARGETS = {"first_compile": ("ext_cold", "inductor_max_autotune", 1.5),
           "cached_compile": ("ext_cached", "inductor", 1.3)}


# ------------------------------------------------------------------------- in the arm's process


class PhaseClock:
    """Exclusive wall time per phase in the compiling (main) thread: a phase entered inside
    another one takes its time out of the outer one. Builds in other threads (a precompile pool)
    are counted, and their time goes to whatever the main thread is in meanwhile."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.builds: dict[str, int] = collections.defaultdict(int)
        self._stack: list[list[Any]] = []  # [phase, start, time taken by inner phases]

    def current(self) -> str | None:
        return self._stack[-1][0] if self._stack else None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        frame = [name, time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            spent = time.perf_counter() - frame[1]
            self.seconds[name] += spent - frame[2]
            if self._stack:
                self._stack[-1][2] += spent

    def wrap(self, owner: Any, attr: str, phase: str | Callable[[], str]) -> None:
        original = getattr(owner, attr)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(phase() if callable(phase) else phase):
                return original(*args, **kwargs)

        setattr(owner, attr, timed)


def install_clock() -> PhaseClock:
    """Wrap the functions a cold CPU compile spends its time in (Inductor's and ext's)."""
    from torch._inductor import async_compile, cpp_builder, cpu_vec_isa, select_algorithm

    clock = PhaseClock()

    def build_phase() -> str:
        where = clock.current()  # in a pool thread too: the main thread's phase decides
        phase = {"isa_probe": "isa_probe", "candidate_builds": "candidate_builds",
                 "benchmarking": "candidate_builds"}.get(where or "", "inductor_builds")
        clock.builds[phase] += 1
        return phase

    clock.wrap(cpu_vec_isa.VecISA, "check_build", "isa_probe")
    clock.wrap(cpp_builder.CppBuilder, "build", build_phase)
    clock.wrap(async_compile.AsyncCompile, "wait", "inductor_builds")
    clock.wrap(select_algorithm.AlgorithmSelectorCache, "benchmark", "benchmarking")
    from inductor_ext.lowering import parallel_builds  # ext's own precompile of a decision's C++ candidates

    clock.wrap(parallel_builds, "build_all", "candidate_builds")
    original = select_algorithm.AlgorithmSelectorCache.make_precompile_fn

    def make_precompile_fn(self: Any, *args: Any, **kwargs: Any) -> Any:
        fn = original(self, *args, **kwargs)

        def precompile(*a: Any, **k: Any) -> Any:
            with clock.phase("candidate_builds"):
                return fn(*a, **k)

        for attr in ("precompile_key",):  # do_autotuning reads it off the function
            if hasattr(fn, attr):
                setattr(precompile, attr, getattr(fn, attr))
        return precompile

    select_algorithm.AlgorithmSelectorCache.make_precompile_fn = make_precompile_fn  # type: ignore[method-assign]
    return clock


def make_model(name: str, quick: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch

    if name == "demo":
        from inductor_ext import demo

        model, x = demo.make_model("cpu", **({"batch": 1, "seq": 8, "dim": 32} if quick else {}))
        return model, (x,)
    if name == "bench":
        from inductor_ext.models.kv_decoder import SMOKE, Shape
        from inductor_ext.models.kv_decoder import make_model as make_decoder

        shape = SMOKE if quick else Shape()
        pos = 16 if quick else 512
        g = torch.Generator().manual_seed(1000)
        return make_decoder(shape, torch.float32), (torch.randint(0, shape.vocab, (1, 1), generator=g), pos)
    if name == "gpt2":  # hf_generate.py's gpt2_prefill_float32 row with 2 layers (compile work per layer repeats)
        import hf_generate

        w = hf_generate.QUICK if quick else hf_generate.Widths(layers=2)
        model = hf_generate.build(hf_generate.Row("gpt2", "none", "float32"), w)
        ids = torch.randint(0, w.gpt2_vocab, (1, 32 if quick else 512), generator=torch.Generator().manual_seed(1))

        class LogitsOnly(torch.nn.Module):  # hf_generate.py's prefill call: no cache, logits out
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                return self.model(ids, use_cache=False).logits

        return LogitsOnly(), (ids,)
    raise ValueError(f"unknown model {name!r}; models: {', '.join(MODELS)}")


def run_arm(arm: str, model_name: str, cache_db: str, quick: bool) -> dict[str, Any]:
    """In this (fresh) process: compile the model for the arm once; the first call's seconds and
    where they went."""
    import torch
    from torch._dynamo.utils import compilation_time_metrics

    from inductor_ext.lowering import decision_record

    model, args = make_model(model_name, quick)
    clock = install_clock()
    if arm == "inductor":
        compiled = torch.compile(model, dynamic=False)
    elif arm == "inductor_max_autotune":
        compiled = torch.compile(model, mode="max-autotune", dynamic=False)
    elif arm in ("ext_cold", "ext_cached"):
        compiled = torch.compile(model, backend="ext", options={"autotune_cache": cache_db}, dynamic=False)
    else:
        raise ValueError(f"unknown arm {arm!r}; arms: {', '.join(ARMS)}")
    with torch._inductor.config.patch(freezing=arm == "inductor_max_autotune"), torch.no_grad():
        t0 = time.perf_counter()
        compiled(*args)
        total = time.perf_counter() - t0
    phases = {p: round(clock.seconds.get(p, 0.0), 3) for p in PHASES}
    phases["rest"] = round(total - sum(phases.values()), 3)
    timed = {key: round(sum(v), 3) for key, v in compilation_time_metrics.items()}
    reasons = collections.Counter(re.split(r"[:;]", d.reason)[0] for d in decision_record.decisions)
    return {"seconds": round(total, 3), "phases": phases, "builds": dict(clock.builds),
            "dynamo_timed": dict(sorted(timed.items(), key=lambda kv: -kv[1])[:12]),
            "decisions": len(decision_record.decisions), "decision_reasons": dict(reasons)}


# ---------------------------------------------------------------------------------- the driver


def spawn(arm: str, model_name: str, cache_db: str, quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"),
               "INDUCTOR_EXT_CACHE_DIR": os.path.join(tmp, "ext"), "INDUCTOR_EXT_ISA_CACHE": os.path.join(tmp, "isa"),
               "TRITON_CACHE_DIR": os.path.join(tmp, "triton")}
        for name in ("TRITON_INTERPRET", "TORCH_LOGS"):
            env.pop(name, None)
        command = [sys.executable, __file__, "--arm", arm, "--model-name", model_name, "--cache-db", cache_db]
        done = subprocess.run(command + (["--quick"] if quick else []), env=env, capture_output=True, text=True,
                              timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"arm {arm} on {model_name} failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def why_missed(arm: dict[str, Any], base: dict[str, Any], base_name: str) -> str:
    """Which phases make up the gap, largest first."""
    keys = (*PHASES, "rest")
    gaps = sorted(((arm["phases"][k] - base["phases"][k], k) for k in keys), reverse=True)
    parts = [f"{k} {d:+.1f} s" for d, k in gaps if abs(d) >= 0.05]
    builds = arm["builds"].get("candidate_builds", 0)
    return (f"{arm['seconds'] - base['seconds']:+.1f} s against {base_name}: " + ", ".join(parts)
            + f" ({builds} candidate C++ builds, {arm['decisions']} decisions)")


def targets(per_model: dict[str, dict[str, Any]]) -> dict[str, Any]:
    found = {}
    for target, (arm, base, limit) in TARGETS.items():
        rows, met = {}, True
        for model, r in per_model.items():
            ratio = r["median_s"][arm] / r["median_s"][base]
            row: dict[str, Any] = {"ratio": round(ratio, 3), "met": ratio <= limit,
                                   arm: round(r["median_s"][arm], 2), base: round(r["median_s"][base], 2)}
            if not row["met"]:
                row["why"] = why_missed(r["arms"][arm], r["arms"][base], base)
                if arm == "ext_cached" and r["ext_cached_misses"]:
                    row["why"] += (f"; {r['ext_cached_misses']} of {r['arms'][arm]['decisions']} decisions were not "
                                   "found in the cache ext_cold filled and were decided again")
            rows[model] = row
            met &= row["met"]
        found[target] = {"want": f"{arm} <= {limit}x {base} on every model", "met": met,
                         "ratio": max(row["ratio"] for row in rows.values()), "per_model": rows}
    return found


def measure(model_name: str, repeats: int, quick: bool, work: Path) -> dict[str, Any]:
    built = str(work / f"{model_name}_built.db")
    samples: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for r in range(repeats):
        for arm in ARMS:  # ext_cold before ext_cached: the first ext_cold fills the cache ext_cached reads
            db = built if (arm == "ext_cached" or r == 0) else str(work / f"{model_name}_empty_{r}.db")
            samples[arm].append(spawn(arm, model_name, db, quick))
            print(f"  {model_name} {arm}: {samples[arm][-1]['seconds']:.1f} s", file=sys.stderr)
    median = {arm: statistics.median(s["seconds"] for s in runs) for arm, runs in samples.items()}
    # the breakdown of the run closest to the median
    arms = {arm: min(runs, key=lambda s: abs(s["seconds"] - median[arm])) for arm, runs in samples.items()}
    return {"median_s": median, "samples_s": {a: [s["seconds"] for s in runs] for a, runs in samples.items()},
            "spread_s": {a: [min(v), max(v)] for a, v in ((a, [s["seconds"] for s in runs]) for a, runs in samples.items())},
            "arms": arms,
            # decisions ext_cached did not find in the cache ext_cold filled (and decided again)
            "ext_cached_misses": sum(n for reason, n in arms["ext_cached"]["decision_reasons"].items()
                                     if reason != "cache")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per arm (the median is reported)")
    parser.add_argument("--quick", action="store_true", help="tiny models: checks the script, the figures mean little")
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--model-name", help=argparse.SUPPRESS)
    parser.add_argument("--cache-db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm, args.model_name, args.cache_db, args.quick)))
        return
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; models: {', '.join(MODELS)}")

    started = time.perf_counter()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    work = Path(tempfile.mkdtemp(prefix="bench_compile_cache_"))
    per_model = {m: measure(m, args.repeats, args.quick, work) for m in models}
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    figures = {"quick": args.quick, "repeats": args.repeats, "cpu_count": os.cpu_count(), "load_average": load,
               "load_average_after": load_after, "wall_s": round(time.perf_counter() - started, 1),
               "models": per_model, "targets": targets(per_model)}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"cold compile, median of {args.repeats} fresh process(es) per arm (seconds); load {load} -> {load_after}")
    for model, r in per_model.items():
        print(f"{model}: " + ", ".join(f"{a} {s:.1f}" for a, s in r["median_s"].items()))
        for arm, a in r["arms"].items():
            print(f"  {arm:22s} " + ", ".join(f"{k} {v:.1f}" for k, v in a["phases"].items())
                  + f"  (C++ builds {a['builds']})")
    print_targets(figures["targets"], "per_model")


if __name__ == "__main__":
    main()
