"""ext in PyTorch's structured trace: a compile under TORCH_TRACE records ext's decisions, the
passes it ran and the kernels it chose as artifacts, and tlparse shows them in the compile's
folder beside Inductor's own (inductor_ext/tracing.py). The compile is tests/_hidden_compile.py's,
shared with tests/test_packaging.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import _hidden_compile
import pytest
from torch._logging._internal import LazyTraceHandler, trace_log

from inductor_ext import tracing


def _artifacts(trace_dir: Path) -> dict[str, list[str]]:
    """Artifact name -> payloads, read from the raw trace logs: each record is one line of JSON
    after the glog prefix, its payload the tab-indented lines after it."""
    found: dict[str, list[str]] = {}
    for log in trace_dir.glob("*.log"):
        name, payload = None, []
        for line in [*log.read_text().splitlines(), "END {}"]:
            if line.startswith("\t"):
                payload.append(line[1:])
                continue
            if name is not None:
                found.setdefault(name, []).append("\n".join(payload))
            record = json.loads(line[line.index("{"):]) if "{" in line else {}
            name = record["artifact"]["name"] if "artifact" in record else None
            payload = []
    return found


@pytest.fixture(scope="module")
def trace() -> dict[str, Any]:
    # The compile of tests/_hidden_compile.py (every optional toolchain hidden, cpp.gemm forced)
    compiled = _hidden_compile.run()
    assert compiled["result"]["matches"]
    return {"dir": compiled["trace"], "artifacts": _artifacts(compiled["trace"]), "tmp": compiled["tmp"]}


def test_decisions_are_in_the_trace(trace: dict[str, Any]) -> None:
    decisions = [json.loads(p) for p in trace["artifacts"]["inductor_ext_decision"]]
    assert len(decisions) == 1  # the linear
    for d in decisions:
        assert d["op"] == "addmm" and d["reason"].startswith("force_template=cpp.gemm")
        families = {c["family"] for c in d["candidates"]}
        assert families == {"aten", "cpp.gemm"}
        assert all(c["time_us"] is not None and c["time_us"] > 0 for c in d["candidates"])  # timed
        assert d["winner"] in {c["name"] for c in d["candidates"] if c["family"] == "cpp.gemm"}
        assert d["cache_key"] is None or d["cache_key"]["preset"] == "cpu"


def test_passes_are_in_the_trace(trace: dict[str, Any]) -> None:
    runs = [json.loads(p) for p in trace["artifacts"]["inductor_ext_pass"]]
    assert {(r["pass"], r["stage"]) for r in runs} == {("decode_attention_op", "pre_grad"),
                                                       ("prefill_attention_op", "pre_grad"),
                                                       ("nvfp4_alpha_fold", "post_grad_pre")}
    assert all(r["rewrites"] == 0 for r in runs)  # nothing of theirs in two linears


def test_kernels_are_in_the_trace(trace: dict[str, Any]) -> None:
    listed = json.loads(trace["artifacts"]["inductor_ext_kernels"][0])
    assert [k["template"] for k in listed] == ["cpp.gemm"]
    assert all(k["fx_nodes"] for k in listed), listed  # which FX nodes each kernel computes, with no dump_dir
    for kernel in listed:
        (source,) = trace["artifacts"][f"inductor_ext_kernel_{kernel['kernel']}"]
        assert source.lstrip().startswith("// inductor_ext template: cpp.gemm") and "#include" in source


def test_tlparse_shows_them_beside_inductors(trace: dict[str, Any]) -> None:
    tlparse = shutil.which("tlparse")
    assert tlparse, "tlparse is not installed: pip install -e '.[dev]' brings it"
    out = trace["tmp"] / "tl_out"
    # The README's command, on a trace folder holding several logs (one per process run): an older
    # run's log beside the compile's, and the newest is parsed.
    (log,) = trace["dir"].glob("*.log")
    runs = trace["tmp"] / "several_runs"
    runs.mkdir()
    older = runs / "dedicated_log_torch_trace_older.log"
    shutil.copy(log, older)
    os.utime(older, (0, 0))  # an older run's log, whatever the file system's timestamp granularity
    shutil.copy(log, runs / log.name)
    readme = next(line for line in (Path(__file__).parents[1] / "README.md").read_text().splitlines()
                  if line.startswith("tlparse "))
    command = readme.split("#")[0].replace("/tmp/trace", str(runs)).replace("tl_out", str(out)) + " --overwrite"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (folder,) = {p.parent for p in out.rglob("inductor_output_code_*")}  # the compile's own folder
    names = {p.name.rsplit("_", 1)[0] for p in folder.iterdir() if p.name.startswith("inductor_ext_")}
    assert {"inductor_ext_decision", "inductor_ext_pass", "inductor_ext_kernels"} <= names
    assert sum(n.startswith("inductor_ext_kernel_cpp_") for n in names) == 1


def test_nothing_is_built_without_a_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    # As in a process without TORCH_TRACE: torch's lazy handler with no directory is all there is
    # (pytest adds its own capture handlers, which torch would write to).
    monkeypatch.setattr(trace_log, "handlers", [LazyTraceHandler(None)])
    assert not tracing.enabled()
    tracing.kernels(lambda: pytest.fail("parsed the output code with no trace being written"))
    tracing.decision(object())  # not even read
    monkeypatch.setattr(trace_log, "handlers", [LazyTraceHandler("/a/trace/dir")])
    assert tracing.enabled()
