"""runtime.register_use: registers and local-memory spills read from SASS and amdgcn (issue 30).
Tier I (tests/test_tier_i_configs.py) asserts no offered config spills; these pin the reading."""

from __future__ import annotations

import pytest

from inductor_ext.runtime.register_use import register_use

SASS = """\
        code for sm_90a
                Function : k
        /*0000*/                   MOV R1, c[0x0][0x28] ;                         /* 0x00000a0000017a02 */
        /*0010*/                   STL.64 [R1+0x10], R4 ;                         /* 0x0000100401007387 */
        /*0020*/                   STL [R1], R2 ;                                 /* 0x0000000201007387 */
        /*0030*/              @!P0 LDL.LU.128 R8, [R1+0x20] ;                     /* 0x0000200001087983 */
        /*0040*/                   IMAD R120, R3, R2, RZ ;                        /* 0x0000000203787224 */
        /*0050*/                   STG.E [R2.64], R120 ;                          /* 0x0000007802007986 */
        /*0060*/                   EXIT ;                                         /* 0x000000000000794d */
"""


def test_sass_local_memory_of_any_width_and_the_highest_register() -> None:
    use = register_use({"ptx": "", "sass": SASS})
    assert (use.spill_stores, use.spill_loads, use.registers, use.spills) == (2, 1, 121, 3)
    clean = register_use({"sass": SASS.replace("STL", "STS").replace("LDL", "LDS")})
    assert clean.spills == 0  # shared-memory traffic is no spill


def _amdgcn(vgpr_spill: int, sgpr_spill: int, scratch: int, code: str = "") -> str:
    return f"""\
k:
\tv_mov_b32 v0, 0
{code}\ts_endpgm
.amdgpu_metadata
---
amdhsa.kernels:
  - .name: k
    .private_segment_fixed_size: {scratch}
    .sgpr_spill_count: {sgpr_spill}
    .vgpr_count:     48
    .vgpr_spill_count: {vgpr_spill}
.end_amdgpu_metadata
"""


def test_amdgcn_spills_are_vgpr_spills_scratch_traffic_and_sgprs_with_scratch() -> None:
    assert register_use({"amdgcn": _amdgcn(0, 0, 0)}).spills == 0
    assert register_use({"amdgcn": _amdgcn(3, 0, 16)}).spills == 3
    lanes = register_use({"amdgcn": _amdgcn(0, 44, 0)})  # SGPRs parked in VGPR lanes: no memory
    assert (lanes.spills, lanes.lane_spills, lanes.registers) == (0, 44, 48)
    assert register_use({"amdgcn": _amdgcn(0, 5, 8)}).spills == 5
    code = "\tscratch_store_dword off, v1, s0\n\tscratch_load_dword v2, off, s0 ; reload\n"
    use = register_use({"amdgcn": _amdgcn(0, 0, 8, code)})
    assert (use.spill_stores, use.spill_loads) == (1, 1)


def test_no_sass_or_amdgcn_says_nothing() -> None:
    assert register_use({"ptx": "st.local.u32 [%rd1], %r1;"}) is None


def test_a_config_measured_spilling_is_refused_with_the_reason() -> None:
    from inductor_ext.templates.triton import gemm, nvfp4_dequant_gemm as dq, nvfp4_gemm as fp4

    fp32 = gemm.GemmProblem(64, 4096, 4096, "float32")
    reason = gemm.refuse_config(fp32, gemm.GemmConfig(64, 128, 128, 8, 4, 2), "sm_90a")
    assert reason and "spills registers to local memory on sm_90a" in reason and "2469" in reason
    assert gemm.refuse_config(gemm.GemmProblem(64, 4096, 4096, "bfloat16"),  # bf16: the same tile fits
                                gemm.GemmConfig(64, 128, 128, 8, 4, 2), "sm_90a") is None
    problem = dq.example_problem(64, 4096, 4096)
    assert "spills" in dq.refuse_config(problem, dq.Nvfp4DequantGemmConfig(64, 128, 128, 1, 4, 3, swap_ab=True),
                                          "sm_90a")
    assert all(dq.refuse_config(problem, c, "sm_90a") is None for c in dq.configs(problem, "sm_90a"))
    small = fp4.example_problem(1, 4096, 4096)
    assert all(fp4.refuse_config(small, c, "sm_100a") is None for c in fp4.configs(small, "sm_100a"))


@pytest.mark.isa
def test_asm_all_configs_prints_registers_and_spills_per_config(capsys, isa_cache, monkeypatch) -> None:
    from inductor_ext.cli import main

    if isa_cache:
        monkeypatch.setenv("INDUCTOR_EXT_ISA_CACHE", isa_cache)
    # a shape of tier I's grid (tests/test_tier_i_configs.py): its kernels are in the ISA cache
    assert main(["asm", "triton.nvfp4_gemm", "--target", "sm_100a", "--shape", "16x4096x4096", "--all-configs"]) == 0
    out = capsys.readouterr().out
    kernels = [line for line in out.splitlines() if line.startswith("ext_nvfp4_gemm")]
    regs = [line for line in out.splitlines() if line.strip().startswith("registers ")]
    assert len(kernels) == len(regs) >= 3, out
    assert all("spill stores 0  spill loads 0" in line for line in regs), out
    assert "block16 x" in out and "swap" in out  # the decode (swap-AB) config is among them
