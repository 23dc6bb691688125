"""CPU inference benchmark: backend="ext" (cpu preset, cached decisions) against Inductor and eager
on a small Llama-style decoder, all measured side by side in one run.

The model has the shape of llama2.c's stories15M (dim 288, 6 layers, 6 heads, SwiGLU 768,
vocab 32000; random weights, nothing downloaded) with a KV cache: prefill is --prefill tokens of
one sequence (logits of the last one), decode is one token per sequence right after such a
prefill (attending to --prefill cached tokens) for each batch in --decode-batches, in fp32 and
bf16, under torch.no_grad().

Arms (each a deep copy of the model, compiled with static shapes once per shape):
  eager                  the model as written
  inductor               torch.compile(model)
  inductor_max_autotune  torch.compile(model, mode="max-autotune") with Inductor's freezing, as
                         PyTorch's CPU max-autotune tutorial runs it (its C++ GEMM templates serve
                         frozen weights only)
  ext                    torch.compile(model, backend="ext"): the cpu preset (C++ GEMM templates,
                         decode attention as Inductor-compiled reductions), its decisions built
                         first into an autotune cache (--ext-cache, a fresh file by default),
                         then compiled like the other arms with autotune="cache-only" from it,
                         as a user runs a cache built offline; nothing else set.
  ext_inductor_freezing  the same, traced with torch._inductor.config.freezing = True as the
                         max-autotune arm is: the one setting that arm adds, kept when only the
                         backend changes. Dynamo then installs the weights as graph attributes
                         instead of passing 40 lifted parameters each call (ext watches them
                         there as well); the lifted path costs 35-110 us a call around the graph
                         (1.5-3% of a decode b1 fp32 step here), which a backend cannot opt out of.
Timed calls are interleaved (each round runs every arm twice in a row, in rotating order, and
times the second, as hf_generate does) so load from other processes hits every arm alike while
each timed call finds the caches its own arm left; each arm reports the median with
p10/p25/p75/p90, and a compiled arm also the median time inside Inductor's compiled graph (``graph_ms``) and around it
(``around_ms``: Dynamo's guards, AOTAutograd's wrapper, ext's weight check), so a gap between
arms that run the same kernels shows where it is.

Compile time: a fresh process per arm with empty Inductor caches compiles one shape (the first
dtype's first decode batch): ext with autotune="cache-only" from the built cache against Inductor
max-autotune (and default, for reference).

The JSON (--json) ends with ``targets``: each with its measured ratio and ``met``:
  ext_vs_best_inductor   ext >= the faster of inductor and inductor_max_autotune on every shape,
                         each compared with the ext arm of the same user config (inductor with
                         ext, inductor_max_autotune with ext_inductor_freezing; ext's own ratio to
                         the faster is reported beside it as ext_ratio) (within noise: half the
                         larger relative IQR of the two, at least 2%; a shape noisier than 10% is
                         not met: too noisy to tell)
  ext_vs_eager_decode    ext >= 1.5x eager on every decode shape
  ext_cached_compile     ext's cached compile <= 0.5x inductor_max_autotune's compile time

    python bench/cpu_decode.py [--json] [--dtypes float32,bfloat16] [--decode-batches 1,8]
                               [--prefill 512] [--reps 20] [--threads N] [--ext-cache PATH] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inductor_ext.models.kv_decoder import SMOKE, Shape, make_model  # noqa: E402
from target_report import print_targets  # noqa: E402  (bench/, beside this script)

ARMS = ("eager", "inductor", "inductor_max_autotune", "ext", "ext_inductor_freezing")
# Arms traced with Inductor's freezing flag set, as PyTorch's CPU max-autotune tutorial sets it.
FREEZING_FLAG_ARMS = ("inductor_max_autotune", "ext_inductor_freezing")
# Each baseline is compared with the ext arm that has the same user config.
EXT_LIKE = {"inductor": "ext", "inductor_max_autotune": "ext_inductor_freezing"}
EXT_ARMS = tuple(EXT_LIKE.values())


@dataclass(frozen=True)
class Case:
    dtype: str
    phase: str  # "decode" or "prefill"
    batch: int
    tokens: int
    pos: int

    @property
    def name(self) -> str:
        return f"{self.phase}_b{self.batch}x{self.tokens}_{self.dtype}"

    def inputs(self, shape: Shape) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(self.batch * 1000 + self.tokens)
        return torch.randint(0, shape.vocab, (self.batch, self.tokens), generator=g), self.pos


def cases(dtypes: list[str], decode_batches: list[int], prefill: int) -> list[Case]:
    found = []
    for dtype in dtypes:
        found += [Case(dtype, "decode", b, 1, prefill) for b in decode_batches]
        found.append(Case(dtype, "prefill", 1, prefill, 0))
    return found


# -------------------------------------------------------------------------------------- arms


def own_forward(model: nn.Module, arm: str) -> nn.Module:
    """``model`` with a forward of its own code object. Dynamo keeps compiled graphs per code
    object: arms sharing ``Decoder.forward`` would, on every call, first evaluate the guards of
    the other arms' graphs (a cost that depends on the order they were compiled in, and that no
    user compiling one model pays)."""
    f = type(model).forward
    code = f.__code__.replace(co_name=f"forward_{arm}")
    forward = types.FunctionType(code, f.__globals__, code.co_name, f.__defaults__, f.__closure__)
    model.__class__ = type(f"{type(model).__name__}_{arm}", (type(model),), {"forward": forward})
    return model


def compile_arm(arm: str, model: nn.Module, ext_cache: str, autotune: str | None = None) -> Callable[..., torch.Tensor]:
    """The arm's callable; static shapes for every compiled arm (one graph per shape)."""
    if arm == "eager":
        return model
    model = own_forward(model, arm)
    if arm == "inductor":
        return torch.compile(model, dynamic=False)
    if arm == "inductor_max_autotune":
        return torch.compile(model, mode="max-autotune", dynamic=False)
    if arm not in EXT_ARMS:
        raise ValueError(f"unknown arm {arm!r}; arms: {', '.join(ARMS)}")
    options = {"autotune_cache": ext_cache, **({"autotune": autotune} if autotune else {})}
    return torch.compile(model, backend="ext", options=options, dynamic=False)


def first_call(arm: str, fn: Callable[..., torch.Tensor], args: tuple[Any, ...]) -> tuple[torch.Tensor, float]:
    """Call ``fn`` once (its compile for these inputs); seconds it took."""
    freezing = torch._inductor.config.patch(freezing=arm in FREEZING_FLAG_ARMS)
    with freezing, torch.no_grad():
        t0 = time.perf_counter()
        out = fn(*args)
        return out, time.perf_counter() - t0


def percentiles(samples: list[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=20, method="inclusive")  # 5% steps
    return {"median_ms": statistics.median(samples) * 1e3, "p10_ms": q[1] * 1e3, "p25_ms": q[4] * 1e3,
            "p75_ms": q[14] * 1e3, "p90_ms": q[17] * 1e3, "n": len(samples)}


@contextlib.contextmanager
def graph_timer() -> Iterator[list[float]]:
    """While inside, each call of an Inductor compiled graph adds its seconds to the yielded
    one-element list: what an arm's kernels took, apart from Dynamo's guards, AOTAutograd's
    wrapper and a backend's own per-call work around them (a call with graph breaks sums them)."""
    from torch._inductor.output_code import CompiledFxGraph

    spent, call = [0.0], CompiledFxGraph.__call__

    def timed(self: Any, inputs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return call(self, inputs)
        finally:
            spent[0] += time.perf_counter() - t0

    CompiledFxGraph.__call__ = timed  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        CompiledFxGraph.__call__ = call  # type: ignore[method-assign]


def time_interleaved(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, dict[str, float]]:
    """Per arm: percentiles of the whole call, and for compiled arms the medians of the time in
    Inductor's graph and around it (``graph_ms``, ``around_ms``): where two arms run the same
    kernels, the difference is in the call path."""
    samples: dict[str, list[float]] = {arm: [] for arm in fns}
    in_graph: dict[str, list[float]] = {arm: [] for arm in fns}
    order = list(fns)
    with torch.no_grad(), graph_timer() as spent:
        for _ in range(2):  # warm-up rounds
            for fn in fns.values():
                fn()
        for r in range(reps):
            for arm in order[r % len(order):] + order[:r % len(order)]:  # rotate who goes first
                fns[arm]()  # untimed: the timed call finds its own arm's caches, not the last arm's
                spent[0] = 0.0
                t0 = time.perf_counter()
                fns[arm]()
                samples[arm].append(time.perf_counter() - t0)
                in_graph[arm].append(spent[0])
    result = {}
    for arm, s in samples.items():
        result[arm] = percentiles(s)
        if any(in_graph[arm]):
            result[arm]["graph_ms"] = statistics.median(in_graph[arm]) * 1e3
            result[arm]["around_ms"] = statistics.median(t - g for t, g in zip(s, in_graph[arm])) * 1e3
    return result


def build_ext(shape: Shape, all_cases: list[Case], path: str) -> dict[str, Any]:
    """ext's decisions for every case, into the cache at ``path`` (the cpu preset's effort; a
    cache hit skips the benchmarks)."""
    from inductor_ext.lowering import decision_record

    first, t0 = len(decision_record.decisions), time.perf_counter()
    for dtype in dict.fromkeys(c.dtype for c in all_cases):
        compiled = compile_arm("ext", make_model(shape, getattr(torch, dtype)), path)
        for case in (c for c in all_cases if c.dtype == dtype):
            first_call("ext", compiled, case.inputs(shape))
    made = decision_record.decisions[first:]
    return {"seconds": time.perf_counter() - t0, "decisions": len(made),
            "templates_won": sum(d.winner.startswith("cpp_") for d in made),
            "winners": sorted({f"{d.op} {d.problem['shapes']} {d.problem['dtype']}: {d.winner} ({d.reason})"
                               for d in made})}


def clear_kv_caches(fn: Callable[..., Any]) -> None:
    """Zero the KV caches of an arm's model before a shape's first call, so every arm's outputs
    come from the same state whatever ran before (a decode attends to every cached position)."""
    with torch.no_grad():
        for name, buffer in getattr(fn, "_orig_mod", fn).named_buffers():
            if name.endswith(("k_cache", "v_cache")):
                buffer.zero_()


def measure_speed(shape: Shape, all_cases: list[Case], reps: int, ext_cache: str) -> dict[str, Any]:
    from inductor_ext.lowering import decision_record

    results: dict[str, Any] = {}
    for dtype in dict.fromkeys(c.dtype for c in all_cases):
        base = make_model(shape, getattr(torch, dtype))
        fns = {arm: compile_arm(arm, copy.deepcopy(base), ext_cache, autotune="cache-only" if arm in EXT_ARMS else None)
               for arm in ARMS}
        for case in (c for c in all_cases if c.dtype == dtype):
            args = case.inputs(shape)
            for fn in fns.values():
                clear_kv_caches(fn)
            first = len(decision_record.decisions)
            outs = {arm: first_call(arm, fn, args)[0].float() for arm, fn in fns.items()}
            # the ext arms compile cache-only from the build: a miss would serve ATen, unnoticed
            misses = sum(d.reason.startswith("fallback: cache-only") for d in decision_record.decisions[first:])
            scale = outs["eager"].abs().max().item()
            errors = {arm: (out - outs["eager"]).abs().max().item() / scale for arm, out in outs.items()}
            timings = time_interleaved({arm: (lambda fn=fn: fn(*args)) for arm, fn in fns.items()}, reps)
            results[case.name] = {"case": asdict(case), "max_rel_err_vs_eager": errors, "ext_cache_misses": misses,
                                  "arms": timings}
            print(f"  {case.name}: " + ", ".join(f"{a} {t['median_ms']:.3f} ms" for a, t in timings.items()),
                  file=sys.stderr)
    return results


# ------------------------------------------------------------------------------ compile time


def compile_once(arm: str, case: Case, shape: Shape, ext_cache: str) -> float:
    """In this process (fresh caches): the first call's seconds for one arm and case."""
    model = make_model(shape, getattr(torch, case.dtype))
    fn = compile_arm(arm, model, ext_cache, autotune="cache-only" if arm == "ext" else None)
    return first_call(arm, fn, case.inputs(shape))[1]


def measure_compile(case: Case, args: argparse.Namespace, ext_cache: str) -> dict[str, Any]:
    arms = ("ext", "inductor_max_autotune", "inductor")
    samples: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(args.compile_repeats):
        for arm in arms:
            with tempfile.TemporaryDirectory(prefix="cpu_decode_compile_") as tmp:
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tmp}
                command = [sys.executable, __file__, "--compile-arm", arm, "--case", json.dumps(asdict(case)),
                           "--ext-cache", ext_cache, "--threads", str(args.threads)] + (["--smoke"] if args.smoke else [])
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
                if done.returncode != 0:
                    raise RuntimeError(f"compile arm {arm} failed:\n{done.stderr[-3000:]}")
                samples[arm].append(float(done.stdout.strip().splitlines()[-1]))
    return {"case": case.name, "seconds": {a: statistics.median(s) for a, s in samples.items()}, "samples": samples}


# ----------------------------------------------------------------------------------- targets


NOISE_FLOOR, NOISE_CEILING = 0.02, 0.10


def _noise(a: dict[str, float], b: dict[str, float]) -> float:
    rel_iqr = [(t["p75_ms"] - t["p25_ms"]) / t["median_ms"] for t in (a, b)]
    return max(NOISE_FLOOR, max(rel_iqr) / 2)


def targets(speed: dict[str, Any], compile_time: dict[str, Any]) -> dict[str, Any]:
    per_case, met = {}, True
    for name, r in speed.items():
        arms = r["arms"]
        best = min(("inductor", "inductor_max_autotune"), key=lambda a: arms[a]["median_ms"])
        ext = EXT_LIKE[best]
        ratio = arms[best]["median_ms"] / arms[ext]["median_ms"]
        noise = _noise(arms[best], arms[ext])
        per_case[name] = {"vs": best, "ext_arm": ext, "ratio": round(ratio, 3), "noise": round(noise, 3),
                          "met": ratio >= 1 - noise and noise <= NOISE_CEILING,
                          "ext_ratio": round(arms[best]["median_ms"] / arms["ext"]["median_ms"], 3)}
        if noise > NOISE_CEILING:
            per_case[name]["why"] = "too noisy to tell"
        met &= per_case[name]["met"]
    decode = {n: r["arms"]["eager"]["median_ms"] / r["arms"]["ext"]["median_ms"]
              for n, r in speed.items() if r["case"]["phase"] == "decode"}
    seconds = compile_time["seconds"]
    compile_ratio = seconds["ext"] / seconds["inductor_max_autotune"]
    return {
        "ext_vs_best_inductor": {"ratio": min(c["ratio"] for c in per_case.values()), "met": met,
                                 "want": "every shape >= 1 - noise", "per_shape": per_case},
        "ext_vs_eager_decode": {"ratio": round(min(decode.values()), 3), "met": min(decode.values()) >= 1.5,
                                "want": ">= 1.5 on every decode shape",
                                "per_shape": {n: round(v, 3) for n, v in decode.items()}},
        "ext_cached_compile": {"ratio": round(compile_ratio, 3), "met": compile_ratio <= 0.5,
                               "want": "ext cache-only compile <= 0.5x inductor_max_autotune's"},
    }


# -------------------------------------------------------------------------------------- main


def machine() -> dict[str, Any]:
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    flags = Path("/proc/cpuinfo").read_text().split("flags", 2)[1].split("\n", 1)[0] if Path("/proc/cpuinfo").exists() else ""
    return {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "load_average": load,
            "amx_bf16": "amx_bf16" in flags, "avx512f": "avx512f" in flags, "torch": torch.__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--decode-batches", default="1,8")
    parser.add_argument("--prefill", type=int, default=512)
    parser.add_argument("--reps", type=int, default=20, help="timed rounds per shape")
    parser.add_argument("--compile-repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--ext-cache", help="autotune cache to build into and read (default: a fresh file)")
    parser.add_argument("--smoke", action="store_true", help="a tiny model, one decode shape, fp32: checks the script")
    parser.add_argument("--compile-arm", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)  # before any compile: Inductor's C++ kernels take this count
    shape = SMOKE if args.smoke else Shape()
    if args.compile_arm:
        print(compile_once(args.compile_arm, Case(**json.loads(args.case)), shape, args.ext_cache))
        return
    if args.smoke:
        args.dtypes, args.decode_batches, args.prefill, args.reps = "float32", "1", 16, 3
    all_cases = cases(args.dtypes.split(","), [int(b) for b in args.decode_batches.split(",")], args.prefill)
    if max(c.batch for c in all_cases) > shape.max_batch or args.prefill + 1 > shape.max_seq:
        parser.error(f"decode batches <= {shape.max_batch} and --prefill < {shape.max_seq} (the KV cache's size)")
    ext_cache = args.ext_cache or str(Path(tempfile.mkdtemp(prefix="cpu_decode_")) / "ext_autotune.db")

    started = time.perf_counter()
    info = machine()
    print(f"cpu_decode: {len(all_cases)} shapes x {len(ARMS)} arms, {args.threads} threads, load {info['load_average']}",
          file=sys.stderr)
    from inductor_ext.tune import fresh_inductor_caches

    # Cold Inductor caches for every arm: Inductor's own autotune cache would otherwise hand every
    # autotuning arm (ext's build, max-autotune) the timings of an earlier run, however noisy it was.
    with fresh_inductor_caches():
        build = build_ext(shape, all_cases, ext_cache)
        speed = measure_speed(shape, all_cases, args.reps, ext_cache)
    compile_time = measure_compile(next(c for c in all_cases if c.phase == "decode"), args, ext_cache)
    figures = {"model": asdict(shape), "machine": info, "threads": args.threads, "reps": args.reps,
               "ext_cache": ext_cache, "ext_build": build, "speed": speed, "compile": compile_time,
               "wall_s": round(time.perf_counter() - started, 1), "load_average_after": machine()["load_average"],
               "targets": targets(speed, compile_time)}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"threads {args.threads}, load {info['load_average']} -> {figures['load_average_after']}; "
          f"ext build {build['seconds']:.0f} s ({build['templates_won']}/{build['decisions']} decisions won by "
          f"ext's C++ families: GEMM templates, decode attention)")
    for name, r in speed.items():
        print(f"{name:28s} " + "  ".join(f"{a} {t['median_ms']:8.3f} ms [{t['p10_ms']:.3f}-{t['p90_ms']:.3f}]"
                                         for a, t in r["arms"].items()))
        print(f"{'':28s} around the graph: " + "  ".join(f"{a} {t['around_ms']:.3f} ms"
                                                         for a, t in r["arms"].items() if "around_ms" in t))
    print(f"compile ({compile_time['case']}): " + ", ".join(f"{a} {s:.1f} s" for a, s in compile_time["seconds"].items()))
    print_targets(figures["targets"])


if __name__ == "__main__":
    main()
