"""CPU: a prefill's attention as ATen's SDPA runs it against the ``cpp.flash_attention`` family's
C++ kernel, timed side by side in one run.

Cases: a GPT-2-style prefill (12 heads, head dim 64, batch 1) of each length, q, k and v in Hugging
Face's layout (transposed views), with the causal boolean mask Hugging Face builds and passes, with
SDPA's ``is_causal`` flag instead (as nanoGPT-style code calls it; ATen's arm gets the flag too), and
without a mask; fp32 and bf16. The kernel's form is the one a compile on this CPU offers (AVX-512,
else AVX2); ``ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`` times both
arms as on an AVX2 CPU. Both arms are called directly (no compile: each is one library call).
Timed calls alternate between the arms round by round. Per
case: each arm's median and p10/p90 in ms, the ratio of ATen's median to the kernel's with the
10th-90th percentile of that ratio round by round (a spread that holds 1.0 is within noise), and
the largest difference from float64 SDPA of each arm's output.

    python bench/cpu_prefill_attention.py [--json] [--lengths 128,512,2048] [--rounds 30] [--quick]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from side_by_side import parse, parser, speedup, spread, time_rounds, versus  # noqa: E402

from inductor_ext.templates.cpp import flash_attention  # noqa: E402
from inductor_ext.templates.family import OpSpec, TensorSpec  # noqa: E402

LENGTHS = "128,512,2048"
HEADS, HEAD_DIM = 12, 64
SCALE = HEAD_DIM ** -0.5


def _spec(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))


MASKS = ("causal mask", "is_causal", "no mask")  # a bool tensor (Hugging Face), SDPA's flag (nanoGPT), none


def measure(length: int, masking: str, dtype: torch.dtype, rounds: int) -> dict[str, Any] | None:
    g = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(1, length, HEADS, HEAD_DIM, generator=g).to(dtype).transpose(1, 2) for _ in range(3))
    mask = torch.ones(length, length, dtype=torch.bool).tril()[None, None] if masking == "causal mask" else None
    causal = masking == "is_causal"
    spec = OpSpec("prefill_attention_causal" if causal else "prefill_attention",
                  (_spec(q), _spec(k), _spec(v), None if mask is None else _spec(mask)), _spec(q.contiguous()),
                  {"scale": SCALE})
    problem = flash_attention.problem_for(spec)
    if isinstance(problem, str):
        print(f"skipped {dtype} L={length}: {problem}", file=sys.stderr)
        return None
    config = flash_attention.configs(problem, "cpu")[0]  # the form a compile on this CPU would offer
    arms: dict[str, Callable[[], torch.Tensor]] = {
        "aten": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=SCALE, is_causal=causal),
        "kernel": lambda: flash_attention.call(problem, config, "cpu", q, k, v, mask)}
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=SCALE,
                                          is_causal=causal)
    with torch.no_grad():
        errors = {name: (call().double() - want).abs().max().item() for name, call in arms.items()}  # builds, warms
        seconds = time_rounds(arms, rounds)
    return {"length": length, "mask": masking, "dtype": str(dtype).removeprefix("torch."), "form": config.form,
            "arms": {name: spread(s, 1e3, "ms") for name, s in seconds.items()},
            **speedup(seconds["aten"], seconds["kernel"]),
            "max_abs_error_vs_float64": errors}


def main() -> None:
    options = parser(__doc__, 30, "one short prefill, 3 rounds: checks the script runs")
    options.add_argument("--lengths", default=LENGTHS, help=f"prompt lengths (default {LENGTHS})")
    args = parse(options, quick={"lengths": "64", "rounds": 3})
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        for length in (int(s) for s in args.lengths.split(",")):
            for masking in MASKS:
                r = measure(length, masking, dtype, args.rounds)
                if r is None:
                    continue
                results.append(r)
                if not args.json:
                    print(f"L={length:<5d} {masking:11s} {r['dtype']:9s} {r['form']:6s} "
                          f"{versus(r, 'aten', 'kernel', 'ms', 2)}  "
                          f"error aten {r['max_abs_error_vs_float64']['aten']:.1e} "
                          f"kernel {r['max_abs_error_vs_float64']['kernel']:.1e}", flush=True)
    if args.json:
        print(json.dumps({"threads": torch.get_num_threads(), "cases": results}, indent=1))


if __name__ == "__main__":
    main()
