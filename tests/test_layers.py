"""The layer table of ../shared/design.md, enforced: import-linter's contracts (pyproject.toml,
``[tool.importlinter]``) and no import circle anywhere in the package, so a wrong import fails
the day it is written."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    done = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()", "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "2 kept, 0 broken" in done.stdout, done.stdout[-2000:]


def _cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle():
    graph = grimp.build_graph("inductor_ext", cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_circle():
    # the check above must be able to fail
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


def _forbidden_imports(source: str) -> list[str]:
    """What a models/ module imports that it must not: anything of ours (absolute or relative) or
    ``torch._inductor``."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        else:
            continue
        bad += [n for n in names if n.startswith((".", "inductor_ext", "torch._inductor"))]
    return bad


def test_models_are_plain_torch():
    # The decoder models are imported by every layer from demo down and by bench
    # scripts on a lent GPU machine, so they import torch and nothing of ours: stricter than
    # pyproject's layers contract, which puts models/ beside kernels/ and targets/.
    found = {p.name: _forbidden_imports(p.read_text()) for p in (ROOT / "inductor_ext" / "models").glob("*.py")}
    assert len(found) > 1 and not any(found.values()), found


def test_the_models_check_can_fail():
    assert _forbidden_imports("from inductor_ext import kernels\nimport torch._inductor.config\n"
                              "from . import llama\nimport torch.nn\n") == \
        ["inductor_ext", "torch._inductor.config", "."]
