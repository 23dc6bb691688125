"""The topk_op pass and the ``inductor_ext::topk_indices`` op: which ``torch.topk`` calls of a Dynamo
graph become the op plus a gather (only where an enabled family may serve them, their results are
read as values/indices and no gradient flows), and the op's eager kernel (ATen's topk, the
baseline the families are timed against)."""

from __future__ import annotations

import pytest
import torch

from _pre_grad import pre_grad_graph

from inductor_ext import presets
from inductor_ext.kernels.topk_ops import OP
from inductor_ext.lowering.passes import available_passes
from inductor_ext.lowering.passes.topk_op import TopkOp


def _rewrite(fn, *args, grad: bool = False, **options) -> tuple[torch.fx.GraphModule, int, list]:
    gm, inputs = pre_grad_graph(fn, *args, grad=grad)
    config = presets.resolve({"preset": "gfx950", "interpret": True, **options})
    rewrites = TopkOp(config).run(gm.graph)
    gm.recompile()
    return gm, rewrites, inputs


def _targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")]


X = torch.randn(4, 3, 200).bfloat16()


def test_the_gfx950_preset_runs_it() -> None:
    assert "topk_op" in presets.resolve({"preset": "gfx950"}).passes
    assert available_passes()["topk_op"] is TopkOp


def _unpacked(x):
    v, i = torch.topk(x, 5)
    return v * 2, i


def _named(x):
    out = x.topk(3, dim=2, largest=False)
    return out.indices, out.values


@pytest.mark.parametrize("fn", [_unpacked, _named], ids=["unpacked", "method_named_fields"])
def test_topk_becomes_the_op_and_a_gather_and_computes_the_same(fn) -> None:
    gm, rewrites, inputs = _rewrite(fn, X)
    assert rewrites == 1 and OP in _targets(gm) and torch.gather in _targets(gm)
    assert torch.topk not in _targets(gm) and "topk" not in _targets(gm)
    got = gm(*inputs)
    for a, b in zip(got, fn(X)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("case, fn, kwargs", [
    ("gradient", lambda x: torch.topk(x, 5)[0], {"grad": True}),
    ("k_over_64", lambda x: torch.topk(x, 100)[1], {}),
    ("not_last_dim", lambda x: torch.topk(x, 2, dim=1)[0], {}),
    ("no_interpret_on_cpu", lambda x: torch.topk(x, 5)[0], {"interpret": False}),
    ("no_family", lambda x: torch.topk(x, 5)[0], {"templates": ["triton.gemm"]}),
    ("autotune_off", lambda x: torch.topk(x, 5)[0], {"autotune": "off"}),
])
def test_calls_no_family_serves_stay_atens_topk(case, fn, kwargs) -> None:
    x = X.float().requires_grad_() if kwargs.get("grad") else X
    gm, rewrites, _ = _rewrite(fn, x, **kwargs)
    assert rewrites == 0 and OP not in _targets(gm), case


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_op_eager_is_atens_topk(dtype) -> None:
    x = torch.randn(5, 33, dtype=dtype)
    got = OP(x, 4, -1, False, True)
    assert got.dtype == torch.int64 and got.is_contiguous()
    torch.testing.assert_close(got, torch.topk(x, 4, largest=False).indices, rtol=0, atol=0)
    assert OP(x.t(), 2, 0, True, True).shape == (2, 5)  # the op takes any dim; the families the last
