"""bench/device_check.py (issue 30) cannot rot: its ``--dry-run`` imports everything the device
check launches (without torch._inductor, which the lent image's torch 2.11 may not match) and
builds its checks: every NVIDIA family planned on sm_90a or sm_100a, each shape with configs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_imports_and_plans_every_nvidia_family() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "device_check.py"), "--dry-run"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plans = json.loads(proc.stdout)
    assert set(plans) == {"sm_90a", "sm_100a"}
    from inductor_ext.templates import registry

    nvidia = {name for name, f in registry.families().items() if {"sm_90a", "sm_100a"} & set(f.targets)}
    for target, plan in plans.items():
        planned = set(plan["checks"]) | set(plan["skipped"])
        assert planned == nvidia, (target, planned ^ nvidia)  # a new NVIDIA family joins the check
        for family, shapes in plan["checks"].items():
            assert shapes and all(shapes.values()), (target, family)
    assert "triton.nvfp4_gemm" in plans["sm_100a"]["checks"] and "triton.nvfp4_dequant_gemm" in plans["sm_90a"]["checks"]
