"""ext's InductorChoices: adds our template choices beside ATen and decides the winner.

Installed through ``torch._inductor.config.inductor_choices_class`` (a config patch, so the
backward compile gets it too; its uuid() enters the FX graph cache key).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from torch._inductor.choices import InductorChoices
from torch._inductor.select_algorithm import ExternKernelCaller, ExternKernelChoice
from torch._inductor.virtualized import V

from inductor_ext.config import ExtConfig
from inductor_ext.lowering import triton_gemm
from inductor_ext.templates.base import module_source_hash

log = logging.getLogger("inductor_ext.autotune")

# Template family -> the lowering adapter that offers it, for the ops it serves.
ADAPTERS = {triton_gemm.FAMILY: (triton_gemm, ("mm", "addmm"))}


def available_templates() -> dict[str, Any]:
    return dict(ADAPTERS)


@dataclass
class Decision:
    """What happened to one GEMM problem: the candidates, their timings and the winner."""

    node: str  # FX node being lowered
    op: str
    problem: dict[str, Any]
    candidates: list[dict[str, Any]] = field(default_factory=list)
    winner: str = "aten"
    reason: str = "autotune off"
    choice_ids: dict[int, int] = field(default_factory=dict)  # id(ChoiceCaller) -> candidate index


# Decisions made in this process, in order; the dump writer takes what a compile added.
decisions: list[Decision] = []


class ExtChoices(InductorChoices):
    def __init__(self, config: ExtConfig) -> None:
        super().__init__()
        self.config = config

    def uuid(self) -> str:
        sources = [module_source_hash(sys.modules[__name__])]
        sources += [module_source_hash(sys.modules[a.__name__]) for a, _ in ADAPTERS.values()]
        return hashlib.sha256("|".join([self.config.to_json(), *sources]).encode()).hexdigest()

    def get_template_configs(self, kernel_inputs: Any, templates: list[Any], op_name: str,
                             kwarg_overrides: dict[str, dict[str, Any]] | None = None) -> list[Any]:
        choices = super().get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)
        # Inductor asks once per lowering with its ATen choice in the list: add ours then.
        if not any(isinstance(t, ExternKernelChoice) for t in templates):
            return choices
        families = [f for f in self.config.templates if op_name in ADAPTERS[f][1]]
        if not families or self.config.autotune == "off":
            return choices
        node = V.graph.current_node.name if V.graph.current_node is not None else "?"
        decision = Decision(node=node, op=op_name, problem={"op": op_name})
        decision.candidates = [_describe(c, "aten", None) for c in choices]
        for family in families:
            reason = self._unusable_reason(family, kernel_inputs)
            before = len(choices)
            if reason is None:
                reason, decision.problem = ADAPTERS[family][0].append_choices(choices, kernel_inputs, op_name, self.config)
            if reason:
                log.info("ext: %s not offered for %s (%s): %s; ATen serves it", family, node, op_name, reason)
                decision.reason = f"fallback: {reason}"
            decision.candidates += [_describe(c, "template", family) for c in choices[before:]]
        decision.choice_ids = {id(c): i for i, c in enumerate(choices)}
        decisions.append(decision)
        return choices

    def _unusable_reason(self, family: str, kernel_inputs: Any) -> str | None:
        device = kernel_inputs.device_type
        if device == "cpu" and not self.config.interpret:
            return "Triton templates run on CPU only with options={'interpret': True} (the Triton interpreter)"
        if device != "cpu" and device != self.config.device_type:
            return f"preset {self.config.preset!r} is for {self.config.device_type}, not {device}"
        return None

    def override_best_choice(self, best_choice: Any, timings: dict[Any, float]) -> Any:
        decision = _find_decision(timings)
        aten = [c for c in timings if isinstance(c, ExternKernelCaller)]
        aten_time = min((timings[c] for c in aten), default=float("inf"))
        chosen, reason = best_choice, "benchmark"
        forced = [c for c in timings if _family_of(c, decision) == self.config.force_template
                  and timings[c] != float("inf")]
        if self.config.force_template and forced:
            chosen, reason = min(forced, key=timings.__getitem__), f"force_template={self.config.force_template}"
        elif not isinstance(best_choice, ExternKernelCaller) and aten:
            # A template must beat ATen by the margin; otherwise ATen is the safer choice.
            if timings[best_choice] * (1 + self.config.template_margin) >= aten_time:
                chosen = min(aten, key=timings.__getitem__)
                reason = f"template within margin {self.config.template_margin:.0%} of ATen"
        if decision is not None:
            for c, t in timings.items():
                i = decision.choice_ids.get(id(c))
                if i is not None:
                    decision.candidates[i]["time_us"] = round(t * 1000, 3)
            decision.winner = decision.candidates[decision.choice_ids[id(chosen)]]["name"]
            decision.reason = reason
        return chosen


def _describe(choice: Any, kind: str, family: str | None) -> dict[str, Any]:
    return {"name": choice.name, "kind": kind, "family": family or "aten",
            "config": getattr(choice, "description", ""), "time_us": None}


def _find_decision(timings: dict[Any, float]) -> Decision | None:
    for decision in reversed(decisions):
        if any(id(c) in decision.choice_ids for c in timings):
            return decision
    return None


def _family_of(choice: Any, decision: Decision | None) -> str | None:
    if decision is None or id(choice) not in decision.choice_ids:
        return None
    return decision.candidates[decision.choice_ids[id(choice)]]["family"]


def choices_factory(config: ExtConfig) -> Callable[[], ExtChoices]:
    return functools.partial(ExtChoices, config)
