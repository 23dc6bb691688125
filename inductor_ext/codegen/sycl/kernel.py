"""One SYCL free-function kernel from Inductor's loop IR (a fused group of scheduler nodes).

Work mapping, chosen per kernel (:func:`choose_layout`):

- ``pointwise``: one work-item per output element, 1-D nd_range rounded up to the work-group;
  work-items past the end return at once (no barrier follows).
- ``serial`` reductions (short reduction ranges): one work-item per output row, looping over the
  whole reduction itself; no barrier either.
- ``group`` reductions: one work-group per output row; its work-items stride over the reduction
  range, then combine with ``ext::group_*`` (sub-group first, then one partial per sub-group in
  work-group local memory). The global size is exactly rows x work-group, nothing returns early
  and every barrier sits at kernel scope, so barriers are in uniform control flow by
  construction (a barrier some work-items skip silently gives wrong results on the CPU device).

Inductor hands a reduction kernel as segments (``codegen_body`` flushes): loops over the
reduction range separated by code at row scope (reduction results, per-row stores). Each loop
declares its accumulators right before it; results live at kernel scope, so later loops (softmax's
normalisation, layernorm's scale) read them. Values a row-scope store wrote and a later segment
reloads are fenced with a kernel-scope barrier: only work-item 0 of the group stores them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch._inductor.codegen.common import CSEVariable, DeferredLine, IndentedBuffer, PythonPrinter
from torch._inductor.codegen.simd import IterationRangesEntry, SIMDKernel
from torch._inductor.ops_handler import ReductionType, StoreMode
from torch._inductor.utils import DeferredLineBase
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from inductor_ext.codegen.sycl.overrides import SyclOverrides, compute_dtype
from inductor_ext.codegen.sycl.printer import SyclExprPrinter
from inductor_ext.targets.intel import SYCL_SUB_GROUP_SIZE, SYCL_WORK_GROUP_LIMIT
from inductor_ext.templates.lang.sycl import SYCL

PLACEHOLDER_NAME = "SYCL_KERNEL_NAME"
POINTWISE_WORK_GROUP = 256
GROUP_REDUCTION_MIN = 64  # shorter reduction ranges run serially, one work-item per row
ITEM = "item"
LOCAL_ID = "r0_lid"


class FenceLine(DeferredLineBase):
    """A barrier that orders row-scope stores before later reloads; dropped when every buffer
    those stores wrote was removed from the graph (then nothing reloads them)."""

    def __init__(self, names: tuple[str, ...], line: str) -> None:
        super().__init__(line)
        self.names = names

    def __call__(self) -> str | None:
        from torch._inductor.codegen.common import is_buffer_removed

        return self.line if not all(is_buffer_removed(n) for n in self.names) else None

    def _new_line(self, line: str) -> "FenceLine":
        return FenceLine(self.names, line)


@dataclass(frozen=True)
class Layout:
    mode: str  # "pointwise", "serial" or "group"
    work_group: int


def _next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def choose_layout(is_reduction: bool, rnumel: sympy.Expr) -> Layout:
    if not is_reduction:
        return Layout("pointwise", POINTWISE_WORK_GROUP)
    if isinstance(rnumel, (int, sympy.Integer)):
        if int(rnumel) < GROUP_REDUCTION_MIN:
            return Layout("serial", POINTWISE_WORK_GROUP)
        # A multiple of the sub-group size, at most the limit: every sub-group is full.
        return Layout("group", max(GROUP_REDUCTION_MIN, min(SYCL_WORK_GROUP_LIMIT, _next_power_of_2(int(rnumel)))))
    return Layout("group", SYCL_WORK_GROUP_LIMIT)


@dataclass(frozen=True)
class _Reduction:
    init: str  # C++ initialiser of the accumulator, {T}: its type
    update: str  # statement folding {v} into {acc}
    group: str  # ext:: work-group combine


def _extreme_init(dtype: torch.dtype, value: float) -> str:
    """+-infinity for floats (so max of all -inf is -inf), the type's limits for integers."""
    return SYCL.literal(value, dtype) if dtype.is_floating_point else (
        f"std::numeric_limits<{SYCL.type_name(dtype)}>::{'lowest' if value < 0 else 'max'}()")


class SyclKernel(SIMDKernel):
    overrides = SyclOverrides  # type: ignore[assignment]
    suffix = ";"
    newvar_prefix = "auto "
    sexpr = SyclExprPrinter().doprint
    kexpr = sexpr
    pexpr = PythonPrinter().doprint

    def __init__(self, tiling: dict[str, sympy.Expr], **kwargs: Any) -> None:
        super().__init__(tiling, **kwargs)
        trees = [t.prefix for t in self.range_trees]
        if trees not in (["x"], ["x", "r0_"]):
            raise NotImplementedError(f"SYCL codegen handles an x range and one reduction range, got {trees}")
        self.layout = choose_layout(self.features.is_reduction(), self.numels.get("r0_", sympy.S.One))
        self.loop_header = IndentedBuffer()  # reduction-index definitions inside the current loop
        self.pre_loop = IndentedBuffer()  # accumulators of the current loop
        self.local_memory = IndentedBuffer()  # work-group memory, declared at kernel scope
        self.ids = itertools.count()
        # buffers of row-scope stores (written by one work-item) that a later segment may reload
        self.fence_pending: tuple[str, ...] = ()
        self.row_stores_in_segment: list[str] = []
        self.ndim = 1

    # ------------------------------------------------------------------------ indexing

    def dtype_to_str(self, dtype: torch.dtype) -> str:
        return SYCL.type_name(dtype)

    @property
    def index_dtype(self) -> str:
        return "int64_t"

    def codegen_iteration_ranges_entry(self, entry: IterationRangesEntry) -> None:
        line = f"const int64_t {entry.name} = {self.sexpr(self.rename_indexing(entry.expr))};"
        # Reduction indices change every loop iteration; row indices are computed once.
        (self.loop_header if entry.root.is_reduction else self.body).writeline(line)

    def numel_str(self, prefix: str) -> str:
        return self.sexpr(self.rename_indexing(self.numels[prefix]))

    # ------------------------------------------------------------------------ memory

    def load(self, name: str, index: sympy.Expr) -> CSEVariable:
        var = self.args.input(name)
        index = self.prepare_indexing(index)
        dtype = V.graph.get_dtype(name)
        line = f"{var}[{self.index_to_str(index)}]"
        if compute_dtype(dtype) != dtype:
            line = SYCL.widen(line, dtype)
        return self.cse.generate(self.loads, line, dtype=compute_dtype(dtype))

    def store(self, name: str, index: sympy.Expr, value: CSEVariable, mode: StoreMode = None) -> None:
        var = self.args.output(name)
        index = self.prepare_indexing(index)
        dtype = V.graph.get_dtype(name)
        target = f"{var}[{self.index_to_str(index)}]"
        if mode is None:
            line = f"{target} = {SYCL.cast(str(value), dtype)};"
        elif mode == "atomic_add":
            if dtype not in (torch.float32, torch.int32, torch.int64):
                raise NotImplementedError(f"SYCL codegen: atomic_add on {dtype}")
            line = (f"sycl::atomic_ref<{SYCL.type_name(dtype)}, sycl::memory_order::relaxed, "
                    f"sycl::memory_scope::device>({target}).fetch_add({SYCL.cast(str(value), dtype)});")
        else:
            raise NotImplementedError(f"SYCL codegen: store mode {mode}")
        if self.inside_reduction:
            self.compute.writeline(DeferredLine(name, line))
            return
        if self.layout.mode == "group":
            # Row-scope value: every work-item of the group holds it, one writes it.
            line = f"if ({LOCAL_ID} == 0) {line}"
            self.row_stores_in_segment.append(name)
        self.stores.writeline(DeferredLine(name, line))

    # ------------------------------------------------------------------------ reductions

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: ReductionType,
                  value: CSEVariable | tuple[CSEVariable, ...]) -> CSEVariable | tuple[CSEVariable, ...]:
        key = (src_dtype, reduction_type, value)
        if key not in self.cse.reduction_cache:
            result = self._reduction(dtype, src_dtype, reduction_type, value)
            self.cse.reduction_cache[key] = result  # type: ignore[assignment]
        return self.cse.reduction_cache[key]

    def _accumulator(self, type_name: str, init: str, scratch_type: str | None = None) -> tuple[str, str | None]:
        n = next(self.ids)
        acc = f"acc{n}"
        self.pre_loop.writeline(f"{type_name} {acc} = {init};")
        scratch = None
        if self.layout.mode == "group":
            scratch = f"scratch{n}"
            count = self.layout.work_group // SYCL_SUB_GROUP_SIZE
            self.local_memory.writeline(
                f"auto& {scratch} = *sycl::ext::oneapi::group_local_memory_for_overwrite<"
                f"{scratch_type or type_name}[{count}]>({ITEM}.get_group());")
        return acc, scratch

    def _combined(self, acc: str, scratch: str | None, group_fn: str, dtype: torch.dtype) -> CSEVariable:
        text = f"{group_fn}({ITEM}, {scratch}, {acc})" if scratch else acc
        return self.cse.generate(self.stores, text, dtype=dtype)

    def _reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: ReductionType,
                   value: Any) -> CSEVariable | tuple[CSEVariable, ...]:
        if not self.inside_reduction:
            raise AssertionError("reduction outside a reduction kernel")
        if reduction_type in ("welford_reduce", "welford_combine"):
            acc, scratch = self._accumulator("ext::Welford", "{0.0f, 0.0f, 0.0f}")
            if reduction_type == "welford_reduce":
                self.compute.writeline(f"{acc} = ext::welford_add({acc}, static_cast<float>({value}));")
            else:
                mean, m2, weight = value
                self.compute.writeline(f"{acc} = ext::welford_combine({acc}, ext::Welford{{static_cast<float>({mean}), "
                                       f"static_cast<float>({m2}), static_cast<float>({weight})}});")
            result = self._combined(acc, scratch, "ext::group_welford", torch.float32)
            return tuple(CSEVariable(f"{result}.{field}", result.bounds, torch.float32)
                         for field in ("mean", "m2", "weight"))
        if reduction_type in ("argmax", "argmin"):
            value, index = value if isinstance(value, tuple) else (value, "r0_index")
            vtype = SYCL.type_name(compute_dtype(src_dtype))
            worst = float("-inf") if reduction_type == "argmax" else float("inf")
            init = _extreme_init(compute_dtype(src_dtype), worst)
            acc, scratch = self._accumulator(f"ext::ArgPair<{vtype}>", f"{{{init}, 0}}")
            self.compute.writeline(f"{acc} = ext::{reduction_type}_combine({acc}, ext::ArgPair<{vtype}>"
                                   f"{{static_cast<{vtype}>({value}), static_cast<int64_t>({index})}});")
            pair = self._combined(acc, scratch, f"ext::group_{reduction_type}", dtype)
            return self.cse.generate(self.stores, f"{pair}.index", dtype=dtype)
        acc_dtype = compute_dtype(dtype) if reduction_type not in ("max", "min") else compute_dtype(src_dtype)
        if reduction_type == "any":
            acc_dtype = torch.bool
        type_name = SYCL.type_name(acc_dtype)
        table = {
            "sum": _Reduction(SYCL.literal(0, acc_dtype), "{acc} = {acc} + {v};", "ext::group_sum"),
            "prod": _Reduction(SYCL.literal(1, acc_dtype), "{acc} = {acc} * {v};", "ext::group_prod"),
            "xor_sum": _Reduction("0", "{acc} = {acc} ^ {v};", "ext::group_xor_sum"),
            "any": _Reduction("false", "{acc} = {acc} || static_cast<bool>({v});", "ext::group_any"),
            "max": _Reduction(_extreme_init(acc_dtype, float("-inf")), "{acc} = ext::maximum({acc}, {v});",
                              "ext::group_max"),
            "min": _Reduction(_extreme_init(acc_dtype, float("inf")), "{acc} = ext::minimum({acc}, {v});",
                              "ext::group_min"),
        }
        if reduction_type not in table:
            raise NotImplementedError(f"SYCL codegen: {reduction_type} reduction")
        spec = table[reduction_type]
        acc, scratch = self._accumulator(type_name, spec.init)
        self.compute.writeline(spec.update.format(acc=acc, v=f"static_cast<{type_name}>({value})"))
        return self._combined(acc, scratch, spec.group, acc_dtype)

    # ------------------------------------------------------------------------ assembly

    def _reduction_loop_bounds(self) -> tuple[str, str]:
        if self.layout.mode == "group":
            return LOCAL_ID, str(self.layout.work_group)
        return "0", "1"

    def codegen_body(self) -> None:
        """Flush the pending code as one segment: a reduction loop (inside a reduction) or
        row-scope code."""
        if not any(buf.getvalue().strip() for buf in (self.loop_header, self.loads, self.compute, self.stores,
                                                       self.pre_loop)):
            return
        if self.fence_pending:
            fence = f"{SYCL.barrier(ITEM)}  // orders the row-scope stores above"
            self.body.writeline(FenceLine(self.fence_pending, fence))
            self.fence_pending = ()
        if self.inside_reduction and self.features.is_reduction():
            start, step = self._reduction_loop_bounds()
            self.body.splice(self.pre_loop)
            step_text = "++r0_index" if step == "1" else f"r0_index += {step}"
            self.body.writeline(f"for (int64_t r0_index = {start}; r0_index < r0_numel; {step_text}) {{")
            with self.body.indent():
                self.body.splice(self.loop_header)
                self.body.splice(self.loads)
                self.body.splice(self.compute)
            self.body.writeline("}")
            self.body.splice(self.stores)
            # Loop variables are gone; reduction results (kernel scope) stay usable.
            keep = OrderedSet(v for item in self.cse.reduction_cache.values()
                              for v in (item if isinstance(item, tuple) else (item,)))
            self.cse.invalidate(keep)
            for tree in self.range_trees:
                if tree.is_reduction:
                    tree.cache_clear()
        else:
            self.body.splice(self.loads)
            self.body.splice(self.compute)
            self.body.splice(self.stores)
        self.fence_pending, self.row_stores_in_segment = tuple(self.row_stores_in_segment), []
        for buf in (self.loop_header, self.loads, self.compute, self.stores, self.pre_loop):
            buf.clear()

    def codegen_kernel(self, name: str | None = None) -> str:
        self.codegen_body()
        self.fence_pending = ()  # nothing reads after the last segment
        preamble = IndentedBuffer()
        preamble.writeline(SYCL.nd_item(self.ndim, ITEM))
        preamble.splice(self.local_memory)
        preamble.writeline(f"const int64_t xnumel = {self.numel_str('x')};")
        if self.features.is_reduction():
            preamble.writeline(f"const int64_t r0_numel = {self.numel_str('r0_')};")
        if self.layout.mode == "group":
            preamble.writeline(f"const int64_t xindex = {ITEM}.get_group_linear_id();")
            preamble.writeline(f"const int64_t {LOCAL_ID} = {ITEM}.get_local_linear_id();")
        else:
            preamble.writeline(f"const int64_t xindex = {ITEM}.get_global_linear_id();")
            preamble.writeline("if (xindex >= xnumel) return;  // no barrier in this kernel")

        arg_defs, _, _, arg_types = self.args.python_argdefs()
        params = []
        for arg, arg_type in zip(arg_defs, arg_types):
            if isinstance(arg_type, torch.dtype):
                params.append(SYCL.pointer_param(arg_type, arg.name, const=arg.name.startswith("in_ptr")))
            else:
                params.append(SYCL.scalar_param(torch.int64, arg.name))
        sub_group = SYCL_SUB_GROUP_SIZE if self.layout.mode == "group" else None
        code = IndentedBuffer()
        code.writeline(SYCL.kernel_signature(name or PLACEHOLDER_NAME, params, self.ndim, sub_group) + " {")
        with code.indent():
            code.splice(preamble)
            code.splice(self.indexing_code)
            code.splice(self.body)
        code.writeline("}")
        return code.getvalue()

    def param_kinds(self) -> list[str]:
        _, _, _, arg_types = self.args.python_argdefs()
        return ["ptr" if isinstance(t, torch.dtype) else "i64" for t in arg_types]

    def launch_sizes(self) -> tuple[str, str]:
        """Python expressions of the global and local size, evaluated in the wrapper."""
        wrapper = V.graph.wrapper_code
        xnumel = self.numels["x"]
        for symbol in sympy.sympify(xnumel).free_symbols:
            wrapper.ensure_size_computed(symbol)
        if self.layout.mode == "group":
            return f"{self.pexpr(xnumel)} * {self.layout.work_group}", str(self.layout.work_group)
        if isinstance(xnumel, (int, sympy.Integer)):
            local = min(self.layout.work_group, _next_power_of_2(int(xnumel)))
            return str(-(-int(xnumel) // local) * local), str(local)
        local = self.layout.work_group
        return f"-(-({self.pexpr(xnumel)}) // {local}) * {local}", str(local)

    def call_kernel(self, name: str, node: Any = None, deallocate_ws: bool = True) -> None:
        wrapper = V.graph.wrapper_code
        _, call_args, _, arg_types = self.args.python_argdefs()
        call_args = [a if isinstance(a, str) else self.pexpr(a) for a in call_args]  # sizes are sympy
        global_size, local_size = self.launch_sizes()
        wrapper.generate_kernel_call(
            name, [*call_args, f"global_size=({global_size},)", f"local_size=({local_size},)"],
            device=V.graph.get_current_device_or_throw(), triton=False, arg_types=[*arg_types, None, None])

    def check_bounds(self, expr: sympy.Expr, size: sympy.Expr, lower: bool, upper: bool) -> None:
        # No device-side assert: a return here could skip a barrier. Out-of-range indices are
        # the caller's error, as with Inductor's C++ backend without bounds checks.
        return
