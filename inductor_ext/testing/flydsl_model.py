"""Host-side model of the FlyDSL GEMM kernels: runs their tiling on the CPU, lane by lane.

The kernels (``templates/flydsl/``) cannot run here, but every index they compute comes from
``templates/flydsl/tiling.py``. This model calls those same functions with numpy arrays (all
threads of a workgroup at once) and performs what the kernel does with the results: stage the
operand tiles in an LDS array, read each lane's instruction operands, multiply the way the
matrix instruction does (``Mma`` lane layout), and store the accumulators under the kernel's
masks. It reports

- ``writes``: how often each C element was stored (every valid element exactly once, nothing
  else: a store outside the problem is an error raised here);
- ``out``: the result, compared by the tests with ``kernels.matmul`` / ``kernels.scaled_gemm``;
- with all-ones operands, ``out`` counts how many K elements reached each output: exactly K
  proves K is covered once (no tile skipped, none read twice, the tail masked).

LDS is filled with NaN before each K step, so an operand read the staging did not write poisons
the result instead of reading a stale value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from inductor_ext.templates.flydsl.tiling import GemmTiling, cdiv

__all__ = ["Epilogue", "ModelResult", "MxScales", "Operand", "gemm_tile", "run_gemm", "run_grouped"]


@dataclass
class ModelResult:
    out: np.ndarray  # fp32 result, NaN where never written
    writes: np.ndarray  # int, stores per element


@dataclass
class MxScales:
    """e8m0 block scales as the MX kernel addresses them (``GemmTiling.scale_offset``): raw bytes,
    the layout, strides (rows, K blocks), 128x4 tiles per tile row, and the valid extent."""

    flat: np.ndarray  # uint8 codes
    layout: str
    stride_row: int
    stride_kb: int
    kb_tiles: int
    rows: int
    kblocks: int

    def lane_scales(self, t: GemmTiling, row: np.ndarray, kb: np.ndarray) -> np.ndarray:
        ok = t.scale_ok(row, kb, self.rows, self.kblocks)
        offset = t.scale_offset(self.layout, row, kb, self.stride_row, self.stride_kb, self.kb_tiles)
        inside = ok & (offset >= 0) & (offset < self.flat.size)
        code = np.where(inside, self.flat[np.where(inside, offset, 0)], 0).astype(np.float64)
        return np.where(code == 255, np.nan, np.exp2(code - 127))


@dataclass
class Operand:
    """A global operand as the kernel addresses it: flat values (decoded to numbers) and (row, k)
    element strides. ``base`` is the element offset of a group's slice (grouped GEMM);
    ``scales``: MX block scales, applied per lane to the instruction operand as the scaled MFMA
    does (each lane's 32 K elements are one block)."""

    flat: np.ndarray
    stride_row: int
    stride_k: int
    k_major: bool
    base: int = 0
    scales: MxScales | None = None
    tdm_rows_lim: int | None = None  # staged by the Tensor Data Mover: rows from here on zero-filled


@dataclass
class Epilogue:
    """``dsl.store_tile``'s arithmetic: ``acc * scale_a[row] * scale_b[col]`` (flat fp32, strides;
    stride 0 = one value), then ``alpha * . + beta * bias[base + row * stride_row + col * stride_col]``."""

    alpha: float = 1.0
    beta: float = 1.0
    bias: tuple[np.ndarray, int, int] | None = None
    bias_base: int = 0
    scale_a: tuple[np.ndarray, int] | None = None
    scale_b: tuple[np.ndarray, int] | None = None

    def __call__(self, row: np.ndarray, col: np.ndarray, value: np.ndarray) -> np.ndarray:
        if self.scale_a is not None and self.scale_b is not None:
            value = value * self.scale_a[0][row * self.scale_a[1]] * self.scale_b[0][col * self.scale_b[1]]
        if self.bias is not None:
            flat, s_row, s_col = self.bias
            value = value * self.alpha + self.beta * flat[self.bias_base + row * s_row + col * s_col]
        return value


def _stage_tdm(t: GemmTiling, op: Operand, rows: int, row0: int, k0: int, k_lim: int) -> np.ndarray:
    """``tdm_stage``: the waves' TDM copies of a rows x block_k tile, split between the waves the
    way FlyDSL's ``make_tensor_descriptor_2d`` splits it (``GemmTiling.tdm_split``)."""
    lds = np.full((rows, t.lds_k), np.nan, dtype=np.float64)
    written = np.zeros((rows, t.lds_k), dtype=np.int64)
    for r0, c0, per_outer, per_inner in t.tdm_split(rows, t.threads // t.mma.wave):
        r = np.arange(r0, min(r0 + per_outer, rows))[:, None]
        c = np.arange(c0, min(c0 + per_inner, t.block_k))[None, :]
        grow, gk = row0 + r, k0 + c
        if np.any(gk >= k_lim):
            raise AssertionError("a TDM tile reads past K (K must be a multiple of block_k)")
        inside = np.broadcast_to(grow < op.tdm_rows_lim, (r.size, c.size))
        offset = op.base + grow * op.stride_row + gk * op.stride_k
        lds[r, c] = np.where(inside, op.flat[np.where(inside, offset, 0)], 0.0)
        written[r, c] += 1
    if np.any(written[:, :t.block_k] != 1):
        raise AssertionError(f"the TDM copies wrote LDS elements {sorted(set(written[:, :t.block_k].ravel()))} times")
    return lds


def _stage(t: GemmTiling, op: Operand, rows: int, row0: int, k0: int, row_ok: Callable, k_lim: int) -> np.ndarray:
    """``stage_operand``: one rows x block_k tile into a NaN-filled [rows][lds_k] LDS array."""
    if op.tdm_rows_lim is not None:
        return _stage_tdm(t, op, rows, row0, k0, k_lim)
    lds = np.full((rows, t.lds_k), np.nan, dtype=np.float64)
    written = np.zeros((rows, t.lds_k), dtype=np.int64)
    tid = np.arange(t.threads)
    for it in range(t.load_iters(rows)):
        r, k = t.load_unit(it, tid, rows, op.k_major)
        for j in range(t.vec):
            rr, kk = (r, k + j) if op.k_major else (r + j, k)
            grow, gk = row0 + r, k0 + k  # the mask is the run's, as in the kernel
            ok = row_ok(grow) & (gk < k_lim)
            erow, ek = row0 + rr, k0 + kk
            offset = op.base + erow * op.stride_row + ek * op.stride_k
            inside = ok & (offset >= 0) & (offset < op.flat.size)
            value = np.where(inside, op.flat[np.where(inside, offset, 0)], 0.0).astype(np.float64)
            if np.any((rr >= rows) | (kk >= t.block_k)):
                raise AssertionError("staging writes outside the LDS tile")
            lds[rr, kk] = value
            np.add.at(written, (rr, kk), 1)
    if np.any(written[:, :t.block_k] != 1):
        raise AssertionError(f"staging wrote LDS elements {sorted(set(written[:, :t.block_k].ravel()))} times, not once")
    return lds


def _operands(t: GemmTiling, lds: np.ndarray, base: np.ndarray, rep: int, ks: int, lane: np.ndarray,
              op: Operand, row0: int, k0: int) -> np.ndarray:
    """``read_operand`` for every thread: [threads, a_elems], times the lane's block scale (MX)."""
    r, k = t.operand(base, rep, ks, lane)
    values = lds[r[:, None], k[:, None] + np.arange(t.mma.a_elems)[None, :]]
    if op.scales is not None:
        if t.mma.a_elems != 32:
            raise AssertionError("a scaled operand must be one 32-element MX block per lane")
        values = values * op.scales.lane_scales(t, row0 + r, (k0 + k) // 32)[:, None]
    return values


def _mma(t: GemmTiling, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The matrix instruction for every wave: lane operands -> lane accumulators [threads, c_elems]."""
    mma, waves = t.mma, t.threads // t.mma.wave
    lane = np.arange(mma.wave)
    ar, ak = mma.a_lane(lane)
    out = np.zeros((t.threads, mma.c_elems))
    for w in range(waves):
        am = np.zeros((mma.m, mma.k))
        bm = np.zeros((mma.k, mma.n))
        for j in range(mma.a_elems):
            am[ar, ak + j] = a[w * mma.wave + lane, j]
            bm[ak + j, ar] = b[w * mma.wave + lane, j]
        d = am @ bm
        for i in range(mma.c_elems):
            r, c = mma.c_lane(lane, i)
            out[w * mma.wave + lane, i] = d[r, c]
    return out


def gemm_tile(t: GemmTiling, a: Operand, b: Operand, *, m0: int, n0: int, k_lim: int, row_ok: Callable,
              col_lim: int, stage_row_ok: Callable | None = None,
              epilogue: Epilogue | None = None) -> tuple[np.ndarray, list[tuple]]:
    """One workgroup's main loop and the (row, col, value, ok) of its stores; ``stage_row_ok`` is
    the staging's row mask when it differs from the store's ``row_ok``."""
    tid = np.arange(t.threads)
    wave_m, wave_n, lane = t.wave_of(tid)
    acc = np.zeros((t.reps_m * t.reps_n, t.threads, t.mma.c_elems))
    for k0 in range(0, k_lim, t.block_k):
        lds_a = _stage(t, a, t.block_m, m0, k0, stage_row_ok or row_ok, k_lim)
        lds_b = _stage(t, b, t.block_n, n0, k0, lambda r: r < col_lim, k_lim)
        for ks in range(t.k_steps):
            a_ops = [_operands(t, lds_a, t.a_row_base(wave_m), rm, ks, lane, a, m0, k0) for rm in range(t.reps_m)]
            b_ops = [_operands(t, lds_b, t.b_col_base(wave_n), rn, ks, lane, b, n0, k0) for rn in range(t.reps_n)]
            for i in range(t.reps_m * t.reps_n):
                acc[i] += _mma(t, a_ops[i // t.reps_n], b_ops[i % t.reps_n])
    stores = []
    for rm in range(t.reps_m):
        for rn in range(t.reps_n):
            for i in range(t.mma.c_elems):
                r, c = t.acc_element(wave_m, wave_n, rm, rn, lane, i)
                row, col = m0 + r, n0 + c
                ok = row_ok(row) & (col < col_lim)
                value = acc[rm * t.reps_n + rn][:, i]
                if epilogue is not None:
                    value = np.where(ok, epilogue(np.where(ok, row, 0), np.where(ok, col, 0), value), np.nan)
                stores.append((row, col, value, ok))
    return acc, stores


def _apply(result: ModelResult, stores: list[tuple]) -> None:
    m, n = result.out.shape
    for row, col, value, ok in stores:
        if np.any(ok & ((row >= m) | (col >= n) | (row < 0) | (col < 0))):
            raise AssertionError("a store passes its mask outside C")
        rows, cols, vals = row[ok], col[ok], value[ok]
        result.out[rows, cols] = vals
        np.add.at(result.writes, (rows, cols), 1)


def run_gemm(t: GemmTiling, a: Operand, b: Operand, m: int, n: int, k: int,
             epilogue: Epilogue | None = None) -> ModelResult:
    """The dense kernel (``flydsl.gemm`` / ``flydsl.mx_scaled_mm`` / ``flydsl.tdm_gemm`` tiling)
    over its whole grid."""
    result = ModelResult(np.full((m, n), np.nan), np.zeros((m, n), dtype=np.int64))
    for pid_m in range(cdiv(m, t.block_m)):
        for pid_n in range(cdiv(n, t.block_n)):
            m0, n0 = t.program_tile(pid_m, pid_n)
            _, stores = gemm_tile(t, a, b, m0=m0, n0=n0, k_lim=k, row_ok=lambda r: r < m, col_lim=n, epilogue=epilogue)
            _apply(result, stores)
    return result


def run_grouped(t: GemmTiling, a: Operand, b: Operand, offs: list[int], rows: int, n: int, k: int,
                b_group_stride: int, epilogue: Callable[[int], Epilogue] | None = None) -> ModelResult:
    """``flydsl.grouped_mm`` over its grid: each workgroup finds the groups its rows touch from
    ``offs`` (the kernel's counting loop, mirrored) and runs ``gemm_tile`` once per group with that
    group's B and its rows masked to the group."""
    result = ModelResult(np.full((rows, n), np.nan), np.zeros((rows, n), dtype=np.int64))
    groups = len(offs)
    for pid_m in range(cdiv(rows, t.block_m)):
        for pid_n in range(cdiv(n, t.block_n)):
            m0, n0 = t.program_tile(pid_m, pid_n)
            m_last = min(m0 + t.block_m, rows) - 1
            g_first = sum(int(end <= m0) for end in offs)
            g_last = min(sum(int(end <= m_last) for end in offs), groups - 1)
            for g in range(g_first, g_last + 1):
                start, end = (offs[g - 1] if g > 0 else 0), offs[g]

                def row_ok(r: np.ndarray, start: int = start, end: int = end) -> np.ndarray:
                    return (r >= start) & (r < end) & (r < rows)

                b_g = Operand(b.flat, b.stride_row, b.stride_k, b.k_major, base=g * b_group_stride)
                _, stores = gemm_tile(t, a, b_g, m0=m0, n0=n0, k_lim=k, row_ok=row_ok, col_lim=n,
                                      stage_row_ok=lambda r: r < rows, epilogue=epilogue and epilogue(g))
                _apply(result, stores)
    return result
