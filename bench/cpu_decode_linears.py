"""CPU: a decode step's linears (one token) against the machine's memory read bound, side by side.

A decoder at batch 1 reads every weight once per token, so its linears can go no faster than
the weights stream from memory. This measures how close each arm gets, per weight shape of
``bench/hf_generate.py``'s Llama-style model (q/o 768x768, gate/up 768->2048, down 2048->768, the
lm_head 768->32000), fp32 and bf16: a chain of distinct ``Linear`` layers of that shape (no bias),
together several times the last-level cache so that every call reads its weights from DRAM, as a
decode step does. Arms, each compiled once under ``torch.no_grad()``: Inductor's default with
freezing (every linear on the library's packed weight: MKL for fp32, oneDNN for bf16), Inductor
max-autotune with freezing (PyTorch's CPU tutorial), ext's default (the cpu preset: tables and the
model, nothing timed) and ext with every decision timed (``autotune="full"``: a decode-shaped GEMM
streamed over copies of its weight), each with a fresh autotune cache; eager ATen as the baseline
of what an uncompiled model gets. Timed calls rotate over the arms round by round.

The read bound is one more arm: an ATen ``sum`` over a tensor of as many bytes as the chain's
weights (the measure of ``hf_generate.py``'s roofline), timed in the same rounds. On a shared VM
the memory bandwidth a process gets moves by the minute (a hand-written AVX-512 read loop measured
27-59 GB/s on 2 threads within ten minutes, 2026-12-05), so a bound measured once, before the
arms, can put an arm above 1.0 or well below it.

Per case: each arm's median and p10/p90 in us per layer, the GB/s that is, and its fraction of
the read bound (``of_read_bound``: the sum's median time over the arm's); and ext's speed-up over
max-autotune with the 10th-90th percentile of that ratio round by round (a spread that holds 1.0
is within noise). Where both compiled arms sit near 1.0, no kernel choice can make decode much
faster here.

On the 2-core AVX-512 VM it was written on, for fp32 768x768 and 768x32000 the two compiled arms
ran the same generated GEMM (micro-kernel and blocking, compared in their code), yet
ext/max-autotune read 0.93 and 0.94 in one run and 1.03 and 1.05 in the next: between arms a
few percent is where each one's packed weights sit in memory, not which kernel it chose. The read
bound itself measured 34-55 GB/s across the cases of that second run.

    python bench/cpu_decode_linears.py [--json] [--dtypes float32,bfloat16] [--rounds 30] [--quick]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from side_by_side import parse, parser, speedup, spread, time_rounds  # noqa: E402

from inductor_ext.lowering.cold_timing import FLUSH_MAX_BYTES, last_level_cache_bytes  # noqa: E402
from inductor_ext.lowering.decision_record import decisions  # noqa: E402

SHAPES = ((768, 768), (768, 2048), (2048, 768), (768, 32000))  # (in, out) of hf_generate's Llama
LLC_MULTIPLE = 4  # the chain's weights, in last-level caches: read from DRAM on every call


class Chain(torch.nn.Module):
    """``layers`` distinct linears, each applied to the same token; returns every output."""

    def __init__(self, k: int, n: int, layers: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.linears = torch.nn.ModuleList(torch.nn.Linear(k, n, bias=False, dtype=dtype) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([linear(x) for linear in self.linears], dim=1)


def compiled_arms(model: Chain, cache: str) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Eager, Inductor max-autotune with freezing, and ext, each to be called under no_grad."""
    torch._dynamo.reset()
    max_autotune = torch.compile(model, mode="max-autotune")
    default = torch.compile(model)
    ext = torch.compile(model, backend="ext", options={"autotune_cache": cache})
    # every decision timed (a decode-shaped GEMM streamed over copies of its weight), into its own cache
    ext_full = torch.compile(model, backend="ext", options={"autotune": "full", "autotune_cache": cache + ".full"})

    def frozen(compiled: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
        def call(x: torch.Tensor) -> torch.Tensor:
            with torch._inductor.config.patch(freezing=True):
                return compiled(x)
        return call

    # Inductor's default under freezing packs every linear for the library (MKL fp32, oneDNN bf16)
    return {"eager": model, "inductor_frozen": frozen(default), "inductor_max_autotune": frozen(max_autotune),
            "ext": ext, "ext_full": ext_full}


def measure(k: int, n: int, dtype: torch.dtype, weight_bytes: int, rounds: int, cache: str) -> dict[str, Any]:
    per_layer = k * n * dtype.itemsize
    layers = max(2, -(-weight_bytes // per_layer))
    torch.manual_seed(k * n)
    model = Chain(k, n, layers, dtype).eval()
    x = torch.randn(1, k, dtype=dtype)
    with torch.no_grad():
        fns = compiled_arms(model, cache)
        outputs, served = {}, {}
        for name, fn in fns.items():  # compiles and warms each; what ext's arms served, with how decided
            first = len(decisions)
            outputs[name] = fn(x)
            served[name] = sorted({f"{d.winner} ({d.reason.split(':')[0]})" for d in decisions[first:]})
        for fn in fns.values():
            fn(x)
        stream = torch.ones(layers * per_layer // 4)  # the read bound: as many bytes as the weights
        stream.sum()
        calls = {name: (lambda fn=fn: fn(x)) for name, fn in fns.items()}
        seconds = time_rounds({**calls, "read_bound": stream.sum}, rounds)
    bound_s = statistics.median(seconds.pop("read_bound"))
    ref = outputs["eager"].float()
    arms: dict[str, Any] = {}
    for name, secs in seconds.items():
        figures = spread(secs, 1e6 / layers, "us")
        gb_s = per_layer / (figures["median_us"] * 1e-6) / 1e9
        arms[name] = {**{key: round(v, 2) for key, v in figures.items()}, "gb_s": float(f"{gb_s:.3g}"),
                      "of_read_bound": float(f"{bound_s / statistics.median(secs):.3g}"),
                      "max_abs_difference": float((outputs[name].float() - ref).abs().max())}
    return {"in": k, "out": n, "dtype": str(dtype).removeprefix("torch."), "layers": layers,
            "weight_mb": round(layers * per_layer / 2**20, 1),
            "read_bound_gb_s": float(f"{layers * per_layer / bound_s / 1e9:.3g}"),  # 3 digits: a loaded run's 0.04
            "arms": arms, "ext_vs_max_autotune": speedup(seconds["inductor_max_autotune"], seconds["ext"]),
            "ext_vs_inductor_frozen": speedup(seconds["inductor_frozen"], seconds["ext"]),
            "ext_served": {name: served[name] for name in ("ext", "ext_full")}}


def main() -> None:
    p = parser(__doc__, rounds=30, quick="two small shapes, 256 KiB of weights each, three rounds: a smoke run")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated (default float32,bfloat16)")
    args = parse(p, {"rounds": 3})
    shapes = ((64, 96), (96, 40)) if args.quick else SHAPES
    # a VM reports its host's whole L3 (300 MiB here): past cold_timing's flush, more layers add compile time only
    weight_bytes = (256 << 10) if args.quick else min(LLC_MULTIPLE * last_level_cache_bytes(), FLUSH_MAX_BYTES)
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.dtypes.split(","):
            dtype = getattr(torch, name.strip())
            for k, n in shapes:
                case = measure(k, n, dtype, weight_bytes, args.rounds, str(Path(tmp) / "autotune.db"))
                cases.append(case)
                if not args.json:
                    arms = "  ".join(f"{arm} {f['median_us']:.1f} us {f['of_read_bound']:.2f}"
                                     for arm, f in case["arms"].items())
                    ratios = "  ".join(
                        f"ext/{base} {r['speedup']:.2f}x [{r['speedup_p10_p90'][0]:.2f}, {r['speedup_p10_p90'][1]:.2f}]"
                        for base, r in (("max-autotune", case["ext_vs_max_autotune"]),
                                        ("inductor-frozen", case["ext_vs_inductor_frozen"])))
                    print(f"{case['dtype']:8s} {k}x{n:<6d} ({case['layers']} layers, {case['weight_mb']} MB, "
                          f"read bound {case['read_bound_gb_s']} GB/s)  {arms}  {ratios}  served {case['ext_served']}")
    figures = {"threads": torch.get_num_threads(), "rounds": args.rounds, "quick": args.quick, "cases": cases}
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print(f"{figures['threads']} threads; per arm: us per layer and its fraction of the read bound "
              "(an ATen sum over as many bytes, timed in the same rounds)")


if __name__ == "__main__":
    main()
