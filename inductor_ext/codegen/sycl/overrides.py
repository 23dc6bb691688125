"""Inductor's pointwise ops as SYCL expressions.

Values are computed in fp32 (fp16/bf16 loads are widened, stores narrow again), as Inductor's
other backends do. Spellings come from the SYCL dialect table (``templates/lang/sycl.py``);
what C++ does not mean the way torch does (NaN-propagating min/max, floor division, Python
remainder) comes from the ``ext::`` helpers. Ops without a SYCL form (special functions, random
numbers) are left unimplemented, so Inductor reports them instead of computing something else.
"""

from __future__ import annotations

import itertools
from typing import Any

import sympy
import torch
from torch._inductor.codegen.common import CSEVariable, IndentedBuffer, OpOverrides
from torch._inductor.utils import get_bounds_index_expr
from torch._inductor.virtualized import V, ops

from inductor_ext.templates.lang.sycl import SYCL

# Unary math ops that map one-to-one onto SYCL builtins.
UNARY_MATH = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
              "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma",
              "floor", "ceil", "trunc", "signbit", "isnan", "isinf")
BINARY_MATH = ("atan2", "copysign", "hypot", "nextafter", "pow", "fmod")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a value of ``dtype`` is held in inside a kernel."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _paren(x: Any) -> str:
    return f"({x})"


def _any_floating(*values: Any) -> bool:
    return any(getattr(v, "dtype", None) is not None and v.dtype.is_floating_point for v in values)


def _floating(x: Any) -> str:
    """``x`` as a floating-point argument of a math builtin: integers become fp32, fp64 stays."""
    dtype = getattr(x, "dtype", None)
    return str(x) if dtype is not None and dtype.is_floating_point else f"static_cast<float>({x})"


class SyclOverrides(OpOverrides):
    @staticmethod
    def constant(value: bool | float | int, dtype: torch.dtype) -> str:
        return SYCL.literal(value, compute_dtype(dtype))

    @staticmethod
    def to_dtype(x: CSEVariable, dtype: torch.dtype, src_dtype: torch.dtype | None = None,
                 use_compute_types: bool = True) -> str:
        if dtype == torch.bool:
            return f"({x} != 0)"
        if dtype == torch.uint8 and (src_dtype is None or src_dtype.is_floating_point):
            # float -> uint8 of a negative value is undefined in C++; torch wraps like int16 -> uint8
            return f"static_cast<uint8_t>(static_cast<int16_t>({x}))"
        if dtype in (torch.float16, torch.bfloat16):
            # round to the narrow type, then keep computing in fp32
            return SYCL.widen(SYCL.cast(f"static_cast<float>({x})", dtype), dtype)
        return SYCL.cast(str(x), dtype)

    @staticmethod
    def to_dtype_bitcast(x: CSEVariable, dtype: torch.dtype, src_dtype: torch.dtype) -> str:
        value = SYCL.cast(str(x), src_dtype) if compute_dtype(src_dtype) != src_dtype else str(x)
        out = SYCL.bitcast(value, dtype)
        return SYCL.widen(out, dtype) if compute_dtype(dtype) != dtype else out

    @staticmethod
    def index_expr(expr: sympy.Expr, dtype: torch.dtype) -> str:
        index = V.kernel.index_to_str(V.kernel.prepare_indexing(expr))
        var = V.kernel.cse.generate(V.kernel.compute, index, bounds=get_bounds_index_expr(expr), dtype=torch.int64)
        return ops.to_dtype(var, dtype)

    @staticmethod
    def value_expr(expr: sympy.Expr, dtype: torch.dtype) -> str:
        return SyclOverrides.index_expr(expr, dtype)

    @staticmethod
    def masked(mask: CSEVariable, body: Any, other: Any) -> CSEVariable:
        """``body()`` only where ``mask`` holds (its loads may be out of bounds elsewhere), else
        ``other``: a lambda called under the condition, so its type is the body's type."""
        kernel = V.kernel
        scoped = IndentedBuffer()
        with kernel.swap_buffers(scoped):
            kernel.cse.iter_buffer_ids = itertools.count()  # same body -> same text -> same cache key
            kernel.cse.name_prefix += "_scoped"
            result = body()
        other_text = SYCL.literal(other) if isinstance(other, (bool, int, float)) else str(other)
        key = f"masked:{mask}:{scoped.getvalue()}:{result}:{other_text}"
        var = kernel.cse.try_get(key)
        if var is None:
            var = kernel.cse.newvar(dtype=result.dtype)
            kernel.cse.put(key, var)
            kernel.compute.writeline(f"auto {var}_body = [&]() {{")
            with kernel.compute.indent():
                kernel.compute.splice(scoped)
                kernel.compute.writeline(f"return {result};")
            kernel.compute.writeline("};")
            kernel.compute.writeline(
                f"auto {var} = ({mask}) ? {var}_body() : static_cast<decltype({var}_body())>({other_text});")
        return var

    @staticmethod
    def where(condition: Any, a: Any, b: Any) -> str:
        return f"({condition}) ? ({a}) : ({b})"

    @staticmethod
    def neg(x: Any) -> str:
        return f"-{_paren(x)}"

    @staticmethod
    def abs(x: Any) -> str:
        return SYCL.math("fabs", str(x)) if _any_floating(x) or getattr(x, "dtype", None) is None else f"sycl::abs({x})"

    @staticmethod
    def truncdiv(a: Any, b: Any) -> str:
        return SYCL.math("trunc", f"{a} / {b}") if _any_floating(a, b) else f"{_paren(a)} / {_paren(b)}"

    @staticmethod
    def mod(a: Any, b: Any) -> str:
        return SYCL.math("fmod", str(a), str(b)) if _any_floating(a, b) else f"{_paren(a)} % {_paren(b)}"

    @staticmethod
    def fma(x: Any, y: Any, z: Any) -> str:
        return SYCL.math("fma", _floating(x), _floating(y), _floating(z))

    @staticmethod
    def ldexp(x: Any, n: Any) -> str:
        return f"sycl::ldexp({_floating(x)}, static_cast<int>({n}))"

    @staticmethod
    def sign(x: Any) -> str:
        return f"static_cast<decltype({x})>(({x} > 0) - ({x} < 0))"

    @staticmethod
    def logical_xor(a: Any, b: Any) -> str:
        return f"static_cast<bool>({a}) != static_cast<bool>({b})"

    @staticmethod
    def sigmoid(x: Any) -> str:
        return f"1.0f / (1.0f + sycl::exp(-{_floating(x)}))"


def _math_op(fn: str, arity: int) -> Any:
    def op(*args: Any) -> str:
        return SYCL.math(fn, *(_floating(a) for a in args[:arity]))

    return staticmethod(op)


# torch semantics C++ lacks: ext:: helpers (NaN-propagating min/max, Python // and %)
for _name in ("maximum", "minimum", "floordiv", "remainder"):
    setattr(SyclOverrides, _name, staticmethod(lambda a, b, _name=_name: f"ext::{_name}({a}, {b})"))
SyclOverrides.logical_and = staticmethod(lambda a, b: f"{_paren(a)} && {_paren(b)}")  # type: ignore[assignment]
SyclOverrides.logical_or = staticmethod(lambda a, b: f"{_paren(a)} || {_paren(b)}")  # type: ignore[assignment]
SyclOverrides.logical_not = staticmethod(lambda a: f"!{_paren(a)}")  # type: ignore[assignment]
for _name in UNARY_MATH:
    setattr(SyclOverrides, _name, _math_op(_name, 1))
for _name in BINARY_MATH:
    setattr(SyclOverrides, _name, _math_op(_name, 2))
SyclOverrides.round = _math_op("rint", 1)  # type: ignore[assignment]  # torch.round: half to even
