"""Issue 31: ``dumps show`` and the decision lines people read: whole names, the kernel's file,
a cached template winner as its config (not Inductor's ``cpp_CppMicroGemmFP32Vec_0``), no raw
Python dicts. Built from a hand-written index: no compile."""

from __future__ import annotations

import json

from inductor_ext import cli, dumps, tables
from inductor_ext.autotune import decision_text

LONG = "cpp_fused_add_mul_native_layer_norm_relu_view_" + "x" * 40
PROBLEM = {"op": "addmm", "shapes": [[64], [8, 64], [64, 64]], "dtype": "float32", "fp32_precision": "ieee"}
CACHED = {"winner": "cpp_CppMicroGemmFP32Vec_0", "reason": "cache", "problem": PROBLEM,
          "candidates": [{"name": "cpp_CppMicroGemmFP32Vec_0", "kind": "template", "family": "cpp.gemm",
                          "config": "cpp.gemm avx512_8x48x1", "time_us": None}]}


def _index() -> dict:
    kernel = {"kernel": LONG, "graph": "graph000_inference", "file": f"graph000_inference/{LONG}.cpp",
              "template": "cpp.gemm", "decision": CACHED, "modules": ["layers.0.mlp.down_proj (Linear)"],
              "fx_nodes": ["addmm"], "user_source": ["/home/me/model.py:42"]}
    return {"created": 0, "kernels": [kernel]}


def test_table_keeps_whole_names_and_the_file_and_shows_the_winner_config():
    text = dumps.format_table(_index())
    assert LONG in text and f"graph000_inference/{LONG}.cpp" in text
    assert "cpp.gemm avx512_8x48x1 (cache)" in text and "cpp_CppMicroGemmFP32Vec_0" not in text


def test_table_wraps_to_a_narrow_terminal_without_cutting():
    text = tables.render(("kernel", "file"), [(LONG, "f.cpp")], width=40)
    assert max(len(line) for line in text.splitlines()) <= 40
    assert "".join(line.split()[0] for line in text.splitlines()[1:] if line.split()).startswith(LONG[:30])


def test_dumps_show_json(tmp_path, capsys):
    (tmp_path / "index.json").write_text(json.dumps(_index()))
    assert cli.main(["dumps", "show", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["kernel"] == LONG


def test_decision_line_is_text_not_python_dicts():
    line = decision_text.decision_line("addmm_1", PROBLEM, "cpp_CppMicroGemmFP32Vec_0", "cache", CACHED["candidates"])
    assert line == "addmm_1 (addmm 64 8x64 64x64 float32 fp32_precision=ieee): cpp.gemm avx512_8x48x1 (cache)"
    assert "{" not in line and "[" not in line
