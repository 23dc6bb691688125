"""``triton.layer_norm`` on sm_90a, and the ``layer_norm`` op around it: the kernel in Triton's
interpreter against the reference (tier C), and ``nn.LayerNorm`` under the hopper preset in
interpret mode: kept one op by the ``layer_norm_op`` pass, the family's configs timed against
ATen's, and the answer eager's (autotuned, and forced to the template, with an epilogue)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from inductor_ext.kernels.layer_norm_ops import layer_norm_reference
from inductor_ext.lowering import ext_choices
from inductor_ext.templates import registry
from inductor_ext.templates.triton import layer_norm as ln

pytestmark = pytest.mark.interp


@pytest.mark.parametrize("rows, cols, affine, dtype", [(7, 96, (True, True), torch.float32),
                                                      (16, 100, (True, False), torch.bfloat16),
                                                      (3, 33, (False, False), torch.float16)])
def test_kernel_matches_the_reference_in_the_interpreter(interpreter, rows, cols, affine, dtype) -> None:
    torch.manual_seed(0)
    x = (torch.randn(rows, cols) * 3 + 1).to(dtype)
    w = torch.randn(cols).to(dtype) if affine[0] else None
    b = torch.randn(cols).to(dtype) if affine[1] else None
    problem = ln.Problem(rows, cols, str(dtype).removeprefix("torch."), w is not None, b is not None)
    configs = ln.configs(problem, "sm_90a")
    assert configs and all(c.block_m <= rows or c.block_m == 1 for c in configs)
    want = layer_norm_reference(x, w, b, [cols])
    tol = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}[dtype]
    for config in configs:
        torch.testing.assert_close(ln.run(x, w, b, config), want, rtol=tol, atol=tol)


def test_the_record_is_a_row_wise_template_without_gemm_policies() -> None:
    family = registry.get(ln.NAME)
    assert family.choice_kind == "triton_template" and not family.takes_tiles and not family.pdl
    assert family.grid(1000, 4096, {"BLOCK_M": 16}, cdiv=lambda a, b: -(-a // b)) == (63, 1, 1)
    assert ln.supports(ln.Problem(4, ln.MAX_COLS + 1)) is not None
    assert [c.label for c in family.device_cases("sm_90a")] == ["rows 4096x4096"]


def _compiled(fn, args, tmp_path, **extra):
    torch._dynamo.reset()
    options = {"preset": "hopper", "interpret": True, "autotune_cache": str(tmp_path / f"c{len(extra)}.db"),
               "inductor": {"fx_graph_cache": False}, **extra}
    first = len(ext_choices.decisions)
    with torch.no_grad():
        got = torch.compile(fn, backend="ext", options=options)(*args)
    return got, [d for d in ext_choices.decisions[first:] if d.op == "layer_norm"]


def test_layer_norm_module_on_hopper_is_timed_against_aten_and_matches_eager(interpreter, tmp_path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 96), torch.nn.LayerNorm(96)).eval()
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        want = model(x)
    got, (decision,) = _compiled(model, (x,), tmp_path)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert decision.reason == "benchmark", decision.reason
    timed = {c["family"] for c in decision.candidates if c["time_us"] is not None}
    assert timed == {"aten", ln.NAME}, decision.candidates
    assert {c["policy"] for c in decision.candidates if c["family"] == ln.NAME} == {"default"}


@pytest.mark.parametrize("weight, bias", [(True, True), (True, False), (False, False)])
def test_forced_template_with_an_epilogue_matches_eager(interpreter, tmp_path, weight, bias) -> None:
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 3, 4, 24), torch.randn(4, 24), torch.randn(4, 24)

    def fn(x, w, b):
        return F.layer_norm(x, (4, 24), w if weight else None, b if bias else None).relu() * 2

    got, decisions = _compiled(fn, (x, w, b), tmp_path, force_template=ln.NAME)
    torch.testing.assert_close(got, fn(x, w, b), rtol=1e-5, atol=1e-5)
    assert [d.reason for d in decisions] == [f"force_template={ln.NAME}"]


def test_bias_without_weight_and_training_keep_the_decomposition(interpreter, tmp_path) -> None:
    x, b = torch.randn(4, 24), torch.randn(24)
    got, decisions = _compiled(lambda x, b: F.layer_norm(x, (24,), None, b), (x, b), tmp_path)
    torch.testing.assert_close(got, F.layer_norm(x, (24,), None, b), rtol=1e-5, atol=1e-5)
    assert decisions == []  # ATen's choice passes the op's tensors by position
    torch._dynamo.reset()
    layer = torch.nn.LayerNorm(24)
    out = torch.compile(layer, backend="ext", options={"preset": "hopper", "interpret": True})(x)
    out.sum().backward()  # no op without a backward was put in its place
    assert layer.weight.grad is not None
