"""``inductor-ext asm`` for the Metal families (target mps). No Metal compiler exists on Linux:
a family shows its MSL, where its key instructions are counted (the SIMD-group reduction of the
gemvs, the simdgroup-matrix multiply of the tiled FP8 path...), and the Metal-on-CPU executor's
build of it (compiler, flags, buffer bindings)."""

from __future__ import annotations

import json

import pytest

from inductor_ext.cli import asm, main

pytestmark = pytest.mark.metal_cpu

# (family, --shape, --config overrides, kernel, key instructions that must be counted)
CASES = [
    ("metal.linear_gemv", (1, 4096, 4096), None, "linear_gemv", [r"\bsimd_sum\("]),
    ("metal.scaled_mm", (2, 4096, 4096), None, "scaled_mm_gemv", [r"\bsimd_sum\("]),
    ("metal.scaled_mm", (128, 128, 256), None, "scaled_mm_mma",
     [r"\bsimdgroup_multiply_accumulate\(", r"\bsimdgroup_load\("]),
    ("metal.scaled_mm", (128, 128, 256), "mma=false", "scaled_mm_tiled", [r"\bthreadgroup_barrier\("]),
    ("metal.grouped_mm", (8, 1408, 2048), None, "grouped_mm_gemv", [r"\bsimd_sum\("]),
    ("metal.softmax", (1, 128256, 1), "chunks=32,threads=256", "softmax_normalize",
     [r"\bsimd_max\(", r"\bsimd_sum\(", r"\bthreadgroup_barrier\("]),
]


@pytest.mark.parametrize("family, shape, config, kernel, keys", CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_msl_key_instructions_and_executor_build(family, shape, config, kernel, keys):
    result = asm.build(family, "mps", shape, None, config)
    assert result["kernel"] == kernel and result["language"] == "msl"
    counts = result["key_instructions"]["msl"]
    assert list(counts) == keys and all(n > 0 for n in counts.values()), counts
    assert result["asm"]["msl"] == result["source"]
    executor = result["asm"]["executor"]
    assert "not Apple GPU code" in executor and "-std=c++20" in executor
    assert f"kernel    {kernel}" in executor and "buffer(0)" in executor and "[[thread_index_in_simdgroup]]" in executor


def test_gemv_path_is_not_credited_with_the_matrix_instructions():
    """Each scaled_mm path is checked for its own instruction: the gemv has no simdgroup matrices."""
    result = asm.build("metal.scaled_mm", "mps", (2, 512, 512))
    assert "simdgroup_multiply_accumulate" not in result["source"]
    assert list(result["key_instructions"]["msl"]) == [r"\bsimd_sum\("]


def test_list_shows_the_metal_families_for_mps(capsys):
    assert main(["asm", "--list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.strip().splitlines()}
    for family in ("metal.scaled_mm", "metal.linear_gemv", "metal.grouped_mm", "metal.softmax"):
        assert " mps " in lines[family] and "[extern]" in lines[family], lines[family]


def test_out_writes_msl_executor_build_and_summary(tmp_path, capsys):
    assert main(["asm", "metal.linear_gemv", "--target", "mps", "--shape", "4x512x256", "--dtype", "float16",
                 "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["linear_gemv.executor", "linear_gemv.json", "linear_gemv.metal"]
    summary = json.loads((tmp_path / "linear_gemv.json").read_text())
    assert summary["problem"]["m"] == 4 and summary["problem"]["dtype"] == "float16"
    assert summary["key_instructions"]["msl"][r"\bsimd_sum\("] == 1
    assert "kernel void linear_gemv(" in (tmp_path / "linear_gemv.metal").read_text()
    assert "simd_sum" in capsys.readouterr().out


@pytest.mark.parametrize("argv, expected", [
    (["asm", "metal.grouped_mm", "--target", "mps"], "128 rows > 64: a prefill"),
    (["asm", "metal.linear_gemv", "--target", "mps", "--shape", "8x64x64"], "M=8 > 4: not a gemv"),
    (["asm", "metal.softmax", "--target", "mps", "--shape", "1x512x1"], "rows of 512 < 1024"),
    (["asm", "metal.scaled_mm", "--target", "sm_90a"], "does not claim target 'sm_90a'; it claims: mps"),
])
def test_shapes_a_family_does_not_serve_are_one_line_errors(capsys, argv, expected):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err
