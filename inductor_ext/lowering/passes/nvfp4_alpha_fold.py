"""Folds NVFP4's global scale (and a bias and an activation) into the GEMM.

Finds, in the post-grad graph::

    r = _scaled_mm(a_fp4, b_fp4, scale_a_e4m3, scale_b_e4m3, None, None, out_dtype)
    y = r * alpha            # alpha: 0-d fp32 tensor or Python number; torchao casts it
                             # to out_dtype first: r * alpha.to(bf16)
    y = y + bias             # optional, bias [N] or [1, N]
    y = act(y)               # optional: relu, gelu (erf or tanh), silu, also as Inductor's
                             # decompositions between an fp32 upcast and a downcast

and replaces it by one ``inductor_ext.nvfp4_gemm`` call, which the lowering autotunes against
ATen (``_scaled_mm`` then the pointwise ops). It does not fire when alpha is not a scalar, the
operands are not NVFP4 (fp4 values, e4m3 scales), ``_scaled_mm`` already has a bias or a
result scale, or an intermediate result has another user (it would have to be kept anyway).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph, Node

from inductor_ext.kernels import nvfp4_ops  # registers torch.ops.inductor_ext.nvfp4_gemm
from inductor_ext.lowering.passes.base import ExtGraphPass

aten = torch.ops.aten
prims = torch.ops.prims

_FP4 = getattr(torch, "float4_e2m1fn_x2", None)


def _val(x: Any) -> Any:
    return x.meta.get("val") if isinstance(x, Node) else x


def _single_user(node: Node) -> Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _is_nvfp4_scaled_mm(node: Node) -> bool:
    if node.op != "call_function" or node.target is not aten._scaled_mm.default:
        return False
    a, b, sa, sb = (_val(x) for x in node.args[:4])
    bias = node.args[4] if len(node.args) > 4 else node.kwargs.get("bias")
    scale_result = node.args[5] if len(node.args) > 5 else node.kwargs.get("scale_result")
    if bias is not None or scale_result is not None or _FP4 is None:
        return False
    tensors = (a, b, sa, sb)
    return (all(isinstance(t, torch.Tensor) for t in tensors)
            and a.dtype == _FP4 and b.dtype == _FP4
            and sa.dtype == torch.float8_e4m3fn and sb.dtype == torch.float8_e4m3fn)


def _alpha_of(mul: Node, mm: Node) -> tuple[Any, torch.dtype] | None:
    """(alpha, the dtype alpha was rounded to before the multiply), or None if not a scalar."""
    if mul.target not in (aten.mul.Tensor, aten.mul.Scalar):
        return None
    other = mul.args[1] if mul.args[0] is mm else mul.args[0]
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        return float(other), torch.float32
    value = _val(other)
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        return None
    if (isinstance(other, Node) and other.target is prims.convert_element_type.default
            and len(other.users) == 1):
        source = _val(other.args[0])
        if isinstance(source, torch.Tensor) and source.dim() == 0 and source.dtype == torch.float32:
            return other.args[0], value.dtype  # torchao: alpha.to(bf16) before the multiply
    if value.dtype != torch.float32:
        return None
    return other, torch.float32


def _bias_of(add: Node, prev: Node, n: int) -> Node | None:
    if add.target is not aten.add.Tensor or len(add.args) != 2 or add.kwargs.get("alpha", 1) != 1:
        return None
    other = add.args[1] if add.args[0] is prev else add.args[0]
    value = _val(other)
    if isinstance(other, Node) and isinstance(value, torch.Tensor) and tuple(value.shape) in ((n,), (1, n)):
        return other
    return None


def _activation_after(prev: Node) -> tuple[str, Node] | None:
    """(name, the node holding the activation's output) when ``prev`` only feeds one."""
    users = list(prev.users)
    if len(users) != 1:
        return None
    node = users[0]
    if node.target is aten.relu.default:
        return "relu", node
    if node.target is aten.gelu.default:
        approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        return ("gelu_tanh" if approximate == "tanh" else "gelu"), node
    if node.target is aten.silu.default:
        return "silu", node
    if node.target is prims.convert_element_type.default and node.args[1] == torch.float32:
        return _decomposed_activation(node, _val(prev).dtype)
    return None


def _decomposed_activation(upcast: Node, dtype: torch.dtype) -> tuple[str, Node] | None:
    """Inductor decomposes silu and gelu (x / (1 + exp(-x)), 0.5 * x * (1 + erf(...)), ...)
    between an upcast to fp32 and a downcast. Find that pointwise region and identify it by
    evaluating it: it must equal exactly one known activation on every probe value."""
    inner, downcasts = {upcast}, []  # the region: inner nodes, ended by downcasts
    for node in _nodes_after(upcast):
        if not any(a in inner for a in node.all_input_nodes):
            continue  # outside the region (or a consumer of its downcast)
        if node.op != "call_function" or any(a not in inner for a in node.all_input_nodes):
            return None  # depends on something else: not a function of x alone
        if node.target is prims.convert_element_type.default and node.args[1] == dtype:
            downcasts.append(node)
        else:
            inner.add(node)
        if len(inner) > 32:
            return None
    region = inner | set(downcasts)
    if len(downcasts) != 1 or any(u not in region for n in inner for u in n.users):
        return None
    name = _identify(region, upcast, downcasts[0], dtype)
    return (name, downcasts[0]) if name else None


def _nodes_after(node: Node) -> list[Node]:
    nodes = list(node.graph.nodes)
    return nodes[nodes.index(node) + 1:]


def _identify(region: set[Node], upcast: Node, downcast: Node, dtype: torch.dtype) -> str | None:
    graph = torch.fx.Graph()
    env = {upcast: graph.placeholder("x")}
    for node in upcast.graph.nodes:  # graph order is a topological order
        if node in region and node is not upcast:
            env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(env[downcast])
    region_fn = torch.fx.GraphModule(torch.nn.Module(), graph)
    probe = torch.linspace(-10, 10, 4001).to(dtype)
    try:
        got = region_fn(probe.float())
    except Exception:
        return None
    # Formulas differ in fp32 rounding (a bf16 ulp at most, or ~1e-7 where gelu's tail
    # cancels); gelu's erf and tanh forms differ by ~4e-4 near x = -3, relu and silu by more.
    matches = []
    for name in nvfp4_ops.ACTIVATIONS[1:]:
        want = nvfp4_ops.apply_activation(probe.float(), name).to(dtype)
        close = torch.isclose(got.float(), want.float(), rtol=2**-7, atol=1e-5)
        if close.all():
            matches.append(name)
    return matches[0] if len(matches) == 1 else None


class NvFp4AlphaFold(ExtGraphPass):
    name = "nvfp4_alpha_fold"
    stage = "post_grad_pre"

    def run(self, graph: Graph) -> int:
        rewrites = 0
        for mm in list(graph.nodes):
            if _is_nvfp4_scaled_mm(mm) and self._fold(graph, mm):
                rewrites += 1
        if rewrites:
            graph.eliminate_dead_code()
        return rewrites

    def _fold(self, graph: Graph, mm: Node) -> bool:
        mul = _single_user(mm)
        if mul is None:
            return False
        alpha = _alpha_of(mul, mm)
        if alpha is None:
            return False
        alpha_value, alpha_dtype = alpha
        out_dtype = _val(mm).dtype
        n = _val(mm).shape[1]
        last, bias, activation = mul, None, "none"
        nxt = _single_user(mul)
        if nxt is not None and (b := _bias_of(nxt, mul, n)) is not None:
            last, bias = nxt, b
        if (act := _activation_after(last)) is not None:
            activation, last = act
        if _val(last).dtype != out_dtype:
            return False
        with graph.inserting_before(last):
            if not isinstance(alpha_value, Node):
                alpha_value = graph.call_function(aten.scalar_tensor.default, (alpha_value,),
                                                  {"dtype": torch.float32})
                alpha_value.meta["val"] = torch.tensor(0.0)
            a, b, sa, sb = mm.args[:4]
            fused = graph.call_function(torch.ops.inductor_ext.nvfp4_gemm.default,
                                        (a, b, sa, sb, alpha_value, bias, activation, out_dtype, alpha_dtype))
        fused.meta.update({k: v for k, v in last.meta.items() if k in ("val", "tensor_meta", "stack_trace")})
        last.replace_all_uses_with(fused)
        return True

