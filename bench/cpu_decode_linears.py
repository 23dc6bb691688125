"""CPU: a decode step's linears (one token) against the machine's memory read bound, side by side.

A decoder at batch 1 reads every weight once per token, so its linears can go no faster than
the weights stream from memory. This measures how close each arm gets, per weight shape of
``bench/hf_generate.py``'s Llama-style model (q/o 768x768, gate/up 768->2048, down 2048->768, the
lm_head 768->32000), fp32 and bf16: a chain of distinct ``Linear`` layers of that shape (no bias),
together several times the last-level cache so that every call reads its weights from DRAM, as a
decode step does. Arms, each compiled once under ``torch.no_grad()``: Inductor max-autotune with
freezing (PyTorch's CPU tutorial) and ext (the cpu preset, a fresh autotune cache); eager ATen
as the baseline of what an uncompiled model gets. Timed calls rotate over the arms round by round.

Per case: each arm's median and p10/p90 in us per layer, the GB/s that is, and its fraction of
the read bound (``of_read_bound``: the bandwidth of a large ATen ``sum``, the best of a few,
the same measure as ``hf_generate.py``'s roofline); and ext's speed-up over max-autotune with
the 10th-90th percentile of that ratio round by round (a spread that holds 1.0 is within noise).
Where both compiled arms sit near 1.0, no kernel choice can make decode much faster here.

Written on a 2-core AVX-512 VM (2026-12-05): the read bound measured 34.8 GB/s, and the compiled
arms ran at 0.72-0.96 of it in fp32 and 0.76-0.97 in bf16 (eager 0.32-0.62). For fp32 768x768 and
768x32000 the two compiled arms ran the same generated GEMM (micro-kernel and blocking, compared
in their code), yet ext/max-autotune read 0.93 and 0.94: between arms of one process a few
percent is where each arm's packed weights sit in memory, not which kernel it chose.

    python bench/cpu_decode_linears.py [--json] [--dtypes float32,bfloat16] [--rounds 30] [--quick]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from hf_generate import read_bandwidth  # noqa: E402  (bench/, beside this script)
from side_by_side import parse, parser, speedup, spread, time_rounds  # noqa: E402

from inductor_ext.lowering.cold_timing import last_level_cache_bytes  # noqa: E402

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
    ext = torch.compile(model, backend="ext", options={"autotune_cache": cache})

    def frozen(x: torch.Tensor) -> torch.Tensor:
        with torch._inductor.config.patch(freezing=True):
            return max_autotune(x)

    return {"eager": model, "inductor_max_autotune": frozen, "ext": ext}


def measure(k: int, n: int, dtype: torch.dtype, weight_bytes: int, rounds: int, bandwidth: float,
            cache: str) -> dict[str, Any]:
    per_layer = k * n * dtype.itemsize
    layers = max(2, -(-weight_bytes // per_layer))
    torch.manual_seed(k * n)
    model = Chain(k, n, layers, dtype).eval()
    x = torch.randn(1, k, dtype=dtype)
    with torch.no_grad():
        fns = compiled_arms(model, cache)
        outputs = {name: fn(x) for name, fn in fns.items()}  # compiles and warms each
        for fn in fns.values():
            fn(x)
        seconds = time_rounds({name: (lambda fn=fn: fn(x)) for name, fn in fns.items()}, rounds)
    ref = outputs["eager"].float()
    arms: dict[str, Any] = {}
    for name, secs in seconds.items():
        figures = spread(secs, 1e6 / layers, "us")
        gb_s = per_layer / (figures["median_us"] * 1e-6) / 1e9
        arms[name] = {**{key: round(v, 2) for key, v in figures.items()}, "gb_s": round(gb_s, 2),
                      "of_read_bound": float(f"{gb_s * 1e9 / bandwidth:.3g}"),
                      "max_abs_difference": float((outputs[name].float() - ref).abs().max())}
    return {"in": k, "out": n, "dtype": str(dtype).removeprefix("torch."), "layers": layers,
            "weight_mb": round(layers * per_layer / 2**20, 1), "arms": arms,
            "ext_vs_max_autotune": {key: (round(v, 3) if isinstance(v, float) else [round(e, 3) for e in v])
                                    for key, v in speedup(seconds["inductor_max_autotune"], seconds["ext"]).items()}}


def main() -> None:
    p = parser(__doc__, rounds=30, quick="two small shapes, 256 KiB of weights each, three rounds: a smoke run")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated (default float32,bfloat16)")
    args = parse(p, {"rounds": 3})
    shapes = ((64, 96), (96, 40)) if args.quick else SHAPES
    weight_bytes = (256 << 10) if args.quick else LLC_MULTIPLE * last_level_cache_bytes()
    bandwidth = read_bandwidth(torch.get_num_threads())
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.dtypes.split(","):
            dtype = getattr(torch, name.strip())
            for k, n in shapes:
                case = measure(k, n, dtype, weight_bytes, args.rounds, bandwidth, str(Path(tmp) / "autotune.db"))
                cases.append(case)
                if not args.json:
                    arms = "  ".join(f"{arm} {f['median_us']:.1f} us {f['of_read_bound']:.2f}"
                                     for arm, f in case["arms"].items())
                    ratio = case["ext_vs_max_autotune"]
                    print(f"{case['dtype']:8s} {k}x{n:<6d} ({case['layers']} layers, {case['weight_mb']} MB)  {arms}  "
                          f"ext/max-autotune {ratio['speedup']:.2f}x [{ratio['speedup_p10_p90'][0]:.2f}, "
                          f"{ratio['speedup_p10_p90'][1]:.2f}]")
    figures = {"read_bandwidth_gb_s": round(bandwidth / 1e9, 2), "threads": torch.get_num_threads(),
               "rounds": args.rounds, "quick": args.quick, "cases": cases}
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print(f"read bound: {figures['read_bandwidth_gb_s']} GB/s (a large ATen sum), {figures['threads']} threads; "
              "per arm: us per layer and its fraction of the read bound")


if __name__ == "__main__":
    main()
