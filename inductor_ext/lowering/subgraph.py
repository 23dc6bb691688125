"""Inductor's subgraph choices as ext choices: the Inductor side of families whose kernel is a
plain torch function Inductor compiles (``INDUCTOR_TEMPLATE = "subgraph"``, e.g.
``templates/cpp/decode_attention.py``).

The family names the function and its arguments for a config (``decomposition(problem, config)``);
here it is traced to an FX graph (Inductor's decompositions applied, as its custom-op autotuning
traces) and handed to Inductor's ``SubgraphTemplate``, which compiles it on its own to benchmark
it. A winning subgraph is then inlined into the graph being compiled (``winner_node``): its
operations become ordinary Inductor nodes, which fuse with their neighbours.
"""

from __future__ import annotations

import functools
from typing import Any

from torch._inductor import config as inductor_config
from torch._inductor import ir
from torch._inductor.codegen.subgraph import SubgraphTemplate, inline_subgraph_to_ir_nodes
from torch._inductor.ir import ir_node_to_tensor
from torch._inductor.decomposition import select_decomp_table
from torch._inductor.virtualized import V

from inductor_ext.lowering.prepared import Prepared
from inductor_ext.templates.family import Family


def unusable(prepared: Prepared) -> str | None:
    """Every input Inductor can trace with is usable: the family's problem_for decided."""
    return None


def default_config(family: Family, prepared: Prepared, target: str) -> Any | None:
    """None: Inductor renders no subgraph of its own, so no config is its default."""
    return None


def _make_fx_graph(function: Any, kwargs: dict[str, Any], *args: Any) -> Any:
    from torch.fx.experimental.proxy_tensor import make_fx

    # symbolic where the compile has a shape environment; a compile without one (a frozen graph
    # recompiled at run time, from real example inputs) has only static sizes to trace
    symbolic = getattr(V.fake_mode, "shape_env", None) is not None
    return make_fx(functools.partial(function, **kwargs), decomposition_table=select_decomp_table(),
                   tracing_mode="symbolic" if symbolic else "fake")(*args)


def append(family: Family, choices: list[Any], prepared: Prepared, config: Any) -> Any | None:
    """Append the subgraph choice of ``config``."""
    function, kwargs = family.decomposition(prepared.problem, config)
    name = f"{family.name.replace('.', '_')}_{config.name()}"
    choice = SubgraphTemplate(name=name).generate(
        name=name, input_nodes=list(prepared.inputs), layout=prepared.layout,
        make_fx_graph=functools.partial(_make_fx_graph, function, kwargs),
        description=f"{family.name} {config.name()}")  # what dumps show as its config
    _benchmark_with_python_wrapper(choice)
    choices.append(choice)
    return choice


def _benchmark_with_python_wrapper(choice: Any) -> None:
    """Compile ``choice``'s benchmark module with Inductor's Python wrapper even where the graph
    uses its C++ one (``cpp_wrapper=True``): the module is only timed, and Inductor's C++ wrapper of
    a subgraph with symbolic sizes declares each size twice (a C++ compile error, which dropped
    the choice from every dynamic graph). The winner is inlined into the graph, whose wrapper
    stays the C++ one."""
    compile_for_benchmarking = getattr(choice, "_compile_for_benchmarking", None)
    if compile_for_benchmarking is None:  # another torch's SubgraphChoiceCaller: left as it is
        return

    def compile_with_python_wrapper() -> Any:
        graph = V.graph
        if not graph.cpp_wrapper:
            return compile_for_benchmarking()
        graph.cpp_wrapper = False  # Inductor builds the benchmark graph with the graph's own setting
        try:
            with inductor_config.patch(cpp_wrapper=False):
                return compile_for_benchmarking()
        finally:
            graph.cpp_wrapper = True

    choice._compile_for_benchmarking = compile_with_python_wrapper


def winner_node(node: Any, choice: Any, inputs: list[Any], name: str) -> Any:
    """What the graph holds for the winning ``choice``: a subgraph's operations inlined (they
    fuse with their neighbours), any other choice's ``node`` as it is."""
    gm = getattr(choice, "gm", None)
    return node if gm is None else _inline(gm, inputs, name)


def inlined(function: Any, inputs: list[Any], name: str) -> Any:
    """``function`` (plain torch over ``inputs``' tensors) traced as a subgraph choice is, and its
    operations inlined: Inductor lowers them as it lowers the user's own code (an ATen op with no
    lowering becomes the extern call Inductor makes for it, called from the wrapper directly)."""
    with V.fake_mode:
        examples = [ir_node_to_tensor(x) for x in inputs]
    return _inline(_make_fx_graph(function, {}, *examples), inputs, name)


def _inline(gm: Any, inputs: list[Any], name: str) -> Any:
    # the inlined operations are lowered as any graph's are, on TensorBoxes (a realized input is a
    # StorageBox or a view: expand's lowering, for one, takes only a TensorBox)
    boxed = [x if isinstance(x, ir.TensorBox) else ir.TensorBox(x) for x in inputs]
    return inline_subgraph_to_ir_nodes(gm, boxed, name)
