"""One device check for a lent NVIDIA GPU (tier D, issue 30): every NVIDIA template family.

Runs on the lent machine's image (torch 2.11, triton 3.6, no package installs) in one go, within
8 minutes on an H200: it imports only ``kernels``, ``templates``, ``autotune``, ``runtime`` and
``targets`` (never ``torch._inductor``; ``--dry-run`` checks that). The families are the
registry's (``templates/registry.py``) that claim an NVIDIA target; each says what to run through
its record's ``device_cases(target)`` (``templates/device_case.py``: the problem, and on the GPU
the operands, the plain-torch reference and ATen's call), so this script has no per-family
branch. Per family that can run on the visible GPU (its target: sm_90a on Hopper, sm_100a on
Blackwell), in this order:

1. numerics: every config the policies offer (``autotune.policy.candidates``, effort "full",
   less what the family's ``refuse_config`` refuses) on each case, against the case's
   reference (within its tolerance, or within ``aten_factor`` times ATen's own error, as for
   the GEMM family's TF32 cases); a failure here skips the family's timings;
2. speed against ATen (the case's ATen call: cuBLAS / cuBLASLt for the GEMM families) on each
   timed case: each candidate timed from a CUDA graph, the best reported with its spread
   (p10 / p50 / p90 of the samples);
3. PDL on / off, for a family that declares PDL (``Family.pdl``): its kernel followed by a
   pointwise consumer (``kernels.pdl_consumer``), both launched with and without programmatic
   dependent launch.

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
from inductor_ext.kernels import pdl_consumer  # noqa: E402
from inductor_ext.templates import device_case, registry  # noqa: E402

# The layer rule: what this check imports of ours, and that none of it pulled in torch._inductor
# (quack, the CuTeDSL family's library, imports torch._dynamo itself when its configs are checked).
LAYERS = ("kernels", "templates", "autotune", "runtime", "targets")
INDUCTOR_AT_IMPORT = "torch._inductor" in sys.modules

BUDGET_S = 8 * 60
NVIDIA_TARGETS = tuple(name for name, t in targets.all_targets().items() if t.vendor == "nvidia")


@dataclasses.dataclass(frozen=True)
class Check:
    """One family on one target: its device cases and the configs offered for each."""

    family: str
    target: str
    cases: tuple[device_case.DeviceCase, ...]
    configs: dict[str, list[Any]]  # case label -> offered configs
    pdl: bool  # the family declares PDL (Family.pdl): PDL on / off is timed
    gemm: bool  # a GEMM family (Family.takes_tiles): its problems have m, n, k


def nvidia_families() -> dict[str, registry.Family]:
    """Every family in the registry that claims an NVIDIA target, by name."""
    return {name: f for name, f in sorted(registry.families().items())
            if any(targets.vendor(t) == "nvidia" for t in f.targets)}


def offered(family: registry.Family, problem: Any, target: str) -> list[Any]:
    """What autotuning would benchmark for ``problem`` (as ``inductor-ext asm --all-configs``)."""
    return [c.config for c in policy.candidates(family, problem, target, "full")
            if family.refuse_config is None or not family.refuse_config(problem, c.config, target)]


def build_checks(target: str) -> tuple[list[Check], dict[str, str]]:
    """The checks for a GPU of ``target``, and the families skipped with why."""
    checks, skipped = [], {}
    for name, family in nvidia_families().items():
        if target not in family.targets:
            skipped[name] = f"{name} runs on {', '.join(t for t in family.targets if t != 'cpu')}, not {target}"
            continue
        if family.device_cases is None:
            raise SystemExit(f"{name} claims {target} but gives no device_cases (templates/device_case.py): "
                             "the device check cannot run it")
        cases = tuple(family.device_cases(target))
        configs = {c.label: offered(family, c.problem, target) for c in cases}
        checks.append(Check(name, target, cases, configs, pdl=family.pdl, gemm=family.takes_tiles))
    return checks, skipped


# ------------------------------------------------------------------------------ device side


def timed(fn: Callable[[], Any], reps: int = 30) -> dict[str, float]:
    """Microseconds per call (``cuda_graph_timing``): p10 / p50 / p90 of ``reps`` samples."""
    samples = graph_samples(fn, reps)
    q = statistics.quantiles(samples, n=10)
    return {"p10": q[0], "p50": statistics.median(samples), "p90": q[-1]}


def consumer(x: Any, use_pdl: bool) -> Any:
    out = torch.empty_like(x)
    n, block = x.numel(), 1024
    pdl_consumer.pdl_consumer_kernel[(-(-n // block),)](x, out, n, BLOCK=block, USE_PDL=use_pdl, launch_pdl=use_pdl)
    return out


def run_check(check: Check, deadline: float) -> dict[str, Any]:
    result: dict[str, Any] = {"target": check.target, "numerics": [], "speed": [], "pdl": [], "ok": True}
    for case in check.cases:  # 1. numerics first, every offered config
        ops = case.operands()
        aten_err = device_case.rel_err(ops.aten(), ops.want) if case.aten_factor is not None else None
        allowed = case.tolerance if aten_err is None else max(case.tolerance, case.aten_factor * aten_err)
        for config in check.configs[case.label]:
            err = device_case.rel_err(ops.run(config, False), ops.want)
            result["numerics"].append({"case": case.label, "config": repr(config), "rel_err": err,
                                       "aten_err": aten_err, "ok": err <= allowed})
            result["ok"] &= err <= allowed
    if not result["ok"]:
        result["speed_skipped"] = "numerics failed"
        return result
    for case in (c for c in check.cases if c.timed):  # 2. speed against ATen, with spread
        if time.monotonic() > deadline:
            result["speed_skipped"] = f"past the {BUDGET_S} s budget"
            break
        ops = case.operands()
        configs = check.configs[case.label]
        times = {repr(c): timed(lambda c=c: ops.run(c, False)) for c in configs}
        best = min(times, key=lambda c: times[c]["p50"])
        aten = timed(ops.aten)
        result["speed"].append({"case": case.label, "best_config": best, "ext_us": times[best], "aten_us": aten,
                                "ext_vs_aten": aten["p50"] / times[best]["p50"], "all_configs_us": times})
        if check.pdl:  # 3. PDL on / off around the best config
            config = next(c for c in configs if repr(c) == best)
            off = timed(lambda: consumer(ops.run(config, False), False))
            on = timed(lambda: consumer(ops.run(config, True), True))
            row = {"case": case.label, "off_us": off, "on_us": on, "on_vs_off": off["p50"] / on["p50"]}
            if check.gemm:  # pdl_policy's "auto" rule is stated for a GEMM's M, N, K
                p = case.problem
                row["auto_rule"] = pdl_policy.use_pdl("auto", p.m, p.n, p.k, True)
            result["pdl"].append(row)
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
    parser.add_argument("--target", choices=NVIDIA_TARGETS,
                        help="with --dry-run: the GPU to plan for (default sm_90a, the lent H200)")
    args = parser.parse_args(argv)
    if args.dry_run:
        plans = {}
        for target in (args.target,) if args.target else NVIDIA_TARGETS:
            checks, skipped = build_checks(target)
            plans[target] = {"checks": {c.family: {label: [repr(x) for x in configs] for label, configs in c.configs.items()}
                                        for c in checks}, "skipped": skipped}
            empty = [f"{c.family} {label}" for c in checks for label, configs in c.configs.items() if not configs]
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
