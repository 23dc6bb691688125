"""Prepared device check for a lent AMD GPU (tier D): every AMD template family against ATen
(hipBLASLt / hipBLAS / ATen's kernels), correctness first, then timing side by side in one run.

MI350/MI355 (gfx950): flydsl.gemm (4 layouts), flydsl.grouped_mm (MoE), flydsl.mx_scaled_mm
(MXFP8/MXFP4), helion.rmsnorm, helion.softmax, triton.topk (sampling rows, MoE routers). MI450 (gfx1250): flydsl.tdm_gemm (bf16, fp8),
triton.tdm_gemm (bf16, fp8), flydsl.gemm, flydsl.grouped_mm.

The first run on hardware must look at the "ok" column before any timing: the FlyDSL kernels were
only compiled and modelled on the host, so a wrong assumption about an instruction's lane layout
(MFMA/WMMA accumulators, the scaled MFMA's per-lane block scale) shows up here as a numerics
failure on the small shapes, which run first (a 16x16x32 single-instruction shape included).

    python bench/rocm_gemm.py --out rocm_gemm.json [--quick]
    python bench/rocm_gemm.py --smoke      # no GPU: every case's problem, config and source;
                                           # the Triton/Helion variants run in Triton's interpreter

Imports only inductor_ext.kernels / templates / runtime (no torch._inductor). Times are medians
of CUDA-event timings (HIP) with the 10th-90th percentile spread; a ratio within the spreads is
"within noise", not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

if "--smoke" in sys.argv and "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the smoke path runs Triton kernels on the CPU

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inductor_ext.kernels import matmul, mx, norms, scaled_gemm, softmax as softmax_ref  # noqa: E402
from inductor_ext.kernels.nvfp4 import to_blocked  # noqa: E402

GEMM_SHAPES = [(16, 16, 32), (1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (4096, 4096, 4096),
               (4096, 14336, 4096), (37, 1000, 520)]  # (M, N, K): layout probe first, odd last
MOE = [(8, 4096, 2048, 1408), (64, 8192, 2048, 1408)]  # (experts, tokens, N, K)
NORM_SHAPES = [(1, 4096), (4096, 4096), (4096, 8192), (37, 1000)]
TOPK_CASES = [(1, 32000, 50, "bfloat16"), (64, 128256, 50, "bfloat16"), (8192, 128, 8, "float32"),
              (8192, 256, 8, "bfloat16"), (37, 1000, 7, "float16")]  # (rows, n, k, dtype): odd last


def timed(fn: Callable[[], Any], reps: int = 30) -> dict[str, float]:
    """Microseconds per call: median and 10th/90th percentiles of event-timed calls after warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1000)
    q = statistics.quantiles(samples, n=10)
    return {"median": statistics.median(samples), "p10": q[0], "p90": q[-1]}


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.float()
    return ((got.float() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def _row(family: str, case: str, config: Any, got: torch.Tensor, want: torch.Tensor, tol: float,
         ext: Callable[[], Any] | None, aten: Callable[[], Any] | None, device: bool) -> dict[str, Any]:
    err = rel_err(got, want)
    row = {"family": family, "case": case, "config": getattr(config, "name", lambda: str(config))(),
           "rel_err": err, "ok": bool(err <= tol)}
    if device and row["ok"] and ext is not None and aten is not None:
        row["ext_us"], row["aten_us"] = timed(ext), timed(aten)
        row["speedup_vs_aten"] = row["aten_us"]["median"] / row["ext_us"]["median"]
        overlap = row["ext_us"]["p90"] >= row["aten_us"]["p10"] and row["aten_us"]["p90"] >= row["ext_us"]["p10"]
        row["verdict"] = "within noise" if overlap else ("faster" if row["speedup_vs_aten"] > 1 else "slower")
    print(json.dumps(row), flush=True)
    return row


# ---------------------------------------------------------------------------------- cases


def dense(arch: str, dev: str, shapes: list[tuple[int, int, int]], device: bool) -> list[dict]:
    from inductor_ext.templates.flydsl import gemm

    rows = []
    for m, n, k in shapes:
        for a_km, b_km in ((True, True), (True, False), (False, True), (False, False)):
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
            a = a if a_km else a.t().contiguous().t()
            b = b.t().contiguous().t() if b_km else b
            problem = gemm.GemmProblem(m, n, k, "bfloat16", a_km, b_km, gemm.common.major(a.stride(), 1, 0, k)[1]
                                       and gemm.common.major(b.stride(), 0, 1, k)[1])
            config = gemm.configs(problem, arch)[0]
            case = f"bf16 {m}x{n}x{k} A{'k' if a_km else 'm'}B{'k' if b_km else 'n'}"
            if not device:
                gemm.render(problem, config, arch)
                print(json.dumps({"family": gemm.NAME, "case": case, "config": config.name(), "smoke": "rendered"}))
                continue
            rows.append(_row(gemm.NAME, case, config, gemm.call(problem, config, arch, a, b),
                             matmul.mm_reference(a, b), 2e-2, lambda: gemm.call(problem, config, arch, a, b),
                             lambda: torch.mm(a, b), device))
    return rows


def grouped(arch: str, dev: str, device: bool) -> list[dict]:
    from inductor_ext.templates.flydsl import grouped_mm as gm

    rows = []
    for experts, tokens, n, k in MOE:
        counts = torch.distributions.Dirichlet(torch.ones(experts)).sample() * tokens
        offs = torch.cumsum(counts.round().int(), 0).clamp(max=tokens).int().to(dev)
        a = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(experts, n, k, device=dev, dtype=torch.bfloat16).transpose(1, 2)  # Linear weights
        problem = gm.GroupedMmProblem(tokens, n, k, experts, b_k_major=True)
        config = gm.configs(problem, arch)[0]
        case = f"moe E={experts} T={tokens} N={n} K={k}"
        if not device:
            gm.render(problem, config, arch)
            print(json.dumps({"family": gm.NAME, "case": case, "config": config.name(), "smoke": "rendered"}))
            continue
        end = int(offs[-1])
        got = gm.call(problem, config, arch, a, w, offs)[:end]
        want = matmul.grouped_mm_reference(a.cpu(), w.cpu(), offs.cpu())[:end]
        rows.append(_row(gm.NAME, case, config, got.cpu(), want, 2e-2, lambda: gm.call(problem, config, arch, a, w, offs),
                         lambda: torch._grouped_mm(a, w, offs=offs), device))
    return rows


def mx_cases(dev: str, shapes: list[tuple[int, int, int]], device: bool) -> list[dict]:
    from inductor_ext.templates.flydsl import mx_scaled_mm as mxf

    rows = []
    for m, n, k in [s for s in shapes if s[2] % 32 == 0]:
        for fmt, quantize in (("fp8_e4m3", mx.quantize_mxfp8), ("fp4_e2m1", mx.quantize_mxfp4)):
            xq, wq = quantize(torch.randn(m, k)), quantize(torch.randn(n, k))
            problem = mxf.MxScaledMmProblem(m, n, k, fmt, "blocked")
            config = mxf.configs(problem, "gfx950")[0]
            case = f"{fmt} {m}x{n}x{k}"
            if not device:
                mxf.render(problem, config)
                print(json.dumps({"family": mxf.NAME, "case": case, "config": config.name(), "smoke": "rendered"}))
                continue
            dt = torch.float8_e4m3fn if fmt == "fp8_e4m3" else torch.float4_e2m1fn_x2
            a, w = xq.qdata.view(dt).to(dev), wq.qdata.view(dt).to(dev)
            sa, sb = (to_blocked(q.scales).to(dev) for q in (xq, wq))
            want = scaled_gemm.scaled_mm_reference(xq, wq, out_dtype=torch.float32)
            got = mxf.call(problem, config, "gfx950", a, w.t(), sa, sb)
            rows.append(_row(mxf.NAME, case, config, got.cpu(), want, 2e-2,
                             lambda: mxf.call(problem, config, "gfx950", a, w.t(), sa, sb),
                             lambda: torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16), device))
    return rows


def tdm_cases(dev: str, shapes: list[tuple[int, int, int]], device: bool) -> list[dict]:
    from inductor_ext.templates.flydsl import tdm_gemm as ftdm
    from inductor_ext.templates.triton import tdm_gemm as ttdm

    rows = []
    for m, n, k in [s for s in shapes if s[2] % 128 == 0]:
        for dtype in ("bfloat16", "float8_e4m3fn"):
            fp8 = dtype == "float8_e4m3fn"
            x = torch.randn(m, k, device=dev) * (4 if fp8 else 1)
            w = torch.randn(n, k, device=dev) * (4 if fp8 else 1)
            x, w = x.to(getattr(torch, dtype)), w.to(getattr(torch, dtype))
            sa = sb = torch.tensor(1.0, device=dev)
            for fam, launch in ((ftdm, ftdm.call), (ttdm, ttdm.run)):
                problem = fam.TdmGemmProblem(m, n, k, dtype, "bfloat16", scaling="tensor" if fp8 else "none")
                config = fam.configs(problem, "gfx1250")[0]
                case = f"{dtype} {m}x{n}x{k}"
                args = (x, w.t(), sa, sb) if fp8 else (x, w.t())
                want = scaled_gemm.scaled_mm_reference(x.cpu(), w.cpu(), out_dtype=torch.float32)
                if not device:
                    if fam is ttdm and m * n * k <= 16 * 16 * 128:  # the interpreter runs the Triton one
                        config = ttdm.INTERPRETER_CONFIGS[0]
                        got = launch(problem, config, "gfx1250", *args)
                        rows.append(_row(fam.NAME, case + " (interpreter)", config, got, want, 2e-2, None, None, False))
                    else:
                        fam.render(problem, config)
                        print(json.dumps({"family": fam.NAME, "case": case, "config": config.name(), "smoke": "rendered"}))
                    continue
                aten = (lambda: torch._scaled_mm(x, w.t(), sa, sb, out_dtype=torch.bfloat16)) if fp8 else \
                    (lambda: torch.mm(x, w.t()))
                rows.append(_row(fam.NAME, case, config, launch(problem, config, "gfx1250", *args).cpu(), want, 2e-2,
                                 lambda: launch(problem, config, "gfx1250", *args), aten, device))
    return rows


def norm_cases(dev: str, device: bool) -> list[dict]:
    from inductor_ext.templates.helion import rmsnorm, softmax

    rows = []
    for rows_, n in NORM_SHAPES if device else NORM_SHAPES[-1:]:
        x = torch.randn(rows_, n, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, device=dev, dtype=torch.bfloat16)
        p = rmsnorm.RmsNormProblem(rows_, n, "bfloat16", 1e-6)
        c = rmsnorm.configs(p, "gfx950")[0]
        rows.append(_row(rmsnorm.NAME, f"{rows_}x{n}", c, rmsnorm.call(p, c, "gfx950", x, w).cpu(),
                         norms.rms_norm_reference(x.cpu(), w.cpu()), 2e-2, lambda: rmsnorm.call(p, c, "gfx950", x, w),
                         lambda: torch.nn.functional.rms_norm(x, (n,), w, 1e-6), device))
        ps = softmax.SoftmaxProblem(rows_, n, "bfloat16")
        rows.append(_row(softmax.NAME, f"{rows_}x{n}", c, softmax.call(ps, c, "gfx950", x).cpu(),
                         softmax_ref.softmax_reference(x.cpu()), 2e-2, lambda: softmax.call(ps, c, "gfx950", x),
                         lambda: torch.softmax(x, -1), device))
    return rows


def topk_cases(dev: str, device: bool) -> list[dict]:
    """triton.topk vs torch.topk: the values its indices pick must be the reference's exactly."""
    from inductor_ext.kernels.topk import topk_reference
    from inductor_ext.templates.triton import topk

    rows = []
    for rows_, n, k, dtype in TOPK_CASES if device else TOPK_CASES[-1:]:
        x = torch.randn(rows_, n, device=dev).to(getattr(torch, dtype))
        p = topk.TopkProblem(rows_, n, k, True, dtype)
        for c in topk.configs(p, "gfx950")[: None if device else 1]:
            got = x.gather(-1, topk.call(p, c, "gfx950", x)).cpu()
            rows.append(_row(topk.NAME, f"{rows_}x{n}_k{k}_{dtype}", c, got, topk_reference(x.cpu(), k)[0], 0.0,
                             lambda: topk.call(p, c, "gfx950", x), lambda: torch.topk(x, k), device))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="rocm_gemm.json")
    parser.add_argument("--quick", action="store_true", help="the layout probe, one decode and one odd shape")
    parser.add_argument("--smoke", action="store_true", help="no GPU: render every case, interpret what can run")
    args = parser.parse_args()
    shapes = [GEMM_SHAPES[0], GEMM_SHAPES[2], GEMM_SHAPES[-1]] if args.quick or args.smoke else GEMM_SHAPES
    if args.smoke:
        arch, dev, device = "smoke", "cpu", False
        from inductor_ext.runtime.triton_interp import apply_interpreter_fixes

        apply_interpreter_fixes()
    else:
        if torch.version.hip is None or not torch.cuda.is_available():
            sys.exit("bench/rocm_gemm.py needs a ROCm GPU (MI350/MI355 gfx950 or MI450 gfx1250); use --smoke without one")
        arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
        dev, device = "cuda", True
        if arch not in ("gfx950", "gfx1250"):
            sys.exit(f"no AMD template family claims {arch}")
    torch.manual_seed(0)
    rows: list[dict] = []
    for target in ((arch,) if device else ("gfx950", "gfx1250")):
        rows += dense(target, dev, shapes, device)
        rows += grouped(target, dev, device)
        if target == "gfx950":
            rows += mx_cases(dev, shapes, device)
            rows += norm_cases(dev, device)
            rows += topk_cases(dev, device)
        else:
            rows += tdm_cases(dev, shapes if device else [(16, 16, 128)], device)
    result = {"arch": arch, "device": torch.cuda.get_device_name() if device else "cpu (smoke)",
              "torch": torch.__version__, "rows": rows, "failed": [r for r in rows if not r["ok"]]}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}: {len(rows)} checked, {len(result['failed'])} wrong")
    sys.exit(1 if result["failed"] else 0)


if __name__ == "__main__":
    main()
