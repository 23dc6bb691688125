"""The layer table of ../shared/design.md, enforced: import-linter's contracts (pyproject.toml,
``[tool.importlinter]``) and no import circle anywhere in the package, so a wrong import fails
the day it is written."""

from __future__ import annotations

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
