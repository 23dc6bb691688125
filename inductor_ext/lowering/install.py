"""What one ``backend="ext"`` compile installs into Inductor: its config patches (forward and
backward alike, through ``compile_fx(..., config_patches=...)``), from an ExtConfig.

- ext's choices handler (its uuid keys Inductor's FX graph cache);
- the graph passes, one slot per stage (``lowering/passes``);
- with templates and autotuning, Inductor's own GEMM templates stay out, so ext's policies
  decide the candidates and ext's margin rule the winner;
- on the CPU with autotuning, Inductor's local timing cache off (ext's cache holds decisions);
- ``pdl="force"`` on targets with programmatic dependent launch;
- ``freezing``: Inductor's freezing (it applies to graphs compiled under ``torch.no_grad()``), and
  with ext's templates, Inductor's own mkldnn weight packing off so that the linears stay the
  mm/addmm that ext's choices serve (ext's C++ GEMM family packs constant weights itself; the
  backend also keeps Inductor's packing patterns off the linears, ``linear_packing.py``, since
  the config alone does not once the process has registered them);
- ``interpret=True`` on a Triton target: Inductor's Triton codegen for CPU tensors (their kernels
  then run in Triton's interpreter); targets with a device codegen (Metal, SYCL) bring their own
  executor instead (``codegen/``); on the CPU preset it changes nothing (its kernels are native);
- the user's explicit ``options={"inductor": {...}}`` last, so they win, except in the pass slots.

ext composes with what the user already set. Every pass slot ext fills (pre/post-grad, joint)
holds the user's own passes first, from ``options={"inductor": {...}}`` or else
``torch._inductor.config`` as it is when the compile starts (a global setting or a
``config.patch(...)`` context), then ext's stage group: Inductor 2.15 runs a slot's list in order
and keys its FX graph cache on every pass's uuid (a user pass without one makes it bypass the
cache, as it would without ext). Every other setting of the user's context stays as it is unless
ext patches the same key (the choices handler, the GEMM backends when ext offers templates, PDL
and interpret settings, freezing).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import get_custom_graph_passes

from inductor_ext import targets
from inductor_ext.config import ExtConfig
from inductor_ext.lowering import (
    background_cache_writes,
    candidate_batches,
    cold_timing,
    early_kernel_builds,
    jinja_templates,
    kernel_batches,
    linear_packing,
    ops,
    parsed_index_exprs,
    vec_isa_record,
)
from inductor_ext.lowering.ext_choices import cache_for, choices_factory
from inductor_ext.lowering.passes import StagePasses, pass_patches


def uses_triton_interpreter(config: ExtConfig, device_codegen: bool = False) -> bool:
    """Whether interpret mode runs this config's kernels in Triton's interpreter: yes unless one
    of ext's device codegens (Metal, SYCL) generates them (``device_codegen``, the backend's
    answer for this config), or the preset is the CPU's own (its C++ kernels run natively)."""
    return config.interpret and not device_codegen and config.device_type != "cpu"


def autotunes_cpu_kernels(config: ExtConfig) -> bool:
    """Whether this config autotunes C++ kernels for CPU tensors: ext's cache is in use, and CPU
    choices are timed flushed and warm (``cold_timing``) rather than by Inductor's timing cache."""
    return config.autotune != "off" and config.device_type == "cpu"


def adds_to_inductors_gemms(config: ExtConfig, mode_patches: dict[str, Any]) -> bool:
    """Whether Inductor's own GEMM candidates stay beside ext's: when the user asked Inductor to
    autotune GEMMs (``mode="max-autotune"``, ``max_autotune``/``max_autotune_gemm`` in options or
    config) on a GPU preset, its backends (``ATEN,TRITON`` or what the user set) are kept and ext's
    templates are added to them. On the cpu preset ext's C++ family is Inductor's CPP template with
    Inductor's own pick among its configs (lowering/cpp_gemm.py), so ATen plus ext's is the same set."""
    if config.device_type == "cpu":
        return False
    settings = {**mode_patches, **config.inductor}
    return bool(settings.get("max_autotune", inductor_config.max_autotune)
                or settings.get("max_autotune_gemm", inductor_config.max_autotune_gemm))


def interpret_patches() -> dict[str, Any]:
    """Inductor config for running Triton kernels on CPU tensors (in Triton's interpreter)."""
    return {"cpu_backend": "triton"}


def inductor_patches(config: ExtConfig, device_codegen: bool = False,
                     mode_patches: dict[str, Any] | None = None) -> dict[str, Any]:
    """The torch._inductor.config patches for compile_fx (``device_codegen``: one of ext's
    device codegens generates this compile's kernels; ``mode_patches``: the Inductor mode's)."""
    ops.load()  # every op module's lowering is registered before Inductor lowers the graph
    patches: dict[str, Any] = {}
    if config.autotune != "off" and config.templates:
        # ExtChoices offers our templates from Inductor's GEMM lowerings whether or not
        # max-autotune is on (turning it on costs compile time for nothing). Inductor's own
        # Triton GEMM templates stay out unless the user asked Inductor to autotune GEMMs (then
        # ext's are added to them), and winners go through ExtChoices.override_best_choice
        # (ATen margin), not fusion benchmarks.
        patches["benchmark_template_fusion"] = False
        if not adds_to_inductors_gemms(config, mode_patches or {}):
            patches["max_autotune_gemm_backends"] = "ATEN"
    if autotunes_cpu_kernels(config):
        # ext times CPU choices flushed and warm (cold_timing.py) and caches decisions itself;
        # Inductor's timing cache would hand back timings from another regime (max-autotune's
        # warm ones) and skip the warm timing ext's rule needs
        patches["autotune_local_cache"] = False
    if config.freezing:
        patches["freezing"] = True
        if config.autotune != "off" and config.templates:
            patches["cpp.weight_prepack"] = False
    if config.pdl == "force" and targets.has(config.target, targets.PDL):
        # Inductor's Triton kernels then wait (gdc_wait) right before their first load of
        # the previous kernel's output; ext's templates release them early (USE_PDL).
        patches["triton.enable_pdl"] = True
    if uses_triton_interpreter(config, device_codegen):
        patches.update(interpret_patches())
    patches["inductor_choices_class"] = choices_factory(config)
    ext_slots = pass_patches(config)
    patches.update(config.inductor)  # explicit Inductor patches win...
    for slot, ext_group in ext_slots.items():  # ...but chain with ext's passes, theirs first
        user = config.inductor[slot] if slot in config.inductor else getattr(inductor_config, slot)
        # an outer ext compile's group (a nested compile under its patches) is not the user's
        user_passes = [p for p in get_custom_graph_passes(user) if not isinstance(p, StagePasses)]
        patches[slot] = [*user_passes, ext_group] if user_passes else ext_group
    return patches


def ask_isas_ahead(config: ExtConfig) -> None:
    """At the backend's entry: where this config will need Inductor's vector-ISA probe, its test
    builds start now, beside AOTAutograd's tracing and freezing (``vec_isa_record.ask_ahead``)."""
    if autotunes_cpu_kernels(config):
        vec_isa_record.ask_ahead(cache_for(config))


@contextlib.contextmanager
def compile_context(config: ExtConfig) -> Iterator[None]:
    """What one graph's compile (forward, backward or inference: ``compile_fx_inner``) runs
    inside besides the config patches: kernel templates rendered from compiled sources and their
    index expressions parsed once, C++ kernels built from the moment each is generated and a few
    to a compiler run, its FX graph cache entry written beside the compile, and where this config
    autotunes C++ kernels for CPU tensors, the vector ISA probe's outcome reused from ext's cache
    and GEMMs timed as a decode step runs them (flushed, and warm)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(jinja_templates.compiled_once())
        stack.enter_context(parsed_index_exprs.parsed_once())
        stack.enter_context(early_kernel_builds.started_as_generated())
        stack.enter_context(kernel_batches.served_in_batches())
        stack.enter_context(candidate_batches.served_from_batches())
        stack.enter_context(background_cache_writes.written_in_background())
        if autotunes_cpu_kernels(config):
            stack.enter_context(vec_isa_record.reused(cache_for(config)))
            stack.enter_context(cold_timing.cold_cpu_benchmarks())
        yield


def freezing_context(patches: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
    """What the whole compile (``compile_fx``, under ``patches``) runs inside: with freezing and
    Inductor's weight prepacking off, Inductor's packing patterns kept off the linears so that
    ext's C++ GEMM family serves them (entered before ``compile_fx`` applies the patches: Inductor
    registers its patterns once, under the config of the process's first freezing compile, which
    must be the user's)."""
    if patches.get("freezing") and patches.get("cpp.weight_prepack") is False:
        return linear_packing.linears_left_as_mm()
    return contextlib.nullcontext()
