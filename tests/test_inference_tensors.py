"""Weights made under ``torch.inference_mode()`` (Hugging Face pipelines, serving stacks).

Inference tensors have no version counter, so the freezing guard (lowering/frozen_params) cannot
watch them: they are not frozen but stay inputs of the compiled graph, and a weight changed in
place inside inference mode after the compile reaches the next call, as in eager. Unit tests on
``compile_frozen`` with a stand-in compile; then real compiles on the cpu preset (which freezes)
and on two device presets in interpret mode.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import pytest
import torch

from inductor_ext import tune
from inductor_ext.lowering import frozen_params


def _static(t: torch.Tensor) -> torch.Tensor:
    torch._dynamo.mark_static_address(t, guard=False)  # what Dynamo does to the module's tensors
    return t


def _recording(compiles: list):
    def compile(gm, inputs, freeze):
        compiles.append((freeze, len(inputs), [n.target for n in gm.graph.nodes if n.op == "get_attr"]))
        return gm

    return compile


# ------------------------------------------------------------------ compile_frozen, unit


def test_inference_weights_stay_inputs_and_the_others_are_frozen(caplog):
    """A model whose weight is an ordinary tensor but whose buffer was made under inference mode
    (a cache filled lazily in a pipeline): the weight is frozen and watched, the buffer is passed
    on every call."""
    x, w = torch.randn(2, 3), _static(torch.randn(3, 4))
    with torch.inference_mode():
        scale = _static(torch.full((4,), 2.0))
    compiles = []
    with caplog.at_level(logging.INFO, logger="inductor_ext"):
        run = frozen_params.compile_frozen(torch.fx.symbolic_trace(lambda x, w, s: x @ w * s), [x, w, scale],
                                           _recording(compiles))
    assert compiles == [(True, 2, ["_ext_frozen_1"])]  # x and the buffer stay inputs; w is an attribute
    assert run.watched_indices == [1]
    assert "1 parameters/buffers of this inference graph are inference tensors" in caplog.text
    with torch.inference_mode():
        torch.testing.assert_close(run(x, w, scale), x @ w * 2)
        scale.mul_(3)  # in place, where only inference mode allows it
        torch.testing.assert_close(run(x, w, scale), x @ w * 6)
    assert len(compiles) == 1  # nothing frozen changed: no recompile
    w.add_(1)  # the frozen weight is still watched
    torch.testing.assert_close(run(x, w, scale), x @ w * 6)
    assert [c[0] for c in compiles] == [True, False]


def test_only_inference_weights_compile_without_freezing():
    x = torch.randn(2, 3)
    with torch.inference_mode():
        w = _static(torch.randn(3, 4))
    compiles = []
    run = frozen_params.compile_frozen(torch.fx.symbolic_trace(lambda x, w: x @ w), [x, w], _recording(compiles))
    assert compiles == [(False, 2, [])]
    assert not isinstance(run, frozen_params.FrozenGraph)  # nothing to watch


def test_an_inference_tensor_in_place_of_a_frozen_weight_counts_as_changed():
    """Weights reloaded under inference mode into a model compiled before: the frozen weight is
    gone, so the graph is recompiled without freezing (not a crash reading a version)."""
    x, w = torch.randn(2, 3), _static(torch.randn(3, 4))
    compiles = []
    run = frozen_params.compile_frozen(torch.fx.symbolic_trace(lambda x, w: x @ w), [x, w], _recording(compiles))
    run(x, w)
    with torch.inference_mode():
        reloaded = _static(torch.randn(3, 4))
    torch.testing.assert_close(run(x, reloaded), x @ reloaded)
    assert [c[0] for c in compiles] == [True, False]


class _Attributed(torch.nn.Module):
    """What Dynamo hands a backend when the user's Inductor config had freezing on while it traced:
    the weights are attributes of the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4), requires_grad=False)
        with torch.inference_mode():
            self.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w * self.scale


def test_inference_attributes_compile_the_graph_without_freezing():
    gm = torch.fx.symbolic_trace(_Attributed())
    compiles = []
    frozen_params.compile_frozen(gm, [torch.randn(2, 3)], _recording(compiles))
    assert [c[0] for c in compiles] == [False]  # Inductor then reads the attributes on every call


# ------------------------------------------------------------------ real compiles

IN, HIDDEN, OUT = 16, 32, 8


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT)).eval()


def _eager(m: torch.nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """The reference, in plain torch ops (float64, so the compiled fp32 result is what is checked)."""
    a, b = m[0], m[2]
    h = torch.relu(x.double() @ a.weight.double().T + a.bias.double())
    return (h @ b.weight.double().T + b.bias.double()).float()


def _close(got: torch.Tensor, m: torch.nn.Sequential, x: torch.Tensor) -> None:
    torch.testing.assert_close(got, _eager(m, x), rtol=1e-5, atol=1e-5)


def _change_in_place(m: torch.nn.Sequential) -> None:
    with torch.inference_mode():  # an inference tensor can only be written to in inference mode
        m[0].weight.mul_(-1.5)
        m[2].bias.add_(1.0)


PRESETS = {
    "cpu": {"preset": "cpu"},  # freezes inference graphs
    "hopper": {"preset": "hopper", "interpret": True},
    "hopper, freezing": {"preset": "hopper", "interpret": True, "freezing": True},
    "mps": {"preset": "mps", "interpret": True},
}


@pytest.mark.parametrize("preset", PRESETS)
def test_built_and_called_under_inference_mode(preset, interpreter):
    """Built and called under inference mode (a pipeline): compiles, equals eager, and a weight
    changed in place afterwards reaches the next call. Under inference mode and then, the weights
    unchanged since, under no_grad."""
    with torch.inference_mode():
        m = _mlp()
        x = torch.randn(4, IN)
    torch._dynamo.reset()
    with tune.fresh_inductor_caches():
        compiled = torch.compile(m, backend="ext", options=PRESETS[preset])
        with torch.inference_mode():
            _close(compiled(x), m, x)
        _change_in_place(m)
        with torch.inference_mode():
            _close(compiled(x), m, x)
        with torch.no_grad():
            _close(compiled(x), m, x)
    torch._dynamo.reset()


def _compiled_sees_an_in_place_change(m: torch.nn.Module, mode: Callable[[], Any]) -> None:
    """``m`` compiled by the cpu preset and called under ``mode``: right before and after its
    weights change in place."""
    x = torch.randn(4, IN)
    torch._dynamo.reset()
    with tune.fresh_inductor_caches(), mode():
        compiled = torch.compile(m, backend="ext", options={"preset": "cpu", "autotune": "off"})
        _close(compiled(x), m, x)
        _change_in_place(m)
        _close(compiled(x), m, x)
    torch._dynamo.reset()


def test_inference_weights_called_under_no_grad():
    """Weights made under inference mode, the model compiled and called under no_grad (the cpu
    preset freezes such graphs): changed in place, the next call computes with the new weight."""
    with torch.inference_mode():
        m = _mlp()
    _compiled_sees_an_in_place_change(m, torch.no_grad)


def test_ordinary_weights_changed_under_inference_mode_are_seen():
    """Weights made as usual are frozen and watched; written in place inside inference mode they
    still bump their version, so the graph is recompiled without freezing."""
    m = _mlp()
    _compiled_sees_an_in_place_change(m, torch.inference_mode)


def test_inference_weights_under_the_users_own_freezing():
    """PyTorch's CPU tutorials set Inductor's freezing flag; pipelines load under inference mode:
    Dynamo installs the inference weights as attributes, which ext does not freeze."""
    with torch.inference_mode():
        m = _mlp()
        x = torch.randn(4, IN)
    torch._dynamo.reset()
    with torch._inductor.config.patch(freezing=True), tune.fresh_inductor_caches(), torch.inference_mode():
        compiled = torch.compile(m, backend="ext", options={"preset": "cpu", "autotune": "off"})
        _close(compiled(x), m, x)
        _change_in_place(m)
        _close(compiled(x), m, x)
    torch._dynamo.reset()
