"""CPU: Inductor's C++ GEMM template with its own cache blocking against the fixed blockings
``cpp.gemm`` also offers on large fp32 GEMMs (``templates/cpp/gemm.py``: ``CACHE_BLOCKINGS``),
timed side by side in one run.

Each shape is a frozen ``nn.Linear`` (no bias) compiled with Inductor's max-autotune, its C++
template only, once per arm, the micro-kernel pinned to AVX-512's 16x16 (the one ext keeps at
these sizes): ``inductor`` with the blocking Inductor derives from the cache sizes, and one arm per
fixed blocking, set exactly as ext sets it (``lowering/cpp_gemm.py``). Timed calls rotate over the
arms round by round, so load from elsewhere hits every arm alike. Per arm: the median and
p10/p90 in ms and GFLOP/s; per fixed blocking: the ratio of Inductor's median to its median, and
the 10th-90th percentile of that ratio round by round (a spread that holds 1.0 is within noise).
The largest difference from eager's output is printed too (each arm must match it).

Needs an AVX-512 CPU (the micro-kernel's ISA); on another it says so and exits.

    python bench/cpp_cache_blocking.py [--json] [--shapes 512x768x50257,512x768x2304] [--rounds 7] [--quick]
"""

from __future__ import annotations

import contextlib
import functools
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from side_by_side import parse, parser, speedup, spread, time_rounds  # noqa: E402
from torch._inductor.utils import fresh_cache  # noqa: E402

from inductor_ext.lowering import cpp_gemm  # noqa: E402
from inductor_ext.templates.cpp import gemm  # noqa: E402

# (M, K, N): GPT-2's and Llama's vocabulary projections at a 512- and 256-token prefill, a
# layer's QKV projection and MLP down projection
SHAPES = "512x768x50257,512x768x32000,256x768x50257,512x768x2304,512x3072x768"


def compiled_arm(linear: torch.nn.Linear, config: gemm.CppGemmConfig) -> Callable[[torch.Tensor], torch.Tensor]:
    """``linear`` compiled with Inductor's C++ template alone, ``config``'s micro-kernel and
    cache blocking (None: Inductor's); compiled on the first call, inside the same settings."""
    settings = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP",
                "cpp.gemm_cache_blocking": cpp_gemm.cache_blocking_setting(config)}
    compiled = torch.compile(_own_code(linear))

    def call(x: torch.Tensor) -> torch.Tensor:
        with cpp_gemm.pinned(config), torch._inductor.config.patch(settings), torch.no_grad():
            return compiled(x)

    return call


def _own_code(linear: torch.nn.Linear) -> torch.nn.Module:
    """``linear`` in a wrapper whose forward is a code object of its own: Dynamo keeps compiled
    graphs per code object, and the arms must not share one (the last compiled would serve all)."""
    namespace: dict[str, Any] = {"torch": torch}
    exec("class Arm(torch.nn.Module):\n"
         "    def __init__(self, linear):\n        super().__init__()\n        self.linear = linear\n"
         "    def forward(self, x):\n        return self.linear(x)\n", namespace)
    return namespace["Arm"](linear)


def measure(m: int, k: int, n: int, rounds: int) -> dict[str, Any]:
    torch.manual_seed(0)
    linear = torch.nn.Linear(k, n, bias=False).eval()
    x = torch.randn(m, k)
    with torch.no_grad():
        want = linear(x)
    configs = {"inductor": gemm.CppGemmConfig("avx512", 16, 16, 1)}
    configs.update({f"cache{cm}x{cn}x{ck}": gemm.CppGemmConfig("avx512", 16, 16, 1, cm, cn, ck)
                    for cm, cn, ck in gemm.CACHE_BLOCKINGS})
    arms, errors = {}, {}
    torch._dynamo.reset()
    for name, config in configs.items():
        arms[name] = compiled_arm(linear, config)
        with fresh_cache():  # the FX graph cache does not key the pinned micro-kernel
            errors[name] = (arms[name](x) - want).abs().max().item()
        arms[name](x)  # warm
    seconds = time_rounds({name: functools.partial(arm, x) for name, arm in arms.items()}, rounds)
    flop = 2 * m * n * k
    result: dict[str, Any] = {"shape": {"m": m, "k": k, "n": n}, "arms": {}}
    for name, s in seconds.items():
        result["arms"][name] = {**spread(s, 1e3, "ms"), "gflops": flop / statistics.median(s) / 1e9,
                                "max_abs_error": errors[name]}
        if name != "inductor":
            result["arms"][name].update(speedup(seconds["inductor"], s))
    return result


def main() -> None:
    options = parser(__doc__, 7, "one small shape, 3 rounds: checks the script runs")
    options.add_argument("--shapes", default=SHAPES, help=f"MxKxN,... (default {SHAPES})")
    args = parse(options, quick={"shapes": "200x320x72", "rounds": 3})
    if "avx512" not in gemm.host_isas():
        sys.exit("this CPU has no AVX-512: the cache-blocked candidates are AVX-512 micro-kernels, not offered here")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    results = []
    for m, k, n in shapes:
        with contextlib.redirect_stdout(sys.stderr):  # Inductor's autotune lines stay off the result
            results.append(measure(m, k, n, args.rounds))
        if not args.json:
            for name, arm in results[-1]["arms"].items():
                ratio = ("" if name == "inductor" else
                         " x%.3f (p10-p90 %.3f-%.3f)" % (arm["speedup"], *arm["speedup_p10_p90"]))
                print(f"{m}x{k}x{n:<6} {name:20s} {arm['median_ms']:9.2f} ms ({arm['p10_ms']:.2f}-{arm['p90_ms']:.2f})"
                      f" {arm['gflops']:6.1f} GFLOP/s  err {arm['max_abs_error']:.1e}{ratio}", flush=True)
    if args.json:
        print(json.dumps({"threads": torch.get_num_threads(), "shapes": results}, indent=1))


if __name__ == "__main__":
    main()
