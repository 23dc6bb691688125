// Threadgroup barriers, SIMD-group and quad-group collectives, atomics.
// Every collective hands its lane's value to the scheduler (mcpu_runtime.h) and computes its
// result from the values of the lanes that reached the same call site: the active lanes.
// Reading a lane that is not active is undefined on Apple GPUs: a checked launch fails on
// it, an unchecked one reads zeros.
#pragma once
#include "mcpu_math.h"

// Call-site parameters of every barrier and collective (g++ evaluates __builtin_LINE() in a
// default argument at the call only when it is the whole argument).
#define MCPU_AT const char *at_file = __builtin_FILE(), int at_line = __builtin_LINE()
#define MCPU_HERE(WHAT) ::mcpu::Site { at_file, at_line, WHAT }

namespace mcpu {
template <class T> struct Lanes {
  const Snapshot* snap;
  int self;
  bool active(int lane) const { return lane >= 0 && lane < MCPU_SIMD_WIDTH && ((snap->active >> lane) & 1); }
  T at(int lane) const {
    T v;
    memcpy(&v, snap->values[lane], sizeof(T));
    return v;
  }
  // The value of `lane`, read by this lane in `what`.
  T read(int lane, const char* what) const {
    if (active(lane)) return at(lane);
    if (g_group->checked) {
      fail("%s read SIMD lane %d, which is not active (finished, outside the threadgroup or on another "
           "path); its value is undefined on Apple GPUs",
           what, lane);
    }
    T zero;
    memset(&zero, 0, sizeof zero);
    return zero;
  }
};

template <class T> inline Lanes<T> exchange(const T& value, const Site& site) {
  static_assert(sizeof(T) <= MCPU_DEPOSIT_BYTES, "SIMD collective over a value larger than 64 bytes");
  const Snapshot* s = simd_exchange(&value, sizeof(T), site);
  return Lanes<T>{s, int(g_current->info.thread_index_in_simdgroup)};
}

template <class T, class F> inline T fold_active(const Lanes<T>& l, F f, int first = 0, int last = MCPU_SIMD_WIDTH) {
  bool have = false;
  T acc{};
  for (int i = first; i < last; i++) {
    if (!l.active(i)) continue;
    acc = have ? T(f(acc, l.at(i))) : l.at(i);
    have = true;
  }
  return acc;
}
}  // namespace mcpu

namespace metal {

enum class mem_flags : int {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }
constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(int(a) & int(b)); }

inline void threadgroup_barrier(mem_flags, MCPU_AT) {
#ifndef MCPU_NO_BARRIERS  // tests build without barriers to prove the executor models them
  mcpu::wait_barrier(MCPU_HERE("threadgroup_barrier"));
#else
  (void)at_file;
  (void)at_line;
#endif
}
inline void simdgroup_barrier(mem_flags, MCPU_AT) {
  mcpu::exchange(0, MCPU_HERE(__func__));
}

// ------------------------------------------------------------------------ reductions
#define MCPU_SIMD_REDUCE(NAME, OP)                                                                   \
  template <class T> inline T NAME(T v, MCPU_AT) {                       \
    auto l = mcpu::exchange(v, MCPU_HERE(__func__));                                                                \
    return mcpu::fold_active(l, [](T a, T b) { return OP; });                                        \
  }
MCPU_SIMD_REDUCE(simd_sum, a + b)
MCPU_SIMD_REDUCE(simd_product, a * b)
MCPU_SIMD_REDUCE(simd_max, max(a, b))
MCPU_SIMD_REDUCE(simd_min, min(a, b))
MCPU_SIMD_REDUCE(simd_and, a & b)
MCPU_SIMD_REDUCE(simd_or, a | b)
MCPU_SIMD_REDUCE(simd_xor, a ^ b)
#undef MCPU_SIMD_REDUCE

#define MCPU_SIMD_PREFIX(NAME, OP, INCLUSIVE, IDENTITY)                                              \
  template <class T> inline T NAME(T v, MCPU_AT) {                       \
    auto l = mcpu::exchange(v, MCPU_HERE(__func__));                                                                \
    T acc = T(IDENTITY);                                                                             \
    for (int i = 0; i < l.self + (INCLUSIVE ? 1 : 0); i++)                                           \
      if (l.active(i)) acc = T(acc OP l.at(i));                                                      \
    return acc;                                                                                      \
  }
MCPU_SIMD_PREFIX(simd_prefix_inclusive_sum, +, true, 0)
MCPU_SIMD_PREFIX(simd_prefix_exclusive_sum, +, false, 0)
MCPU_SIMD_PREFIX(simd_prefix_inclusive_product, *, true, 1)
MCPU_SIMD_PREFIX(simd_prefix_exclusive_product, *, false, 1)
#undef MCPU_SIMD_PREFIX

// ------------------------------------------------------------------------ data movement
template <class T> inline T simd_shuffle(T v, ushort lane, MCPU_AT) {
  return mcpu::exchange(v, MCPU_HERE(__func__)).read(lane, "simd_shuffle");
}
template <class T> inline T simd_broadcast(T v, ushort lane, MCPU_AT) {
  return mcpu::exchange(v, MCPU_HERE(__func__)).read(lane, "simd_broadcast");
}
template <class T> inline T simd_broadcast_first(T v, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  for (int i = 0; i < MCPU_SIMD_WIDTH; i++)
    if (l.active(i)) return l.at(i);
  return v;
}
// Lanes whose source is outside the SIMD group keep their own value (shuffle_down/up).
template <class T> inline T simd_shuffle_down(T v, ushort delta, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  int src = l.self + delta;
  return src < MCPU_SIMD_WIDTH ? l.read(src, "simd_shuffle_down") : v;
}
template <class T> inline T simd_shuffle_up(T v, ushort delta, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  int src = l.self - int(delta);
  return src >= 0 ? l.read(src, "simd_shuffle_up") : v;
}
template <class T> inline T simd_shuffle_xor(T v, ushort mask, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  return l.read((l.self ^ mask) & (MCPU_SIMD_WIDTH - 1), "simd_shuffle_xor");
}
template <class T> inline T simd_shuffle_rotate_down(T v, ushort delta, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  return l.read((l.self + delta) % MCPU_SIMD_WIDTH, "simd_shuffle_rotate_down");
}
template <class T> inline T simd_shuffle_rotate_up(T v, ushort delta, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  return l.read((l.self + MCPU_SIMD_WIDTH - delta % MCPU_SIMD_WIDTH) % MCPU_SIMD_WIDTH, "simd_shuffle_rotate_up");
}
// Lanes whose source is past the (modulo-sized) window take `fill`.
template <class T> inline T simd_shuffle_and_fill_down(T v, T fill, ushort delta, ushort modulo = MCPU_SIMD_WIDTH,
                                                       MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  int base = l.self - l.self % modulo, pos = l.self % modulo + delta;
  return pos < modulo ? l.read(base + pos, "simd_shuffle_and_fill_down") : fill;
}
template <class T> inline T simd_shuffle_and_fill_up(T v, T fill, ushort delta, ushort modulo = MCPU_SIMD_WIDTH,
                                                     MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  int base = l.self - l.self % modulo, pos = l.self % modulo - int(delta);
  return pos >= 0 ? l.read(base + pos, "simd_shuffle_and_fill_up") : fill;
}

// ------------------------------------------------------------------------ votes
struct simd_vote {
  typedef ulong vote_t;
  vote_t v;
  vote_t active;  // the lanes that took part
  explicit constexpr simd_vote(vote_t bits = 0) : v(bits), active(~vote_t(0)) {}
  explicit constexpr operator vote_t() const { return v; }
  bool any() const { return v != 0; }
  bool all() const;  // every active lane voted true
};
inline bool simd_vote::all() const { return (v & active) == active; }
inline simd_vote simd_ballot(bool b, MCPU_AT) {
  auto l = mcpu::exchange(b, MCPU_HERE(__func__));
  ulong bits = 0;
  for (int i = 0; i < MCPU_SIMD_WIDTH; i++)
    if (l.active(i) && l.at(i)) bits |= ulong(1) << i;
  simd_vote r(bits);
  r.active = l.snap->active;
  return r;
}
inline simd_vote simd_active_threads_mask(MCPU_AT) {
  auto l = mcpu::exchange(true, MCPU_HERE(__func__));
  simd_vote r(l.snap->active);
  r.active = l.snap->active;
  return r;
}
inline bool simd_any(bool b, MCPU_AT) { return simd_ballot(b, at_file, at_line).any(); }
inline bool simd_all(bool b, MCPU_AT) { return simd_ballot(b, at_file, at_line).all(); }
inline bool simd_is_first(MCPU_AT) {
  auto l = mcpu::exchange(true, MCPU_HERE(__func__));
  for (int i = 0; i < MCPU_SIMD_WIDTH; i++)
    if (l.active(i)) return i == l.self;
  return false;
}

// ------------------------------------------------------------------------ quad groups (4 lanes)
#define MCPU_QUAD_REDUCE(NAME, OP)                                                                   \
  template <class T> inline T NAME(T v, MCPU_AT) {                       \
    auto l = mcpu::exchange(v, MCPU_HERE(__func__));                                                                \
    int q = l.self & ~3;                                                                             \
    return mcpu::fold_active(l, [](T a, T b) { return OP; }, q, q + 4);                              \
  }
MCPU_QUAD_REDUCE(quad_sum, a + b)
MCPU_QUAD_REDUCE(quad_product, a * b)
MCPU_QUAD_REDUCE(quad_max, max(a, b))
MCPU_QUAD_REDUCE(quad_min, min(a, b))
MCPU_QUAD_REDUCE(quad_and, a & b)
MCPU_QUAD_REDUCE(quad_or, a | b)
MCPU_QUAD_REDUCE(quad_xor, a ^ b)
#undef MCPU_QUAD_REDUCE
template <class T> inline T quad_shuffle(T v, ushort lane, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  return l.read((l.self & ~3) + (lane & 3), "quad_shuffle");
}
template <class T> inline T quad_broadcast(T v, ushort lane, MCPU_AT) {
  return quad_shuffle(v, lane, at_file, at_line);
}
template <class T> inline T quad_shuffle_xor(T v, ushort mask, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  return l.read((l.self & ~3) + ((l.self ^ mask) & 3), "quad_shuffle_xor");
}
template <class T> inline T quad_shuffle_down(T v, ushort delta, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  int pos = (l.self & 3) + delta;
  return pos < 4 ? l.read((l.self & ~3) + pos, "quad_shuffle_down") : v;
}
template <class T> inline T quad_shuffle_up(T v, ushort delta, MCPU_AT) {
  auto l = mcpu::exchange(v, MCPU_HERE(__func__));
  int pos = (l.self & 3) - int(delta);
  return pos >= 0 ? l.read((l.self & ~3) + pos, "quad_shuffle_up") : v;
}

// ------------------------------------------------------------------------ atomics
// One OS thread runs every kernel thread and switches only at barriers and collectives, so
// plain loads and stores are atomic here.
enum memory_order { memory_order_relaxed, memory_order_acquire, memory_order_release, memory_order_acq_rel, memory_order_seq_cst };
enum class thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
inline void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope::thread_scope_device) {}

template <class T> struct atomic {
  T value;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<bool> atomic_bool;
typedef atomic<float> atomic_float;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;

template <class T, class U> inline void atomic_store_explicit(volatile atomic<T>* o, U v, memory_order = memory_order_relaxed) {
  const_cast<atomic<T>*>(o)->value = T(v);
}
template <class T> inline T atomic_load_explicit(const volatile atomic<T>* o, memory_order = memory_order_relaxed) {
  return const_cast<const atomic<T>*>(o)->value;
}
template <class T, class U> inline T atomic_exchange_explicit(volatile atomic<T>* o, U v, memory_order = memory_order_relaxed) {
  atomic<T>* p = const_cast<atomic<T>*>(o);
  T old = p->value;
  p->value = T(v);
  return old;
}
template <class T, class U>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* o, T* expected, U desired, memory_order = memory_order_relaxed,
                                                  memory_order = memory_order_relaxed) {
  atomic<T>* p = const_cast<atomic<T>*>(o);
  if (memcmp(&p->value, expected, sizeof(T)) == 0) {
    p->value = T(desired);
    return true;
  }
  *expected = p->value;
  return false;
}
template <class T, class U>
inline bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* o, T* expected, U desired, memory_order a = memory_order_relaxed,
                                                    memory_order b = memory_order_relaxed) {
  return atomic_compare_exchange_weak_explicit(o, expected, desired, a, b);
}
#define MCPU_ATOMIC_RMW(NAME, EXPR)                                                                  \
  template <class T, class U> inline T NAME(volatile atomic<T>* o, U operand, memory_order = memory_order_relaxed) { \
    atomic<T>* p = const_cast<atomic<T>*>(o);                                                        \
    T old = p->value, v = T(operand);                                                                \
    p->value = T(EXPR);                                                                              \
    return old;                                                                                      \
  }
MCPU_ATOMIC_RMW(atomic_fetch_add_explicit, old + v)
MCPU_ATOMIC_RMW(atomic_fetch_sub_explicit, old - v)
MCPU_ATOMIC_RMW(atomic_fetch_and_explicit, old & v)
MCPU_ATOMIC_RMW(atomic_fetch_or_explicit, old | v)
MCPU_ATOMIC_RMW(atomic_fetch_xor_explicit, old ^ v)
MCPU_ATOMIC_RMW(atomic_fetch_max_explicit, max(old, v))
MCPU_ATOMIC_RMW(atomic_fetch_min_explicit, min(old, v))
#undef MCPU_ATOMIC_RMW

}  // namespace metal
