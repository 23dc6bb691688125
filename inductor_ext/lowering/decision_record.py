"""The decision record: what happened to one problem a compile offered templates for (its
candidates, their timings, the winner and why), the list of this process's decisions that dumps,
the demo and the tests read, and the listeners told of each decided one.

``lowering/ext_choices.py`` (the choices handler) fills it; the decision rules (``autotune/decide.py``)
read a candidate through ``rule_candidate``. Its text is part of the cache key (``template_keys.py``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch._inductor.select_algorithm import ExternKernelCaller

from inductor_ext import tracing
from inductor_ext.autotune import decide
from inductor_ext.autotune.cache import ProblemKey
from inductor_ext.autotune.cache_entry import MAX_TEXT
from inductor_ext.lowering import aten_choices, cold_timing, ops
from inductor_ext.lowering.ops._spec import symbolic_indices

log = logging.getLogger("inductor_ext.autotune")


@dataclass
class Decision:
    """What happened to one GEMM problem: the candidates, their timings and the winner."""

    node: str  # FX node being lowered
    op: str
    problem: dict[str, Any]
    candidates: list[dict[str, Any]] = field(default_factory=list)
    winner: str = "aten"
    reason: str = "autotune off"
    key: ProblemKey | None = None  # set when the result should go into the autotune cache
    cached_under: ProblemKey | None = None  # the key a decision the cache served was found under

    def track(self, choice: Any, index: int) -> None:
        """Mark ``choice`` as this decision's candidate ``index``: Inductor hands the timings back
        keyed by its choices (``override_best_choice``), and the mark leads from them to here."""
        setattr(choice, _TAG, (self, index))

    def index_of(self, choice: Any) -> int | None:
        """The index of ``choice`` among this decision's candidates, or None when not one of them."""
        tag = getattr(choice, _TAG, None)
        return tag[1] if tag is not None and tag[0] is self else None


_TAG = "_inductor_ext_candidate"  # (Decision, candidate index) on each choice a decision offered


# Decisions made in this process, in order; dumps and the demo take what a compile added.
decisions: list[Decision] = []
# Called with each decision once its winner is known (offline builds show progress with it).
listeners: list[Callable[[Decision], None]] = []


def problem_text(op_name: str, kernel_inputs: Any, returned: bool = False) -> dict[str, Any]:
    """The problem as a decision shows it (``Decision.problem``): op, hinted shapes, dtype."""
    shapes = kernel_inputs.shapes_hinted()
    # the last input's dtype (a GEMM's B), passing over a boolean mask (decode attention's)
    dtypes = [node.get_dtype() for node in kernel_inputs.nodes()]
    dtype = str(next((d for d in reversed(dtypes) if d != torch.bool), dtypes[-1])).removeprefix("torch.")
    text = {"op": op_name, "shapes": [list(s) for s in shapes], "dtype": dtype}
    if precision := ops.problem_fp32_precision(op_name, (dtype,)):
        text["fp32_precision"] = precision  # which precision ATen and the fp32 templates ran
    if dynamic := symbolic_indices(kernel_inputs.nodes()):
        text["dynamic"] = [list(d) for d in dynamic]  # symbolic dims per input: "shapes" are their hints
    if returned:
        text["returned"] = True  # the graph returns the output: timed writing fresh pages
    return text


def candidate_record(choice: Any, kind: str, family: str, proposer: str | None, config: dict[str, Any] | None,
                     default: bool = False) -> dict[str, Any]:
    """One offered choice as ``Decision.candidates`` holds it (its time filled in once timed)."""
    return {"name": choice.name, "kind": kind, "family": family, "policy": proposer,
            "config": getattr(choice, "description", ""), "config_dict": config, "time_us": None,
            "default": default}


def cache_candidate(candidate: dict[str, Any]) -> dict[str, Any]:
    """A candidate as the cache stores it: Inductor times a choice that failed to compile or
    run as inf, which is stored as no time with an error."""
    time_us = candidate["time_us"]
    failed = time_us is not None and not math.isfinite(time_us)
    error = candidate.get("error") or ("failed to compile or run while autotuning" if failed else None)
    return {"name": candidate["name"], "time_us": None if failed else time_us, "policy": candidate["policy"],
            "error": None if error is None else error[:MAX_TEXT]}  # a long traceback is cut, as the validator reads it


def dropped(decision: Decision, index: int, why: str) -> None:
    """One candidate of ``decision`` failed while built or timed: one log line, and its record says why."""
    candidate = decision.candidates[index]
    candidate["error"] = why
    log.warning("ext: dropped %s config %s for %s: %s", candidate["family"], candidate["config"], decision.node, why)


def announce(decision: Decision) -> None:
    """Tell the trace and every listener that ``decision`` has its winner."""
    tracing.decision(decision)  # TORCH_TRACE / tlparse
    for listener in listeners:
        listener(decision)


def decision_of(timings: dict[Any, float]) -> Decision | None:
    """The decision whose choices Inductor timed (by the mark ``Decision.track`` left on them)."""
    for choice in timings:
        tag = getattr(choice, _TAG, None)
        if tag is not None:
            return tag[0]
    return None


def rule_candidate(choice: Any, time_ms: float, decision: Decision | None) -> decide.Candidate:
    """``choice`` as the decision rules read it: by its decision's record (ext's CuTeDSL choices are
    extern kernels too), else ATen's or not by its type, of no known family."""
    i = decision.index_of(choice) if decision is not None else None
    packed = choice.name in aten_choices.PACKED_NAMES
    if i is None:
        kind = "aten" if isinstance(choice, ExternKernelCaller) else "template"
        return decide.Candidate(choice.name, time_ms, cold_timing.warm_ms(choice), kind, None, False, packed,
                                cold_timing.disturbed(choice))
    candidate = decision.candidates[i]
    return decide.Candidate(choice.name, time_ms, cold_timing.warm_ms(choice), candidate["kind"], candidate["family"],
                            bool(candidate.get("default")), packed, cold_timing.disturbed(choice))
