"""Sympy index and size expressions as SYCL device code.

Starts from Inductor's C++ printer and replaces what does not exist in device code (``c10::``
helpers, ``std::`` math, doubles, which some Intel GPUs lack): floor division and Python modulo
go through ``ext::`` helpers unless the operands are known non-negative, math through ``sycl::``.
"""

from __future__ import annotations

import sympy
from torch.utils._sympy.printers import CppPrinter

from inductor_ext.templates.lang.sycl import SYCL


def _nonnegative(*exprs: sympy.Expr) -> bool:
    return all(bool(e.is_nonnegative) for e in exprs)


class SyclExprPrinter(CppPrinter):
    def _print_Integer(self, expr: sympy.Expr) -> str:
        return str(int(expr)) + ("L" if abs(int(expr)) >= 2**31 else "")

    def _print_FloorDiv(self, expr: sympy.Expr) -> str:
        x, div = expr.args
        if not expr.is_integer:
            return f"sycl::floor(({self.doprint(x)}) / ({self.doprint(div)}))"
        if _nonnegative(x) and bool(div.is_positive):
            return f"(({self.doprint(x)}) / ({self.doprint(div)}))"
        return f"ext::floordiv({self.doprint(x)}, {self.doprint(div)})"

    _print_CleanDiv = _print_FloorDiv

    def _print_ModularIndexing(self, expr: sympy.Expr) -> str:
        # Inductor builds ModularIndexing only for non-negative indices.
        x, div, mod = expr.args
        text = self.doprint(x)
        if div != 1:
            text = f"({text}) / ({self.doprint(div)})"
        return f"(({text}) % ({self.doprint(mod)}))"

    def _print_PythonMod(self, expr: sympy.Expr) -> str:
        x, div = expr.args
        if _nonnegative(x) and bool(div.is_positive):
            return f"(({self.doprint(x)}) % ({self.doprint(div)}))"
        return f"ext::remainder({self.doprint(x)}, {self.doprint(div)})"

    def _print_Where(self, expr: sympy.Expr) -> str:
        c, p, q = (self.doprint(a) for a in expr.args)
        return f"(({c}) ? ({p}) : ({q}))"

    def _print_min_max(self, expr: sympy.Expr, name: str) -> str:
        args = [self.doprint(a) for a in expr.args]
        result = args[0]
        for arg in args[1:]:
            result = f"ext::{name}imum({result}, {arg})"
        return result

    def _print_Abs(self, expr: sympy.Expr) -> str:
        (x,) = expr.args
        text = self.doprint(x)
        return f"sycl::abs({text})" if x.is_integer else f"sycl::fabs({text})"

    def _unary(self, fn: str, expr: sympy.Expr, to_int: bool = False) -> str:
        (x,) = expr.args
        text = f"{fn}(static_cast<float>({self.doprint(x)}))"
        return f"static_cast<int64_t>({text})" if to_int or expr.is_integer else text

    def _print_ToFloat(self, expr: sympy.Expr) -> str:
        return f"static_cast<float>({self.doprint(expr.args[0])})"

    def _print_IntTrueDiv(self, expr: sympy.Expr) -> str:
        lhs, rhs = expr.args
        return f"static_cast<float>({self.doprint(lhs)}) / static_cast<float>({self.doprint(rhs)})"

    _print_FloatTrueDiv = _print_IntTrueDiv

    def _print_PowByNatural(self, expr: sympy.Expr) -> str:
        base, exp = expr.args
        if exp.is_Integer and 0 <= int(exp) <= 8:
            return "(" + " * ".join([f"({self.doprint(base)})"] * int(exp) or ["1"]) + ")"
        return f"static_cast<int64_t>(sycl::pown(static_cast<float>({self.doprint(base)}), {self.doprint(exp)}))"

    def _print_FloatPow(self, expr: sympy.Expr) -> str:
        base, exp = expr.args
        return f"sycl::pow(static_cast<float>({self.doprint(base)}), static_cast<float>({self.doprint(exp)}))"

    def _print_Rational(self, expr: sympy.Expr) -> str:
        return f"({expr.p}.0f / {expr.q}.0f)" if expr.q != 1 else str(expr.p)

    def _print_Float(self, expr: sympy.Expr) -> str:
        return SYCL.literal(float(expr), "float32")

    def _print_Infinity(self, expr: sympy.Expr) -> str:
        return SYCL.infinity

    def _print_NegativeInfinity(self, expr: sympy.Expr) -> str:
        return f"-{SYCL.infinity}"

    def _print_NaN(self, expr: sympy.Expr) -> str:
        return SYCL.nan


# sympy function -> (SYCL builtin, result is an index)
_UNARY = {
    "floor": ("floor", False), "FloorToInt": ("floor", True), "ceiling": ("ceil", False),
    "CeilToInt": ("ceil", True), "TruncToInt": ("trunc", True), "TruncToFloat": ("trunc", False),
    "RoundToInt": ("rint", True),
    **{f"OpaqueUnaryFn_{fn}": (fn, False) for fn in ("cos", "cosh", "acos", "sin", "sinh", "asin", "tan", "tanh",
                                                     "atan", "exp", "log", "sqrt", "log2")},
}
for _name, (_fn, _to_int) in _UNARY.items():
    setattr(SyclExprPrinter, f"_print_{_name}",
            lambda self, expr, _fn=_fn, _to_int=_to_int: self._unary(f"sycl::{_fn}", expr, _to_int))
