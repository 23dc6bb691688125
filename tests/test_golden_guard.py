"""Goldens are rewritten only on EXPECTTEST_ACCEPT=1; any other value compares (and fails)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import expecttest
import pytest

from inductor_ext.testing import golden

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("value", ["0", "no", "false", "yes", "2"])
def test_only_exactly_one_accepts(monkeypatch, tmp_path, value):
    monkeypatch.setenv("EXPECTTEST_ACCEPT", value)
    assert not golden.accepting()
    (tmp_path / "k.expected").write_text("old\n")
    with pytest.raises(pytest.fail.Exception, match="rendered text differs"):
        golden.assert_golden(tmp_path, "k", "new\n")
    assert (tmp_path / "k.expected").read_text() == "old\n"


def test_one_accepts_and_rewrites(monkeypatch, tmp_path):
    monkeypatch.setenv("EXPECTTEST_ACCEPT", "1")
    golden.assert_golden(tmp_path, "k", "new\n")
    assert (tmp_path / "k.expected").read_text() == "new\n"


@pytest.mark.parametrize("value", ["0", "no"])
def test_inline_snapshots_do_not_accept_other_values(monkeypatch, value):
    monkeypatch.setenv("EXPECTTEST_ACCEPT", value)
    golden.guard_expecttest()
    with pytest.raises(AssertionError):
        expecttest.assert_expected_inline("actual", """expected""")


def test_ci_refuses_to_run_with_the_variable_set():
    done = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env={"EXPECTTEST_ACCEPT": "0", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "never rewrites them" in done.stdout
