"""triton.gemm decode on tensor cores (issue 30): swap-AB configs compute C^T = B^T A^T so a decode
M of 1..16 sits on the MMA's N side and N on its 64+-row M side.

- policy: for decode shapes on sm_90a / sm_100a the offered configs include swap-AB tiles that
  claim the target's MMA (wgmma / tcgen05.mma); tier I (tests/test_tier_i_configs.py, M in
  1, 2, 4, 8, 16) compiles every offered config and asserts those instructions and no spills.
- C interpreter: a swap-AB kernel gives the reference numbers for every M in 1..16 (masked N and
  K tails included).
"""

from __future__ import annotations

import os
import sys

if "triton" not in sys.modules:  # must precede every import of triton (see test_gemm_template.py)
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from inductor_ext import targets  # noqa: E402
from inductor_ext.autotune import policy  # noqa: E402
from inductor_ext.kernels.matmul import mm_reference  # noqa: E402
from inductor_ext.runtime.triton_interp import interpreter_fixes  # noqa: E402
from inductor_ext.templates.triton import gemm  # noqa: E402


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("m", [1, 2, 4, 8, 16])
def test_decode_offers_swap_ab_tiles_on_the_targets_mma(target: str, m: int) -> None:
    problem = gemm.GemmProblem(m, 4096, 4096, "bfloat16")
    offered = [c.config for c in policy.candidates(gemm.FAMILY, problem, target, "full")
               if not gemm.refuse_config(problem, c.config, target)]
    swapped = [c for c in offered if c.swap_ab]
    assert swapped, [c.name() for c in offered]
    mma = targets.get(target).mma_instruction
    for config in swapped:
        assert gemm.key_instructions(problem, config, target) == [("ptx", mma)], config.name()
    # the plain BLOCK_M 16 tiles that remain say what they run
    for config in offered:
        if not config.swap_ab and config.block_m < gemm.TC_MIN_BLOCK_M:
            assert "mma" in gemm.key_instructions(problem, config, target)[0][1] and "sync" in \
                gemm.key_instructions(problem, config, target)[0][1]


@pytest.fixture(scope="module")
def operands() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {"a": torch.randn(16, 80, generator=gen), "b": torch.randn(80, 96, generator=gen)}


@pytest.mark.interp
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_swap_ab_gives_the_reference_for_every_decode_m(operands, dtype: torch.dtype) -> None:
    config = gemm.GemmConfig(16, 64, 32, 1, 4, 1, swap_ab=True)  # N = 96 and K = 80: masked tails
    with interpreter_fixes():  # stock 3.9's interpreter multiplies bf16 bit patterns in tl.dot
        _check_every_m(operands, dtype, config)


def _check_every_m(operands: dict[str, torch.Tensor], dtype: torch.dtype, config: gemm.GemmConfig) -> None:
    for m in range(1, 17):
        a, b = operands["a"][:m].to(dtype), operands["b"].to(dtype)
        got = gemm.run(a, b, config, target="cpu")
        want = mm_reference(a.double(), b.double())
        tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
        err = ((got.double() - want).abs().max() / want.abs().max()).item()
        assert got.shape == (m, 96) and err < tol, (m, err)


def test_render_picks_the_swapped_body_only_for_swap_configs() -> None:
    problem = gemm.GemmProblem(8, 256, 256, "bfloat16")
    plain = gemm.render(problem, gemm.GemmConfig(16, 64, 64, 8, 4, 3), "sm_90a").source
    swap = gemm.render(problem, gemm.GemmConfig(16, 64, 64, 8, 4, 3, swap_ab=True), "sm_90a").source
    assert "acc_t" not in plain and "tl.dot(tl.trans(b), tl.trans(a), acc_t" in swap
    assert "_swap" in gemm.kernel_name(problem, gemm.GemmConfig(16, 64, 64, swap_ab=True))
