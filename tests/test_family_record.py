"""templates/family.py: ``Family``, the record each family module ends with and the registry
hands out, and the one check of the protocol (building the record): what a family lacks is named."""

from __future__ import annotations

import dataclasses
import types

import pytest

from inductor_ext.templates import registry
from inductor_ext.templates.family import Family, FamilyError
from inductor_ext.templates.sycl import gemm as sycl_gemm
from inductor_ext.templates.triton import gemm as triton_gemm


def test_the_registry_hands_out_records_built_once():
    found = registry.families()
    assert found and all(isinstance(f, Family) for f in found.values())
    family = registry.get("triton.gemm")
    assert family is found["triton.gemm"] is triton_gemm.FAMILY and family.module is triton_gemm
    assert [f.name for f in registry.for_op("addmm", "xpu")] == ["sycl.gemm"]


def test_fields_are_the_modules_names_and_absent_hooks_are_none():
    gemm = registry.get("triton.gemm")
    assert (gemm.name, gemm.choice_kind, gemm.Config) == ("triton.gemm", "triton_template", triton_gemm.GemmConfig)
    assert gemm.config_from_tile is triton_gemm.config_from_tile and gemm.launch_values is triton_gemm.launch_values
    assert gemm.compile_asm is None and gemm.prebuild is None and gemm.cpu_executor == "the Triton interpreter"
    sycl = registry.get("sycl.gemm")
    assert sycl.prebuild is sycl_gemm.prebuild and sycl.refuse_here is sycl_gemm.refuse_here
    assert sycl.all_configs == tuple(sycl_gemm.ALL_CONFIGS) and not sycl.runs_on_cpu
    cpp = registry.get("cpp.gemm")
    assert cpp.runs_on_cpu and cpp.inductor_template == "cpp_gemm" and cpp.render is None
    assert registry.get("cutedsl.nvfp4_gemm").extern_op == "inductor_ext::nvfp4_gemm_cutedsl"


def test_key_instructions_come_from_the_table_or_the_function():
    softmax = registry.get("metal.softmax")
    assert softmax.key_instructions(None, None, "mps") == softmax.module.KEY_INSTRUCTIONS["mps"]
    assert softmax.key_instructions(None, None, "xpu") == ()
    sycl = registry.get("sycl.gemm")
    problem, config = sycl_gemm.GemmProblem(64, 64, 64), sycl_gemm.ALL_CONFIGS[-1]
    assert sycl.key_instructions(problem, config, "xpu") == sycl_gemm.key_instructions(problem, config, "xpu")


def test_a_record_missing_part_of_the_protocol_is_named():
    sycl = registry.get("sycl.gemm")
    with pytest.raises(FamilyError, match=r"sycl\.gemm \(family 'sycl.gemm'\) lacks refuse_problem, call of the template"):
        dataclasses.replace(sycl, refuse_problem=None, call=None)
    with pytest.raises(FamilyError, match=r"extern.*lacks all_configs of"):
        dataclasses.replace(sycl, name="extern", all_configs=())
    with pytest.raises(FamilyError, match=r"choice_kind = 'kernel'; use one of \('triton_template', 'extern'"):
        dataclasses.replace(sycl, choice_kind="kernel")


def test_the_registry_takes_only_a_record():
    """One shape: a module is a family by its FAMILY record; the name string family modules once
    defined is refused by name, not probed for the protocol's names."""
    old = types.ModuleType("old_family")
    vars(old).update({k: v for k, v in vars(sycl_gemm).items() if not k.startswith("__")}, FAMILY="sycl.gemm")
    with pytest.raises(FamilyError, match=r"old_family: FAMILY = 'sycl.gemm' is not a template family record; end the"):
        registry.check(old)
    assert registry.check(sycl_gemm) is sycl_gemm.FAMILY


def _family_module(name: str, monkeypatch: pytest.MonkeyPatch, **names: object) -> str:
    """A module holding a minimal extern family's names (plus ``names``), importable by name."""
    import sys

    @dataclasses.dataclass(frozen=True)
    class Problem:
        pass

    @dataclasses.dataclass(frozen=True)
    class Config:
        pass

    module = types.ModuleType(name)
    vars(module).update(NAME="test.of_module", CHOICE_KIND="extern", OPS=["softmax"], TARGETS=("sm_90a",),
                        Problem=Problem, Config=Config, ALL_CONFIGS=[Config()],
                        problem_for=lambda spec: Problem(), refuse_problem=lambda problem: None,
                        configs=lambda problem, target: [Config()], render=lambda p, c, t: "src",
                        call=lambda p, c, t, *tensors: None, **names)
    monkeypatch.setitem(sys.modules, name, module)
    return name


def test_of_module_gathers_data_by_upper_case_and_hooks_by_their_own_name(monkeypatch):
    def grid(*sizes, meta):
        return (sizes[0], 1, 1)

    name = _family_module("_of_module_family", monkeypatch, CPU_EXECUTOR="the test", RUNS_ON_CPU=True,
                          KEY_INSTRUCTIONS={"sm_90a": [("ptx", "ld")]}, refuse_here=lambda: None,
                          cpu_executor="a helper of the same name in lower case: not the field")
    family = Family.of_module(name)
    module = family.module
    assert (family.name, family.choice_kind, family.ops, family.targets) == (
        "test.of_module", "extern", ("softmax",), ("sm_90a",))
    assert family.Problem is module.Problem and family.call is module.call and family.refuse_here is module.refuse_here
    assert family.cpu_executor == "the test" and family.runs_on_cpu and family.all_configs == (module.Config(),)
    assert list(family.key_instructions(None, None, "sm_90a")) == [("ptx", "ld")]  # the table, by target
    assert family.grid is None and family.prebuild is None and not family.pdl  # absent names stay unset
    given = Family.of_module(name, render=module.call, cpu_executor="given")
    assert given.render is module.call and given.cpu_executor == "given"  # what is given wins
    module.PDL = True  # data by its upper-case name: read, and checked (this Problem has no use_pdl)
    with pytest.raises(FamilyError, match="pdl=True, but its Problem has no use_pdl field"):
        Family.of_module(name)


def test_of_module_names_what_the_module_lacks(monkeypatch):
    import sys

    name = _family_module("_of_module_lacking", monkeypatch)
    del vars(sys.modules[name])["call"], vars(sys.modules[name])["refuse_problem"]
    with pytest.raises(FamilyError, match=r"_of_module_lacking \(family 'test.of_module'\) lacks refuse_problem, call"):
        Family.of_module(name)


def test_of_module_reads_a_hooks_old_name_with_a_deprecation_warning(monkeypatch):
    """A third party's family module (an entry point) may still define the names the hooks had
    before each named its refusal stage: each is read as its new one, with a warning naming both."""
    import sys
    import warnings

    def supports(problem):
        return "too big"

    def config_supports(problem, config, target):
        return None

    name = _family_module("_of_module_old_names", monkeypatch, config_supports=config_supports,
                          ruled_out=lambda p, c, t: "lost", missing=lambda: "install it")
    held = vars(sys.modules[name])
    del held["refuse_problem"]
    held["supports"] = supports
    with pytest.warns(DeprecationWarning) as warned:
        family = Family.of_module(name)
    assert family.refuse_problem is supports and family.refuse_config is config_supports
    assert family.refuse_measured(None, None, "sm_90a") == "lost" and family.refuse_here() == "install it"
    said = sorted(str(w.message) for w in warned)
    assert len(said) == 4 and all(name in m for m in said)
    assert any("'supports', now named 'refuse_problem'" in m for m in said)
    assert any("'missing', now named 'refuse_here'" in m for m in said)
    # the new name wins over the old where a module has both (an old name may then be anything)
    held["refuse_problem"] = lambda problem: None
    with pytest.warns(DeprecationWarning) as warned:
        assert Family.of_module(name).refuse_problem is held["refuse_problem"]
    assert not any("'supports'" in str(w.message) for w in warned)
    # an old name given to of_module is mapped the same way
    with pytest.warns(DeprecationWarning) as warned:
        assert Family.of_module(name, ruled_out=supports).refuse_measured is supports
    assert any(f"{name} is given the hook 'ruled_out', now named 'refuse_measured'" in str(w.message) for w in warned)
    # a module with the new names only: no warning
    for old in ("supports", "config_supports", "ruled_out", "missing"):
        del held[old]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Family.of_module(name)


def test_every_family_module_builds_its_record_with_of_module():
    for family in registry.families().values():
        source = open(family.module.__file__).read()
        assert "FAMILY = Family.of_module(__name__" in source, family.name
