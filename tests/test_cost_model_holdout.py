"""bench/cost_model_holdout.py: each width held out of a table, the model's pick for it read from
the held-out entry's own times. Plain numbers, no compile: it runs in the suite."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import cost_model_holdout as holdout  # noqa: E402  (bench/, on the path above)

from inductor_ext.autotune import cost_model, decision_tables  # noqa: E402
from inductor_ext.autotune.cache_entry import Entry, ProblemKey  # noqa: E402

FORM = "AVX2, 2 threads"
ROOT = Path(__file__).resolve().parents[1]


def _entry(m: int, n: int, k: int, op_us: float, template_us: float, packed_us: float | None = None) -> Entry:
    key = ProblemKey(op="mm", shapes=((m, k), (k, n)), strides=((k, 1), (1, k)), dtypes=("float32", "float32"),
                     device_name=FORM, arch="cpu", preset="cpu", fp32_precision="ieee")
    candidates = [{"name": "mm", "time_us": op_us, "policy": None, "error": None},
                  {"name": "cpp_gemm_0", "time_us": template_us, "policy": "default", "error": None}]
    if packed_us is not None:
        candidates.append({"name": "ext_mkl_packed_mm", "time_us": packed_us, "policy": None, "error": None})
    aten = min(t for t in (op_us, packed_us) if t is not None)
    won = template_us < aten
    config = {"block_m": 4, "block_n": 16, "block_k": 1, "isa": "avx2"} if won else {
        "name": "mm" if aten == op_us else "ext_mkl_packed_mm"}
    return Entry(key=key, winner="cpp.gemm" if won else "aten", config=config,
                 winner_time_us=min(template_us, aten), aten_time_us=aten, candidates=candidates)


def test_a_pick_is_read_from_the_held_out_entrys_own_times() -> None:
    # the template wins by half everywhere but at this one problem, where it ran 3x ATen's time
    near = [_entry(m, 768, 768, 100.0, 50.0) for m in (8, 16, 32, 64)]
    model = cost_model.CostModel.from_entries(near)
    assert model.predict(near[0].key).template_wins(0.05)
    odd = _entry(24, 768, 768, 100.0, 300.0)
    pick = holdout.pick_for(model, odd, 0.05)
    assert pick is not None and pick.served == "template" and pick.model_us == 300.0
    assert pick.op_us == 100.0 and pick.table_us == 100.0 and pick.predicted and pick.other_family
    # where ATen serves: the ATen-side pick's own time in the held-out entry, else the op's
    loses = [_entry(m, 768, 768, 100.0, 200.0, packed_us=80.0) for m in (8, 16, 32, 64)]
    pick = holdout.pick_for(cost_model.CostModel.from_entries(loses), _entry(24, 768, 768, 100.0, 200.0, 130.0), 0.05)
    assert pick.served == "ext_mkl_packed_mm" and pick.model_us == 130.0 and pick.table_us == 100.0
    pick = holdout.pick_for(cost_model.CostModel.from_entries(loses), _entry(24, 768, 768, 100.0, 200.0), 0.05)
    assert pick.served == "mm" and pick.model_us == 100.0


def test_a_width_held_out_takes_out_every_entry_with_that_size() -> None:
    entries = [_entry(m, n, 768, 100.0, 50.0) for m in (8, 16, 32) for n in (768, 1024)]
    picks = holdout.held_out(entries, 1024, 0.05)
    assert len(picks) == 3 and all(p.served == "template" for p in picks)  # predicted from the 768-wide ones
    assert holdout.held_out(entries, 768, 0.05) and len(holdout.held_out(entries, 768, 0.05)) == 6  # K is 768 too
    assert holdout.held_out(entries, 512, 0.05) == []


def test_the_summary_counts_losses_against_the_op_and_the_table() -> None:
    picks = [holdout.Pick("mm", "float32", "template", 50.0, 100.0, 50.0, True, False),
             holdout.Pick("mm", "float32", "mm", 100.0, 100.0, 40.0, True, False),
             holdout.Pick("mm", "float32", "ext_mkl_packed_mm", 120.0, 100.0, 100.0, False, False)]
    s = holdout.summary(picks)
    assert s["problems"] == 3 and s["predicted"] == 2 and s["templates"] == 1
    assert s["model_over_op"] == pytest.approx((2.0 * 1.0 / 1.2) ** (1 / 3))
    assert s["table_over_op"] == pytest.approx((2.0 * 2.5 * 1.0) ** (1 / 3))
    assert s["slower_than_op"] == 1 and s["worst_vs_op"] == pytest.approx(1.2)
    assert s["slower_than_table"] == 2  # 100 against 40, 120 against 100
    assert math.isnan(holdout.summary([])["model_over_op"])


def test_the_script_reports_every_package_table_and_every_width_the_build_knows() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "cost_model_holdout.py"), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout[done.stdout.index("\n{") + 1:])
    assert set(report) == {p.name for p in decision_tables.package_table_paths()}
    widths = set(map(str, holdout.hidden_widths()))
    for rows in report.values():
        assert "all" in rows and set(rows) - {"all"} <= widths
        assert rows["all"]["problems"] == sum(r["problems"] for w, r in rows.items() if w != "all")
        assert rows["all"]["predicted"] <= rows["all"]["problems"]
