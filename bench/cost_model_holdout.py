"""How the cost model picks for a model nobody tuned: each hidden width of a decision table held out.

For each hidden width the table build knows (``scripts/build_decision_tables.py``'s ``STYLES``),
every entry with a size of that width anywhere is taken out of the table (so 512 also takes out
every 512-token problem, 8192 every 8192-wide FFN, 1024 the 1024-slot caches), the cost model
(``autotune/cost_model.py``) is fitted to the rest, and each held-out problem gets what
``autotune="model"`` would serve it (``lowering/ext_choices._untimed_pick``'s rule: a template
where it predicts a win by the margin, its error included; else the nearest entry's ATen-side pick;
else ATen's op). Each pick's time is read from the held-out entry's own measurements, so the
figures are the model's against two arms measured side by side in the table build:

  ATen's op          what Inductor's default calls (the op's time in the entry)
  the table          the entry's measured winner (what ``autotune="full"`` would serve)

A template pick is read at the best template time the entry measured (its config may differ from
the one served: those times are an upper bound on the model's speed; the count of picks whose
family is not the entry's winner says how often that matters). Nothing is timed here: the table's
numbers are the measurements.

    python bench/cost_model_holdout.py [--table FILE] [--margin 0.05] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from inductor_ext.autotune import cost_model, decision_tables
from inductor_ext.autotune.cache_entry import Entry

ROOT = Path(__file__).resolve().parent.parent
LOSS = 1.05  # a pick more than 5% slower than the arm it is compared with


def hidden_widths() -> list[int]:
    """The hidden widths the table build knows (``STYLES``), read from the build script."""
    spec = importlib.util.spec_from_file_location("build_decision_tables", ROOT / "scripts" / "build_decision_tables.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, script)  # its dataclasses look their module up
    spec.loader.exec_module(script)
    return sorted({w for widths in script.STYLES.values() for w in widths})


@dataclass(frozen=True)
class Pick:
    """One held-out problem: the model's pick and the three times read from its entry."""

    op: str
    dtype: str
    served: str  # "template", the ATen-side choice's name, or the op
    model_us: float
    op_us: float
    table_us: float
    predicted: bool  # whether the model had a prediction (else it served ATen's op or a lent pick)
    other_family: bool  # a template pick whose family is not the entry's winner


def _times(entry: Entry) -> dict[str, float]:
    return {c["name"]: float(c["time_us"]) for c in entry.candidates if c.get("time_us")}


def pick_for(model: cost_model.CostModel, entry: Entry, margin: float) -> Pick | None:
    """What the model serves ``entry``'s problem, timed by ``entry``; None where the entry holds
    no time for ATen's op (nothing to compare with)."""
    times = _times(entry)
    op_us = times.get(entry.key.op)
    if op_us is None or entry.winner_time_us is None:
        return None
    prediction = model.predict(entry.key)
    template_times = [float(c["time_us"]) for c in entry.candidates if c.get("policy") is not None and c.get("time_us")]
    other = False
    if prediction.template_wins(margin) and template_times:
        served, model_us = "template", min(template_times)
        other = entry.winner == "aten" or all(f != entry.winner for f, _ in prediction.configs[:1])
    else:
        aten = prediction.aten_pick(margin)
        served = aten if aten in times else entry.key.op
        model_us = times[served]
    return Pick(entry.key.op, entry.key.dtypes[0], served, model_us, op_us, float(entry.winner_time_us),
                prediction.log_ratio is not None, other)


def held_out(entries: Sequence[Entry], width: int, margin: float) -> list[Pick]:
    """The picks for every entry with a size of ``width``, by a model of the others."""
    def has(entry: Entry) -> bool:
        return any(width in shape for shape in entry.key.shapes)

    model = cost_model.CostModel.from_entries([e for e in entries if not has(e)])
    return [p for p in (pick_for(model, e, margin) for e in entries if has(e)) if p is not None]


def _geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def summary(picks: Sequence[Pick]) -> dict[str, Any]:
    """Speed-ups over ATen's op (geometric means), and the losses, of the model and the table."""
    return {
        "problems": len(picks),
        "predicted": sum(p.predicted for p in picks),
        "templates": sum(p.served == "template" for p in picks),
        "other_family": sum(p.other_family for p in picks),
        "model_over_op": _geomean([p.op_us / p.model_us for p in picks]),
        "table_over_op": _geomean([p.op_us / p.table_us for p in picks]),
        "model_share_of_table": _geomean([p.table_us / p.model_us for p in picks]),
        "slower_than_op": sum(p.model_us > LOSS * p.op_us for p in picks),
        "worst_vs_op": max((p.model_us / p.op_us for p in picks), default=float("nan")),
        "slower_than_table": sum(p.model_us > LOSS * p.table_us for p in picks),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", help="a table file (default: each of the package's tables)")
    parser.add_argument("--margin", type=float, default=0.05, help="the template margin (the cpu preset's: 0.05)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args(argv)
    paths = [Path(args.table)] if args.table else decision_tables.package_table_paths()
    widths = hidden_widths()
    report: dict[str, Any] = {}
    for path in paths:
        table = decision_tables.load_table(path)
        if table is None:
            print(f"{path}: refused (the line above says why)", file=sys.stderr)
            return 1
        entries = list(table.entries.values())
        rows, everything = {}, []
        for width in widths:
            picks = held_out(entries, width, args.margin)
            if picks:
                rows[str(width)] = summary(picks)
                everything += picks
        rows["all"] = summary(everything)
        report[path.name] = rows
        print(f"\n{path.name}: {len(entries)} entries ({table.provenance.get('form', '?')}); each width held out, "
              f"margin {args.margin:g}")
        print(f"{'held out':>8} {'problems':>8} {'predicted':>9} {'templates':>9} {'model/op':>9} {'table/op':>9} "
              f"{'model/table':>11} {'>5% slower than op':>18} {'worst vs op':>11} {'>5% slower than table':>21}")
        for width, s in rows.items():
            print(f"{width:>8} {s['problems']:>8} {s['predicted']:>9} {s['templates']:>9} {s['model_over_op']:>8.2f}x "
                  f"{s['table_over_op']:>8.2f}x {s['model_share_of_table']:>10.2f}x {s['slower_than_op']:>18} "
                  f"{s['worst_vs_op']:>10.2f}x {s['slower_than_table']:>21}")
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
