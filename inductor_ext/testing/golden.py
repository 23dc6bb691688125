"""Tier G: golden snapshots of rendered kernels, in ``.expected`` files next to the tests.

``EXPECTTEST_ACCEPT=1`` (exactly "1") rewrites them (review the diff before committing); any other
value, or none, compares: a mismatch fails with a unified diff. CI refuses to run with the
variable set at all.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

from inductor_ext.templates.base import KernelSource


def accepting() -> bool:
    """Rewrite goldens only on exactly ``EXPECTTEST_ACCEPT=1``: "0", "no" or "false" must not."""
    return os.environ.get("EXPECTTEST_ACCEPT") == "1"


def guard_expecttest() -> None:
    """expecttest's inline snapshots accept on any non-empty EXPECTTEST_ACCEPT (even "0"):
    drop the variable from this process unless it is exactly "1"."""
    if os.environ.get("EXPECTTEST_ACCEPT") not in (None, "1"):
        del os.environ["EXPECTTEST_ACCEPT"]


def assert_golden(golden_dir: Path, name: str, actual: str) -> None:
    """Compare ``actual`` with ``golden_dir/<name>.expected`` (rewritten when accepting)."""
    import pytest

    path = Path(golden_dir) / f"{name}.expected"
    if accepting():
        if not path.exists() or path.read_text() != actual:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual)
        return
    if not path.exists():
        pytest.fail(f"no golden file {path}; create it by running the test with EXPECTTEST_ACCEPT=1")
    expected = path.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            f"{path.name} (golden)", f"{name} (rendered)"))
        pytest.fail(f"rendered text differs from {path}; if the change is intended, rerun with "
                    f"EXPECTTEST_ACCEPT=1 and review the diff:\n{diff}")


def snapshot(ks: KernelSource) -> str:
    """Everything render() decides, header first, then the module text as Triton will read it."""
    header = {"name": ks.name, "template": ks.template, "config": ks.config, "constexprs": ks.constexprs,
              "launch": ks.launch, "signature": ks.signature}
    lines = [f"# {key}: {json.dumps(value, sort_keys=key != 'signature')}" for key, value in header.items()]
    return "\n".join(lines) + "\n# ---- source ----\n" + ks.source
