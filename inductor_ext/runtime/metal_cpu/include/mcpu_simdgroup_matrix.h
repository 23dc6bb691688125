// simdgroup_matrix (8x8) and simdgroup_load / store / multiply / multiply_accumulate.
// Each lane holds two elements of a matrix, row r and columns c, c + 1 with
//   r = (q & 4) + (lane / 2) % 4,  c = (q & 2) * 2 + (lane % 2) * 2,  q = lane / 4
// (the layout Apple GPUs use, as read by MLX's steel kernels), so thread_elements() means the
// same here as on a Mac. Loads and stores touch only the lane's own elements; a multiply is a
// SIMD collective (all 32 lanes must take part) computed in float and rounded to the element type.
#pragma once
#include "mcpu_sync.h"

namespace mcpu {
struct MatrixCoord {
  int row, col;
};
inline MatrixCoord matrix_coord(int lane) {
  int q = lane / 4;
  return {(q & 4) + (lane / 2) % 4, (q & 2) * 2 + (lane % 2) * 2};
}
// Lane holding element (row, col) and which of its two elements it is.
inline int matrix_lane(int row, int col) {
  for (int l = 0; l < 32; l++) {
    MatrixCoord c = matrix_coord(l);
    if (c.row == row && (c.col == col || c.col + 1 == col)) return l;
  }
  return -1;
}
struct MatrixPair {
  float a[2], b[2];
};
}  // namespace mcpu

namespace metal {
template <class T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "the Metal-on-CPU executor models 8x8 simdgroup matrices only");
  vec<T, 2> e;
  simdgroup_matrix() = default;
  vec<T, 2>& thread_elements() { return e; }
  const vec<T, 2>& thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int C, int R> inline simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, C, R> m;
  m.e = vec<T, 2>(value, value);
  return m;
}

template <class T, class U, int C, int R>
inline void simdgroup_load(simdgroup_matrix<T, C, R>& d, const U* src, ulong elements_per_row = C,
                           ulong2 matrix_origin = ulong2(0, 0), bool transpose_matrix = false) {
  mcpu::MatrixCoord p = mcpu::matrix_coord(int(mcpu::g_current->info.thread_index_in_simdgroup));
  for (int i = 0; i < 2; i++) {
    ulong r = transpose_matrix ? ulong(p.col + i) : ulong(p.row);
    ulong c = transpose_matrix ? ulong(p.row) : ulong(p.col + i);
    d.e[i] = T(src[(matrix_origin.y + r) * elements_per_row + matrix_origin.x + c]);
  }
}

template <class T, class U, int C, int R>
inline void simdgroup_store(const simdgroup_matrix<T, C, R>& m, U* dst, ulong elements_per_row = C,
                            ulong2 matrix_origin = ulong2(0, 0), bool transpose_matrix = false) {
  mcpu::MatrixCoord p = mcpu::matrix_coord(int(mcpu::g_current->info.thread_index_in_simdgroup));
  for (int i = 0; i < 2; i++) {
    ulong r = transpose_matrix ? ulong(p.col + i) : ulong(p.row);
    ulong c = transpose_matrix ? ulong(p.row) : ulong(p.col + i);
    dst[(matrix_origin.y + r) * elements_per_row + matrix_origin.x + c] = U(m.e[i]);
  }
}

// d = a * b + c
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c,
                                          MCPU_AT) {
  mcpu::MatrixPair mine = {{float(a.e[0]), float(a.e[1])}, {float(b.e[0]), float(b.e[1])}};
  auto l = mcpu::exchange(mine, MCPU_HERE("simdgroup_multiply_accumulate"));
  if (l.snap->active != 0xFFFFFFFFull)
    mcpu::fail("simdgroup_multiply_accumulate with SIMD lanes inactive; every lane of the SIMD group must take part");
  mcpu::MatrixCoord p = mcpu::matrix_coord(l.self);
  for (int i = 0; i < 2; i++) {
    float acc = float(c.e[i]);
    for (int k = 0; k < 8; k++) {
      int la = mcpu::matrix_lane(p.row, k), lb = mcpu::matrix_lane(k, p.col + i);
      acc = __builtin_fmaf(l.at(la).a[k - mcpu::matrix_coord(la).col], l.at(lb).b[p.col + i - mcpu::matrix_coord(lb).col],
                           acc);
    }
    d.e[i] = TD(acc);
  }
}
template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b, MCPU_AT) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)), at_file, at_line);
}
}  // namespace metal
