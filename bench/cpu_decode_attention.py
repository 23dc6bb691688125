"""CPU: one decode step's attention as ATen's SDPA runs it against the ``cpp.decode_attention``
family's kernel (``kernels/decode_attention.py``) compiled by Inductor and the ``cpp.flash_attention``
family's decode path (C++, which never reads a key the mask hides), timed side by side in one run.

Cases: a Llama-style step (12 query heads over 4 key/value heads, head dim 64, batch 1) over a KV
cache of each length, with no mask (a cache that holds just the tokens so far) and with a static
cache's boolean mask (the slots past the current position masked, as Hugging Face's
``cache_implementation="static"`` makes it: position at a third of the cache). fp32 and bf16.
The first two arms are compiled with ``torch.compile`` (Inductor's default) around the one call, so
both pay the same wrapper; ``flash`` is the family's own call (ctypes, as ext's compiled graphs call
it), in the kernel's best form on this CPU. Timed calls alternate between the arms round by round. Per case: each arm's
median and p10/p90 in us, the ratio of ATen's median to each kernel's, and the 10th-90th percentile
of that ratio round by round (a spread that holds 1.0 is within noise); the largest difference
between each kernel's output and ATen's is printed too.

    python bench/cpu_decode_attention.py [--json] [--lengths 32,1024,4096] [--rounds 200] [--quick]
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

from inductor_ext.kernels.decode_attention import decode_attention  # noqa: E402
from inductor_ext.templates.cpp import flash_attention  # noqa: E402
from inductor_ext.templates.family import OpSpec, TensorSpec  # noqa: E402

LENGTHS = "32,1024,4096"
HEADS, KV_HEADS, HEAD_DIM = 12, 4, 64
SCALE = HEAD_DIM ** -0.5


def aten(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=SCALE, enable_gqa=True)


def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return decode_attention(q, k, v, SCALE, mask=mask)


def _spec(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))


def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> Callable[[], torch.Tensor]:
    """The family's decode call for these tensors, its problem and form resolved once."""
    out = _spec(torch.empty(q.shape, dtype=q.dtype))
    spec = OpSpec("decode_attention", (_spec(q), _spec(k), _spec(v), None if mask is None else _spec(mask)), out,
                  {"scale": SCALE}, "cpu")
    problem = flash_attention.problem_for(spec)
    if isinstance(problem, str):
        raise SystemExit(f"cpp.flash_attention refuses {spec}: {problem}")
    config = flash_attention.configs(problem, "cpu")[0]
    return lambda: flash_attention.call(problem, config, "cpu", q, k, v, mask)


def measure(length: int, masked: bool, dtype: torch.dtype, rounds: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(length)
    q = torch.randn(1, HEADS, 1, HEAD_DIM, generator=g).to(dtype)
    k, v = (torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=g).to(dtype) for _ in range(2))
    mask = (torch.arange(length) <= length // 3).view(1, 1, 1, length) if masked else None
    torch._dynamo.reset()
    arms: dict[str, Callable[[], torch.Tensor]] = {}
    for name, fn in (("aten", aten), ("kernel", kernel)):
        compiled = torch.compile(fn, fullgraph=True)
        arms[name] = lambda compiled=compiled: compiled(q, k, v, mask)
    arms["flash"] = flash(q, k, v, mask)
    with torch.no_grad():
        outputs = {name: call() for name, call in arms.items()}  # compiles and warms each
        for call in arms.values():
            call()
        seconds = time_rounds(arms, rounds)
    return {"length": length, "mask": masked, "dtype": str(dtype).removeprefix("torch."),
            "arms": {name: spread(s, 1e6, "us") for name, s in seconds.items()},
            **speedup(seconds["aten"], seconds["kernel"]),
            "flash": speedup(seconds["aten"], seconds["flash"]),
            "max_abs_difference": (outputs["aten"].float() - outputs["kernel"].float()).abs().max().item(),
            "flash_max_abs_difference": (outputs["aten"].float() - outputs["flash"].float()).abs().max().item()}


def main() -> None:
    options = parser(__doc__, 200, "one short cache, 5 rounds: checks the script runs")
    options.add_argument("--lengths", default=LENGTHS, help=f"KV cache lengths (default {LENGTHS})")
    args = parse(options, quick={"lengths": "32", "rounds": 5})
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        for length in (int(s) for s in args.lengths.split(",")):
            for masked in (False, True):
                results.append(r := measure(length, masked, dtype, args.rounds))
                if not args.json:
                    print(f"L={length:<5d} {'static mask' if masked else 'no mask':11s} {r['dtype']:9s} "
                          f"{versus(r, 'aten', 'kernel', 'us', 1)}  diff {r['max_abs_difference']:.1e} | "
                          f"{versus({**r, **r['flash']}, 'aten', 'flash', 'us', 1)}  diff "
                          f"{r['flash_max_abs_difference']:.1e}", flush=True)
    if args.json:
        print(json.dumps({"threads": torch.get_num_threads(), "cases": results}, indent=1))


if __name__ == "__main__":
    main()
