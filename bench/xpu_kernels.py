"""SYCL vs Triton vs ATen, per kernel, on an Intel GPU (tier D), measured side by side in one run.

Arms, for each kernel and shape:
- ``aten``: eager PyTorch;
- ``triton``: ``torch.compile(backend="inductor")``, Inductor's own XPU codegen (Triton);
- ``sycl``: the same compile with ext's SYCL codegen installed (``codegen/sycl``);
- GEMMs: ``sycl.gemm`` (``templates/sycl/gemm.py``) with each default config, best one reported.

Every arm is checked against ATen (max abs error in the JSON) and timed after warm-up: median of
``--reps`` samples of ``--inner`` back-to-back calls, with the min and max sample as the spread.
Ratios are ATen time / arm time (> 1: faster than ATen); differences inside the spread are noise.

    python bench/xpu_kernels.py --out xpu_kernels.json            # on an Intel GPU
    python bench/xpu_kernels.py --smoke --out smoke.json          # CPU: SYCL on the OpenCL CPU device

``--smoke`` runs tiny shapes on the CPU (ATen, Inductor's C++ codegen in place of Triton, SYCL in
interpret mode on Intel's OpenCL CPU device): it proves the script works, not any speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inductor_ext.kernels.matmul import mm_reference  # noqa: E402
from inductor_ext.templates.sycl import gemm as sycl_gemm  # noqa: E402


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


# name -> (function, input shapes); the first input's last dim is the normalised/reduced one.
KERNELS: dict[str, tuple[Callable[..., torch.Tensor], Callable[[int, int], list[tuple[int, ...]]]]] = {
    "gelu_bias": (lambda x, b: F.gelu(x + b), lambda m, n: [(m, n), (n,)]),
    "row_sum": (lambda x: x.sum(-1), lambda m, n: [(m, n)]),
    "softmax": (lambda x: torch.softmax(x, -1), lambda m, n: [(m, n)]),
    "layernorm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), lambda m, n: [(m, n), (n,), (n,)]),
    "rmsnorm": (rms_norm, lambda m, n: [(m, n), (n,)]),
}
SHAPES = {"full": [(4096, 4096), (16384, 1024), (32, 32768)], "smoke": [(8, 300)]}
GEMM_SHAPES = {"full": [(1, 4096, 4096), (16, 4096, 4096), (2048, 2048, 2048), (4096, 4096, 1024)],
               "smoke": [(1, 64, 96), (37, 45, 70)]}


def synchronize(device: str) -> None:
    if device == "xpu":
        torch.xpu.synchronize()


def timed(fn: Callable[[], Any], device: str, reps: int, inner: int) -> dict[str, float]:
    """Median / min / max microseconds per call."""
    for _ in range(3):
        fn()
    synchronize(device)
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        synchronize(device)
        samples.append((time.perf_counter() - start) / inner * 1e6)
    return {"median_us": statistics.median(samples), "min_us": min(samples), "max_us": max(samples)}


@contextlib.contextmanager
def sycl_codegen(device: str):
    from inductor_ext.codegen.sycl import CODEGEN  # needs torch._inductor (torch 2.15)

    with CODEGEN.install(types.SimpleNamespace(interpret=device == "cpu")):
        yield


def compiled(fn: Callable[..., Any], arm: str, device: str, args: list[torch.Tensor]) -> Callable[[], Any]:
    """A zero-argument callable running ``fn`` as ``arm`` compiles it (compiled now)."""
    torch._dynamo.reset()
    ctx = sycl_codegen(device) if arm == "sycl" else contextlib.nullcontext()
    with ctx:
        c = torch.compile(fn, backend="inductor", dynamic=False)
        c(*args)  # compile inside the install; later calls run the compiled graph
    return lambda: c(*args)


def max_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got.double() - want.double()).abs().max().item()


def bench_kernels(device: str, dtype: torch.dtype, shapes: list[tuple[int, int]], reps: int,
                  inner: int) -> list[dict]:
    rows = []
    arms = ("aten", "triton" if device == "xpu" else "inductor_cpp", "sycl")
    for name, (fn, make_shapes) in KERNELS.items():
        for m, n in shapes:
            torch.manual_seed(0)
            args = [torch.randn(s, device=device, dtype=dtype) for s in make_shapes(m, n)]
            want = fn(*args)
            for arm in arms:
                row = {"kernel": name, "shape": [m, n], "dtype": str(dtype).removeprefix("torch."), "arm": arm}
                try:
                    run = (lambda: fn(*args)) if arm == "aten" else compiled(fn, arm, device, args)
                    row["max_abs_err"] = max_err(run(), want)
                    row.update(timed(run, device, reps, inner))
                except Exception as e:  # an arm that cannot run is reported, the others still run
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                rows.append(row)
    return rows


def bench_gemm(device: str, dtype: torch.dtype, shapes: list[tuple[int, int, int]], reps: int,
               inner: int) -> list[dict]:
    rows = []
    dname = str(dtype).removeprefix("torch.")
    for m, n, k in shapes:
        torch.manual_seed(0)
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        want = mm_reference(a.cpu(), b.cpu()).to(device)
        base = {"kernel": "mm", "shape": [m, n, k], "dtype": dname}
        rows.append({**base, "arm": "aten", "max_abs_err": max_err(a @ b, want),
                     **timed(lambda: a @ b, device, reps, inner)})
        problem = sycl_gemm.GemmProblem(m, n, k, dname)
        candidates = sycl_gemm.configs(problem, "xpu")
        sycl_gemm.prebuild([(problem, c) for c in candidates], "xpu", device)
        best = None
        for config in candidates:
            run = lambda config=config: sycl_gemm.call(problem, config, "xpu", a, b)  # noqa: E731
            row = {**base, "arm": f"sycl.gemm[{config.name()}]", "max_abs_err": max_err(run(), want),
                   **timed(run, device, reps, inner)}
            rows.append(row)
            best = row if best is None or row["median_us"] < best["median_us"] else best
        rows.append({**best, "arm": "sycl.gemm(best)"})
    return rows


def add_ratios(rows: list[dict]) -> None:
    aten = {(r["kernel"], tuple(r["shape"]), r["dtype"]): r for r in rows if r["arm"] == "aten" and "median_us" in r}
    for r in rows:
        ref = aten.get((r["kernel"], tuple(r["shape"]), r["dtype"]))
        if ref and "median_us" in r:
            r["speedup_vs_aten"] = ref["median_us"] / r["median_us"]
            # noise: the spreads of the two arms overlap
            r["within_noise"] = r["min_us"] <= ref["max_us"] and ref["min_us"] <= r["max_us"]


def print_table(rows: list[dict]) -> None:
    print(f"{'kernel':<11}{'shape':<18}{'dtype':<10}{'arm':<38}{'median us':>11}{'min..max':>20}{'x ATen':>9}  err")
    for r in rows:
        if "error" in r:
            print(f"{r['kernel']:<11}{str(r['shape']):<18}{r['dtype']:<10}{r['arm']:<38}  ERROR {r['error']}")
            continue
        ratio = f"{r['speedup_vs_aten']:.2f}" + ("~" if r["within_noise"] and r["arm"] != "aten" else "")
        spread = f"{r['min_us']:.1f}..{r['max_us']:.1f}"
        print(f"{r['kernel']:<11}{str(r['shape']):<18}{r['dtype']:<10}{r['arm']:<38}{r['median_us']:>11.1f}"
              f"{spread:>20}{ratio:>9}  {r['max_abs_err']:.1e}")
    print("(~: within noise, the min..max spreads overlap)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (OpenCL CPU device)")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--inner", type=int, default=None)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)

    device = "cpu" if args.smoke else "xpu"
    if device == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        print("no Intel GPU (torch.xpu.is_available() is False); run with --smoke for the CPU path")
        return 2
    from inductor_ext.runtime import sycl

    if sycl.missing():
        print(f"SYCL runtime missing: {sycl.missing()}")
        return 2
    size = "smoke" if args.smoke else "full"
    reps, inner = args.reps or (3 if args.smoke else 30), args.inner or (2 if args.smoke else 20)
    dtype = getattr(torch, args.dtype)
    rows = bench_kernels(device, dtype, SHAPES[size], reps, inner) + bench_gemm(device, dtype, GEMM_SHAPES[size],
                                                                                  reps, inner)
    add_ratios(rows)
    print_table(rows)
    result = {"device": device, "device_name": sycl.queue_for(device).info.name, "torch": torch.__version__,
              "reps": reps, "inner": inner, "results": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    failed = [r for r in rows if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
