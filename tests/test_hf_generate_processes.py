"""bench/hf_generate.py --processes: runs made in separate processes combine per arm into the median
of their medians, with the spread across processes (where each arm's weights landed differs by
process on a VM), and the targets are judged on the combined figures."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import hf_generate  # noqa: E402


def _run(ms: dict[str, float], compile_s: float) -> dict:
    arms = {arm: {"ms": t, "p25_ms": t * 0.9, "p75_ms": t * 1.1, "n": 5, "tokens_per_s": 16 / t * 1e3,
                  "roofline": 0.5} for arm, t in ms.items()}
    rows = {"llama_static_float32": {"row": {}, "compile_s": {arm: compile_s for arm in ms}, "arms": arms,
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
