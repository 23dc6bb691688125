"""The AMD template families keep the family protocol (templates/family.py): the registry's module
scan accepts them, their op names are the lowering's, their key instructions are AMD instruction
facts, every config they may be called with is registered, and importing them loads no DSL,
Triton, Helion or torch._inductor."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from inductor_ext import targets
from inductor_ext.targets import amd
from inductor_ext.templates import registry

FAMILIES = ["flydsl.gemm", "flydsl.grouped_mm", "flydsl.mx_scaled_mm", "flydsl.tdm_gemm", "triton.tdm_gemm",
            "helion.rmsnorm", "helion.softmax", "triton.topk"]
# The lowering's op names (lowering/ops/: each op module's SPECS; softmax: the Metal branch's op).
LOWERING_OPS = {"mm", "addmm", "scaled_mm", "grouped_mm", "rms_norm", "softmax", "topk"}


def test_the_family_scan_loads_no_compiler() -> None:
    """Every compile scans the families (templates/registry.py imports every module of every DSL
    folder): that must not load a DSL (FlyDSL's MLIR and CuTeDSL's clash in one process), nor
    Triton (it picks interpreter or compiler at first import)."""
    code = ("import json, sys\nfrom inductor_ext.templates import registry\nregistry.families()\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'triton', 'flydsl', 'helion', 'cutlass'})"
            " + sorted(m for m in sys.modules if m.startswith('torch._inductor'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [], out.stdout


@pytest.mark.parametrize("name", FAMILIES)
def test_protocol(name: str) -> None:
    family = registry.get(name).module
    registry.check(family)
    assert family.NAME.split(".")[0] == family.__name__.split(".")[-2]  # the DSL first
    assert set(family.OPS) <= LOWERING_OPS, family.OPS
    assert family.TARGETS and all(targets.get(t).vendor == "amd" for t in family.TARGETS)
    assert set(family.KEY_INSTRUCTIONS) == set(family.TARGETS)
    for target, keys in family.KEY_INSTRUCTIONS.items():
        assert keys and all(stage == targets.get(target).asm_key and pattern in amd.INSTRUCTIONS[target].values()
                            for stage, pattern in keys), (target, keys)
    if family.CHOICE_KIND == "extern":
        assert family.ALL_CONFIGS and all(type(c) is family.Config for c in family.ALL_CONFIGS)
        names = [registry.config_name(c) for c in family.ALL_CONFIGS]
        assert len(set(names)) == len(names), names  # each registers its own extern choice
        assert callable(family.call) and callable(family.compile_asm)
        assert not hasattr(family, "run"), "extern families launch through call()"
    else:
        assert "{{def_kernel(" in family.inductor_source()
    for config in getattr(family, "ALL_CONFIGS", ()):
        assert family.Config(**dataclasses.asdict(config)) == config


def test_key_instructions_reject_an_unknown_fact() -> None:
    with pytest.raises(KeyError, match="no instruction fact 'mfma_fp64' for gfx950"):
        amd.key_instructions({"gfx950": ("mfma_fp64",)})


@pytest.mark.parametrize("preset, expected", [
    ("gfx950", ["triton.gemm", "flydsl.gemm", "flydsl.grouped_mm", "flydsl.mx_scaled_mm", "helion.rmsnorm",
                "helion.softmax", "triton.topk"]),
    ("gfx1250", ["triton.gemm", "triton.tdm_gemm", "flydsl.tdm_gemm", "flydsl.gemm", "flydsl.grouped_mm"]),
])
def test_presets_list_the_families_that_claim_their_target(preset: str, expected: list[str]) -> None:
    data = amd.PRESETS[preset]
    assert data["templates"] == expected
    for name in expected:
        assert data["target"] in registry.get(name).targets, name
