"""The rms_norm_op pass and the ``inductor_ext::rms_norm`` op: which ``torch.rms_norm`` calls of a
Dynamo graph become the op (only where an enabled family may serve them and no gradient flows),
and the op's eager kernel (ATen's, the baseline the families are timed against)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _pre_grad import pre_grad_graph

from inductor_ext import presets
from inductor_ext.kernels.norm_ops import OP, default_eps
from inductor_ext.kernels.norms import rms_norm_reference
from inductor_ext.lowering.passes import available_passes
from inductor_ext.lowering.passes.rms_norm_op import RmsNormOp


def _rewrite(fn, *args, grad: bool = False, **options) -> tuple[torch.fx.GraphModule, int, list]:
    gm, inputs = pre_grad_graph(fn, *args, grad=grad)
    config = presets.resolve({"preset": "gfx950", "interpret": True, **options})
    rewrites = RmsNormOp(config).run(gm.graph)
    gm.recompile()
    return gm, rewrites, inputs


def _targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


X = torch.randn(4, 3, 64).bfloat16()
W = torch.randn(64).bfloat16()


def test_the_gfx950_preset_runs_it() -> None:
    assert "rms_norm_op" in presets.resolve({"preset": "gfx950"}).passes
    assert available_passes()["rms_norm_op"] is RmsNormOp


@pytest.mark.parametrize("fn, eps", [
    (lambda x, w: F.rms_norm(x, (64,), w, 1e-5), 1e-5),
    (lambda x, w: torch.rms_norm(x, [64], eps=None) * 2, torch.finfo(torch.float32).eps),  # no weight; eps of the math dtype
])
def test_rms_norm_becomes_the_op_and_computes_the_same(fn, eps) -> None:
    gm, rewrites, inputs = _rewrite(fn, X, W)
    assert rewrites == 1 and OP in _targets(gm) and torch.rms_norm not in _targets(gm)
    (node,) = [n for n in gm.graph.nodes if n.target is OP]
    assert node.args[2] == [64] and node.args[3] == pytest.approx(eps)
    (got,) = gm(*inputs)
    torch.testing.assert_close(got, fn(X, W), rtol=0, atol=0)


def test_nn_rmsnorm_module_is_rewritten() -> None:
    norm = torch.nn.RMSNorm(64).bfloat16()
    _, rewrites, _ = _rewrite(norm, X)
    assert rewrites == 1


@pytest.mark.parametrize("case, fn, kwargs", [
    ("gradient", lambda x, w: F.rms_norm(x, (64,), w, 1e-5), {"grad": True}),
    ("two_dims", lambda x, w: F.rms_norm(x, (3, 64), None, 1e-5), {}),
    ("no_interpret_on_cpu", lambda x, w: F.rms_norm(x, (64,), w), {"interpret": False}),
    ("no_family", lambda x, w: F.rms_norm(x, (64,), w), {"templates": ["triton.gemm"]}),
    ("autotune_off", lambda x, w: F.rms_norm(x, (64,), w), {"autotune": "off"}),
])
def test_calls_no_family_serves_keep_inductors_decomposition(case, fn, kwargs) -> None:
    w = W.clone().requires_grad_() if kwargs.get("grad") else W
    gm, rewrites, _ = _rewrite(fn, X, w, **kwargs)
    assert rewrites == 0 and OP not in _targets(gm), case


def test_default_eps_is_torchs() -> None:
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        x = torch.randn(3, 16, dtype=dtype) * 1e-4  # eps dominates the mean square
        torch.testing.assert_close(torch.rms_norm(x, [16]), torch.rms_norm(x, [16], eps=default_eps(dtype)), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("weight", [True, False])
def test_op_eager_is_atens_rms_norm(dtype, weight) -> None:
    x = torch.randn(5, 33, dtype=dtype)
    w = torch.randn(33, dtype=dtype) if weight else None
    got = OP(x, w, [33], 1e-6)
    torch.testing.assert_close(got, torch.rms_norm(x, [33], w, 1e-6), rtol=0, atol=0)
    torch.testing.assert_close(got, rms_norm_reference(x, w, 1e-6), rtol=0, atol=0)
    assert got.is_contiguous() and got.dtype == dtype
    strided = x.t().contiguous().t()  # same values, column-major
    assert OP(strided, w, [33], 1e-6).is_contiguous()
