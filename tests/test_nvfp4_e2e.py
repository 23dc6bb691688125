"""Issue 4, end to end on CPU: a ModelOpt-style NVFP4 linear stack (activations quantized in the
graph, _scaled_mm, * alpha, + bias, act) compiled with backend="ext" in interpret mode.

Runs once in a subprocess with TRITON_INTERPRET=1 (Triton picks the interpreter at import).
"""

import pytest
import torch

from _script_runner import interpret_env, run_json_script

pytestmark = pytest.mark.interp


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nvfp4_e2e")
    return run_json_script("_nvfp4_e2e_script.py", env=interpret_env(tmp))


FAMILIES = ("triton.nvfp4_gemm", "triton.nvfp4_dequant_gemm")


@pytest.mark.parametrize("family", FAMILIES)
def test_template_serves_every_layer_with_alpha_folded(results, family):
    run = results[family]
    assert [p[2] for p in run["passes"] if p[0] == "nvfp4_alpha_fold"][:1] == [3]  # all three layers
    assert len(run["decisions"]) == 4  # the stack's three GEMMs, then the single layer
    assert all(d["winner"].startswith(family.replace("triton.", "triton_ext_")) for d in run["decisions"])


@pytest.mark.parametrize("family", [*FAMILIES, "aten"])
def test_first_layer_matches_eager_reference(results, family):
    # one layer: the fused epilogue rounds once where eager rounds twice: within a bf16 ulp
    assert results[family]["first_layer_close"], results[family]["first_layer_err"]


def test_templates_give_the_aten_fallbacks_numbers(results):
    # Each template must give the ATen fallback's numbers (autotune off: the fused op's
    # plain-torch implementation) through the whole stack, activation requantization included.
    fallback = torch.tensor(results["aten"]["out"])
    assert results["aten"]["decisions"] == []  # autotune off: nothing offered, nothing timed
    for family in FAMILIES:
        torch.testing.assert_close(torch.tensor(results[family]["out"]), fallback, rtol=2**-7, atol=2**-7)


def test_stack_stays_near_eager_reference(results):
    # Through three layers, bf16 rounding differences between the fused and unfused epilogue
    # can flip a requantized fp4 code in the next layer; the stack stays within a few percent.
    for run in results.values():
        assert run["max_err"] <= 0.1 * run["max_ref"], run["max_err"]
