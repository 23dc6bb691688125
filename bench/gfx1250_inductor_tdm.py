"""Prepared device check for an MI450 (gfx1250, tier D): does Inductor's Tensor Data Mover codegen,
which the ``gfx1250`` preset switches on (``targets.amd.INDUCTOR_TDM``), pay in pointwise and
reduction kernels and FlexAttention forward/decode? Each case is compiled twice with
``backend="ext"`` under the gfx1250 preset, once as the preset has it and once with Inductor's
descriptor paths off (``testing.gfx1250_inductor.TDM_OFF``); both are checked against the
plain-torch reference first, then timed side by side in one run.

The first run must look at three columns before any timing: "ok" (numerics), and "tdm_used" /
"plain_used" (whether the generated code really took descriptors: Inductor gates them on its own
probe of the device, ROCm >= 7.14 and Triton's ``amd.supports_tdm``; ``tdm_used`` false means the
preset changed nothing on this machine and the timings compare a kernel with itself).

    python bench/gfx1250_inductor_tdm.py --out gfx1250_tdm.json [--quick]
    python bench/gfx1250_inductor_tdm.py --smoke     # no GPU: every kind's kernels generated as on an
                                                      # MI450, with and without TDM, run in Triton's interpreter

Times are medians of HIP event timings with the 10th-90th percentile spread; a ratio whose spreads
overlap is "within noise", not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

if "--smoke" in sys.argv and "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the smoke path runs the kernels on the CPU

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inductor_ext.testing import gfx1250_inductor as gi  # noqa: E402
from rocm_gemm import rel_err, timed  # noqa: E402  (the AMD benches time and compare alike)

# (kind, dtype, sizes): small and odd shapes first (numerics), then the sizes that decide "pays"
CASES = [
    ("pointwise", torch.bfloat16, {"m": 37, "n": 1000}),
    ("pointwise", torch.bfloat16, {"m": 4096, "n": 4096}),
    ("pointwise", torch.float32, {"m": 8192, "n": 8192}),
    ("rms_norm", torch.bfloat16, {"m": 1, "n": 4096}),
    ("rms_norm", torch.bfloat16, {"m": 4096, "n": 4096}),
    ("rms_norm", torch.bfloat16, {"m": 8192, "n": 8192}),
    ("softmax", torch.bfloat16, {"m": 37, "n": 3000}),
    ("softmax", torch.bfloat16, {"m": 64, "n": 128256}),  # a sampling step's vocabulary softmax
    ("softmax", torch.float32, {"m": 4096, "n": 32000}),
    ("flex_forward", torch.bfloat16, {"b": 1, "hq": 2, "hkv": 2, "lq": 200, "lkv": 200, "d": 64}),
    ("flex_forward", torch.bfloat16, {"b": 4, "hq": 32, "hkv": 32, "lq": 2048, "lkv": 2048, "d": 128}),
    ("flex_forward", torch.float16, {"b": 1, "hq": 16, "hkv": 16, "lq": 4096, "lkv": 4096, "d": 64}),
    ("flex_decode", torch.bfloat16, {"b": 2, "hq": 4, "hkv": 2, "lq": 4, "lkv": 256, "d": 64}),
    ("flex_decode", torch.bfloat16, {"b": 8, "hq": 32, "hkv": 8, "lq": 1, "lkv": 8192, "d": 128}),
]
QUICK = [c for i, c in enumerate(CASES) if i % 3 != 2]
TOL = {torch.bfloat16: 2e-2, torch.float16: 4e-3, torch.float32: 1e-4}


def device_row(kind: str, dtype: torch.dtype, sizes: dict[str, int]) -> dict[str, Any]:
    from torch._inductor.utils import run_and_get_code

    ex = gi.example(kind, dtype, **sizes)
    inputs = [t.cuda() for t in ex.inputs]
    want = ex.reference(*inputs)
    row: dict[str, Any] = {"kind": kind, "dtype": str(dtype).removeprefix("torch."), "sizes": sizes}
    compiled = {}
    for name, patches in (("tdm", {}), ("plain", gi.TDM_OFF)):
        torch._dynamo.reset()
        fn = torch.compile(ex.fn, backend="ext", options={"preset": "gfx1250", "inductor": patches})
        got, codes = run_and_get_code(fn, *inputs)
        row[f"{name}_used"] = any(gi.uses_tdm(c) for c in codes)
        row[f"{name}_rel_err"] = rel_err(got, want)
        compiled[name] = fn
    row["ok"] = all(row[f"{n}_rel_err"] <= TOL[dtype] for n in compiled)
    if row["ok"]:
        for name, fn in compiled.items():
            row[f"{name}_us"] = timed(lambda fn=fn: fn(*inputs))
        t, p = row["tdm_us"], row["plain_us"]
        row["speedup_tdm_vs_plain"] = p["median"] / t["median"]
        row["verdict"] = "within noise" if t["p90"] >= p["p10"] and p["p90"] >= t["p10"] else (
            "tdm faster" if t["median"] < p["median"] else "tdm slower")
    return row


def smoke_row(kind: str, dtype: torch.dtype) -> dict[str, Any]:
    """No GPU: the kind's small example generated as on an MI450, with and without TDM, each run by
    Inductor's wrapper in Triton's interpreter against the reference."""
    from inductor_ext.runtime.interpret import enable_triton_interpreter
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    enable_triton_interpreter()
    ex = gi.example(kind, dtype)
    want = ex.reference(*ex.inputs)
    row: dict[str, Any] = {"kind": kind, "dtype": str(dtype).removeprefix("torch."), "smoke": "interpreted"}
    small_part = {"multi_processor_count": 8} if kind == "flex_decode" else None  # fewer split-KV programs
    for name, tdm in (("tdm", True), ("plain", False)):
        graph = gi.generate(ex.fn, *ex.inputs, tdm=tdm, properties=small_part)
        row[f"{name}_used"] = any(k.uses_tdm for k in graph.kernels.values())
        with interpreter_fixes():
            row[f"{name}_rel_err"] = rel_err(gi.run(graph, *ex.inputs)[0], want)
    worst = max(row["tdm_rel_err"], row["plain_rel_err"])
    row["ok"] = row["tdm_used"] and not row["plain_used"] and worst <= TOL[dtype]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--quick", action="store_true", help="two thirds of the cases")
    parser.add_argument("--smoke", action="store_true", help="no GPU: generate and interpret each kind's small example")
    args = parser.parse_args()
    if args.smoke:
        rows = [smoke_row(kind, torch.bfloat16) for kind in gi.KINDS]
    else:
        if not torch.cuda.is_available() or torch.version.hip is None:
            sys.exit("bench/gfx1250_inductor_tdm.py needs a ROCm GPU (an MI450); use --smoke without one")
        arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
        if arch != "gfx1250":
            print(f"note: this GPU is {arch}, not gfx1250: Inductor takes no TDM path here", file=sys.stderr)
        rows = [device_row(*case) for case in (QUICK if args.quick else CASES)]
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    if not all(r["ok"] for r in rows):
        sys.exit("some rows are not ok: look at rel_err and *_used before any timing")


if __name__ == "__main__":
    main()
