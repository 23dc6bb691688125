"""CPU: a bf16 encoder's graph with a symbolic length, as Dynamo compiles it when a model is called
at a second length, side by side: Inductor's default, Inductor's max-autotune (freezing on, as
PyTorch's CPU tutorial has it), ext's default, and ext with the cost model's ATen-side picks taken
from a problem's own kind only (as before library-kind borrowing).

ext's default (the cpu preset, ``autotune="model"``: decision tables, then the cost model, nothing
timed) finds no table entry for a GEMM with symbolic rows (the tables hold static problems); the
cost model then lends it the ATen-side pick of the nearest static entry
(``autotune/cost_model.py``, ``library_kind_of``): on a CPU without bf16 dot products the widened
GEMM (``kernels/widened_gemm_ops.py``) instead of ATen's bf16 GEMM. The third arm turns that off.

Each arm compiles the same BERT-base-shaped encoder (``transformers.BertModel``, 2 layers, 768 wide,
batch 4, bf16) once, its length marked dynamic at ``--compile-at`` tokens (the graph Dynamo's
automatic dynamic shapes would compile at a second length; marked so that every arm compiles that
graph and nothing else), and the arms are then timed at ``--tokens`` through that graph, round by
round (``side_by_side``). Inductor's FX graph cache is off, so no arm is served another's graph.
Every arm's output is checked against eager's first (within 2^-5 of its largest value: bf16
rounding, a few ulps, not a wrong answer).

Per arm: ms median and p10/p90, how each ext arm's GEMMs were served; ext's speed-up over each
other arm with the 10th-90th percentile of that ratio round by round (a spread that holds 1.0 is
within noise). Compiles take seconds per arm on 2 cores, max-autotune's a few
minutes (it times ATen's bf16 GEMMs).

    python bench/bf16_lengths.py [--json] [--rounds 9] [--quick] [--compile-at 96] [--tokens 100]
"""

from __future__ import annotations

import collections
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from side_by_side import parse, parser, speedup, spread, time_rounds  # noqa: E402

ARMS = ("inductor", "inductor_max_autotune", "ext", "ext_own_kind_only")
BATCH = 4


def make_encoder(quick: bool) -> torch.nn.Module:
    """compile_time.py's BERT-base-shaped encoder (tiny under ``quick``), in bf16."""
    from compile_time import make_model  # bench/, beside this script

    return make_model("bert", quick)[0].to(torch.bfloat16)


@contextlib.contextmanager
def own_kind_only() -> Iterator[None]:
    """The cost model as it was before library-kind borrowing: no ATen-side pick from another kind."""
    from inductor_ext.autotune import cost_model

    borrowed = cost_model.CostModel._borrowed
    cost_model.CostModel._borrowed = lambda self, prediction, kind, sizes: prediction
    try:
        yield
    finally:
        cost_model.CostModel._borrowed = borrowed


def compiled_arm(arm: str, model: torch.nn.Module, ids: torch.Tensor) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The arm's compiled model, compiled by one call on ``ids`` (its length marked dynamic), and
    what that took: seconds and, for ext's arms, how its GEMMs were served."""
    from inductor_ext.lowering import decision_record

    if arm == "inductor":
        compiled = torch.compile(model)
    elif arm == "inductor_max_autotune":
        compiled = torch.compile(model, mode="max-autotune")
    else:  # the ext arms' options differ (both the cpu preset's defaults) so that each is a backend of
        # its own: Dynamo serves a frame's cached graph to any torch.compile with equal backend and options
        options = {"preset": "cpu"} if arm == "ext" else {"preset": "cpu", "autotune": "model"}
        compiled = torch.compile(model, backend="ext", options=options)
    first = len(decision_record.decisions)
    ids = ids.clone()
    torch._dynamo.mark_dynamic(ids, 1)
    start = time.perf_counter()
    with own_kind_only() if arm == "ext_own_kind_only" else contextlib.nullcontext(), torch.no_grad(), \
            torch._inductor.config.patch(freezing=arm == "inductor_max_autotune"):  # as PyTorch's CPU tutorial has it
        compiled(ids)
    seconds = time.perf_counter() - start
    served = collections.Counter(f"{d.op}: {d.winner.rstrip('_0123456789') if d.winner.startswith('cpp') else d.winner}"
                                 for d in decision_record.decisions[first:] if d.op in ("mm", "addmm", "bmm"))
    return compiled, {"compile_s": round(seconds, 2), "gemms_served": dict(sorted(served.items()))}


def main() -> None:
    p = parser(__doc__, rounds=9, quick="a tiny encoder at 16 then 13 tokens, three rounds: a smoke run")
    p.add_argument("--compile-at", type=int, default=96, help="tokens of the compiling call (default 96)")
    p.add_argument("--tokens", type=int, default=100, help="tokens of the timed calls (default 100)")
    args = parse(p, {"rounds": 3, "compile_at": 16, "tokens": 13})
    import inductor_ext  # noqa: F401  (registers backend="ext")

    torch._inductor.config.fx_graph_cache = False  # each arm compiles its own graph
    model = make_encoder(args.quick)
    vocab = model.model.config.vocab_size  # compile_time's Forward holds the BertModel
    g = torch.Generator().manual_seed(1)
    at, ids = (torch.randint(0, vocab, (BATCH, n), generator=g) for n in (args.compile_at, args.tokens))
    with torch.no_grad():
        want = model(ids)
    arms, figures = {}, {}
    for arm in ARMS:
        fn, figures[arm] = compiled_arm(arm, model, at)
        with torch.no_grad():
            got = fn(ids)  # through the dynamic graph: no compile at this length
        # relative to eager's largest value: bf16 rounds each layer's sums (a few ulps of it apart)
        diff = (got.float() - want.float()).abs().max().item() / want.float().abs().max().item()
        figures[arm]["max_diff_of_largest"] = diff
        if not diff <= 2**-5:
            raise AssertionError(f"{arm}'s output differs from eager's by {diff:.3g} of its largest value")
        arms[arm] = (lambda f: lambda: f(ids))(fn)
    with torch.no_grad():
        seconds = time_rounds(arms, args.rounds)
    for arm in ARMS:
        figures[arm].update(spread(seconds[arm], 1e3, "ms"))
    result = {"threads": torch.get_num_threads(), "capability": torch.backends.cpu.get_cpu_capability(),
              "rounds": args.rounds, "quick": args.quick, "batch": BATCH, "compile_at": args.compile_at,
              "tokens": args.tokens, "arms": figures,
              "ext_vs": {arm: speedup(seconds[arm], seconds["ext"]) for arm in ARMS if arm != "ext"}}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{result['capability']}, {result['threads']} threads, batch {BATCH}, compiled at {args.compile_at} "
          f"tokens (dynamic), timed at {args.tokens}, {args.rounds} rounds; ms median (p10-p90)")
    for arm, f in figures.items():
        print(f"{arm:21s} {f['median_ms']:9.1f} ({f['p10_ms']:.1f}-{f['p90_ms']:.1f})  compile {f['compile_s']:.1f} s  "
              f"max |diff| {f['max_diff_of_largest']:.1e} of the largest  {f['gemms_served'] or ''}")
    for arm, r in result["ext_vs"].items():
        lo, hi = r["speedup_p10_p90"]
        print(f"ext vs {arm}: x{r['speedup']:.2f} ({lo:.2f}-{hi:.2f}{', within noise' if lo <= 1.0 <= hi else ''})")


if __name__ == "__main__":
    main()
