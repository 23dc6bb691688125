"""Item 4 of issue 14: a decoder block compiled with options={"preset": "mps", "interpret": True}
on CPU tensors generates Metal as for an mps device (Inductor's Metal codegen for pointwise and
reductions, ext's Metal templates for the GEMMs and the vocabulary softmax), runs every kernel on
the Metal-on-CPU executor, equals eager, and dumps each Metal kernel's source. No environment
variable: the script runs without TRITON_INTERPRET. One compile per case, in one subprocess."""

from __future__ import annotations

import json

import pytest

from _script_runner import run_json_script

pytestmark = pytest.mark.metal_cpu

FAMILIES = ("metal.scaled_mm", "metal.linear_gemv", "metal.grouped_mm", "metal.softmax")


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metal_block")
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"), "INDUCTOR_EXT_CACHE_DIR": str(tmp / "ext")}
    data = run_json_script("_metal_block_script.py", str(tmp / "dump"), env=env, unset=("TRITON_INTERPRET",),
                           timeout=900)
    data["dump"] = tmp / "dump"
    return data


def test_decode_step_equals_eager_within_bf16_tolerance(block):
    d = block["decode"]
    # bf16 everywhere: the compiled block may differ from eager by bf16 rounding (Inductor keeps
    # fused intermediates in fp32), but must be as close to the fp32 truth as eager is.
    assert d["err_vs_eager"] <= 4e-2 * d["max_prob"], d  # ~10 bf16 ulps of the largest probability
    assert d["err_vs_fp32"] <= 2 * d["eager_err_vs_fp32"] + 1e-3 * d["max_prob"], d


def test_every_metal_family_serves_the_decode_step(block):
    decisions = block["decode"]["decisions"]
    won = {d["reason"].removeprefix("force_template=") for d in decisions if d["reason"].startswith("force_template=")}
    assert won == set(FAMILIES), decisions
    by_op = {}
    for d in decisions:
        by_op.setdefault(d["op"], []).append(d)
    assert set(by_op) == {"mm", "addmm", "scaled_mm", "grouped_mm", "softmax"}
    for d in decisions:  # autotuned against ATen: the op's ATen choice is always a candidate
        assert d["candidates"][0] in ("mm", "addmm", "_scaled_mm", "_grouped_mm", "softmax_aten"), d
    (softmax,) = by_op["softmax"]
    assert softmax["winner"].startswith("ext_metal_softmax_")
    assert ["vocab_softmax", "pre_grad", 1] in block["decode"]["passes"]


def test_every_kernel_is_metal_on_the_executor(block):
    code = block["decode"]["code"]
    assert "metal_cpu_kernel(" in code  # Inductor's Metal codegen, loaded by the executor
    assert "async_compile.cpp" not in code and "async_compile.triton" not in code
    for family in FAMILIES:
        assert f"extern_kernels.ext_{family.replace('.', '_')}_" in code and "target='mps'" in code


def test_dumps_list_each_metal_kernel_with_its_source(block):
    index = json.loads((block["dump"] / "index.json").read_text())
    msl = [k for k in index["kernels"] if k["language"] == "msl"]
    inductors = [k for k in msl if k["template"] is None]
    templates = {k["template"]: k for k in msl if k["template"]}
    assert inductors and set(templates) == set(FAMILIES)
    for k in msl:
        source = (block["dump"] / k["file"]).read_text()
        assert k["file"].endswith(".metal") and "kernel void" in source, k
    softmax = templates["metal.softmax"]
    assert softmax["decision"]["winner"].startswith("ext_metal_softmax_") and softmax["config"]["threads"]
    assert any("models/metal_block.py" in loc for loc in softmax["user_source"]), softmax
    assert "simd_sum(" in (block["dump"] / templates["metal.linear_gemv"]["file"]).read_text()
    table = block["decode"]["table"]
    for family in FAMILIES:
        assert family in table


def test_training_step_matches_eager(block):
    t = block["train"]
    assert t["forward_rel_err"] < 1e-5 and t["grad_rel_err"] < 1e-4, t
    assert t["grads"] >= 10
    forward = [d for d in t["decisions"] if d["reason"].startswith("force_template=")]
    assert {d["reason"].removeprefix("force_template=") for d in forward} == set(FAMILIES) - {"metal.scaled_mm"}
