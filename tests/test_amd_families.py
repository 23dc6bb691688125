"""The AMD template families keep the family protocol (templates/family.py): what lowering's
module scan will find, and that importing them loads no DSL, Triton, Helion or torch._inductor."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from inductor_ext import targets
from inductor_ext.targets import amd

FAMILIES = ["inductor_ext.templates.flydsl.gemm", "inductor_ext.templates.flydsl.grouped_mm",
            "inductor_ext.templates.flydsl.mx_scaled_mm", "inductor_ext.templates.flydsl.tdm_gemm",
            "inductor_ext.templates.triton.tdm_gemm", "inductor_ext.templates.helion.rmsnorm",
            "inductor_ext.templates.helion.softmax"]


def test_importing_the_families_loads_no_compiler() -> None:
    code = ("import json, sys\n" + "".join(f"import {m}\n" for m in FAMILIES)
            + "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'triton', 'flydsl', 'helion', 'cutlass'})"
              " + sorted(m for m in sys.modules if m.startswith('torch._inductor'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [], out.stdout


@pytest.mark.parametrize("name", FAMILIES)
def test_protocol(name: str) -> None:
    family = importlib.import_module(name)
    assert family.FAMILY.split(".")[0] == name.split(".")[-2]  # the DSL first
    assert family.CHOICE_KIND in ("extern", "triton_template")
    assert set(family.TARGETS) <= {t.name for t in amd.VENDOR.targets}
    for attr in ("problem_for", "supports", "configs", "render"):
        assert callable(getattr(family, attr)), attr
    if family.CHOICE_KIND == "extern":
        assert callable(family.run)
    else:
        assert callable(family.inductor_source) and callable(family.constexprs)
    for target in family.TARGETS:
        assert targets.get(target).vendor == "amd"
        facts = amd.FAMILY_INSTRUCTIONS.get((family.FAMILY, target), ())
        assert all(f in amd.INSTRUCTIONS[target] for f in facts), (family.FAMILY, target)


def test_instruction_facts_name_known_families() -> None:
    families = {importlib.import_module(n).FAMILY: importlib.import_module(n).TARGETS for n in FAMILIES}
    for fam, target in amd.FAMILY_INSTRUCTIONS:
        assert target in families[fam], (fam, target)
