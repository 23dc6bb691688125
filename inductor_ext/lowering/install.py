"""What one ``backend="ext"`` compile installs into Inductor: its config patches (forward and
backward alike, through ``compile_fx(..., config_patches=...)``), from an ExtConfig.

- ext's choices handler (its uuid keys Inductor's FX graph cache);
- the graph passes, one slot per stage (``lowering/passes``);
- with templates and autotuning, Inductor's own GEMM templates stay out, so ext's policies
  decide the candidates and ext's margin rule the winner;
- ``pdl="force"`` on targets with programmatic dependent launch;
- ``freezing``: Inductor's freezing (it applies to graphs compiled under ``torch.no_grad()``), and
  with ext's templates, Inductor's own mkldnn weight packing off so that the linears stay the
  mm/addmm that ext's choices serve (ext's C++ GEMM family packs constant weights itself);
- ``interpret=True`` on a Triton target: Inductor's Triton codegen for CPU tensors (their kernels
  then run in Triton's interpreter); targets with a device codegen (Metal, SYCL) bring their own
  executor instead (``codegen/``); on the CPU target it changes nothing (its kernels are native);
- the user's explicit ``options={"inductor": {...}}`` last, so they win.
"""

from __future__ import annotations

from typing import Any

from inductor_ext import targets
from inductor_ext.config import ExtConfig
from inductor_ext.lowering.ext_choices import choices_factory
from inductor_ext.lowering.passes import pass_patches


def uses_triton_interpreter(config: ExtConfig) -> bool:
    """Whether interpret mode runs this config's kernels in Triton's interpreter (Triton targets
    without a device codegen of ext's)."""
    target = targets.get(config.target)
    return config.interpret and target.codegen is None and target.compiles_with_triton


def interpret_patches() -> dict[str, Any]:
    """Inductor config for running Triton kernels on CPU tensors (in Triton's interpreter)."""
    return {"cpu_backend": "triton"}


def inductor_patches(config: ExtConfig) -> dict[str, Any]:
    """The torch._inductor.config patches for compile_fx."""
    patches: dict[str, Any] = {}
    if config.autotune != "off" and config.templates:
        # ExtChoices offers our templates from Inductor's GEMM lowerings whether or not
        # max-autotune is on (turning it on costs compile time for nothing). Inductor's own
        # Triton GEMM templates stay out so ext's policy decides the candidates, and winners
        # go through ExtChoices.override_best_choice (ATen margin), not fusion benchmarks.
        patches.update(max_autotune_gemm_backends="ATEN", benchmark_template_fusion=False)
    if config.freezing:
        patches["freezing"] = True
        if config.autotune != "off" and config.templates:
            patches["cpp.weight_prepack"] = False
    if config.pdl == "force" and targets.has(config.target, targets.PDL):
        # Inductor's Triton kernels then wait (gdc_wait) right before their first load of
        # the previous kernel's output; ext's templates release them early (USE_PDL).
        patches["triton.enable_pdl"] = True
    if uses_triton_interpreter(config):
        patches.update(interpret_patches())
    patches["inductor_choices_class"] = choices_factory(config)
    patches.update(pass_patches(config))
    patches.update(config.inductor)  # explicit Inductor patches win
    return patches
