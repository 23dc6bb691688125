"""The decode policy's mma.sync rule (autotune/decode_mma_model.py, decode_policy rule 9): on
sm_90a / sm_100a a plain BLOCK_M < 64 tile (mma.sync) is offered for triton.gemm only where the
model puts it level with its swap-AB twin (wgmma / tcgen05.mma). No kernels run."""

from __future__ import annotations

import dataclasses
import re

import pytest

from inductor_ext.autotune import decode_mma_model
from inductor_ext.autotune.decode_policy import DecodePolicy, decode_tiles, sm_count
from inductor_ext.templates.base import Tile
from inductor_ext.templates.triton import gemm
from inductor_ext.templates.triton.gemm import GemmProblem

SHAPES = [(m, n, k) for m in (1, 8, 16) for n, k in ((4096, 4096), (4096, 14336), (14336, 4096))]

# (target, N) -> the plain BLOCK_N the model keeps beside the swap-AB tiles for M = 1..16
# (K cancels out: bytes and FLOPs per CTA both scale with it). At N = 4096 a 16x128 tile gives
# 32 CTAs, each with a large share of HBM: on sm_100a its MMA time at mma.sync's rate (a quarter
# of tcgen05's) passes its memory time; at 16x64 (64 CTAs) or N = 14336 (112 CTAs) it does not.
KEPT = {("sm_90a", 4096): {128, 64}, ("sm_90a", 14336): {128, 64},
        ("sm_100a", 4096): {64}, ("sm_100a", 14336): {128, 64}}


def _offered(problem: GemmProblem, target: str) -> list:
    return DecodePolicy().propose(gemm.FAMILY, problem, target)


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_mma_sync_tiles_only_where_the_model_says_they_tie(target, m, n, k):
    problem = GemmProblem(m, n, k, "bfloat16")
    offered = _offered(problem, target)
    plain = {c.block_n for c in offered if not c.swap_ab}
    assert plain == KEPT[target, n], (target, m, n, k, offered)
    assert {c.block_n for c in offered if c.swap_ab} == {128, 64}  # the tensor-core tiles always stay
    sms = sm_count(target)
    for tile in decode_tiles(problem, target):
        if not decode_mma_model.runs_on_mma_sync(tile, target) or tile.split_k > 1:
            continue
        args = (tile, m, n, k, target, sms, 2.0, 2.0)
        sync, wide = (decode_mma_model.cta_seconds(*args, mma_sync=s) for s in (True, False))
        assert sync >= wide  # mma.sync never beats its twin in this model
        assert (gemm.config_from_tile(tile) in offered) == (sync == wide), (tile, sync, wide)


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_offered_configs_claim_the_instruction_they_run(target):
    """key_instructions: mma.sync for the plain tiles kept, the wide MMA for the swap-AB ones."""
    wide = {"sm_90a": r"wgmma\.mma_async", "sm_100a": r"tcgen05\.mma"}[target]
    for m, n, k in SHAPES:
        problem = GemmProblem(m, n, k, "bfloat16")
        for config in _offered(problem, target):
            (stage, pattern), = gemm.key_instructions(problem, config, target)
            assert stage == "ptx"
            assert pattern == (wide if config.swap_ab else r"mma\.sync\.aligned\.m16n8k\d+"), config
            assert re.match(pattern, "mma.sync.aligned.m16n8k16" if not config.swap_ab else
                            {"sm_90a": "wgmma.mma_async", "sm_100a": "tcgen05.mma"}[target])


def test_the_fraction_decides(monkeypatch):
    """The rule can go both ways: mma.sync at the wide MMA's rate ties everywhere (all kept); at
    a hundredth of it loses everywhere (all dropped)."""
    problem = GemmProblem(8, 4096, 4096, "bfloat16")
    monkeypatch.setitem(decode_mma_model.MMA_SYNC_FRACTION, "sm_100a", 1.0)
    assert {c.block_n for c in _offered(problem, "sm_100a") if not c.swap_ab} == {128, 64}
    monkeypatch.setitem(decode_mma_model.MMA_SYNC_FRACTION, "sm_100a", 0.01)
    assert not [c for c in _offered(problem, "sm_100a") if not c.swap_ab]


def test_plain_tiles_stay_where_the_model_does_not_apply():
    problem = GemmProblem(8, 4096, 4096, "bfloat16")
    plain = Tile(16, 128, 256, num_warps=4)
    assert not decode_mma_model.runs_on_mma_sync(dataclasses.replace(plain, swap_ab=True), "sm_100a")
    assert not decode_mma_model.runs_on_mma_sync(dataclasses.replace(plain, block_m=64), "sm_100a")  # wgmma
    assert decode_mma_model.mma_sync_ties(plain, problem, "sm_100a", 148, 4.0, 4.0)  # fp32: FMAs either way

    # a family that cannot express the swap-AB twin keeps its plain tiles
    plain_only = gemm.config_from_tile
    family = dataclasses.replace(gemm.FAMILY, config_from_tile=lambda tile, *a: None if tile.swap_ab else plain_only(tile, *a))
    offered = DecodePolicy().propose(family, problem, "sm_100a")
    assert {c.block_n for c in offered} == {128, 64} and not any(c.swap_ab for c in offered)


def test_the_policys_sm_count_reaches_the_model():
    """M = 8, N = K = 4096 on sm_100a, the plain 16x128 tile (32 CTAs, each 1114112 bytes and
    16777216 MMA FLOPs; each CTA gets 6.4 TB/s / 32 = 200 GB/s, 5.57 us of memory): on 148 SMs
    mma.sync gives an SM 0.25 * 0.7 * 2250 TFLOP/s / 148 = 2.66 TFLOP/s, 6.31 us, and loses; told
    the GPU has 32 SMs, an SM gets 12.3 TFLOP/s, 1.36 us, and ties."""
    problem = GemmProblem(8, 4096, 4096, "bfloat16")
    assert {c.block_n for c in DecodePolicy().propose(gemm.FAMILY, problem, "sm_100a") if not c.swap_ab} == {64}
    offered = DecodePolicy(num_sms=32).propose(gemm.FAMILY, problem, "sm_100a")
    assert {c.block_n for c in offered if not c.swap_ab} == {128, 64}


def test_only_16_bit_operands_on_both_sides_are_modelled():
    """The model knows bf16 x bf16 only: where either operand is wider, of a dtype the policy has
    no size for, unnamed, or the family's operands are NVFP4, the plain tiles it would drop for bf16
    (16x128 on sm_100a, above) stay."""
    from types import SimpleNamespace

    from inductor_ext.templates.triton import nvfp4_gemm

    for a, b in (("float32", "bfloat16"), ("bfloat16", "float32"), ("int8", "bfloat16"), ("bfloat16", None)):
        problem = SimpleNamespace(m=8, n=4096, k=4096, a_dtype=a, b_dtype=b)
        assert {c.block_n for c in _offered(problem, "sm_100a") if not c.swap_ab} == {128, 64}, (a, b)
    fp4_problem = SimpleNamespace(m=8, n=4096, k=4096, out_dtype="bfloat16")
    offered = DecodePolicy().propose(nvfp4_gemm.FAMILY, fp4_problem, "sm_100a")
    assert {c.block_n for c in offered if not c.swap_ab} == {128, 64} and any(c.swap_ab for c in offered)
