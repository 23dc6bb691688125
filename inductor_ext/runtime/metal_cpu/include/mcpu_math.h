// MSL math, common, integer, relational and geometric functions (metal::, metal::precise::,
// metal::fast::) plus numeric_limits and the M_*_F / MAXFLOAT constants. No <cmath>: c10's
// Metal headers define names that clash with it; everything is a GCC builtin.
// half and bfloat compute in float and round back. metal::fast:: is as accurate as precise::
// here (Apple's fast math is less accurate than this; compare with tolerances).
#pragma once
#include "mcpu_vec.h"

#define MAXFLOAT __FLT_MAX__
#define HUGE_VALF __builtin_huge_valf()
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define FLT_MAX __FLT_MAX__
#define FLT_MIN __FLT_MIN__
#define FLT_EPSILON __FLT_EPSILON__
#define HALF_MAX 65504.0f
#define HALF_MIN 6.103515625e-05f
#define HALF_EPSILON 0.0009765625f
#define INT_MAX __INT_MAX__
#define INT_MIN (-__INT_MAX__ - 1)
#define UINT_MAX (__INT_MAX__ * 2U + 1U)
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define M_E_H M_E_F
#define M_PI_H M_PI_F
#define M_LN2_H M_LN2_F
#define M_SQRT2_H M_SQRT2_F

namespace mcpu {
template <class T> constexpr bool is_fp_scalar =
    metal::is_same_v<T, float> || metal::is_same_v<T, half> || metal::is_same_v<T, bfloat>;
// Arguments other than float/half/bfloat (integers, double) are taken as float.
template <class T> constexpr bool is_other_scalar =
    metal::is_arithmetic_v<T> && !is_fp_scalar<T>;

template <class V, class F> inline auto vmap(const V& v, F f) {
  vec_of<V> x = v;
  typedef decltype(f(x[0])) R;
  metal::vec<R, count_of<V>> r;
  for (int i = 0; i < count_of<V>; i++) r[i] = f(x[i]);
  return r;
}
template <class A, class B, class F> inline auto vmap2(const A& a, const B& b, F f) {
  typedef pair_vec<A, B> V;
  V x = widen<V>(a), y = widen<V>(b);
  typedef decltype(f(x[0], y[0])) R;
  metal::vec<R, count_of<V>> r;
  for (int i = 0; i < count_of<V>; i++) r[i] = f(x[i], y[i]);
  return r;
}
template <class A, class B, class C, class F> inline auto vmap3(const A& a, const B& b, const C& c, F f) {
  typedef metal::conditional_t<is_veclike<A>, vec_of<A>, pair_vec<B, C>> V;
  V x = widen<V>(a), y = widen<V>(b), z = widen<V>(c);
  typedef decltype(f(x[0], y[0], z[0])) R;
  metal::vec<R, count_of<V>> r;
  for (int i = 0; i < count_of<V>; i++) r[i] = f(x[i], y[i], z[i]);
  return r;
}
template <class A, class B> constexpr bool any_vec = is_veclike<A> || is_veclike<B>;
template <class A, class B, class C> constexpr bool any_vec3 = is_veclike<A> || is_veclike<B> || is_veclike<C>;

// The floating type two scalar arguments compute in: float if either is float (or neither is
// half/bfloat), else the half/bfloat one.
template <class A, class B> struct fp_common { typedef float type; };
template <> struct fp_common<half, half> { typedef half type; };
template <> struct fp_common<bfloat, bfloat> { typedef bfloat type; };
template <class A, class B> using fp_common_t = typename fp_common<metal::remove_cvref_t<A>, metal::remove_cvref_t<B>>::type;
}  // namespace mcpu

namespace metal {
namespace precise {

#define MCPU_FP1(NAME, EXPR)                                                                         \
  inline float NAME(float x) { return EXPR; }                                                        \
  inline half NAME(half x) { return half(NAME(float(x))); }                                          \
  inline bfloat NAME(bfloat x) { return bfloat(NAME(float(x))); }                                    \
  template <class I, enable_if_t<mcpu::is_other_scalar<I>, bool> = true>                             \
  inline float NAME(I x) { return NAME(float(x)); }                                                  \
  template <class V, enable_if_t<mcpu::is_veclike<V>, bool> = true>                                  \
  inline auto NAME(const V& v) { return mcpu::vmap(v, [](auto x) { return NAME(x); }); }

MCPU_FP1(acos, __builtin_acosf(x))
MCPU_FP1(acosh, __builtin_acoshf(x))
MCPU_FP1(asin, __builtin_asinf(x))
MCPU_FP1(asinh, __builtin_asinhf(x))
MCPU_FP1(atan, __builtin_atanf(x))
MCPU_FP1(atanh, __builtin_atanhf(x))
MCPU_FP1(ceil, __builtin_ceilf(x))
MCPU_FP1(cos, __builtin_cosf(x))
MCPU_FP1(cosh, __builtin_coshf(x))
MCPU_FP1(cospi, float(__builtin_cos(double(x) * 3.14159265358979323846)))
MCPU_FP1(exp, __builtin_expf(x))
MCPU_FP1(exp2, __builtin_exp2f(x))
MCPU_FP1(exp10, __builtin_powf(10.0f, x))
MCPU_FP1(fabs, __builtin_fabsf(x))
MCPU_FP1(floor, __builtin_floorf(x))
MCPU_FP1(fract, __builtin_fminf(x - __builtin_floorf(x), 0x1.fffffep-1f))
MCPU_FP1(log, __builtin_logf(x))
MCPU_FP1(log2, __builtin_log2f(x))
MCPU_FP1(log10, __builtin_log10f(x))
MCPU_FP1(rint, __builtin_rintf(x))
MCPU_FP1(round, __builtin_roundf(x))
MCPU_FP1(rsqrt, 1.0f / __builtin_sqrtf(x))
MCPU_FP1(sin, __builtin_sinf(x))
MCPU_FP1(sinh, __builtin_sinhf(x))
MCPU_FP1(sinpi, float(__builtin_sin(double(x) * 3.14159265358979323846)))
MCPU_FP1(sqrt, __builtin_sqrtf(x))
MCPU_FP1(tan, __builtin_tanf(x))
MCPU_FP1(tanh, __builtin_tanhf(x))
MCPU_FP1(tanpi, float(__builtin_tan(double(x) * 3.14159265358979323846)))
MCPU_FP1(trunc, __builtin_truncf(x))
#undef MCPU_FP1

#define MCPU_FP2(NAME, EXPR)                                                                         \
  inline float NAME(float x, float y) { return EXPR; }                                               \
  template <class A, class B, enable_if_t<is_arithmetic_v<A> && is_arithmetic_v<B> &&                \
                                              !(is_same_v<A, float> && is_same_v<B, float>), bool> = true> \
  inline mcpu::fp_common_t<A, B> NAME(A a, B b) {                                                    \
    return mcpu::fp_common_t<A, B>(NAME(float(a), float(b)));                                        \
  }                                                                                                  \
  template <class A, class B, enable_if_t<mcpu::any_vec<A, B>, bool> = true>                         \
  inline auto NAME(const A& a, const B& b) {                                                         \
    return mcpu::vmap2(a, b, [](auto x, auto y) { return NAME(x, y); });                             \
  }

MCPU_FP2(atan2, __builtin_atan2f(x, y))
MCPU_FP2(copysign, __builtin_copysignf(x, y))
MCPU_FP2(fdim, __builtin_fdimf(x, y))
MCPU_FP2(fmax, __builtin_fmaxf(x, y))
MCPU_FP2(fmin, __builtin_fminf(x, y))
MCPU_FP2(fmod, __builtin_fmodf(x, y))
MCPU_FP2(pow, __builtin_powf(x, y))
MCPU_FP2(powr, __builtin_powf(x, y))
MCPU_FP2(nextafter, __builtin_nextafterf(x, y))
MCPU_FP2(divide, x / y)
#undef MCPU_FP2

inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
template <class A, class B, class C,
          enable_if_t<is_arithmetic_v<A> && is_arithmetic_v<B> && is_arithmetic_v<C> &&
                          !(is_same_v<A, float> && is_same_v<B, float> && is_same_v<C, float>), bool> = true>
inline auto fma(A a, B b, C c) {
  typedef mcpu::fp_common_t<mcpu::fp_common_t<A, B>, C> R;
  return R(__builtin_fmaf(float(a), float(b), float(c)));
}
template <class A, class B, class C, enable_if_t<mcpu::any_vec3<A, B, C>, bool> = true>
inline auto fma(const A& a, const B& b, const C& c) {
  return mcpu::vmap3(a, b, c, [](auto x, auto y, auto z) { return fma(x, y, z); });
}

template <class T> inline T sincos(T x, T& cosval) {
  cosval = cos(x);
  return sin(x);
}
template <class T, enable_if_t<is_floating_point_v<T>, bool> = true> inline T frexp(T x, int& e) {
  return T(__builtin_frexpf(float(x), &e));
}
template <class T, enable_if_t<is_floating_point_v<T>, bool> = true> inline T modf(T x, T& ip) {
  float i;
  float f = __builtin_modff(float(x), &i);
  ip = T(i);
  return T(f);
}
template <class T, enable_if_t<mcpu::is_fp_scalar<T>, bool> = true> inline T ldexp(T x, int e) {
  return T(__builtin_ldexpf(float(x), e));
}
template <class V, class E, enable_if_t<mcpu::is_veclike<V>, bool> = true> inline auto ldexp(const V& x, const E& e) {
  return mcpu::vmap2(x, e, [](auto a, auto b) { return ldexp(a, int(b)); });
}
template <class T, enable_if_t<mcpu::is_fp_scalar<T>, bool> = true> inline int ilogb(T x) {
  return __builtin_ilogbf(float(x));
}

}  // namespace precise

namespace fast {
using namespace precise;
}
using namespace precise;

// ------------------------------------------------------------------------ classification
#define MCPU_CLASS1(NAME, EXPR)                                                                      \
  template <class T, enable_if_t<is_arithmetic_v<T>, bool> = true> inline bool NAME(T v) {           \
    float x = float(v);                                                                              \
    return EXPR;                                                                                     \
  }                                                                                                  \
  template <class V, enable_if_t<mcpu::is_veclike<V>, bool> = true> inline auto NAME(const V& v) {   \
    return mcpu::vmap(v, [](auto x) { return NAME(x); });                                            \
  }
MCPU_CLASS1(isnan, __builtin_isnan(x))
MCPU_CLASS1(isinf, __builtin_isinf(x))
MCPU_CLASS1(isfinite, __builtin_isfinite(x))
MCPU_CLASS1(isnormal, __builtin_isnormal(x))
MCPU_CLASS1(signbit, __builtin_signbit(x))
#undef MCPU_CLASS1
template <class A, class B, enable_if_t<is_arithmetic_v<A> && is_arithmetic_v<B>, bool> = true>
inline bool isunordered(A a, B b) {
  return __builtin_isunordered(float(a), float(b));
}
template <class A, class B, enable_if_t<is_arithmetic_v<A> && is_arithmetic_v<B>, bool> = true>
inline bool isordered(A a, B b) {
  return !__builtin_isunordered(float(a), float(b));
}
template <class A, class B, enable_if_t<mcpu::any_vec<A, B>, bool> = true> inline auto isunordered(const A& a, const B& b) {
  return mcpu::vmap2(a, b, [](auto x, auto y) { return isunordered(x, y); });
}
template <class A, class B, enable_if_t<mcpu::any_vec<A, B>, bool> = true> inline auto isordered(const A& a, const B& b) {
  return mcpu::vmap2(a, b, [](auto x, auto y) { return isordered(x, y); });
}

// ------------------------------------------------------------------------ common + integer
// max/min: fmax semantics for floats (a NaN argument yields the other), plain for integers.
template <class T, enable_if_t<is_arithmetic_v<T>, bool> = true> inline T max(T a, T b) {
  if constexpr (mcpu::is_fp_scalar<T>) {
    return T(__builtin_fmaxf(float(a), float(b)));
  } else {
    return a < b ? b : a;
  }
}
template <class T, enable_if_t<is_arithmetic_v<T>, bool> = true> inline T min(T a, T b) {
  if constexpr (mcpu::is_fp_scalar<T>) {
    return T(__builtin_fminf(float(a), float(b)));
  } else {
    return b < a ? b : a;
  }
}
template <class A, class B, enable_if_t<is_arithmetic_v<A> && is_arithmetic_v<B> && !is_same_v<A, B>, bool> = true>
inline auto max(A a, B b) {
  typedef decltype(a + b) R;
  return max(R(a), R(b));
}
template <class A, class B, enable_if_t<is_arithmetic_v<A> && is_arithmetic_v<B> && !is_same_v<A, B>, bool> = true>
inline auto min(A a, B b) {
  typedef decltype(a + b) R;
  return min(R(a), R(b));
}
template <class A, class B, enable_if_t<mcpu::any_vec<A, B>, bool> = true> inline auto max(const A& a, const B& b) {
  return mcpu::vmap2(a, b, [](auto x, auto y) { return max(x, y); });
}
template <class A, class B, enable_if_t<mcpu::any_vec<A, B>, bool> = true> inline auto min(const A& a, const B& b) {
  return mcpu::vmap2(a, b, [](auto x, auto y) { return min(x, y); });
}
template <class A, class B, class C> inline auto max3(A a, B b, C c) { return max(max(a, b), c); }
template <class A, class B, class C> inline auto min3(A a, B b, C c) { return min(min(a, b), c); }
template <class A, class B, class C> inline auto median3(A a, B b, C c) { return max(min(a, b), min(max(a, b), c)); }
template <class A, class B, class C> inline auto fmax3(A a, B b, C c) { return max3(a, b, c); }
template <class A, class B, class C> inline auto fmin3(A a, B b, C c) { return min3(a, b, c); }
template <class A, class B, class C> inline auto fmedian3(A a, B b, C c) { return median3(a, b, c); }
template <class X, class L, class H> inline auto clamp(X x, L lo, H hi) { return min(max(x, lo), hi); }
template <class X> inline auto saturate(X x) { return clamp(x, 0.0f, 1.0f); }
template <class A, class B, class T> inline auto mix(A x, B y, T a) { return x + (y - x) * a; }
template <class E, class X> inline auto step(E edge, X x) {
  if constexpr (mcpu::any_vec<E, X>) {
    return mcpu::vmap2(edge, x, [](auto e, auto v) { return step(e, v); });
  } else {
    return X(x < edge ? 0 : 1);
  }
}
template <class E0, class E1, class X> inline auto smoothstep(E0 e0, E1 e1, X x) {
  auto t = clamp((x - e0) / (e1 - e0), 0.0f, 1.0f);
  return t * t * (3.0f - 2.0f * t);
}
template <class T, enable_if_t<is_arithmetic_v<T>, bool> = true> inline T sign(T x) {
  float f = float(x);
  return T(f > 0 ? 1.0f : f < 0 ? -1.0f : f == 0 ? 0.0f * f : 0.0f);
}
template <class V, enable_if_t<mcpu::is_veclike<V>, bool> = true> inline auto sign(const V& v) {
  return mcpu::vmap(v, [](auto x) { return sign(x); });
}

template <class T, enable_if_t<is_arithmetic_v<T>, bool> = true> inline auto abs(T x) {
  if constexpr (mcpu::is_fp_scalar<T>) {
    return T(__builtin_fabsf(float(x)));
  } else if constexpr (is_signed_v<T>) {
    return make_unsigned_t<T>(x < 0 ? make_unsigned_t<T>(0) - make_unsigned_t<T>(x) : make_unsigned_t<T>(x));
  } else {
    return x;
  }
}
template <class V, enable_if_t<mcpu::is_veclike<V>, bool> = true> inline auto abs(const V& v) {
  return mcpu::vmap(v, [](auto x) { return abs(x); });
}

#define MCPU_INT1(NAME, EXPR)                                                                        \
  template <class T, enable_if_t<is_integral_v<T>, bool> = true> inline T NAME(T x) {                \
    typedef make_unsigned_t<T> U;                                                                    \
    U u = U(x);                                                                                      \
    constexpr int bits = int(sizeof(T) * 8);                                                         \
    (void)bits;                                                                                      \
    return T(EXPR);                                                                                  \
  }                                                                                                  \
  template <class V, enable_if_t<mcpu::is_veclike<V>, bool> = true> inline auto NAME(const V& v) {   \
    return mcpu::vmap(v, [](auto x) { return NAME(x); });                                            \
  }
MCPU_INT1(clz, u == 0 ? bits : (sizeof(T) == 8 ? __builtin_clzll(u) : __builtin_clz(uint(u)) - (32 - bits)))
MCPU_INT1(ctz, u == 0 ? bits : (sizeof(T) == 8 ? __builtin_ctzll(u) : __builtin_ctz(uint(u))))
MCPU_INT1(popcount, sizeof(T) == 8 ? __builtin_popcountll(u) : __builtin_popcount(uint(u)))
MCPU_INT1(reverse_bits, ([](U v) { U r = 0; for (int i = 0; i < bits; i++) { r = U((r << 1) | (v & 1)); v >>= 1; } return r; })(u))
#undef MCPU_INT1
template <class T, enable_if_t<is_integral_v<T>, bool> = true> inline T mulhi(T a, T b) {
  if constexpr (sizeof(T) == 8) {
    typedef conditional_t<is_signed_v<T>, __int128, unsigned __int128> W;
    return T((W(a) * W(b)) >> 64);
  } else {
    return T((long(a) * long(b)) >> (8 * sizeof(T)));
  }
}
template <class T, enable_if_t<is_integral_v<T>, bool> = true> inline T hadd(T a, T b) { return T((__int128(a) + b) >> 1); }
template <class T, enable_if_t<is_integral_v<T>, bool> = true> inline T rhadd(T a, T b) { return T((__int128(a) + b + 1) >> 1); }
template <class T, enable_if_t<is_integral_v<T>, bool> = true> inline make_unsigned_t<T> absdiff(T a, T b) {
  return make_unsigned_t<T>(a > b ? a - b : b - a);
}
template <class T, enable_if_t<is_integral_v<T>, bool> = true> inline T rotate(T v, T n) {
  typedef make_unsigned_t<T> U;
  const int bits = int(sizeof(T) * 8);
  int s = int(U(n) % bits);
  return s == 0 ? v : T((U(v) << s) | (U(v) >> (bits - s)));
}
template <class T, enable_if_t<is_integral_v<T>, bool> = true> inline T extract_bits(T x, uint offset, uint bits) {
  typedef make_unsigned_t<T> U;
  if (bits == 0) return 0;
  U v = U(U(x) >> offset);
  if (bits < sizeof(T) * 8) v &= U((U(1) << bits) - 1);
  if constexpr (is_signed_v<T>) {
    if (bits < sizeof(T) * 8 && ((v >> (bits - 1)) & 1)) v |= U(~U(0) << bits);
  }
  return T(v);
}
template <class T, enable_if_t<is_integral_v<T>, bool> = true> inline T insert_bits(T base, T insert, uint offset, uint bits) {
  typedef make_unsigned_t<T> U;
  U mask = bits >= sizeof(T) * 8 ? U(~U(0)) : U(((U(1) << bits) - 1) << offset);
  return T((U(base) & ~mask) | ((U(insert) << offset) & mask));
}

// ------------------------------------------------------------------------ relational
template <class V, enable_if_t<mcpu::is_veclike<V>, bool> = true> inline bool any(const V& v) {
  mcpu::vec_of<V> x = v;
  for (int i = 0; i < mcpu::count_of<V>; i++)
    if (x[i]) return true;
  return false;
}
template <class V, enable_if_t<mcpu::is_veclike<V>, bool> = true> inline bool all(const V& v) {
  mcpu::vec_of<V> x = v;
  for (int i = 0; i < mcpu::count_of<V>; i++)
    if (!x[i]) return false;
  return true;
}
inline bool any(bool b) { return b; }
inline bool all(bool b) { return b; }
// select(a, b, c): c ? b : a, per element.
template <class A, class B, enable_if_t<!mcpu::is_veclike<A> && !mcpu::is_veclike<B>, bool> = true>
inline auto select(A a, B b, bool c) {
  typedef decltype(c ? b : a) R;
  return c ? R(b) : R(a);
}
template <class A, class B, class C, enable_if_t<mcpu::is_veclike<C> || mcpu::is_veclike<A>, bool> = true>
inline auto select(const A& a, const B& b, const C& c) {
  typedef metal::conditional_t<mcpu::is_veclike<A>, mcpu::vec_of<A>, mcpu::vec_of<B>> V;
  V x = mcpu::widen<V>(a), y = mcpu::widen<V>(b);
  metal::vec<bool, mcpu::count_of<V>> m = mcpu::widen<metal::vec<bool, mcpu::count_of<V>>>(c);
  V r;
  for (int i = 0; i < mcpu::count_of<V>; i++) r[i] = m[i] ? y[i] : x[i];
  return r;
}

// ------------------------------------------------------------------------ geometric
template <class A, class B, enable_if_t<mcpu::is_veclike<A>, bool> = true> inline auto dot(const A& a, const B& b) {
  mcpu::vec_of<A> x = a, y = b;
  auto s = x[0] * y[0];
  for (int i = 1; i < mcpu::count_of<A>; i++) s += x[i] * y[i];
  return s;
}
template <class A, enable_if_t<mcpu::is_veclike<A>, bool> = true> inline auto length_squared(const A& a) { return dot(a, a); }
template <class A, enable_if_t<mcpu::is_veclike<A>, bool> = true> inline auto length(const A& a) { return sqrt(dot(a, a)); }
template <class A, class B, enable_if_t<mcpu::is_veclike<A>, bool> = true> inline auto distance(const A& a, const B& b) {
  return length(mcpu::vec_of<A>(a) - mcpu::vec_of<A>(b));
}
template <class A, enable_if_t<mcpu::is_veclike<A>, bool> = true> inline auto normalize(const A& a) {
  return mcpu::vec_of<A>(a) * rsqrt(dot(a, a));
}
template <class T> inline vec<T, 3> cross(vec<T, 3> a, vec<T, 3> b) {
  return vec<T, 3>(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}

// ------------------------------------------------------------------------ numeric_limits
template <class T> struct numeric_limits;
#define MCPU_INT_LIMITS(T, LO, HI)                                                                   \
  template <> struct numeric_limits<T> {                                                             \
    static constexpr bool is_specialized = true, is_signed = static_cast<T>(-1) < static_cast<T>(0), is_integer = true;        \
    static constexpr int digits = int(sizeof(T) * 8) - (static_cast<T>(-1) < static_cast<T>(0) ? 1 : 0);                       \
    static constexpr T min() { return LO; }                                                          \
    static constexpr T lowest() { return LO; }                                                       \
    static constexpr T max() { return HI; }                                                          \
  };
MCPU_INT_LIMITS(bool, false, true)
MCPU_INT_LIMITS(char, -128, 127)
MCPU_INT_LIMITS(signed char, -128, 127)
MCPU_INT_LIMITS(uchar, 0, 255)
MCPU_INT_LIMITS(short, -32768, 32767)
MCPU_INT_LIMITS(ushort, 0, 65535)
MCPU_INT_LIMITS(int, -__INT_MAX__ - 1, __INT_MAX__)
MCPU_INT_LIMITS(uint, 0u, __INT_MAX__ * 2u + 1u)
MCPU_INT_LIMITS(long, -__LONG_MAX__ - 1, __LONG_MAX__)
MCPU_INT_LIMITS(ulong, 0ul, __LONG_MAX__ * 2ul + 1ul)
MCPU_INT_LIMITS(long long, -__LONG_LONG_MAX__ - 1, __LONG_LONG_MAX__)
MCPU_INT_LIMITS(unsigned long long, 0ull, __LONG_LONG_MAX__ * 2ull + 1ull)
#undef MCPU_INT_LIMITS
#define MCPU_FP_LIMITS(T, MIN_BITS, MAX_BITS, EPS_BITS, INF_BITS, DIGITS, BITS_T)                               \
  template <> struct numeric_limits<T> {                                                             \
    static constexpr bool is_specialized = true, is_signed = true, is_integer = false;               \
    static constexpr bool has_infinity = true, has_quiet_NaN = true;                                 \
    static constexpr int digits = DIGITS;                                                            \
    static constexpr T min() { return __builtin_bit_cast(T, BITS_T(MIN_BITS)); }                     \
    static constexpr T max() { return __builtin_bit_cast(T, BITS_T(MAX_BITS)); }                     \
    static constexpr T lowest() { return __builtin_bit_cast(T, BITS_T(MAX_BITS | (BITS_T(1) << (sizeof(T) * 8 - 1)))); } \
    static constexpr T epsilon() { return __builtin_bit_cast(T, BITS_T(EPS_BITS)); }                 \
    static constexpr T infinity() { return __builtin_bit_cast(T, BITS_T(INF_BITS)); } \
    static constexpr T quiet_NaN() { return T(__builtin_nanf("")); }                                 \
    static constexpr T denorm_min() { return __builtin_bit_cast(T, BITS_T(1)); }                     \
  };
MCPU_FP_LIMITS(float, 0x00800000u, 0x7f7fffffu, 0x34000000u, 0x7f800000u, 24, uint32_t)
MCPU_FP_LIMITS(half, 0x0400u, 0x7bffu, 0x1400u, 0x7c00u, 11, uint16_t)
MCPU_FP_LIMITS(bfloat, 0x0080u, 0x7f7fu, 0x3c00u, 0x7f80u, 8, uint16_t)
#undef MCPU_FP_LIMITS
template <class T> struct numeric_limits<const T> : numeric_limits<T> {};

}  // namespace metal
