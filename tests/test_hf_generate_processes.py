"""bench/hf_generate.py --processes: runs made in separate processes combine per arm into the median
of their medians, with the spread across processes (where each arm's weights landed differs by
process on a VM), and the targets are judged on the combined figures."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import hf_generate  # noqa: E402


def _run(ms: dict[str, float], compile_s: float, outside_ms: float = 30.0, guards_ms: float = 10.0,
         bound_ms: float = 60.0) -> dict:
    """One process's figures: every arm spends ``outside_ms`` in generate()'s loop and ``guards_ms``
    in Dynamo; the rest of its call is inside its compiled graphs."""
    arms = {arm: {"ms": t, "p25_ms": t * 0.9, "p75_ms": t * 1.1, "n": 5, "tokens_per_s": 16 / t * 1e3,
                  "roofline": 0.5, "forward_ms": t - outside_ms, "outside_ms": outside_ms,
                  "graphs_ms": t - outside_ms - guards_ms, "graphs_roofline": bound_ms / (t - outside_ms - guards_ms)}
            for arm, t in ms.items()}
    rows = {"llama_static_float32": {"row": {}, "compile_s": {arm: compile_s for arm in ms}, "arms": arms,
                                     "bound_ms": bound_ms,
                                     "ext_decisions": {"total": 2, "templates_won": 2, "from_cache": 0}}}
    return {"wall_s": 10.0, "load_average_after": ["1.0"], "rows": rows, "targets": hf_generate.targets(rows)}


def test_processes_combine_into_the_median_of_their_medians():
    runs = [_run({"eager": 300.0, "inductor": 200.0, "inductor_max_autotune": 150.0, "ext": ext}, c)
            for ext, c in ((170.0, 40.0), (140.0, 50.0), (130.0, 45.0))]
    combined = hf_generate.combine(runs)
    ext = combined["rows"]["llama_static_float32"]["arms"]["ext"]
    assert ext["ms"] == 140.0 and ext["per_process_ms"] == [170.0, 140.0, 130.0] and ext["n"] == 3
    assert ext["p25_ms"] == 135.0 and ext["p75_ms"] == 155.0  # the spread across processes
    assert combined["rows"]["llama_static_float32"]["compile_s"]["ext"] == 45.0
    assert combined["rows"]["llama_static_float32"]["ext_ratio_per_process"] == [0.882, 1.071, 1.154]
    speed = combined["targets"]["ext_vs_best_inductor"]["per_row"]["llama_static_float32"]
    assert speed["ratio"] == round(150 / 140, 3) and speed["rel_iqr"] == round(20 / 140, 3)
    assert combined["processes"] == 3 and combined["wall_s"] == 30.0
    assert ext["forward_ms"] == 110.0 and ext["graphs_ms"] == 100.0  # split per arm, by median too


def _speed(ext_ms: float, best_ms: float, outside_ms: float, guards_ms: float, bound_ms: float) -> dict:
    run = _run({"eager": 300.0, "inductor": 2 * best_ms, "inductor_max_autotune": best_ms, "ext": ext_ms}, 40.0,
               outside_ms, guards_ms, bound_ms)
    return run["targets"]["ext_vs_best_inductor"]["per_row"]["llama_static_float32"]


def test_a_decode_row_that_misses_says_how_far_the_memory_bound_would_take_ext():
    # 150 ms against the best arm's 150: 90 ms in ext's graphs, the read bound 60 ms
    row = _speed(150.0, 150.0, outside_ms=50.0, guards_ms=10.0, bound_ms=60.0)
    assert not row["met"] and row["ceiling"] == 1.25
    assert "take 90.0 ms of its 150.0 ms call (0.67 of the read bound's 60.0 ms)" in row["why"], row["why"]
    assert "loop 50.0 ms, Dynamo's guards and wrappers 10.0 ms" in row["why"], row["why"]
    assert "out of reach" not in row["why"], row["why"]
    # graphs near the bound: even at the bound ext cannot reach 1.1x
    row = _speed(150.0, 150.0, outside_ms=50.0, guards_ms=10.0, bound_ms=84.0)
    assert row["ceiling"] == 1.042 and "out of reach here" in row["why"] and "at most 1.04x" in row["why"], row
    # graphs faster than the `sum` reads: the ceiling is where ext already is
    row = _speed(150.0, 140.0, outside_ms=50.0, guards_ms=10.0, bound_ms=95.0)
    assert row["ceiling"] == row["ratio"] == round(140 / 150, 3), row


def _prefill_run(ms: dict[str, float], splits: dict[str, dict[str, float]]) -> dict:
    arms = {arm: {"ms": t, "p25_ms": t * 0.99, "p75_ms": t * 1.01, "n": 5} for arm, t in ms.items()}
    for arm, split in splits.items():
        arms[arm]["split_ms"] = split
    rows = {"gpt2_prefill_bfloat16": {"row": {}, "compile_s": {arm: 10.0 for arm in ms}, "arms": arms,
                                      "ext_decisions": {"total": 3, "templates_won": 0, "from_cache": 0}}}
    return {"wall_s": 10.0, "load_average_after": ["1.0"], "rows": rows, "targets": hf_generate.targets(rows)}


def test_a_prefill_row_that_misses_says_where_each_calls_time_goes():
    splits = {"inductor_max_autotune": {"attention": 76.0, "library_gemm": 300.0, "rest": 64.0},
              "ext": {"attention": 75.0, "library_gemm": 301.0, "rest": 62.0}}
    run = _prefill_run({"eager": 480.0, "inductor": 470.0, "inductor_max_autotune": 440.0, "ext": 438.0}, splits)
    row = run["targets"]["ext_vs_best_inductor"]["per_row"]["gpt2_prefill_bfloat16"]
    assert not row["met"] and "ceiling" not in row, row
    assert ("ms of attention / library GEMMs / the rest: ext 75.0 / 301.0 / 62.0; "
            "inductor_max_autotune 76.0 / 300.0 / 64.0") in row["why"], row["why"]
    # combined across processes: each part by its median
    runs = [_prefill_run({"eager": 480.0, "inductor": 470.0, "inductor_max_autotune": 440.0, "ext": 438.0 + i},
                         {arm: {part: v + i for part, v in split.items()} for arm, split in splits.items()})
            for i in (0.0, 4.0, 2.0)]
    ext = hf_generate.combine(runs)["rows"]["gpt2_prefill_bfloat16"]["arms"]["ext"]
    assert ext["split_ms"] == {"attention": 77.0, "library_gemm": 303.0, "rest": 64.0}, ext


def test_split_call_puts_each_op_in_its_part_once():
    import torch
    import torch.nn.functional as F

    a, b = torch.randn(256, 256), torch.randn(256, 256)
    q = torch.randn(1, 4, 128, 64)

    def call():
        attended = F.scaled_dot_product_attention(q, q, q)
        return torch.mm(a, b).relu().sum() + torch.addmm(a, a, b).sum() + attended.exp().sum()

    call()
    split = hf_generate.split_call(call)
    assert set(split) == {"attention", "library_gemm", "rest"}, split
    assert split["attention"] > 0 and split["library_gemm"] > 0 and split["rest"] > 0, split


def test_split_parts_name_ext_s_attention_ops_and_kernels_as_attention():
    attention = dict(hf_generate.SPLIT_PARTS)["attention"]
    for name in ("aten::_scaled_dot_product_flash_attention_for_cpu", "inductor_ext::decode_attention",
                 "inductor_ext::prefill_attention", "inductor_ext::cpp.flash_attention"):
        assert attention.search(name), name
    assert not attention.search("aten::mm")


def _decode_row(cache: str, ext_ms: float, best_ms: float, bound_ms: float) -> dict:
    run = _run({"eager": 300.0, "inductor": 2 * best_ms, "inductor_max_autotune": best_ms, "ext": ext_ms}, 40.0,
               outside_ms=30.0, guards_ms=10.0, bound_ms=bound_ms)
    rows = run["rows"]
    rows["llama_static_float32"]["row"] = {"model": "llama", "cache": cache, "dtype": "float32"}
    return hf_generate.targets(rows)["ext_vs_best_inductor"]["per_row"]["llama_static_float32"]


def test_decode_rows_near_the_read_bound_want_parity_within_the_spread():
    # both arms' IQRs are +-10%: 0.96x is within the spread, and ext's graphs (100 ms) sit at 0.95 of the bound
    assert _decode_row("static", 140.0, 134.4, bound_ms=95.0)["met"]
    assert _decode_row("dynamic", 140.0, 134.4, bound_ms=95.0)["want"] == hf_generate.DECODE_PARITY
    # the same ratio with ext's graphs far from the read bound misses
    assert not _decode_row("static", 140.0, 134.4, bound_ms=60.0)["met"]
    # beyond the spread misses however near the bound
    assert not _decode_row("static", 140.0, 100.0, bound_ms=95.0)["met"]
    # the static cache sized 1024 (attention over mostly empty slots) keeps the 1.1x target
    row = _decode_row("static1024", 140.0, 147.0, bound_ms=95.0)
    assert row["want"] == hf_generate.SPEED_TARGET and not row["met"]
    assert _decode_row("static1024", 140.0, 155.0, bound_ms=95.0)["met"]
