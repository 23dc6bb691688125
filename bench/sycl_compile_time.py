"""SYCL compile time per kernel: first build vs SYCL's persistent cache (CPU, no GPU).

Each arm builds one program with Intel's run-time compiler in a fresh process, three processes in
a row over one cache directory: ``first`` (empty cache), ``second`` and ``third``. libsycl 2025.3
caches two things: the IR the front end made from the source, and the device binary keyed by that
IR. The second process loads the IR from the cache, whose bytes can differ from a fresh front
end's, so for some programs its device binary misses once more and only the third process finds
everything. Each process first builds a tiny kernel of its own (never cached), reported as
``init``: the one-time cost of starting the compiler in a process (loading libsycl-jit and the
OpenCL CPU runtime), so the program times are what each further kernel costs. Programs:

- one per kernel ext's SYCL codegen generates for a small graph (``torch.compile`` in interpret
  mode): a pointwise chain, a short row sum (serial), softmax, layernorm and RMSNorm (work-group
  reductions);
- ``sycl.gemm`` kernels: a gemv, a tiled kernel, and the two candidates of one decode-shaped
  autotune decision built together (what ``prebuild`` does).

Times are Program.build only (not Python or torch start-up), repeated ``--repeats`` times with
fresh cache directories; median and min..max reported.

    python bench/sycl_compile_time.py [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHILD = """
import json, sys, time
from inductor_ext.runtime import sycl
from inductor_ext.templates.lang.sycl import HELPERS, HELPERS_NAME
init = sycl.Program("cpu", prelude="", includes={HELPERS_NAME: HELPERS})
init.add_kernel("warm_up", '#include "inductor_ext_sycl.h"\\nextern "C" SYCL_EXT_ONEAPI_FUNCTION_PROPERTY('
                '(syclexp::nd_range_kernel<1>)) void warm_up(float* x) { x[0] = %r; }' % time.time(), ["ptr"])
init.build()
kernels = json.load(open(sys.argv[1]))
program = sycl.Program("cpu", prelude="", includes={HELPERS_NAME: HELPERS})
for name, source, params in kernels:
    program.add_kernel(name, source, params)
program.build()
print(init.build_seconds, program.build_seconds)
"""


def _codegen_kernels() -> dict[str, list[tuple[str, str, list[str]]]]:
    """The SYCL kernels ext's codegen generates for a few ops, one program each."""
    import torch
    import torch.nn.functional as F
    from torch._inductor.utils import run_and_get_code

    from inductor_ext.codegen.sycl import CODEGEN
    from inductor_ext.templates.lang.sycl import HELPERS_NAME
    from inductor_ext.testing.sycl_device import interpret_config

    def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    cases = {
        "pointwise": (lambda x, y: (torch.relu(x * 2 + y).sin() - 1) / (y.abs() + 1), [(37, 45), (45,)]),
        "row sum (serial)": (lambda x: x.sum(-1), [(33, 13)]),
        "softmax": (lambda x: torch.softmax(x, -1), [(8, 1000)]),
        "layernorm": (lambda x, w, b: F.layer_norm(x, (333,), w, b), [(5, 333), (333,), (333,)]),
        "rmsnorm": (rms_norm, [(6, 515), (515,)]),
    }
    found = {}
    for name, (fn, shapes) in cases.items():
        torch._dynamo.reset()
        with CODEGEN.install(interpret_config()):
            _, codes = run_and_get_code(torch.compile(fn), *[torch.randn(s) for s in shapes])
        kernels = [k for code in codes for k in CODEGEN.describe_kernels(code)]
        # each kernel as the generated module builds it (loader.program adds the helper include)
        found[name] = [(k.name, f'#include "{HELPERS_NAME}"\n{k.source}', k.properties["params"]) for k in kernels]
    return found


def programs() -> dict[str, list[tuple[str, str, list[str]]]]:
    """Kernel (name, source, parameter kinds) lists, one list per program, generated here."""
    from inductor_ext.templates.sycl import gemm

    found = _codegen_kernels()
    decode = gemm.GemmProblem(3, 45, 70)  # small M: gemv and the 16-row tile both serve it
    tiled = gemm.GemmProblem(37, 45, 70)

    def kernel(problem: gemm.GemmProblem, config: gemm.GemmConfig) -> tuple[str, str, list[str]]:
        ks = gemm.render(problem, config, "xpu")
        return ks.name, ks.source, list(gemm.PARAM_KINDS)

    found["sycl.gemm gemv"] = [kernel(decode, gemm.configs(decode, "xpu")[0])]
    found["sycl.gemm tiled 64x64"] = [kernel(tiled, gemm.configs(tiled, "xpu")[0])]
    found["sycl.gemm decision (2)"] = [kernel(decode, c) for c in gemm.configs(decode, "xpu")]
    return found


def build_in_child(spec: Path, cache: Path) -> tuple[float, float]:
    """(init seconds, program seconds) of one fresh process."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    env.pop("SYCL_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", CHILD, str(spec)], env=env, capture_output=True, text=True,
                          timeout=900, check=True)
    init, program = done.stdout.split()[-2:]
    return float(init), float(program)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from inductor_ext.runtime import sycl

    if sycl.missing():
        print(f"SYCL runtime missing: {sycl.missing()}")
        return 2
    results = {}
    arms = ("first_s", "second_s", "third_s")
    with tempfile.TemporaryDirectory(prefix="sycl_compile_time_") as tmp:
        for name, kernels in programs().items():
            slug = "".join(c if c.isalnum() else "_" for c in name)
            spec = Path(tmp) / f"{slug}.json"
            spec.write_text(json.dumps(kernels))
            runs: dict[str, list[float]] = {arm: [] for arm in ("init_s", *arms)}
            for i in range(args.repeats):  # each repeat: a fresh cache directory, three processes
                cache = Path(tmp) / f"cache_{slug}_{i}"
                for arm in arms:
                    init, seconds = build_in_child(spec, cache)
                    runs[arm].append(seconds)
                    runs["init_s"].append(init)
            results[name] = {"kernels": len(kernels), **runs}
            print(f"  measured {name}", file=sys.stderr)
    columns = ("first_s", "second_s", "third_s", "init_s")
    print(f"{'program':<24}{'kernels':>8}" + "".join(f"{c.removesuffix('_s') + ' s (median, min..max)':>28}"
                                                    for c in columns))
    for name, r in results.items():
        cells = "".join(f"{statistics.median(r[c]):>14.2f} ({min(r[c]):.2f}..{max(r[c]):.2f})" for c in columns)
        print(f"{name:<24}{r['kernels']:>8}{cells}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
