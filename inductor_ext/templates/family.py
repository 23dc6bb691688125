"""The template-family record, ``Family``, and ``OpSpec``, the plain data lowering hands a family.

A family is one module (one DSL x one op family, e.g. ``templates/triton/gemm.py``, the example to
copy) that keeps its parts as plain module names (``NAME``, ``CHOICE_KIND``, ``OPS``, ``TARGETS``,
``Problem``, ``Config``, ``problem_for``, ``refuse_problem``, ``configs``, ...) and ends with its record,
``FAMILY = Family.of_module(__name__)``, which gathers them. Building the record checks it, so a
malformed family fails at import naming what it lacks. The rest of ext reads the record's fields,
never the module. Each hook's contract is its ``Protocol`` in ``templates/family_hooks.py``.
Every family: no ``torch._inductor`` import (templates run on the lent GPU's older torch), torch
imported lazily, ``render`` returns plain text, a refusal is a reason string, never an exception.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from inductor_ext.templates import allowed
from inductor_ext.templates import family_hooks as hooks

CHOICE_KINDS = ("triton_template", "extern", "inductor_template")


@dataclass(frozen=True)
class TensorSpec:
    """One tensor argument of an op: what a family may specialise on (never its values)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # torch dtype name without "torch.", e.g. "bfloat16", "float8_e4m3fn"
    constant: bool = False  # a compile-time constant (a parameter frozen by Inductor's freezing)
    # which dims of ``shape`` are symbolic (dynamic shapes; ``shape`` then holds their size hints,
    # strides likewise); () when none is. Only a family with DYNAMIC_SHAPES = True sees any.
    dynamic: tuple[bool, ...] = ()
    # which strides are symbolic while their dims' sizes may not be (a static-size slice of a
    # tensor whose width is symbolic); () when none is. Treated as ``dynamic``: a kernel built for
    # the hinted stride reads the wrong elements at any other.
    dynamic_strides: tuple[bool, ...] = ()

    @property
    def is_contiguous(self) -> bool:
        expected, step = [], 1
        for size in reversed(self.shape):
            expected.append(step)
            step *= max(size, 1)
        return all(s == e or size == 1 for s, e, size in zip(self.stride, reversed(expected), self.shape))


@dataclass(frozen=True)
class OpSpec:
    """One op instance as lowering sees it, in the op's own argument order.

    ``op`` is the op's name as ``lowering/ops/`` and the passes spell it: a key of some op
    module's ``SPECS`` (``lowering.ops.specs()`` lists them all; e.g. "mm", "addmm",
    "scaled_mm", "rms_norm"); ``inputs`` its tensor arguments (None where an optional one is
    absent); ``scalars`` its non-tensor arguments by name (alpha, beta, out_dtype, activation,
    dim...); ``device_type`` where the tensors live ("cuda", "mps", "xpu", "cpu").
    """

    op: str
    inputs: tuple[TensorSpec | None, ...]
    out: TensorSpec
    scalars: dict[str, Any] = field(default_factory=dict)
    device_type: str = "cpu"


class FamilyError(TypeError):
    """A template module whose ``FAMILY`` record does not follow the protocol."""


_ABSENT: Any = None  # the default of a required field, so that Family() names what is missing

# The record's data fields, found in a family module under their upper-case name (NAME, OPS);
# hooks and classes go by their own (problem_for, Problem). Family.of_module.
_DATA = ("name", "choice_kind", "ops", "targets", "all_configs", "inductor_template", "extern_op", "pdl",
         "cpu_executor", "runs_on_cpu", "dynamic_shapes")


# What every record must be given, and what each choice kind adds (record field names).
_REQUIRED = ("ops", "targets", "Problem", "Config", "problem_for", "refuse_problem", "configs", "module")
# The hooks' names before each named its refusal stage (lowering/refusals.py): a family module that
# still defines one (a third party's, found through an entry point) is read with a DeprecationWarning.
_OLD_NAMES = {"missing": "refuse_here", "supports": "refuse_problem", "config_supports": "refuse_config",
              "ruled_out": "refuse_measured"}
_BY_KIND = {"triton_template": ("render", "inductor_source", "inductor_kwargs"), "extern": ("render", "call", "all_configs"),
            "inductor_template": ("inductor_template",)}


def by_target(table: Mapping[str, Sequence[tuple[str, str]]]) -> Callable[[Any, Any, str], Sequence[tuple[str, str]]]:
    """``Family.key_instructions`` from a ``{target: [(asm stage, regex), ...]}`` table, for a
    family whose key instructions do not depend on the problem."""
    return lambda problem, config, target: table.get(target, ())


def _renamed(module_name: str, how: str, old: str, new: str) -> None:
    # stacklevel 3: the family module's ``Family.of_module(__name__)`` line
    warnings.warn(f"family module {module_name} {how} the hook {old!r}, now named {new!r}: rename it "
                  f"(templates/family_hooks.py)", DeprecationWarning, stacklevel=3)


@dataclass(frozen=True, eq=False, kw_only=True)
class Family:
    """One template family as lowering, autotuning and the CLI read it; None where the family
    leaves an optional hook out. Build it with :meth:`of_module`."""

    name: str  # "<dsl>.<op family>", the name users write in options (NAME)
    # how lowering offers it: "triton_template" (Inductor renders inductor_source() and can fuse
    # epilogues), "extern" (a compiled kernel called through call()) or "inductor_template" (one of
    # Inductor's own templates, named by inductor_template, configured by this family's configs;
    # lowering/adapters.py maps the names to Inductor glue)
    choice_kind: str
    ops: tuple[str, ...] = _ABSENT  # the OpSpec.op values it serves ("mm", "rms_norm", ...)
    targets: tuple[str, ...] = _ABSENT  # targets claimed: each passed tier I there (tier C: Metal, SYCL)
    # frozen dataclasses; Config(**asdict(config)) round-trips; every field declares what it allows
    # (templates/allowed.py), checked whenever one is rebuilt from a dict (a cache entry, a JSON)
    Problem: type = _ABSENT
    Config: type = _ABSENT
    problem_for: hooks.ProblemFor = _ABSENT
    refuse_problem: hooks.RefuseProblem = _ABSENT
    configs: hooks.Configs = _ABSENT
    # the family's module, given by name and looked up while it is imported; its source (with the
    # resource files it reads, and its imports') is hashed into cache keys (lowering/template_keys.py)
    module: ModuleType = _ABSENT
    all_configs: tuple[Any, ...] = ()  # extern: every config it may be called with
    render: hooks.Render | None = None
    call: hooks.Call | None = None  # extern
    inductor_source: hooks.InductorSource | None = None  # triton_template
    inductor_kwargs: hooks.InductorKwargs | None = None  # triton_template
    inductor_template: str | None = None  # inductor_template: "cpp_gemm", "subgraph", ...
    decomposition: hooks.Decomposition | None = None  # inductor_template "subgraph"
    extern_op: str | None = None  # extern with its own torch op ("ns::op")
    extern_kwargs: hooks.ExternKwargs | None = None
    refuse_config: hooks.RefuseConfig | None = None
    refuse_measured: hooks.RefuseMeasured | None = None
    config_from_tile: hooks.ConfigFromTile | None = None  # set: a GEMM family, which takes the GEMM tile policies
    pdl: bool = False  # its Problem's use_pdl field turns on programmatic dependent launch
    grid: hooks.Grid | None = None  # triton_template: the launch grid (None: Inductor's GEMM grid)
    refuse_here: hooks.RefuseHere | None = None
    prebuild: hooks.Prebuild | None = None
    cpu_executor: str | None = None  # what runs its kernels on CPU tensors under interpret mode
    runs_on_cpu: bool = False  # its kernels are CPU kernels (no interpreter needed)
    # its kernels leave sizes to run time: only such a family is handed symbolic dims
    # (lowering/refusals.py: the problem stage refuses the others)
    dynamic_shapes: bool = False
    example_problem: hooks.ExampleProblem | None = None
    key_instructions: hooks.KeyInstructions = lambda problem, config, target: ()
    compile_asm: hooks.CompileAsm | None = None
    isa_many: hooks.IsaMany | None = None
    launch_values: hooks.LaunchValues | None = None
    device_cases: hooks.DeviceCases | None = None

    @classmethod
    def of_module(cls, module_name: str, **given: Any) -> Family:
        """The record of the family module ``module_name`` (call it as the module's last statement,
        ``Family.of_module(__name__)``): each field is the module's name for it, the field's own
        name for a hook or a class (``problem_for``, ``Problem``) and its upper-case name for data
        (``NAME``, ``OPS``, ``ALL_CONFIGS``, ``PDL``); a ``KEY_INSTRUCTIONS`` table stands for
        ``by_target(KEY_INSTRUCTIONS)``. ``given`` fields win (a hook under another name). A hook
        under its old name (``supports``, ``config_supports``, ``ruled_out``, ``missing``) and not
        its new one is taken, with a ``DeprecationWarning``."""
        names = vars(sys.modules[module_name])
        found: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            spelling = f.name.upper() if f.name in _DATA else f.name
            if f.name != "module" and spelling in names:
                found[f.name] = names[spelling]
        for old, new in _OLD_NAMES.items():
            if old in given and new not in given:
                _renamed(module_name, "is given", old, new)
                given[new] = given.pop(old)
            elif old in names and new not in found and new not in given:
                _renamed(module_name, "defines", old, new)
                found[new] = names[old]
        if "key_instructions" not in found and "KEY_INSTRUCTIONS" in names:
            found["key_instructions"] = by_target(names["KEY_INSTRUCTIONS"])
        return cls(**{**found, **given, "module": module_name})

    @property
    def takes_tiles(self) -> bool:
        """Whether the GEMM tile policies propose to it (it maps a ``Tile`` to its config)."""
        return self.config_from_tile is not None

    def __post_init__(self) -> None:
        if isinstance(self.module, str):
            object.__setattr__(self, "module", sys.modules[self.module])
        where = f"{getattr(self.module, '__name__', '?')} (family {self.name!r})"
        if self.choice_kind not in CHOICE_KINDS:
            raise FamilyError(f"{where}: choice_kind = {self.choice_kind!r}; use one of {CHOICE_KINDS}")
        lacking = [name for name in (*_REQUIRED, *_BY_KIND[self.choice_kind])
                   if getattr(self, name) is None or (name == "all_configs" and not self.all_configs)]
        if lacking:
            raise FamilyError(f"{where} lacks {', '.join(lacking)} of the template-family protocol (templates/family.py)")
        # Every field's values are declared (templates/allowed.py): a cache entry or a JSON is then
        # checked field by field before any of it can reach generated source.
        bare = [f"{part}.{name}" for part in ("Problem", "Config") for name in allowed.undeclared(getattr(self, part))]
        if bare:
            raise FamilyError(f"{where}: fields {', '.join(bare)} declare no allowed values; declare each with "
                              "templates/allowed.py (integer, size, number, flag, one_of)")
        if self.pdl and "use_pdl" not in {f.name for f in dataclasses.fields(self.Problem)}:
            raise FamilyError(f"{where}: pdl=True, but its Problem has no use_pdl field for lowering to set")
        if self.grid is not None and self.choice_kind != "triton_template":
            raise FamilyError(f"{where}: grid is the launch grid of a triton_template family, not of a "
                              f"{self.choice_kind!r} one")
        for name in ("ops", "targets", "all_configs"):  # a list given is kept as the tuple the type says
            object.__setattr__(self, name, tuple(getattr(self, name)))
