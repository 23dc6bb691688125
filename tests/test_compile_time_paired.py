"""bench/compile_time.py's side-by-side runtimes: the arms' calls alternated in one process, and
the runtime targets judged on each round's ratio. Plain numbers, no compile."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import compile_time  # noqa: E402  (bench/, on the path above)


def _calls(**per_arm: list[float]) -> dict[str, list[float]]:
    base = [10.0, 11.0, 9.0, 10.5, 9.5, 10.0, 12.0, 8.0, 10.0]
    calls = {arm: list(base) for arm in compile_time.PAIRED}
    calls.update(per_arm)
    return calls


def test_every_arm_is_paired_and_ext_default_compiles_before_ext_full() -> None:
    """ext_full tunes into the paired process's own cache, which ext_default would read if it
    compiled after it."""
    assert set(compile_time.PAIRED) == set(compile_time.ARMS)
    assert compile_time.PAIRED.index("ext_default") < compile_time.PAIRED.index("ext_full")


def test_each_target_is_the_ratio_of_each_round_against_its_base() -> None:
    slower = [t * 1.2 for t in _calls()["ext_full"]]
    figures = compile_time.paired_figures(_calls(ext_default=slower, inductor=[t * 2 for t in slower]))
    ratios = figures["ratios"]
    assert ratios["default_runtime"]["against"] == "ext_full"
    assert ratios["default_runtime"]["median"] == pytest.approx(1.2)
    assert ratios["default_runtime"]["p10"] == pytest.approx(1.2) and ratios["default_runtime"]["p90"] == pytest.approx(1.2)
    # the faster Inductor arm by its median: max-autotune here
    assert ratios["default_vs_inductor"]["against"] == "inductor_max_autotune"
    assert ratios["default_vs_inductor"]["median"] == pytest.approx(1.2)
    assert ratios["shipped_runtime"]["against"] == "ext_full" and ratios["shipped_runtime"]["median"] == 1.0
    arm = figures["arms"]["ext_default"]
    assert arm["median"] == pytest.approx(statistics.median(slower), abs=1e-3) and arm["calls"] == 9
    assert arm["p10"] <= arm["q1"] <= arm["median"] <= arm["q3"] <= arm["p90"]
    q1, _, q3 = statistics.quantiles(slower, n=4)
    assert arm["q1"] == pytest.approx(q1, abs=1e-3) and arm["q3"] == pytest.approx(q3, abs=1e-3)
    assert arm["q1"] < arm["median"]


def test_rounds_pair_up_so_a_slow_round_slows_both_arms_alike() -> None:
    """The machine slows every arm in a round: per-round ratios stay 1 where medians of each arm
    alone would not say so as firmly."""
    wave = [10.0, 30.0, 10.0, 30.0, 10.0, 30.0, 10.0, 30.0, 10.0]
    figures = compile_time.paired_figures(_calls(ext_default=wave, ext_full=wave))
    r = figures["ratios"]["default_runtime"]
    assert r["median"] == r["q1"] == r["q3"] == 1.0


def _model(ratios: dict[str, float]) -> dict:
    figures = {"arms": {a: {"median": 10.0} for a in compile_time.PAIRED},
               "ratios": {t: {"against": "ext_full", **q} for t, q in ratios.items()}}
    return {"paired": figures, "arms": {"ext_default": {"decision_reasons": {"table": 3}}}}


@pytest.mark.parametrize("q1,median,met,noise", [(0.9, 1.02, True, False), (0.99, 1.03, True, False),
                                                 (1.0, 1.04, True, True), (1.03, 1.05, True, True),
                                                 (1.031, 1.05, False, False)])
def test_a_paired_row_is_met_by_its_median_ratio_or_within_noise_by_its_lower_quartile(q1, median, met, noise):
    limit = 1.03
    q = {"median": median, "q1": q1, "q3": median + 0.05, "p10": q1 - 0.05, "p90": median + 0.1}
    row = compile_time.paired_row(_model({"default_runtime": q}), "default_runtime", "ext_default", limit)
    assert row["met"] is met and row["within_noise"] is noise and row["paired"]
    assert row["ratio"] == round(median, 3) and row["ratio_iqr"] == [q1, median + 0.05]
    assert ("why" in row) is not met
    if not met:
        assert row["why"].startswith("side by side, ext_default/ext_full per round 1.050 (IQR 1.031-1.100)")
        assert "{'table': 3}" in row["why"]


def test_the_targets_use_the_paired_rounds_where_a_model_has_them() -> None:
    q = {"median": 1.2, "q1": 1.15, "q3": 1.25, "p10": 1.1, "p90": 1.3}
    model = _model({t: dict(q) for t in compile_time.RUNTIME_TARGETS})
    model["paired"]["ratios"]["default_vs_inductor"]["against"] = "inductor"
    model["median_s"] = {a: 0.5 if a.startswith("ext") else 1.0 for a in compile_time.ARMS}  # compiles met
    model["arms"] = {a: {"runtime_ms": {"median": 1.0, "q1": 1.0, "q3": 1.0}, "decision_reasons": {},
                         "phases": {}, "builds": {}, "seconds": 1.0, "decisions": 0} for a in compile_time.ARMS}
    found = compile_time.targets({"m": model})
    for name in compile_time.RUNTIME_TARGETS:  # the per-process runtimes (all equal) would have met them
        row = found[name]["per_model"]["m"]
        assert row["paired"] and row["ratio"] == 1.2 and not row["met"], (name, row)
        assert not found[name]["met"] and found[name]["ratio"] == 1.2  # a model's miss misses the target


def test_a_shipped_miss_says_whether_its_decisions_were_ext_fulls_in_that_process() -> None:
    q = {"median": 1.07, "q1": 1.04, "q3": 1.12, "p10": 1.0, "p90": 1.14}
    model = _model({"shipped_runtime": q})
    model["arms"]["ext_shipped"] = {"decision_reasons": {"cache": 14}}
    for same in (True, False):
        model["paired"]["shipped_same_decisions_as_full"] = same
        row = compile_time.paired_row(model, "shipped_runtime", "ext_shipped", 1.0)
        assert not row["met"] and f"'same decisions as ext_full in this process': {same}" in row["why"], row
        assert "'cache': 14" in row["why"]
