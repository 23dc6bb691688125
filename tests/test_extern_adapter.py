"""The generic extern adapter end to end: a family that is only a file following
templates/family.py (tests/_fake_extern_family.py) is offered beside ATen, benchmarked, chosen,
and called from the generated wrapper with its problem and target."""

import pytest

from _logs import records_of
from _script_runner import run_json_script


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("extern_family")
    return run_json_script("_extern_family_script.py", str(tmp / "cache.db"),
                           env={"TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor")})


def test_family_is_offered_beside_aten_and_wins_when_forced(compiled):
    (decision,) = compiled["decisions"]
    assert decision["op"] == "addmm" and decision["reason"] == "force_template=fake.mm"
    assert decision["candidates"][0] == "addmm"
    # beside ATen's addmm, MKL's packed GEMM on the frozen weight (an ATen-side choice), then the family's
    assert set(decision["candidates"][1:]) - {"ext_mkl_packed_addmm"} == {"ext_fake_mm_s1", "ext_fake_mm_s2"}
    assert decision["winner"] in ("ext_fake_mm_s1", "ext_fake_mm_s2")


def test_wrapper_calls_the_winner_with_problem_and_target(compiled):
    code, winner = compiled["code"], compiled["decisions"][0]["winner"]
    assert f"extern_kernels.{winner}(" in code
    assert "problem='{" in code and "\"addmm\": true" in code and "target='cpu'" in code
    assert compiled["calls"] > 2  # benchmarked, then run


def test_numbers_are_the_layers(compiled):
    assert compiled["max_err"] < 1e-5


def test_grouped_mm_is_offered_through_exts_lowering(compiled):
    grouped = compiled["grouped"]
    assert grouped["op"] == "grouped_mm" and grouped["candidates"][0] == "_grouped_mm"
    assert grouped["winner"].startswith("ext_fake_mm_") and grouped["called"] and grouped["exact"]


def test_a_failed_prebuild_is_logged_and_each_call_builds_its_own(caplog):
    """prebuild (one compiler run for a decision's candidates) is an optimisation: when it fails,
    lowering goes on and each candidate's call() builds (or fails) on its own."""
    import dataclasses
    import logging

    import _fake_extern_family

    from inductor_ext.lowering import adapters

    seen = []

    def prebuild(pairs, target, device_type):
        seen.append((pairs, target, device_type))
        raise RuntimeError("error: use of undeclared identifier 'oops'")

    fake = _fake_extern_family.FAMILY
    family = dataclasses.replace(fake, name="fake.prebuild", prebuild=prebuild)
    with records_of(caplog, adapters.log.name, logging.WARNING):
        adapters.prebuild_extern(family, "problem", ["c1", "c2"], "xpu", "cpu")
    assert seen == [([("problem", "c1"), ("problem", "c2")], "xpu", "cpu")]
    assert "could not prebuild 2 candidates" in caplog.text and "undeclared identifier 'oops'" in caplog.text
    adapters.prebuild_extern(dataclasses.replace(fake, prebuild=None), "problem", ["c1"], "xpu", "cpu")  # no hook
