"""scripts/mutate_changes.py: mutates the lines a change touches, in a throwaway copy, and reports
the kill rate. Checked on a tiny git repo (one module, one test file), never on the package."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutate_changes.py"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}

BASE_MOD = '''\
def add(a, b):
    return b + a


def double(x):
    return x * 2
'''
# the change: add's line is rewritten (its mutant a - b is killed), is_big is new (x > 100 -> x >= 100
# and 100 -> 101 survive: the test only asks 1000); double is untouched and never mutated
CHANGED_MOD = '''\
def add(a, b):
    return a + b


def double(x):
    return x * 2


def is_big(x):
    return x > 100
'''
TEST = '''\
import os
import subprocess
import sys
from pathlib import Path

import pkg
from pkg.mod import add, is_big


def test_add():
    assert add(2, 3) == 5


def test_add_in_a_subprocess(tmp_path):  # runs the mutant too; while mutmut records stats, plain code
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, "-c", "from pkg.mod import add; assert add(2, 3) == 5"], cwd=tmp_path,
                   env=env, check=True)


def test_is_big():
    marker = Path(pkg.SESSION_DIR) / "seen"  # each run of the tests is a session of its own
    assert not marker.exists()
    marker.touch()
    assert is_big(1000)
'''


def load_script():
    spec = importlib.util.spec_from_file_location("mutate_changes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    # read at import, as the package's cache folders are
    (repo / "pkg" / "__init__.py").write_text("import os\n\nSESSION_DIR = os.environ.get('SESSION_DIR')\n")
    (repo / "pkg" / "mod.py").write_text(BASE_MOD)
    # like the package's conftest, which makes a fresh autotune cache folder per session: so no mutant's
    # run may see what another left there
    (repo / "tests" / "conftest.py").write_text("import os, tempfile\n\nos.environ['SESSION_DIR'] = tempfile.mkdtemp()\n")
    (repo / "tests" / "test_mod.py").write_text(TEST.replace(", is_big", "").split("\n\ndef test_is_big")[0])
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    (repo / "pkg" / "mod.py").write_text(CHANGED_MOD)  # uncommitted: the change under review
    (repo / "tests" / "test_mod.py").write_text(TEST)
    return repo


def snapshot(repo: Path) -> tuple[str, dict[str, bytes]]:
    files = {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*"))
             if p.is_file() and ".git" not in p.parts and "__pycache__" not in p.parts}
    return git(repo, "status", "--porcelain", "--ignored"), files


def run_script(repo: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=repo, capture_output=True, text=True,
                          timeout=timeout, env={**env, **GIT_ENV})


def test_changed_lines_are_mutated_and_the_report_names_each_survivor(repo: Path) -> None:
    before = snapshot(repo)
    # one mutant at a time: a later run would see what an earlier one left in a shared session
    r = run_script(repo, "--base", "main", "--json", "--timeout", "20", "--jobs", "1")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["error"] is None
    (module,) = report["modules"]
    assert module["path"] == "pkg/mod.py" and module["tests"] == ["tests/test_mod.py"]
    total = report["total"]
    assert (total["mutants"], total["killed"], total["survived"], total["no_tests"]) == (3, 1, 2, 0)
    assert total["kill_rate"] == pytest.approx(1 / 3, abs=1e-3)
    # only the changed lines: add's return (2) and is_big (10); double (6) is not mutated
    assert {s["line"] for s in total["survivors"]} == {10}
    assert sorted(s["mutation"] for s in total["survivors"]) == ["return x > 100 -> return x > 101", "return x > 100 -> return x >= 100"]
    assert snapshot(repo) == before  # mutmut worked in a copy: the work tree is as it was


def test_the_table_lists_rates_and_survivors_with_file_and_line(repo: Path) -> None:
    r = run_script(repo, "--paths", "pkg/mod.py", "--all-lines", "--timeout", "20")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    row = next(line for line in lines if line.startswith("pkg/mod.py "))
    # every line now: double's x * 2 gets mutants too, which no selected test reaches
    assert row.split()[1:] == ["5", "1", "0", "2", "2", "20.0%"]
    assert "  pkg/mod.py:10: return x > 100 -> return x >= 100" in lines
    assert any(line.startswith("  pkg/mod.py:6: ") and "[no selected test reaches it]" in line for line in lines)


def test_each_changed_file_gets_its_own_mutants_and_row(repo: Path) -> None:
    """A short file listed last (an untracked one) beside a longer one: each file's mutants are
    read against its own lines."""
    (repo / "pkg" / "zz.py").write_text("def one():\n    return 1\n")
    r = run_script(repo, "--base", "main", "--json", "--timeout", "20")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert [(m["path"], m["mutants"], m["killed"], m["survived"], m["no_tests"]) for m in report["modules"]] == [
        ("pkg/mod.py", 3, 1, 2, 0), ("pkg/zz.py", 1, 0, 0, 1)]
    (survivor,) = [s for s in report["total"]["survivors"] if s["file"] == "pkg/zz.py"]
    assert (survivor["line"], survivor["mutation"], survivor["status"]) == (2, "return 1 -> return 2", "no tests")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_leaves_the_work_tree_and_no_copy(repo: Path, sig: int) -> None:
    before = snapshot(repo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # Ctrl-C as at a terminal, also where this test runs in a background job (which ignores SIGINT)
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--base", "main"], cwd=repo, env={**env, **GIT_ENV},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = proc.stderr.readline()  # "... mutmut's log: <copy>/mutate_changes.log": the worker has started
    assert "mutmut's log:" in first, first
    copy = Path(first.rsplit(": ", 1)[1].strip()).parent
    time.sleep(1.0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "Traceback" not in err
    assert not copy.exists()
    assert snapshot(repo) == before


@pytest.mark.parametrize("args, message", [
    (["--base", "no-such-ref"], "--base: no-such-ref is not a commit here"),
    (["--all-lines"], "--all-lines needs --paths"),
    (["--paths", "pkg/nothing.py"], "--paths: pkg/nothing.py does not exist"),
    (["--tests", "tests/test_none.py"], "--tests: tests/test_none.py is not a file"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_usage_mistakes_are_one_line_and_status_2(repo: Path, args: list[str], message: str) -> None:
    r = run_script(repo, *args, timeout=60)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"mutate_changes.py: error: {message}"]


def test_dry_run_lists_the_mutants_and_tests_without_running_them(repo: Path) -> None:
    r = run_script(repo, "--base", "main", "--dry-run", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "pkg/mod.py: 3 mutants on 5 lines; tests: tests/test_mod.py" in r.stdout


def test_diff_lines_are_the_new_side_of_each_hunk() -> None:
    mc = load_script()
    diff = ("diff --git a/p/m.py b/p/m.py\n--- a/p/m.py\n+++ b/p/m.py\n@@ -2 +2 @@\n-x\n+y\n"
            "@@ -10,0 +11,3 @@\n+a\n+b\n+c\n@@ -20,2 +23,0 @@\n-gone\n-gone\n"
            "diff --git a/q.py b/q.py\ndeleted file mode 100644\n--- a/q.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n")
    assert mc.parse_diff(diff) == {"p/m.py": {2, 11, 12, 13}}


def test_auto_tests_are_the_importers_unless_the_map_file_names_them(tmp_path: Path) -> None:
    mc = load_script()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("from pkg import mod\n")
    (tmp_path / "tests" / "test_b.py").write_text("import pkg.mod as m\n")
    (tmp_path / "tests" / "test_c.py").write_text("from pkg.mod import f\n")
    (tmp_path / "tests" / "test_d.py").write_text("from pkg import other\n")
    files = ["pkg/mod.py", "pkg/other.py", "pkg/sub/x.py"]
    assert mc.select_tests(tmp_path, files, "auto") == {
        "pkg/mod.py": ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"],
        "pkg/other.py": ["tests/test_d.py"], "pkg/sub/x.py": []}
    (tmp_path / "scripts").mkdir()
    (tmp_path / mc.MAP_FILE).write_text('[tests]\n"pkg/" = ["tests/test_d.py"]\n"pkg/sub/" = ["tests/test_a.py"]\n')
    assert mc.select_tests(tmp_path, files, "auto") == {
        "pkg/mod.py": ["tests/test_d.py"], "pkg/other.py": ["tests/test_d.py"], "pkg/sub/x.py": ["tests/test_a.py"]}
