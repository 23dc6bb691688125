"""One progress line for autotuning in ext's own commands (``demo``, ``tune build``).

The line reads ``autotune 3/7 mm 8x32 32x96 float32``: decisions done, out of how many, and the
problem just decided. Inductor writes an ``Autotune Choices Stats:`` JSON line to stderr after
every autotuned choice, which would break the line up; inside :func:`autotune_progress` those
stats are off, unless ``TORCH_LOGS=ext_autotune`` is on (or the environment sets
``TORCHINDUCTOR_MAX_AUTOTUNE_REPORT_CHOICES_STATS=1``): then Inductor prints them as it would
anyway.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any, Iterator

import torch

from inductor_ext.autotune import decision_text
from inductor_ext.logs import autotune_log

STATS_ENV = "TORCHINDUCTOR_MAX_AUTOTUNE_REPORT_CHOICES_STATS"


def inductor_stats_wanted() -> bool:
    """Whether the user asked for Inductor's per-choice stats on stderr."""
    return autotune_log.isEnabledFor(logging.DEBUG) or os.environ.get(STATS_ENV) == "1"


@contextlib.contextmanager
def quiet_inductor_stats() -> Iterator[None]:
    """Inductor's ``Autotune Choices Stats`` and ``AUTOTUNE`` tables off while inside, unless the
    user asked for them (:func:`inductor_stats_wanted`)."""
    if inductor_stats_wanted():
        yield
        return
    from torch._inductor import select_algorithm

    printed = select_algorithm.PRINT_AUTOTUNE
    select_algorithm.PRINT_AUTOTUNE = False
    try:
        with torch._inductor.config.patch(max_autotune_report_choices_stats=False):
            yield
    finally:
        select_algorithm.PRINT_AUTOTUNE = printed


def _served_nodes() -> tuple[int, int] | None:
    """(id of the graph Inductor is lowering, how many of its nodes are ops ext's choices serve),
    or None outside a lowering. An estimate: Inductor may lower such a node without asking for
    choices (a tiny bmm becomes pointwise code)."""
    from torch._inductor.virtualized import V

    try:
        graph, choices = V.graph, V.choices
    except (AttributeError, AssertionError):
        return None
    serves = getattr(choices, "serves", None)
    if serves is None or getattr(graph, "graph", None) is None:
        return None
    count = sum(1 for n in graph.graph.nodes if n.op == "call_function"
                and isinstance(getattr(n.target, "_opname", None), str) and serves(n.target._opname))
    return id(graph), count


@contextlib.contextmanager
def autotune_progress(total: int | None = None, desc: str = "autotune", enabled: bool = True) -> Iterator[Any]:
    """A tqdm line on stderr advanced by each decision ext makes while inside, with Inductor's
    stats kept off it. Without ``total`` it counts the ops of each graph being lowered; at the
    end the line shows what was decided (``n/n``)."""
    from tqdm import tqdm

    from inductor_ext.lowering import decision_record

    bar = tqdm(total=total, desc=desc, unit="decision", disable=not enabled, file=sys.stderr, dynamic_ncols=True)
    graphs: dict[int, int] = {}  # graph id -> its estimated count (when total is estimated)

    def advance(decision: Any) -> None:
        if total is None:
            seen = _served_nodes()
            if seen is not None and seen[0] not in graphs:
                graphs[seen[0]] = seen[1]
                # the graphs before this one are done: their decisions are the count
                bar.total = bar.n + max(seen[1], 1)
        bar.set_postfix_str(decision_text.problem_text(decision.problem), refresh=False)
        bar.update(1)
        if bar.total is not None and bar.n > bar.total:
            bar.total = bar.n

    decision_record.listeners.append(advance)
    try:
        with quiet_inductor_stats():
            yield bar
    finally:
        decision_record.listeners.remove(advance)
        if total is None:
            bar.total = bar.n
            bar.refresh()
        bar.close()
