"""MSL text the Metal template families share: element loads that decode to float, stores from
float, activation epilogues, and the SIMD-group gemv body (one row block x a block of columns per
threadgroup, the 32 lanes of a SIMD group splitting K, ``simd_sum`` at the end).

Types, casts, buffers and threadgroup memory are spelled by the MSL dialect (``templates/lang/msl.py``);
this module holds the text the families share. Element types by torch dtype name, as kernels see
the bytes:
- float32 ``float``, float16 ``half``;
- bfloat16 read as ``ushort`` bits (``<< 16`` is the float), written as ``bfloat`` (rounds to
  nearest even, as torch does);
- float8_e4m3fn ``uchar``, decoded in-kernel exactly as ``c10/metal/float8.h`` decodes it: the
  exponent and mantissa bits moved into a half and scaled by 2^8, S.1111.111 is NaN.
Loads are ``load1(p)`` / ``load4(p)`` overloaded on the storage type (each storage type stands
for one dtype); vector loads use packed types, so rows need no alignment beyond their element.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inductor_ext.templates.lang.msl import MSL

if TYPE_CHECKING:
    from inductor_ext.templates.base import KernelSource

# What runs these families' kernels on CPU tensors under options={"interpret": True}.
CPU_EXECUTOR = "the Metal-on-CPU executor"

HEADER = """\
#include <metal_stdlib>
using namespace metal;

// bfloat16 bits -> float (exact).
static inline float bf16_to_float(ushort x) { return as_type<float>(uint(x) << 16); }

// float8_e4m3fn -> float (exact): exponent and mantissa moved into a half, times 2^8; S.1111.111 is NaN.
static inline float e4m3_to_float(uchar x) {
  half h = as_type<half>(ushort((uint(x & 0x7F) << 7) | (uint(x & 0x80) << 8)));
  return (x & 0x7F) == 0x7F ? NAN : float(h) * 256.0f;
}

// erf, |error| < 1.5e-7 (Abramowitz & Stegun 7.1.26); Metal has none.
static inline float erf_approx(float x) {
  float t = 1.0f / (1.0f + 0.3275911f * fabs(x));
  float y = 1.0f - ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t
                    + 0.254829592f) * t * exp(-x * x);
  return copysign(y, x);
}

// Elements as float, by storage type: float, half, bfloat16 bits (ushort), e4m3 (uchar).
static inline float load1(const device float* p) { return *p; }
static inline float load1(const device half* p) { return float(*p); }
static inline float load1(const device ushort* p) { return bf16_to_float(*p); }
static inline float load1(const device uchar* p) { return e4m3_to_float(*p); }
static inline float4 load4(const device float* p) { return float4(*(const device packed_float4*)p); }
static inline float4 load4(const device half* p) { return float4(*(const device packed_half4*)p); }
static inline float4 load4(const device ushort* p) {
  const packed_ushort4 v = *(const device packed_ushort4*)p;
  return float4(bf16_to_float(v[0]), bf16_to_float(v[1]), bf16_to_float(v[2]), bf16_to_float(v[3]));
}
static inline float4 load4(const device uchar* p) {
  const packed_uchar4 v = *(const device packed_uchar4*)p;
  return float4(e4m3_to_float(v[0]), e4m3_to_float(v[1]), e4m3_to_float(v[2]), e4m3_to_float(v[3]));
}
"""

ACTIVATIONS = {
    None: "{x}",
    "relu": "max({x}, 0.0f)",
    "gelu": "0.5f * {x} * (1.0f + erf_approx({x} * 0.70710678118654752f))",  # MSL has no erf
    "silu": "{x} / (1.0f + " + MSL.math("exp", "-{x}") + ")",
}

# The position parameters every gemv-shaped Metal kernel takes after its buffers.
POSITION = [MSL.attribute("uint3", "tgpos", "threadgroup_position_in_grid"),
            MSL.attribute("uint", "sg", "simdgroup_index_in_threadgroup"),
            MSL.attribute("uint", "lane", "thread_index_in_simdgroup"),
            MSL.attribute("uint", "tid", "thread_index_in_threadgroup")]


def store(dtype: str, value: str) -> str:
    """MSL expression converting float ``value`` to the output element type."""
    return MSL.cast(value, dtype)


def activation(name: str | None, x: str) -> str:
    return ACTIVATIONS[name].format(x=x)


def clamp_column(n: str) -> str:
    """MSL: column ``n`` clamped to N - 1 (columns past N are computed, never stored)."""
    return f"({n} < N ? {n} : N - 1)"


def gemv_body(*, rows: int, columns: int, vec: int) -> str:
    """The gemv main loop and reduction. Expects ``arow[rows]`` / ``bcol[columns]`` pointers at
    k = 0 (clamped to valid rows and columns), ``K`` and ``lane``; leaves ``acc[rows][columns]``
    holding the full dot products in every lane."""
    steps = vec // 4
    return f"""\
  float acc[{rows}][{columns}];
  for (int r = 0; r < {rows}; r++)
    for (int c = 0; c < {columns}; c++) acc[r][c] = {MSL.literal(0.0)};
  // Lanes take {vec} consecutive k at a time, the SIMD group {32 * vec} per step; the tail is scalar.
  for (long k = long(lane) * {vec}; k < K; k += {32 * vec}) {{
    if (k + {vec} <= K) {{
      for (int s = 0; s < {steps}; s++) {{
        float4 bv[{columns}];
        for (int c = 0; c < {columns}; c++) bv[c] = load4(bcol[c] + k + 4 * s);
        for (int r = 0; r < {rows}; r++) {{
          const float4 av = load4(arow[r] + k + 4 * s);
          for (int c = 0; c < {columns}; c++) acc[r][c] += dot(av, bv[c]);
        }}
      }}
    }} else {{
      for (long kk = k; kk < K; kk++) {{
        for (int r = 0; r < {rows}; r++) {{
          const float av = load1(arow[r] + kk);
          for (int c = 0; c < {columns}; c++) acc[r][c] += av * load1(bcol[c] + kk);
        }}
      }}
    }}
  }}
  for (int r = 0; r < {rows}; r++)
    for (int c = 0; c < {columns}; c++) acc[r][c] = simd_sum(acc[r][c]);
"""


def signature(params: list[str]) -> str:
    """Kernel parameters with buffer indices in order, then the position attributes."""
    return MSL.kernel_params(params, POSITION)


def compile_asm(ks: "KernelSource") -> dict[str, str]:
    """``inductor-ext asm`` for a Metal kernel: no Metal compiler exists on Linux, so the stages
    are the MSL itself ("msl", where the key instructions are counted) and what the Metal-on-CPU
    executor built from it ("executor": compiler, flags, library, buffer bindings)."""
    from inductor_ext.runtime import metal_cpu

    return {"msl": ks.source, "executor": metal_cpu.build_report(ks.source)}
