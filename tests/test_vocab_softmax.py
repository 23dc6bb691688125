"""The vocab_softmax pass on Dynamo's pre-grad graphs: which softmaxes become
``inductor_ext.softmax`` (those an enabled family serves), the upcast it folds, what it leaves
alone; and the op itself (ATen's softmax, its fake and its backward)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from inductor_ext import presets
from inductor_ext.kernels import softmax_ops
from inductor_ext.lowering.passes.vocab_softmax import VocabSoftmax

OP = torch.ops.inductor_ext.softmax.default
MPS_CPU = {"preset": "mps", "interpret": True}  # Metal families may serve CPU tensors


def pre_grad_graph(fn, *inputs) -> torch.fx.GraphModule:
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture)(*inputs)
    (gm,) = graphs
    return gm


def rewritten(fn, *inputs, options=MPS_CPU):
    """(rewrites, the op calls' arguments, the rewritten graph's outputs)."""
    gm = pre_grad_graph(fn, *inputs)
    rewrites = VocabSoftmax(presets.resolve(dict(options))).run(gm.graph)
    gm.graph.lint()
    gm.recompile()
    calls = [n.args[1:] for n in gm.graph.nodes if n.target is OP]
    outputs = gm(*inputs)  # Dynamo's graphs return a tuple
    return rewrites, calls, outputs[0] if len(outputs) == 1 else outputs, gm


BF16 = torch.randn(2, 4096).bfloat16()
F32 = torch.randn(3, 2048)


@pytest.mark.parametrize("fn, x, args", [
    (lambda x: F.softmax(x.float(), -1), BF16, (-1, torch.float32)),  # the upcast is folded
    (lambda x: torch.softmax(x.to(torch.float32), dim=-1), BF16, (-1, torch.float32)),
    (lambda x: x.softmax(dim=-1, dtype=torch.float32), BF16, (-1, torch.float32)),
    (lambda x: torch.softmax(x, 1), F32, (-1, None)),
    (lambda x: torch.nn.Softmax(dim=-1)(x), F32, (-1, None)),
    (lambda x: torch.special.softmax(x, -1), F32, (-1, None)),
    (lambda x: x.view(3, 2, 1024).softmax(-1), F32, (-1, None)),
], ids=["F.softmax(x.float())", "softmax(x.to(f32))", "x.softmax(dtype=f32)", "torch.softmax(dim=1)",
        "nn.Softmax", "special.softmax", "3-D"])
def test_large_last_dim_softmax_becomes_the_op(fn, x, args):
    rewrites, calls, out, gm = rewritten(fn, x)
    assert rewrites == 1 and calls == [args]
    assert not any(n.op == "call_method" and n.target in ("float", "to") for n in gm.graph.nodes)
    torch.testing.assert_close(out, fn(x), rtol=0, atol=0)  # ATen's softmax either way


def test_upcast_with_another_user_is_kept():
    def fn(x):
        y = x.float()
        return y.softmax(-1), y.sum()

    rewrites, calls, out, _ = rewritten(fn, BF16)
    assert rewrites == 1 and calls == [(-1, None)]
    torch.testing.assert_close(tuple(out), fn(BF16), rtol=0, atol=0)


@pytest.mark.parametrize("fn, x, options", [
    (lambda x: x.softmax(-1), torch.randn(2, 512), MPS_CPU),  # short rows: Inductor's fused softmax
    (lambda x: x.softmax(0), torch.randn(4096, 2), MPS_CPU),  # not the last dimension
    (lambda x: x.softmax(-1, dtype=torch.float16), F32, MPS_CPU),  # a narrowing dtype rounds x first
    (lambda x: x.softmax(-1), F32, {**MPS_CPU, "templates": ["metal.linear_gemv"]}),  # no softmax family
    (lambda x: x.softmax(-1), F32, {**MPS_CPU, "autotune": "off"}),  # nothing would be offered
    (lambda x: x.softmax(-1), F32, {"preset": "mps"}),  # CPU tensors without interpret: Metal cannot run
], ids=["short rows", "dim 0", "narrowing dtype", "no family", "autotune off", "cpu without interpret"])
def test_softmax_no_family_would_serve_is_left_to_inductor(fn, x, options):
    rewrites, calls, _, _ = rewritten(fn, x, options=options)
    assert rewrites == 0 and calls == []


def test_the_op_is_atens_softmax_with_fake_and_backward():
    x = torch.randn(3, 1500, dtype=torch.bfloat16, requires_grad=True)
    torch.library.opcheck(softmax_ops.softmax, (x.detach().requires_grad_(), -1, torch.float32))
    out = torch.ops.inductor_ext.softmax(x, -1, torch.float32)
    assert out.dtype == torch.float32 and out.is_contiguous()
    weights = torch.linspace(-1, 1, 1500)
    (out * weights).sum().backward()
    want_x = x.detach().clone().requires_grad_()
    (torch.softmax(want_x.float(), -1) * weights).sum().backward()
    torch.testing.assert_close(out, torch.softmax(x.detach().float(), -1), rtol=0, atol=0)
    torch.testing.assert_close(x.grad, want_x.grad)
