"""NVIDIA: Hopper (sm_90a) and Blackwell (sm_100a)."""

from __future__ import annotations

from typing import Any

from inductor_ext.targets.base import NVFP4_MMA, NVMMH, PDL, TF32, Datasheet, Target, Vendor

SM_90A = Target(
    "sm_90a", "nvidia", "cuda", "NVIDIA Hopper (H100/H200): wgmma, TMA",
    capabilities=frozenset({PDL, TF32, NVMMH}),
    triton=("cuda", 90, 32), asm_key="ptx",
    # wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16; SASS HGMMA.64x128x16.F32.BF16
    mma_instruction=r"wgmma\.mma_async", sass_mma_instruction=r"\bHGMMA\.",
    datasheet="H200", nvmmh_gpu="H200_SXM", multiprocessors=132,
)
SM_100A = Target(
    "sm_100a", "nvidia", "cuda", "NVIDIA Blackwell (B200/B300): tcgen05, block-scaled NVFP4",
    capabilities=frozenset({PDL, TF32, NVFP4_MMA, NVMMH}),
    triton=("cuda", 100, 32), asm_key="ptx",
    # tcgen05.mma.cta_group::1.kind::f16 / kind::tf32; SASS UTCHMMA (all kinds)
    mma_instruction=r"tcgen05\.mma", sass_mma_instruction=r"\bUTC\w*MMA\b",
    datasheet="B200", nvmmh_gpu="B200", multiprocessors=148,
)

# Vendor datasheet figures (SXM parts, dense). Link bandwidth is per GPU and per direction:
# NVLink 4 = 900 GB/s bidirectional, NVLink 5 = 1.8 TB/s bidirectional.
DATASHEETS = {
    "H100": Datasheet("H100", {"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "tf32": 495e12, "fp32": 67e12},
                      hbm_bandwidth=3.35e12, link_bandwidth=450e9, link_latency=1.0e-6,
                      source="NVIDIA H100 SXM5 datasheet: 989 TFLOP/s BF16 dense, HBM3 3.35 TB/s, NVLink 900 GB/s"),
    "H200": Datasheet("H200", {"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "tf32": 495e12, "fp32": 67e12},
                      hbm_bandwidth=4.8e12, link_bandwidth=450e9, link_latency=1.0e-6,
                      source="NVIDIA H200 SXM datasheet: 989 TFLOP/s BF16 dense, HBM3e 4.8 TB/s, NVLink 900 GB/s"),
    "B200": Datasheet("B200", {"bf16": 2250e12, "fp16": 2250e12, "fp8": 4500e12, "tf32": 1100e12, "fp32": 75e12},
                      hbm_bandwidth=8.0e12, link_bandwidth=900e9, link_latency=1.0e-6,
                      source="NVIDIA HGX B200: 2.25 PFLOP/s BF16 dense, HBM3e 8 TB/s, NVLink 5 1.8 TB/s"),
}

PRESETS = {
    "hopper": {
        "description": "NVIDIA Hopper (sm_90a): Triton GEMM templates (wgmma) against cuBLAS",
        "target": "sm_90a",
        "passes": ["nvfp4_alpha_fold"], "templates": ["triton.gemm", "triton.nvfp4_dequant_gemm"],
        "autotune": "quick", "pdl": "auto", "template_margin": 0.02,
    },
    "blackwell": {
        "description": "NVIDIA Blackwell (sm_100/sm_103): Triton and CuTeDSL GEMM templates (tcgen05) against cuBLAS",
        "target": "sm_100a",
        "passes": ["nvfp4_alpha_fold"], "templates": ["triton.gemm", "triton.nvfp4_gemm", "cutedsl.nvfp4_gemm"],
        "autotune": "quick", "pdl": "auto", "template_margin": 0.02,
    },
}

# Compute capability major -> preset. sm_103 (B300) runs sm_100a code; sm_120 (RTX 50) has no
# tcgen05 and sm_8x no wgmma: neither gets a preset.
_PRESET_BY_MAJOR = {9: "hopper", 10: "blackwell"}


def detect(device: Any) -> tuple[str, str] | None:
    import torch

    if device.type != "cuda" or torch.version.hip is not None:
        return None
    props = torch.cuda.get_device_properties(device)
    arch = f"sm_{props.major}{props.minor}"
    preset = _PRESET_BY_MAJOR.get(props.major)
    if preset is None:
        return "aten", f"{props.name} ({arch}) has no ext preset"
    return preset, f"{props.name} ({arch})"


VENDOR = Vendor("nvidia", (SM_90A, SM_100A), DATASHEETS, PRESETS, detect, order=10)
