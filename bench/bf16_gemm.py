"""CPU: a bf16 GEMM as ATen's bf16 call against ext's widened GEMM (the fp32 GEMM on the weight
widened once), side by side.

``x @ W.T`` for a bf16 Linear of ``k`` in and ``n`` out features at ``m`` rows: GPT-2's 768-wide
block (its attention's 768 -> 2304 and 768 -> 768, its FFN's 768 -> 3072 and 3072 -> 768) at a
decode step, a short and a long prefill. Arms: ATen's ``torch.mm`` in bf16 (oneDNN's), and
``widened_mm`` (``inductor_ext/kernels/widened_gemm_ops.py``: the activations widened each call,
the weight widened once and kept, ATen's fp32 GEMM, one rounding to bf16), timed round by round
(``side_by_side``), each call on the same operands (warm). Each case checks first that the two
agree to within a bf16 rounding.

Per case: each arm's median and p10/p90 in ms with its GFLOP/s, and the widened GEMM's speed-up
over ATen's with the 10th-90th percentile of that ratio round by round (a spread that holds 1.0
is within noise). Timing picks between them per GEMM in a compile; this prints where each wins.

    python bench/bf16_gemm.py [--json] [--rounds 9] [--quick]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from side_by_side import gemm_arms, parse, parser, speedup, time_rounds  # noqa: E402

from inductor_ext.kernels import widened_gemm_ops  # noqa: E402

# (m, k, n): rows, in and out features
SHAPES = tuple((m, k, n) for m in (1, 16, 128, 512) for k, n in ((768, 2304), (768, 768), (768, 3072), (3072, 768)))
QUICK = ((4, 32, 48), (1, 16, 8))


def measure(m: int, k: int, n: int, rounds: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(m, k, generator=g).bfloat16(), torch.randn(n, k, generator=g).bfloat16()
    w_t = w.t()
    arms = {"aten": lambda: torch.mm(x, w_t), "widened": lambda: widened_gemm_ops.widened_mm(x, w_t)}
    torch.testing.assert_close(arms["widened"](), arms["aten"](), rtol=2**-7, atol=2**-7)
    for arm in arms.values():  # warm: the weight widened, pages touched, threads awake
        arm()
    seconds = time_rounds(arms, rounds)
    figures = gemm_arms(seconds, 2 * m * k * n, 2)
    return {"m": m, "k": k, "n": n, "arms": figures, **speedup(seconds["aten"], seconds["widened"])}


def main() -> None:
    p = parser(__doc__, rounds=9, quick="two tiny shapes, three rounds: a smoke run")
    args = parse(p, {"rounds": 3})
    cases = [measure(m, k, n, args.rounds) for m, k, n in (QUICK if args.quick else SHAPES)]
    figures = {"threads": torch.get_num_threads(), "capability": torch.backends.cpu.get_cpu_capability(),
               "rounds": args.rounds, "quick": args.quick, "cases": cases}
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"{figures['capability']}, {figures['threads']} threads, {args.rounds} rounds; ms median (p10-p90), GFLOP/s")
    for c in cases:
        line = f"{c['m']:4d}x{c['k']}x{c['n']:<5d}"
        for name, arm in c["arms"].items():
            line += f"  {name} {arm['median_ms']:.3f} ({arm['p10_ms']:.3f}-{arm['p90_ms']:.3f}) {arm['gflop_s']:.1f}"
        lo, hi = c["speedup_p10_p90"]
        print(f"{line}  widened x{c['speedup']:.2f} ({lo:.2f}-{hi:.2f}{', within noise' if lo <= 1.0 <= hi else ''})")


if __name__ == "__main__":
    main()
