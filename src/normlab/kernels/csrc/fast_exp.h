// fast_exp: a branch-free float32 exp that vectorises, shared by the CPU kernels
// (norms.cpp: Softmax1 and DyT's backward; attention.cpp: the attention softmax).
#pragma once
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

// exp(x) for x <= 88: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, a Taylor polynomial of
// degree Degree, scaled by 2^n through the exponent bits. Degree 7 (truncation error < 6e-9
// relative) keeps float32 accuracy: against float64 over every 97th float32 in [-87.33, 88.37],
// at most 0.92 ulp, mean 0.06 (tests/kernels/test_softmax1_exp.py). Degree 5 (truncation error
// < 3.4e-6 relative, 0.007 of float16's unit roundoff) is for 16-bit outputs, whose rounding
// hides the difference; it saves two of the vector form's 14 operations. Below -87.33 (where
// float32 results turn subnormal) it returns 0. Branch-free, so softmax1's loops over it
// vectorise (16 lanes).
template <int Degree = 7>
static inline float fast_exp(float x) {
  static_assert(Degree == 7 || Degree == 5, "fast_exp: degree 7 or 5");
  float xc = x < -87.33f ? -87.33f : (x > 88.37f ? 88.37f : x);
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.0f / 120.0f;
  if constexpr (Degree == 7) {
    p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
  }
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x < -87.33f ? 0.0f : p * scale;
}

#if defined(__AVX512F__)
// fast_exp on 16 lanes, with the scalar form's values (gcc's vectorised loops over the scalar
// form turn its conditionals into masked arithmetic): the same reduction and polynomial, but
// p 2^n by one vscalefps where the scalar form builds 2^n's bits (three operations), and no
// lower clamp (the lanes below -87.33 are zeroed by the mask). The upper clamp keeps n <= 127
// and the mask n >= -126, where 2^n is a normal float32 and both products are exact, so the
// values are the same (tests/kernels/test_softmax1_exp.py compares them over the float32
// line). Softmax1's float32 forward, rows in cache: 7-9% faster.
template <int Degree = 7>
static inline __m512 fast_exp(__m512 x) {
  static_assert(Degree == 7 || Degree == 5, "fast_exp: degree 7 or 5");
  const __m512 lo = _mm512_set1_ps(-87.33f);
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.37f), x);  // below -87.33: masked to 0
  const __m512 big = _mm512_set1_ps(12582912.0f);
  const __m512 n = _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), big) - big;
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 120.0f);
  if constexpr (Degree == 7) {
    p = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 5040.0f), r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  }
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~under), p, n);
}
#endif
