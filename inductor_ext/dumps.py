"""Kernel dumps: every generated kernel's source plus index.json saying where it came from.

Kernels are read from Inductor's output code (also on an FX graph cache hit), so what is dumped
is exactly what runs. Each entry names the kernel, its template and config, the FX nodes it
computes, the user's file:line for them, and ext's autotune decision for GEMMs.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

import torch

INDEX = "index.json"

_KERNEL_RE = re.compile(
    r"^(?P<name>\w+) = async_compile\.(?P<kind>triton|cpp_pybinding|cpp)\((?P<args>.*?)'''(?P<source>.*?)'''",
    re.S | re.M,
)
_FRAGMENT_NODE_RE = re.compile(r"^#\s+%(\w+) :", re.M)
_ATEN_RE = re.compile(r"Original ATen: \[(.*?)\]")
_CONSTEXPR_RE = re.compile(r"^\s+(\w+) : tl\.constexpr = (.+)$", re.M)
_LAUNCH_RE = re.compile(r"(num_warps|num_stages)=(\d+)")
_TEMPLATE_RE = re.compile(r"# inductor_ext template: ([\w.]+)")
_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+)')


def user_locations(gm: torch.fx.GraphModule) -> dict[str, list[str]]:
    """FX node name -> the user's file:line frames that produced it (innermost last)."""
    found: dict[str, list[str]] = {}
    for node in gm.graph.nodes:
        trace = node.meta.get("stack_trace") or ""
        frames = [f"{f}:{line}" for f, line in _FRAME_RE.findall(trace) if "/torch/" not in f]
        if frames:
            found[node.name] = frames[-1:]
    return found


def parse_output_code(code: str) -> list[dict[str, Any]]:
    """The kernels in an Inductor output module, with the comment block that precedes each."""
    kernels = []
    for match in _KERNEL_RE.finditer(code):
        header = _comment_block_before(code, match.start())
        source = match.group("source")
        template = _TEMPLATE_RE.search(source)
        is_template = "@triton_heuristics.template(" in source
        config = {k: v.strip() for k, v in _CONSTEXPR_RE.findall(source)} if is_template else {}
        config.update({k: int(v) for k, v in _LAUNCH_RE.findall(source[:2000])} if is_template else {})
        aten = _ATEN_RE.search(header)
        kernels.append({
            "kernel": match.group("name"),
            "language": "triton" if match.group("kind") == "triton" else "cpp",
            "template": template.group(1) if template else ("inductor template" if is_template else None),
            "config": config,
            "fx_nodes": list(dict.fromkeys(_FRAGMENT_NODE_RE.findall(header))),
            "aten_ops": [a.strip() for a in aten.group(1).split(",")] if aten else [],
            "source": source,
        })
    return kernels


def _comment_block_before(code: str, pos: int) -> str:
    lines = code[:pos].rstrip("\n").split("\n")
    block = []
    for line in reversed(lines):
        if not line.startswith("#"):
            break
        block.append(line)
    return "\n".join(reversed(block))


def write(dump_dir: str | os.PathLike, graph_name: str, code: str, gm: torch.fx.GraphModule,
          decisions: Iterable[Any]) -> list[dict[str, Any]]:
    """Write one compiled graph's kernels under ``dump_dir/graph_name`` and extend index.json."""
    root = Path(dump_dir)
    folder = root / graph_name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "output_code.py").write_text(code)
    where = user_locations(gm)
    decisions = list(decisions)
    entries = []
    for k in parse_output_code(code):
        suffix = ".py" if k["language"] == "triton" else ".cpp"
        path = folder / f"{k['kernel']}{suffix}"
        path.write_text(k.pop("source"))
        k["file"] = str(path.relative_to(root))
        k["graph"] = graph_name
        k["user_source"] = sorted({loc for n in k["fx_nodes"] for loc in where.get(n, [])})
        k["decision"] = _decision_for(k, decisions)
        entries.append(k)
    for d in decisions:  # GEMMs that ATen won have no generated kernel: list them too
        if not any(e["decision"] is d for e in entries):
            entries.append({"kernel": d.winner, "language": "extern", "template": "aten" if d.winner else None,
                            "config": {}, "fx_nodes": [d.node], "aten_ops": [d.op], "file": None,
                            "graph": graph_name, "user_source": where.get(d.node, []), "decision": d})
    for e in entries:
        d = e["decision"]
        e["decision"] = None if d is None else {"winner": d.winner, "reason": d.reason, "problem": d.problem,
                                                "candidates": d.candidates}
    _extend_index(root, entries)
    return entries


def _decision_for(kernel: dict[str, Any], decisions: list[Any]) -> Any:
    for d in decisions:
        if d.node in kernel["fx_nodes"] and kernel["template"]:
            return d
    return None


def _extend_index(root: Path, entries: list[dict[str, Any]]) -> None:
    index = read_index(root) if (root / INDEX).exists() else {"created": time.time(), "kernels": []}
    index["kernels"].extend(entries)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".index.")
    with os.fdopen(fd, "w") as f:
        json.dump(index, f, indent=2, default=str)
    os.replace(tmp, root / INDEX)  # readers never see half an index


def read_index(root: str | os.PathLike) -> dict[str, Any]:
    path = Path(root) / INDEX
    if not path.exists():
        raise FileNotFoundError(f"no {INDEX} in {root}: was it written with options={{'dump_dir': ...}}?")
    return json.loads(path.read_text())


def format_table(index: dict[str, Any], sort: str = "graph", contains: str | None = None) -> str:
    """index.json as a text table (what ``inductor-ext dumps show`` prints)."""
    rows = [k for k in index["kernels"] if not contains or contains in json.dumps(k)]
    rows.sort(key=lambda k: str(k.get(sort, "")))
    header = ("graph", "kernel", "template", "winner / reason", "fx nodes", "user source")
    table = [header]
    for k in rows:
        d = k.get("decision") or {}
        table.append((k["graph"], k["kernel"], k["template"] or "-",
                      f"{d['winner']} ({d['reason']})" if d else "-",
                      ",".join(k["fx_nodes"][:4]) + ("..." if len(k["fx_nodes"]) > 4 else ""),
                      ",".join(k["user_source"]) or "-"))
    widths = [min(48, max(len(str(r[i])) for r in table)) for i in range(len(header))]
    return "\n".join("  ".join(str(c)[:w].ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)
