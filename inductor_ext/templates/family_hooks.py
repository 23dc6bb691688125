"""The hooks of a template family, as ``Protocol`` s: each says what its function takes, returns
and means, so a type checker sees a family's wrong signature (``templates/family.py: Family``
types its fields with them). The parameters are positional: a family may name them as it likes.

Refusals are reason strings (None: no refusal), never exceptions; lowering files each under its
stage (``lowering/refusals.py``), and each refusing hook is named for its stage: ``refuse_here``,
``refuse_problem``, ``refuse_config``, ``refuse_measured``. ``problem_for`` keeps its name: it builds
the Problem, and a str it returns instead is filed under the problem stage, as ``refuse_problem``'s
reason is. (The hooks' old names, ``missing``, ``supports``, ``config_supports`` and ``ruled_out``,
are still read from a family module, with a ``DeprecationWarning``: ``Family.of_module``.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class ProblemFor(Protocol):
    """``problem_for(spec)``: the family's Problem for an ``OpSpec``, or the reason it does not
    serve it. Only a ``dynamic_shapes`` family sees symbolic dims (``TensorSpec.dynamic``) and
    refuses those it cannot leave open."""

    def __call__(self, spec: Any, /) -> Any: ...


class RefuseProblem(Protocol):
    """``refuse_problem(problem)`` (the problem stage): None, or why the family cannot serve this
    problem at all."""

    def __call__(self, problem: Any, /) -> str | None: ...


class Configs(Protocol):
    """``configs(problem, target)``: the default candidates, best first."""

    def __call__(self, problem: Any, target: str, /) -> Sequence[Any]: ...


class RefuseConfig(Protocol):
    """``refuse_config(problem, config, target)`` (the config stage): None, or why the family cannot
    render this config for this problem."""

    def __call__(self, problem: Any, config: Any, target: str, /) -> str | None: ...


class RefuseMeasured(Protocol):
    """``refuse_measured(problem, config, target)`` (the measured stage): None, or why a config the
    family can render measured to lose here (autotuning neither builds nor times it; a cached or
    forced config still serves)."""

    def __call__(self, problem: Any, config: Any, target: str, /) -> str | None: ...


class Render(Protocol):
    """``render(problem, config, target)``: the kernel as plain text plus what launching it needs
    (``templates/base.py: KernelSource``)."""

    def __call__(self, problem: Any, config: Any, target: str, /) -> Any: ...


class InductorSource(Protocol):
    """``inductor_source()`` of a "triton_template" family: the jinja template Inductor renders
    (and can fuse epilogues into); its config has num_warps and num_stages."""

    def __call__(self) -> str: ...


class InductorKwargs(Protocol):
    """``inductor_kwargs(problem, config, target)``: the template's kwargs as Inductor renders them
    into source (strings already quoted)."""

    def __call__(self, problem: Any, config: Any, target: str, /) -> Mapping[str, Any]: ...


class Call(Protocol):
    """``call(problem, config, target, *tensors)`` of an "extern" family: what the compiled graph
    runs (through ``runtime/`` launchers: the device, or on CPU tensors the CPU executor). Every
    config it may be called with is in ``all_configs`` (registered by name at import, so cached
    graphs find them). A family with its own torch op sets ``extern_op`` and ``extern_kwargs``."""

    def __call__(self, problem: Any, config: Any, target: str, /, *tensors: Any) -> Any: ...


class ExternKwargs(Protocol):
    """``extern_kwargs(problem, config)``: the kwargs of the family's own torch op (``extern_op``)."""

    def __call__(self, problem: Any, config: Any, /) -> Mapping[str, Any]: ...


class Decomposition(Protocol):
    """``decomposition(problem, config)`` of an "inductor_template" family on Inductor's
    "subgraph" template: the torch function and its kwargs Inductor compiles."""

    def __call__(self, problem: Any, config: Any, /) -> tuple[Any, Mapping[str, Any]]: ...


class ConfigFromTile(Protocol):
    """``config_from_tile(tile)``: declares a GEMM family. Only such a family takes the generic
    GEMM tile policies (nvMatmulHeuristics, the decode policy: they read m, n, k and propose
    ``templates/base.py: Tile`` s mapped through this); None where a tile has no config."""

    def __call__(self, tile: Any, /) -> Any: ...


class Grid(Protocol):
    """``grid(*output sizes, meta, *, cdiv)`` of a "triton_template" family: its launch grid in
    Inductor's ``SymbolicGridFn`` form (``cdiv``, ``min``, ``max`` passed by name when taken), e.g.
    one program per row. Without it, Inductor's GEMM grid."""

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, Any, Any]: ...


class RefuseHere(Protocol):
    """``refuse_here()`` (the here stage): None when the family's kernels can run here, else what to
    install (lowering then offers ATen alone, with that reason)."""

    def __call__(self) -> str | None: ...


class Prebuild(Protocol):
    """``prebuild(pairs, target, device_type)`` of an "extern" family: called once per decision
    with every (problem, config) about to be timed, so a compiler with a large fixed cost per run
    (SYCL) builds them all at once; a failure is logged and each ``call()`` builds its own."""

    def __call__(self, pairs: Sequence[tuple[Any, Any]], target: str, device_type: str, /) -> None: ...


class ExampleProblem(Protocol):
    """``example_problem(m, n, k, dtype)``: the problem ``inductor-ext asm`` and tier I build for an
    MxNxK shape, or why none (without it: the plain "mm" of that shape)."""

    def __call__(self, m: int, n: int, k: int, dtype: str, /) -> Any: ...


class KeyInstructions(Protocol):
    """``key_instructions(problem, config, target)``: ``[(asm stage, regex), ...]`` its kernels must
    contain (none: the target's MMA instruction); ``family.by_target(TABLE)`` for a table."""

    def __call__(self, problem: Any, config: Any, target: str, /) -> Sequence[tuple[str, str]]: ...


class CompileAsm(Protocol):
    """``compile_asm(problem, config, target)``: ``{stage: text}`` for a family whose kernels are not
    Triton (Triton's are compiled by ``runtime/triton_compile.py``)."""

    def __call__(self, problem: Any, config: Any, target: str, /) -> Mapping[str, str]: ...


class IsaMany(Protocol):
    """``isa_many(jobs, cache=None)``: ``compile_asm`` for many (problem, config, target) in one run
    (FlyDSL, Helion: one subprocess)."""

    def __call__(self, jobs: Sequence[Any], /, cache: Any = None) -> Any: ...


class LaunchValues(Protocol):
    """``launch_values(problem)``: the integer launch arguments, for the specialisation (unit
    strides become constants) a real launch gets."""

    def __call__(self, problem: Any, /) -> Mapping[str, int]: ...


class DeviceCases(Protocol):
    """``device_cases(target)``: the ``templates/device_case.py: DeviceCase`` s the device check
    (``bench/device_check.py``) runs on a lent GPU; every family claiming an NVIDIA target has them."""

    def __call__(self, target: str, /) -> Sequence[Any]: ...
