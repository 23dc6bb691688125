"""lowering/refusals.py: every way a choice is not offered is one of four stages, one return shape
(a ``Refusal`` or None), one log line form (issue 48, item 3)."""

from __future__ import annotations

import pytest

from inductor_ext import presets
from inductor_ext.lowering import refusals
from inductor_ext.lowering.refusals import Refusal
from inductor_ext.templates import registry
from inductor_ext.templates.cpp import gemm as cpp_gemm
from inductor_ext.templates.family import OpSpec, TensorSpec


def _mm(m: int, k: int, n: int, dtype: str = "float32") -> OpSpec:
    weight = TensorSpec((k, n), (n, 1), dtype, constant=True)  # frozen: what the C++ GEMM packs
    return OpSpec("mm", (TensorSpec((m, k), (k, 1), dtype), weight),
                  TensorSpec((m, n), (n, 1), dtype), {}, "cpu")


def test_a_refusal_has_one_of_the_stages_and_one_line_form():
    with pytest.raises(ValueError, match=r"refusal stage 'nope' is not one of \('here', 'problem', 'config', 'measured'\)"):
        Refusal("nope", "cpp.gemm", "why")
    whole = Refusal("problem", "cpp.gemm", "M=0 is empty")
    assert str(whole) == "M=0 is empty"
    assert whole.line("addmm_1", "addmm 2x3") == "ext: cpp.gemm not offered for addmm_1 (addmm 2x3) (problem: M=0 is empty)"
    one = Refusal("config", "cpp.gemm", "block_m=65 is above 64", "C")
    assert one.line("mm") == "ext: cpp.gemm config C not offered for mm (config: block_m=65 is above 64)"


def test_each_stage_answers_with_its_own_name():
    cpu, hopper = presets.resolve({"preset": "cpu"}), presets.resolve({"preset": "hopper"})
    family = registry.get("cpp.gemm")
    assert refusals.here(cpu, family, "cpu") is None
    here = refusals.here(hopper, family, "cpu")
    assert (here.stage, here.family, here.reason) == ("here", "cpp.gemm", "verified for cpu, not target sm_90a")
    problem = refusals.problem(family, _mm(8, 16, 32))
    assert isinstance(problem, cpp_gemm.CppGemmProblem)
    refused = refusals.problem(family, _mm(8, 16, 32, "float64"))
    assert isinstance(refused, Refusal) and refused.stage == "problem" and "float64" in refused.reason
    config = family.configs(problem, "cpu")[0]
    assert refusals.config(family, problem, config, "cpu") is None
    bad = refusals.config(family, problem, type(config)(**{**config.__dict__, "block_m": 65}), "cpu")
    assert bad.stage == "config" and "outside its declared values" in bad.reason and bad.config is not None


def test_the_measured_stage_is_the_familys_refuse_measured():
    import dataclasses

    family = registry.get("cpp.gemm")
    problem = refusals.problem(family, _mm(8, 16, 32))
    config = family.configs(problem, "cpu")[0]
    losing = dataclasses.replace(family, refuse_measured=lambda p, c, t: "lost by 2x here")
    got = refusals.measured(losing, problem, config, "cpu")
    assert (got.stage, got.reason, got.config) == ("measured", "lost by 2x here", config)
    assert refusals.measured(dataclasses.replace(family, refuse_measured=None), problem, config, "cpu") is None
