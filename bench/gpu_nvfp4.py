"""Prepared device check for a lent Hopper GPU (tier D): NVFP4-weight GEMMs and the PDL chain.

Imports only inductor_ext.kernels / templates (no torch._inductor), so it runs on the lent
machine's torch 2.11 / triton 3.6. Measured side by side in one run, on decode shapes:

1. NVFP4-weight GEMM, bf16 activations (Llama-3-8B/70B projections, M in 1..64):
   ext's on-chip dequant template (triton.nvfp4_dequant_gemm, wgmma) vs ATen on the same
   weights (dequantized once to bf16, then torch.mm) — what a user without ext would run on
   Hopper, which has no FP4 tensor cores. Also checks the numbers against the reference.
2. The PDL chain: that GEMM followed by a pointwise consumer (silu(x) + 1), with and without
   programmatic dependent launch, and the `auto` rule's choice for the shape.

    python bench/gpu_nvfp4.py --out nvfp4.json [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cuda_graph_timing import graph_samples  # noqa: E402  (bench/, beside this script)
from inductor_ext.autotune import pdl_policy  # noqa: E402
from inductor_ext.kernels import nvfp4, pdl_consumer, scaled_gemm  # noqa: E402
from inductor_ext.templates.triton import nvfp4_dequant_gemm as dq  # noqa: E402

SHAPES = {  # name: (N, K)
    "llama3-8b.qkv": (6144, 4096),
    "llama3-8b.o": (4096, 4096),
    "llama3-8b.down": (4096, 14336),
    "llama3-70b.qkv": (10240, 8192),
    "llama3-70b.down": (8192, 28672),
}


def timed(fn, reps: int = 50) -> float:
    """Median microseconds per call of ``fn`` (``cuda_graph_timing``: replayed from a CUDA graph,
    so the Python launch overhead of either arm does not count)."""
    return statistics.median(graph_samples(fn, reps))


def consumer(x: torch.Tensor, use_pdl: bool) -> torch.Tensor:
    out = torch.empty_like(x)
    n, block = x.numel(), 1024
    pdl_consumer.pdl_consumer_kernel[(-(-n // block),)](x, out, n, BLOCK=block, USE_PDL=use_pdl,
                                                        launch_pdl=use_pdl)
    return out


def run(shapes: dict[str, tuple[int, int]], batches: list[int]) -> list[dict]:
    rows = []
    for name, (n, k) in shapes.items():
        torch.manual_seed(0)
        w = nvfp4.quantize_nvfp4(torch.randn(n, k, device="cuda") / k**0.5)
        w_bf16 = nvfp4.dequantize_nvfp4(w, apply_global_scale=True).to(torch.bfloat16)
        for m in batches:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            problem = dq.Nvfp4DequantGemmProblem(m, n, k, "bfloat16", "bfloat16")
            config = dq.configs(problem, "sm_90a")[0]
            ours = dq.run(x, w, config, target="sm_90a")
            want = scaled_gemm.scaled_mm_reference(x.float(), w, out_dtype=torch.float32)
            err = ((ours.float() - want).abs().max() / want.abs().max()).item()
            t_ext = timed(lambda: dq.run(x, w, config, target="sm_90a"))
            t_aten = timed(lambda: torch.mm(x, w_bf16.t()))
            chain_off = timed(lambda: consumer(dq.run(x, w, config, target="sm_90a"), False))
            chain_on = timed(lambda: consumer(dq.run(x, w, config, target="sm_90a", use_pdl=True), True))
            rows.append({
                "shape": name, "m": m, "n": n, "k": k, "config": config.name(), "rel_err": err,
                "ext_us": t_ext, "aten_us": t_aten, "ext_speedup_vs_aten": t_aten / t_ext,
                "chain_us_pdl_off": chain_off, "chain_us_pdl_on": chain_on,
                "pdl_speedup": chain_off / chain_on,
                "auto_rule_enables_pdl": pdl_policy.use_pdl("auto", m, n, k, True),
            })
            print(f"{name:16s} M={m:3d}  ext {t_ext:8.1f}us  aten {t_aten:8.1f}us  "
                  f"x{t_aten / t_ext:5.2f}  chain off/on {chain_off:7.1f}/{chain_on:7.1f}us  "
                  f"x{chain_off / chain_on:5.2f}  auto={rows[-1]['auto_rule_enables_pdl']}  err {err:.1e}",
                  flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="gpu_nvfp4.json")
    parser.add_argument("--quick", action="store_true", help="two shapes, M in (1, 16)")
    args = parser.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        sys.exit("bench/gpu_nvfp4.py needs a Hopper GPU (sm_90); none is visible here")
    shapes = dict(list(SHAPES.items())[:2]) if args.quick else SHAPES
    batches = [1, 16] if args.quick else [1, 8, 16, 32, 64]
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__, "rows": run(shapes, batches)}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
