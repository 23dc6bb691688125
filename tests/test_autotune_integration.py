"""Issue 3 end to end: an offline build, then compiles with autotune="cache-only".

Runs once in a subprocess with TRITON_INTERPRET=1 (Triton picks the interpreter at import).
"""

from pathlib import Path

import pytest

from inductor_ext import cli, dumps
from inductor_ext.autotune.cache import AutotuneCache
from _script_runner import run_json_script

HERE = Path(__file__).parent

pytestmark = pytest.mark.interp


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune")
    return out, run_json_script("_tune_script.py", str(out), env={"TRITON_INTERPRET": "1"}, timeout=600, cwd=HERE)


def test_build_stores_every_problem_with_timings(run):
    _, results = run
    built = results["built"]
    assert len(built) == 2  # the two linears' GEMMs (forward only)
    for entry in built:
        assert entry["reason"] in ("benchmark", "template within margin 0% of ATen"), entry
        assert entry["timed"] >= 2  # ATen and at least one template config were measured


def test_cache_only_compile_benchmarks_nothing(run):
    _, results = run
    cached = results["cached"]
    assert cached["benchmarks"] == 0
    assert cached["max_err"] < 1e-4
    assert len(cached["decisions"]) == 2
    assert all(d["reason"] == "cache" for d in cached["decisions"]), cached


def test_cache_only_without_entry_uses_aten_and_benchmarks_nothing(run):
    _, results = run
    empty = results["empty"]
    assert empty["benchmarks"] == 0 and empty["max_err"] < 1e-4
    assert all(d["reason"] == "fallback: cache-only and no cache entry" for d in empty["decisions"])
    assert all(d["winner"] == d["op"] for d in empty["decisions"])  # the ATen kernel


def test_cached_template_winner_is_compiled_without_benchmarks(run):
    out, results = run
    template = results["template"]
    assert template["benchmarks"] == 0 and template["max_err"] < 1e-4
    assert all(d["reason"] == "cache" and d["winner"].startswith("triton_ext_gemm") for d in template["decisions"])
    kernels = dumps.read_index(out / "dump")["kernels"]
    served = [k for k in kernels if k["template"] == "triton.gemm"]
    assert len(served) == 2
    assert all(k["decision"]["reason"] == "cache" for k in served)
    assert all(k["config"]["BLOCK_M"] == "32" for k in served)


def test_tune_show_merge_export_import(run, tmp_path, capsys):
    out, _ = run
    assert cli.main(["tune", "show", str(out / "built.db")]) == 0
    shown = capsys.readouterr().out
    assert "addmm 12x24x40 fp32" in shown and "2 entries" in shown
    assert cli.main(["tune", "merge", str(out / "built.db"), str(out / "template.db"), "-o", str(tmp_path / "m.db")]) == 0
    merged = AutotuneCache(tmp_path / "m.db")
    assert len(merged) == 2
    assert cli.main(["tune", "export", str(tmp_path / "m.db"), "-o", str(tmp_path / "m.json")]) == 0
    assert cli.main(["tune", "import", str(tmp_path / "m.json"), "-o", str(tmp_path / "back.db")]) == 0
    assert {e.key.digest() for e in AutotuneCache(tmp_path / "back.db").entries()} == {e.key.digest() for e in merged.entries()}
