"""The template-family protocol: what every family module (one DSL x one op family) exposes,
and ``OpSpec``, the plain-data description of one op instance that lowering hands a family.

A family is one module, e.g. ``templates/triton/gemm.py`` or ``templates/metal/scaled_mm.py``::

    FAMILY = "metal.scaled_mm"           # "<dsl>.<op family>"; the name users write in options
    TARGETS = ("mps",)                   # targets claimed (names in inductor_ext/targets): each
                                         # passed tier I there (tier C for Metal and SYCL)
    OPS = ("scaled_mm",)                 # the ops it serves (OpSpec.op values: the lowering's
                                         # name, "mm", "addmm", "scaled_mm", "grouped_mm", ...)
    CHOICE_KIND = "extern"               # how lowering offers it: "triton_template" (Inductor
                                         # renders inductor_source() and can fuse epilogues),
                                         # "extern" (a compiled kernel called through call()) or
                                         # "inductor_template" (one of Inductor's own templates,
                                         # configured by this family's configs)
    Problem, Config                      # frozen dataclasses; Config(**asdict(config)) round-trips;
                                         # every field declares what it allows (templates/allowed.py:
                                         # size, integer, number, flag, one_of), checked whenever one
                                         # is rebuilt from a dict (a cache entry, a JSON)

    def problem_for(spec: OpSpec) -> Problem | str          # the problem, or why not served
    def supports(problem: Problem) -> str | None            # None, or the reason it cannot serve
    def configs(problem: Problem, target: str) -> list[Config]   # default candidates, best first
    def render(problem: Problem, config: Config, target: str) -> KernelSource   # not for
                                         # "inductor_template": Inductor renders those

``Problem`` and ``Config`` are module attributes of exactly those names (aliases are fine:
``Problem, Config = GemmProblem, GemmConfig``). And, by choice kind:

    "triton_template":  inductor_source() -> str, the jinja template Inductor renders, and
                        inductor_kwargs(problem, config, target) -> dict, its kwargs as Inductor
                        renders them into source (strings already quoted); config has num_warps
                        and num_stages
    "extern":           call(problem, config, target, *tensors) -> Tensor, what the compiled
                        graph runs (through runtime/ launchers: the device, or on CPU tensors the
                        CPU executor), and ALL_CONFIGS, every config it may be called with
                        (registered by name at import so cached graphs find them; config.name(),
                        or else its fields, names each). A family with its own torch op sets
                        EXTERN_OP ("ns::op") and extern_kwargs(problem, config) instead of being
                        called through call().
    "inductor_template": INDUCTOR_TEMPLATE, the name of the Inductor template that lowering
                        configures with this family's configs and hands to Inductor's autotuning
                        (``lowering/adapters.py`` maps names to Inductor glue, e.g.
                        "cpp_gemm" -> ``lowering/cpp_gemm.py``, whose optional
                        ``default_config(family, prepared, target)`` names Inductor's own pick);
                        the family stays plain data.

Optional, for lowering and autotuning: ``config_supports(problem, config, target) -> str | None``
(a config the family cannot render for this problem); ``missing() -> str | None`` (None when its
kernels can run here, else what to install: lowering then offers ATen alone, with that reason);
for "extern" families ``prebuild(pairs, target, device_type)``, called once per autotune decision
with every (problem, config) pair about to be benchmarked and the device type of the tensors
("cpu" in interpret mode), so a family whose compiler has a large fixed cost per run (SYCL) builds
them all in one run before ``call()`` needs them (a failure is logged and each ``call()`` builds
its own); ``config_from_tile(tile) -> Config | None`` lets the generic candidate policies
(nvMatmulHeuristics, the decode policy) propose ``templates/base.py: Tile`` s to the family;
``CPU_EXECUTOR`` names what runs its kernels on CPU tensors under ``options={"interpret": True}``
(e.g. "the Triton interpreter"; none: it runs only on its device); ``RUNS_ON_CPU = True`` for a
family whose kernels are CPU kernels (no interpreter needed).

Optional, for ``inductor-ext asm`` (``cli/asm.py``) and tier I: ``example_problem(m, n, k, dtype)
-> Problem | str`` (the problem for an MxNxK shape; without it, the plain "mm" of that shape);
``KEY_INSTRUCTIONS = {target: [(asm stage, regex), ...]}``, the instructions its kernels must
contain (without it, the target's MMA instruction), or ``key_instructions(problem, config, target)``
when they depend on the problem; ``compile_asm(problem, config, target) -> {stage: text}`` for a
family whose kernels are not Triton (Triton ones are compiled by ``runtime/triton_compile.py``);
``launch_values(problem) -> {arg: int}``, the integer launch arguments, for the specialisation
(unit strides become constants) a real launch gets.

Rules every family keeps: no ``torch._inductor`` import (templates run on the lent GPU machine's
older torch), torch imported lazily (Triton picks its interpreter at first import), ``render``
returns plain text plus the data needed to launch it, and a refusal is a reason string, never an
exception. ``templates/registry.py`` finds families; adding one is one new file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CHOICE_KINDS = ("triton_template", "extern", "inductor_template")


@dataclass(frozen=True)
class TensorSpec:
    """One tensor argument of an op: what a family may specialise on (never its values)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # torch dtype name without "torch.", e.g. "bfloat16", "float8_e4m3fn"
    constant: bool = False  # a compile-time constant (a parameter frozen by Inductor's freezing)

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

    ``op`` is the op's name as ``lowering/ops/`` and the passes spell it ("mm", "addmm", "bmm",
    "scaled_mm", "grouped_mm", "nvfp4_gemm", "softmax", "rms_norm", "topk", "decode_attention"); ``inputs`` its tensor arguments (None where an optional one is
    absent); ``scalars`` its non-tensor arguments by name (alpha, beta, out_dtype, activation,
    dim...); ``device_type`` where the tensors live ("cuda", "mps", "xpu", "cpu").
    """

    op: str
    inputs: tuple[TensorSpec | None, ...]
    out: TensorSpec
    scalars: dict[str, Any] = field(default_factory=dict)
    device_type: str = "cpu"
