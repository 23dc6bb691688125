"""Why ext does not offer a choice, in one vocabulary: a ``Refusal`` names its stage, the family
and the reason, and logs in one form.

The stages, in the order lowering asks them (each is one function here):

    here      the family cannot run in this compile: the target it claims, its toolchain (and
              the family's ``refuse_here``), the tensors' device, the graph's wrapper (``refusals.here``)
    problem   it cannot serve this problem: symbolic sizes it cannot leave open, the family's
              ``problem_for`` and ``refuse_problem``, Inductor's glue for its template (``refusals.problem``)
    config    it cannot render this config for the problem: a value outside the Config's declared
              ones, or the family's ``refuse_config``                     (``refusals.config``)
    measured  the config renders but measured to lose on this host: neither built nor timed (the
              family's ``refuse_measured``; a cached or forced config still serves) (``refusals.measured``)

What the decision rules then say of the timed choices (the margin, the cache, ``force_template``)
is the decision's reason (``autotune/decide.py``), not a refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inductor_ext import targets
from inductor_ext.config import ExtConfig
from inductor_ext.lowering.ops._spec import symbolic_dims
from inductor_ext.templates import allowed, registry
from inductor_ext.templates.family import Family, OpSpec

STAGES = ("here", "problem", "config", "measured")


@dataclass(frozen=True)
class Refusal:
    """One family (or one of its configs) not offered, and why."""

    stage: str  # one of STAGES
    family: str
    reason: str
    config: Any = None  # the config refused (the config and measured stages)

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"refusal stage {self.stage!r} is not one of {STAGES}")

    def __str__(self) -> str:
        return self.reason

    def line(self, node: str, what: str = "") -> str:
        """The one log line of every refusal: ``ext: <family>[ config <c>] not offered for <node>
        [<what>] (<stage>: <reason>)``."""
        who = self.family if self.config is None else f"{self.family} config {self.config}"
        return f"ext: {who} not offered for {node}{f' ({what})' if what else ''} ({self.stage}: {self.reason})"


def here(config: ExtConfig, family: Family, device: str, cpp_wrapper: bool = False) -> Refusal | None:
    """Why ``family`` cannot run in this compile for tensors on ``device``, or None."""
    why = _here(config, family, device, cpp_wrapper)
    return None if why is None else Refusal("here", family.name, why)


def _here(config: ExtConfig, family: Family, device: str, cpp_wrapper: bool) -> str | None:
    claimed = family.targets
    if config.target not in claimed:
        return f"verified for {', '.join(claimed)}, not target {config.target}"
    missing = registry.missing(family)  # a toolchain not installed here, or the family's own refuse_here()
    if missing:
        return f"{family.name} cannot run here: {missing}"
    if device == "cpu" and not family.runs_on_cpu:
        # CPU tensors: only a family with a CPU executor, and only in interpret mode of a preset
        # for its device (a FlyDSL launch without a ROCm GPU would abort the process, so a
        # family without an executor is never offered there; the cpu preset's kernels are native).
        executor = family.cpu_executor
        if executor is None:
            return f"{family.name} has no CPU executor: it runs only on its device"
        if not (config.interpret and config.device_type != "cpu"):
            dsl = family.name.split(".", 1)[0].capitalize()
            preset = next((name for name, data in targets.presets().items()
                           if data["target"] in claimed and data["device_type"] != "cpu"), "hopper")
            return (f"{dsl} templates run on CPU tensors only in interpret mode of a preset for their device, "
                    f"e.g. options={{'preset': {preset!r}, 'interpret': True}} ({executor})")
    if device != "cpu" and device != config.device_type:
        return f"preset {config.preset!r} is for {config.device_type}, not {device}"
    # Inductor's C++ wrapper (cpp_wrapper=True) calls an extern kernel by a C name (a shim only
    # ATen's ops have) or, for a torch.library op, through the dispatcher; a family with no op of
    # its own is called from Python, which the C++ wrapper cannot name ("Expected name is not None").
    if cpp_wrapper and family.choice_kind == "extern" and family.extern_op is None:
        return f"{family.name}'s kernels are called from Python and Inductor's C++ wrapper is on (cpp_wrapper=True)"
    return None


def problem(family: Family, spec: OpSpec) -> Any:
    """The family's Problem for ``spec``, or the ``Refusal`` saying why it cannot serve it."""
    dims = symbolic_dims(spec)
    if dims and not family.dynamic_shapes:  # a kernel built for the hinted sizes fits no other size
        return Refusal("problem", family.name,
                       f"{family.name} builds its kernels for fixed sizes and {', '.join(dims)} "
                       f"{'is' if len(dims) == 1 else 'are'} symbolic (dynamic shapes): ATen serves every size")
    built = family.problem_for(spec)
    if isinstance(built, str):
        return Refusal("problem", family.name, built)
    # problem_for describes the op; refuse_problem() is the family's word on serving it (render
    # refuses what refuse_problem refuses, so a refused problem must never become a choice)
    why = family.refuse_problem(built)
    return Refusal("problem", family.name, why) if why else built


def config(family: Family, problem: Any, config: Any, target: str) -> Refusal | None:
    """Why the family cannot render ``config`` for ``problem``, or None: a value outside what the
    Config declares (``templates/allowed.py``; the autotune cache would refuse to store the
    winner), or the family's own ``refuse_config``."""
    try:
        registry.config_from_dict(family, registry.config_to_dict(config))
    except allowed.InvalidField as e:
        return Refusal("config", family.name, f"outside its declared values: {e}", config)
    why = family.refuse_config(problem, config, target) if family.refuse_config is not None else None
    return Refusal("config", family.name, why, config) if why else None


def measured(family: Family, problem: Any, config: Any, target: str) -> Refusal | None:
    """Why ``config`` is left unbuilt and untimed (the family's ``refuse_measured``: it measured to
    lose for this problem on this host), or None to time it."""
    why = family.refuse_measured(problem, config, target) if family.refuse_measured is not None else None
    return Refusal("measured", family.name, why, config) if why else None
