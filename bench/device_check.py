"""One device check for a lent NVIDIA GPU (tier D, issue 30): every NVIDIA template family.

Runs on the lent machine's image (torch 2.11, triton 3.6, no package installs) in one go, within
8 minutes on an H200: it imports only ``kernels``, ``templates``, ``autotune``, ``runtime`` and
``targets`` (never ``torch._inductor``; ``--dry-run`` checks that). Per family that can run on the
visible GPU (its target: sm_90a on Hopper, sm_100a on Blackwell), in this order:

1. numerics: every config the policies offer (``autotune.policy.candidates``, effort "full",
   less what the family's ``config_supports`` refuses) on a decode and a prefill shape, against
   the family's plain-torch reference; a failure here skips the family's timings;
2. speed against ATen (cuBLAS / cuBLASLt: ``torch.mm``, or ``torch.mm`` on the dequantized
   weight for the NVFP4 families on Hopper, ``torch._scaled_mm`` on Blackwell) on decode and
   prefill shapes: each candidate timed from a CUDA graph, the best reported with its spread
   (p10 / p50 / p90 of the samples);
3. PDL on / off: the GEMM followed by a pointwise consumer (``kernels.pdl_consumer``), both
   launched with and without programmatic dependent launch (Triton families);
4. TF32 semantics (triton.gemm): fp32 inputs with ``allow_tf32=False`` must match the fp64
   reference as full fp32 does, and with ``allow_tf32=True`` like ATen under
   ``torch.backends.cuda.matmul.allow_tf32``.

The JSON (``--out``) has one entry per family with ``ok`` (true, false, or null with a
``skipped`` reason when the GPU is not the family's target) and the measurements.

    python bench/device_check.py --out device_check.json      # on the lent GPU
    python bench/device_check.py --dry-run                    # here: imports + the list of checks
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402  (loads ext's torch.backends entry point: _torch_plugin, logs; not ours to count)

_LOADED_BY_TORCH = set(sys.modules)

from cuda_graph_timing import graph_samples  # noqa: E402  (bench/, beside this script)
from inductor_ext import targets  # noqa: E402
from inductor_ext.autotune import pdl_policy, policy  # noqa: E402
from inductor_ext.kernels import matmul, nvfp4, pdl_consumer, scaled_gemm  # noqa: E402
from inductor_ext.templates.cutedsl import nvfp4_gemm as cutedsl_nvfp4  # noqa: E402
from inductor_ext.templates.triton import gemm, nvfp4_dequant_gemm, nvfp4_gemm  # noqa: E402

# The layer rule: what this check imports of ours, and that none of it pulled in torch._inductor
# (quack, the CuTeDSL family's library, imports torch._dynamo itself when its configs are checked).
LAYERS = ("kernels", "templates", "autotune", "runtime", "targets")
INDUCTOR_AT_IMPORT = "torch._inductor" in sys.modules

BUDGET_S = 8 * 60
DECODE_M = (1, 16)
PREFILL_M = (512,)
N, K = 4096, 4096
# Relative max error (max |ours - ref| / max |ref|) allowed per family: the references are fp64 /
# fp32 math on the same operands, so this only absorbs accumulation order and the one rounding
# of the output (bf16: 2^-8); a dtype mistake (fp16 accumulate, a missing scale) is far above.
TOLERANCE = {"triton.gemm": 2e-2, "triton.nvfp4_gemm": 2e-2, "triton.nvfp4_dequant_gemm": 2e-2,
             "cutedsl.nvfp4_gemm": 2e-2}
TF32_FULL_TOL = 1e-4  # full fp32 on K=4096 normal values: ~1e-6 seen; TF32 (10-bit mantissa) ~1e-3


@dataclasses.dataclass(frozen=True)
class Check:
    """One family on one target: the shapes it runs and the configs offered for each."""

    family: str
    target: str
    shapes: tuple[tuple[int, int, int], ...]
    configs: dict[tuple[int, int, int], list[Any]]
    pdl: bool  # the family takes use_pdl (PDL on/off is timed): every NVIDIA family, CuTeDSL's too
    tf32: bool  # the family's TF32 semantics are checked


FAMILIES: dict[str, ModuleType] = {
    gemm.NAME: gemm, nvfp4_gemm.NAME: nvfp4_gemm, nvfp4_dequant_gemm.NAME: nvfp4_dequant_gemm,
    cutedsl_nvfp4.NAME: cutedsl_nvfp4,
}


def _problem(family: ModuleType, m: int, n: int, k: int) -> Any:
    if family is gemm:
        return gemm.GemmProblem(m, n, k, "bfloat16")
    return family.example_problem(m, n, k)


def offered(family: ModuleType, problem: Any, target: str) -> list[Any]:
    """What autotuning would benchmark for ``problem`` (as ``inductor-ext asm --all-configs``)."""
    record = family.FAMILY
    return [c.config for c in policy.candidates(record, problem, target, "full")
            if record.config_supports is None or not record.config_supports(problem, c.config, target)]


def build_checks(target: str) -> tuple[list[Check], dict[str, str]]:
    """The checks for a GPU of ``target``, and the families skipped with why."""
    checks, skipped = [], {}
    for name, family in FAMILIES.items():
        if target not in family.TARGETS:
            skipped[name] = f"{name} runs on {', '.join(t for t in family.TARGETS if t != 'cpu')}, not {target}"
            continue
        shapes = tuple((m, N, K) for m in DECODE_M + PREFILL_M)
        configs = {s: offered(family, _problem(family, *s), target) for s in shapes}
        checks.append(Check(name, target, shapes, configs, pdl=True, tf32=family is gemm))
    return checks, skipped


# ------------------------------------------------------------------------------ device side


def timed(fn: Callable[[], Any], reps: int = 30) -> dict[str, float]:
    """Microseconds per call (``cuda_graph_timing``): p10 / p50 / p90 of ``reps`` samples."""
    samples = graph_samples(fn, reps)
    q = statistics.quantiles(samples, n=10)
    return {"p10": q[0], "p50": statistics.median(samples), "p90": q[-1]}


def _rel_err(got: Any, want: Any) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-30)).item()


class Operands:
    """A family's inputs for one shape, its launch per config and its ATen baseline."""

    def __init__(self, family: str, target: str, m: int, n: int, k: int) -> None:
        torch.manual_seed(0)
        self.family, self.target = family, target
        x = torch.randn(m, k, device="cuda") / k**0.25
        w = torch.randn(n, k, device="cuda") / k**0.25
        if family == gemm.NAME:
            self.a, self.b = x.to(torch.bfloat16), w.t().contiguous().to(torch.bfloat16)
            self.want = matmul.mm_reference(self.a.double(), self.b.double())
            self.aten = lambda: torch.mm(self.a, self.b)
        else:
            wq = nvfp4.quantize_nvfp4(w)
            self.w = wq
            w_deq = nvfp4.dequantize_nvfp4(wq, apply_global_scale=True).to(torch.bfloat16)
            if family == nvfp4_dequant_gemm.NAME:
                self.a = x.to(torch.bfloat16)
                self.want = scaled_gemm.scaled_mm_reference(self.a.float(), wq, out_dtype=torch.float32)
                self.aten = lambda: torch.mm(self.a, w_deq.t())  # Hopper has no FP4 tensor cores
            else:
                xq = nvfp4.quantize_nvfp4(x)
                self.a = xq
                self.want = scaled_gemm.scaled_mm_reference(xq, wq, out_dtype=torch.float32)
                sa, sb = nvfp4.to_blocked(xq.scales), nvfp4.to_blocked(wq.scales)
                alpha = (xq.global_scale * wq.global_scale).float().reshape(1).cuda()
                self.scales = (sa, sb, alpha)
                fp4 = torch.float4_e2m1fn_x2
                self.codes = (xq.qdata.view(fp4), wq.qdata.view(fp4))
                # cuBLASLt's block-scaled GEMM; alpha as one more kernel (no global scale in its API)
                self.aten = lambda: torch._scaled_mm(self.codes[0], self.codes[1].t(), sa, sb,
                                                     out_dtype=torch.bfloat16) * alpha

    def run(self, config: Any, use_pdl: bool = False) -> Any:
        t = self.target
        if self.family == gemm.NAME:
            return gemm.run(self.a, self.b, config, target=t, use_pdl=use_pdl)
        if self.family == nvfp4_dequant_gemm.NAME:
            return nvfp4_dequant_gemm.run(self.a, self.w, config, target=t, use_pdl=use_pdl)
        if self.family == nvfp4_gemm.NAME:
            return nvfp4_gemm.run(self.a, self.w, config, scale_layout="blocked", target=t, use_pdl=use_pdl)
        sa, sb, alpha = self.scales
        return cutedsl_nvfp4.run(*self.codes, sa, sb, config, alpha=alpha, use_pdl=use_pdl)


def consumer(x: Any, use_pdl: bool) -> Any:
    out = torch.empty_like(x)
    n, block = x.numel(), 1024
    pdl_consumer.pdl_consumer_kernel[(-(-n // block),)](x, out, n, BLOCK=block, USE_PDL=use_pdl, launch_pdl=use_pdl)
    return out


def check_tf32(target: str) -> dict[str, Any]:
    """fp32 GEMM: full fp32 unless TF32 is allowed, as ATen."""
    torch.manual_seed(0)
    a, b = torch.randn(256, 1024, device="cuda"), torch.randn(1024, 256, device="cuda")
    want = matmul.mm_reference(a.double(), b.double())
    out = {}
    for allow in (False, True):
        problem = gemm.GemmProblem(256, 256, 1024, "float32", allow_tf32=allow)
        config = offered(gemm, problem, target)[0]
        ours = gemm.run(a, b, config, target=target, allow_tf32=allow)
        torch.backends.cuda.matmul.allow_tf32 = allow
        aten = torch.mm(a, b)
        torch.backends.cuda.matmul.allow_tf32 = False
        out["tf32" if allow else "full"] = {"ext_err": _rel_err(ours, want), "aten_err": _rel_err(aten, want)}
    full, tf32 = out["full"], out["tf32"]
    out["ok"] = full["ext_err"] < TF32_FULL_TOL and tf32["ext_err"] < 10 * max(tf32["aten_err"], TF32_FULL_TOL)
    return out


def run_check(check: Check, deadline: float) -> dict[str, Any]:
    result: dict[str, Any] = {"target": check.target, "numerics": [], "speed": [], "pdl": [], "ok": True}
    tol = TOLERANCE[check.family]
    for shape in check.shapes:  # 1. numerics first, every offered config
        ops = Operands(check.family, check.target, *shape)
        for config in check.configs[shape]:
            err = _rel_err(ops.run(config), ops.want)
            result["numerics"].append({"shape": shape, "config": repr(config), "rel_err": err, "ok": err <= tol})
            result["ok"] &= err <= tol
    if not result["ok"]:
        result["speed_skipped"] = "numerics failed"
        return result
    for shape in check.shapes:  # 2. speed against ATen, with spread
        if time.monotonic() > deadline:
            result["speed_skipped"] = f"past the {BUDGET_S} s budget"
            break
        ops = Operands(check.family, check.target, *shape)
        times = {repr(c): timed(lambda c=c: ops.run(c)) for c in check.configs[shape]}
        best = min(times, key=lambda c: times[c]["p50"])
        aten = timed(ops.aten)
        result["speed"].append({"shape": shape, "best_config": best, "ext_us": times[best], "aten_us": aten,
                                "ext_vs_aten": aten["p50"] / times[best]["p50"], "all_configs_us": times})
        if check.pdl:  # 3. PDL on / off around the best config
            config = next(c for c in check.configs[shape] if repr(c) == best)
            off = timed(lambda: consumer(ops.run(config), False))
            on = timed(lambda: consumer(ops.run(config, use_pdl=True), True))
            result["pdl"].append({"shape": shape, "off_us": off, "on_us": on, "on_vs_off": off["p50"] / on["p50"],
                                  "auto_rule": pdl_policy.use_pdl("auto", *shape, True)})
    if check.tf32:  # 4. TF32 semantics
        result["tf32"] = check_tf32(check.target)
        result["ok"] &= result["tf32"]["ok"]
    return result


def device_target() -> str:
    major, minor = torch.cuda.get_device_capability()
    name = {9: "sm_90a", 10: "sm_100a"}.get(major)
    if name is None:
        sys.exit(f"bench/device_check.py needs an sm_90 or sm_100 GPU; this one is sm_{major}{minor}")
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="device_check.json")
    parser.add_argument("--dry-run", action="store_true",
                        help="import everything the check launches and print the checks, without a GPU")
    parser.add_argument("--target", choices=("sm_90a", "sm_100a"),
                        help="with --dry-run: the GPU to plan for (default sm_90a, the lent H200)")
    args = parser.parse_args(argv)
    if args.dry_run:
        plans = {}
        for target in (args.target,) if args.target else ("sm_90a", "sm_100a"):
            assert targets.vendor(target) == "nvidia"
            checks, skipped = build_checks(target)
            plans[target] = {"checks": {c.family: {str(s): [repr(x) for x in c.configs[s]] for s in c.shapes}
                                        for c in checks}, "skipped": skipped}
            empty = [f"{c.family} {s}" for c in checks for s in c.shapes if not c.configs[s]]
            if empty:
                sys.exit(f"no config offered for: {', '.join(empty)}")
        ours = sorted(m for m in set(sys.modules) - _LOADED_BY_TORCH if m.startswith("inductor_ext.")
                      and m.split(".")[1] not in LAYERS and m != "inductor_ext.config")  # config: the pure-data leaf targets read
        if INDUCTOR_AT_IMPORT or ours:  # checked after planning: the policies import too
            sys.exit(f"bench/device_check.py imported {ours or 'torch._inductor'}: only {', '.join(LAYERS)} "
                     "may be imported (the lent image's torch 2.11 need not match torch._inductor)")
        print(json.dumps(plans, indent=1))
        return 0
    if not torch.cuda.is_available():
        sys.exit("bench/device_check.py needs a CUDA GPU; use --dry-run here")
    deadline = time.monotonic() + BUDGET_S
    target = device_target()
    checks, skipped = build_checks(target)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "target": target, "torch": torch.__version__,
                              "triton": __import__("triton").__version__, "families": {}}
    for name, why in skipped.items():
        report["families"][name] = {"ok": None, "skipped": why}
    for check in checks:
        t0 = time.monotonic()
        try:
            report["families"][check.family] = run_check(check, deadline)
        except Exception as e:  # one family's failure is its own `ok: false`, the others still run
            report["families"][check.family] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        report["families"][check.family]["seconds"] = round(time.monotonic() - t0, 1)
        print(check.family, "ok" if report["families"][check.family]["ok"] else "FAILED", flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {args.out}")
    return 0 if all(f["ok"] is not False for f in report["families"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
