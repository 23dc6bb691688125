"""ExtChoices.override_best_choice: the ATen margin and force_template rules, on fake timings."""

import pytest
from torch._inductor.select_algorithm import ExternKernelCaller

from inductor_ext import presets
from inductor_ext.lowering import cold_timing, decision_record, ext_choices


class FakeAten(ExternKernelCaller):
    def __init__(self, name):  # no Inductor state needed for the rule
        self.name = name


class FakeTemplate:
    def __init__(self, name):
        self.name = name


def _decide(timings_by_name, default=None, families=None, warm=None, **options):
    choices = {n: (FakeAten(n) if n == "aten" else FakeTemplate(n)) for n in timings_by_name}
    cold_timing._warm.clear()
    cold_timing._warm.update({id(choices[n]): ms for n, ms in (warm or {}).items()})  # as a CPU compile times them
    timings = {choices[n]: t for n, t in timings_by_name.items()}
    decision = decision_record.Decision(node="mm", op="mm", problem={})
    decision.candidates = [{"name": n, "kind": "aten" if n == "aten" else "template",
                            "family": "aten" if n == "aten" else (families or {}).get(n, "triton.gemm"),
                            "time_us": None, "default": n == default}
                           for n in timings_by_name]
    for i, c in enumerate(choices.values()):
        decision.track(c, i)
    decision_record.decisions.append(decision)
    config = presets.resolve({"preset": "hopper", **options})
    best = min(timings, key=timings.get)
    try:
        chosen = ext_choices.ExtChoices(config).override_best_choice(best, timings)
    finally:
        cold_timing._warm.clear()
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


@pytest.mark.parametrize("other_ms, winner", [
    (0.80, "t1"),   # 20% faster than the family's default: evidence enough
    (0.97, "t0"),   # 3% is within the 5% margin: the default (upstream's pick) stays
    (0.953, "t0"),  # just inside the margin: still the default
    (0.95, "t1"),   # just beyond it
])
def test_another_config_must_beat_the_familys_default_by_the_margin(other_ms, winner):
    chosen, decision = _decide({"aten": 5.0, "t0": 1.0, "t1": other_ms}, default="t0", template_margin=0.05)
    assert chosen == winner
    if winner == "t0":
        assert decision.reason == "triton.gemm config within margin 5% of its default"


@pytest.mark.parametrize("warm_ms, winner", [
    ({"t0": 1.0, "t1": 0.80}, "t1"),  # 20% faster in both regimes
    ({"t0": 1.0, "t1": 0.90}, "t0"),  # 10% faster warm: within the cpu config margin (15%), the default stays
    ({"t0": 1.0, "t1": 0.97}, "t0"),  # 20% faster flushed, only 3% warm
    ({"t0": 1.0, "t1": 1.10}, "t0"),  # slower warm
    ({"t1": 0.5}, "t1"),              # the default was not timed warm: the flushed rule alone
])
def test_where_choices_were_also_timed_warm_another_config_must_win_both(warm_ms, winner):
    chosen, decision = _decide({"aten": 5.0, "t0": 1.0, "t1": 0.80}, default="t0", warm=warm_ms, template_margin=0.05)
    assert chosen == winner
    if winner == "t0":
        assert decision.reason == "triton.gemm config within margin 15%, timed warm, of its default"
    warm_us = {c["name"]: c.get("warm_time_us") for c in decision.candidates}
    assert warm_us == {"aten": None, **{n: warm_ms.get(n) and warm_ms[n] * 1000 for n in ("t0", "t1")}}


def test_timed_warm_the_cpu_config_margin_is_a_floor_not_a_cap():
    chosen, decision = _decide({"aten": 5.0, "t0": 1.0, "t1": 0.70}, default="t0", warm={"t0": 1.0, "t1": 0.80},
                               template_margin=0.30)  # a user's margin above 15% holds warm too
    assert chosen == "t0" and decision.reason == "triton.gemm config within margin 30%, timed warm, of its default"


@pytest.mark.parametrize("warm_ms, winner", [
    ({"aten": 1.0, "t0": 0.80}, "t0"),    # faster than ATen in both regimes
    ({"aten": 1.0, "t0": 0.97}, "t0"),    # 20% faster flushed, 3% warm: not slower warm, the template serves
    ({"aten": 1.0, "t0": 1.04}, "t0"),    # 4% slower warm: within the margin
    ({"aten": 1.0, "t0": 1.06}, "aten"),  # 6% slower warm
    ({"aten": 0.60, "t0": 0.80}, "aten"),  # 33% slower warm (MKL's packed sgemm at decode b8, fp32)
    ({"t0": 0.80}, "t0"),                 # ATen not timed warm: the flushed rule alone
])
def test_where_choices_were_also_timed_warm_a_template_must_not_lose_to_aten_there(warm_ms, winner):
    chosen, decision = _decide({"aten": 1.0, "t0": 0.80}, warm=warm_ms, template_margin=0.05)
    assert chosen == winner
    if winner == "aten":
        assert decision.reason == "template over 5% slower timed warm than ATen"


def test_the_familys_fastest_config_faces_aten_and_then_its_default_may_serve():
    # t1 beats ATen by 9%; the default t0 is within the margin of t1 (and only 4% ahead of ATen)
    chosen, decision = _decide({"aten": 0.98, "t0": 0.94, "t1": 0.90}, default="t0", template_margin=0.05)
    assert chosen == "t0"
    assert decision.reason == "triton.gemm config within margin 5% of its default"


@pytest.mark.parametrize("default_ms, warm_ms, winner", [
    (1.08, None, "aten"),                                    # the default is slower than ATen
    (0.97, {"aten": 1.0, "t0": 1.10, "t1": 1.0}, "aten"),    # faster flushed, 10% slower warm
    (0.97, {"aten": 1.0, "t0": 1.04, "t1": 0.95}, "t0"),     # 4% slower warm: within the margin
])
def test_a_default_that_serves_for_the_familys_fastest_must_not_lose_to_aten(default_ms, warm_ms, winner):
    """t1 beats ATen by the margin, but not its default by the margin (warm), so the default would
    serve: only where it does not lose to ATen itself."""
    warm = warm_ms or {"aten": 1.0, "t0": 1.0, "t1": 0.95}  # t1 within 15% warm of the default
    chosen, decision = _decide({"aten": 1.0, "t0": default_ms, "t1": 0.90}, default="t0", warm=warm,
                               template_margin=0.05)
    assert chosen == winner
    if winner == "aten":
        assert decision.reason.startswith("triton.gemm config within margin 15%, timed warm, of its default, which is")
        assert decision.reason.endswith("ATen")


def test_when_the_familys_fastest_is_within_the_margin_of_aten_aten_serves():
    chosen, decision = _decide({"aten": 1.0, "t0": 0.99, "t1": 0.97}, default="t0", template_margin=0.05)
    assert chosen == "aten"
    assert decision.reason == "template within margin 5% of ATen"


def test_a_default_of_another_family_does_not_hold_back_the_winner():
    chosen, _ = _decide({"aten": 5.0, "t0": 1.0, "t1": 0.98}, default="t0",
                        families={"t0": "cpp.gemm", "t1": "triton.gemm"}, template_margin=0.05)
    assert chosen == "t1"


def test_a_failed_default_does_not_hold_back_the_winner():
    chosen, _ = _decide({"aten": 5.0, "t0": float("inf"), "t1": 1.0}, default="t0", template_margin=0.05)
    assert chosen == "t1"


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
    chosen = ext_choices.ExtChoices(presets.resolve({"preset": preset, "pdl": pdl}))._with_pdl(gemm.FAMILY, ready)
    assert chosen.problem.use_pdl is expected
    assert dataclasses.replace(chosen.problem, use_pdl=False) == ready.problem
    assert gemm.constexprs(chosen.problem, gemm.configs(chosen.problem, "sm_90a")[0], "sm_90a")["USE_PDL"] is expected


def test_pdl_is_set_only_for_a_family_that_declares_it():
    """PDL is the record's ``pdl`` field, not the presence of a ``use_pdl`` attribute: a family
    whose Problem has the field but whose record does not declare PDL is left as it is."""
    import dataclasses

    from inductor_ext.lowering.prepared import Prepared
    from inductor_ext.templates.family import FamilyError
    from inductor_ext.templates.triton import gemm

    assert gemm.FAMILY.pdl
    undeclared = dataclasses.replace(gemm.FAMILY, pdl=False)
    ready = Prepared(gemm.GemmProblem(1, 4096, 4096, "bfloat16"), (), None, {})
    choices = ext_choices.ExtChoices(presets.resolve({"preset": "hopper", "pdl": "force"}))
    assert choices._with_pdl(undeclared, ready) is ready
    assert choices._with_pdl(gemm.FAMILY, ready).problem.use_pdl is True
    with pytest.raises(FamilyError, match="pdl=True, but its Problem has no use_pdl field"):
        dataclasses.replace(gemm.FAMILY, pdl=True, Problem=gemm.Config)


def _decide_aten(timings, warm=None):
    """ATen's mm ("aten") against MKL's packed sgemm offered for a frozen weight, cpu preset."""
    choices = {n: FakeAten(n) for n in timings}
    cold_timing._warm.clear()
    cold_timing._warm.update({id(choices[n]): ms for n, ms in (warm or {}).items()})
    decision = decision_record.Decision(node="mm", op="mm", problem={})
    decision.candidates = [{"name": n, "kind": "aten", "family": "aten", "time_us": None} for n in timings]
    for i, c in enumerate(choices.values()):
        decision.track(c, i)
    decision_record.decisions.append(decision)
    by_choice = {choices[n]: t for n, t in timings.items()}
    try:
        chosen = ext_choices.ExtChoices(presets.resolve({"preset": "cpu"})).override_best_choice(
            min(by_choice, key=by_choice.get), by_choice)
    finally:
        cold_timing._warm.clear()
    return chosen.name, decision


PACKED = "ext_mkl_packed_mm"


@pytest.mark.parametrize("timings, warm, winner", [
    ({"aten": 0.93, PACKED: 1.0}, {"aten": 1.0, PACKED: 0.97}, PACKED),  # faster flushed only (prefill fp32)
    ({"aten": 0.97, PACKED: 1.0}, {"aten": 0.90, PACKED: 1.0}, PACKED),  # within the margin flushed
    ({"aten": 0.90, PACKED: 1.0}, {"aten": 0.90, PACKED: 1.0}, "aten"),  # beyond it in both regimes
    ({"aten": 0.90, PACKED: 1.0}, None, "aten"),                          # not timed warm: flushed alone
    ({"aten": 1.0, PACKED: 0.98}, None, PACKED),                          # the packed GEMM was fastest
    ({"aten": 0.5, PACKED: float("inf")}, None, "aten"),                  # it failed
])
def test_mm_must_beat_the_packed_gemm_freezing_would_call_by_the_margin(timings, warm, winner):
    chosen, decision = _decide_aten(timings, warm)
    assert chosen == winner and decision.winner == winner
    if winner == PACKED and timings["aten"] < timings[PACKED]:
        assert decision.reason.startswith("aten within margin 5%") and decision.reason.endswith(PACKED)
