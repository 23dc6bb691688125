"""The family protocol at the lowering seam: a problem a family's ``refuse_problem()`` refuses is never
offered (ATen serves it, one log line), and a candidate that fails while Inductor builds or times
it is dropped with its reason logged; neither fails the user's compile."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

import _broken_family
from _logs import ext_log_lines
from inductor_ext.autotune import decide
from inductor_ext.lowering import candidate_guard, decision_record
from inductor_ext.templates import registry


def test_mps_prefill_linear_falls_back_to_aten_with_the_familys_reason():
    """metal.linear_gemv's problem_for accepts any F.linear shape; refuse_problem() refuses M > 4. The
    refusal must keep it out of the choices (it used to reach render inside Inductor's benchmark
    and fail the compile with "M=18 > 4: not a gemv (decode) shape")."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(64, 192), torch.randn(2, 9, 64)
    first = len(decision_record.decisions)
    with ext_log_lines() as lines, torch.no_grad():
        got = torch.compile(layer, backend="ext", options={"preset": "mps", "interpret": True})(x)
        want = layer(x)
    torch.testing.assert_close(got, want, rtol=1.3e-6, atol=1e-5)
    (decision,) = [d for d in decision_record.decisions[first:] if d.op == "addmm"]
    assert decision.winner == "addmm" and decision.reason == "fallback: M=18 > 4: not a gemv (decode) shape"
    assert [c["kind"] for c in decision.candidates] == ["aten"]  # nothing of the family was offered
    refused = [line for line in lines if line.startswith("ext: metal.linear_gemv not offered")]
    assert len(refused) == 1 and "(problem: M=18 > 4" in refused[0]


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    family = _broken_family
    family.calls.clear()
    families = {**registry.families(), family.NAME: family.FAMILY}
    monkeypatch.setattr(registry, "families", lambda: families)  # found as if it were a file in templates/
    return family


def test_a_candidate_that_fails_while_benchmarked_is_dropped_and_never_picked(broken, tmp_path):
    """Forced or not, a candidate whose render raises while Inductor times it costs only itself:
    each is dropped with its reason logged, ATen serves, and the generated code never calls it."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(24, 16), torch.randn(8, 24)
    options = {"templates": [broken.NAME], "autotune": "quick", "force_template": broken.NAME,
               "autotune_cache": str(tmp_path / "cache.db"), "inductor": {"fx_graph_cache": False}}
    first = len(decision_record.decisions)
    with ext_log_lines() as lines, torch.no_grad():
        compiled = torch.compile(layer, backend="ext", options=options)
        got = compiled(x)
        benchmarked = len(broken.calls)
        again = compiled(x)
        want = layer(x)
    assert benchmarked == 2, "both configs were offered and timed"
    assert len(broken.calls) == benchmarked, "the compiled code called a dropped candidate"
    torch.testing.assert_close(got, want, rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(again, want, rtol=1.3e-6, atol=1e-5)
    (decision,) = decision_record.decisions[first:]
    winner = next(c for c in decision.candidates if c["name"] == decision.winner)
    # ATen serves: its addmm or, under no_grad, its MKL-packed addmm, whichever timed faster
    assert winner["kind"] == "aten" and decision.winner in ("addmm", "ext_mkl_packed_addmm"), winner
    failed = [c for c in decision.candidates if c["kind"] == "template"]
    assert [c["error"] for c in failed] == [f"failed while benchmarked: ValueError: fake.broken cannot render "
                                            f"{c.name()} (on purpose)" for c in broken.ALL_CONFIGS]
    dropped = [line for line in lines if line.startswith("ext: dropped fake.broken")]
    assert len(dropped) == 2 and all("(on purpose)" in line for line in dropped)


class _Choice:
    """What candidate_guard needs of Inductor's ChoiceCaller."""

    def __init__(self, fail_build: bool, fail_run: bool) -> None:
        self.fail_build, self.fail_run, self.failed = fail_build, fail_run, False

    def precompile(self) -> None:
        if self.fail_build:
            raise TypeError("no such intrinsic")

    def benchmark(self, *args: object, out: object = None) -> float:
        if self.fail_run:
            raise ValueError("launch failed")
        return 0.5

    def mark_failed(self) -> None:
        self.failed = True


def test_guard_turns_a_build_failure_into_a_failed_choice_and_a_run_failure_into_inf():
    why: list[str] = []
    ok = candidate_guard.guard(_Choice(False, False), why.append)
    ok.precompile()
    assert ok.benchmark(1, out=2) == 0.5 and not ok.failed and why == []
    bad_build = candidate_guard.guard(_Choice(True, False), why.append)
    bad_build.precompile()
    assert bad_build.failed and why == ["failed to build: TypeError: no such intrinsic"]
    bad_run = candidate_guard.guard(_Choice(False, True), why.append)
    assert bad_run.benchmark(out=None) == float("inf") and why[-1] == "failed while benchmarked: ValueError: launch failed"


def test_force_template_is_not_overridden_by_a_cached_winner(monkeypatch, tmp_path):
    """force_template picks the family whenever it compiles: an autotune cache whose entry says
    ATen won (as it does after a plain autotuned compile of the same GEMM) must not stand in."""
    import _fake_extern_family as fake

    families = {**registry.families(), fake.NAME: fake.FAMILY}
    monkeypatch.setattr(registry, "families", lambda: families)
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(24, 16), torch.randn(8, 24)
    options = {"templates": [fake.NAME], "autotune": "quick", "autotune_cache": str(tmp_path / "cache.db"),
               "inductor": {"fx_graph_cache": False}}
    winners = []
    for extra in ({"template_margin": 1e6}, {"force_template": fake.NAME}):  # ATen wins and is cached; then forced
        torch._dynamo.reset()
        first = len(decision_record.decisions)
        with torch.no_grad():
            got = torch.compile(layer, backend="ext", options={**options, **extra})(x)
            torch.testing.assert_close(got, layer(x), rtol=1.3e-6, atol=1e-5)
        (decision,) = decision_record.decisions[first:]
        winners.append((decision.winner, decision.reason))
    # ATen won the first compile (its addmm, or MKL's packed GEMM on the frozen weight), by its timing
    # or (the template faster) by the margin, or on a machine busy enough that the OS preempted every
    # timed call of some choice (lowering/cold_timing.py: CI's two pytest workers share two cores)
    # with that choice left out or as the fallback
    assert winners[0][0] in ("addmm", "ext_mkl_packed_addmm"), winners
    assert (winners[0][1] in ("benchmark", "template within margin 100000000% of ATen")
            or winners[0][1].startswith("addmm within margin") or decide.os_disturbed(winners[0][1])), winners
    assert winners[1][0].startswith("ext_fake_mm_") and winners[1][1] == f"force_template={fake.NAME}"


def test_a_policy_config_outside_the_declared_values_is_refused_before_it_is_offered(monkeypatch, tmp_path):
    """A policy (or a family's configs()) proposing a value its Config does not declare: that
    config is not offered (one log line), so a winner is always one the autotune cache accepts
    (cache.put used to raise inside the compile when such a config won)."""
    import _fake_extern_family as fake
    from inductor_ext.autotune.cache import AutotuneCache

    proposing = dataclasses.replace(fake.FAMILY, configs=lambda problem, target: [fake.Config(3), fake.Config(1)])  # split <= 2
    families = {**registry.families(), fake.NAME: proposing}
    monkeypatch.setattr(registry, "families", lambda: families)
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(24, 16), torch.randn(8, 24)
    db = tmp_path / "cache.db"
    options = {"templates": [fake.NAME], "autotune": "quick", "autotune_cache": str(db),
               "inductor": {"fx_graph_cache": False}}
    first = len(decision_record.decisions)
    with ext_log_lines() as lines, torch.no_grad():
        got = torch.compile(layer, backend="ext", options=options)(x)
    torch.testing.assert_close(got, layer(x), rtol=1.3e-6, atol=1e-5)
    (decision,) = decision_record.decisions[first:]
    assert [c["config_dict"] for c in decision.candidates if c["kind"] == "template"] == [{"split": 1}]
    refused = [line for line in lines if line.startswith("ext: fake.mm config Config(split=3) not offered")]
    assert len(refused) == 1 and "fake.mm Config.split = 3 is not allowed" in refused[0], lines
    assert len(AutotuneCache(db).entries()) == 1  # the decision was remembered
