"""CPU: a wide fp32 GEMM as one ATen call against ATen called once per column panel, side by side.

``x @ W.T`` for a Linear of ``k`` in and ``n`` out features at ``m`` rows: the vocabulary
projections of ``bench/hf_generate.py``'s models (768 -> 32000 for its Llama, 768 -> 50257 for its
GPT-2) at a decode batch, a short and a long prefill, an 8192-wide projection, and a 3072-wide FFN
as the control where ext does not offer the panels. Arms: ATen's ``torch.mm`` (MKL's sgemm on x86
builds) and ``panel_mm`` (``inductor_ext/kernels/panel_gemm_ops.py``: the same call once per
``PANEL`` output columns, writing over its previous output's memory once nothing holds that, as
ext calls it), and ``panels_new_memory`` (the same with a newly allocated output every call, as
ATen's ``torch.mm`` has: what the panels alone gain), timed round by round (``side_by_side``), each
call on the same operands (warm), each output dropped before the next call.

Per case: each arm's median and p10/p90 in ms with its GFLOP/s, and the panels' speed-up over ATen
(``speedup``, and ``new_memory`` for the panels on new memory) with the 10th-90th percentile of
that ratio round by round (a spread that holds 1.0 is within noise).

    python bench/wide_gemm.py [--json] [--rounds 15] [--quick]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from side_by_side import gemm_arms, parse, parser, speedup, time_rounds  # noqa: E402

from inductor_ext.kernels import panel_gemm_ops, reused_outputs  # noqa: E402

# (m, k, n): rows, in and out features
SHAPES = ((16, 768, 32000), (128, 768, 32000), (512, 768, 32000),
          (16, 768, 50257), (128, 768, 50257), (512, 768, 50257),
          (16, 768, 8192), (512, 768, 8192), (512, 768, 3072))
QUICK = ((4, 32, 3000), (4, 32, 100))


def measure(m: int, k: int, n: int, rounds: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    w_t = w.t()

    def on_new_memory() -> torch.Tensor:
        reused_outputs.release()
        return panel_gemm_ops.panel_mm(x, w_t)

    arms = {"aten": lambda: torch.mm(x, w_t), "panels": lambda: panel_gemm_ops.panel_mm(x, w_t),
            "panels_new_memory": on_new_memory}
    torch.testing.assert_close(arms["panels"](), arms["aten"](), rtol=1e-5, atol=1e-5)
    for arm in arms.values():  # warm: pages touched, threads awake
        arm()
    seconds = time_rounds(arms, rounds)
    figures = gemm_arms(seconds, 2 * m * k * n, 1)
    return {"m": m, "k": k, "n": n, "offered": n >= panel_gemm_ops.WIDE, "arms": figures,
            **speedup(seconds["aten"], seconds["panels"]),
            "new_memory": speedup(seconds["aten"], seconds["panels_new_memory"])}


def main() -> None:
    p = parser(__doc__, rounds=15, quick="two tiny shapes, three rounds: a smoke run")
    args = parse(p, {"rounds": 3})
    cases = [measure(m, k, n, args.rounds) for m, k, n in (QUICK if args.quick else SHAPES)]
    figures = {"threads": torch.get_num_threads(), "rounds": args.rounds, "quick": args.quick,
               "panel": panel_gemm_ops.PANEL, "offered_from": panel_gemm_ops.WIDE, "cases": cases}
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"{figures['threads']} threads, {args.rounds} rounds; ms median (p10-p90), GFLOP/s; panels of "
          f"{figures['panel']} columns, offered by ext from {figures['offered_from']}")
    for c in cases:
        line = f"{c['m']:4d}x{c['k']}x{c['n']:<6d}"
        for name, arm in c["arms"].items():
            line += f"  {name} {arm['median_ms']:.2f} ({arm['p10_ms']:.2f}-{arm['p90_ms']:.2f}) {arm['gflop_s']:.1f}"
        for name, ratio in (("panels", c), ("new memory", c["new_memory"])):
            lo, hi = ratio["speedup_p10_p90"]
            line += f"  {name} x{ratio['speedup']:.2f} ({lo:.2f}-{hi:.2f}{', within noise' if lo <= 1.0 <= hi else ''})"
        print(line + ("" if c["offered"] else "  (not offered)"))


if __name__ == "__main__":
    main()
