"""bench/device_check.py (issue 30) cannot rot: its ``--dry-run`` imports everything the device
check launches (without torch._inductor, which the lent image's torch 2.11 may not match) and
builds its checks: every NVIDIA family planned on sm_90a or sm_100a, each shape with configs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_imports_and_plans_every_nvidia_family() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "device_check.py"), "--dry-run"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plans = json.loads(proc.stdout)
    assert set(plans) == {"sm_90a", "sm_100a"}
    from inductor_ext import targets
    from inductor_ext.templates import registry

    nvidia = {name for name, f in registry.families().items() if any(targets.vendor(t) == "nvidia" for t in f.targets)}
    for target, plan in plans.items():
        planned = set(plan["checks"]) | set(plan["skipped"])
        assert planned == nvidia, (target, planned ^ nvidia)  # a new NVIDIA family joins the check
        for family, shapes in plan["checks"].items():
            assert shapes and all(shapes.values()), (target, family)
    assert "triton.nvfp4_gemm" in plans["sm_100a"]["checks"] and "triton.nvfp4_dequant_gemm" in plans["sm_90a"]["checks"]



def _device_check_module(monkeypatch):
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("_device_check", ROOT / "bench" / "device_check.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_plan_is_the_registrys_nvidia_families_with_their_device_cases(monkeypatch) -> None:
    """The script lists no family: one more in the registry that claims sm_90a (here a non-GEMM
    test family) is planned from its record's device_cases, with its own configs only; one that
    gives no device_cases is refused by name rather than left out."""
    import dataclasses

    import _nongemm_nvidia_family as rows
    from inductor_ext.templates import registry

    check = _device_check_module(monkeypatch)
    text = (ROOT / "bench" / "device_check.py").read_text()  # no family named, no family module imported
    assert not [name for name in registry.families() if name in text] and "inductor_ext.templates." not in text
    found = {**registry.families(), rows.NAME: rows.FAMILY}
    monkeypatch.setattr(registry, "families", lambda: found)
    checks, skipped = check.build_checks("sm_90a")
    assert set(check.nvidia_families()) == {c.family for c in checks} | set(skipped)
    (ours,) = [c for c in checks if c.family == rows.NAME]
    assert ours.configs == {"rows 4096x4096": list(rows.ALL_CONFIGS)} and not ours.pdl and not ours.gemm
    assert rows.NAME in check.build_checks("sm_100a")[1]  # claims sm_90a only: skipped, with why
    found[rows.NAME] = dataclasses.replace(rows.FAMILY, device_cases=None)
    with pytest.raises(SystemExit, match=f"{rows.NAME} claims sm_90a but gives no device_cases"):
        check.build_checks("sm_90a")
