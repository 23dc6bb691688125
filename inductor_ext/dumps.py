"""Kernel dumps: every generated kernel's source plus index.json saying where it came from.

Kernels are read from Inductor's output code (also on an FX graph cache hit), so what is dumped
is exactly what runs: Inductor's own Triton and C++ kernels, each device codegen's (Metal,
SYCL) through its own ``describe_kernels``, and every call of an extern template family's
choice (``lowering/adapters.py``: Metal's MSL templates, ...) with the source its family renders
for the call's problem. Each entry names the kernel, its template and config, the FX nodes it
computes, the user's file:line for them, and ext's autotune decision for GEMMs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

import torch

from inductor_ext import codegen as codegens
from inductor_ext import tables
from inductor_ext.autotune import decision_text
from inductor_ext.codegen import KernelInfo
from inductor_ext.runtime.private_files import make_private_dirs, write_new
from inductor_ext.templates import registry

INDEX = "index.json"
log = logging.getLogger("inductor_ext")

_KERNEL_RE = re.compile(
    r"^(?P<name>\w+) = async_compile\.(?P<kind>triton|cpp_pybinding|cpp)\((?P<args>.*?)'''(?P<source>.*?)'''",
    re.S | re.M,
)
_FRAGMENT_NODE_RE = re.compile(r"^#\s+%(\w+) :", re.M)
_ATEN_RE = re.compile(r"Original ATen: \[(.*?)\]")
_CONSTEXPR_RE = re.compile(r"^\s+(\w+) : tl\.constexpr = (.+)$", re.M)
_LAUNCH_RE = re.compile(r"(num_warps|num_stages)=(\d+)")
# ext's marker in a template kernel: "# ..." in Triton, "// ..." in C++ (whose next line holds
# the config as JSON: lowering/cpp_gemm.py).
_TEMPLATE_RE = re.compile(r"(?:#|//) inductor_ext template: ([\w.]+)")
_CPP_CONFIG_RE = re.compile(r"^// inductor_ext template: [\w.]+\n// (\{.*\})$", re.M)
_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+)')
# `buf3 = extern_kernels.ext_<family>_<config>(..., problem='{...}', target='mps')`: a call of an
# extern template family's choice, as the generic extern adapter binds it.
_EXTERN_CALL_RE = re.compile(r"^[ \t]*(?P<out>\w+) = extern_kernels\.(?P<name>ext_\w+)\(.*, "
                             r"problem='(?P<problem>\{[^']*\})', target='(?P<target>\w+)'\)[ \t]*$", re.M)
_HANDLE_RE = re.compile(r"\[Provenance debug handles\] (extern_kernels\.\w+:\d+)")


def user_locations(gm: torch.fx.GraphModule) -> dict[str, list[str]]:
    """FX node name -> the user's file:line frames that produced it (innermost last)."""
    found: dict[str, list[str]] = {}
    for node in gm.graph.nodes:
        trace = node.meta.get("stack_trace") or ""
        frames = [f"{f}:{line}" for f, line in _FRAME_RE.findall(trace)]
        # The innermost frame of the user's own code; inside torch.nn only, the innermost frame.
        mine = [f for f in frames if _is_user_file(f.rsplit(":", 1)[0])]
        if mine or frames:
            found[node.name] = (mine or frames)[-1:]
    return found


_ROOT_RE = re.compile(r"^L\['[^']+'\]\.?")
_MODULES_RE = re.compile(r"\._modules\['([^']+)'\]|\['([^']+)'\]|\[(\d+)\]")


def module_path(dynamo_path: str) -> str:
    """Dynamo's module path (``L['self'].layers[0]._modules['mlp'].down_proj``) as the dotted
    name ``named_modules()`` uses (``layers.0.mlp.down_proj``); "" for the compiled module."""
    path = _ROOT_RE.sub("", dynamo_path)
    return _MODULES_RE.sub(lambda m: "." + next(g for g in m.groups() if g is not None), path).lstrip(".")


def module_locations(gm: torch.fx.GraphModule) -> dict[str, str]:
    """FX node name -> ``path (Class)`` of the innermost nn.Module that produced it."""
    found = {}
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
        if stack:
            path, cls = list(stack.values())[-1]
            name = getattr(cls, "__name__", None) or str(cls).rsplit(".", 1)[-1].rstrip("'>")
            found[node.name] = f"{module_path(path) or '(root)'} ({name})"
    return found


def _is_user_file(path: str) -> bool:
    return f"{os.sep}torch{os.sep}" not in path


def inductor_kernels(code: str) -> list[KernelInfo]:
    """Inductor's own kernels in an output module: Triton and C++ (``async_compile.triton/cpp``)."""
    found = []
    for match in _KERNEL_RE.finditer(code):
        triton = match.group("kind") == "triton"
        found.append(KernelInfo(name=match.group("name"), language="triton" if triton else "cpp",
                                source=match.group("source"), suffix=".py" if triton else ".cpp",
                                header=_comment_block_before(code, match.start())))
    return found


def extern_template_kernels(code: str) -> list[KernelInfo]:
    """Each call of an extern template family's choice in an output module, named
    ``<choice>.<output buffer>``, with the source its family renders for the call's problem."""
    known = registry.extern_choices()
    found = []
    for match in _EXTERN_CALL_RE.finditer(code):
        if match.group("name") not in known:
            continue
        family, config = known[match.group("name")]
        problem = registry.from_dict(family.Problem, json.loads(match.group("problem")))
        source = family.render(problem, config, match.group("target"))
        header = _comment_block_before(code, match.start(), indented=True)
        handle = _HANDLE_RE.search(header)
        found.append(KernelInfo(f"{match.group('name')}.{match.group('out')}", source.language, source.source,
                                source.suffix, {"provenance": handle.group(1)} if handle else {}, header,
                                family.name, registry.config_to_dict(config)))
    return found


def kernel_infos(code: str) -> list[KernelInfo]:
    """Every kernel in an output module: Inductor's own, each device codegen's (Metal, SYCL,
    ...), found through the codegen's own description of its output, and the extern template
    choices it calls."""
    infos = inductor_kernels(code)
    for codegen in codegens.available().values():
        infos += codegen.describe_kernels(code)
    return infos + extern_template_kernels(code)


def parse_output_code(code: str) -> list[dict[str, Any]]:
    """The kernels in an Inductor output module, with the comment block that precedes each."""
    kernels = []
    for info in kernel_infos(code):
        source = info.source
        template = _TEMPLATE_RE.search(source)
        is_template = "@triton_heuristics.template(" in source
        config = {k: v.strip() for k, v in _CONSTEXPR_RE.findall(source)} if is_template else {}
        config.update({k: int(v) for k, v in _LAUNCH_RE.findall(source[:2000])} if is_template else {})
        config.update(info.config)
        cpp_config = _CPP_CONFIG_RE.search(source)
        if cpp_config:
            config = json.loads(cpp_config.group(1))
        aten = _ATEN_RE.search(info.header)
        kernels.append({
            "kernel": info.name,
            "language": info.language,
            "template": info.template or (template.group(1) if template else
                                          ("inductor template" if is_template else None)),
            "config": config,
            "properties": dict(info.properties),
            "fx_nodes": list(dict.fromkeys(_FRAGMENT_NODE_RE.findall(info.header))),
            "aten_ops": [a.strip() for a in aten.group(1).split(",")] if aten else [],
            "suffix": info.suffix,
            "source": source,
        })
    return kernels


def _comment_block_before(code: str, pos: int, indented: bool = False) -> str:
    """The comment lines right before ``pos`` (at any indentation when ``indented``: the
    wrapper's calls sit inside its ``call`` function)."""
    lines = code[:pos].rstrip("\n").split("\n")
    block = []
    for line in reversed(lines):
        text = line.lstrip() if indented else line
        if not text.startswith("#"):
            break
        block.append(text)
    return "\n".join(reversed(block))


def provenance_since(seen: set[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Kernel name -> (post-grad FX nodes, user file:line) recorded by Inductor since ``seen``.

    Inductor records this during codegen when trace.provenance_tracking_level > 0 (a setting
    outside the FX graph cache key); a cache hit records nothing and the dump falls back to
    the kernel headers.
    """
    from torch._inductor import debug

    found = {}
    for key, nodes in debug._inductor_triton_kernel_to_post_grad_node_info.items():
        if key in seen:
            continue
        traces = debug._inductor_kernel_stack_trace.get(key, [])
        where = sorted({f"{f}:{line}" for t in traces for f, line in _FRAME_RE.findall(t) if _is_user_file(f)})
        found[key] = (list(nodes), where)  # key is "kernel_name:handle"; ATen calls repeat names
    return found


def provenance_keys() -> set[str]:
    from torch._inductor import debug

    return set(debug._inductor_triton_kernel_to_post_grad_node_info)


def gpu_asm(compiled_module_globals: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Kernel name -> {"ptx"|"amdgcn": text} for Triton kernels compiled for a GPU.

    Inductor keeps each kernel's CompiledKernel (with its ``asm``) on the module's autotuner
    objects; kernels run in the interpreter have none, and are simply absent here.
    """
    found: dict[str, dict[str, str]] = {}
    for name, obj in compiled_module_globals.items():
        for result in getattr(obj, "compile_results", None) or []:
            asm = getattr(getattr(result, "kernel", None), "asm", None) or {}
            texts = {k: v for k, v in asm.items() if k in ("ptx", "amdgcn") and isinstance(v, str)}
            if texts:
                found[name] = texts
                break
    return found


def _provenance_of(kernel: dict[str, Any], provenance: dict[str, tuple[list[str], list[str]]] | None
                   ) -> tuple[list[str], list[str]]:
    """(FX nodes, user file:line) Inductor recorded for a parsed kernel, or empty lists."""
    handle = kernel["properties"].get("provenance")  # an extern call's own debug handle
    return next((v for key, v in (provenance or {}).items()
                 if key == handle or key.rsplit(":", 1)[0] == kernel["kernel"]), ([], []))


def traced_kernels(code: str, provenance: dict[str, tuple[list[str], list[str]]]) -> list[dict[str, Any]]:
    """The kernels of an output module as the trace records them: ``parse_output_code``'s, each
    with the FX nodes it computes (from its header, else from Inductor's provenance)."""
    kernels = parse_output_code(code)
    for k in kernels:
        k["fx_nodes"] = k["fx_nodes"] or _provenance_of(k, provenance)[0]
    return kernels


def write(dump_dir: str | os.PathLike, graph_name: str, code: str, gm: torch.fx.GraphModule,
          decisions: Iterable[Any], provenance: dict[str, tuple[list[str], list[str]]] | None = None,
          asm: dict[str, dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """Write one compiled graph's kernels under ``dump_dir/graph_name`` and extend index.json."""
    root = Path(dump_dir)
    folder = root / graph_name
    refused = unsafe_dump_folder(root, folder)
    if refused:
        log.warning("ext: no kernel dump for %s: %s", graph_name, refused)
        return []
    _write(folder / "output_code.py", code)
    where, modules = user_locations(gm), module_locations(gm)
    decisions = list(decisions)
    entries = []
    for k in parse_output_code(code):
        path = folder / f"{k['kernel']}{k.pop('suffix')}"
        _write(path, k.pop("source"))
        k["file"] = str(path.relative_to(root))
        k["asm_files"] = []
        for kind, text in (asm or {}).get(k["kernel"], {}).items():
            asm_path = folder / f"{k['kernel']}.{kind}"
            _write(asm_path, text)
            k["asm_files"].append(str(asm_path.relative_to(root)))
        k["graph"] = graph_name
        nodes, locations = _provenance_of(k, provenance)
        k["fx_nodes"] = k["fx_nodes"] or nodes
        k["user_source"] = locations or sorted({loc for n in k["fx_nodes"] for loc in where.get(n, [])})
        k["modules"] = _modules_of(k["fx_nodes"], modules)
        k["decision"] = _decision_for(k, decisions)
        if k["decision"] is None and (inlined := _inlined_winner(k, decisions)) is not None:
            # a template family whose winning kernel Inductor inlined and fused (lowering/subgraph.py)
            k["decision"], winner = inlined
            k["template"], k["config"] = winner["family"], dict(winner["config_dict"] or {})
        entries.append(k)
    # ATen calls (extern kernels) have no generated source: list them with their decision.
    generated = {e["kernel"] for e in entries}
    described = {e["properties"].get("provenance") for e in entries}
    for key, (nodes, locations) in (provenance or {}).items():
        if key.rsplit(":", 1)[0] not in generated and key not in described and key.startswith("extern_kernels."):
            entries.append({"kernel": key, "language": "extern", "template": "aten", "config": _ext_op_kwargs(code, key),
                            "fx_nodes": nodes, "aten_ops": [], "file": None, "graph": graph_name,
                            "user_source": locations, "modules": _modules_of(nodes, modules),
                            "decision": next((d for d in decisions if d.node in nodes), None)})
    for d in decisions:  # decisions not seen in provenance (e.g. an FX graph cache hit)
        if not any(e["decision"] is d for e in entries):
            entries.append({"kernel": d.winner, "language": "extern", "template": "aten",
                            "config": {}, "fx_nodes": [d.node], "aten_ops": [d.op], "file": None,
                            "graph": graph_name, "user_source": where.get(d.node, []),
                            "modules": _modules_of([d.node], modules), "decision": d})
    for e in entries:
        d = e["decision"]
        e["decision"] = None if d is None else {"winner": d.winner, "reason": d.reason, "problem": d.problem,
                                                "candidates": d.candidates}
    _extend_index(root, entries)
    return entries


def dump_dir_problem(dump_dir: str | os.PathLike) -> str | None:
    """Why ``dump_dir`` cannot take dumps (None when it can), checked before a compile starts: a
    dump that fails only once its graph is compiled would lose that compile's work."""
    place = Path(dump_dir).expanduser()
    if place.exists() and not place.is_dir():
        return f"{place} is a file, not a folder"
    existing = next(p for p in (place, *place.parents) if p.exists())  # the root always exists
    if not existing.is_dir():
        return f"{existing} is a file, so {place} cannot be a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by you"
    return None


def unsafe_dump_folder(root: Path, folder: Path) -> str | None:
    """Why dumps must not be written under ``root`` (None when they may): ``root`` and ``folder``
    are created 0700 where missing; an existing one must be the user's, and neither may hold a
    link (one planted by another user would make a dump overwrite the file it names)."""
    make_private_dirs(folder)
    if not hasattr(os, "getuid"):
        return None
    for place in (root, folder):
        owner = place.stat().st_uid
        if owner != os.getuid():
            return f"{place} belongs to uid {owner}, not to you: pick a dump_dir of your own"
        link = next((e.path for e in os.scandir(place) if e.is_symlink()), None)
        if link is not None:
            return f"{place} holds the link {link}; dumps never write through links: remove it or pick another dump_dir"
    return None


def _write(path: Path, text: str) -> None:
    """Write a dump file without following a link planted at its name (``write_new``)."""
    write_new(path, text.encode(), mode=0o644)


# An ext extern op's call, `extern_kernels.ext_<family>_<config>(..., tile_m=128, use_pdl=True)`:
# its constant kwargs are the choice's config and launch (the CuTeDSL NVFP4 GEMM's use_pdl).
_KWARG_RE = re.compile(r"\b(\w+)=(True|False|-?\d+)(?=[,)])")


def _ext_op_kwargs(code: str, key: str) -> dict[str, Any]:
    call = key.rsplit(":", 1)[0] + "("
    if not call.startswith("extern_kernels.ext_"):
        return {}
    line = next((line for line in code.splitlines() if call in line), "")
    return {k: v == "True" if v in ("True", "False") else int(v) for k, v in _KWARG_RE.findall(line.partition(call)[2])}


def _modules_of(nodes: Iterable[str], modules: dict[str, str]) -> list[str]:
    return list(dict.fromkeys(modules[n] for n in nodes if n in modules))


def _decision_for(kernel: dict[str, Any], decisions: list[Any]) -> Any:
    for d in decisions:
        if d.node in kernel["fx_nodes"] and kernel["template"]:
            return d
    return None


def _inlined_winner(kernel: dict[str, Any], decisions: list[Any]) -> tuple[Any, dict[str, Any]] | None:
    """The decision and winning candidate of a family whose kernel Inductor inlines (a subgraph:
    ``lowering/subgraph.py``) and whose operations this Inductor kernel holds."""
    for d in decisions:
        winner = next((c for c in d.candidates if c["name"] == d.winner), None)
        if d.node in kernel["fx_nodes"] and winner is not None and winner["kind"] == "template" \
                and _is_inlined(winner["family"]):
            return d, winner
    return None


def _is_inlined(family: str) -> bool:
    found = registry.families().get(family)
    return found is not None and found.inductor_template == "subgraph"


def _extend_index(root: Path, entries: list[dict[str, Any]]) -> None:
    index = read_index(root) if (root / INDEX).exists() else {"created": time.time(), "kernels": []}
    index["kernels"].extend(entries)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".index.")
    with os.fdopen(fd, "w") as f:
        json.dump(index, f, indent=2, default=str)
    os.replace(tmp, root / INDEX)  # readers never see half an index


def read_index(root: str | os.PathLike) -> dict[str, Any]:
    """``root/index.json``; FileNotFoundError when there is none, ValueError (one line) when it is
    not an index (cut short, edited by hand)."""
    path = Path(root) / INDEX
    if not path.is_file():
        raise FileNotFoundError(f"no {INDEX} in {root}: was it written with options={{'dump_dir': ...}}?")
    try:
        index = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path} is not valid JSON ({e}); compile again with dump_dir to rewrite it") from None
    if not isinstance(index, dict) or not isinstance(index.get("kernels"), list) \
            or not all(isinstance(k, dict) and "kernel" in k for k in index["kernels"]):
        raise ValueError(f"{path} is not a kernel index (it needs a \"kernels\" list of entries); "
                         "compile again with dump_dir to rewrite it")
    return index


SORT_KEYS = ("graph", "kernel", "template", "reason", "speedup")


def _speedup(kernel: dict[str, Any]) -> float | None:
    """ATen's time over the winner's, when both were measured."""
    d = kernel.get("decision") or {}
    return decision_text.speedup_vs_aten(d.get("winner", ""), d.get("reason", ""), d.get("candidates", []))


def select(index: dict[str, Any], sort: str = "graph", contains: str | None = None) -> list[dict[str, Any]]:
    """The index's kernels whose entry contains ``contains``, in ``sort`` order."""
    if sort not in SORT_KEYS:
        raise ValueError(f"sort key {sort!r} is not one of {SORT_KEYS}")
    rows = [k for k in index["kernels"] if not contains or contains in json.dumps(k)]
    order = {"reason": lambda k: (k.get("decision") or {}).get("reason", ""),
             "speedup": lambda k: -(_speedup(k) or 0.0)}.get(sort, lambda k: str(k.get(sort) or ""))
    return sorted(rows, key=order)


def format_table(index: dict[str, Any], sort: str = "graph", contains: str | None = None) -> str:
    """index.json as a text table (what ``inductor-ext dumps show`` prints): every name whole, the
    kernel's file beside it, the winner as its template config."""
    table = []
    for k in select(index, sort, contains):
        d = k.get("decision") or {}
        speedup = _speedup(k)
        table.append((k.get("graph"), k["kernel"], k.get("file"), k.get("template"),
                      f"{decision_text.winner_text(d['winner'], d.get('candidates', []))} ({d['reason']})"
                      if d else None,
                      f"{speedup:.2f}x" if speedup else None,
                      ", ".join(k.get("modules") or []),
                      ", ".join(k.get("fx_nodes") or []),
                      ", ".join(k.get("user_source") or [])))
    return tables.render(("graph", "kernel", "file", "template", "winner (reason)", "vs aten", "module",
                          "fx nodes", "user source"), table, right=("vs aten",))
