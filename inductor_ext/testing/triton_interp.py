"""Targeted fixes for bugs in Triton's CPU interpreter (``TRITON_INTERPRET=1``).

Triton 3.9's interpreter (``triton/runtime/interpreter.py``) gets three things
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

Each fix wraps or adds one small interpreter function. A fix whose patch point
is missing (other Triton versions) is skipped with a logged warning.

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


# ----------------------------------------------------------------------- public

_FIXES: dict[str, Callable[[Any], list[tuple[Any, str, Any]]]] = {
    "bf16_dot": _fix_bf16_dot,
    "nvfp4_dot_scaled": _fix_nvfp4_dot_scaled,
    "gdc_noop": _fix_gdc_noop,
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
