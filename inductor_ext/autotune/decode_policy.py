"""Candidate policy for decode-shaped GEMMs: few rows (M <= 256), a weight matrix B[K, N].

In LLM decoding M is the batch (1..256 tokens) while N and K are model widths (4096..57344).
Such a GEMM reads all of B once and does little math per byte: it is bound by memory bandwidth,
and by how many SMs are streaming B at once. nvMatmulHeuristics' top-k answers mostly aim at
compute-bound tiling (128x128 CTAs, its own split-K); this policy adds the tilings that decode
kernels use (gemv-like tiles, swap-AB, split-K sized to the machine). Tiles are in the
problem's frame: block_m always tiles M and block_n tiles N, also when ``swap_ab`` is set
(swap-AB only says that the kernel computes C^T = B^T A^T, putting N on the MMA's wide M side).

Rules (``decode_tiles`` implements them, in this order):

1. Applies on NVIDIA targets (``sm_*``) when ``problem.m <= 256`` (``DECODE_MAX_M``); above that
   the GEMM is compute-bound enough for the general policies.
2. BLOCK_M is matched to M: ``clamp(next_pow2(M), 16, 64)`` for M <= 64 (16 is the smallest
   ``tl.dot`` side); for 64 < M <= 256 both 64 and (when M >= 128) 128.
3. BLOCK_N: 128 and 64 for M <= 64 (many narrow column strips keep many SMs streaming B);
   128, 64 and 256 for larger M.
4. BLOCK_K is wide when M is tiny, to make each B load long and to amortise the loop:
   256 for M <= 16, 128 for M <= 64, 64 above; never more than next_pow2(K) (and >= 16).
5. Swap-AB (M <= 64): a tile with block_n 128 or 64 on the MMA's M side (the 64/128-wide
   wgmma/tcgen05 dimension) and block_m = the matched BLOCK_M on the MMA's N side, so a tiny
   M no longer wastes most of a 64-row MMA. Swap-AB tiles come first for M <= 64.
6. Split-K when there are few output tiles and K is large: with
   ``tiles = cdiv(M, block_m) * cdiv(N, block_n)``, if ``2 * tiles <= SMs`` and
   ``K >= SPLIT_K_MIN_K`` (2048), ``split = floor(SMs / tiles)`` -- the most CTAs that still fit
   in one wave -- capped at 16 and so that each split still runs >= 4 BLOCK_K steps. The
   split-K tile is proposed right before its unsplit twin (split-K usually wins when it fires).
   SMs: 132 for sm_90/sm_90a (H100/H200), 148 for sm_100/sm_100a (B200), 132 for any other
   ``sm_*``; ``DecodePolicy(num_sms=...)`` overrides.
7. Warps: 4, or 8 for tiles of 128x128 and more (two warpgroups). Stages: as many as fit
   ``SMEM_BUDGET`` bytes (192 KiB of the 227 KiB per block on H100/H200/B200, leaving room
   for the epilogue) for the A and B tiles of one stage (at the operands' element sizes:
   fp32 4, bf16/fp16 2, fp8 1, NVFP4 0.5 bytes, scales ignored), between 2 and 6.
8. Duplicates are dropped, first kept. ``DecodePolicy.propose`` maps every tile through
   ``family.config_from_tile`` and drops those the family cannot express (e.g. triton.gemm has
   no split-K, so it keeps the swap-AB and the plain small-M tiles).
9. On sm_90a and sm_100a a plain tile with BLOCK_M < 64 runs on mma.sync while its swap-AB twin
   runs on wgmma / tcgen05.mma: ``propose`` keeps it only where ``decode_mma_model`` says it
   ties the twin (memory-bound even at mma.sync's rate), and only drops it when the family can
   express the twin (16-bit operands; see that module for the model).

Rules 1-8 are rules of thumb for choosing what to benchmark and rule 9 a deliberately small
model, not a prediction of the winner: the autotuner measures every candidate against ATen.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from inductor_ext import targets
from inductor_ext.autotune import decode_mma_model
from inductor_ext.autotune.nvmmh_policy import operand_dtypes
from inductor_ext.templates.base import Tile
from inductor_ext.templates.family import Family

NAME = "decode"
DECODE_MAX_M = 256
SPLIT_K_MIN_K = 2048
MAX_SPLIT_K = 16
MIN_K_STEPS_PER_SPLIT = 4
SMEM_BUDGET = 192 * 1024
MIN_STAGES, MAX_STAGES = 2, 6

# SMs per NVIDIA target (each target's ``multiprocessors`` in ``targets``: H100 SXM / H200 132,
# B200 148); DEFAULT_SMS for an NVIDIA target without the figure.
TARGET_SMS: dict[str, int] = {name: t.multiprocessors for name, t in targets.all_targets().items()
                              if t.vendor == "nvidia" and t.multiprocessors}
DEFAULT_SMS = 132

_ELEMENT_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "float8_e4m3fn": 1.0,
                  "float8_e5m2": 1.0, "nvfp4": 0.5}


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def sm_count(target: str, num_sms: int | None = None) -> int:
    return num_sms if num_sms is not None else TARGET_SMS.get(target, DEFAULT_SMS)


def applies_to(problem: Any, target: str) -> bool:
    return targets.vendor(target) == "nvidia" and 0 < problem.m <= DECODE_MAX_M and problem.n > 0 and problem.k > 0


def _block_k(m: int, k: int) -> int:
    wide = 256 if m <= 16 else 128 if m <= 64 else 64
    return max(16, min(wide, _next_pow2(k)))


def _stages(bm: int, bn: int, bk: int, a_bytes: float, b_bytes: float) -> int:
    per_stage = bm * bk * a_bytes + bk * bn * b_bytes
    return max(MIN_STAGES, min(MAX_STAGES, int(SMEM_BUDGET // per_stage)))


def _split(tiles: int, k: int, bk: int, sms: int) -> int:
    """Rule 6: the split-K factor for ``tiles`` output tiles (1: do not split)."""
    if 2 * tiles > sms or k < SPLIT_K_MIN_K:
        return 1
    split = min(sms // tiles, MAX_SPLIT_K, (k // bk) // MIN_K_STEPS_PER_SPLIT)
    return split if split >= 2 else 1


def decode_tiles(problem: Any, target: str, num_sms: int | None = None,
                 family: Family | None = None) -> list[Tile]:
    """The decode rules' tiles for ``problem`` on ``target`` (raw: before a family maps them);
    [] when the policy does not apply. ``family`` only helps size stages (operand dtypes)."""
    if not applies_to(problem, target):
        return []
    m, n, k = problem.m, problem.n, problem.k
    sms = sm_count(target, num_sms)
    a_dtype, b_dtype, _ = operand_dtypes(problem, family)
    a_bytes = _ELEMENT_BYTES.get(a_dtype or "", 2.0)
    b_bytes = _ELEMENT_BYTES.get(b_dtype or "", 2.0)
    bk = _block_k(m, k)
    if m <= 64:
        small_m = min(64, max(16, _next_pow2(m)))
        shapes = [(small_m, bn, True) for bn in (128, 64)] + [(small_m, bn, False) for bn in (128, 64)]
    else:
        bms = (64, 128) if m >= 128 else (64,)
        shapes = [(bm, bn, False) for bm in bms for bn in (128, 64, 256)]
    tiles: list[Tile] = []
    for bm, bn, swap in shapes:
        warps = 8 if bm * bn >= 128 * 128 else 4
        stages = _stages(bm, bn, bk, a_bytes, b_bytes)
        base = Tile(bm, bn, bk, num_stages=stages, num_warps=warps, split_k=1, swap_ab=swap)
        split = _split(_cdiv(m, bm) * _cdiv(n, bn), k, bk, sms)
        if split > 1:
            tiles.append(Tile(bm, bn, bk, num_stages=stages, num_warps=warps, split_k=split, swap_ab=swap))
        tiles.append(base)
    return list(dict.fromkeys(tiles))


class DecodePolicy:
    """Shape-aware tiles for decode GEMMs (M <= 256) on NVIDIA targets; see the module docstring."""

    name = NAME

    def __init__(self, num_sms: int | None = None) -> None:
        self.num_sms = num_sms

    def applies(self, family: Family, problem: Any, target: str) -> bool:
        return family.takes_tiles and applies_to(problem, target)  # a GEMM family's problem has m, n, k

    def propose(self, family: Family, problem: Any, target: str) -> list[Any]:
        tiles = decode_tiles(problem, target, self.num_sms, family)
        tiles = [t for t in tiles if not self._mma_sync_loses(t, family, problem, target)]
        configs = (family.config_from_tile(t) for t in tiles)
        return list(dict.fromkeys(c for c in configs if c is not None))

    def _mma_sync_loses(self, tile: Tile, family: Any, problem: Any, target: str) -> bool:
        """Rule 9: an mma.sync tile the model puts behind its swap-AB twin, which the family offers."""
        if not decode_mma_model.runs_on_mma_sync(tile, target):
            return False
        a_dtype, b_dtype, _ = operand_dtypes(problem, family)
        # a dtype the table lacks is not modelled (decode_mma_model: other dtypes keep their tiles)
        a_bytes, b_bytes = _ELEMENT_BYTES.get(a_dtype or "", 0.0), _ELEMENT_BYTES.get(b_dtype or "", 0.0)
        twin = dataclasses.replace(tile, swap_ab=True)
        return (family.config_from_tile(twin) is not None and not decode_mma_model.mma_sync_ties(
            tile, problem, target, sm_count(target, self.num_sms), a_bytes, b_bytes))
