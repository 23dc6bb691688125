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

from torch._inductor.codegen.subgraph import SubgraphTemplate, inline_subgraph_to_ir_nodes
from torch._inductor.decomposition import select_decomp_table

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

    return make_fx(functools.partial(function, **kwargs), decomposition_table=select_decomp_table(),
                   tracing_mode="symbolic")(*args)


def append(family: Family, choices: list[Any], prepared: Prepared, config: Any) -> Any | None:
    """Append the subgraph choice of ``config``."""
    function, kwargs = family.decomposition(prepared.problem, config)
    name = f"{family.name.replace('.', '_')}_{config.name()}"
    choice = SubgraphTemplate(name=name).generate(
        name=name, input_nodes=list(prepared.inputs), layout=prepared.layout,
        make_fx_graph=functools.partial(_make_fx_graph, function, kwargs),
        description=f"{family.name} {config.name()}")  # what dumps show as its config
    choices.append(choice)
    return choice


def winner_node(node: Any, choice: Any, inputs: list[Any], name: str) -> Any:
    """What the graph holds for the winning ``choice``: a subgraph's operations inlined (they
    fuse with their neighbours), any other choice's ``node`` as it is."""
    gm = getattr(choice, "gm", None)
    if gm is None:
        return node
    return inline_subgraph_to_ir_nodes(gm, inputs, name)
