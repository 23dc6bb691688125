"""One renderer of C-like kernel text, driven by tables; each dialect is a subclass that changes
a few tables (the shape tinygrad's ``renderer/cstyle.py`` uses): SYCL (``lang/sycl.py``, for the
SYCL codegen and template) and MSL (``lang/msl.py``, for the Metal templates; Metal's device
codegen is Inductor's own).

What a dialect decides: scalar type names, how a cast and a bit cast are written, float literals
and infinities, where math functions live, vector types, the kernel's barrier and work-group
(threadgroup) memory, and how buffer parameters are declared. Codegen and templates ask the
dialect instead of writing ``sycl::`` or ``metal::`` themselves, so both C++ dialects share every
rule that is not a spelling.

Dtypes are given as torch dtypes or their names ("float32", "bfloat16"); this module never
imports torch (templates run where torch is older).
"""

from __future__ import annotations

import math
from typing import Any

# Standard math functions by their C99 names, with the arity the codegen calls them with.
MATH_FUNCTIONS = {
    **dict.fromkeys((
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "cbrt",
        "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
        "erf", "erfc", "lgamma", "tgamma", "fabs", "floor", "ceil", "trunc", "rint", "round",
        "isnan", "isinf", "isfinite", "signbit"), 1),
    **dict.fromkeys(("pow", "fmod", "atan2", "copysign", "hypot", "nextafter", "fmin", "fmax", "ldexp"), 2),
    "fma": 3,
}

INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def dtype_name(dtype: Any) -> str:
    """"float32" for torch.float32 or "float32"; "float" and "half" are spelled out."""
    name = str(dtype).removeprefix("torch.")
    return {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32"}.get(name, name)


class CStyleLanguage:
    """The rules every C-like dialect shares; subclasses override the tables."""

    name = "c"
    type_names: dict[str, str] = {
        "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
        "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
        "uint64": "unsigned long long", "float32": "float", "float64": "double",
    }
    float_suffix = "f"  # float32 literals are single precision
    infinity = "INFINITY"
    nan = "NAN"
    math_prefix = ""  # namespace of the math functions ("sycl::", "metal::precise::")
    math_names: dict[str, str | None] = {}  # exceptions: C99 name -> dialect name (None: not available)
    vector_format = "{scalar}{n}"  # float4
    cast_format = "static_cast<{type}>({x})"
    bitcast_format = "__builtin_bit_cast({type}, {x})"
    barrier_statement = ""  # work-group barrier over local memory (fill in per dialect)
    restrict = "__restrict__"

    # ------------------------------------------------------------------------------- types

    def type_name(self, dtype: Any) -> str:
        name = dtype_name(dtype)
        if name not in self.type_names:
            raise ValueError(f"{self.name} has no type for dtype {name!r}; it has: {', '.join(self.type_names)}")
        return self.type_names[name]

    def vector_type(self, dtype: Any, n: int) -> str:
        if n not in (2, 3, 4, 8, 16):
            raise ValueError(f"{self.name} vectors have 2, 3, 4, 8 or 16 elements, not {n}")
        return self.vector_format.format(scalar=self.type_name(dtype), n=n)

    def cast(self, x: str, dtype: Any) -> str:
        return self.cast_format.format(type=self.type_name(dtype), x=x)

    def bitcast(self, x: str, dtype: Any) -> str:
        return self.bitcast_format.format(type=self.type_name(dtype), x=x)

    def widen(self, x: str, dtype: Any) -> str:
        """A ``dtype`` value (loaded from memory) as the fp32 it is computed in."""
        return self.cast(x, "float32")

    # ---------------------------------------------------------------------------- literals

    def literal(self, value: bool | int | float, dtype: Any = None) -> str:
        """``value`` as a literal of ``dtype`` (by default: what Python's type suggests)."""
        name = dtype_name(dtype) if dtype is not None else None
        if isinstance(value, bool) or name == "bool":
            return "true" if value else "false"
        is_float = name in FLOAT_DTYPES if name else isinstance(value, float)
        if not is_float:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(f"{value!r} is not a {name} value")
            text = str(int(value))
            return text + ("LL" if name in ("int64",) and abs(int(value)) >= 2**31 else "")
        value = float(value)
        if math.isnan(value):
            return self.nan
        if math.isinf(value):
            return self.infinity if value > 0 else f"-{self.infinity}"
        text = repr(value)  # shortest text that round-trips
        if "e" not in text and "." not in text:
            text += ".0"
        if name == "float64":
            return text
        single = f"{text}{self.float_suffix}"
        return single if name in (None, "float32") else self.cast(single, name)

    # ------------------------------------------------------------------------------- math

    def math_function(self, op: str) -> str | None:
        """The dialect's name for C99 math function ``op`` (None: this dialect lacks it)."""
        if op not in MATH_FUNCTIONS:
            raise ValueError(f"{op!r} is not a known math function: {', '.join(sorted(MATH_FUNCTIONS))}")
        if op in self.math_names:
            return self.math_names[op]
        return f"{self.math_prefix}{op}"

    def math(self, op: str, *args: str) -> str:
        fn = self.math_function(op)
        if fn is None:
            raise NotImplementedError(f"{self.name} has no {op}()")
        if len(args) != MATH_FUNCTIONS[op]:
            raise ValueError(f"{op}() takes {MATH_FUNCTIONS[op]} arguments, got {len(args)}")
        return f"{fn}({', '.join(args)})"

    # --------------------------------------------------------------------- kernel structure

    def pointer_param(self, dtype: Any, name: str, *, const: bool) -> str:
        """A global-memory buffer parameter."""
        qualifier = "const " if const else ""
        return f"{qualifier}{self.type_name(dtype)}* {self.restrict} {name}"

    def scalar_param(self, dtype: Any, name: str) -> str:
        return f"{self.type_name(dtype)} {name}"

    def local_array(self, dtype: Any, name: str, count: int) -> str:
        """A statement declaring work-group memory of ``count`` elements named ``name``."""
        raise NotImplementedError(f"{self.name} declares no work-group memory")
