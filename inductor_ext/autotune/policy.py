"""Candidate policies: which configs of a template to try, in which order, and who proposed each.

A policy proposes configs for one (template family, problem, target). ``candidates()`` merges the
proposals of the policies that apply round-robin (each policy's best first), drops duplicates
(the first proposer keeps the credit), and cuts the list to the effort's budget. ATen is not a candidate here: the lowering always
adds it, so every template is measured against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from inductor_ext import targets
from inductor_ext.templates.family import Family

# How many template configs each autotune effort benchmarks (None: all proposed).
EFFORT_BUDGET: dict[str, int | None] = {"off": 0, "cache-only": 0, "model": 0, "background": 0, "quick": 4, "full": None}


@dataclass(frozen=True)
class Candidate:
    config: Any  # the template family's config object, e.g. GemmConfig
    policy: str  # the policy that proposed it (recorded in the cache and the dumps)


class Policy(Protocol):
    name: str

    def applies(self, family: Family, problem: Any, target: str) -> bool: ...

    def propose(self, family: Family, problem: Any, target: str) -> list[Any]: ...


class DefaultPolicy:
    """The template's own default configs for the target."""

    name = "default"

    def applies(self, family: Family, problem: Any, target: str) -> bool:
        return True

    def propose(self, family: Family, problem: Any, target: str) -> list[Any]:
        return list(family.configs(problem, target))


class ModelPolicy:
    """The configs that won near the problem in the decision tables (``cost_model.Prediction``),
    nearest first: ``autotune="quick"`` times these (``QUICK_FROM_MODEL`` of them) instead of
    the default proposals where the model has any."""

    name = "model"

    def __init__(self, configs: Sequence[Any]) -> None:
        self.configs = list(configs)

    def applies(self, family: Family, problem: Any, target: str) -> bool:
        return bool(self.configs)

    def propose(self, family: Family, problem: Any, target: str) -> list[Any]:
        return list(self.configs)


QUICK_FROM_MODEL = 2  # configs "quick" times where the tables name winners nearby (the family default besides)


def default_policies(target: str, family: Family | None = None) -> list[Policy]:
    """Policies for a target, most specific first; for ``family``, only those it takes: the
    GEMM tile policies (decode, nvMatmulHeuristics: they read a GEMM problem's m, n, k) only for
    a family that declares ``config_from_tile`` (``Family.takes_tiles``), every other family its
    own default configs alone."""
    policies: list[Policy] = []
    if targets.vendor(target) == "nvidia" and (family is None or family.takes_tiles):
        from inductor_ext.autotune import decode_policy, nvmmh_policy

        policies += [decode_policy.DecodePolicy(), nvmmh_policy.NvMatmulHeuristicsPolicy()]
    policies.append(DefaultPolicy())
    return policies


def candidates(family: Family, problem: Any, target: str, effort: str,
               policies: Sequence[Policy] | None = None,
               ruled_out: Callable[[Any], str | None] | None = None) -> list[Candidate]:
    """Merged, de-duplicated proposals, cut to the effort's budget; a config ``ruled_out`` gives
    a reason for is left out before the cut (it would otherwise take a place in the budget)."""
    if effort not in EFFORT_BUDGET:
        raise ValueError(f"autotune effort {effort!r} is not one of {', '.join(EFFORT_BUDGET)}")
    budget = EFFORT_BUDGET[effort]
    if budget == 0:
        return []
    proposals = [(p.name, p.propose(family, problem, target))
                 for p in (policies if policies is not None else default_policies(target, family))
                 if p.applies(family, problem, target)]
    # Round-robin over the policies, so a small budget still tries each one's best ideas.
    merged: dict[Any, Candidate] = {}
    for rank in range(max((len(configs) for _, configs in proposals), default=0)):
        for name, configs in proposals:
            if rank < len(configs):
                merged.setdefault(configs[rank], Candidate(configs[rank], name))
    ranked = [c for c in merged.values() if ruled_out is None or not ruled_out(c.config)]
    return ranked if budget is None else ranked[:budget]
