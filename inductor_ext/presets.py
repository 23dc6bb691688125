"""Per-hardware presets: declarative data, resolved into an ExtConfig.

A preset says which passes and template families a target gets, how hard to autotune and
whether to use PDL. Explicit ``options=`` always win over the preset.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch

from inductor_ext.config import ExtConfig, ExtOptionError, validate_options

log = logging.getLogger(__name__)

# Only families and passes that exist and are verified for the target are listed (design.md:
# a template claims a target only after tier I passes for it).
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": {
        "description": "CPU: ATen and Inductor's C++ codegen; Triton templates only in interpret mode",
        "device_type": "cpu", "target": "cpu",
        "passes": ["nvfp4_alpha_fold"], "autotune": "off", "pdl": "off",
        "templates": ["triton.gemm", "triton.nvfp4_gemm", "triton.nvfp4_dequant_gemm"],
        "template_margin": 0.0,
    },
    "hopper": {
        "description": "NVIDIA Hopper (sm_90a): Triton GEMM templates (wgmma) against cuBLAS",
        "device_type": "cuda", "target": "sm_90a",
        "passes": ["nvfp4_alpha_fold"], "templates": ["triton.gemm", "triton.nvfp4_dequant_gemm"], "autotune": "quick", "pdl": "auto",
        "template_margin": 0.02,
    },
    "blackwell": {
        "description": "NVIDIA Blackwell (sm_100/sm_103): Triton and CuTeDSL GEMM templates (tcgen05) against cuBLAS",
        "device_type": "cuda", "target": "sm_100a",
        "passes": ["nvfp4_alpha_fold"], "templates": ["triton.gemm", "triton.nvfp4_gemm", "cutedsl.nvfp4_gemm"], "autotune": "quick", "pdl": "auto",
        "template_margin": 0.02,
    },
    "gfx950": {
        "description": "AMD MI350/MI355 (gfx950): Triton GEMM templates (v_mfma) against hipBLASLt",
        "device_type": "cuda", "target": "gfx950",
        "passes": [], "templates": ["triton.gemm"], "autotune": "quick", "pdl": "off",
        "template_margin": 0.02,
    },
    "gfx1250": {
        "description": "AMD gfx1250: Triton GEMM templates (v_wmma) against hipBLASLt",
        "device_type": "cuda", "target": "gfx1250",
        "passes": [], "templates": ["triton.gemm"], "autotune": "quick", "pdl": "off",
        "template_margin": 0.02,
    },
    "mps": {
        "description": "Apple MPS: ATen and Inductor's Metal codegen (no ext templates verified yet)",
        "device_type": "mps", "target": "mps",
        "passes": [], "templates": [], "autotune": "off", "pdl": "off",
        "template_margin": 0.0,
    },
    "xpu": {
        "description": "Intel XPU: ATen and Inductor's XPU codegen (no ext templates verified yet)",
        "device_type": "xpu", "target": "xpu",
        "passes": [], "templates": [], "autotune": "off", "pdl": "off",
        "template_margin": 0.0,
    },
    "aten": {
        "description": "any other device: plain Inductor with ATen GEMMs, ext dumps only",
        "device_type": "any", "target": "none",
        "passes": [], "templates": [], "autotune": "off", "pdl": "off",
        "template_margin": 0.0,
    },
}

_PRESET_KEYS = ("passes", "templates", "autotune", "pdl", "template_margin")


def detect_preset(example_inputs: Sequence[Any]) -> str:
    """The preset for the device of the first tensor among ``example_inputs``."""
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
    return preset_for_device(device)


def preset_for_device(device: torch.device) -> str:
    if device.type == "cpu":
        return "cpu"
    if device.type in ("mps", "xpu"):
        return device.type
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        if torch.version.hip is not None:
            arch = getattr(props, "gcnArchName", "").split(":")[0]
            if arch in ("gfx950", "gfx1250"):
                return arch
        elif props.major == 9:
            return "hopper"
        elif props.major == 10:
            return "blackwell"
        log.info("ext: no preset for %s (%s); using 'aten'", device, props.name)
        return "aten"
    log.info("ext: no preset for device type %r; using 'aten'", device.type)
    return "aten"


def resolve(options: dict[str, Any] | None = None, example_inputs: Sequence[Any] = (),
            preset: str | None = None) -> ExtConfig:
    """Preset data overlaid with explicit options (validated): the config for one compile."""
    opts = validate_options(options)
    name = opts.pop("preset", None) or preset or "auto"
    if name == "auto":
        name = detect_preset(example_inputs)
    if name not in PRESETS:
        raise ExtOptionError(f"unknown preset {name!r}; valid presets: auto, {', '.join(PRESETS)}")
    data = PRESETS[name]
    fields = {k: data[k] for k in _PRESET_KEYS}
    fields.update(opts)  # explicit options always win
    fields["passes"] = tuple(fields["passes"])
    fields["templates"] = tuple(fields["templates"])
    _check_known(fields, name, data["target"])
    return ExtConfig(preset=name, device_type=data["device_type"], target=data["target"], **fields)


def _check_known(fields: dict[str, Any], preset: str, target: str) -> None:
    from inductor_ext.lowering.pass_manager import available_passes
    from inductor_ext.lowering.ext_choices import available_templates

    for kind, names, valid in (("pass", fields["passes"], available_passes()),
                               ("template family", fields["templates"], available_templates())):
        for n in names:
            if n not in valid:
                raise ExtOptionError(f"unknown {kind} {n!r}; available: {', '.join(sorted(valid)) or 'none'}")
    if fields["pdl"] == "force" and not target.startswith("sm_"):
        raise ExtOptionError(f"pdl='force' needs an NVIDIA target (sm_90a or newer); preset {preset!r} "
                             f"targets {target!r}. Use pdl='off' or 'auto' there.")
    force = fields.get("force_template")
    if force is not None and force not in fields["templates"]:
        raise ExtOptionError(f"force_template={force!r} is not among the enabled templates {list(fields['templates'])}")


def describe(name: str) -> dict[str, Any]:
    """One preset, resolved (what ``inductor-ext presets show NAME`` prints)."""
    cfg = resolve({"preset": name})
    return {"description": PRESETS[name]["description"], **{f: getattr(cfg, f) for f in
            ("preset", "device_type", "target", "passes", "templates", "autotune", "pdl", "template_margin")},
            "inductor_patches": {k: _show(v) for k, v in sorted(cfg.inductor_patches().items())}}


def _show(value: Any) -> Any:
    if callable(value) or hasattr(value, "uuid"):
        return f"<{type(value).__name__}>"
    return value
