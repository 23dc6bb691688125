"""Generic lowering adapters: how a template family's configs become Inductor autotune choices,
one adapter per choice kind (``templates/family.py``), none per family.

Families arrive as their records (``templates/family.py: Family``).

- ``triton_template``: the family's ``inductor_source()`` as a ``TritonTemplate`` (Inductor
  renders it, can fuse epilogues into it, and benchmarks it) launched on the family's ``grid``
  (Inductor's GEMM grid by default); one choice per config with the family's ``inductor_kwargs``.
- ``extern``: a compiled kernel called from the generated wrapper. Each (family, config) is an
  ``ExternKernelChoice`` named ``ext_<family op>_<config name>``, registered for every config in
  the family's ``ALL_CONFIGS`` when this module is imported, so a graph loaded from Inductor's FX
  graph cache in a new process finds it. It calls the family's own op (``EXTERN_OP`` with
  ``extern_kwargs``) when it has one, else ``call(problem, config, target, *tensors)`` through
  this module, with the problem as JSON. A family with ``prebuild`` gets a decision's candidates
  at once before Inductor benchmarks them (``prebuild_extern``), so it can compile them in one go.
- ``inductor_template``: one of Inductor's own templates, configured by the family's config
  through its Inductor glue (``INDUCTOR_TEMPLATES``: the family's ``INDUCTOR_TEMPLATE`` name ->
  a lowering module with ``unusable(prepared)`` and ``append(family, choices, prepared, config)``),
  e.g. Inductor's C++ GEMM template with a chosen micro-kernel (``lowering/cpp_gemm.py``), or a
  plain torch function Inductor compiles and inlines (``lowering/subgraph.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from types import ModuleType
from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.kernel.mm_common import mm_grid
from torch._inductor.select_algorithm import ExternKernelChoice, SymbolicGridFn, TritonTemplate
from torch._inductor.virtualized import V

from inductor_ext.lowering import cpp_gemm, pdl_consumers, subgraph
from inductor_ext.lowering.ops import op_inputs
from inductor_ext.lowering.ops._select import OpChoice
from inductor_ext.lowering import refusals
from inductor_ext.lowering.prepared import Prepared
from inductor_ext.lowering.refusals import Refusal
from inductor_ext.templates import registry
from inductor_ext.templates.family import Family

log = logging.getLogger("inductor_ext.autotune")


def prepare(family: Family, kernel_inputs: Any, op: str) -> Prepared | Refusal:
    """The family's problem for this op instance with every choice's inputs, or why not (the
    problem stage: ``refusals.py``)."""
    inputs = op_inputs(op, kernel_inputs)
    if isinstance(inputs, str):
        return Refusal("problem", family.name, inputs)
    problem = refusals.problem(family, inputs.spec)
    if isinstance(problem, Refusal):
        return problem
    nodes, extra = inputs.nodes, {}
    if family.choice_kind == "triton_template":
        nodes, extra = _pointers(nodes), inputs.triton_extra
    prepared = Prepared(problem, nodes, inputs.layout, extra)
    if family.choice_kind == "inductor_template":
        reason = inductor_glue(family).unusable(prepared)
        if reason is not None:
            return Refusal("problem", family.name, reason)
    return prepared


def _pointers(nodes: tuple[Any, ...]) -> tuple[Any, ...]:
    """``nodes``, with each 0-d CPU graph input replaced by a copy. Inductor passes such an input
    to Triton kernels as a Python scalar (its rule for unspecialized scalars, and under
    ``interpret`` every input is a CPU tensor: a tensor-wise scale, nvfp4's alpha), which a
    template loads from as a pointer; a copy is a buffer like any other. ATen's choices keep
    the input as it is; an unused copy is dropped by Inductor's scheduler."""
    return tuple(ir.ExternKernel.copy_input(n) if n is not None and not n.get_size()
                 and V.graph.is_unspec_arg(n.get_name()) else n for n in nodes)


def append(family: Family, choices: list[Any], prepared: Prepared, config: Any, target: str) -> Any | None:
    """Append the choice for ``config``; returns it, or None when the family (or Inductor)
    cannot generate it."""
    if refusals.config(family, prepared.problem, config, target) is not None:
        return None
    kind = family.choice_kind
    if kind == "triton_template":
        return _append_triton(family, choices, prepared, config, target)
    if kind == "extern":
        return _append_extern(family, choices, prepared, config, target)
    if kind == "inductor_template":
        return inductor_glue(family).append(family, choices, prepared, config)
    raise ValueError(f"{family.name}: unknown choice kind {kind!r}")


def default_config(family: Family, prepared: Prepared, target: str) -> Any | None:
    """The config the family's upstream heuristic would pick for this problem (for an Inductor
    template, the one Inductor renders unasked), or None when it names none. Another config of
    the family must beat it by the preset's margin (ext_choices)."""
    if family.choice_kind != "inductor_template":
        return None
    return inductor_glue(family).default_config(family, prepared, target)


# --------------------------------------------------------------------------- triton_template


@functools.lru_cache(maxsize=None)
def triton_template(family_name: str) -> TritonTemplate:
    """One TritonTemplate per family, named ``ext_<family op>`` (e.g. ``ext_gemm``), launched on
    the family's ``grid`` (``Family.grid``; Inductor's GEMM grid when it declares none)."""
    family = registry.get(family_name)
    grid = mm_grid if family.grid is None else SymbolicGridFn(family.grid)
    return TritonTemplate(name=f"ext_{registry.slug(family_name)}", grid=grid, source=family.inductor_source())


def _append_triton(family: Family, choices: list[Any], prepared: Prepared, config: Any, target: str) -> Any | None:
    before = len(choices)
    triton_template(family.name).maybe_append_choice(
        choices, input_nodes=prepared.inputs, layout=prepared.layout,
        num_stages=config.num_stages, num_warps=config.num_warps,
        **(pdl_consumers.template_launch_kwargs(prepared.problem) if family.pdl else {}), **prepared.extra,
        **family.inductor_kwargs(prepared.problem, config, target))
    return choices[-1] if len(choices) > before else None


# ------------------------------------------------------------------------- inductor_template

# A family's INDUCTOR_TEMPLATE -> the lowering module that hands that Inductor template through
# (each with unusable(prepared), append(family, choices, prepared, config) and
# default_config(family, prepared, target)).
INDUCTOR_TEMPLATES: dict[str, ModuleType] = {"cpp_gemm": cpp_gemm, "subgraph": subgraph}


def inductor_glue(family: Family) -> ModuleType:
    name = family.inductor_template
    if name not in INDUCTOR_TEMPLATES:
        raise ValueError(f"{family.name}: INDUCTOR_TEMPLATE {name!r} is not one of {', '.join(INDUCTOR_TEMPLATES)}")
    return INDUCTOR_TEMPLATES[name]


# ------------------------------------------------------------------------------------ extern


def extern_choice(family: Family, config: Any) -> ExternKernelChoice:
    """The registered ExternKernelChoice of one (family, config), created on first use. A family
    with an op of its own gets an ``OpChoice``: the C++ wrapper calls it through the dispatcher."""
    name = registry.extern_name(family.name, config)
    existing = ExternKernelChoice.lookup(name)
    if existing is not None:
        return existing
    op_name = family.extern_op
    if op_name is not None:
        namespace, _, op = op_name.partition("::")
        return OpChoice(getattr(getattr(torch.ops, namespace), op).default, name)
    kernel = functools.partial(_call_family, family.name, dataclasses.asdict(config))
    kernel.__name__ = name  # type: ignore[attr-defined]
    return ExternKernelChoice(kernel, name=name, has_out_variant=False)


def _call_family(family_name: str, config: dict[str, Any], *tensors: Any, problem: str, target: str) -> Any:
    """What the generated wrapper runs for a generic extern choice."""
    rebuilt_problem, rebuilt_config = _rebuilt(family_name, problem, tuple(config.items()))
    return registry.get(family_name).call(rebuilt_problem, rebuilt_config, target, *tensors)


@functools.lru_cache(maxsize=1024)
def _rebuilt(family_name: str, problem: str, config: tuple[tuple[str, Any], ...]) -> tuple[Any, Any]:
    """The call's problem and config, each value checked against its family's declarations
    (templates/allowed.py: the problem is text in generated code); once per distinct call, as a
    decode step calls the same kernels every time."""
    family = registry.get(family_name)
    return registry.problem_from_dict(family, json.loads(problem)), registry.config_from_dict(family, dict(config))


def _append_extern(family: Family, choices: list[Any], prepared: Prepared, config: Any, target: str) -> Any | None:
    if config not in family.all_configs:
        return None  # only registered configs can be called from cached code
    if family.extern_op is not None:
        kwargs = family.extern_kwargs(prepared.problem, config)
    else:
        kwargs = {"problem": registry.problem_json(prepared.problem), "target": target}
    choice = extern_choice(family, config).bind(prepared.inputs, prepared.layout, **kwargs)
    choice.description = f"{family.name} {registry.config_name(config)}"  # what dumps show as its config
    choices.append(choice)
    return choice


def prebuild_extern(family: Family, problem: Any, configs: list[Any], target: str, device_type: str) -> None:
    """Hand an extern family the configs of one decision that it is about to be benchmarked with
    (``prebuild(pairs, target, device_type)``, optional), before Inductor benchmarks them one by
    one. A failure is logged, never fatal: ``call()`` then builds each config on its own, and
    only a broken one loses the benchmark."""
    hook = family.prebuild
    if hook is None or not configs:
        return
    try:
        hook([(problem, config) for config in configs], target, device_type)
    except Exception as e:  # noqa: BLE001  (a compile error, a missing runtime: each call says it again)
        log.warning("ext: %s could not prebuild %d candidates for %s (%s: %s); building each on its own",
                    family.name, len(configs), problem, type(e).__name__, str(e).splitlines()[0] if str(e) else "")


def register_extern_choices() -> None:
    """Register every extern family's configs (cached compiled graphs call them by name)."""
    for family, config in registry.extern_choices().values():
        extern_choice(family, config)
