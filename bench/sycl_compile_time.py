"""SYCL compile time per program: first build vs SYCL's persistent cache (CPU, no GPU).

Each arm builds one program with Intel's run-time compiler in a fresh process (``Program.build``
time only, not Python or torch start-up), three processes in a row over one cache directory:
``first`` (empty cache), ``second`` and ``third``. libsycl 2025.3 caches two things: the IR the
front end made from the source, and the device binary keyed by that IR. The second process loads
the IR from the cache, whose bytes can differ from a fresh front end's, so for some programs its
device binary misses once more and only the third process finds everything. Programs:

- ``softmax``: the kernel ext's SYCL codegen generates for ``torch.softmax(x, -1)`` (one kernel);
- ``gemm``: one ``sycl.gemm`` kernel (tiled, fp32);
- ``gemm x5``: five ``sycl.gemm`` kernels in one program (what autotuning candidates build).

Repeated ``--repeats`` times (fresh cache directories each time), median and min..max reported.

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
import json, sys
from inductor_ext.runtime import sycl
from inductor_ext.templates.lang.sycl import HELPERS, HELPERS_NAME
kernels = json.load(open(sys.argv[1]))
program = sycl.Program("cpu", prelude="", includes={HELPERS_NAME: HELPERS})
for name, source, params in kernels:
    program.add_kernel(name, source, params)
program.build()
print(program.build_seconds)
"""


def programs() -> dict[str, list[tuple[str, str, list[str]]]]:
    """Kernel (name, source, parameter kinds) lists, generated in this process."""
    import torch

    from inductor_ext.codegen.sycl import CODEGEN
    from inductor_ext.templates.lang.sycl import HELPERS_NAME
    from inductor_ext.templates.sycl import gemm
    from inductor_ext.testing.sycl_device import interpret_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with CODEGEN.install(interpret_config()):
        _, codes = run_and_get_code(torch.compile(lambda x: torch.softmax(x, -1)), torch.randn(8, 1000))
    (softmax,) = CODEGEN.describe_kernels(codes[0])
    # the kernel as the generated module builds it (loader.program adds the helper include)
    softmax_kernel = (softmax.name, f'#include "{HELPERS_NAME}"\n{softmax.source}', ["ptr"] * 3)

    problem = gemm.GemmProblem(3, 45, 70)  # small M: gemv and tiled candidates both serve it
    candidates = [gemm.GemmConfig("tiled", 64, 64, 16, 8, 2), *gemm.configs(problem, "xpu"),
                  gemm.GemmConfig("tiled", 32, 32, 16, 8, 1), gemm.GemmConfig("tiled", 64, 32, 32, 8, 1)]
    params = [kind for _, kind in gemm.PARAMS]
    rendered = [gemm.render(problem, c, "xpu") for c in candidates[:5]]
    gemm_kernels = [(ks.name, ks.source, params) for ks in rendered]
    return {"softmax": [softmax_kernel], "gemm": gemm_kernels[:1], "gemm x5": gemm_kernels}


def build_in_child(spec: Path, cache: Path) -> float:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    env.pop("SYCL_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", CHILD, str(spec)], env=env, capture_output=True, text=True,
                          timeout=900, check=True)
    return float(done.stdout.split()[-1])


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
    with tempfile.TemporaryDirectory(prefix="sycl_compile_time_") as tmp:
        for name, kernels in programs().items():
            spec = Path(tmp) / f"{name.replace(' ', '_')}.json"
            spec.write_text(json.dumps(kernels))
            runs: dict[str, list[float]] = {"first_s": [], "second_s": [], "third_s": []}
            for i in range(args.repeats):  # each repeat: a fresh cache directory, three processes
                cache = Path(tmp) / f"cache_{name.replace(' ', '_')}_{i}"
                for times in runs.values():
                    times.append(build_in_child(spec, cache))
            results[name] = {"kernels": len(kernels), **runs}
    print(f"{'program':<10}{'kernels':>8}" + "".join(f"{k.removesuffix('_s') + ' s (median, min..max)':>30}"
                                                    for k in ("first_s", "second_s", "third_s")))
    for name, r in results.items():
        cells = "".join(f"{statistics.median(r[k]):>16.2f} ({min(r[k]):.2f}..{max(r[k]):.2f})"
                        for k in ("first_s", "second_s", "third_s"))
        print(f"{name:<10}{r['kernels']:>8}{cells}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
