// Flash attention for the CPU, AVX-512 (bf16: AVX512_BF16's vdpbf16ps) or AVX2 + FMA: q (B, H, Lq, D),
// k and v (B, Hkv, Lk, D), H a multiple of Hkv, any strides with the last one 1; an optional bool mask
// broadcast to (B, H, Lq, Lk), its key stride 1 (true: the query attends); out (B, H, Lq, D)
// contiguous. Blocks of 32 queries against blocks of 64 keys, an online softmax in fp32, fp32
// accumulation; with AVX-512 in bf16, q * scale and the probabilities are rounded to bf16 before their
// dot products (as ATen's flash kernel rounds the probabilities). A block of keys the mask hides from
// every query of a block is skipped; a query that sees no key gives zeros (as ATen's SDPA).
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>

#define EXT_D {D}
#define EXT_BF16 {BF16}
#define EXT_AVX512 {AVX512}
#define EXT_CAUSAL {CAUSAL}

namespace {
#if EXT_AVX512
constexpr int D = EXT_D, QB = 32, KB = 64, W = 16, NV = D / W;
// a PV tile: PR queries x DC of the head dim (NC vectors), at most 128 wide so that it fits 32 registers
constexpr int DC = D < 128 ? D : 128, NC = DC / W, PR = DC <= 64 ? 4 : 2;
using vec = __m512;
inline vec vzero() { return _mm512_setzero_ps(); }
inline vec vset1(float x) { return _mm512_set1_ps(x); }
inline vec vmul(vec a, vec b) { return _mm512_mul_ps(a, b); }
inline vec vload(const float* p) { return _mm512_load_ps(p); }
inline void vstore(float* p, vec x) { _mm512_store_ps(p, x); }
inline vec vmax(vec a, vec b) { return _mm512_max_ps(a, b); }
inline vec vfmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
inline vec vfnmadd(vec a, vec b, vec c) { return _mm512_fnmadd_ps(a, b, c); }
inline vec vround(vec x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
constexpr float EXP_MIN = -88.f;  // scalef takes n down to -127
inline vec vscale2(vec p, vec n) { return _mm512_scalef_ps(p, n); }  // p * 2^n
#else
constexpr int D = EXT_D, QB = 32, KB = 64, W = 8, NV = D / W;
using vec = __m256;
inline vec vzero() { return _mm256_setzero_ps(); }
inline vec vset1(float x) { return _mm256_set1_ps(x); }
inline vec vmul(vec a, vec b) { return _mm256_mul_ps(a, b); }
inline vec vload(const float* p) { return _mm256_load_ps(p); }
inline void vstore(float* p, vec x) { _mm256_store_ps(p, x); }
inline vec vmax(vec a, vec b) { return _mm256_max_ps(a, b); }
inline vec vfmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
inline vec vfnmadd(vec a, vec b, vec c) { return _mm256_fnmadd_ps(a, b, c); }
inline vec vround(vec x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
constexpr float EXP_MIN = -87.f;  // 2^n is built from its exponent bits below: n >= -126
inline vec vscale2(vec p, vec n) {  // p * 2^n, n in [-126, 0] (a NaN's n gives any bits: p is NaN already)
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline float reduce_max(vec v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline float reduce_add(vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// lanes l < n (n in [0, 8]) where m[l] is true (every lane when m is null), as an all-ones lane mask
inline vec visible(const uint8_t* m, int64_t n) {
  if (n >= 8) {
    if (!m) return _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)m));
    return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_cmpeq_epi32(b, _mm256_setzero_si256()), _mm256_set1_epi32(-1)));
  }
  alignas(32) int32_t lanes[8];
  for (int l = 0; l < 8; ++l) lanes[l] = l < n && (!m || m[l]) ? -1 : 0;
  return _mm256_castsi256_ps(_mm256_load_si256((const __m256i*)lanes));
}
#endif

inline vec exp_ps(vec x) {  // e^x, ~1 ulp; x <= 0 or NaN here; a masked lane is zeroed by the caller
  x = vmax(vset1(EXP_MIN), x);  // this operand order keeps a NaN (maxps returns the second)
  const vec n = vround(vmul(x, vset1(1.44269504088896341f)));
  vec r = vfnmadd(n, vset1(0.693359375f), x);
  r = vfnmadd(n, vset1(-2.12194440e-4f), r);
  vec p = vset1(1.f / 720);
  p = vfmadd(p, r, vset1(1.f / 120));
  p = vfmadd(p, r, vset1(1.f / 24));
  p = vfmadd(p, r, vset1(1.f / 6));
  p = vfmadd(p, r, vset1(0.5f));
  p = vfmadd(p, r, vset1(1.f));
  p = vfmadd(p, r, vset1(1.f));
  return vscale2(p, n);
}

#if EXT_BF16
using T = uint16_t;  // bf16 bits
inline float to_float(T x) { const uint32_t u = uint32_t(x) << 16; float f; memcpy(&f, &u, 4); return f; }
#if EXT_AVX512
inline vec load_ps(const T* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
inline void store_ps(T* p, vec x) { _mm256_storeu_si256((__m256i*)p, (__m256i)_mm512_cvtneps_pbh(x)); }
#else
inline vec load_ps(const T* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
inline void store_ps(T* p, vec x) {  // to nearest even; a NaN stays a NaN
  const __m256i u = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
  _mm_storeu_si128((__m128i*)p, _mm256_castsi256_si128(packed));
}
#endif
#else
using T = float;
inline float to_float(T x) { return x; }
#if EXT_AVX512
inline vec load_ps(const T* p) { return _mm512_loadu_ps(p); }
inline void store_ps(T* p, vec x) { _mm512_storeu_ps(p, x); }
#else
inline vec load_ps(const T* p) { return _mm256_loadu_ps(p); }
inline void store_ps(T* p, vec x) { _mm256_storeu_ps(p, x); }
#endif
#endif

// how many of the W keys of lane group c a query sees before its mask: those of the block's nk, and
// under is_causal those up to its own position (``last``: the query's index less the block's first key)
inline int64_t visible_keys(int64_t nk, int64_t last, int c) {
  int64_t n = std::min<int64_t>(W, nk - c * W);
#if EXT_CAUSAL
  n = std::min<int64_t>(n, last - c * W + 1);
#endif
  return std::max<int64_t>(0, n);
}

// S: how keys, values, q * scale and the probabilities are kept for the dot products: bf16 for
// vdpbf16ps (AVX-512 in bf16), fp32 otherwise
#if EXT_AVX512 && EXT_BF16
using S = T;
inline void store_s(S* p, vec x) { store_ps(p, x); }
#else
using S = float;
inline void store_s(S* p, vec x) { vstore(p, x); }
#endif
inline float vsum(vec v) {
#if EXT_AVX512
  return _mm512_reduce_add_ps(v);
#else
  return reduce_add(v);
#endif
}

// One query per sequence (a decode step): nothing packed (each visible key and value row is read
// once, straight from the cache), one (batch, head) a task, and a key the mask hides is never read:
// a static KV cache's unwritten slots cost their mask bytes only. The visible keys are listed first, a
// block of DKB keys at a time (long runs of rows, which the prefetchers follow), then scored 4 at a
// time (4 independent dot products keep 4 rows in flight).
constexpr int DKB = 256;
int decode(const T* Q, const T* K, const T* V, const uint8_t* M, T* O, int64_t B, int64_t H, int64_t Hkv,
           int64_t Lk, const int64_t* sq, const int64_t* sk, const int64_t* sv, const int64_t* sm, float scale,
           int threads) {
  const int64_t group = H / Hkv;
#pragma omp parallel for num_threads(threads)
  for (int64_t x = 0; x < B * H; ++x) {
    const int64_t b = x / H, h = x % H, hk = h / group;
    alignas(64) float q[D], acc[D], sc[DKB], seen[DKB];
    int64_t at[DKB];  // the block's visible keys
    for (int c = 0; c < NV; ++c) {
      vstore(&q[c * W], vmul(load_ps(Q + b * sq[0] + h * sq[1] + c * W), vset1(scale)));
      vstore(&acc[c * W], vzero());
    }
    const uint8_t* mr = M ? M + b * sm[0] + h * sm[1] : nullptr;
    const T* kh = K + b * sk[0] + hk * sk[1];
    const T* vh = V + b * sv[0] + hk * sv[1];
    float mx = -INFINITY, sum = 0.f;
    bool nan = false;  // a NaN among the scores it sees: the output is NaN, as softmax's
    for (int64_t j0 = 0; j0 < Lk; j0 += DKB) {
      const int64_t nk = std::min<int64_t>(DKB, Lk - j0);
      int64_t n = 0;
      for (int64_t j = 0; j < nk; ++j)
        if (!mr || mr[j0 + j]) at[n++] = j0 + j;
      if (!n) continue;
      float m = mx;
      for (int64_t t = 0; t < n; t += 4) {
        const T* r[4];
        for (int u = 0; u < 4; ++u) r[u] = kh + at[std::min<int64_t>(t + u, n - 1)] * sk[2];
        vec a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
        for (int c = 0; c < NV; ++c) {
          const vec qc = vload(&q[c * W]);
          a0 = vfmadd(qc, load_ps(r[0] + c * W), a0);
          a1 = vfmadd(qc, load_ps(r[1] + c * W), a1);
          a2 = vfmadd(qc, load_ps(r[2] + c * W), a2);
          a3 = vfmadd(qc, load_ps(r[3] + c * W), a3);
        }
        const float s4[4] = {vsum(a0), vsum(a1), vsum(a2), vsum(a3)};
        for (int u = 0; u < 4 && t + u < n; ++u) {
          nan |= s4[u] != s4[u];
          sc[t + u] = s4[u];
          m = std::max(m, s4[u]);
        }
      }
      for (int64_t t = 0; t < DKB; ++t) {
        seen[t] = t < n ? 1.f : 0.f;
        if (t >= n) sc[t] = -INFINITY;
      }
      if (m == -INFINITY) continue;  // nothing but -inf scores yet
      const float corr = expf(mx - m);
      vec sw = vzero();
      for (int c = 0; c < DKB / W; ++c) {  // probabilities; the lanes past the visible keys zeroed
        const vec e = vmul(exp_ps(vfnmadd(vset1(1.f), vset1(m), vload(&sc[c * W]))), vload(&seen[c * W]));
        vstore(&sc[c * W], e);
        sw = vfmadd(vset1(1.f), e, sw);
      }
      sum = sum * corr + vsum(sw);
      mx = m;
      vec o[NV];
      for (int c = 0; c < NV; ++c) o[c] = vmul(vset1(corr), vload(&acc[c * W]));
      for (int64_t t = 0; t < n; ++t) {
        const T* vr = vh + at[t] * sv[2];
        const vec p = vset1(sc[t]);
        for (int c = 0; c < NV; ++c) o[c] = vfmadd(p, load_ps(vr + c * W), o[c]);
      }
      for (int c = 0; c < NV; ++c) vstore(&acc[c * W], o[c]);
    }
    const float inv = nan ? NAN : sum > 0.f ? 1.f / sum : sum == 0.f ? 0.f : NAN;
    T* o = O + (b * H + h) * D;
    for (int c = 0; c < NV; ++c) store_ps(o + c * W, vmul(vload(&acc[c * W]), vset1(inv)));
  }
  return 0;
}
}  // namespace

extern "C" int {NAME}(const T* Q, const T* K, const T* V, const uint8_t* M, T* O, int64_t B, int64_t H, int64_t Hkv,
                      int64_t L, int64_t Lk, const int64_t* sq, const int64_t* sk, const int64_t* sv, const int64_t* sm,
                      float scale, int threads) {
#if !EXT_CAUSAL
  if (L == 1) return decode(Q, K, V, M, O, B, H, Hkv, Lk, sq, sk, sv, sm, scale, threads);
#endif
  const int64_t group = H / Hkv, nkb = (Lk + KB - 1) / KB, nqb = (L + QB - 1) / QB;
  // keys and values of each (batch, kv head, block of 64 keys) packed once: for vdpbf16ps as pairs
  // (K: [D/2][64][2], V: [32][D][2]), otherwise in fp32 as K^T [D][64] and V [64][D]
  std::vector<S> KP(B * Hkv * nkb * KB * D, S(0)), VP(B * Hkv * nkb * KB * D, S(0));
#pragma omp parallel for num_threads(threads)
  for (int64_t x = 0; x < B * Hkv * nkb; ++x) {
    const int64_t b = x / (Hkv * nkb), h = x / nkb % Hkv, kb = x % nkb;
    S* kp = KP.data() + x * KB * D;
    S* vp = VP.data() + x * KB * D;
    for (int64_t j = 0; j < KB && kb * KB + j < Lk; ++j) {
      const T* kr = K + b * sk[0] + h * sk[1] + (kb * KB + j) * sk[2];
      const T* vr = V + b * sv[0] + h * sv[1] + (kb * KB + j) * sv[2];
      for (int d = 0; d < D; ++d) {
#if EXT_AVX512 && EXT_BF16
        kp[((d / 2) * KB + j) * 2 + (d & 1)] = kr[d];
        vp[((j / 2) * D + d) * 2 + (j & 1)] = vr[d];
#else
        kp[d * KB + j] = to_float(kr[d]);
        vp[j * D + d] = to_float(vr[d]);
#endif
      }
    }
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic)
  for (int64_t x = 0; x < B * H * nqb; ++x) {
    const int64_t b = x / (H * nqb), h = x / nqb % H, qb = x % nqb, hk = h / group;
    const int64_t i0 = qb * QB, nq = std::min<int64_t>(QB, L - i0);
    alignas(64) S qs[QB][D], pr[QB][KB];  // q * scale, probabilities
    alignas(64) float sc[QB][KB], acc[QB][D], mx[QB], sum[QB];
    bool nan[QB] = {};  // a NaN among the scores a query sees: its whole row is NaN, as softmax's
    for (int64_t i = 0; i < QB; ++i) {
      for (int c = 0; c < NV; ++c) {
        const vec qv = i < nq ? vmul(load_ps(Q + b * sq[0] + h * sq[1] + (i0 + i) * sq[2] + c * W), vset1(scale)) : vzero();
        store_s(&qs[i][c * W], qv);
        vstore(&acc[i][c * W], vzero());
      }
      mx[i] = -INFINITY;
      sum[i] = 0.f;
    }
    const uint8_t* mq = M ? M + b * sm[0] + h * sm[1] + i0 * sm[2] : nullptr;
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t j0 = kb * KB, nk = std::min<int64_t>(KB, Lk - j0);
#if EXT_CAUSAL
      if (j0 > i0 + nq - 1) break;  // is_causal (aligned top-left): query i sees keys j <= i, none here on
#endif
      const uint8_t* mb = mq;  // the block's mask; null when every query of the block sees every key
      if (mq) {  // skip a block no query of this block may see (a row's 64 mask bytes at once)
        bool any = false, all = true;
        for (int64_t i = 0; i < nq; ++i) {
          const uint8_t* row = mq + i * sm[2] + j0;
#if EXT_AVX512
          const __mmask64 inside = nk >= 64 ? ~0ULL : (1ULL << nk) - 1;
          const __mmask64 seen = _mm512_test_epi8_mask(_mm512_maskz_loadu_epi8(inside, row), _mm512_set1_epi8(-1));
          any |= seen != 0;
          all &= seen == inside;
#else
          if (nk == KB) {
            const __m256i lo = _mm256_loadu_si256((const __m256i*)row), hi = _mm256_loadu_si256((const __m256i*)(row + 32));
            const __m256i zero = _mm256_setzero_si256(), either = _mm256_or_si256(lo, hi);
            any |= !_mm256_testz_si256(either, either);
            all &= (_mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, zero)) | _mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, zero))) == 0;
          } else {
            for (int64_t j = 0; j < nk; ++j) {
              any |= row[j] != 0;
              all &= row[j] != 0;
            }
          }
#endif
        }
        if (!any) continue;
        if (all) mb = nullptr;
      }
      const S* kp = KP.data() + ((b * Hkv + hk) * nkb + kb) * KB * D;
      const S* vp = VP.data() + ((b * Hkv + hk) * nkb + kb) * KB * D;
#if EXT_AVX512
      for (int64_t i = 0; i < QB; i += 4) {  // scores: 4 queries x 64 keys a tile
        __m512 a[4][4];
        for (int r = 0; r < 4; ++r)
          for (int c = 0; c < 4; ++c) a[r][c] = _mm512_setzero_ps();
#if EXT_BF16
        for (int p = 0; p < D / 2; ++p) {
          const S* kr = kp + p * KB * 2;
          __m512bh k4[4];
          for (int c = 0; c < 4; ++c) k4[c] = (__m512bh)_mm512_loadu_si512(kr + c * 32);
          for (int r = 0; r < 4; ++r) {
            const __m512bh qv = (__m512bh)_mm512_set1_epi32(*(const int32_t*)&qs[i + r][2 * p]);
            for (int c = 0; c < 4; ++c) a[r][c] = _mm512_dpbf16_ps(a[r][c], qv, k4[c]);
          }
        }
#else
        for (int d = 0; d < D; ++d) {
          __m512 k4[4];
          for (int c = 0; c < 4; ++c) k4[c] = _mm512_loadu_ps(kp + d * KB + c * 16);
          for (int r = 0; r < 4; ++r) {
            const __m512 qv = _mm512_set1_ps(qs[i + r][d]);
            for (int c = 0; c < 4; ++c) a[r][c] = _mm512_fmadd_ps(qv, k4[c], a[r][c]);
          }
        }
#endif
        for (int r = 0; r < 4; ++r)
          for (int c = 0; c < 4; ++c) _mm512_store_ps(&sc[i + r][c * 16], a[r][c]);
      }
#else
      for (int64_t i = 0; i < QB; i += 2)  // scores: 2 queries x 32 keys a tile
        for (int j = 0; j < KB; j += 32) {
          __m256 a[2][4];
          for (int r = 0; r < 2; ++r)
            for (int c = 0; c < 4; ++c) a[r][c] = _mm256_setzero_ps();
          for (int d = 0; d < D; ++d) {
            __m256 k4[4];
            for (int c = 0; c < 4; ++c) k4[c] = _mm256_loadu_ps(kp + d * KB + j + c * 8);
            for (int r = 0; r < 2; ++r) {
              const __m256 qv = _mm256_broadcast_ss(&qs[i + r][d]);
              for (int c = 0; c < 4; ++c) a[r][c] = _mm256_fmadd_ps(qv, k4[c], a[r][c]);
            }
          }
          for (int r = 0; r < 2; ++r)
            for (int c = 0; c < 4; ++c) _mm256_store_ps(&sc[i + r][j + c * 8], a[r][c]);
        }
#endif
      for (int64_t i = 0; i < QB; ++i) {  // mask, online softmax
        float m = mx[i];
#if EXT_AVX512
        __mmask16 seen[KB / W];  // each lane's key visible to this query
        __m512 m16 = _mm512_set1_ps(-INFINITY);
        for (int c = 0; c < KB / W; ++c) {
          const int64_t n = visible_keys(nk, i0 + i - j0, c);
          __mmask16 inside = i < nq ? (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1) : 0;
          seen[c] = mb ? _mm_mask_cmpneq_epi8_mask(inside, _mm_maskz_loadu_epi8(inside, mb + i * sm[2] + j0 + c * 16),
                                                   _mm_setzero_si128())
                       : inside;
          const __m512 x = _mm512_load_ps(&sc[i][c * 16]);
          m16 = _mm512_mask_max_ps(m16, seen[c], m16, x);
          nan[i] |= _mm512_mask_cmp_ps_mask(seen[c], x, x, _CMP_UNORD_Q) != 0;
        }
        m = std::max(m, _mm512_reduce_max_ps(m16));
#else
        __m256 vis[KB / W];  // each lane's key visible to this query, as an all-ones lane
        __m256 m8 = _mm256_set1_ps(-INFINITY);
        int unordered = 0;
        for (int c = 0; c < KB / W; ++c) {
          const int64_t n = i < nq ? visible_keys(nk, i0 + i - j0, c) : 0;
          vis[c] = visible(mb && n ? mb + i * sm[2] + j0 + c * 8 : nullptr, n);
          const __m256 x = _mm256_load_ps(&sc[i][c * 8]);
          m8 = _mm256_blendv_ps(m8, _mm256_max_ps(m8, x), vis[c]);
          unordered |= _mm256_movemask_ps(_mm256_and_ps(vis[c], _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
        }
        nan[i] |= unordered != 0;
        m = std::max(m, reduce_max(m8));
#endif
        if (m == -INFINITY) {  // nothing seen yet
          for (int c = 0; c < KB / W; ++c) store_s(&pr[i][c * W], vzero());
          continue;
        }
        const float corr = expf(mx[i] - m);
        vec sw = vzero();
        for (int c = 0; c < KB / W; ++c) {
#if EXT_AVX512
          const vec e = _mm512_maskz_mov_ps(seen[c], exp_ps(_mm512_sub_ps(vload(&sc[i][c * W]), vset1(m))));
          sw = _mm512_add_ps(sw, e);
#else
          const vec e = _mm256_and_ps(vis[c], exp_ps(_mm256_sub_ps(vload(&sc[i][c * W]), vset1(m))));
          sw = _mm256_add_ps(sw, e);
#endif
          store_s(&pr[i][c * W], e);
        }
        sum[i] = sum[i] * corr + vsum(sw);
        mx[i] = m;
        if (corr != 1.f)
          for (int c = 0; c < NV; ++c) vstore(&acc[i][c * W], vmul(vset1(corr), vload(&acc[i][c * W])));
      }
#if EXT_AVX512
      for (int64_t i = 0; i < QB; i += PR)  // acc += P V: PR queries x DC of D a tile
        for (int d0 = 0; d0 < D; d0 += DC) {
          __m512 a[PR][NC];
          for (int r = 0; r < PR; ++r)
            for (int c = 0; c < NC; ++c) a[r][c] = _mm512_load_ps(&acc[i + r][d0 + c * 16]);
#if EXT_BF16
          for (int64_t jp = 0; jp < (nk + 1) / 2; ++jp) {  // an odd last key pairs with a zero probability
            __m512bh vv[NC];
            for (int c = 0; c < NC; ++c) vv[c] = (__m512bh)_mm512_loadu_si512(vp + (jp * D + d0) * 2 + c * 32);
            for (int r = 0; r < PR; ++r) {
              const __m512bh pv = (__m512bh)_mm512_set1_epi32(*(const int32_t*)&pr[i + r][2 * jp]);
              for (int c = 0; c < NC; ++c) a[r][c] = _mm512_dpbf16_ps(a[r][c], pv, vv[c]);
            }
          }
#else
          for (int64_t j = 0; j < nk; ++j) {
            __m512 vv[NC];
            for (int c = 0; c < NC; ++c) vv[c] = _mm512_loadu_ps(vp + j * D + d0 + c * 16);
            for (int r = 0; r < PR; ++r) {
              const __m512 pv = _mm512_set1_ps(pr[i + r][j]);
              for (int c = 0; c < NC; ++c) a[r][c] = _mm512_fmadd_ps(pv, vv[c], a[r][c]);
            }
          }
#endif
          for (int r = 0; r < PR; ++r)
            for (int c = 0; c < NC; ++c) _mm512_store_ps(&acc[i + r][d0 + c * 16], a[r][c]);
        }
#else
      for (int64_t i = 0; i < QB; i += 2)  // acc += P V: 2 queries x 32 of D a tile
        for (int d0 = 0; d0 < D; d0 += 32) {
          __m256 a[2][4];
          for (int r = 0; r < 2; ++r)
            for (int c = 0; c < 4; ++c) a[r][c] = _mm256_load_ps(&acc[i + r][d0 + c * 8]);
          for (int64_t j = 0; j < nk; ++j) {
            __m256 vv[4];
            for (int c = 0; c < 4; ++c) vv[c] = _mm256_loadu_ps(vp + j * D + d0 + c * 8);
            for (int r = 0; r < 2; ++r) {
              const __m256 pv = _mm256_broadcast_ss(&pr[i + r][j]);
              for (int c = 0; c < 4; ++c) a[r][c] = _mm256_fmadd_ps(pv, vv[c], a[r][c]);
            }
          }
          for (int r = 0; r < 2; ++r)
            for (int c = 0; c < 4; ++c) _mm256_store_ps(&acc[i + r][d0 + c * 8], a[r][c]);
        }
#endif
    }
    for (int64_t i = 0; i < nq; ++i) {
      const float inv = nan[i] ? NAN : sum[i] > 0.f ? 1.f / sum[i] : sum[i] == 0.f ? 0.f : NAN;
      T* o = O + ((b * H + h) * L + i0 + i) * D;
      for (int c = 0; c < NV; ++c) store_ps(o + c * W, vmul(vload(&acc[i][c * W]), vset1(inv)));
    }
  }
  return 0;
}
