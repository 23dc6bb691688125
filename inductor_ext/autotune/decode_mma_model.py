"""Whether a decode tile on Ampere's ``mma.sync`` is worth benchmarking beside its swap-AB twin
on the wide MMA (``wgmma`` on sm_90a, ``tcgen05.mma`` on sm_100a).

On those targets Triton puts a tile on the wide MMA only with >= 64 rows on the MMA's M side
(``templates/triton/gemm.py``'s ``key_instructions``): a plain decode tile with BLOCK_M < 64 runs
on ``mma.sync``; its swap-AB twin (the same BLOCK_M/N/K, computing C^T = B^T A^T so BLOCK_N is
the MMA's M side) runs on the wide MMA. Both move the same bytes and do the same padded MMA
work (M rounded up to BLOCK_M), so the model only asks whether ``mma.sync``'s lower throughput
shows. One CTA of either streams its strip of B (BLOCK_N x K) and its rows of A, and issues
``2 * BLOCK_M * BLOCK_N * K`` MMA FLOPs; with ``ctas = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) *
split_k`` CTAs on ``sms`` SMs (one wave of at most ``sms`` share HBM):

    t_cta(kind) = max(bytes / bw_sm, flops / rate_sm(kind))
    bw_sm       = memory_efficiency * hbm_bandwidth / min(ctas, sms)
    rate_sm     = flops_efficiency * peak_bf16 / sms        (the wide MMA)
                  * MMA_SYNC_FRACTION[target]               (mma.sync)

(datasheet figures and efficiencies: ``targets.datasheet``). The ``mma.sync`` tile ties its twin
while it stays memory-bound at ``mma.sync``'s rate, and loses once its MMA time passes its
memory time; it never wins outright (same bytes, same padding, less throughput). The decode
policy offers it only where it ties -- there the autotuner measures which is faster (issue
latency and pipeline depth, which this model leaves out, can favour either) -- and drops it
where it loses. Only 16-bit operands are modelled (fp32 without TF32 runs on FMAs either way;
other dtypes keep their tiles).
"""

from __future__ import annotations

from typing import Any

from inductor_ext import targets
from inductor_ext.templates.base import Tile

# Targets with a wide MMA Triton reaches only with >= TC_MIN_ROWS rows on its M side, and the
# share of that MMA's dense bf16 peak that mma.sync reaches there (assumed, not measured here:
# Hopper's mma.sync runs at about half of wgmma's rate per SM; Blackwell keeps Hopper-class
# mma.sync per SM beside a tcgen05.mma of over twice wgmma's rate).
MMA_SYNC_FRACTION: dict[str, float] = {"sm_90a": 0.5, "sm_100a": 0.25}
TC_MIN_ROWS = 64


def runs_on_mma_sync(tile: Tile, target: str) -> bool:
    """Whether ``tile`` is a plain tile Triton puts on mma.sync on ``target`` (a wide-MMA target)."""
    return target in MMA_SYNC_FRACTION and not tile.swap_ab and tile.block_m < TC_MIN_ROWS


def cta_seconds(tile: Tile, m: int, n: int, k: int, target: str, sms: int, a_bytes: float, b_bytes: float,
                mma_sync: bool) -> float:
    """The model's time of one CTA of ``tile`` (see the module docstring)."""
    sheet = targets.datasheet(target)
    if sheet is None:
        raise ValueError(f"target {target!r} has no datasheet: the decode MMA model needs its HBM bandwidth and peak")
    split = max(1, tile.split_k)
    k_cta = -(-k // split)
    ctas = -(-m // tile.block_m) * -(-n // tile.block_n) * split
    bw_sm = sheet.memory_efficiency * sheet.hbm_bandwidth / min(ctas, sms)
    rate_sm = sheet.flops_efficiency * sheet.flops_for("bfloat16") / sms
    if mma_sync:
        rate_sm *= MMA_SYNC_FRACTION[target]
    moved = tile.block_n * k_cta * b_bytes + min(m, tile.block_m) * k_cta * a_bytes
    flops = 2.0 * tile.block_m * tile.block_n * k_cta
    return max(moved / bw_sm, flops / rate_sm)


def mma_sync_ties(tile: Tile, problem: Any, target: str, sms: int, a_bytes: float, b_bytes: float) -> bool:
    """For a tile on mma.sync: whether the model puts it no slower than its swap-AB twin on the
    wide MMA (True for tiles this model does not cover: they are kept)."""
    if not runs_on_mma_sync(tile, target) or (a_bytes, b_bytes) != (2.0, 2.0):
        return True
    args = (tile, problem.m, problem.n, problem.k, target, sms, a_bytes, b_bytes)
    return cta_seconds(*args, mma_sync=True) <= cta_seconds(*args, mma_sync=False)
