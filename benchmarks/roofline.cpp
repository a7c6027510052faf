// The arithmetic an elementwise bfloat16 kernel can afford before it falls below copy speed:
// y = f(x) over n values with k multiply-class vector operations (FMAs) per 16 values in four
// independent chains, so their latency overlaps and only their throughput counts
// (benchmarks/bench_roofline.py times it against copy_). Loads and stores as normlab's
// 16-bit kernels do them: 16 values widened to float32, one vcvtneps2bf16 back.
#include <cstdint>
#include <immintrin.h>

extern "C" void roofline(const uint16_t* x, uint16_t* y, long n, int threads, int k) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long j = 0; j < n; j += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j));
    const __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    const __m512 c = _mm512_set1_ps(0.999f);
    __m512 a0 = v, a1 = v, a2 = v, a3 = v;
    for (int i = 0; i < k; i += 4) {
      a0 = _mm512_fmadd_ps(a0, c, v);
      a1 = _mm512_fmadd_ps(a1, c, c);
      a2 = _mm512_fmsub_ps(a2, c, v);
      a3 = _mm512_fmsub_ps(a3, c, c);
    }
    const __m512 r = k > 0 ? _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)) : v;
    const __m256bh out = _mm512_cvtneps_pbh(r);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + j), reinterpret_cast<const __m256i&>(out));
  }
}
