#!/usr/bin/env python
"""Mutate the lines a change touches and run only the tests that reach them.

    python scripts/mutate_changes.py --base main                  # the lines changed since main
    python scripts/mutate_changes.py --paths inductor_ext/autotune --all-lines --sample 60
    python scripts/mutate_changes.py --base main --tests tests/test_x.py,tests/test_y.py --json

The mutants are mutmut's (pinned in the dev extra: this script drives its internals). mutmut
copies the sources into ``mutants/`` with every mutant behind a trampoline and runs each mutant in
a process forked from a server that has imported the heavy third-party modules (``preload`` in
``scripts/mutate_changes.toml``: torch, ...), so a mutant costs its tests' time and an import of
the package and its tests, not a fresh interpreter importing torch. Here mutmut only ever works in a throwaway copy of the
work tree (tracked files and untracked ones git does not ignore), so the work tree itself is never
written, whatever stops the run.

One file past 600 lines, on purpose: it is both the command and the worker it starts
(``--worker PLAN``) inside mutmut's copy, where only this file is sure to be on the path.

Which lines: ``git diff -U0 BASE`` (committed and uncommitted changes, plus untracked .py files)
of the Python files in packages (a top-level folder with ``__init__.py``, ``tests/`` left out),
narrowed to ``--paths``; ``--all-lines`` takes every line of the files under ``--paths`` instead.
mutmut mutates code inside functions and methods only; a changed line at module or class level
(a constant, a table) gets no mutant.

Which tests: ``--tests auto`` (the default) takes, per source file, the test files listed for it in
``scripts/mutate_changes.toml`` (the longest matching path wins), else the test files under
``tests/`` that import it. mutmut runs those once to record which test calls which function, then
runs each mutant against only the tests that called its function. ``--tests a.py,b.py`` names the
test files for every source file.

The report lists per source file (and per ``--paths`` entry) the mutants, how many were killed,
timed out, survived, and reached by no selected test, each survivor with file:line and its
mutation, and the kill rate: (killed + timed out) / mutants judged. Exit status 0 for a report,
2 for a usage mistake, 1 when no report could be made (the selected tests fail unmutated).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

MAP_FILE = "scripts/mutate_changes.toml"
TESTS_DIR = "tests"
# mutmut's statuses (mutmut.stats.status_by_exit_code) in this report's buckets
DETECTED = {"killed": "killed", "caught by type check": "killed", "timeout": "timeout", "segfault": "timeout"}
JUDGED_OTHER = {"survived": "survived", "no tests": "no_tests", "suspicious": "survived"}


# A test's subprocess that imports the mutated tree (it has mutants/ on its PYTHONPATH) runs the
# mutant under test like the test itself, but while mutmut records which test calls which function
# ("stats") it must run plain code: recording needs mutmut's config, which mutmut reads from the
# current folder, and a subprocess's is another one (it fails there).
SITECUSTOMIZE = """\
import os

if os.environ.get("MUTANT_UNDER_TEST") == "stats":
    os.environ["MUTANT_UNDER_TEST"] = ""
"""


class UsageError(Exception):
    """A mistake on the command line: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        raise UsageError(message)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="mutate_changes.py", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default="main", help="git ref the change is measured against (default: main)")
    p.add_argument("--paths", default=None,
                   help="comma-separated files or folders: only mutate there (and report per entry)")
    p.add_argument("--all-lines", action="store_true",
                   help="mutate every line of the Python files under --paths, not only changed ones")
    p.add_argument("--tests", default="auto", help="'auto' or comma-separated test files (default: auto)")
    p.add_argument("--pytest-args", default="",
                   help="more pytest arguments, split like a shell line (e.g. \"--deselect tests/t.py::test_x\")")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="a mutant times out after 3 x (its tests' clean time + this) seconds, and after twice "
                        "that of CPU time: a cold compile in a forked child can take far longer than the "
                        "same tests warm (default 60)")
    p.add_argument("--sample", type=int, default=0, help="at most this many mutants per source file, drawn at random")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample's draw (default 0)")
    p.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--dry-run", action="store_true", help="list the mutants and test selection, run nothing")
    p.add_argument("--keep", action="store_true", help="keep the throwaway copy (its path is printed)")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: runs mutmut inside the copy
    args = p.parse_args(argv)
    if args.all_lines and not args.paths:
        raise UsageError("--all-lines needs --paths")
    try:
        shlex.split(args.pytest_args)
    except ValueError as e:
        raise UsageError(f"--pytest-args: {e}") from None
    if args.sample < 0 or args.jobs < 1 or args.timeout <= 0:
        raise UsageError("--sample must be >= 0, --jobs >= 1 and --timeout > 0")
    return args


# ---------------------------------------------------------------------------------------------
# git and the lines to mutate


def git(root: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        raise UsageError(f"git {' '.join(args)}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'failed'}")
    return r.stdout


def repo_root() -> Path:
    try:
        return Path(git(Path.cwd(), "rev-parse", "--show-toplevel").strip())
    except UsageError:
        raise UsageError("not inside a git work tree") from None


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def parse_diff(text: str) -> dict[str, set[int]]:
    """``git diff -U0`` output -> the new-side line numbers each file adds or changes."""
    out: dict[str, set[int]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
            if current is not None:
                out.setdefault(current, set())
        elif current is not None and (m := _HUNK.match(line)):
            start, count = int(m.group(1)), int(m.group(2) or 1)
            out[current].update(range(start, start + count))
    return {f: lines for f, lines in out.items() if lines}


def is_source(rel: str, root: Path) -> bool:
    parts = Path(rel).parts
    return (rel.endswith(".py") and len(parts) >= 2 and parts[0] not in (TESTS_DIR, "test")
            and (root / parts[0] / "__init__.py").is_file())


def under(rel: str, paths: list[str]) -> str | None:
    for p in paths:
        if rel == p or rel.startswith(p.rstrip("/") + "/"):
            return p
    return None


def lines_to_mutate(root: Path, args: argparse.Namespace) -> tuple[dict[str, set[int]], list[str]]:
    paths: list[str] = []
    if args.paths:
        for p in (x.strip() for x in args.paths.split(",")):
            if not p:
                continue
            full = Path(p).resolve() if Path(p).is_absolute() or Path(p).exists() else (root / p).resolve()
            if not full.exists():
                raise UsageError(f"--paths: {p} does not exist")
            if not full.is_relative_to(root.resolve()):
                raise UsageError(f"--paths: {p} is outside the repository")
            paths.append(full.relative_to(root.resolve()).as_posix())
    if args.all_lines:
        files: dict[str, set[int]] = {}
        for p in paths:
            found = [root / p] if (root / p).is_file() else sorted((root / p).rglob("*.py"))
            for f in found:
                rel = f.relative_to(root).as_posix()
                if is_source(rel, root):
                    n = len(f.read_text(encoding="utf-8").splitlines())
                    if n:
                        files[rel] = set(range(1, n + 1))
        return files, paths
    try:
        git(root, "rev-parse", "--verify", "--quiet", f"{args.base}^{{commit}}")
    except UsageError:
        raise UsageError(f"--base: {args.base} is not a commit here") from None
    changed = parse_diff(git(root, "diff", "-U0", "--no-color", "--no-ext-diff", "--diff-filter=AMR",
                             args.base, "--", "*.py"))
    for rel in git(root, "ls-files", "-o", "--exclude-standard", "--", "*.py").splitlines():
        n = len((root / rel).read_text(encoding="utf-8").splitlines())
        if n:
            changed[rel] = set(range(1, n + 1))
    files = {f: ls for f, ls in changed.items() if is_source(f, root) and (not paths or under(f, paths))}
    return files, paths


# ---------------------------------------------------------------------------------------------
# which tests


def dotted(rel: str) -> str:
    mod = rel[:-3].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def imported_modules(test_file: Path) -> set[str]:
    """Every module a test file names in an import (``from a.b import c`` names a.b and a.b.c)."""
    try:
        tree = ast.parse(test_file.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def read_map(root: Path) -> dict:
    if not (root / MAP_FILE).is_file():
        return {}
    try:
        return tomllib.loads((root / MAP_FILE).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{MAP_FILE}: {e}") from None


def select_tests(root: Path, files: list[str], tests_arg: str) -> dict[str, list[str]]:
    if tests_arg != "auto":
        chosen = [t.strip() for t in tests_arg.split(",") if t.strip()]
        for t in chosen:
            if not (root / t.split("::")[0]).is_file():
                raise UsageError(f"--tests: {t} is not a file")
        return {f: chosen for f in files}
    mapping: dict[str, list[str]] = read_map(root).get("tests", {})
    test_files = sorted((root / TESTS_DIR).rglob("test_*.py")) if (root / TESTS_DIR).is_dir() else []
    imports = {t.relative_to(root).as_posix(): imported_modules(t) for t in test_files}
    users: dict[str, set[str]] | None = None  # module -> the package's modules importing it, when asked
    out: dict[str, list[str]] = {}
    for f in files:
        keys = [k for k in mapping if f == k or f.startswith(k.rstrip("/") + "/")]
        if keys:
            out[f] = list(mapping[max(keys, key=len)])
            continue
        # the tests importing the module; where none does, those importing the modules that import
        # it, one ring further out at a time
        ring, seen = {dotted(f)}, {dotted(f)}
        while ring:
            out[f] = [t for t, names in imports.items() if names & ring]
            if out[f]:
                break
            if users is None:
                users = package_users(root, Path(f).parts[0])
            ring = {u for m in ring for u in users.get(m, ())} - seen
            seen |= ring
    return out


def package_users(root: Path, package: str) -> dict[str, set[str]]:
    users: dict[str, set[str]] = {}
    for path in (root / package).rglob("*.py"):
        user = dotted(path.relative_to(root).as_posix())
        for name in imported_modules(path):
            users.setdefault(name, set()).add(user)
    return users


# ---------------------------------------------------------------------------------------------
# the throwaway copy and the worker that runs mutmut in it


def make_copy(root: Path) -> Path:
    dest = Path(tempfile.mkdtemp(prefix="mutate_changes_"))
    listed = git(root, "ls-files", "-z", "-co", "--exclude-standard").split("\0")
    for rel in filter(None, listed):
        src = root / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    return dest


def mutmut_config(copy: Path, files: list[str], tests: list[str], timeout: float, extra: list[str]) -> str:
    top = sorted({Path(f).parts[0] for f in files})
    also = sorted(p.name for p in copy.iterdir() if p.name not in top and p.name != "mutants")
    try:
        import xdist  # noqa: F401  (the repo's addopts may name its options: keep it loaded, one process)
        pytest_args = ["-q", "-n", "0", "-p", "no:cacheprovider"]
    except ImportError:
        pytest_args = ["-q", "-p", "no:cacheprovider"]
    pytest_args += extra
    conf = {
        "source_paths": [f"{t}/" for t in top],
        "only_mutate": files,
        "also_copy": also,
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": pytest_args,
        "timeout_multiplier": 3.0,
        "timeout_constant": timeout,
        "process_isolation": "forkserver",  # torch is not fork-safe once it has run anything
        # The fork server imports only the third-party modules the map file lists ("preload"): the
        # tests' conftest and the package import afresh in every run, so a session's setup (this
        # repo's conftest makes a fresh autotune cache folder per session) is each run's own, not
        # one shared by every mutant, and code that runs at import (dataclass field declarations)
        # runs as the mutant under test.
        "forkserver_warmup": "import",
        "preload_modules_file": str(copy / ".mutate_preload.txt"),
        "use_git_change_detection": False,
    }
    return "\n[tool.mutmut]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in conf.items())


def _short(orig: str, new: str, width: int = 70) -> str:
    orig, new = " ".join(orig.split()), " ".join(new.split())
    if len(orig) + len(new) > 2 * width:
        i = 0
        while i < min(len(orig), len(new)) and orig[i] == new[i]:
            i += 1
        j = 0
        while j < min(len(orig), len(new)) - i and orig[-1 - j] == new[-1 - j]:
            j += 1
        lo = max(0, i - 15)
        orig = ("…" if lo else "") + orig[lo: len(orig) - j] + ("…" if j else "")
        new = ("…" if lo else "") + new[lo: len(new) - j] + ("…" if j else "")
    return f"{orig[:width]} -> {new[:width]}" if new else f"{orig[:width]} -> (removed)"


def worker(plan_path: str) -> int:
    """Runs in the copy: enumerate the mutants of the chosen lines, draw the sample, run mutmut."""
    import libcst as cst
    from libcst.metadata import PositionProvider

    import mutmut.__main__ as mm
    from mutmut.mutation import file_mutation as fm
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.runners.harness import PytestRunner
    from mutmut.state import state
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.format_utils import get_mutant_name

    plan = json.loads(Path(plan_path).read_text())
    where: dict[int, tuple[int, str]] = {}
    named: list[tuple[str, tuple[int, str]]] = []

    def code(node: object) -> str:
        try:
            return cst.Module(body=[]).code_for_node(node)  # type: ignore[arg-type]
        except Exception:
            return type(node).__name__

    source: list[str] = []  # the lines of the file being mutated
    create = fm.MutationVisitor._create_mutations

    def recording_create(self, node):  # type: ignore[no-untyped-def]
        before = len(self.mutations)
        create(self, node)
        pos = self.get_metadata(PositionProvider, node, None)
        for m in self.mutations[before:]:
            old, new = code(m.original_node), code(m.mutated_node)
            if pos and pos.start.line == pos.end.line and "\n" not in new.strip("\n"):
                line = source[pos.start.line - 1]  # the whole line, before and after
                old, new = line, line[: pos.start.column] + new + line[pos.end.column:]
            where[id(m)] = (pos.start.line if pos else 0, _short(old, new))

    arrange = fm.function_trampoline_arrangement

    def recording_arrange(function, mutants, class_name):  # type: ignore[no-untyped-def]
        mutants = list(mutants)
        result = arrange(function, mutants, class_name)
        named.extend((n, where[id(m)]) for n, m in zip(result[3], mutants))
        return result

    fm.MutationVisitor._create_mutations = recording_create  # type: ignore[method-assign]
    fm.function_trampoline_arrangement = recording_arrange

    mutants: dict[str, dict] = {}
    for rel, lines in plan["lines"].items():
        named.clear()
        text = Path(rel).read_text(encoding="utf-8")
        source[:] = text.splitlines()
        fm.mutate_file_contents(rel, text, set(lines))
        for short, (line, what) in named:
            mutants[get_mutant_name(Path(rel), short)] = {"file": rel, "line": line, "mutation": what}
    # mutmut generates the mutants again in forked workers, file by file: without the recording
    fm.MutationVisitor._create_mutations = create  # type: ignore[method-assign]
    fm.function_trampoline_arrangement = arrange
    if plan["sample"]:
        rng = random.Random(plan["seed"])
        keep: list[str] = []
        for rel in plan["lines"]:
            names = [n for n, m in mutants.items() if m["file"] == rel]
            keep += names if len(names) <= plan["sample"] else rng.sample(names, plan["sample"])
        mutants = {n: mutants[n] for n in keep}
    # mutmut hands pytest a run's tests in the order of a set: put them back in the order the suite
    # ran them while mutmut recorded stats (its file, by name), so tests that lean on what an earlier
    # test of the session left (test_decision_tables.py's keys fixture) run as in the suite
    regular = PytestRunner._pytest_args_regular_run
    stats_file = Path.cwd() / "mutants" / "mutmut-stats.json"

    def in_suite_order(self, tests):  # type: ignore[no-untyped-def]
        tests = list(tests)
        if len(tests) > 1:
            try:
                order = {t: i for i, t in enumerate(json.loads(stats_file.read_text())["duration_by_test"])}
            except (OSError, ValueError, KeyError):
                order = {}
            tests.sort(key=lambda t: (order.get(t, len(order)), t))
        return regular(self, tests)

    PytestRunner._pytest_args_regular_run = in_suite_order  # type: ignore[method-assign]
    result = {"mutants": mutants, "error": None}
    if mutants and not plan["dry_run"] and plan["tests"]:
        state()._covered_lines = {str((Path("mutants") / rel).absolute()): set(lines)
                                  for rel, lines in plan["lines"].items()}
        try:
            mm._run(tuple(sorted(mutants)), plan["jobs"])
        except SystemExit as e:
            if e.code not in (0, None):
                result["error"] = f"mutmut stopped with status {e.code} (the selected tests fail unmutated?)"
        for rel in plan["lines"]:
            data = SourceFileMutationData(path=Path(rel))
            data.load()
            for name, exit_code in data.exit_code_by_key.items():
                if name in mutants:
                    mutants[name]["status"] = status_by_exit_code[exit_code]
    elif mutants and not plan["dry_run"]:
        for m in mutants.values():
            m["status"] = "no tests"
    Path(plan["out"]).write_text(json.dumps(result))
    return 0


# ---------------------------------------------------------------------------------------------
# the report


def summarize(files: dict[str, set[int]], tests: dict[str, list[str]], mutants: dict[str, dict],
              groups: list[str]) -> dict:
    def bucket(rows: list[dict]) -> dict:
        counts = {"mutants": len(rows), "killed": 0, "timeout": 0, "survived": 0, "no_tests": 0, "other": 0}
        survivors = []
        for m in rows:
            status = m.get("status", "not checked")
            b = DETECTED.get(status) or JUDGED_OTHER.get(status) or "other"
            counts[b] += 1
            if b in ("survived", "no_tests"):
                survivors.append({"file": m["file"], "line": m["line"], "mutation": m["mutation"],
                                  "status": status, "name": m["name"]})
        judged = counts["killed"] + counts["timeout"] + counts["survived"] + counts["no_tests"]
        counts["kill_rate"] = round((counts["killed"] + counts["timeout"]) / judged, 4) if judged else None
        counts["survivors"] = sorted(survivors, key=lambda s: (s["file"], s["line"]))
        return counts

    rows = [{**m, "name": n} for n, m in mutants.items()]
    modules = [{"path": f, "lines": len(files[f]), "tests": tests.get(f, []),
                **bucket([r for r in rows if r["file"] == f])} for f in sorted(files)]
    report = {"modules": modules, "total": bucket(rows)}
    if groups:
        report["groups"] = [{"path": g, **bucket([r for r in rows if under(r["file"], [g])])} for g in groups]
    return report


def _rate(r: dict) -> str:
    return "-" if r["kill_rate"] is None else f"{100 * r['kill_rate']:.1f}%"


def print_report(report: dict, head: str) -> None:
    print(head)
    cols = ("mutants", "killed", "timeout", "survived", "no_tests")
    width = max([len(m["path"]) for m in report["modules"]] + [len(g["path"]) for g in report.get("groups", [])] + [5])

    def row(name: str, r: dict) -> str:
        return f"{name:<{width}}  " + "  ".join(f"{r[c]:>8}" for c in cols) + f"  {_rate(r):>9}"

    print(f"{'module':<{width}}  " + "  ".join(f"{c:>8}" for c in cols) + f"  {'kill rate':>9}")
    for m in report["modules"]:
        print(row(m["path"], m))
    for g in report.get("groups", []):
        print(row(g["path"] + " (all)", g))
    print(row("total", report["total"]))
    survivors = report["total"]["survivors"]
    if survivors:
        print(f"\nsurvivors ({len(survivors)}):")
        for s in survivors:
            tag = "  [no selected test reaches it]" if s["status"] == "no tests" else ""
            print(f"  {s['file']}:{s['line']}: {s['mutation']}{tag}")
    no_tests = [m["path"] for m in report["modules"] if not m["tests"]]
    if no_tests:
        print("\nno test files selected for: " + ", ".join(no_tests))


# ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    root = repo_root()
    files, groups = lines_to_mutate(root, args)
    tests = select_tests(root, sorted(files), args.tests)
    union = sorted({t for f in files for t in tests[f]})
    start = time.monotonic()
    head = (f"mutate_changes: {'every line under ' + ', '.join(groups) if args.all_lines else 'lines changed since ' + args.base}"
            f"{' (at most %d mutants per file, seed %d)' % (args.sample, args.seed) if args.sample else ''}")
    mutants: dict[str, dict] = {}
    error = None
    copy = None
    worker_proc = None
    try:
        if files:
            copy = make_copy(root)
            (copy / "sitecustomize.py").write_text(SITECUSTOMIZE)  # mutmut copies it into mutants/
            with (copy / "pyproject.toml").open("a", encoding="utf-8") as f:
                f.write(mutmut_config(copy, sorted(files), union, args.timeout, shlex.split(args.pytest_args)))
            (copy / ".mutate_preload.txt").write_text("".join(f"{m}\n" for m in read_map(root).get("preload", [])))
            plan = {"lines": {f: sorted(ls) for f, ls in files.items()}, "tests": union, "sample": args.sample,
                    "seed": args.seed, "jobs": args.jobs, "dry_run": args.dry_run, "out": str(copy / ".mutate_out.json")}
            (copy / ".mutate_plan.json").write_text(json.dumps(plan))
            log = copy / "mutate_changes.log"
            print(f"mutate_changes: {len(files)} files, {len(union)} test files; mutmut's log: {log}", file=sys.stderr)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MUTANT_UNDER_TEST"))}
            with log.open("w") as out:
                worker_proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker",
                                                str(copy / ".mutate_plan.json")], cwd=copy, env=env,
                                               stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True)
                worker_proc.wait()
            result_path = copy / ".mutate_out.json"
            if not result_path.exists():
                error = f"mutmut failed (status {worker_proc.returncode}): {_last_line(log)}"
            else:
                result = json.loads(result_path.read_text())
                mutants, error = result["mutants"], result["error"]
                if error:
                    error += f": {_last_line(log)}"
        report = summarize(files, tests, mutants, groups)
        report.update(base=None if args.all_lines else args.base, sample=args.sample or None, seed=args.seed,
                      wall_s=round(time.monotonic() - start, 1), error=error, dry_run=args.dry_run)
        if error:
            args.keep = True
            print(f"mutate_changes: {error}; the copy is kept: {copy}", file=sys.stderr)
        if args.json:
            print(json.dumps(report, indent=1))
        elif args.dry_run:
            print(head + " (dry run)")
            for m in report["modules"]:
                print(f"{m['path']}: {m['mutants']} mutants on {m['lines']} lines; tests: {', '.join(m['tests']) or '-'}")
            print(f"total: {report['total']['mutants']} mutants")
        else:
            print_report(report, head + f" ({report['wall_s']:.0f}s)")
        return 1 if error else 0
    finally:
        if worker_proc is not None and worker_proc.poll() is None:
            _stop(worker_proc)
        if copy is not None and not args.keep:
            shutil.rmtree(copy, ignore_errors=True)
        elif copy is not None:
            print(f"mutate_changes: the copy is kept: {copy}", file=sys.stderr)


def _last_line(log: Path) -> str:
    """mutmut's last words, without its spinner's lines."""
    lines = [x.strip() for x in re.split(r"[\r\n]", log.read_text(errors="replace"))]
    lines = [x for x in lines if x and not ("\u2800" <= x[0] <= "\u28ff")]  # braille: the spinner
    return lines[-1][:300] if lines else "(no output)"


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        if args.worker:
            return worker(args.worker)
        signal.signal(signal.SIGTERM, _terminate)
        return run(args)
    except UsageError as e:
        print(f"mutate_changes.py: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mutate_changes: interrupted; the work tree was not touched", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
