"""Targeted fixes for bugs in Triton's CPU interpreter (``TRITON_INTERPRET=1``).

Triton 3.9's interpreter (``triton/runtime/interpreter.py``) gets six things
wrong that our kernels rely on:

* ``bf16_dot``: ``tl.dot`` on bfloat16 operands multiplies the raw uint16 bit
  patterns (numpy has no bfloat16, so the interpreter stores it as uint16).
* ``nvfp4_dot_scaled``: ``tl.dot_scaled`` always decodes block scales as e8m0.
  NVFP4 (e2m1 operands, one float8_e4m3fn scale per 16 elements of K) therefore
  comes out wrong; MXFP4 (e8m0 scales, blocks of 32) is unaffected.
* ``gdc_noop``: ``tl.extra.cuda.gdc_wait()`` / ``gdc_launch_dependents()``
  (programmatic dependent launch) raise, because the interpreter neither binds
  them to its semantic nor implements them in its builder.  On a CPU with one
  program at a time they have nothing to wait for, so they become no-ops.
* ``libdevice_math``: the functions of ``triton.language.extra.libdevice``
  (``libdevice.rsqrt``, ``libdevice.tanh``, ``libdevice.pow``, ... which
  Inductor's Triton kernels call) are stubs that return None: the compiler
  swaps in a GPU backend's libdevice, the interpreter does not.  During each
  interpreted launch they are bound to the interpreter's ``tl.math`` where it
  has the function and to numpy otherwise (see ``_LIBDEVICE_NUMPY``).
* ``bf16_rounding``: fp32 -> bf16 conversions (``x.to(tl.bfloat16)``, a store
  of fp32 values through a bf16 pointer, bf16 constants, fp16 -> bf16) truncate
  the mantissa instead of rounding to nearest even, turn NaNs whose payload is
  in the low 16 bits into inf, and garble subnormals; bf16 -> fp32 garbles
  subnormals too.  Both directions are redone on the bit patterns: fp32 -> bf16
  rounds to nearest even (what ``cvt.rn.bf16.f32`` on a GPU and torch's
  ``.to(torch.bfloat16)`` do; NaN becomes the canonical NaN 0x7FFF, as on a
  GPU), bf16 -> fp32 is the exact widening.
* ``tf32_dot``: ``tl.dot(..., input_precision="tf32")`` on fp32 operands is a
  full-fp32 numpy matmul: the interpreter ignores ``input_precision``, so a
  kernel that runs on TF32 tensor cores looks exact here.  fp32 operands are
  reduced to TF32 (8 exponent bits, 10 explicit mantissa bits) first, the way
  the GPU does it for Triton: Triton 3.9 emits no conversion for a tf32 dot
  (no ``cvt.*.tf32.f32`` in the PTX of wgmma, tcgen05.mma or mma.sync kernels
  on sm_90a/sm_100a) and hands the fp32 registers to the tensor core, which
  reads the top 19 bits: the low 13 mantissa bits are dropped (round toward
  zero), not rounded.  (cuBLAS and CUTLASS convert explicitly with
  ``cvt.rna.tf32.f32``, round to nearest with ties away from zero, so ATen's
  TF32 GEMMs are slightly more accurate than Triton's: Triton issue #4574.)
  NaNs stay NaN.  "tf32x3" and "ieee" stay full-fp32 matmuls.

Each fix wraps or adds one small interpreter function. A fix whose patch point
is missing (other Triton versions) is skipped with a logged warning.

It stays one module past 600 lines on purpose: the six fixes share one patch
protocol (each ``_fix_*`` returns (owner, name, replacement) triples, which
``apply_interpreter_fixes`` installs under one lock, recording the originals that
``remove_interpreter_fixes`` puts back), and what makes it long is libdevice's
table, one entry per function; split, each fix would import that bookkeeping
back from a sibling.

Note: ``TRITON_INTERPRET`` is read when ``@triton.jit`` *decorates* a kernel,
so it must be set before the module defining the kernels is imported.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import sys
import threading
from typing import Any, Callable, Iterator

import numpy as np

__all__ = ["apply_interpreter_fixes", "remove_interpreter_fixes", "interpreter_fixes"]

log = logging.getLogger(__name__)

_MISSING = object()
_lock = threading.RLock()
# fix name -> list of (owner, attribute, previous value or _MISSING), in patch order.
_applied: dict[str, list[tuple[Any, str, Any]]] = {}


class _SkipFix(Exception):
    """A patch point this fix needs is missing from the installed Triton."""


def _interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _require(owner: Any, name: str) -> Any:
    value = getattr(owner, name, _MISSING)
    if value is _MISSING:
        raise _SkipFix(f"{getattr(owner, '__name__', owner)!r} has no attribute {name!r}")
    return value


def _import_or_skip(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise _SkipFix(f"cannot import {module}: {e}") from e


def _require_params(fn: Callable[..., Any], expected: list[str]) -> None:
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError) as e:
        raise _SkipFix(f"cannot inspect {fn!r}: {e}") from e
    if params[:len(expected)] != expected:
        raise _SkipFix(f"{getattr(fn, '__qualname__', fn)} takes {params}, expected {expected}")


# --------------------------------------------------------------------------- bf16


def _bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    # bf16 is the top half of an fp32, so widening is exact.
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _fix_bf16_dot(interp: Any) -> list[tuple[Any, str, Any]]:
    # Why: the interpreter keeps bf16 as uint16 bit patterns, and create_dot hands
    # them straight to np.matmul, which multiplies the integers.  Widen bf16
    # operands to fp32 (exact) before the original create_dot runs.
    import triton.language as tl

    builder_cls = _require(interp, "InterpreterBuilder")
    handle_cls = _require(interp, "TensorHandle")
    original = _require(builder_cls, "create_dot")
    _require_params(original, ["self", "a", "b"])

    def widen(h: Any) -> Any:
        if getattr(h, "dtype", None) == tl.bfloat16 and h.data.dtype == np.uint16:
            return handle_cls(_bf16_bits_to_f32(h.data), tl.float32)
        return h

    def create_dot(self: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, widen(a), widen(b), *args, **kwargs)

    create_dot.__wrapped__ = original  # type: ignore[attr-defined]
    return [(builder_cls, "create_dot", create_dot)]


# ------------------------------------------------------------------------ nvfp4

_NVFP4_GROUP = 16


def _e4m3fn_lut() -> np.ndarray:
    # float8_e4m3fn: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits, no inf,
    # S.1111.111 is NaN.  All 256 values are exact in fp32.
    code = np.arange(256, dtype=np.int32)
    exp = (code >> 3) & 0xF
    man = (code & 0x7).astype(np.float64)
    mag = np.where(exp == 0, man / 8.0 * 2.0**-6, (1.0 + man / 8.0) * np.exp2(exp - 7.0))
    mag = np.where((code & 0x7F) == 0x7F, np.nan, mag)
    return np.where(code & 0x80, -mag, mag).astype(np.float32)


def _fix_nvfp4_dot_scaled(interp: Any) -> list[tuple[Any, str, Any]]:
    # Why: _prepare_dot_scaled_operand decodes every block scale as e8m0
    # (byte << 23).  A group of 16 e2m1 values is NVFP4, whose scales are
    # float8_e4m3fn (what Blackwell's native mxf4nvf4 MMA reads), so decode those
    # as e4m3 and let every other case (MXFP4, fp8 operands, ...) fall through.
    ir = _require(interp, "_ir")
    e2m1 = _require(_require(ir, "ScaleDotElemTypeTY"), "E2M1")
    original = _require(interp, "_prepare_dot_scaled_operand")
    _require_params(original, ["value_handle", "scale_handle", "format_enum", "k_pack", "compute_type", "is_rhs"])
    lut = _e4m3fn_lut()

    def _prepare_dot_scaled_operand(value_handle: Any, scale_handle: Any, format_enum: Any, k_pack: bool,
                                    compute_type: Any, is_rhs: bool) -> np.ndarray:
        if scale_handle is not None and format_enum == e2m1:
            packed_k = value_handle.data.shape[-2 if is_rhs else -1]
            k = packed_k * 2 if k_pack else packed_k
            if k == scale_handle.data.shape[-1] * _NVFP4_GROUP:
                value = original(value_handle, None, format_enum, k_pack, compute_type, is_rhs)
                scale = np.repeat(lut[scale_handle.data.view(np.uint8)], _NVFP4_GROUP, axis=-1)
                if is_rhs:  # rhs is [K, N] but its scale is [N, K // 16]
                    scale = np.swapaxes(scale, -1, -2)
                return value * scale
        return original(value_handle, scale_handle, format_enum, k_pack, compute_type, is_rhs)

    _prepare_dot_scaled_operand.__wrapped__ = original  # type: ignore[attr-defined]
    return [(interp, "_prepare_dot_scaled_operand", _prepare_dot_scaled_operand)]


# -------------------------------------------------------------------------- gdc

_GDC_OPS = {
    # builtin in triton.language.extra.cuda -> builder method its semantic calls
    "gdc_wait": "create_grid_dependency_wait",
    "gdc_launch_dependents": "create_grid_dependency_launch_dependents",
}


class _GlobalsView:
    """Attribute access over a function's globals dict, so a _LangPatchScope can
    patch (and later restore) names bound by ``from ... import gdc_wait``."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        object.__setattr__(self, "_ns", namespace)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._ns[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._ns[name] = value

    def __delattr__(self, name: str) -> None:
        del self._ns[name]


def _grid_dependency_noop(self: Any) -> None:
    # One program runs at a time and kernels run back to back: nothing to wait
    # for and nobody to signal.
    return None


def _fix_gdc_noop(interp: Any) -> list[tuple[Any, str, Any]]:
    # Why: the interpreter only binds builtins of triton.language (and .math) to
    # its semantic, so the gdc builtins of tl.extra.cuda see _semantic=None and
    # raise; its builder also lacks the two grid-dependency ops.  Add the ops as
    # no-ops and bind the gdc builtins per launch, the way _patch_lang binds tl.
    cuda = _import_or_skip("triton.language.extra.cuda")
    builder_cls = _require(interp, "InterpreterBuilder")
    semantic = _require(interp, "interpreter_semantic")
    original_patch_lang = _require(interp, "_patch_lang")
    _require(_require(interp, "_LangPatchScope"), "set_attr")
    builtins = {name: _require(cuda, name) for name in _GDC_OPS}
    for fn in builtins.values():
        _require_params(inspect.unwrap(fn), ["_semantic"])
    # triton.language.extra loads its backends with module_from_spec, so
    # `tl.extra.cuda` and sys.modules["triton.language.extra.cuda"] are two
    # module objects (sharing one gdc submodule): patch every holder.
    extra = sys.modules.get("triton.language.extra")
    candidates = [cuda, getattr(extra, "cuda", None), sys.modules.get("triton.language.extra.cuda.gdc")]
    holders: list[Any] = []
    for module in candidates:
        if module is not None and not any(module is h for h in holders):
            holders.append(module)

    def bind(builtin: Callable[..., Any]) -> Callable[..., Any]:
        def bound(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("_semantic", None)
            return builtin(*args, _semantic=semantic, **kwargs)

        return bound

    bound = {name: bind(fn) for name, fn in builtins.items()}

    def _patch_lang(fn: Any) -> Any:
        scope = original_patch_lang(fn)
        if scope is None:  # nothing to restore the patches with
            return scope
        namespace = getattr(fn, "__globals__", {})
        modules = list(holders)  # tl.extra.cuda.gdc_wait()
        for value in list(namespace.values()):  # `from triton.language.extra import cuda`
            if (inspect.ismodule(value) and value.__name__.startswith("triton.language.extra.")
                    and not any(value is m for m in modules)):
                modules.append(value)
        for module in modules:
            for name, builtin in builtins.items():
                if getattr(module, name, None) is builtin:
                    scope.set_attr(module, name, bound[name])
        for attr, value in list(namespace.items()):  # `from ... import gdc_wait`
            for name, builtin in builtins.items():
                if value is builtin:
                    scope.set_attr(_GlobalsView(namespace), attr, bound[name])
        return scope

    _patch_lang.__wrapped__ = original_patch_lang  # type: ignore[attr-defined]
    patches: list[tuple[Any, str, Any]] = [(interp, "_patch_lang", _patch_lang)]
    for method in _GDC_OPS.values():
        if not hasattr(builder_cls, method):
            patches.append((builder_cls, method, _grid_dependency_noop))
    return patches


# -------------------------------------------------------------------- libdevice

_LIBDEVICE = "triton.language.extra.libdevice"

# libdevice functions that tl.math also has, with the same fp32/fp64 dtype
# rules; the interpreter implements these, so they are routed there.
# (Not div_rn and sqrt_rn: tl.math takes only fp32 for those, libdevice fp64 too.)
_LIBDEVICE_VIA_TL_MATH = ("abs", "ceil", "cos", "erf", "exp", "exp2", "floor", "fma", "log", "log2", "rsqrt", "sin",
                          "sqrt")

# Argument dtypes -> result dtype, as in the CUDA/HIP libdevice tables.  There is
# no implicit promotion: other dtypes are an error, on a GPU as here.
_F1 = {("fp32", ): "fp32", ("fp64", ): "fp64"}
_F2 = {("fp32", "fp32"): "fp32", ("fp64", "fp64"): "fp64"}
_F_I32 = {("fp32", "int32"): "fp32", ("fp64", "int32"): "fp64"}
_NP_DTYPES = {"fp32": np.float32, "fp64": np.float64, "int1": np.bool_, "int32": np.int32, "int64": np.int64}


def _to_f1(ret: str) -> dict[tuple[str, ...], str]:
    return {("fp32", ): ret, ("fp64", ): ret}


def _torch_special_f64(name: str) -> Callable[[np.ndarray], np.ndarray]:
    # Special functions numpy lacks: evaluate in float64 with torch (a
    # dependency of this package), rounded to the argument's dtype afterwards.
    def compute(x: np.ndarray) -> np.ndarray:
        import torch

        return getattr(torch.special, name)(torch.from_numpy(np.array(x, dtype=np.float64))).numpy()

    return compute


def _round_half_away(x: np.ndarray) -> np.ndarray:
    # C round(): halfway cases away from zero (np.round/np.rint go to even).
    # x - trunc(x) is exact, so there is no double rounding.
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0)


def _ilogb(x: np.ndarray) -> np.ndarray:
    # CUDA's ilogb: INT_MIN for 0 and NaN, INT_MAX for +-inf.
    _, e = np.frexp(x)
    out = (e - 1).astype(np.int64)
    out = np.where(np.isinf(x), np.iinfo(np.int32).max, out)
    return np.where((x == 0) | np.isnan(x), np.iinfo(np.int32).min, out)


def _exp10(x: np.ndarray) -> np.ndarray:
    return np.power(10.0, x.astype(np.float64))


# name -> (elementwise numpy function of the argument arrays, dtype table).  The
# result is cast to the table's dtype.  Covers what Inductor's Triton codegen and
# triton_helpers emit, plus their obvious siblings.
_LIBDEVICE_NUMPY: dict[str, tuple[Callable[..., np.ndarray], dict[tuple[str, ...], str]]] = {
    # float -> float
    "acos": (np.arccos, _F1),
    "acosh": (np.arccosh, _F1),
    "asin": (np.arcsin, _F1),
    "asinh": (np.arcsinh, _F1),
    "atan": (np.arctan, _F1),
    "atanh": (np.arctanh, _F1),
    "cbrt": (np.cbrt, _F1),
    "cosh": (np.cosh, _F1),
    "sinh": (np.sinh, _F1),
    "tan": (np.tan, _F1),
    "tanh": (np.tanh, _F1),
    "fast_tanhf": (np.tanh, {("fp32", ): "fp32"}),
    "exp10": (_exp10, _F1),
    "expm1": (np.expm1, _F1),
    "log10": (np.log10, _F1),
    "log1p": (np.log1p, _F1),
    "sqrt_rn": (np.sqrt, _F1),
    "trunc": (np.trunc, _F1),
    "nearbyint": (np.rint, _F1),  # round half to even, the default rounding mode
    "rint": (np.rint, _F1),
    "round": (_round_half_away, _F1),
    "erfc": (_torch_special_f64("erfc"), _F1),
    "erfcx": (_torch_special_f64("erfcx"), _F1),
    "erfinv": (_torch_special_f64("erfinv"), _F1),
    "lgamma": (_torch_special_f64("gammaln"), _F1),
    "cyl_bessel_i0": (_torch_special_f64("i0"), _F1),
    "cyl_bessel_i1": (_torch_special_f64("i1"), _F1),
    # float -> bool / int
    "isnan": (np.isnan, _to_f1("int1")),
    "isinf": (np.isinf, _to_f1("int1")),
    "finitef": (np.isfinite, {("fp32", ): "int1"}),
    "isfinited": (np.isfinite, {("fp64", ): "int1"}),
    "signbit": (np.signbit, _to_f1("int32")),  # nonzero for negative, like libdevice
    "ilogb": (_ilogb, _to_f1("int32")),
    "llrint": (np.rint, _to_f1("int64")),
    "llround": (_round_half_away, _to_f1("int64")),
    # (float, float) -> float
    "atan2": (np.arctan2, _F2),
    "copysign": (np.copysign, _F2),
    "fmod": (np.fmod, _F2),
    "hypot": (np.hypot, _F2),
    "nextafter": (np.nextafter, _F2),
    "add_rn": (np.add, _F2),
    "sub_rn": (np.subtract, _F2),
    "mul_rn": (np.multiply, _F2),
    "div_rn": (np.divide, _F2),  # numpy's + - * / and sqrt round to nearest, as IEEE requires
    "pow": (np.power, {**_F2, **_F_I32}),
    # (float, int32) -> float
    "ldexp": (np.ldexp, _F_I32),
}


def _libdevice_numpy_fn(name: str, compute: Callable[..., np.ndarray], signatures: dict[tuple[str, ...], str],
                        semantic: Any, handle_cls: Any) -> Callable[..., Any]:
    import triton.language as tl

    arity = len(next(iter(signatures)))

    def libdevice_fn(*args: Any, _semantic: Any = None) -> Any:
        if len(args) != arity:
            raise TypeError(f"libdevice.{name} takes {arity} arguments, got {len(args)}")
        tensors = [semantic.to_tensor(a) for a in args]
        if arity > 1:  # broadcast, without type promotion, as core.extern_elementwise does
            ref = tensors[0]
            for t in tensors[1:]:
                _, ref = semantic.binary_op_type_checking_impl(t, ref, arithmetic_check=False)
            tensors = [semantic.binary_op_type_checking_impl(t, ref, arithmetic_check=False)[0] for t in tensors]
        key = tuple(t.dtype.name for t in tensors)
        ret = signatures.get(key)
        if ret is None:
            raise ValueError(f"libdevice.{name} does not take dtypes {key}; expected one of {list(signatures)}")
        with np.errstate(all="ignore"):
            data = np.asarray(compute(*(t.handle.data for t in tensors))).astype(_NP_DTYPES[ret], copy=False)
        ret_dtype = tl.dtype(ret)
        block = next((t.type for t in tensors if t.type.is_block()), None)
        return tl.tensor(handle_cls(data, ret_dtype), block.with_element_ty(ret_dtype) if block else ret_dtype)

    libdevice_fn.__name__ = libdevice_fn.__qualname__ = name
    return libdevice_fn


def _fix_libdevice_math(interp: Any) -> list[tuple[Any, str, Any]]:
    # Why: triton.language.extra.libdevice holds stubs (`def rsqrt(arg0): ...`)
    # that the compiler replaces with a GPU backend's libdevice; the interpreter
    # does not, so they return None.  Bind them per launch, the way _patch_lang
    # binds tl.math: to tl.math's builtins where it has them, else to numpy.
    import triton.language as tl

    libdevice = _import_or_skip(_LIBDEVICE)
    semantic = _require(interp, "interpreter_semantic")
    handle_cls = _require(interp, "TensorHandle")
    original_patch_lang = _require(interp, "_patch_lang")
    scope_cls = _require(interp, "_LangPatchScope")
    _require(scope_cls, "set_attr")
    _require(scope_cls, "restore")
    _require(semantic, "to_tensor")
    _require(semantic, "binary_op_type_checking_impl")
    is_builtin = _require(_require(tl, "core"), "is_builtin")

    def is_stub(value: Any) -> bool:
        return inspect.isfunction(value) and value.__module__ == _LIBDEVICE and not is_builtin(value)

    def bind(builtin: Callable[..., Any]) -> Callable[..., Any]:
        def bound(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("_semantic", None)
            return builtin(*args, _semantic=semantic, **kwargs)

        return bound

    stubs: dict[str, Callable[..., Any]] = {}
    replacements: dict[str, Callable[..., Any]] = {}
    for name in _LIBDEVICE_VIA_TL_MATH:
        stub, builtin = getattr(libdevice, name, None), getattr(tl.math, name, None)
        if is_stub(stub) and builtin is not None and is_builtin(builtin):
            stubs[name], replacements[name] = stub, bind(builtin)
    for name, (compute, signatures) in _LIBDEVICE_NUMPY.items():
        stub = getattr(libdevice, name, None)
        if name not in stubs and is_stub(stub):
            stubs[name] = stub
            replacements[name] = _libdevice_numpy_fn(name, compute, signatures, semantic, handle_cls)
    if "rsqrt" not in stubs:
        raise _SkipFix(f"{_LIBDEVICE} has no stub functions to bind (rsqrt: {getattr(libdevice, 'rsqrt', None)!r})")
    by_id = {id(stub): name for name, stub in stubs.items()}
    # triton.language.extra imports its backends with module_from_spec, but
    # libdevice.py is a plain submodule; still, patch every distinct holder.
    extra = sys.modules.get("triton.language.extra")
    holders: list[Any] = []
    for module in (libdevice, getattr(extra, "libdevice", None)):
        if inspect.ismodule(module) and not any(module is h for h in holders):
            holders.append(module)

    # A device function called from a kernel goes through _patch_lang again and
    # the interpreter drops that scope without restoring it, so names it binds
    # go on the scope of the launch in progress, which is restored.
    launch: dict[str, Any] = {"scope": None}

    def launch_scope(scope: Any) -> Any:
        if launch["scope"] is not None:
            return launch["scope"]
        launch["scope"] = scope
        restore = scope.restore

        def restore_launch() -> None:
            if launch["scope"] is scope:
                launch["scope"] = None
            restore()

        scope.restore = restore_launch
        return scope

    def _patch_lang(fn: Any) -> Any:
        scope = original_patch_lang(fn)
        if scope is None:  # nothing to restore the patches with
            return scope
        target = launch_scope(scope)
        try:
            for module in holders:  # libdevice.rsqrt(x), tl.extra.libdevice.rsqrt(x)
                for name, stub in stubs.items():
                    if getattr(module, name, None) is stub:
                        target.set_attr(module, name, replacements[name])
            namespace = getattr(fn, "__globals__", {})
            for attr, value in list(namespace.items()):  # `from triton.language.extra.libdevice import rsqrt`
                name = by_id.get(id(value))
                if name is not None and value is stubs[name]:
                    target.set_attr(_GlobalsView(namespace), attr, replacements[name])
        except BaseException:
            scope.restore()  # the caller never sees the scope
            raise
        return scope

    _patch_lang.__wrapped__ = original_patch_lang  # type: ignore[attr-defined]
    return [(interp, "_patch_lang", _patch_lang)]


# ------------------------------------------------------------------ bf16 rounding

_BF16_CANONICAL_NAN = 0x7FFF  # what cvt.rn.bf16.f32 gives for any NaN on NVIDIA GPUs


def _f32_to_bf16_rne(data: np.ndarray) -> np.ndarray:
    """fp32 values -> bf16 bit patterns (uint16), rounded to nearest, ties to even.

    bf16 is the top half of an fp32, so adding 0x7FFF plus the lowest kept bit and
    dropping the low 16 bits rounds to nearest even; a carry out of the mantissa
    moves into the exponent, which is right (up to inf for the largest values),
    and subnormals need no special case.  NaN gets the GPU's canonical NaN.
    """
    values = np.asarray(data, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)  # no wrap-around for the largest NaN payloads
    rounded = ((bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16))
    return np.where(np.isnan(values), np.uint64(_BF16_CANONICAL_NAN), rounded).astype(np.uint16)


def _fix_bf16_rounding(interp: Any) -> list[tuple[Any, str, Any]]:
    # Why: InterpreterBuilder.cast_impl sends fp32 <-> bf16 to _convert_float with no
    # rounding mode, which truncates the mantissa (and mishandles NaN payloads and
    # subnormals).  create_fp_trunc (x.to(tl.bfloat16), stores into bf16 pointers,
    # bf16 constants) and create_fp_to_fp (fp16 <-> bf16, via fp32) all end in
    # cast_impl, so redo exactly these two conversions there and let every other
    # cast fall through.  (An explicit fp_downcast_rounding="rtz" goes through
    # create_fp_to_fp with RTZ, which truncates as asked, and is left alone.)
    import triton.language as tl

    builder_cls = _require(interp, "InterpreterBuilder")
    handle_cls = _require(interp, "TensorHandle")
    original = _require(builder_cls, "cast_impl")
    _require_params(original, ["self", "src", "dst_type"])

    def cast_impl(self: Any, src: Any, dst_type: Any, *args: Any, **kwargs: Any) -> Any:
        src_ty = getattr(getattr(src, "dtype", None), "scalar", None)
        dst_ty = getattr(dst_type, "scalar", None)
        data = getattr(src, "data", None)
        if isinstance(data, np.ndarray):
            if src_ty == tl.float32 and dst_ty == tl.bfloat16 and data.dtype == np.float32:
                return handle_cls(_f32_to_bf16_rne(data), dst_ty)
            if src_ty == tl.bfloat16 and dst_ty == tl.float32 and data.dtype == np.uint16:
                return handle_cls(_bf16_bits_to_f32(data), dst_ty)
        return original(self, src, dst_type, *args, **kwargs)

    cast_impl.__wrapped__ = original  # type: ignore[attr-defined]
    return [(builder_cls, "cast_impl", cast_impl)]


# ----------------------------------------------------------------------- tf32

_TF32_DROPPED_BITS = np.uint32(0x1FFF)  # fp32 keeps 23 mantissa bits, TF32 10: 13 dropped


def f32_to_tf32(data: np.ndarray) -> np.ndarray:
    """fp32 values as a tensor core reads them for a Triton tf32 dot: the 13 low mantissa bits
    cleared (round toward zero), NaNs kept (clearing a NaN's low payload could make it inf)."""
    values = np.asarray(data, dtype=np.float32)
    truncated = (values.view(np.uint32) & ~_TF32_DROPPED_BITS).view(np.float32)
    return np.where(np.isnan(values), values, truncated)


def _fix_tf32_dot(interp: Any) -> list[tuple[Any, str, Any]]:
    # Why: InterpreterBuilder.create_dot ignores input_precision and multiplies fp32 in fp32, so
    # a TF32 kernel's error (what the GPU computes) is invisible to CPU tests.  Reduce fp32
    # operands of a TF32 dot to TF32 before the original (and the bf16 fix) run.
    import triton.language as tl

    builder_cls = _require(interp, "InterpreterBuilder")
    handle_cls = _require(interp, "TensorHandle")
    ir = _require(interp, "_ir")
    tf32 = _require(_require(ir, "INPUT_PRECISION"), "TF32")
    original = _require(builder_cls, "create_dot")
    _require_params(original, ["self", "a", "b", "d", "input_precision"])

    def reduce(h: Any) -> Any:
        if getattr(h, "dtype", None) == tl.float32 and h.data.dtype == np.float32:
            return handle_cls(f32_to_tf32(h.data), tl.float32)
        return h

    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, *args: Any, **kwargs: Any) -> Any:
        if input_precision == tf32:
            a, b = reduce(a), reduce(b)
        return original(self, a, b, d, input_precision, *args, **kwargs)

    create_dot.__wrapped__ = original  # type: ignore[attr-defined]
    return [(builder_cls, "create_dot", create_dot)]


# ----------------------------------------------------------------------- public

_FIXES: dict[str, Callable[[Any], list[tuple[Any, str, Any]]]] = {
    "bf16_dot": _fix_bf16_dot,
    "nvfp4_dot_scaled": _fix_nvfp4_dot_scaled,
    "gdc_noop": _fix_gdc_noop,
    "libdevice_math": _fix_libdevice_math,
    "bf16_rounding": _fix_bf16_rounding,
    "tf32_dot": _fix_tf32_dot,
}


def apply_interpreter_fixes() -> list[str]:
    """Patch the Triton interpreter when ``TRITON_INTERPRET=1``; else do nothing.

    Idempotent.  Returns the names of the fixes in effect (``[]`` when the
    interpreter is not enabled).  A fix whose patch point is missing in the
    installed Triton is skipped with a warning.
    """
    if not _interpreter_enabled():
        return []
    with _lock:
        try:
            interp = importlib.import_module("triton.runtime.interpreter")
        except Exception as e:  # noqa: BLE001 - any import failure means "no interpreter"
            log.warning("Triton interpreter unavailable, no fixes applied: %s", e)
            return []
        for name, make in _FIXES.items():
            if name in _applied:
                continue
            try:
                patches = make(interp)
            except _SkipFix as e:
                log.warning("Skipping Triton interpreter fix %r: %s", name, e)
                continue
            except Exception as e:  # noqa: BLE001 - unknown internals must not break callers
                log.warning("Skipping Triton interpreter fix %r: unexpected %s: %s", name, type(e).__name__, e)
                continue
            undo = []
            for owner, attr, value in patches:
                undo.append((owner, attr, owner.__dict__.get(attr, _MISSING)))
                setattr(owner, attr, value)
            _applied[name] = undo
        return [name for name in _FIXES if name in _applied]


def _undo(name: str) -> None:
    for owner, attr, previous in reversed(_applied.pop(name)):
        if previous is _MISSING:
            with contextlib.suppress(AttributeError):
                delattr(owner, attr)
        else:
            setattr(owner, attr, previous)


def remove_interpreter_fixes() -> list[str]:
    """Undo every applied fix (meant for tests).  Returns the names removed."""
    with _lock:
        removed = list(_applied)
        for name in reversed(removed):
            _undo(name)
        return removed


@contextlib.contextmanager
def interpreter_fixes() -> Iterator[list[str]]:
    """Apply the fixes for the duration of a ``with`` block.

    Yields the names of the fixes in effect; on exit removes the fixes this
    block applied and leaves ones that were already in effect.
    """
    with _lock:
        before = set(_applied)
    names = apply_interpreter_fixes()
    try:
        yield names
    finally:
        with _lock:
            for name in reversed([n for n in _applied if n not in before]):
                _undo(name)
