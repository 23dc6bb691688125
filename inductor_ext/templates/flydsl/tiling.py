"""How the FlyDSL GEMM kernels split work, as plain index arithmetic.

Every index the kernels compute comes from a function here: the kernels call them at trace time
with FlyDSL integers (``fx.Int32``: ``+ - * // %`` build IR), and ``testing/flydsl_model.py``
calls the very same functions with numpy arrays to check, on the host, that the tiling writes
every output element exactly once, covers K exactly once, keeps ragged groups apart, and
reproduces the reference numerics. So the model checks the kernel's own index math, not a copy.

Layouts the kernels assume of a matrix instruction (``Mma``): lane ``l`` of a wave holds
``a_elems`` consecutive K elements of A row ``l % m`` starting at ``(l // m) * a_elems`` (the same
for B column ``l % n``), and ``c_elems`` accumulators of C column ``l % n``, rows
``(l // n) * c_elems + i``. The hardware's own K order inside an instruction need not match
(a dot product does not care, as long as A and B use the same order); the row/column and
accumulator layouts must, and a first run on the hardware checks them (bench/rocm_gemm.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Mma", "MMA", "GemmTiling", "cdiv", "OOB_OFFSET"]

# A buffer offset past any tensor the kernels accept (they refuse tensors of 2 GiB or more):
# AMD buffer loads return 0 there and buffer stores drop the write.
OOB_OFFSET = 0x7FFFFFF0
MAX_TENSOR_BYTES = OOB_OFFSET


def cdiv(a: Any, b: int) -> Any:
    return (a + b - 1) // b


@dataclass(frozen=True)
class Mma:
    """One matrix instruction as the kernels feed it (see the module docstring for the layout)."""

    instruction: str  # the mnemonic asserted at tier I, e.g. "v_mfma_f32_16x16x32_bf16"
    m: int
    n: int
    k: int  # K per instruction, in elements
    wave: int  # lanes per wave: 64 (CDNA) or 32 (gfx1250)

    @property
    def a_elems(self) -> int:
        """K elements of one A row (and one B column) each lane holds."""
        return self.m * self.k // self.wave

    @property
    def c_elems(self) -> int:
        """Accumulators each lane holds."""
        return self.m * self.n // self.wave

    def a_lane(self, lane: Any) -> tuple[Any, Any]:
        """(row, first k) of the A elements lane ``lane`` holds; the same gives B's (column, first k)."""
        return lane % self.m, (lane // self.m) * self.a_elems

    def c_lane(self, lane: Any, i: int) -> tuple[Any, Any]:
        """(row, column) of accumulator ``i`` of lane ``lane``."""
        return (lane // self.n) * self.c_elems + i, lane % self.n


MMA = {
    # gfx950 (CDNA4, wave64)
    "gfx950_bf16": Mma("v_mfma_f32_16x16x32_bf16", 16, 16, 32, 64),
    "gfx950_fp16": Mma("v_mfma_f32_16x16x32_f16", 16, 16, 32, 64),
    "gfx950_mx": Mma("v_mfma_scale_f32_16x16x128_f8f6f4", 16, 16, 128, 64),  # 32 K / lane = 1 MX block
    # gfx1250 (wave32)
    "gfx1250_bf16": Mma("v_wmma_f32_16x16x32_bf16", 16, 16, 32, 32),
    "gfx1250_fp16": Mma("v_wmma_f32_16x16x32_f16", 16, 16, 32, 32),
    "gfx1250_fp8": Mma("v_wmma_f32_16x16x128_fp8_fp8", 16, 16, 128, 32),
}


@dataclass(frozen=True)
class GemmTiling:
    """A workgroup computes a ``block_m x block_n`` tile of C; its ``waves_m x waves_n`` waves each
    a ``wave_m x wave_n`` sub-tile of ``reps_m x reps_n`` instructions. K advances ``block_k`` at a
    time: A and B tiles are staged in LDS (``[rows][lds_k]``, K contiguous, rows padded), then each
    wave reads its operands from there.

    Global loads move ``vec`` elements at once along the operand's contiguous dimension
    (``a_k_major``: A's K is contiguous, else its M; ``b_k_major`` likewise for B's K vs N).
    Sizes and indices count elements; ``elem_bits`` (16, 8, or 4 for packed fp4) turns them into
    bytes (:meth:`bytes_of`).
    """

    block_m: int
    block_n: int
    block_k: int
    waves_m: int
    waves_n: int
    vec: int
    mma: Mma
    a_k_major: bool = True
    b_k_major: bool = True
    elem_bits: int = 16

    # ---------------------------------------------------------------- derived sizes

    @property
    def threads(self) -> int:
        return self.waves_m * self.waves_n * self.mma.wave

    @property
    def wave_m(self) -> int:
        return self.block_m // self.waves_m

    @property
    def wave_n(self) -> int:
        return self.block_n // self.waves_n

    @property
    def reps_m(self) -> int:
        return self.wave_m // self.mma.m

    @property
    def reps_n(self) -> int:
        return self.wave_n // self.mma.n

    @property
    def k_steps(self) -> int:
        return self.block_k // self.mma.k

    @property
    def lds_k(self) -> int:
        """Row pitch of the LDS tiles in elements: 16 bytes of padding keep rows 16-byte aligned
        and shift consecutive rows across LDS banks."""
        return self.block_k + 128 // self.elem_bits

    @property
    def lds_bytes(self) -> int:
        return self.bytes_of((self.block_m + self.block_n) * self.lds_k)

    def bytes_of(self, elements: Any) -> Any:
        """Bytes of ``elements`` elements (an even count for fp4)."""
        return elements * self.elem_bits // 8

    def load_iters(self, rows: int) -> int:
        """Global-load rounds per K step for a ``rows x block_k`` operand tile."""
        return rows * self.block_k // self.vec // self.threads

    def reason(self) -> str | None:
        """None when this tiling is well formed, else why not."""
        mma = self.mma
        if self.block_m % (self.waves_m * mma.m) or self.block_n % (self.waves_n * mma.n):
            return (f"block {self.block_m}x{self.block_n} is not a multiple of waves {self.waves_m}x{self.waves_n} "
                    f"times the {mma.m}x{mma.n} instruction")
        if self.block_k % mma.k:
            return f"block_k {self.block_k} is not a multiple of the instruction's K={mma.k}"
        if self.vec not in (1, 2, 4, 8, 16, 32) or self.vec * self.elem_bits > 128 or self.vec * self.elem_bits < 8:
            return f"vec {self.vec} is not a load of 1 to 16 bytes"
        for rows, name in ((self.block_m, "A"), (self.block_n, "B")):
            if (rows * self.block_k) % (self.vec * self.threads):
                return f"the {name} tile ({rows}x{self.block_k}) does not split into {self.threads} threads x {self.vec}"
        if self.threads > 1024:
            return f"{self.threads} threads exceed a workgroup"
        return None

    # ---------------------------------------------------------------- index math

    def program_tile(self, pid_m: Any, pid_n: Any) -> tuple[Any, Any]:
        """First row and column of C of workgroup (pid_m, pid_n); the grid is
        ``(cdiv(M, block_m), cdiv(N, block_n))``."""
        return pid_m * self.block_m, pid_n * self.block_n

    def wave_of(self, tid: Any) -> tuple[Any, Any, Any]:
        """(wave row, wave column, lane) of thread ``tid``."""
        wave = tid // self.mma.wave
        return wave // self.waves_n, wave % self.waves_n, tid % self.mma.wave

    def load_unit(self, it: int, tid: Any, rows: int, k_major: bool) -> tuple[Any, Any]:
        """(row, k) in the operand tile of the ``vec`` elements thread ``tid`` loads in round ``it``.

        The run of ``vec`` goes along K when ``k_major`` (rows, K), else along the rows; consecutive
        threads take consecutive runs along the contiguous dimension (coalesced loads)."""
        u = it * self.threads + tid
        if k_major:
            per_row = self.block_k // self.vec
            return u // per_row, (u % per_row) * self.vec
        per_k = rows // self.vec
        return (u % per_k) * self.vec, u // per_k

    def operand(self, base: Any, rep: int, kstep: int, lane: Any) -> tuple[Any, Any]:
        """(row, first k) in an LDS tile of the instruction operand lane ``lane`` reads for
        repetition ``rep`` and K step ``kstep``; ``base`` is :meth:`a_row_base` (A) or
        :meth:`b_col_base` (B) of the lane's wave."""
        r, k = self.mma.a_lane(lane)
        return base + rep * self.mma.m + r, kstep * self.mma.k + k

    def acc_element(self, wave_m: Any, wave_n: Any, rm: int, rn: int, lane: Any, i: int) -> tuple[Any, Any]:
        """(row, column) in the C tile of accumulator ``i`` of instruction (rm, rn) of a lane."""
        r, c = self.mma.c_lane(lane, i)
        return wave_m * self.wave_m + rm * self.mma.m + r, wave_n * self.wave_n + rn * self.mma.n + c

    def scale_offset(self, layout: str, row: Any, kblock: Any, stride_row: Any, stride_kb: Any,
                     kb_tiles: Any) -> Any:
        """Element offset of the block scale of (row, K block) in a scale tensor.

        ``"plain"``: a strided [rows, K // 32] tensor. ``"blocked"``: the cuBLAS/hipBLASLt 128x4
        tiles ``torch._scaled_mm`` takes (``kernels.nvfp4.to_blocked``), ``kb_tiles`` =
        ceil(K // 32 / 4) tiles per row of tiles."""
        if layout == "plain":
            return row * stride_row + kblock * stride_kb
        tile = (row // 128) * kb_tiles + kblock // 4
        return tile * 512 + (row % 32) * 16 + ((row // 32) % 4) * 4 + kblock % 4

    def tdm_split(self, rows: int, waves: int) -> list[tuple[int, int, int, int]]:
        """How ``make_tensor_descriptor_2d`` (FlyDSL) splits a ``rows x block_k`` TDM tile between
        ``waves`` waves: (first row, first k, rows, ks) per wave, wave order. Waves double along
        the rows first, then along K, while a dimension still has two units per wave; leftover
        waves go to K. tests/test_flydsl_tdm_gemm.py checks this against FlyDSL's own function
        (in a subprocess: the host model must not load FlyDSL's MLIR)."""
        dims, warps, left = [rows, self.block_k], [1, 1], waves
        for i in range(2):
            while left > 1 and warps[i] * 2 <= dims[i]:
                warps[i] *= 2
                left //= 2
        warps[1] *= left
        per = [cdiv(dims[i], warps[i]) for i in range(2)]
        return [((w % warps[0]) * per[0], (w // warps[0]) * per[1], per[0], per[1]) for w in range(waves)]

    @staticmethod
    def scale_ok(row: Any, kblock: Any, rows: Any, kblocks: Any) -> Any:
        """Which block scales a kernel reads; the others read as the byte 0 (2**-127 times zeros)."""
        return (row < rows) & (kblock < kblocks)

    def a_row_base(self, wave_m: Any) -> Any:
        return wave_m * self.wave_m

    def b_col_base(self, wave_n: Any) -> Any:
        return wave_n * self.wave_n
