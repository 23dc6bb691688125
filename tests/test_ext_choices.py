"""ExtChoices.override_best_choice: the ATen margin and force_template rules, on fake timings."""

import pytest
from torch._inductor.select_algorithm import ExternKernelCaller

from inductor_ext import presets
from inductor_ext.lowering import ext_choices


class FakeAten(ExternKernelCaller):
    def __init__(self, name):  # no Inductor state needed for the rule
        self.name = name


class FakeTemplate:
    def __init__(self, name):
        self.name = name


def _decide(timings_by_name, **options):
    choices = {n: (FakeAten(n) if n == "aten" else FakeTemplate(n)) for n in timings_by_name}
    timings = {choices[n]: t for n, t in timings_by_name.items()}
    decision = ext_choices.Decision(node="mm", op="mm", problem={})
    decision.candidates = [{"name": n, "kind": "aten" if n == "aten" else "template",
                            "family": "aten" if n == "aten" else "triton.gemm", "time_us": None}
                           for n in timings_by_name]
    decision.choice_ids = {id(c): i for i, c in enumerate(choices.values())}
    ext_choices.decisions.append(decision)
    config = presets.resolve({"preset": "hopper", **options})
    best = min(timings, key=timings.get)
    chosen = ext_choices.ExtChoices(config).override_best_choice(best, timings)
    return chosen.name, decision


@pytest.mark.parametrize("template_ms, margin, winner", [
    (0.90, 0.05, "t0"),    # 10% faster beats a 5% margin
    (0.97, 0.05, "aten"),  # 3% faster does not
    (1.00, 0.0, "aten"),   # a tie keeps ATen
    (0.99, 0.0, "t0"),
    (1.50, 0.0, "aten"),
])
def test_margin(template_ms, margin, winner):
    chosen, decision = _decide({"aten": 1.0, "t0": template_ms}, template_margin=margin)
    assert chosen == winner
    assert decision.winner == winner
    assert decision.candidates[0]["time_us"] == 1000.0


def test_force_template_picks_fastest_template_that_ran():
    chosen, decision = _decide({"aten": 1.0, "t0": 5.0, "t1": 3.0, "t2": float("inf")},
                               force_template="triton.gemm")
    assert chosen == "t1"
    assert decision.reason == "force_template=triton.gemm"


def test_force_template_list_forces_any_of_its_families():
    chosen, decision = _decide({"aten": 1.0, "t0": 5.0, "t1": 3.0},
                               force_template=["triton.nvfp4_dequant_gemm", "triton.gemm"])
    assert chosen == "t1"
    assert decision.reason == "force_template=triton.gemm"


def test_force_template_falls_back_when_every_template_failed():
    chosen, _ = _decide({"aten": 1.0, "t0": float("inf")}, force_template="triton.gemm")
    assert chosen == "aten"


@pytest.mark.parametrize("preset, pdl, m, expected", [
    ("hopper", "auto", 16, True), ("hopper", "auto", 64, False), ("hopper", "force", 64, True),
    ("hopper", "off", 1, False), ("blackwell", "auto", 32, True), ("cpu", "off", 1, False)])
def test_pdl_option_sets_the_template_problem(preset, pdl, m, expected):
    import dataclasses

    from inductor_ext.lowering.prepared import Prepared
    from inductor_ext.templates.triton import gemm

    ready = Prepared(gemm.GemmProblem(m, 4096, 4096, "bfloat16"), (), None, {})
    chosen = ext_choices.ExtChoices(presets.resolve({"preset": preset, "pdl": pdl}))._with_pdl(ready)
    assert chosen.problem.use_pdl is expected
    assert dataclasses.replace(chosen.problem, use_pdl=False) == ready.problem
    assert gemm.constexprs(chosen.problem, gemm.configs(chosen.problem, "sm_90a")[0], "sm_90a")["USE_PDL"] is expected
