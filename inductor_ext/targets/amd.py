"""AMD Instinct: gfx950 (MI350/MI355) and gfx1250 (MI450)."""

from __future__ import annotations

from typing import Any

from inductor_ext.targets.base import MX_MMA, TDM, Datasheet, Target, Vendor

GFX950 = Target(
    "gfx950", "amd", "cuda", "AMD MI350/MI355 (CDNA4): v_mfma, scaled MFMA for MXFP4/MXFP8",
    capabilities=frozenset({MX_MMA}),
    triton=("hip", "gfx950", 64), asm_key="amdgcn",
    mma_instruction=r"v_mfma",  # v_mfma_f32_32x32x16_bf16, v_mfma_f32_32x32x2_f32
    datasheet="MI355X", multiprocessors=256,
)
GFX1250 = Target(
    "gfx1250", "amd", "cuda", "AMD MI450 (gfx1250): v_wmma, Tensor Data Mover",
    capabilities=frozenset({MX_MMA, TDM}),
    triton=("hip", "gfx1250", 32), asm_key="amdgcn",
    mma_instruction=r"v_wmma",  # v_wmma_f32_16x16x32_bf16, v_wmma_f32_16x16x4_f32
)

# 7 Infinity Fabric links of 153.6 GB/s bidirectional each.
DATASHEETS = {
    "MI355X": Datasheet("MI355X", {"bf16": 2500e12, "fp16": 2500e12, "fp8": 5000e12, "tf32": 1250e12, "fp32": 157e12},
                        hbm_bandwidth=8.0e12, link_bandwidth=537.6e9, link_latency=1.5e-6, link_efficiency=0.70,
                        source="AMD Instinct MI355X: 2.5 PFLOP/s BF16 dense, HBM3E 8 TB/s, 7x153.6 GB/s Infinity Fabric"),
}

PRESETS = {
    "gfx950": {
        "description": "AMD MI350/MI355 (gfx950): Triton GEMM templates (v_mfma) against hipBLASLt",
        "target": "gfx950",
        "passes": [], "templates": ["triton.gemm"], "autotune": "quick", "pdl": "off", "template_margin": 0.02,
    },
    "gfx1250": {
        "description": "AMD gfx1250: Triton GEMM templates (v_wmma) against hipBLASLt",
        "target": "gfx1250",
        "passes": [], "templates": ["triton.gemm"], "autotune": "quick", "pdl": "off", "template_margin": 0.02,
    },
}


def detect(device: Any) -> tuple[str, str] | None:
    import torch

    if device.type != "cuda" or torch.version.hip is None:
        return None
    props = torch.cuda.get_device_properties(device)
    arch = getattr(props, "gcnArchName", "").split(":")[0]
    if arch in PRESETS:
        return arch, f"{props.name} ({arch})"
    return "aten", f"{props.name} ({arch or 'unknown arch'}) has no ext preset"


VENDOR = Vendor("amd", (GFX950, GFX1250), DATASHEETS, PRESETS, detect, order=20)
