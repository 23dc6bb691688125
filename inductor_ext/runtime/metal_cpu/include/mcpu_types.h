// MSL scalar types and type traits, for g++.
//   half   = _Float16 (IEEE binary16, as on Apple GPUs)
//   bfloat = a trivially copyable struct holding the bits; converts from any arithmetic type
//            (round to nearest even), to float only explicitly, arithmetic through float.
#pragma once
#include <stdint.h>

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;

struct bfloat;

namespace metal {

template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;

template <bool B, class T, class F> struct conditional { typedef T type; };
template <class T, class F> struct conditional<false, T, F> { typedef F type; };
template <bool B, class T, class F> using conditional_t = typename conditional<B, T, F>::type;

template <class T, T v> struct integral_constant {
  static constexpr T value = v;
  constexpr operator T() const { return v; }
};
typedef integral_constant<bool, true> true_type;
typedef integral_constant<bool, false> false_type;

template <class A, class B> struct is_same : false_type {};
template <class A> struct is_same<A, A> : true_type {};
template <class A, class B> constexpr bool is_same_v = is_same<A, B>::value;

template <class T> struct remove_cv { typedef T type; };
template <class T> struct remove_cv<const T> { typedef T type; };
template <class T> struct remove_cv<volatile T> { typedef T type; };
template <class T> struct remove_cv<const volatile T> { typedef T type; };
template <class T> using remove_cv_t = typename remove_cv<T>::type;
template <class T> struct remove_reference { typedef T type; };
template <class T> struct remove_reference<T&> { typedef T type; };
template <class T> struct remove_reference<T&&> { typedef T type; };
template <class T> using remove_reference_t = typename remove_reference<T>::type;
template <class T> using remove_cvref_t = remove_cv_t<remove_reference_t<T>>;
template <class T> struct remove_pointer { typedef T type; };
template <class T> struct remove_pointer<T*> { typedef T type; };
template <class T> using remove_pointer_t = typename remove_pointer<T>::type;
template <class T> struct decay { typedef remove_cvref_t<T> type; };
template <class T> using decay_t = typename decay<T>::type;

template <class T> T&& declval_helper(int);
template <class T> T declval_helper(long);
template <class T> decltype(declval_helper<T>(0)) declval() noexcept;

namespace detail {
template <class T> struct is_integral_raw : false_type {};
#define MCPU_INTEGRAL(T) template <> struct is_integral_raw<T> : true_type {};
MCPU_INTEGRAL(bool)
MCPU_INTEGRAL(char)
MCPU_INTEGRAL(signed char)
MCPU_INTEGRAL(unsigned char)
MCPU_INTEGRAL(short)
MCPU_INTEGRAL(unsigned short)
MCPU_INTEGRAL(int)
MCPU_INTEGRAL(unsigned int)
MCPU_INTEGRAL(long)
MCPU_INTEGRAL(unsigned long)
MCPU_INTEGRAL(long long)
MCPU_INTEGRAL(unsigned long long)
#undef MCPU_INTEGRAL
template <class T> struct is_float_raw : false_type {};
template <> struct is_float_raw<float> : true_type {};
template <> struct is_float_raw<half> : true_type {};
template <> struct is_float_raw<bfloat> : true_type {};
template <> struct is_float_raw<double> : true_type {};
template <class T> struct is_signed_raw : integral_constant<bool, (static_cast<T>(-1) < static_cast<T>(0))> {};
template <> struct is_signed_raw<bfloat> : true_type {};
}  // namespace detail

template <class T> struct is_integral : detail::is_integral_raw<remove_cv_t<T>> {};
template <class T> constexpr bool is_integral_v = is_integral<T>::value;
template <class T> struct is_floating_point : detail::is_float_raw<remove_cv_t<T>> {};
template <class T> constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T> struct is_arithmetic : integral_constant<bool, is_integral_v<T> || is_floating_point_v<T>> {};
template <class T> constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
template <class T> struct is_scalar : is_arithmetic<T> {};  // vectors specialise to false
template <class T> constexpr bool is_scalar_v = is_scalar<T>::value;
template <class T> struct is_signed : integral_constant<bool, is_arithmetic_v<T> && detail::is_signed_raw<remove_cv_t<T>>::value> {};
template <class T> constexpr bool is_signed_v = is_signed<T>::value;
template <class T> struct is_unsigned : integral_constant<bool, is_integral_v<T> && !is_signed_v<T>> {};
template <class T> constexpr bool is_unsigned_v = is_unsigned<T>::value;
template <class T> struct is_pointer : false_type {};
template <class T> struct is_pointer<T*> : true_type {};
template <class T> constexpr bool is_pointer_v = is_pointer<T>::value;
template <class T> struct is_const : false_type {};
template <class T> struct is_const<const T> : true_type {};
template <class T> constexpr bool is_const_v = is_const<T>::value;

template <class T> struct make_unsigned;
template <> struct make_unsigned<char> { typedef uchar type; };
template <> struct make_unsigned<signed char> { typedef uchar type; };
template <> struct make_unsigned<uchar> { typedef uchar type; };
template <> struct make_unsigned<short> { typedef ushort type; };
template <> struct make_unsigned<ushort> { typedef ushort type; };
template <> struct make_unsigned<int> { typedef uint type; };
template <> struct make_unsigned<uint> { typedef uint type; };
template <> struct make_unsigned<long> { typedef ulong type; };
template <> struct make_unsigned<ulong> { typedef ulong type; };
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;
template <class T> struct make_signed;
template <> struct make_signed<char> { typedef char type; };
template <> struct make_signed<uchar> { typedef char type; };
template <> struct make_signed<short> { typedef short type; };
template <> struct make_signed<ushort> { typedef short type; };
template <> struct make_signed<int> { typedef int type; };
template <> struct make_signed<uint> { typedef int type; };
template <> struct make_signed<long> { typedef long type; };
template <> struct make_signed<ulong> { typedef long type; };
template <class T> using make_signed_t = typename make_signed<T>::type;

template <class T> constexpr T&& forward(remove_reference_t<T>& t) noexcept { return static_cast<T&&>(t); }
template <class T> constexpr remove_reference_t<T>&& move(T&& t) noexcept { return static_cast<remove_reference_t<T>&&>(t); }

}  // namespace metal

// ------------------------------------------------------------------------ bfloat
namespace mcpu {
constexpr uint16_t float_to_bfloat_bits(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return uint16_t(u >> 16);
}
constexpr float bfloat_bits_to_float(uint16_t b) { return __builtin_bit_cast(float, uint32_t(b) << 16); }
}  // namespace mcpu

struct bfloat {
  uint16_t bits;
  bfloat() = default;
  template <class T, metal::enable_if_t<metal::is_arithmetic_v<T> && !metal::is_same_v<T, bfloat>, bool> = true>
  constexpr bfloat(T v) : bits(mcpu::float_to_bfloat_bits(float(v))) {}
  constexpr explicit operator float() const { return mcpu::bfloat_bits_to_float(bits); }
  template <class T, metal::enable_if_t<metal::is_arithmetic_v<T> && !metal::is_same_v<T, float> &&
                                            !metal::is_same_v<T, bfloat>, bool> = true>
  constexpr explicit operator T() const { return T(float(*this)); }
  constexpr bfloat operator-() const { return bfloat(-float(*this)); }
  constexpr bfloat operator+() const { return *this; }
};

namespace mcpu {
// Result of bfloat (op) U: bfloat with bfloat or an integer, float with float or half.
template <class U> struct bf_result { typedef bfloat type; };
template <> struct bf_result<float> { typedef float type; };
template <> struct bf_result<half> { typedef float type; };
template <class U> constexpr bool bf_operand = metal::is_arithmetic_v<U>;
}  // namespace mcpu

#define MCPU_BF_BINOP(OP)                                                                              \
  template <class U, metal::enable_if_t<mcpu::bf_operand<U>, bool> = true>                           \
  constexpr typename mcpu::bf_result<U>::type operator OP(bfloat a, U b) {                            \
    return typename mcpu::bf_result<U>::type(float(a) OP float(b));                                    \
  }                                                                                                    \
  template <class U, metal::enable_if_t<mcpu::bf_operand<U> && !metal::is_same_v<U, bfloat>, bool> = true> \
  constexpr typename mcpu::bf_result<U>::type operator OP(U a, bfloat b) {                            \
    return typename mcpu::bf_result<U>::type(float(a) OP float(b));                                    \
  }                                                                                                    \
  template <class U, metal::enable_if_t<mcpu::bf_operand<U>, bool> = true>                           \
  inline bfloat& operator OP##=(bfloat & a, U b) {                                                     \
    a = bfloat(float(a) OP float(b));                                                                  \
    return a;                                                                                          \
  }
MCPU_BF_BINOP(+)
MCPU_BF_BINOP(-)
MCPU_BF_BINOP(*)
MCPU_BF_BINOP(/)
#undef MCPU_BF_BINOP
#define MCPU_BF_CMP(OP)                                                                                \
  template <class U, metal::enable_if_t<mcpu::bf_operand<U>, bool> = true>                           \
  constexpr bool operator OP(bfloat a, U b) { return float(a) OP float(b); }                           \
  template <class U, metal::enable_if_t<mcpu::bf_operand<U> && !metal::is_same_v<U, bfloat>, bool> = true> \
  constexpr bool operator OP(U a, bfloat b) { return float(a) OP float(b); }
MCPU_BF_CMP(==)
MCPU_BF_CMP(!=)
MCPU_BF_CMP(<)
MCPU_BF_CMP(<=)
MCPU_BF_CMP(>)
MCPU_BF_CMP(>=)
#undef MCPU_BF_CMP
