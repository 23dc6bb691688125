"""The template-family protocol: ``Family``, the record every family module (one DSL x one op
family) ends with and the rest of the package reads (fields, never attribute probing); and
``OpSpec``, the plain-data description of one op instance that lowering hands a family.

A family is one module, e.g. ``templates/triton/gemm.py`` or ``templates/metal/scaled_mm.py``.
It keeps its names as plain module names (``NAME``, ``TARGETS``, ``OPS``, ``CHOICE_KIND``,
``Problem``, ``Config``, the functions) and ends with its record, built from them::

    NAME = "metal.scaled_mm"             # "<dsl>.<op family>"; the name users write in options
    ...                                  # Problem, Config, problem_for, supports, configs, ...
    FAMILY = Family(
        name=NAME, choice_kind=CHOICE_KIND, ops=OPS, targets=TARGETS, Problem=Problem, Config=Config,
        problem_for=problem_for, supports=supports, configs=configs, render=render, call=call,
        all_configs=ALL_CONFIGS, cpu_executor=CPU_EXECUTOR, example_problem=example_problem,
        key_instructions=key_instructions, compile_asm=compile_asm, module=__name__)

Building the record checks it (:class:`FamilyError`, naming the module, the family and what it
lacks), so a malformed family fails when its module is imported. Every record has:

    name                                 # "<dsl>.<op family>"
    targets                              # targets claimed (names in inductor_ext/targets): each
                                         # passed tier I there (tier C for Metal and SYCL)
    ops                                  # the ops it serves (OpSpec.op values: the lowering's
                                         # name, "mm", "addmm", "scaled_mm", "grouped_mm", ...)
    choice_kind                          # how lowering offers it: "triton_template" (Inductor
                                         # renders inductor_source() and can fuse epilogues),
                                         # "extern" (a compiled kernel called through call()) or
                                         # "inductor_template" (one of Inductor's own templates,
                                         # configured by this family's configs)
    Problem, Config                      # frozen dataclasses; Config(**asdict(config)) round-trips;
                                         # every field declares what it allows (templates/allowed.py:
                                         # size, integer, number, flag, one_of), checked whenever one
                                         # is rebuilt from a dict (a cache entry, a JSON)
    problem_for(spec: OpSpec) -> Problem | str          # the problem, or why not served
    supports(problem: Problem) -> str | None            # None, or the reason it cannot serve
    configs(problem: Problem, target: str) -> list[Config]   # default candidates, best first
    module                               # given as ``module=__name__``: its source is hashed into
                                         # cache keys

And, by choice kind:

    "triton_template":  render(problem, config, target) -> KernelSource; inductor_source() -> str,
                        the jinja template Inductor renders, and inductor_kwargs(problem, config,
                        target) -> dict, its kwargs as Inductor renders them into source (strings
                        already quoted); config has num_warps and num_stages
    "extern":           render(...); call(problem, config, target, *tensors) -> Tensor, what the
                        compiled graph runs (through runtime/ launchers: the device, or on CPU
                        tensors the CPU executor), and all_configs, every config it may be called
                        with (registered by name at import so cached graphs find them;
                        config.name(), or else its fields, names each). A family with its own torch
                        op sets extern_op ("ns::op") and extern_kwargs(problem, config) instead of
                        being called through call().
    "inductor_template": inductor_template, the name of the Inductor template that lowering
                        configures with this family's configs and hands to Inductor's autotuning
                        (``lowering/adapters.py`` maps names to Inductor glue, e.g.
                        "cpp_gemm" -> ``lowering/cpp_gemm.py``, whose optional
                        ``default_config(family, prepared, target)`` names Inductor's own pick;
                        "subgraph" takes the family's decomposition(problem, config), the torch
                        function and kwargs Inductor compiles); the family stays plain data.

Optional (None when left out), for lowering and autotuning: ``config_supports(problem, config,
target) -> str | None`` (a config the family cannot render for this problem); ``ruled_out(problem,
config, target) -> str | None`` (a config it can render but that measured to lose for this problem
on this host: autotuning neither builds nor times it, the family's default included; a cached or
forced config still serves); ``missing() -> str |
None`` (None when its kernels can run here, else what to install: lowering then offers ATen alone,
with that reason); for "extern" families ``prebuild(pairs, target, device_type)``, called once per
autotune decision with every (problem, config) pair about to be benchmarked and the device type of
the tensors ("cpu" in interpret mode), so a family whose compiler has a large fixed cost per run
(SYCL) builds them all in one run before ``call()`` needs them (a failure is logged and each
``call()`` builds its own); ``config_from_tile(tile) -> Config | None`` declares a GEMM family: only a family
with it takes the generic GEMM tile policies (nvMatmulHeuristics, the decode policy, which
read the problem's m, n, k and propose ``templates/base.py: Tile`` s mapped through it); every
other family gets its own ``configs`` alone (``autotune/policy.py: default_policies``);
``pdl=True`` for a family whose Problem has a ``use_pdl`` field its kernels honour (programmatic
dependent launch; lowering sets it on NVIDIA targets by the ``pdl`` option,
``lowering/ext_choices.py``); for "triton_template" families ``grid(*output sizes, meta, *, cdiv)
-> (x, y, z)``, the launch grid in Inductor's ``SymbolicGridFn`` form (``cdiv``, ``min``,
``max`` are passed by name when the function takes them; None: Inductor's GEMM grid,
``cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)`` programs), e.g. one program per row for a row-wise kernel;
``cpu_executor`` names what runs its kernels on CPU tensors under
``options={"interpret": True}`` (e.g. "the Triton interpreter"; none: it runs only on its device);
``runs_on_cpu=True`` for a family whose kernels are CPU kernels (no interpreter needed);
``dynamic_shapes=True`` for a family whose kernels leave sizes to run time (Inductor renders them
with symbolic sizes as values): only such a family is handed an ``OpSpec`` with symbolic dims
(``TensorSpec.dynamic``, the sizes their hints) and its ``problem_for`` refuses the dims it cannot
leave open; lowering refuses every other family a graph's symbolic sizes
(``lowering/ops/_spec.py: symbolic_refusal``).

Optional, for ``inductor-ext asm`` (``cli/asm.py``) and tier I: ``example_problem(m, n, k, dtype)
-> Problem | str`` (the problem for an MxNxK shape; without it, the plain "mm" of that shape);
``key_instructions(problem, config, target) -> [(asm stage, regex), ...]``, the instructions its
kernels must contain (none: the target's MMA instruction), ``by_target(KEY_INSTRUCTIONS)`` for a
``{target: [...]}`` table; ``compile_asm(problem, config, target) -> {stage: text}`` for a family
whose kernels are not Triton (Triton ones are compiled by ``runtime/triton_compile.py``), and
``isa_many(jobs, cache=None)`` where one run compiles many (FlyDSL, Helion: one subprocess);
``launch_values(problem) -> {arg: int}``, the integer launch arguments, for the specialisation
(unit strides become constants) a real launch gets.

For tier D: ``device_cases(target) -> [templates/device_case.py: DeviceCase]``, the shapes the
device check (``bench/device_check.py``) runs on a lent GPU, each with its problem and, built on
the device, its operands, reference and ATen call; every family that claims an NVIDIA target
gives them (the check's ``--dry-run`` refuses one that does not).

Rules every family keeps: no ``torch._inductor`` import (templates run on the lent GPU machine's
older torch), torch imported lazily (Triton picks its interpreter at first import), ``render``
returns plain text plus the data needed to launch it, and a refusal is a reason string, never an
exception. ``templates/registry.py`` finds the modules whose ``FAMILY`` is a record and hands the
records out; adding a family is one new file.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from inductor_ext.templates import allowed

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


Hook = Callable[..., Any]
_ABSENT: Any = None  # the default of a required field, so that Family() names what is missing

# What every record must be given, and what each choice kind adds (record field names).
_REQUIRED = ("ops", "targets", "Problem", "Config", "problem_for", "supports", "configs", "module")
_BY_KIND = {"triton_template": ("render", "inductor_source", "inductor_kwargs"), "extern": ("render", "call", "all_configs"),
            "inductor_template": ("inductor_template",)}


def by_target(table: Mapping[str, Sequence[tuple[str, str]]]) -> Callable[[Any, Any, str], Sequence[tuple[str, str]]]:
    """``Family.key_instructions`` from a ``{target: [(asm stage, regex), ...]}`` table, for a
    family whose key instructions do not depend on the problem."""
    return lambda problem, config, target: table.get(target, ())


@dataclass(frozen=True, eq=False, kw_only=True)
class Family:
    """One template family as lowering, autotuning and the CLI read it: the protocol above as
    fields, None where the family leaves an optional hook out. Each family module builds its
    own as its last statement, ``FAMILY = Family(...)``; construction checks it (a
    :class:`FamilyError` naming the module, the family and what it lacks), so a malformed
    family fails when its module is imported."""

    name: str  # "<dsl>.<op family>", the module's NAME
    choice_kind: str  # one of CHOICE_KINDS
    ops: tuple[str, ...] = _ABSENT
    targets: tuple[str, ...] = _ABSENT
    Problem: type = _ABSENT
    Config: type = _ABSENT
    problem_for: Hook = _ABSENT
    supports: Hook = _ABSENT
    configs: Hook = _ABSENT
    # the family's module, given by name (``module=__name__``) and looked up while it is imported; its
    # source is hashed into cache keys, its imports too (lowering/ext_choices.py)
    module: ModuleType = _ABSENT
    all_configs: tuple[Any, ...] = ()  # extern: every config it may be called with
    render: Hook | None = None
    call: Hook | None = None  # extern
    inductor_source: Hook | None = None  # triton_template
    inductor_kwargs: Hook | None = None  # triton_template
    inductor_template: str | None = None  # inductor_template
    decomposition: Hook | None = None  # inductor_template "subgraph": the torch function and kwargs
    extern_op: str | None = None
    extern_kwargs: Hook | None = None
    config_supports: Hook | None = None
    ruled_out: Hook | None = None
    config_from_tile: Hook | None = None  # set: a GEMM family, which takes the GEMM tile policies
    pdl: bool = False  # its Problem's use_pdl field turns on programmatic dependent launch
    grid: Hook | None = None  # triton_template: the launch grid (None: Inductor's GEMM grid)
    missing: Hook | None = None
    prebuild: Hook | None = None
    cpu_executor: str | None = None
    runs_on_cpu: bool = False
    dynamic_shapes: bool = False  # DYNAMIC_SHAPES: its kernels take sizes at run time (see the protocol)
    example_problem: Hook | None = None
    # (problem, config, target) -> [(asm stage, regex)]; by_target(table) when they depend on the target alone
    key_instructions: Callable[[Any, Any, str], Sequence[tuple[str, str]]] = lambda problem, config, target: ()
    compile_asm: Hook | None = None
    isa_many: Hook | None = None  # compile_asm for many (problem, config, target) in one run
    launch_values: Hook | None = None
    device_cases: Hook | None = None  # (target) -> [DeviceCase]: what bench/device_check.py runs on a GPU

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
