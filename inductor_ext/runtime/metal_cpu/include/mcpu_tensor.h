// Metal 4 tensors (<metal_tensor>) and MetalPerformancePrimitives matmul2d, the subset Helion's
// Metal backend emits: tensor_inline tensors over device memory, slice / static_slice,
// matmul2d (multiply, multiply_accumulate, transposes) into a tensor or a destination
// cooperative_tensor (get_capacity / get_mask / [] / iterators / load / store).
//
// Model: a tensor index is (x0, x1) with x0 the contiguous dimension; every access is checked
// against the extents of the tensor the slice came from (reads outside give 0, writes outside
// are dropped), as Apple documents. An op on execution_simdgroups<S> runs on each group of S
// consecutive SIMD groups; its cooperative tensors give element e of the M x N tile (row-major)
// to thread e % (32 S) of the group. Each thread computes its own elements from the operands, so
// run() needs no synchronisation here. Needs C++20 (a descriptor is a template argument).
#pragma once
#include "mcpu_sync.h"

namespace metal {
constexpr size_t dynamic_extent = size_t(-1);

template <class I, size_t... E> struct extents {
  typedef I index_type;
  static constexpr int R = int(sizeof...(E));
  static constexpr size_t fixed[R] = {E...};
  I e[R];
  constexpr extents() : e{} {
    for (int d = 0; d < R; d++) e[d] = fixed[d] == dynamic_extent ? I(0) : I(fixed[d]);
  }
  // Either every extent, or the dynamic ones in order (as std::extents).
  template <class... D, enable_if_t<(sizeof...(D) > 0), bool> = true> constexpr extents(D... values) : e{} {
    const I v[] = {I(values)...};
    int next = 0;
    for (int d = 0; d < R; d++) {
      if (sizeof...(D) == size_t(R)) e[d] = v[d];
      else e[d] = fixed[d] == dynamic_extent ? v[next++] : I(fixed[d]);
    }
  }
  constexpr I extent(int d) const { return e[d]; }
  static constexpr int rank() { return R; }
};
template <class I, size_t R> struct dextents_of;
template <class I> struct dextents_of<I, 1> { typedef extents<I, dynamic_extent> type; };
template <class I> struct dextents_of<I, 2> { typedef extents<I, dynamic_extent, dynamic_extent> type; };
template <class I> struct dextents_of<I, 3> { typedef extents<I, dynamic_extent, dynamic_extent, dynamic_extent> type; };
template <class I, size_t R> using dextents = typename dextents_of<I, R>::type;

struct tensor_inline {};
struct tensor_handle {};
struct tensor_offset {};

template <class T, class Ext, class Kind = tensor_handle> struct tensor {
  typedef T element_type;
  typedef Ext extents_type;
  typedef typename Ext::index_type index_type;
  static constexpr int R = Ext::R;
  T* data;
  Ext ext;
  long stride[R];
  long valid[R];  // extent in bounds of the original tensor, from this origin

  tensor() = default;
  tensor(T* p, Ext e) : data(p), ext(e) {
    long s = 1;
    for (int d = 0; d < R; d++) {
      stride[d] = s;
      s *= long(e.extent(d));
      valid[d] = long(e.extent(d));
    }
  }
  template <class E2, class K2> tensor(const tensor<T, E2, K2>& o, Ext e) : data(o.data), ext(e) {
    for (int d = 0; d < R; d++) {
      stride[d] = o.stride[d];
      valid[d] = o.valid[d] < long(e.extent(d)) ? o.valid[d] : long(e.extent(d));
    }
  }
  index_type extent(int d) const { return ext.extent(d); }
  Ext extents() const { return ext; }
  bool inside(long x0, long x1) const { return x0 >= 0 && x1 >= 0 && x0 < valid[0] && x1 < valid[1]; }
  T& at(long x0, long x1) const { return data[x0 * stride[0] + x1 * stride[1]]; }
  float get(long x0, long x1) const { return inside(x0, x1) ? float(at(x0, x1)) : 0.0f; }

  template <class... O> tensor<T, dextents<index_type, R>, tensor_offset> slice(O... origin) const {
    return offset_by<dextents<index_type, R>>(origin...);
  }
  template <size_t... S, class... O, enable_if_t<sizeof...(S) == size_t(R), bool> = true>
  tensor<T, metal::extents<index_type, S...>, tensor_offset> slice(O... origin) const {
    return offset_by<metal::extents<index_type, S...>>(origin...);
  }
  template <size_t... S, class... O> tensor<T, metal::extents<index_type, S...>, tensor_offset> static_slice(O... origin) const {
    return offset_by<metal::extents<index_type, S...>>(origin...);
  }

 private:
  template <class E2, class... O> tensor<T, E2, tensor_offset> offset_by(O... origin) const {
    static_assert(sizeof...(O) == size_t(R), "slice: one origin per dimension");
    const long o[] = {long(origin)...};
    E2 e2;
    long off = 0;
    tensor<T, E2, tensor_offset> r;
    for (int d = 0; d < R; d++) {
      long left = valid[d] - o[d] > 0 ? valid[d] - o[d] : 0;
      e2.e[d] = E2::fixed[d] == dynamic_extent ? index_type(long(ext.extent(d)) - o[d]) : index_type(E2::fixed[d]);
      r.stride[d] = stride[d];
      r.valid[d] = left < long(e2.e[d]) ? left : long(e2.e[d]);
      off += o[d] * stride[d];
    }
    r.data = data + off;
    r.ext = e2;
    return r;
  }
  template <class, class, class> friend struct tensor;
};

template <int N> struct execution_simdgroups {
  static constexpr int simdgroups = N;
};
typedef execution_simdgroups<1> execution_simdgroup;
}  // namespace metal

namespace mpp {
namespace tensor_ops {

struct matmul2d_descriptor {
  enum class mode { multiply, multiply_accumulate };
  int m, n, k;
  bool transpose_left, transpose_right, relaxed_precision;
  mode matmul_mode;
  constexpr matmul2d_descriptor(int m_, int n_, int k_ = int(metal::dynamic_extent), bool tl = false, bool tr = false,
                                bool relaxed = false, mode md = mode::multiply)
      : m(m_), n(n_), k(k_), transpose_left(tl), transpose_right(tr), relaxed_precision(relaxed), matmul_mode(md) {}
};

// The calling thread's index in its execution group of S SIMD groups.
inline int execution_thread(int S) {
  const ::mcpu::ThreadInfo& t = ::mcpu::g_current->info;
  if (t.simdgroups_per_threadgroup % S != 0)
    ::mcpu::fail("matmul2d on execution_simdgroups<%d> in a threadgroup of %u SIMD groups (not a multiple)", S,
                 t.simdgroups_per_threadgroup);
  return int(t.simdgroup_index_in_threadgroup % S) * 32 + int(t.thread_index_in_simdgroup);
}

template <class E, int M, int N, int THREADS> struct cooperative_tensor {
  static constexpr int capacity = (M * N + THREADS - 1) / THREADS;
  E v[capacity];
  int owner;
  cooperative_tensor() : v{}, owner(execution_thread(THREADS / 32)) {}
  uint16_t get_capacity() const { return capacity; }
  bool get_mask(int i) const { return owner + i * THREADS < M * N; }
  E& operator[](int i) { return v[i]; }
  const E& operator[](int i) const { return v[i]; }
  int row(int i) const { return (owner + i * THREADS) / N; }
  int col(int i) const { return (owner + i * THREADS) % N; }
  metal::array<int, 2> get_multidimensional_index(int i) const { return {col(i), row(i)}; }
  struct iterator {
    cooperative_tensor* c;
    int i;
    E& operator*() const { return c->v[i]; }
    iterator& operator++() {
      ++i;
      return *this;
    }
    iterator operator++(int) {
      iterator old = *this;
      ++i;
      return old;
    }
    bool operator!=(const iterator& o) const { return i != o.i; }
    bool operator==(const iterator& o) const { return i == o.i; }
  };
  int valid_count() const {
    int n = 0;
    while (n < capacity && get_mask(n)) n++;
    return n;
  }
  iterator begin() { return iterator{this, 0}; }
  iterator end() { return iterator{this, valid_count()}; }
  template <class Tn> void load(const Tn& t) {
    for (int i = 0; i < valid_count(); i++) v[i] = E(t.get(col(i), row(i)));
  }
  template <class Tn> void store(const Tn& t) const {
    for (int i = 0; i < valid_count(); i++)
      if (t.inside(col(i), row(i))) t.at(col(i), row(i)) = v[i];
  }
};

template <matmul2d_descriptor D, class Scope> struct matmul2d {
  static constexpr int THREADS = 32 * Scope::simdgroups;

  template <class L, class R, class E> cooperative_tensor<E, D.m, D.n, THREADS> get_destination_cooperative_tensor() const {
    return cooperative_tensor<E, D.m, D.n, THREADS>();
  }

  template <class L, class R> static float dot(const L& lhs, const R& rhs, int i, int j) {
    const long kmax = D.transpose_left ? lhs.valid[1] : lhs.valid[0];
    const long kend = D.k == int(metal::dynamic_extent) || D.k > kmax ? kmax : D.k;
    float acc = 0.0f;
    for (long k = 0; k < kend; k++) {
      float a = D.transpose_left ? lhs.get(i, k) : lhs.get(k, i);
      float b = D.transpose_right ? rhs.get(k, j) : rhs.get(j, k);
      acc = __builtin_fmaf(a, b, acc);
    }
    return acc;
  }

  template <class L, class R, class E, int M, int N, int T>
  void run(const L& lhs, const R& rhs, cooperative_tensor<E, M, N, T>& dest) const {
    static_assert(M == D.m && N == D.n && T == THREADS, "cooperative tensor of another matmul2d");
    for (int i = 0; i < dest.valid_count(); i++) {
      float p = dot(lhs, rhs, dest.row(i), dest.col(i));
      dest.v[i] = E(D.matmul_mode == matmul2d_descriptor::mode::multiply ? p : float(dest.v[i]) + p);
    }
  }
  template <class L, class R, class T, class Ext, class K>
  void run(const L& lhs, const R& rhs, const metal::tensor<T, Ext, K>& dest) const {
    const int t = execution_thread(Scope::simdgroups);
    for (int e = t; e < D.m * D.n; e += THREADS) {
      const int i = e / D.n, j = e % D.n;
      if (!dest.inside(j, i)) continue;
      float p = dot(lhs, rhs, i, j);
      dest.at(j, i) = T(D.matmul_mode == matmul2d_descriptor::mode::multiply ? p : float(dest.at(j, i)) + p);
    }
  }
};

}  // namespace tensor_ops
}  // namespace mpp
