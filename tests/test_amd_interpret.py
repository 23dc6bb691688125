"""The AMD presets in interpret mode (tier C through a real ``backend="ext"`` compile, on CPU):
``triton.tdm_gemm``'s one Inductor template serves an ``nn.Linear`` and a row-wise fp8
``torch._scaled_mm`` with a bias under gfx1250, and ``nn.RMSNorm`` becomes ``inductor_ext::rms_norm``
served by ``helion.rmsnorm`` under gfx950, and an MoE router's ``torch.topk`` becomes
``inductor_ext::topk_indices`` + a gather served by ``triton.topk`` under gfx950
(tests/_amd_interpret_script.py, one subprocess)."""

from __future__ import annotations

import pytest

from _script_runner import interpret_env, run_json_script

from inductor_ext import dumps


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    return run_json_script("_amd_interpret_script.py", env=interpret_env(tmp_path_factory.mktemp("amd_interpret")))


@pytest.mark.interp
@pytest.mark.parametrize("case, op, family, marker", [
    ("gfx1250_linear", "mm", "triton.tdm_gemm", "SCALING : tl.constexpr = 0"),
    ("gfx1250_scaled_mm", "scaled_mm", "triton.tdm_gemm", "SCALING : tl.constexpr = 2"),
    ("gfx950_rms_norm", "rms_norm", "helion.rmsnorm", "extern_kernels.ext_helion_rmsnorm_"),
])
def test_the_family_serves_the_compiled_graph_with_the_reference_numbers(compiled, case, op, family, marker) -> None:
    result = compiled[case]
    (decision,) = result["decisions"]
    assert decision["op"] == op and decision["reason"] == f"force_template={family}", decision
    assert "aten" in decision["families"] and family in decision["families"]
    assert marker in result["code"]
    if family.startswith("triton."):
        assert "inductor_ext template: triton.tdm_gemm" in result["code"]
    assert result["dtype"] == "torch.bfloat16"
    # one bf16 rounding of the same fp32 math; exact here, allow one ulp of the largest value
    assert result["max_err"] <= result["max_ref"] * 2**-8, result


@pytest.mark.interp
def test_triton_topk_serves_a_routers_topk_with_the_reference_values_and_indices(compiled) -> None:
    result = compiled["gfx950_topk"]
    (decision,) = result["decisions"]
    assert decision["op"] == "topk" and decision["reason"] == "force_template=triton.topk", decision
    assert decision["families"] == ["aten", "triton.topk"]
    assert "extern_kernels.ext_triton_topk_" in result["code"]
    assert result["dtypes"] == ["torch.bfloat16", "torch.int64"]
    assert result["values_equal"] and result["indices_equal"], result
    # dumps find the kernel the graph calls, with the source the family renders for it
    (kernel,) = [k for k in dumps.kernel_infos(result["code"]) if k.template == "triton.topk"]
    assert "tl.topk(" in kernel.source and kernel.config["block_m"] in (4, 16)
