"""Every package the code, the tests, the benches and the scripts import is declared in pyproject.toml, so the
README's install on a fresh machine brings it. (A package that merely arrived with another one,
as jinja2 with torch or jsonschema with nothing, passed CI on a machine with extras installed by
hand, and failed for a new user.)"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("inductor_ext", "tests", "bench", "scripts")
# Modules whose distribution the installed metadata cannot name: the CuTeDSL wheel puts
# `cutlass` on sys.path through a .pth file, so no RECORD lists it as a top-level module.
NOT_IN_METADATA = {"cutlass": "nvidia-cutlass-dsl"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    """Distribution names in the project's dependencies and every extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return {_normalize(re.match(r"[A-Za-z0-9_.\-]+", r).group(0)) for r in requirements}


def imported_modules() -> dict[str, list[str]]:
    """Top-level module name -> files importing it (absolute imports only), outside the stdlib
    and this repository's own modules."""
    local = {p.stem for folder in SCANNED for p in (ROOT / folder).rglob("*.py")} | {"inductor_ext"}
    found: dict[str, list[str]] = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in local:
                        found.setdefault(top, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared() -> None:
    by_module = importlib.metadata.packages_distributions()
    ours = declared()
    missing = []
    for module, files in sorted(imported_modules().items()):
        dists = by_module.get(module) or [NOT_IN_METADATA.get(module, module)]
        if not any(_normalize(d) in ours for d in dists):
            missing.append(f"{module} (distribution {', '.join(dists)}; imported by {', '.join(sorted(set(files))[:3])})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_the_scan_finds_imports() -> None:
    # The check above is only as good as the scan: it finds both import forms, not local modules.
    modules = imported_modules()
    assert "torch" in modules and "triton" in modules and "hypothesis" in modules
    assert "_logs" not in modules and "inductor_ext" not in modules  # local modules are not packages
