"""FlyDSL building blocks the GEMM families share, called while a kernel is traced.

Only kernel builders call these (inside the compile subprocess or a launch on a ROCm GPU). FlyDSL
is imported on first use, not at load: the family registry imports every module of this folder
in every compile, and FlyDSL's MLIR must not be loaded where CuTeDSL's is (their bindings clash). Every index comes from
:mod:`.tiling`, so the host-side model checks the same arithmetic. No function here holds
dynamic control flow (FlyDSL rewrites Python ``for``/``if`` only inside ``@flyc.kernel``
bodies): the K loop lives in each kernel; these helpers are straight-line per K step.

Memory is reached through AMD buffer resources over flat views of the tensors: an offset of
:data:`~.tiling.OOB_OFFSET` reads 0 and drops a write, which is how every load and store is
masked without branches.
"""

from __future__ import annotations

import importlib
from typing import Any

from inductor_ext.templates.flydsl.tiling import OOB_OFFSET, GemmTiling


class _Lazy:
    """A FlyDSL module (or one of its attributes), imported when first used."""

    def __init__(self, module: str, attr: str | None = None) -> None:
        self._module, self._attr = module, attr

    def __getattr__(self, name: str) -> Any:
        target = importlib.import_module(self._module)
        return getattr(getattr(target, self._attr) if self._attr else target, name)


fx = _Lazy("flydsl.expr")
rocdl = _Lazy("flydsl.expr.rocdl")
_rocdl = _Lazy("flydsl._mlir.dialects.rocdl")
T = _Lazy("flydsl.expr.typing", "T")

# Element IR types by the dtype names problems use; 8-bit formats travel as raw bytes.
ELEM = {"bfloat16": lambda: T.bf16, "float16": lambda: T.f16, "float32": lambda: T.f32, "uint8": lambda: T.i8,
        "int32": lambda: T.i32}
ELEM_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "uint8": 1, "int32": 4}
_NUMERIC = {"bfloat16": "BFloat16", "float16": "Float16", "float32": "Float32"}


def numeric(dtype: str) -> Any:
    """The ``fx`` numeric type of a dtype name (``fx.BFloat16`` for "bfloat16")."""
    return getattr(fx, _NUMERIC[dtype])


def smem_ab(t: GemmTiling, elem: Any) -> Any:
    """The LDS layout of a GEMM step: an A and a B tile of ``elem`` (an ``fx`` numeric type), each
    ``[rows][t.lds_k]`` elements (``t.bytes_of`` bytes), 16-byte aligned. Built with ``type()``:
    FlyDSL reads the annotations as objects, which this module's postponed annotations are not."""
    units = 8 // t.elem_bits if t.elem_bits < 8 else 1  # fp4: two elements per stored byte
    return fx.struct(type("Smem", (), {"__annotations__": {
        "a": fx.Array[elem, t.block_m * t.lds_k // units, 16],
        "b": fx.Array[elem, t.block_n * t.lds_k // units, 16]}}))


def rsrc(tensor: Any, nbytes: Any) -> Any:
    """A buffer resource over ``tensor`` (a flat view) holding ``nbytes`` bytes (i32)."""
    return rocdl.get_buffer_rsrc(rocdl.make_buffer_ptr(fx.get_iter(tensor), fx.Int64(nbytes)))


def masked_offset(ok: Any, byte_offset: Any) -> Any:
    """``byte_offset`` where ``ok``, else an offset past every tensor (reads 0, writes dropped)."""
    return ok.select(byte_offset, fx.Int32(OOB_OFFSET))


def load(ir_type: Any, rs: Any, byte_offset: Any, ok: Any) -> Any:
    """A buffer load of ``ir_type`` at ``byte_offset``; zeros where ``ok`` is false."""
    return rocdl.raw_ptr_buffer_load(ir_type, rs, masked_offset(ok, byte_offset), fx.Int32(0), 0)


def store(value: Any, rs: Any, byte_offset: Any, ok: Any) -> None:
    """A buffer store of ``value`` at ``byte_offset``, dropped where ``ok`` is false."""
    raw = value.ir_value() if hasattr(value, "ir_value") else value
    _rocdl.raw_ptr_buffer_store(raw, rs, masked_offset(ok, byte_offset).ir_value(), fx.Int32(0).ir_value())


def _units(t: GemmTiling, elem: str, elements: Any) -> Any:
    """Storage units (``elem`` values: bytes for fp8/fp4) holding ``elements`` logical elements."""
    return elements * t.elem_bits // (8 * ELEM_BYTES[elem])


def _vector(t: GemmTiling, elem: str, elements: int) -> Any:
    n = _units(t, elem, elements)
    return T.vec(n, ELEM[elem]()) if n > 1 else ELEM[elem]()


def stage_operand(t: GemmTiling, rs: Any, lds: Any, tid: Any, *, rows: int, k_major: bool, row0: Any, k0: Any,
                  row_ok: Any, k_lim: Any, stride_row: Any, stride_k: Any, elem: str, row_base: Any = 0) -> None:
    """Copy one ``rows x block_k`` operand tile (global rows ``row0 + r``, K ``k0 + k``) into the
    LDS tile ``lds`` (``[rows][t.lds_k]`` elements, K contiguous; ``elem`` is the storage type:
    the dtype, or "uint8" for fp8/fp4 bytes).

    ``row_ok(global_row)`` says which rows exist (zeros are staged for the others): it must hold for
    a prefix of the rows (``r < M``), since a run along the rows is kept or dropped by its first row.
    Rows that exist but are not wanted (another group's) need no mask here: a row of A only
    feeds its own row of C, which the store masks. ``k_lim`` is K.
    Element offsets are ``row_base + row * stride_row + k * stride_k``; a ``vec``-element run goes
    along K when ``k_major`` (then ``stride_k`` is 1 and K % vec == 0: a run is all in or all out),
    else along the rows (then ``stride_row`` is 1; rows past the end only feed C rows that are
    never stored).
    """
    vty = _vector(t, elem, t.vec)
    run_bytes = t.bytes_of(t.vec)
    # LLVM splits byte-vector buffer loads badly: load bytes as i32 words, then reinterpret.
    wty = T.vec(run_bytes // 4, T.i32) if ELEM_BYTES[elem] == 1 and run_bytes % 4 == 0 and run_bytes > 4 else None
    for it in fx.range_constexpr(t.load_iters(rows)):
        r, k = t.load_unit(it, tid, rows, k_major)
        grow, gk = row0 + r, k0 + k
        ok = row_ok(grow) & (gk < k_lim)
        v = load(wty or vty, rs, t.bytes_of(row_base + grow * stride_row + gk * stride_k), ok)
        if wty is not None:
            v = _bitcast(v, vty)
        if t.vec == 1 or k_major:
            (lds + _units(t, elem, r * t.lds_k + k)).store(v)
        else:  # a run along the rows lands in as many LDS rows (16-bit types only)
            vals = fx.Vector(v)
            for j in fx.range_constexpr(t.vec):
                (lds + (r + j) * t.lds_k + k).store(vals[j])


def _index(v: Any) -> Any:
    """``v`` as an MLIR index value (TDM descriptors do their address math in index)."""
    from flydsl._mlir import ir
    from flydsl.expr import arith

    raw = _raw(v)
    return raw if isinstance(raw.type, ir.IndexType) else arith.index_cast(T.index, raw)


def tdm_stage(t: GemmTiling, tensor: Any, lds: Any, *, rows: int, row0: Any, k0: Any, rows_lim: Any,
              stride_row: Any) -> None:
    """Issue the Tensor Data Mover copy of one ``rows x block_k`` K-major tile (global rows
    ``row0 + r``, K ``k0 + k``) into the LDS tile ``lds`` (``[rows][t.lds_k]``: the descriptor pads
    each row of ``block_k`` elements by 16 bytes). Every wave issues its share (FlyDSL splits the
    tile between the waves by rows); rows from ``rows_lim`` on are zero-filled by the hardware
    without a fetch. K needs no bound: callers keep K a multiple of ``block_k``.
    Asynchronous: follow with :func:`tdm_wait`."""
    from flydsl.expr.rocdl import tdm_ops

    view = fx.make_view(lds, fx.make_layout((rows, t.lds_k), (t.lds_k, 1)))
    desc = tdm_ops.make_tensor_descriptor_2d(
        global_ptr=tensor, lds_memref=view, global_offset=(_index(row0), _index(k0)),
        tensor_shape=(rows, t.block_k), strides=(stride_row, 1), tile_shape=(rows, t.block_k),
        elem_bytes=t.elem_bits // 8, pad_interval=t.block_k, pad_amount=t.lds_k - t.block_k,
        num_warps=t.threads // t.mma.wave, oob_outer_bound=rows_lim)
    tdm_ops.tensor_load_2d(desc)


def tdm_wait() -> None:
    """Wait for this wave's TDM copies (``s_wait_tensorcnt 0``), then for every wave's (barrier)."""
    from flydsl.expr.rocdl import tdm_ops

    tdm_ops.tensor_wait(0)
    fx.gpu.barrier()


def read_operand(t: GemmTiling, lds: Any, base: Any, rep: int, kstep: int, lane: Any, elem: str) -> Any:
    """The ``a_elems``-element operand one lane feeds an instruction, read from an LDS tile."""
    r, k = t.operand(base, rep, kstep, lane)
    return (lds + _units(t, elem, r * t.lds_k + k)).load(_vector(t, elem, t.mma.a_elems))


def mma(t: GemmTiling, a: Any, b: Any, acc: Any, scales: Any = None) -> Any:
    """``acc + A @ B`` on one instruction of ``t.mma`` (f32 accumulators)."""
    res = T.vec(t.mma.c_elems, T.f32)
    name = t.mma.instruction
    if name == "v_mfma_f32_16x16x32_bf16":
        return rocdl.mfma_f32_16x16x32_bf16(res, [a, b, acc])
    if name == "v_mfma_f32_16x16x32_f16":
        return rocdl.mfma_f32_16x16x32_f16(res, [a, b, acc])
    if name == "v_wmma_f32_16x16x32_bf16":
        return _rocdl.wmma_f32_16x16x32_bf16(res, _raw(a), _raw(b), _raw(acc)).result
    if name == "v_wmma_f32_16x16x32_f16":
        return _rocdl.wmma_f32_16x16x32_f16(res, _raw(a), _raw(b), _raw(acc)).result
    if name == "v_mfma_scale_f32_16x16x128_f8f6f4":
        # operands as i32 words (8 for fp8, 4 for fp4); ``scales`` = (format code, A scale, B scale):
        # e8m0 bytes zero-extended to i32 (byte 0 selected)
        fmt, scale_a, scale_b = scales
        words = T.vec(t.mma.a_elems * t.elem_bits // 32, T.i32)
        return rocdl.mfma_scale_f32_16x16x128_f8f6f4(
            res, [_bitcast(a, words), _bitcast(b, words), acc, fmt, fmt, 0, scale_a, 0, scale_b])
    if name == "v_wmma_f32_16x16x128_fp8_fp8":
        # operands are 64 bytes per lane: the instruction takes them as 16 x i32
        return rocdl.wmma_f32_16x16x128_fp8_fp8(res, _bitcast(a, T.vec(16, T.i32)), _bitcast(b, T.vec(16, T.i32)), acc)
    raise ValueError(f"no FlyDSL call for {name}")


def _raw(v: Any) -> Any:
    return v.ir_value() if hasattr(v, "ir_value") else v


def _bitcast(v: Any, ty: Any) -> Any:
    from flydsl._mlir.dialects import vector

    return vector.bitcast(ty, _raw(v))


def k_step(t: GemmTiling, acc: list[Any], tid: Any, lds_a: Any, lds_b: Any, rs_a: Any, rs_b: Any, *, m0: Any,
           n0: Any, k0: Any, k_lim: Any, row_ok: Any, col_ok: Any, a_strides: tuple[Any, Any],
           b_strides: tuple[Any, Any], elem: str, b_base: Any = 0) -> list[Any]:
    """One ``block_k`` step of a 16-bit GEMM: stage A and B in LDS, then every wave's instructions.

    ``a_strides`` = (row, k) element strides of A, ``b_strides`` = (column, k) of B;
    ``b_base`` offsets B (a group's matrix). Returns the updated accumulators."""
    wave_m, wave_n, lane = t.wave_of(tid)
    stage_operand(t, rs_a, lds_a, tid, rows=t.block_m, k_major=t.a_k_major, row0=m0, k0=k0, row_ok=row_ok,
                  k_lim=k_lim, stride_row=a_strides[0], stride_k=a_strides[1], elem=elem)
    stage_operand(t, rs_b, lds_b, tid, rows=t.block_n, k_major=t.b_k_major, row0=n0, k0=k0, row_ok=col_ok,
                  k_lim=k_lim, stride_row=b_strides[0], stride_k=b_strides[1], elem=elem, row_base=b_base)
    fx.gpu.barrier()
    out = list(acc)
    for ks in fx.range_constexpr(t.k_steps):
        a_ops = [read_operand(t, lds_a, t.a_row_base(wave_m), rm, ks, lane, elem) for rm in range(t.reps_m)]
        b_ops = [read_operand(t, lds_b, t.b_col_base(wave_n), rn, ks, lane, elem) for rn in range(t.reps_n)]
        for i in range(t.reps_m * t.reps_n):
            out[i] = mma(t, a_ops[i // t.reps_n], b_ops[i % t.reps_n], out[i])
    fx.gpu.barrier()  # the next step overwrites the LDS tiles
    return out


def zero_acc(t: GemmTiling) -> list[Any]:
    return [fx.Vector.filled(t.mma.c_elems, 0.0, fx.Float32) for _ in range(t.reps_m * t.reps_n)]


def store_tile(t: GemmTiling, acc: list[Any], rs_c: Any, tid: Any, *, m0: Any, n0: Any, row_ok: Any, n_lim: Any,
               scm: Any, scn: Any, out: str, bias: Any = None, alpha: Any = None, beta: Any = None,
               scales: Any = None) -> None:
    """Store the accumulators of one workgroup tile (rows ``m0 + r``, columns ``n0 + c``) as
    ``out``, each element once, dropped outside ``row_ok(row) & (col < n_lim)``.

    With ``bias = (rs, stride_row, stride_col, dtype[, base])``: ``alpha * acc + beta * bias[row, col]``
    (addmm; stride 0 broadcasts; ``base`` offsets a group's bias row), in fp32 before the conversion.
    With ``scales = (rs_a, stride_a, rs_b, stride_b)`` (fp32; stride 0: one value for all), the
    accumulator is first multiplied by ``scale_a[row] * scale_b[col]`` (``_scaled_mm``)."""
    wave_m, wave_n, lane = t.wave_of(tid)
    esize, out_type = ELEM_BYTES[out], numeric(out)
    for rm in fx.range_constexpr(t.reps_m):
        for rn in fx.range_constexpr(t.reps_n):
            vals = fx.Vector(acc[rm * t.reps_n + rn])
            for i in fx.range_constexpr(t.mma.c_elems):
                r, c = t.acc_element(wave_m, wave_n, rm, rn, lane, i)
                row, col = m0 + r, n0 + c
                ok = row_ok(row) & (col < n_lim)
                value = vals[i]
                if scales is not None:
                    rs_sa, ssa, rs_sb, ssb = scales
                    value = (value * fx.Float32(load(T.f32, rs_sa, row * ssa * 4, ok))
                             * fx.Float32(load(T.f32, rs_sb, col * ssb * 4, ok)))
                if bias is not None:
                    rs_b, sbm, sbn, bdtype, *base = bias
                    b = load(ELEM[bdtype](), rs_b, ((base[0] if base else 0) + row * sbm + col * sbn) * ELEM_BYTES[bdtype], ok)
                    value = value * alpha + fx.Float32(numeric(bdtype)(b).to(fx.Float32)) * beta
                store(fx.Float32(value).to(out_type), rs_c, (row * scm + col * scn) * esize, ok)
