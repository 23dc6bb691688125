"""The SYCL dialect (SYCL 2020 + oneAPI extensions, free-function kernels) and ``HELPERS``, the
small header every ext SYCL kernel includes (``#include "inductor_ext_sycl.h"``).

The helpers hold what C++ does not spell the way torch means it: bf16 conversions by bits,
NaN-propagating min/max, floor division and Python-style remainder, Welford and arg-max/arg-min
combines, and work-group
reductions in two stages (within a sub-group with ``reduce_over_group`` or an xor butterfly,
then across sub-groups through work-group local memory). Every work-item gets the same result.
"""

from __future__ import annotations

from typing import Any

from inductor_ext.templates.lang.cstyle import CStyleLanguage, dtype_name

HELPERS_NAME = "inductor_ext_sycl.h"


class SyclLanguage(CStyleLanguage):
    name = "sycl"
    type_names = {
        "bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
        "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
        "float16": "sycl::half", "bfloat16": "sycl::ext::oneapi::bfloat16", "float32": "float",
        "float64": "double",
    }
    math_prefix = "sycl::"
    vector_format = "sycl::vec<{scalar}, {n}>"
    bitcast_format = "sycl::bit_cast<{type}>({x})"
    restrict = "__restrict__"

    def cast(self, x: str, dtype: Any) -> str:
        # SYCL's own bf16 conversions link a device library (see runtime/sycl/program.py): bits instead
        return f"ext::float_to_bf16({x})" if dtype_name(dtype) == "bfloat16" else super().cast(x, dtype)

    def widen(self, x: str, dtype: Any) -> str:
        return f"ext::bf16_to_float({x})" if dtype_name(dtype) == "bfloat16" else super().widen(x, dtype)

    def barrier(self, item: str = "item") -> str:
        return f"sycl::group_barrier({item}.get_group());"

    def local_array(self, dtype: Any, name: str, count: int, item: str = "item") -> str:
        # Static work-group memory: sized at compile time, declared at kernel scope.
        return (f"auto& {name} = *sycl::ext::oneapi::group_local_memory_for_overwrite<"
                f"{self.type_name(dtype)}[{count}]>({item}.get_group());")

    def kernel_signature(self, name: str, params: list[str], ndim: int, sub_group_size: int | None = None) -> str:
        """The first line(s) of a free-function nd_range kernel: ``extern "C"`` keeps its name
        unmangled, so the runtime finds it by ``name``."""
        attrs = f"[[sycl::reqd_sub_group_size({sub_group_size})]] " if sub_group_size else ""
        return (f'extern "C" SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<{ndim}>))\n'
                f"{attrs}void {name}(" + ", ".join(params) + ")")

    def nd_item(self, ndim: int, name: str = "item") -> str:
        return f"const auto {name} = sycl::ext::oneapi::this_work_item::get_nd_item<{ndim}>();"


SYCL = SyclLanguage()

HELPERS = r"""// inductor-ext helpers for generated SYCL kernels
#pragma once
#include <sycl/sycl.hpp>
#include <cmath>  // INFINITY, NAN
#include <cstdint>

namespace syclexp = sycl::ext::oneapi::experimental;

namespace ext {

// bf16 <-> fp32 by bits (round to nearest even, NaN stays NaN): SYCL's own conversions would
// link a device library.
inline float bf16_to_float(sycl::ext::oneapi::bfloat16 v) {
  return sycl::bit_cast<float>(static_cast<uint32_t>(sycl::bit_cast<uint16_t>(v)) << 16);
}
inline sycl::ext::oneapi::bfloat16 float_to_bf16(float f) {
  uint32_t u = sycl::bit_cast<uint32_t>(f);
  uint16_t bits = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40u)
                                                   : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return sycl::bit_cast<sycl::ext::oneapi::bfloat16>(bits);
}

// torch.maximum / torch.minimum: NaN wins (C's fmax/fmin drop it).
template <class A, class B> inline auto maximum(A a, B b) {
  using T = decltype(a + b);
  T x = static_cast<T>(a), y = static_cast<T>(b);
  return (x != x) ? x : (y != y) ? y : (x > y ? x : y);
}
template <class A, class B> inline auto minimum(A a, B b) {
  using T = decltype(a + b);
  T x = static_cast<T>(a), y = static_cast<T>(b);
  return (x != x) ? x : (y != y) ? y : (x < y ? x : y);
}

// Python's // and % on integers (round toward -inf; the remainder takes the divisor's sign).
template <class A, class B> inline auto floordiv(A a, B b) {
  using T = decltype(a / b);
  T q = static_cast<T>(a / b);
  return (q * b != a && ((a < 0) != (b < 0))) ? static_cast<T>(q - 1) : q;
}
template <class A, class B> inline auto remainder(A a, B b) {
  using T = decltype(a + b);
  T r;
  if constexpr (std::is_floating_point_v<T>) {
    r = sycl::fmod(static_cast<T>(a), static_cast<T>(b));
  } else {
    r = static_cast<T>(a % b);
  }
  return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
}

// Welford's running (mean, m2, weight), combined like torch's.
struct Welford {
  float mean, m2, weight;
};
inline Welford welford_add(Welford a, float x) {
  float w = a.weight + 1.0f;
  float delta = x - a.mean;
  float mean = a.mean + delta / w;
  return {mean, a.m2 + delta * (x - mean), w};
}
inline Welford welford_combine(Welford a, Welford b) {
  float n = a.weight + b.weight;
  if (b.weight == 0.0f) return a;
  if (a.weight == 0.0f) return b;
  float delta = b.mean - a.mean;
  float wb = b.weight / n;
  return {a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.weight * wb, n};
}

// arg-max / arg-min: NaN counts as the extreme value (as in torch); ties keep the smaller index.
template <class T> struct ArgPair {
  T value;
  int64_t index;
};
template <class T> inline ArgPair<T> argmax_combine(ArgPair<T> a, ArgPair<T> b) {
  bool a_nan = a.value != a.value, b_nan = b.value != b.value;
  if (a_nan || b_nan) return (a_nan && (!b_nan || a.index < b.index)) ? a : b;
  if (a.value != b.value) return a.value > b.value ? a : b;
  return a.index < b.index ? a : b;
}
template <class T> inline ArgPair<T> argmin_combine(ArgPair<T> a, ArgPair<T> b) {
  bool a_nan = a.value != a.value, b_nan = b.value != b.value;
  if (a_nan || b_nan) return (a_nan && (!b_nan || a.index < b.index)) ? a : b;
  if (a.value != b.value) return a.value < b.value ? a : b;
  return a.index < b.index ? a : b;
}

// ---- work-group reductions: sub-group first, then one partial per sub-group in local memory.
// Called by every work-item of the group at kernel scope (uniform control flow); `scratch`
// holds at least one T per sub-group and is used by this one reduction only.

template <class T> inline T sub_group_permute(sycl::sub_group sg, T v, uint32_t mask) {
  return sycl::permute_group_by_xor(sg, v, mask);
}
inline Welford sub_group_permute(sycl::sub_group sg, Welford v, uint32_t mask) {
  return {sycl::permute_group_by_xor(sg, v.mean, mask), sycl::permute_group_by_xor(sg, v.m2, mask),
          sycl::permute_group_by_xor(sg, v.weight, mask)};
}
template <class T> inline ArgPair<T> sub_group_permute(sycl::sub_group sg, ArgPair<T> v, uint32_t mask) {
  return {sycl::permute_group_by_xor(sg, v.value, mask), sycl::permute_group_by_xor(sg, v.index, mask)};
}

// Any combine, across a full power-of-two sub-group: an xor butterfly.
template <class T, class Op> inline T sub_group_butterfly(sycl::sub_group sg, T v, Op op) {
  for (uint32_t mask = sg.get_local_linear_range() / 2; mask > 0; mask /= 2) {
    v = op(v, sub_group_permute(sg, v, mask));
  }
  return v;
}

template <int N, class T, class Op>
inline T across_sub_groups(const sycl::nd_item<N>& item, T* scratch, T v, Op op) {
  auto sg = item.get_sub_group();
  if (sg.get_local_linear_id() == 0) scratch[sg.get_group_linear_id()] = v;
  sycl::group_barrier(item.get_group());
  T r = scratch[0];
  for (uint32_t i = 1; i < sg.get_group_linear_range(); ++i) r = op(r, scratch[i]);
  return r;
}

template <int N, class T> inline T group_sum(const sycl::nd_item<N>& item, T* scratch, T v) {
  v = sycl::reduce_over_group(item.get_sub_group(), v, sycl::plus<T>());
  return across_sub_groups(item, scratch, v, [](T a, T b) { return a + b; });
}
template <int N, class T> inline T group_prod(const sycl::nd_item<N>& item, T* scratch, T v) {
  v = sycl::reduce_over_group(item.get_sub_group(), v, sycl::multiplies<T>());
  return across_sub_groups(item, scratch, v, [](T a, T b) { return a * b; });
}
template <int N, class T> inline T group_xor_sum(const sycl::nd_item<N>& item, T* scratch, T v) {
  v = sycl::reduce_over_group(item.get_sub_group(), v, sycl::bit_xor<T>());
  return across_sub_groups(item, scratch, v, [](T a, T b) { return a ^ b; });
}
template <int N> inline bool group_any(const sycl::nd_item<N>& item, bool* scratch, bool v) {
  v = sycl::any_of_group(item.get_sub_group(), v);
  return across_sub_groups(item, scratch, v, [](bool a, bool b) { return a || b; });
}
template <int N, class T> inline T group_max(const sycl::nd_item<N>& item, T* scratch, T v) {
  auto op = [](T a, T b) { return static_cast<T>(maximum(a, b)); };
  return across_sub_groups(item, scratch, sub_group_butterfly(item.get_sub_group(), v, op), op);
}
template <int N, class T> inline T group_min(const sycl::nd_item<N>& item, T* scratch, T v) {
  auto op = [](T a, T b) { return static_cast<T>(minimum(a, b)); };
  return across_sub_groups(item, scratch, sub_group_butterfly(item.get_sub_group(), v, op), op);
}
// (Device code cannot call through function pointers: the combines are passed as lambdas.)
template <int N> inline Welford group_welford(const sycl::nd_item<N>& item, Welford* scratch, Welford v) {
  auto op = [](Welford a, Welford b) { return welford_combine(a, b); };
  return across_sub_groups(item, scratch, sub_group_butterfly(item.get_sub_group(), v, op), op);
}
template <int N, class T>
inline ArgPair<T> group_argmax(const sycl::nd_item<N>& item, ArgPair<T>* scratch, ArgPair<T> v) {
  auto op = [](ArgPair<T> a, ArgPair<T> b) { return argmax_combine(a, b); };
  return across_sub_groups(item, scratch, sub_group_butterfly(item.get_sub_group(), v, op), op);
}
template <int N, class T>
inline ArgPair<T> group_argmin(const sycl::nd_item<N>& item, ArgPair<T>* scratch, ArgPair<T> v) {
  auto op = [](ArgPair<T> a, ArgPair<T> b) { return argmin_combine(a, b); };
  return across_sub_groups(item, scratch, sub_group_butterfly(item.get_sub_group(), v, op), op);
}

}  // namespace ext
"""
