"""The named binding of an op's tensor arguments (``lowering/ops/_spec.py: TensorArgs``): an
optional input may be absent anywhere in the signature, and every other input keeps its own
position in ``OpSpec.inputs``. Shown on a LayerNorm-like ``(input, weight=None, bias=None)``,
whose weight may be absent while its bias is given, and on ``rms_norm``, which uses it."""

from __future__ import annotations

import types

import pytest
import torch

from inductor_ext.lowering.ops import FixedKernelInputs as _FixedKernelInputs
from inductor_ext.lowering.ops import rms_norm as rms_norm_lowering
from inductor_ext.lowering.ops._spec import TensorArgs, named
from inductor_ext.templates.family import TensorSpec


class FixedKernelInputs(_FixedKernelInputs):
    """Lowering's KernelInputs over stand-in nodes (Inductor reads the device from real IR nodes)."""

    @property
    def device_type(self) -> str:
        return "cpu"


LAYER_NORM = TensorArgs(("input", "weight", "bias"), optional=("weight", "bias"))


def _node(*shape: int, dtype: torch.dtype = torch.float32) -> types.SimpleNamespace:
    """What the binding reads of an Inductor input node: sizes, strides, dtype, device."""
    stride = tuple(int(torch.Size(shape[i + 1:]).numel()) for i in range(len(shape)))
    return types.SimpleNamespace(get_size=lambda: list(shape), get_stride=lambda: list(stride),
                                 get_dtype=lambda: dtype, get_device=lambda: torch.device("cpu"))


def _layout(*shape: int) -> types.SimpleNamespace:
    stride = tuple(int(torch.Size(shape[i + 1:]).numel()) for i in range(len(shape)))
    return types.SimpleNamespace(size=list(shape), stride=list(stride), dtype=torch.float32)


X, W, B = _node(4, 8), _node(8), _node(8, dtype=torch.bfloat16)
X_SPEC = TensorSpec((4, 8), (8, 1), "float32")
W_SPEC = TensorSpec((8,), (1,), "float32")
B_SPEC = TensorSpec((8,), (1,), "bfloat16")


def _layer_norm_inputs(**tensors):
    """What a LayerNorm lowering does with the binding: the present names and nodes, handed to
    the families through FixedKernelInputs (as ``select(..., names)`` does), then the glue."""
    names, nodes = LAYER_NORM.present(**tensors)
    kernel_inputs = FixedKernelInputs(list(nodes), _layout(4, 8), {"eps": 1e-5}, names)
    return names, named("layer_norm", kernel_inputs, LAYER_NORM, _layout(4, 8), {"eps": 1e-5})


@pytest.mark.parametrize("given, names, inputs", [
    ({"input": X, "weight": W, "bias": B}, ("input", "weight", "bias"), (X_SPEC, W_SPEC, B_SPEC)),
    ({"input": X, "weight": None, "bias": B}, ("input", "bias"), (X_SPEC, None, B_SPEC)),  # absent in the middle
    ({"input": X, "weight": W, "bias": None}, ("input", "weight"), (X_SPEC, W_SPEC, None)),
    ({"input": X, "weight": None, "bias": None}, ("input",), (X_SPEC, None, None)),
])
def test_optional_inputs_absent_anywhere_keep_the_others_in_place(given, names, inputs):
    bound_names, op_inputs = _layer_norm_inputs(**given)
    assert bound_names == names
    assert op_inputs.spec.inputs == inputs
    assert op_inputs.nodes == tuple(given[n] for n in names)  # what every choice takes, in order
    assert op_inputs.spec.out == TensorSpec((4, 8), (8, 1), "float32")
    assert op_inputs.spec.op == "layer_norm" and op_inputs.spec.scalars == {"eps": 1e-5}


def test_without_recorded_names_the_inputs_are_the_first_arguments():
    """Inductor's own KernelInputs (or a test's) carry no names: the nodes are the first
    arguments, absent optional ones last."""
    kernel_inputs = FixedKernelInputs([X, W], _layout(4, 8), {})
    assert named("layer_norm", kernel_inputs, LAYER_NORM, _layout(4, 8), {}).spec.inputs == (X_SPEC, W_SPEC, None)


def test_aten_kwargs_pass_absent_ones_as_none_and_refuse_a_shifted_position():
    assert LAYER_NORM.aten_kwargs(("input", "weight")) == {"bias": None}
    assert LAYER_NORM.aten_kwargs(("input",)) == {"weight": None, "bias": None}
    assert LAYER_NORM.aten_kwargs(("input", "weight", "bias")) == {}
    with pytest.raises(ValueError, match="'bias' would take absent 'weight''s place"):
        LAYER_NORM.aten_kwargs(("input", "bias"))


def test_wrong_bindings_are_errors():
    with pytest.raises(ValueError, match=r"required but absent \['input'\]"):
        LAYER_NORM.present(input=None, weight=W)
    with pytest.raises(ValueError, match=r"unknown \['scale'\]"):
        LAYER_NORM.present(input=X, scale=W)
    with pytest.raises(ValueError, match="do not bind"):
        LAYER_NORM.names_of(FixedKernelInputs([B, X], _layout(4, 8), {}, ("bias", "input")))  # out of order
    with pytest.raises(ValueError, match="not among them"):
        TensorArgs(("input",), optional=("bias",))


@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_binds_by_name(weight):
    """``rms_norm`` (input, weight=None) through the binding: the weight's spec or None at its place."""
    assert rms_norm_lowering.ARGS == TensorArgs(("input", "weight"), optional=("weight",))
    names, nodes = rms_norm_lowering.ARGS.present(input=X, weight=W if weight else None)
    scalars = {"normalized_shape": [8], "eps": 1e-6}
    for kernel_inputs in (FixedKernelInputs(list(nodes), _layout(4, 8), scalars, names),
                          FixedKernelInputs(list(nodes), _layout(4, 8), scalars)):  # no names: the same
        op_inputs = rms_norm_lowering.rms_norm(kernel_inputs)
        assert op_inputs.spec.inputs == (X_SPEC, W_SPEC if weight else None)
        assert op_inputs.spec.scalars == scalars
