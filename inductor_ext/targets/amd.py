"""AMD Instinct: gfx950 (MI350/MI355) and gfx1250 (MI450)."""

from __future__ import annotations

from typing import Any

from inductor_ext.targets.base import MX_MMA, TDM, Datasheet, Target, Vendor

# The assembly stage an AMD compile's final ISA is stored under (runtime.flydsl, runtime.triton_compile).
ASM_STAGE = "amdgcn"

GFX950 = Target(
    "gfx950", "amd", "cuda", "AMD MI350/MI355 (CDNA4): v_mfma, scaled MFMA for MXFP4/MXFP8",
    capabilities=frozenset({MX_MMA}),
    triton=("hip", "gfx950", 64), asm_key=ASM_STAGE,
    mma_instruction=r"v_mfma",  # v_mfma_f32_32x32x16_bf16, v_mfma_f32_32x32x2_f32
    datasheet="MI355X", multiprocessors=256,
)
GFX1250 = Target(
    "gfx1250", "amd", "cuda", "AMD MI450 (gfx1250): v_wmma, Tensor Data Mover",
    capabilities=frozenset({MX_MMA, TDM}),
    triton=("hip", "gfx1250", 32), asm_key=ASM_STAGE,
    mma_instruction=r"v_wmma",  # v_wmma_f32_16x16x32_bf16, v_wmma_f32_16x16x4_f32
)

# Instruction names as each target's assembler prints them (gfx950 is CDNA-style, gfx1250 gfx12-style),
# measured from FlyDSL 0.5 / Triton 3.9 compiles here. Regexes for the tier I gates.
INSTRUCTIONS: dict[str, dict[str, str]] = {
    "gfx950": {
        "mfma_bf16": r"v_mfma_f32_16x16x32_bf16", "mfma_f16": r"v_mfma_f32_16x16x32_f16",
        "mfma_mx": r"v_mfma_scale_f32_16x16x128_f8f6f4",  # MXFP4 (cbsz:4 blgp:4) and MXFP8
        "global_load_16b": r"buffer_load_dwordx4", "global_load_2b": r"buffer_load_(ushort|short|u16)",
        "global_load_1b": r"buffer_load_ubyte", "lds_read_16b": r"ds_read_b128",
        "store_2b": r"buffer_store_short", "store_4b": r"buffer_store_dword\b", "barrier": r"s_barrier",
        "cross_lane": r"ds_swizzle_b32", "exp": r"v_exp_f32", "rcp": r"v_rcp_f32", "sqrt": r"v_(sqrt|rsq)_f32",
        "max": r"v_max(imum3)?_f32",
        # triton.topk's int64 sort keys: 64-bit compares, lanes exchanged by DPP moves and (past 16 lanes)
        # permlane swaps, int64 indices out
        "cmp_i64": r"v_cmp_gt_i64", "dpp": r"v_mov_b32_dpp", "permlane_swap": r"v_permlane(16|32)_swap_b32",
        "store_8b": r"buffer_store_dwordx2",
    },
    "gfx1250": {
        "wmma_bf16": r"v_wmma_f32_16x16x32_bf16", "wmma_f16": r"v_wmma_f32_16x16x32_f16",
        "wmma_fp8": r"v_wmma_f32_16x16x128_fp8_fp8", "wmma_mx": r"v_wmma_scale_f32_16x16x128_f8f6f4",
        "tdm_load": r"tensor_load_to_lds", "tdm_store": r"tensor_store_from_lds", "tdm_wait": r"s_wait_tensorcnt",
        "global_load_16b": r"buffer_load_b128", "global_load_2b": r"buffer_load_(u16|b16)",
        "lds_read_16b": r"ds_load_b128", "store_2b": r"buffer_store_b16", "store_4b": r"buffer_store_b32",
        "barrier": r"s_barrier",
    },
}



def key_instructions(facts: dict[str, tuple[str, ...]]) -> dict[str, list[tuple[str, str]]]:
    """A family's ``KEY_INSTRUCTIONS`` (``templates/family.py``) from keys of :data:`INSTRUCTIONS`
    per target: ``{"gfx950": ("mfma_bf16", ...)}`` -> ``{"gfx950": [("amdgcn", r"v_mfma_...")]}``.
    What its tier I tests assert and ``inductor-ext asm`` shows."""
    unknown = [(t, f) for t, names in facts.items() for f in names if f not in INSTRUCTIONS.get(t, {})]
    if unknown:
        raise KeyError(f"no instruction fact {unknown[0][1]!r} for {unknown[0][0]}; known: "
                       f"{', '.join(INSTRUCTIONS.get(unknown[0][0], {}))}")
    return {t: [(ASM_STAGE, INSTRUCTIONS[t][f]) for f in names] for t, names in facts.items()}


# Inductor's own Tensor Data Mover codegen on gfx1250 (torch 2.15), switched on for the gfx1250 preset.
# Inductor turns a load or store of a pointwise/reduction kernel into a tensor descriptor
# (``tensor_load_to_lds`` / ``tensor_store_from_lds``) only when it pays and is legal, by its own
# per-access rules: fp16/bf16/fp32 (``_TDM_SUPPORTED_DTYPES``; fp8 and int stay per-lane loads), unit
# innermost stride, an innermost block of at least 16 bytes (Inductor raises XBLOCK/R0_BLOCK to reach
# it), 16-byte aligned base and outer strides, no indirect indexing or extra masks, int32 indices, rank
# 1-5. FlexAttention forward/decode take TDM for Q/K/V when a block row is 128-byte aligned (Inductor's
# direct-path rule: fp16/bf16 head_dim >= 64; fp32 >= 32) and the operands meet the same alignment;
# ``enable_flex_tdm`` is Inductor's default, pinned here so a user's global kill switch is explicit.
# Descriptors need 16-byte aligned inputs: ``assume_aligned_inputs`` makes Inductor assume it and clone
# the (rare) misaligned input first. Inductor still requires a live ROCm >= 7.14 gfx1250 device before
# any of this applies: on any other device these patches change nothing.
# Where it pays (why ext adds no threshold of its own): a TDM tile is one scalar request per operand and
# wave group instead of one vector load per lane, issued ahead and waited on with s_wait_tensorcnt, so it
# pays where loads can run ahead of the math: looped reductions (Inductor pipelines R0_BLOCK loads,
# num_stages=2: 16 tensor_load_to_lds in the softmax kernel of tests/test_gfx1250_inductor_tdm.py) and
# FlexAttention's K/V blocks (5 tensor loads replace 24 per-lane buffer loads; the v_wmma work is the
# same). A flat pointwise kernel gains least: its tile goes HBM -> LDS -> VGPR (ds_load) instead of
# HBM -> VGPR, traded against fewer address instructions; Inductor admits it anyway, and
# bench/gfx1250_inductor_tdm.py is the MI450 measurement that decides whether ext should turn it off there.
INDUCTOR_TDM: dict[str, Any] = {
    "triton.use_tensor_descriptor": True, "assume_aligned_inputs": True, "triton.enable_flex_tdm": True,
}

# 7 Infinity Fabric links of 153.6 GB/s bidirectional each.
DATASHEETS = {
    "MI355X": Datasheet("MI355X", {"bf16": 2500e12, "fp16": 2500e12, "fp8": 5000e12, "tf32": 1250e12, "fp32": 157e12},
                        hbm_bandwidth=8.0e12, link_bandwidth=537.6e9, link_latency=1.5e-6, link_efficiency=0.70,
                        source="AMD Instinct MI355X: 2.5 PFLOP/s BF16 dense, HBM3E 8 TB/s, 7x153.6 GB/s Infinity Fabric"),
}

PRESETS = {
    "gfx950": {
        "description": "AMD MI350/MI355 (gfx950): Triton and FlyDSL GEMMs (v_mfma), FlyDSL ragged grouped GEMM and "
                       "MXFP8/MXFP4 scaled GEMM (scaled MFMA), Helion RMSNorm/softmax, Triton top-k, each against ATen",
        "target": "gfx950",
        # RMSNorm and top-k stay one op each, so helion.rmsnorm and triton.topk are offered for them
        "passes": ["rms_norm_op", "topk_op"],
        "templates": ["triton.gemm", "flydsl.gemm", "flydsl.grouped_mm", "flydsl.mx_scaled_mm", "helion.rmsnorm",
                      "helion.softmax", "triton.topk"],
        "autotune": "quick", "pdl": "off", "template_margin": 0.02,
    },
    "gfx1250": {
        "description": "AMD MI450 (gfx1250): Triton and FlyDSL GEMMs fed by the Tensor Data Mover, Triton and FlyDSL "
                       "GEMMs (v_wmma, fp8 included), FlyDSL ragged grouped GEMM, each against ATen; Inductor's "
                       "TDM descriptors in pointwise/reduction kernels and FlexAttention forward/decode",
        "target": "gfx1250",
        "passes": [],
        "templates": ["triton.gemm", "triton.tdm_gemm", "flydsl.tdm_gemm", "flydsl.gemm", "flydsl.grouped_mm"],
        "autotune": "quick", "pdl": "off", "template_margin": 0.02,
        "inductor": INDUCTOR_TDM,
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
