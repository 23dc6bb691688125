"""The ``target ...: met / NOT met`` lines a bench prints after its table (``--json`` carries
the same ``targets``), one helper for every bench that states targets."""

from __future__ import annotations

from typing import Any, Mapping


def print_targets(targets: Mapping[str, Mapping[str, Any]], per: str | None = None) -> None:
    """One line per target (its ratio, what is wanted, met or not), then, when ``per`` names the
    target's breakdown ("per_row", "per_model"), why each row that misses misses."""
    for name, t in targets.items():
        print(f"target {name}: {t['ratio']} ({t['want']}) -> {'met' if t['met'] else 'NOT met'}")
        for row, v in (t.get(per, {}) if per else {}).items():
            if "why" in v:
                print(f"  {row}: {v['why']}")
