// normlab CPU kernel: scaled dot-product attention with the softmax score normalizer,
// forward and backward, for the small head dimensions of CPU-sized transformers.
//
// For each (batch, head) slice of float32 (B, H, T, D) queries, keys and values (rows of D
// contiguous floats; the slice's base and row stride given by strides sb, sh, st shared by
// q, k and v, so the heads can be views into one projection's (B, T, 3 H D) output):
//   s_ij = scale * q_i . k_j   (j <= i when causal),   p_ij = exp(s_ij - lse_i),
//   lse_i = m_i + log(sum_j exp(s_ij - m_i)) with m_i = max_j s_ij,   o_i = sum_j p_ij v_j.
// The forward saves lse (one float per query); the backward recomputes p from it (as
// FlashAttention does) and forms, with delta_i = dO_i . o_i,
//   dp_ij = dO_i . v_j,  ds_ij = p_ij (dp_ij - delta_i) scale,
//   dq_i = sum_j ds_ij k_j,  dk_j = sum_i ds_ij q_i,  dv_j = sum_i p_ij dO_i.
// A slice's keys and values fit in L1 at these sizes (T = 64, D = 8: 2 KB each), so each query
// row is one pass: its scores for 16 keys at a time accumulate over D in registers from a
// transposed copy of the keys, and the row updates (o, dq, dk, dv) are D-wide vector FMAs.
// torch's CPU flash attention blocks for large head dimensions; at D = 8 (TinyGPT, d 32,
// 4 heads, T 64, batch 16) its forward + backward took 2.2 ms against 1.0 ms here (one
// thread; benchmarks/bench_attention.py). Outputs (o, dq, dk, dv) are written as (B, T, H, D)
// arrays, the layout the attention's output projection reads without a copy; lse is (B H, T).
// Slices run in parallel over OpenMP threads; each slice's sums run in a fixed order, so
// results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>
#include <omp.h>

#include "fast_exp.h"

namespace {

// s[j] = exp(s[j] - shift) for j < n: fast_exp's vector form where there is one (the same
// values as the scalar form, 2^n in one vscalefps where gcc's vectorised scalar form takes
// three operations), else the scalar loop. Outputs bit-for-bit unchanged; forward + backward,
// two threads, interleaved medians of 50, old -> new: (16, 4, 64, 8) 0.56-0.65 -> 0.54-0.58
// ms, (4, 8, 256, 32) 7.06-7.08 -> 6.56-6.91, head dims 16 within 1.5%.
inline void exp_shifted(float* s, long n, float shift) {
  long j = 0;
#if defined(__AVX512F__)
  const __m512 c = _mm512_set1_ps(shift);
  for (; j < n; j += 16) {
    const __mmask16 k = static_cast<__mmask16>(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(s + j, k, fast_exp(_mm512_maskz_loadu_ps(k, s + j) - c));
  }
#endif
#pragma omp simd
  for (long i = j; i < n; ++i) s[i] = fast_exp(s[i] - shift);
}

constexpr long kCols = 16;  // scores computed per register block

// out[j] = scale * sum_d a[d] * bt[d * ld + j] for j < n, in blocks of kCols (bt is zero
// padded to a multiple of kCols columns, so a block never reads past it).
template <long D>
inline void row_scores(const float* a, const float* bt, float* out, long n, long ld,
                       float scale) {
  for (long j0 = 0; j0 < n; j0 += kCols) {
    float acc[kCols] = {};
    for (long d = 0; d < D; ++d) {
      const float ad = a[d];
      const float* b = bt + d * ld + j0;
#pragma omp simd
      for (long jj = 0; jj < kCols; ++jj) acc[jj] += ad * b[jj];
    }
#pragma omp simd
    for (long jj = 0; jj < kCols; ++jj) out[j0 + jj] = acc[jj] * scale;
  }
}

// bt (D x ld) = the transpose of the T rows of a (row stride st); columns T..ld-1 stay as
// they were (zero).
template <long D>
inline void transpose_into(const float* a, long st, float* bt, long T, long ld) {
  for (long t = 0; t < T; ++t)
    for (long d = 0; d < D; ++d) bt[d * ld + t] = a[t * st + d];
}

inline long padded(long T) { return (T + kCols - 1) / kCols * kCols; }

// Where slice b (= batch * H + head) starts: in an input with strides (sb, sh), and in an
// output laid out (B, T, H, D).
struct Layout {
  long H, T, sb, sh;
  long in(long b) const { return (b / H) * sb + (b % H) * sh; }
  long out(long b, long D) const { return (b / H) * T * H * D + (b % H) * D; }
};

template <long D>
void attention_fwd(const float* q, const float* k, const float* v, float* o, float* lse,
                   long BH, const Layout& at, long st, float scale, bool causal, int nt) {
  const long T = at.T, ld = padded(T), so = at.H * D;
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> kt(D * ld, 0.0f), s(ld);
#pragma omp for schedule(static)
    for (long b = 0; b < BH; ++b) {
      const long base = at.in(b), obase = at.out(b, D);
      transpose_into<D>(k + base, st, kt.data(), T, ld);
      for (long i = 0; i < T; ++i) {
        const long n = causal ? i + 1 : T;
        row_scores<D>(q + base + i * st, kt.data(), s.data(), n, ld, scale);
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (long j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
        exp_shifted(s.data(), n, m);
        float l = 0.0f;
#pragma omp simd reduction(+ : l)
        for (long j = 0; j < n; ++j) l += s[j];
        float acc[D] = {};
        for (long j = 0; j < n; ++j) {
          const float pj = s[j];
          const float* vj = v + base + j * st;
#pragma omp simd
          for (long d = 0; d < D; ++d) acc[d] += pj * vj[d];
        }
        const float inv = 1.0f / l;
        float* oi = o + obase + i * so;
#pragma omp simd
        for (long d = 0; d < D; ++d) oi[d] = acc[d] * inv;
        lse[b * T + i] = m + std::log(l);
      }
    }
  }
}

template <long D>
void attention_bwd(const float* q, const float* k, const float* v, const float* o,
                   const float* dout, const float* lse, float* dq, float* dk, float* dv,
                   long BH, const Layout& at, long st, const Layout& gat, long gst, float scale,
                   bool causal, int nt) {
  const long T = at.T, ld = padded(T), so = at.H * D;
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> kt(D * ld, 0.0f), vt(D * ld, 0.0f), p(ld), ds(ld);
#pragma omp for schedule(static)
    for (long b = 0; b < BH; ++b) {
      const long base = at.in(b), gbase = gat.in(b), obase = at.out(b, D);
      transpose_into<D>(k + base, st, kt.data(), T, ld);
      transpose_into<D>(v + base, st, vt.data(), T, ld);
      float* dkb = dk + obase;
      float* dvb = dv + obase;
      for (long j = 0; j < T; ++j) {
        std::fill(dkb + j * so, dkb + j * so + D, 0.0f);
        std::fill(dvb + j * so, dvb + j * so + D, 0.0f);
      }
      for (long i = 0; i < T; ++i) {
        const long n = causal ? i + 1 : T;
        float qi[D], gi[D], acc[D] = {};
        float delta = 0.0f;
        for (long d = 0; d < D; ++d) {
          qi[d] = q[base + i * st + d];
          gi[d] = dout[gbase + i * gst + d];
          delta += gi[d] * o[obase + i * so + d];
        }
        row_scores<D>(qi, kt.data(), p.data(), n, ld, scale);
        row_scores<D>(gi, vt.data(), ds.data(), n, ld, 1.0f);
        const float li = lse[b * T + i];
        exp_shifted(p.data(), n, li);
#pragma omp simd
        for (long j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - delta) * scale;
        for (long j = 0; j < n; ++j) {
          const float dsj = ds[j], pj = p[j];
          const float* kj = k + base + j * st;
          float* dkj = dkb + j * so;
          float* dvj = dvb + j * so;
#pragma omp simd
          for (long d = 0; d < D; ++d) {
            acc[d] += dsj * kj[d];
            dkj[d] += dsj * qi[d];
            dvj[d] += pj * gi[d];
          }
        }
        float* dqi = dq + obase + i * so;
        for (long d = 0; d < D; ++d) dqi[d] = acc[d];
      }
    }
  }
}

}  // namespace

#define NL_HEAD_DIMS(CALL) \
  switch (D) {             \
    case 8: CALL(8); break;     \
    case 16: CALL(16); break;   \
    case 32: CALL(32); break;   \
    default: break;             \
  }

// D must be one of the cases above (cpu.ATTENTION_HEAD_DIMS); the caller checks it. q, k and
// v share the strides (sb, sh, st) of their (B, H, T, D) views; dout has its own (gb, gh, gt).
extern "C" {

void nl_attn_fwd(const float* q, const float* k, const float* v, float* o, float* lse, long B,
                 long H, long T, long D, long sb, long sh, long st, float scale, int causal,
                 int nt) {
  const Layout at{H, T, sb, sh};
#define NL_FWD(DD) attention_fwd<DD>(q, k, v, o, lse, B * H, at, st, scale, causal != 0, nt)
  NL_HEAD_DIMS(NL_FWD)
#undef NL_FWD
}

void nl_attn_bwd(const float* q, const float* k, const float* v, const float* o,
                 const float* dout, const float* lse, float* dq, float* dk, float* dv, long B,
                 long H, long T, long D, long sb, long sh, long st, long gb, long gh, long gt,
                 float scale, int causal, int nt) {
  const Layout at{H, T, sb, sh}, gat{H, T, gb, gh};
#define NL_BWD(DD)                                                                          \
  attention_bwd<DD>(q, k, v, o, dout, lse, dq, dk, dv, B * H, at, st, gat, gt, scale,        \
                    causal != 0, nt)
  NL_HEAD_DIMS(NL_BWD)
#undef NL_BWD
}

}  // extern "C"
