"""Prepared device check for a Mac (tier D): one decode step of a small Llama / MoE model, and the
Metal templates against ATen on the same decode shapes.

1. Model: one new token per sequence against a KV cache, for a Llama-style decoder (RMSNorm,
   GQA attention, SwiGLU MLP) or its MoE variant (top-k router, experts through
   ``torch._grouped_mm``), LM head and softmax over the vocabulary. Arms, side by side in one run:
   eager, ``torch.compile(backend="inductor")``, ``torch.compile(backend="ext",
   options={"preset": "mps"})``, timed round-robin (one call of each arm per repetition, so a
   load spike hits every arm alike). Median milliseconds with p10/p90, ratios to eager, max
   difference to eager.
2. Kernels: every default config of ``metal.linear_gemv``, ``metal.scaled_mm`` (fp8 rowwise),
   ``metal.grouped_mm`` and ``metal.softmax`` against ``F.linear``, ``torch._scaled_mm``,
   ``torch._grouped_mm`` and ``torch.softmax`` on decode shapes; the best config's ratio, and
   its numbers against the reference in ``inductor_ext.kernels``.

    python bench/mps_decode.py --out mps_decode.json              # on a Mac (mps)
    python bench/mps_decode.py --model moe --batch 4 --out moe.json
    python bench/mps_decode.py --device cpu --smoke               # CPU smoke: eager arm, tiny model,
                                                                  # kernels through the CPU executor (untimed)
    python bench/mps_decode.py --device cpu --smoke --compile --metal-interpret
                          # + inductor and ext (cpu preset) arms, and "ext-metal": the Mac's ext arm (preset
                          # mps, Metal templates forced) with interpret=True: its Metal kernels on the CPU
                          # executor, checked against eager, never timed

Ratios come from this script only; a ratio within the arms' p10-p90 spread is "within noise". On a
shared CPU, single calls that use OpenMP threads can stall for hundreds of milliseconds when a core
is taken (an early CPU smoke read "ext 348 ms vs inductor 0.7 ms" from that, arms timed one after
the other); the arms are now interleaved and the spread is reported, and --threads 1 avoids it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inductor_ext.kernels.matmul import grouped_mm_reference  # noqa: E402
from inductor_ext.kernels.scaled_gemm import scaled_mm_reference  # noqa: E402
from inductor_ext.kernels.softmax import softmax_reference  # noqa: E402
from inductor_ext.models.decode_step import Decoder  # noqa: E402
from inductor_ext.templates.metal import grouped_mm, linear_gemv, scaled_mm, softmax  # noqa: E402

MODELS = {  # Llama-3.2-1B widths, fewer layers; the MoE variant swaps the MLP for 16 experts, top 2;
    # "smoke" is tiny (with --model llama its experts are dropped)
    "llama": dict(layers=4, dim=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256, experts=0, top_k=0),
    "moe": dict(layers=4, dim=2048, heads=32, kv_heads=8, ffn=1408, vocab=128256, experts=16, top_k=2),
    "smoke": dict(layers=2, dim=128, heads=4, kv_heads=2, ffn=256, vocab=4096, experts=4, top_k=2),
}


# ------------------------------------------------------------------------ timing
def _sync(device: str) -> None:
    if device == "mps":
        torch.mps.synchronize()


def measure(fns: dict[str, Callable[[], Any]], device: str, reps: int, warmup: int = 3) -> dict[str, dict[str, float]]:
    """Milliseconds per call of each function: median, p10, p90 over ``reps`` synchronized calls
    after warm-up, the functions called round-robin (so that drift and load hit all alike)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    _sync(device)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            _sync(device)
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: _summary(s) for name, s in samples.items()}


def _summary(samples: list[float]) -> dict[str, float]:
    # inclusive: the deciles stay within the samples (the default extrapolates, even below 0)
    q = statistics.quantiles(samples, n=10, method="inclusive") if len(samples) >= 2 else samples * 9
    return {"median_ms": statistics.median(samples), "p10_ms": q[0], "p90_ms": q[-1], "reps": len(samples)}


def _ratio(base: dict[str, float], arm: dict[str, float]) -> dict[str, Any]:
    """base / arm medians (> 1: the arm is faster), and whether the spreads overlap."""
    overlap = arm["p10_ms"] <= base["p90_ms"] and base["p10_ms"] <= arm["p90_ms"]
    return {"speedup": base["median_ms"] / arm["median_ms"], "within_noise": overlap}


def bench_model(args: argparse.Namespace) -> dict[str, Any]:
    cfg = dict(MODELS["smoke" if args.smoke else args.model])
    if args.model == "llama":
        cfg.update(experts=0, top_k=0)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    model = Decoder(**cfg, cache=args.cache, batch=args.batch, dtype=dtype).to(args.device).eval()
    tokens = torch.randint(0, cfg["vocab"], (args.batch,), device=args.device)
    pos = args.cache - 1
    arms: dict[str, Callable[[], torch.Tensor]] = {"eager": lambda: model(tokens, pos)}
    checked: dict[str, Callable[[], torch.Tensor]] = {}  # run for their numbers only
    if args.device == "mps" or args.compile:
        inductor = torch.compile(model, backend="inductor", dynamic=False)
        ext = torch.compile(model, backend="ext", dynamic=False,
                            options={"preset": "mps" if args.device == "mps" else "cpu"})
        arms["inductor"] = lambda: inductor(tokens, pos)
        arms["ext"] = lambda: ext(tokens, pos)
    if args.device == "cpu" and args.metal_interpret:
        # ATen always beats the CPU executor: force the templates so that their numbers are checked
        forced = [f.NAME for f in (linear_gemv, scaled_mm, grouped_mm, softmax)]
        metal = torch.compile(model, backend="ext", dynamic=False,
                              options={"preset": "mps", "interpret": True, "force_template": forced})
        checked["ext-metal"] = lambda: metal(tokens, pos)
    result: dict[str, Any] = {"config": cfg, "batch": args.batch, "cache": args.cache, "dtype": args.dtype, "arms": {}}
    with torch.no_grad():
        want = arms["eager"]()
        diffs = {name: (fn().float() - want.float()).abs().max().item() for name, fn in {**arms, **checked}.items()}
        timings = measure(arms, args.device, args.reps)
    for name, diff in diffs.items():
        timing = {**timings.get(name, {}), "max_abs_diff_vs_eager": diff}
        if name in timings and name != "eager":
            timing["vs_eager"] = _ratio(timings["eager"], timings[name])
        result["arms"][name] = timing
        speed = (f"{timing['median_ms']:.3f} ms (p10 {timing['p10_ms']:.3f}, p90 {timing['p90_ms']:.3f})"
                 if name in timings else "not timed")
        print(f"{name:>9}: {speed}, max |diff| vs eager {diff:.2e}", flush=True)
    return result


# ------------------------------------------------------------------------ kernels
def kernel_cases(device: str, smoke: bool) -> list[tuple[str, Any, Any, tuple, Callable, Callable]]:
    """(name, family, problem, template args, ATen call, reference) per decode shape."""
    dt = torch.bfloat16
    d, f, v = (128, 256, 4096) if smoke else (2048, 8192, 128256)
    r = lambda *s, dtype=dt: torch.randn(*s, device=device).to(dtype)  # noqa: E731
    cases = []
    for m in (1, 4):
        x, w, bias = r(m, d), r(f, d), r(f)
        cases.append((f"linear_gemv m={m} {f}x{d}", linear_gemv, linear_gemv.Problem(m, f, d, "bfloat16", True, "silu"),
                      (bias, x, w.t()), lambda x=x, w=w, bias=bias: F.silu(F.linear(x, w, bias)),
                      lambda x=x, w=w, bias=bias: scaled_mm_reference(x.cpu(), w.cpu(), bias=bias.cpu(),
                                                                      activation="silu", out_dtype=dt)))
        a8, w8 = r(m, d, dtype=torch.float8_e4m3fn), r(f, d, dtype=torch.float8_e4m3fn)
        sa, sb = torch.rand(m, 1, device=device), torch.rand(1, f, device=device)
        cases.append((f"scaled_mm fp8 rowwise m={m} {f}x{d}", scaled_mm, scaled_mm.Problem(m, f, d, "rowwise"),
                      (a8, w8.t(), sa, sb), lambda a8=a8, w8=w8, sa=sa, sb=sb: torch._scaled_mm(
                          a8, w8.t(), sa, sb, out_dtype=dt),
                      lambda a8=a8, w8=w8, sa=sa, sb=sb: scaled_mm_reference(a8.cpu(), w8.cpu(), alpha=(sa * sb).cpu(),
                                                                              out_dtype=dt)))
    experts, rows = 16, 8
    a, w = r(rows, d), r(experts, 2 * 1408 // (8 if smoke else 1), d)
    offs = torch.tensor(sorted(torch.randint(0, rows + 1, (experts,)).tolist()), dtype=torch.int32, device=device)
    offs[-1] = rows
    cases.append((f"grouped_mm rows={rows} experts={experts}", grouped_mm,
                  grouped_mm.Problem(rows, w.shape[1], d, experts, "bfloat16"), (a, w.transpose(-2, -1), offs),
                  lambda: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs),
                  lambda: grouped_mm_reference(a.cpu(), w.transpose(-2, -1).cpu(), offs.cpu())))
    for rows in (1, 4):
        logits = torch.randn(rows, v, device=device) * 4
        cases.append((f"softmax rows={rows} vocab={v}", softmax, softmax.Problem(rows, v, "float32"), (logits,),
                      lambda logits=logits: torch.softmax(logits, -1),
                      lambda logits=logits: softmax_reference(logits.cpu())))
    return cases


def bench_kernels(args: argparse.Namespace) -> list[dict[str, Any]]:
    timed = args.device == "mps"
    results = []
    for name, family, problem, targs, aten, reference in kernel_cases(args.device, args.smoke):
        want = reference()
        entry: dict[str, Any] = {"name": name, "family": family.NAME, "problem": repr(problem), "configs": []}
        runs = {repr(config): (lambda config=config: family.call(problem, config, "mps", *targs))
                for config in family.configs(problem, "mps")}
        timings = measure({"aten": aten, **runs}, args.device, args.reps) if timed else {}
        if timed:
            entry["aten"] = timings["aten"]
        for config, run in runs.items():
            got = run().cpu()
            row: dict[str, Any] = {"config": config, "max_abs_diff_vs_reference": (got.float() - want.float()).abs().max().item()}
            if timed:
                row.update(timings[config])
                row["vs_aten"] = _ratio(entry["aten"], row)
            entry["configs"].append(row)
        if timed:
            best = min(entry["configs"], key=lambda c: c["median_ms"])
            entry["best"] = {"config": best["config"], **best["vs_aten"]}
            print(f"{name}: ATen {entry['aten']['median_ms']:.3f} ms, best {best['config']} {best['median_ms']:.3f} ms "
                  f"({best['vs_aten']['speedup']:.2f}x{', within noise' if best['vs_aten']['within_noise'] else ''})",
                  flush=True)
        else:
            worst = max(c["max_abs_diff_vs_reference"] for c in entry["configs"])
            print(f"{name}: {len(entry['configs'])} configs on the CPU executor, max |diff| vs reference {worst:.2e} "
                  "(not timed)", flush=True)
        results.append(entry)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="mps" if torch.backends.mps.is_available() else "cpu", choices=["mps", "cpu"])
    p.add_argument("--model", default="llama", choices=["llama", "moe"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--cache", type=int, default=512, help="KV cache length (the step decodes its last position)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--smoke", action="store_true", help="tiny model and shapes (CPU check of the script)")
    p.add_argument("--compile", action="store_true", help="also run the compiled arms on cpu")
    p.add_argument("--metal-interpret", action="store_true",
                   help="cpu: also compile the Mac's ext arm (preset mps) with interpret=True and check its numbers")
    p.add_argument("--threads", type=int, help="torch threads on cpu (1 avoids OpenMP stalls on a shared machine)")
    p.add_argument("--skip-kernels", action="store_true")
    p.add_argument("--out", help="write the JSON report here")
    args = p.parse_args(argv)
    if args.device == "cpu" and not args.smoke:
        print("cpu without --smoke: the full model on CPU only tests the script; pass --smoke", file=sys.stderr)
    if args.smoke:
        args.cache, args.reps = min(args.cache, 64), min(args.reps, 5)
    if args.threads:
        torch.set_num_threads(args.threads)
    report: dict[str, Any] = {"device": args.device, "torch": torch.__version__, "model": bench_model(args)}
    if not args.skip_kernels:
        report["kernels"] = bench_kernels(args)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
