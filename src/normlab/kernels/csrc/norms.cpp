// normlab CPU kernels: fused row-wise normalizers, forward and backward.
//
// Plain C++ (no torch headers, so it compiles in about a second) with an extern "C" API
// called through ctypes on tensors' data pointers. Every function handles rows of length D
// of a contiguous (R, D) array, float32, bfloat16 or float16, computing in float32.
// Weight, bias and every statistic are float32. Weight gradients are accumulated into a
// number of row blocks that depends on the row count only (blocks(R), at most NB; never on
// the thread count) and summed in block order, so they are bit-for-bit deterministic for any
// number of threads. Weight and bias
// pointers are never null (the caller passes ones and zeros): a null test inside a loop
// keeps gcc from vectorizing it. Scratch memory (the gradient partials, softmax1's row
// buffers) is passed in by the caller, which reuses it across calls.
//
// Overflow and underflow: a row whose float32 sum of squares is infinite (|x| >~ 1e19 at
// D = 1024) or below 1e-30 is normalized again with x scaled by a power of two 2^-e,
// 2^e >= max|x| (exact in binary floating point), and rstd = 2^-e / sqrt(ms' + eps 4^-e)
// in double, so RMSNorm and LayerNorm match float64 from |x| ~ 1e-38 to ~ 1e38. The
// backward passes form their row sums from x_hat = x * rstd, which stays O(1).
//
// 16-bit rows (bfloat16, float16 as raw bits) convert in vectorised code both ways, equal to
// torch's conversions on every pattern (tests/kernels/test_conversions.py). Their kernels are
// compute-bound: with the rows cache-resident (128 x 1024, one thread, thread CPU time,
// medians of 400, 2026-12-05) a bfloat16 forward costs 0.20 (RMSNorm), 0.26-0.28 (LayerNorm),
// 0.35 (DyT; 0.25 with tanh_short, below) and 0.34 (Softmax1) ns an element, the backward 0.30
// (RMSNorm) and 0.37 (LayerNorm), while two threads' copy_ from memory moves one in 0.08-0.12
// ns. DyT's float32 forward is 13 multiply-class vector operations per 16 values (tanh's 11)
// and a division (10 with tanh_short into 16-bit outputs), and the core issues one 512-bit
// multiply or FMA a cycle (Zen 4). benchmarks/bench_roofline.py measures the budget: a
// bfloat16 elementwise kernel with up to 12 FMAs per 16 values ran at 1.06-1.14x copy on two
// threads, 16 at 0.83-0.89, 20 at 0.67-0.71, 24 at 0.54-0.58.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>
#include <omp.h>
#include <unistd.h>

#include "fast_exp.h"

namespace {

constexpr long NB = 32;  // row blocks of the deterministic weight-gradient reduction

// Outputs of at least half the last-level cache are written with non-temporal (streaming)
// stores: an ordinary store first reads the destination line into the cache (read for
// ownership), so writing y costs 2x its bytes in memory traffic; a streaming store writes
// the line once. Such an output cannot stay in the cache for the next op anyway. Measured
// here (one thread, 8192 x 1024 float32 RMSNorm forward): 1.58 -> 1.40 ms, copy_ 1.63 ms.
// Smaller outputs keep ordinary stores (the next op reads them from the cache).
long stream_threshold() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? l3 / 2 : (16L << 20);
}
const long kStreamBytes = stream_threshold();
// Rows of 4096 or more elements also stream from 16 MB of output (the last-level cache one
// core actually shares on this EPYC is 32 MB, while sysconf reports the socket's 384 MB): a
// cached store of y first reads the line in and evicts the row and w from L1, which no
// longer hold all three at that width. Measured (one thread, thread CPU time, load 2.3-2.5,
// interleaved both orders, medians of 21; 2048 x 4096, cached -> streamed): float32 RMSNorm
// fwd 2.29-2.47 -> 1.97-2.37 ms, LayerNorm fwd 3.00-3.20 -> 2.40-2.53, RMSNorm fwd+bwd's
// backward 4.47-5.23 -> 3.10-3.94, LayerNorm's 5.52-5.82 -> 3.52-4.41; bfloat16 backward
// 2.72-3.81 -> 2.36-3.04. Rows of 1024 stayed cached here: streamed with a fence a row they
// were slower (float32 forward 2.0-2.2 -> 2.4-2.9 ms, bfloat16 forward 0.94-0.98 -> 1.75-1.82);
// see streams_norm for float32 fenced once a thread.
constexpr long kWideRow = 4096, kWideStreamBytes = 16L << 20;
inline bool streams(long R, long D, long item) {
  return R * D * item >= kStreamBytes || (D >= kWideRow && R * D * item >= kWideStreamBytes);
}
// RMSNorm's and LayerNorm's kernels (forward and backward) fence once a thread (after its
// rows, before the region's barrier) rather than once a row, and also stream float32 outputs
// of 16 MB at any width: rows of 1024 measured slower streamed because of the fence a row
// (8192 x 1024 fp32 RMSNorm forward 2.00 -> 2.30 ms). Fenced once a thread, with the inputs
// from memory (3 buffer sets cycled), 8192 x 1024 fp32, interleaved, medians of 21, load
// 0.86-0.97 (cached -> streamed, ms): one thread (thread CPU time) RMSNorm fwd 1.86 -> 1.63,
// bwd 2.79 -> 2.52, LayerNorm fwd 2.13 -> 1.96, bwd 3.23 -> 2.80 (copy_ 1.77); two threads
// (wall) 1.68 -> 1.42, 2.44 -> 2.16, 1.90 -> 1.53, 2.46 -> 2.30 (copy_ 1.56); 2048 x 4096
// unchanged (1.95-3.50 ms, within 2%). 16-bit rows of 1024 keep cached stores: compute-bound,
// streamed they measured slower (bf16 RMSNorm fwd 0.91 -> 1.01, LayerNorm fwd 1.28 -> 1.45).
inline bool streams_norm(long R, long D, long item) {
  return streams(R, D, item) || (item == 4 && R * D * item >= kWideStreamBytes);
}

// float16 travels as its 16 bits (half): gcc 12 converts a _Float16 one element at a time
// (a scalar vcvtph2ps; the loops around it do not vectorise), which made every float16 kernel
// 8-20x slower than bfloat16 (8192 x 1024 RMSNorm forward 10.3 ms, bfloat16 1.34, one
// thread). The conversions below are integer and float32 arithmetic that vectorises, the
// FP16 library's (as torch's c10::Half): exact, round to nearest even, NaN kept NaN, and no
// subnormal float32 intermediate, so a flush-to-zero mode does not change them.
enum class half : uint16_t {};

inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float ld(const float* p, long i) { return p[i]; }
inline float ld(const uint16_t* p, long i) { return from_bits(static_cast<uint32_t>(p[i]) << 16); }
inline float ld(const half* p, long i) {
  const uint32_t w = static_cast<uint32_t>(p[i]) << 16;
  const uint32_t sign = w & 0x80000000u, two_w = w + w;
  // normal: exponent rebased by 224 - 15 - 127 = 82 in the bits and 2^-112 as a product
  const float normal = from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float subnormal = from_bits((two_w >> 17) | (126u << 23)) - 0.5f;  // m 2^-24
  return from_bits(sign | to_bits(two_w < (1u << 27) ? subnormal : normal));
}
inline void st(float* p, long i, float v) { p[i] = v; }
inline void st(uint16_t* p, long i, float v) {
  const uint32_t u = to_bits(v);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
  p[i] = static_cast<uint16_t>(v != v ? 0x7FC0u : rounded);
}
inline void st(half* p, long i, float v) {
  const uint32_t w = to_bits(v), shl1 = w + w;
  // 2^112 turns an overflow into inf, 2^-110 then rounds at float16's precision in the add
  uint32_t bias = shl1 & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  const float scaled = (std::fabs(v) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t b = to_bits(from_bits((bias >> 1) + 0x07800000u) + scaled);
  const uint32_t nonsign = ((b >> 13) & 0x7C00u) + (b & 0x0FFFu);
  p[i] = static_cast<half>(((w >> 16) & 0x8000u) | (shl1 > 0xFF000000u ? 0x7E00u : nonsign));
}

// out[j] = f(j) for j < D, f computed in float32 (streaming stores when nts, see above).
template <typename F>
inline void emit(float* out, long D, F f, bool nts = false, bool fence = true) {
  long j0 = 0;
#if defined(__AVX512F__)
  if (nts && (reinterpret_cast<uintptr_t>(out) & 63) == 0) {  // streaming stores (above)
    constexpr long C = 64;
    alignas(64) float buf[C];
    for (; j0 + C <= D; j0 += C) {
#pragma omp simd
      for (long j = 0; j < C; ++j) buf[j] = f(j0 + j);
      for (long k = 0; k < C; k += 16) _mm512_stream_ps(out + j0 + k, _mm512_load_ps(buf + k));
    }
    if (fence) _mm_sfence();
  }
#endif
#pragma omp simd
  for (long j = j0; j < D; ++j) out[j] = f(j);
}
#if defined(__AVX512F__)
// 16 floats to bfloat16 as st rounds them (round to nearest even, NaN to 0x7FC0): 20-30%
// slower than vcvtneps2bf16 in the bfloat16 forward kernels, so it runs where that cannot.
inline __m256i round_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i up = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, up), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}
inline __m256i narrow(uint16_t*, __m512 v) {
#if defined(__AVX512BF16__)
  const __m256bh h = _mm512_cvtneps_pbh(v);
  return reinterpret_cast<const __m256i&>(h);
#else
  return round_bf16(v);
#endif
}
// float16 with F16C's rounding (to nearest even), which equals st's.
inline __m256i narrow(half*, __m512 v) {
  return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#endif

#if defined(__AVX512F__)
// 64 values (four vectors v) to out[0, 64): float32 as they are, 16-bit rounded one vector at
// a time (narrow); streaming stores when nts (out 64-byte aligned).
inline void put64(float* out, const __m512* v, bool nts) {
  for (long k = 0; k < 4; ++k) {
    if (nts) {
      _mm512_stream_ps(out + 16 * k, v[k]);
    } else {
      _mm512_storeu_ps(out + 16 * k, v[k]);
    }
  }
}
template <typename T>
inline void put64(T* out, const __m512* v, bool nts) {
  __m256i h[4];
  for (long k = 0; k < 4; ++k) h[k] = narrow(out, v[k]);
#if defined(__AVX512BF16__)
  // vcvtneps2bf16 flushes subnormal inputs to zero (torch keeps them): a chunk holding one
  // (rare) is rounded again in integers. The test costs 3-13% (one thread, 8192 x 1024
  // bfloat16 forward and backward kernels); a test per 16 values cost 10-25%.
  __mmask16 tiny = 0;  // subnormal values in the chunk (vfpclassps class 0x20)
  for (long k = 0; k < 4 && std::is_same_v<T, uint16_t>; ++k) {
    tiny |= _mm512_fpclass_ps_mask(v[k], 0x20);
  }
  if (tiny != 0) {
    for (long k = 0; k < 4; ++k) h[k] = round_bf16(v[k]);
  }
#endif
  for (long k = 0; k < 4; ++k) {
    __m256i* to = reinterpret_cast<__m256i*>(out + 16 * k);
    if (nts) {
      _mm256_stream_si256(to, h[k]);
    } else {
      _mm256_storeu_si256(to, h[k]);
    }
  }
}
#endif

// For 16-bit outputs on a CPU with AVX-512 the values go through a 64-float buffer and one
// conversion per 16 (as a loop of st they do not vectorise); else through st.
template <typename T, typename F>
inline void emit16(T* out, long D, F f, bool nts, bool fence) {
  long j0 = 0;
#if defined(__AVX512F__)
  nts = nts && (reinterpret_cast<uintptr_t>(out) & 63) == 0;
  constexpr long C = 64;
  alignas(64) float buf[C];
  for (; j0 + C <= D; j0 += C) {
#pragma omp simd
    for (long j = 0; j < C; ++j) buf[j] = f(j0 + j);
    const __m512 v[4] = {_mm512_load_ps(buf), _mm512_load_ps(buf + 16), _mm512_load_ps(buf + 32),
                         _mm512_load_ps(buf + 48)};
    put64(out + j0, v, nts);
  }
  if (nts && fence) _mm_sfence();
#endif
#pragma omp simd
  for (long j = j0; j < D; ++j) st(out, j, f(j));
}
// Orders a thread's streaming stores (emit's nts) before the stores that follow: a caller
// that passed fence = false to emit calls it once after its rows.
inline void fence_streams(bool nts) {
#if defined(__AVX512F__)
  if (nts) _mm_sfence();
#endif
}
template <typename F>
inline void emit(uint16_t* out, long D, F f, bool nts = false, bool fence = true) {
  emit16(out, D, f, nts, fence);
}
template <typename F>
inline void emit(half* out, long D, F f, bool nts = false, bool fence = true) {
  emit16(out, D, f, nts, fence);
}

// tanh(z) for DyT's forward: Eigen's rational approximation (generic_fast_tanh_float), a
// degree-13/6 odd rational in z clamped to |z| <= 7.905 (where it reaches 1 - 2^-24), one
// division and no exp, so it vectorises at the memory limit: 8M floats in 1.7 ms against
// 1.9 ms for a copy, where SLEEF's tanhf16_u10 (ATen's Vectorized<float>::tanh) took 16 ms
// and tanh_precise 5 ms (one thread, measured here). Error against float64 below 2e-7.
inline float tanh_fast(float z) {
  constexpr float clamp = 7.90531110763549805f;
  const float x = z > clamp ? clamp : (z < -clamp ? -clamp : z);  // NaN passes through
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return (p * x) / q;
}

// tanh(z) for DyT's forward into a 16-bit output, whose rounding (bfloat16 2^-8, float16 2^-11
// relative) hides tanh_fast's float32 accuracy: a degree-5/4 odd rational x P(x^2) / Q(x^2)
// clamped at |z| <= 5, normlab's fit (iteratively reweighted least squares towards the least
// maximum relative error on [0, 5], the clamp chosen for the least error over the float32
// line): at most 5.3e-5 (0.014 of bfloat16's unit roundoff, 0.11 of float16's), |t| < 1, 8
// multiply-class operations and the division where tanh_fast has 11. DyT forward, one thread,
// rows in cache, 128 x 1024 (us): bfloat16 45.5 -> 32.5, float16 42.1 -> 29.4 (with no tanh at
// all: 13.8, 12.2); two threads from memory, 8192 x 1024 / 2048 x 4096, 0.58-0.77x copy_ ->
// 0.79-0.97x (time 0.72-0.81x the old form, four interleaved runs). tests/kernels/test_cpu.py
// measures the error against float64.
inline float tanh_short(float z) {
  constexpr float clamp = 5.0f;
  const float x = z > clamp ? clamp : (z < -clamp ? -clamp : z);  // NaN passes through
  const float x2 = x * x;
  float p = 0.0006705737323500216f;
  p = p * x2 + 0.1024179607629776f;
  p = p * x2 + 0.9999480843544006f;
  float q = 0.012819970026612282f;
  q = q * x2 + 0.4354327917098999f;
  q = q * x2 + 1.0f;
  return (p * x) / q;
}

#if defined(__AVX512F__)
// tanh_fast on 16 lanes, the same operations in the same order. The clamp is vmaxps/vminps:
// gcc's vectorised loop over the scalar form made its conditionals masks and masked
// arithmetic, and folded tanh_fast(+-7.9053) at compile time with other roundings (the clamped
// values differed by an ulp). DyT forward, kernel ms, old -> new (one thread, rows in cache,
// ns an element): float32 0.40 -> 0.32, bfloat16 0.40 -> 0.35; two threads, inputs from memory,
// interleaved, medians of 18 (8192 x 1024 / 2048 x 4096): bfloat16 1.68 -> 1.45 / 1.74 ->
// 1.50, float16 2.12 -> 1.39 / 2.05 -> 1.37, float32 at the memory's speed before and after.
inline __m512 tanh_fast(__m512 z) {
  const __m512 c = _mm512_set1_ps(7.90531110763549805f);
  const __m512 x = _mm512_min_ps(c, _mm512_max_ps(-c, z));  // NaN (the second operand) passes
  const __m512 x2 = x * x;
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(-2.76076847742355e-16f), x2,
                             _mm512_set1_ps(2.00018790482477e-13f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-8.60467152213735e-11f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(5.12229709037114e-08f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.48572235717979e-05f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(6.37261928875436e-04f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(4.89352455891786e-03f));
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(1.19825839466702e-06f), x2,
                             _mm512_set1_ps(1.18534705686654e-04f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(2.26843463243900e-03f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(4.89352518554385e-03f));
  return (p * x) / q;
}

// tanh_short on 16 lanes, the same operations in the same order.
inline __m512 tanh_short(__m512 z) {
  const __m512 c = _mm512_set1_ps(5.0f);
  const __m512 x = _mm512_min_ps(c, _mm512_max_ps(-c, z));  // NaN (the second operand) passes
  const __m512 x2 = x * x;
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.0006705737323500216f), x2,
                             _mm512_set1_ps(0.1024179607629776f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(0.9999480843544006f));
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(0.012819970026612282f), x2,
                             _mm512_set1_ps(0.4354327917098999f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(1.0f));
  return (p * x) / q;
}
#endif

// DyT's forward tanh for an output of type T: float32 keeps tanh_fast's accuracy.
template <typename T, typename V>
inline V tanh_out(V z) {
  if constexpr (std::is_same_v<T, float>) {
    return tanh_fast(z);
  } else {
    return tanh_short(z);
  }
}

// tanh(z) for DyT's backward, where 1 - t^2 summed over every element (d alpha) turns a
// tanh error near |t| = 1 into a bias: odd Taylor series to z^13 for |z| < 0.4 (error
// < 3e-8), else 1 - 2 / (1 + exp(2|z|)) with |z| clamped at 9 (error below 1e-7).
inline float tanh_precise(float z) {
  float a = std::fabs(z);
  float z2 = z * z;
  float q = 21844.0f / 6081075.0f;
  q = q * z2 - 1382.0f / 155925.0f;
  q = q * z2 + 62.0f / 2835.0f;
  q = q * z2 - 17.0f / 315.0f;
  q = q * z2 + 2.0f / 15.0f;
  q = q * z2 - 1.0f / 3.0f;
  float small = z + z * z2 * q;
  float ac = a > 9.0f ? 9.0f : a;
  float big = 1.0f - 2.0f / (1.0f + fast_exp(2.0f * ac));
  big = z < 0.0f ? -big : big;
  return a < 0.4f ? small : big;
}

#if defined(__AVX512F__)
// tanh_precise on 16 lanes, the same operations in the same order as gcc's vectorised loop over
// the scalar form (bit-for-bit its values: tests/kernels/test_cpu.py), with fast_exp's vector
// form (2^n by vscalefps). min(9, a) and the compare keep a NaN a NaN.
inline __m512 tanh_precise(__m512 z) {
  const __m512 a = _mm512_abs_ps(z);
  const __m512 z2 = z * z;
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(21844.0f / 6081075.0f), z2,
                             _mm512_set1_ps(-1382.0f / 155925.0f));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(62.0f / 2835.0f));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(-17.0f / 315.0f));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(2.0f / 15.0f));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(-1.0f / 3.0f));
  const __m512 small = _mm512_fmadd_ps(z * z2, q, z);
  const __m512 ac = _mm512_min_ps(_mm512_set1_ps(9.0f), a);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 big = one - _mm512_set1_ps(2.0f) / (one + fast_exp(_mm512_set1_ps(2.0f) * ac));
  const __mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
  big = _mm512_mask_xor_ps(big, neg, big, _mm512_set1_ps(-0.0f));
  const __mmask16 near0 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.4f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(near0, big, small);
}
#endif

// 2^-e with 2^e >= max|x| over the row (1 for an all-zero or non-finite row).
template <typename T>
inline float row_scale(const T* x, long D) {
  float m = 0.0f;
#pragma omp simd reduction(max : m)
  for (long j = 0; j < D; ++j) {
    float a = std::fabs(ld(x, j));
    m = a > m ? a : m;
  }
  if (!(m <= FLT_MAX) || m == 0.0f) return 1.0f;
  int e = 0;
  std::frexp(m, &e);  // m = f 2^e, f in [0.5, 1)
  return static_cast<float>(std::ldexp(1.0, -e));
}

// Whether a float32 sum of squares lost the row's scale (overflow, or underflow below eps).
inline bool out_of_range(float ss) { return !(ss <= FLT_MAX) || ss < 1e-30f; }

// 1 / sqrt(ss' / (D s^2) + eps) for a sum of squares ss' of the row scaled by s, in double.
inline double scaled_rstd(double ss, double s, long D, double eps) {
  return s / std::sqrt(ss / static_cast<double>(D) + eps * s * s);
}

inline int threads_for(long R, long D, int nt) { return (R * D < 32768 || R < 2) ? 1 : nt; }
// At least 16 rows a block: with few long rows (128 x 65536) 32 blocks of partials would
// move as many bytes as the data itself (memset, accumulate, reduce).
inline long blocks(long R) {
  const long n = R / 16;
  return n < 1 ? 1 : (n > NB ? NB : n);
}
inline long block_lo(long b, long R) { return b * R / blocks(R); }

// Rows of at least kWideRow elements: the backward kernels run their second pass (dx and the
// weight-gradient partials) over groups of kGroupRows rows of one row block, kChunk columns
// at a time, so a chunk of the partials is loaded and stored once a group instead of once a
// row (at that width a row's dy and x, w and the partials no longer fit L1 together), and
// meanwhile prefetch the next group's rows into L2 (the pass reads its own rows from L2 and
// would leave memory idle). Each partial still adds rows i, i + 1, ... in order, so every
// output is bit-for-bit that of the row-at-a-time loop, which narrower rows keep as it was:
// the group loop with one row a group measured 6-15% slower on 16-bit rows of 1024 (RMSNorm
// bf16 backward 2.64 -> 3.03 ms), and one helper taking both loops as lambdas changed how gcc
// vectorised row_sum2's tail for 16-bit rows (another FMA contraction: 1-ulp dx differences).
// Measured at 2048 x 4096 (inputs from memory, 3 buffer sets; interleaved, medians of 31,
// load 1.1-1.4; backward kernel ms, with reduce_blocks' vector sum below): one thread (thread
// CPU time) LayerNorm fp32 7.70 -> 6.05, bf16 4.96 -> 3.64, RMSNorm fp32 6.23 -> 5.45, bf16
// 4.09 -> 3.01; two threads 4.26 -> 3.42, 2.82 -> 1.78, 3.44 -> 3.09, 2.12 -> 1.55; rows of
// 1024 unchanged (within 3%). The prefetch's share (one thread, 8 rows x 512): LayerNorm fp32
// 6.75 -> 6.15, bf16 4.71 -> 4.20, RMSNorm bf16 3.70 -> 3.34 (fp32 4.99 both); into L1 (T0)
// it was slower than none (LayerNorm fp32 8.7 -> 11.0). Groups of 4 or 8 rows and chunks of
// 256 or 512 columns were within noise of each other; 16 rows, or chunks of 1024 or 2048,
// slower (LayerNorm fp32 6.7-7.7 ms against 6.0-6.2).
constexpr long kGroupRows = 4, kChunk = 512;
template <typename T>
inline void prefetch_l2(const T* p, long n) {
  for (long j = 0; j < n; j += 64 / static_cast<long>(sizeof(T))) {
    _mm_prefetch(reinterpret_cast<const char*>(p + j), _MM_HINT_T1);
  }
}

// partial (nb, D) -> out (D): sum the blocks in order (deterministic), for up to two
// partial buffers in one parallel region (LayerNorm's dw and db). Below 8192 features the sum
// (at most 256k adds, ~50 us) runs on one thread: waking the team again costs more than
// that on a busy machine, where a descheduled thread holds the others at the barrier. The sum
// runs a block at a time over 256 columns, 16 columns a vector (the same adds in the same
// order as a loop over blocks per column, which gcc left scalar): 2048 x 4096 backward, one
// thread, 7.90 -> 7.08 ms LayerNorm fp32, 5.56 -> 4.80 bf16, RMSNorm 6.53 -> 6.32 / 4.09 -> 3.79.
inline void sum_blocks(const float* part, float* out, long nb, long D, long j0, long n) {
  if (out == nullptr) return;
  for (long j = j0; j < j0 + n; ++j) out[j] = 0.0f;
  for (long b = 0; b < nb; ++b) {  // out[j] = ((0 + p0) + p1) + ..., a vector of j at a time
#pragma omp simd
    for (long j = j0; j < j0 + n; ++j) out[j] += part[b * D + j];
  }
}
void reduce_blocks(const float* part, float* out, const float* part2, float* out2, long nb,
                   long D, int nt) {
#pragma omp parallel for num_threads(D < 8192 ? 1 : nt) schedule(static)
  for (long j0 = 0; j0 < D; j0 += 256) {
    const long n = D - j0 < 256 ? D - j0 : 256;
    sum_blocks(part, out, nb, D, j0, n);
    sum_blocks(part2, out2, nb, D, j0, n);
  }
}

// Row sums: one accumulator chains every add (4 cycles a 16 values), so they sum in four
// AVX-512 accumulators, loading 16 values at a time (F16C's vcvtph2ps for float16), the last
// D % 64 columns in a vectorised loop of one. g(v, j) gives the term at column j, one float
// (v = scalar) or 16 (v = vector: gcc's vector extensions give __m512 the same operators).
// The order depends on D only. float32 rows summed in one accumulator until 2026-12-05:
// memory-bound at 8M elements, but small tensors stay in cache, where the chain is the
// limit. Measured (rows in cache, two threads, interleaved, medians of 31; kernel us, one
// accumulator -> four): LayerNorm forward 4096 x 64 89 -> 71, 4096 x 256 213 -> 137, 1024 x
// 1024 135 -> 92; backward 75 -> 64, 175 -> 159, 160 -> 155; RMSNorm forward 47 -> 41, 118
// -> 94, 83 -> 66; backward 58 -> 47, 153 -> 127, 122 -> 114. From memory (8M elements, ms):
// LayerNorm forward 8192 x 1024 1.31 -> 1.13, 131072 x 64 2.64 -> 2.23, backward 2.44 ->
// 2.29, 2.13 -> 1.88; RMSNorm forward 4-7% slower at 8192 x 1024 and 2048 x 4096 (1.64 ->
// 1.70, 1.79 -> 1.92 in one run; 1.58 -> 1.65, 1.80 -> 1.86 in the reverse order), its
// backward 2.18 -> 2.08.
using scalar = std::false_type;
using vector = std::true_type;
template <typename T>
inline float get(scalar, const T* p, long j) {
  return ld(p, j);
}
#if defined(__AVX512F__)
inline __m512 get(vector, const float* p, long j) { return _mm512_loadu_ps(p + j); }
inline __m512 get(vector, const uint16_t* p, long j) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 get(vector, const half* p, long j) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j)));
}
// The lanes of m from p (the others 0): a row's last columns, without reading past it.
// lanes(left): the mask of the first min(left, 16) lanes.
inline __mmask16 lanes(long left) {
  return left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
}
inline __m512 get(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 get(__mmask16 m, const uint16_t* p) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 get(__mmask16 m, const half* p) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
#endif

// The gain of every affine norm is w[j] + off in float32 (off = 1 for Gemma's (1 + w) and
// zero-centred weights): adding in float32 keeps 1 + 0.0039 from rounding to 1 as in bf16.
//
// The row a norm's forward normalizes: x's row o, or with a residual (res != nullptr) the
// sum x + res rounded to T, written out to sum, exactly as norm(x + res) computes it. body(in,
// src) runs the passes over it: in(v, j) is its value at column j (v = scalar or vector, as
// get), src the row in memory (x's, or the written sum). A float32 sum is written with the
// output's stores (streamed when nts) and in adds x + res again from the cache (the same
// float): an ordinary store first reads the line from memory (2x the sum's bytes), and a
// streamed sum would be read back from memory. Bit-for-bit the same outputs as the cached sum
// read back; forward kernel ms (two threads, inputs from memory, interleaved, medians of 18,
// copy_ 2.1-2.3 ms): add + RMSNorm 4.64 -> 3.58 and add + LayerNorm 4.82 -> 3.65 at 8192 x
// 1024, 4.54 -> 3.86 and 4.48 -> 4.03 at 2048 x 4096. A 16-bit sum stays a cached store read
// back (rounding x + res again in every pass would add to a compute-bound kernel).
template <typename T, typename B>
inline void with_input(const T* x, const T* res, T* sum, long o, long D, bool nts, B body) {
  if (res == nullptr) {
    const T* src = x + o;
    body([=](auto v, long j) { return get(v, src, j); }, src);
  } else if constexpr (std::is_same_v<T, float>) {
    const float* a = x + o;
    const float* b = res + o;
    emit(sum + o, D, [=](long j) { return a[j] + b[j]; }, nts, false);
    body([=](auto v, long j) { return get(v, a, j) + get(v, b, j); }, sum + o);
  } else {
    emit(sum + o, D, [&](long j) { return ld(x + o, j) + ld(res + o, j); });
    const T* src = sum + o;
    body([=](auto v, long j) { return get(v, src, j); }, src);
  }
}

// dx[j] = grad(j), plus dsum[j] (the residual sum's own gradient, joining dx before rounding)
// when dsum is not null, for j < n: the backward kernels' second-pass store.
template <typename T, typename G>
inline void emit_dx(T* dx, const T* dsum, long n, G grad, bool nts) {
  if (dsum != nullptr) {
    emit(dx, n, [&](long j) { return grad(j) + ld(dsum, j); }, nts, false);
  } else {
    emit(dx, n, grad, nts, false);
  }
}

// The backward kernels' second pass (dx and the weight-gradient partials) over m columns of
// float16 rows dy and x: f(by, bx, j0, n) for each piece of n <= 64 columns from j0, with
// by, bx the piece as float32, converted by F16C (vcvtph2ps) into buffers that stay in L1.
// In that pass's vectorised loop ld converts float16 in integer arithmetic (about a dozen
// instructions a vector, for dy and x), which made float16's backward 1.4-1.6x bfloat16's.
// Same values (exact conversions) and the same float operations: every output is bit-for-bit
// that of the per-row loop (8100 outputs compared: 1-2048 rows, D 1-12288, all dtypes, with
// and without w, off, dsum, 1 and 2 threads). Measured (one thread, thread CPU time, inputs
// from memory (3 buffer sets), old and new library interleaved, medians of 31, load 0.6-0.8;
// backward kernel ms, old -> new): 8192 x 1024 float16 LayerNorm 4.77 -> 3.60, RMSNorm 3.94 ->
// 2.78, with dsum 6.97 -> 5.71, 5.41 -> 3.94; 2048 x 4096 4.86 -> 4.17, 4.25 -> 3.17, with
// dsum 6.64 -> 5.48, 6.26 -> 4.92; bfloat16 and float32 unchanged (within 2%). Not taken:
// bfloat16 through the same buffers (its ld is a shift; LayerNorm 8192 x 1024 2.96 -> 3.73);
// dsum through a third buffer (within noise, no gain); and converting each 16-bit row once
// into a per-thread float32 row copy in the first pass for the second (issue 39): the copy's
// stores cost more than the conversions they save (LayerNorm 8192 x 1024 bf16 3.14 -> 4.77,
// fp16 4.81 -> 4.86; 2048 x 4096 bf16 3.89 -> 4.32, fp16 5.02 -> 4.05; the first pass's
// stores alone took bf16 3.0 -> 5.2 ms, reading the copy in the second saved ~0.25 ms).
template <typename F>
inline void halves(const half* dy, const half* x, long m, F f) {
  for (long j0 = 0; j0 < m; j0 += 64) {
    const long n = m - j0 < 64 ? m - j0 : 64;
    alignas(64) float by[64], bx[64];
    long k = 0;
#if defined(__AVX512F__)
    if (n == 64) {
      for (; k < 64; k += 16) {
        _mm512_store_ps(by + k, get(vector(), dy + j0, k));
        _mm512_store_ps(bx + k, get(vector(), x + j0, k));
      }
    }
#endif
    for (; k < n; ++k) {
      by[k] = ld(dy + j0, k);
      bx[k] = ld(x + j0, k);
    }
    f(by, bx, j0, n);
  }
}

template <typename G>
inline float row_sum(long D, G g) {
  float t = 0.0f;
  long j = 0;
#if defined(__AVX512F__)
  {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; j + 64 <= D; j += 64) {
      a0 += g(vector(), j);
      a1 += g(vector(), j + 16);
      a2 += g(vector(), j + 32);
      a3 += g(vector(), j + 48);
    }
    t = _mm512_reduce_add_ps((a0 + a1) + (a2 + a3));
  }
#endif
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (long k = j; k < D; ++k) s += g(scalar(), k);
  return j == 0 ? s : t + s;
}
template <typename G, typename H>
inline void row_sum2(long D, G g, H h, float& sg, float& sh) {
  float tg = 0.0f, th = 0.0f;
  long j = 0;
#if defined(__AVX512F__)
  {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (; j + 64 <= D; j += 64) {
      a0 += g(vector(), j);
      a1 += g(vector(), j + 16);
      a2 += g(vector(), j + 32);
      a3 += g(vector(), j + 48);
      b0 += h(vector(), j);
      b1 += h(vector(), j + 16);
      b2 += h(vector(), j + 32);
      b3 += h(vector(), j + 48);
    }
    tg = _mm512_reduce_add_ps((a0 + a1) + (a2 + a3));
    th = _mm512_reduce_add_ps((b0 + b1) + (b2 + b3));
  }
#endif
  float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
  for (long k = j; k < D; ++k) {
    s1 += g(scalar(), k);
    s2 += h(scalar(), k);
  }
  sg = j == 0 ? s1 : tg + s1;
  sh = j == 0 ? s2 : th + s2;
}

// out[j] = f(v, j) for j < D without a fence (as emit's fence = false), f given in both of
// row_sum's forms: 16-bit outputs take f's vector form 64 columns at a time into put64 (the
// vector loads of get: F16C for float16, where the scalar form's integer conversion is a
// dozen instructions a vector), the rest the scalar form through emit. Bit-for-bit the
// values of emit over the scalar form (2,304 outputs compared). Forward kernels, two
// threads, inputs from memory, medians of 20 (8192 x 1024 / 2048 x 4096 ms, old -> new):
// float16 LayerNorm 1.44 -> 1.02 / 1.38 -> 0.98, RMSNorm 1.07 -> 0.69 / 1.28 -> 0.91, add +
// RMSNorm 2.31 -> 1.94 / 2.53 -> 2.12; bfloat16 within 4% either way (both orders).
template <typename T, typename F>
inline void emit_rows(T* out, long D, F f, bool nts) {
  long e0 = 0;
#if defined(__AVX512F__)
  if constexpr (!std::is_same_v<T, float>) {
    const bool nts64 = nts && (reinterpret_cast<uintptr_t>(out) & 63) == 0;
    for (; e0 + 64 <= D; e0 += 64) {
      const __m512 v[4] = {f(vector(), e0), f(vector(), e0 + 16), f(vector(), e0 + 32),
                           f(vector(), e0 + 48)};
      put64(out + e0, v, nts64);
    }
  }
#endif
  emit(out + e0, D - e0, [&](long j) { return f(scalar(), e0 + j); }, nts, false);
}

template <typename T>
void rms_fwd(const T* x, const T* res, const float* w, float off, T* sum, T* y, float* rstd,
             long R, long D, float eps, int nt) {
  const bool nts = streams_norm(R, D, sizeof(T));
#pragma omp parallel num_threads(threads_for(R, D, nt))
  {
#pragma omp for schedule(static) nowait
  for (long i = 0; i < R; ++i) {
    const long o = i * D;
    with_input(x, res, sum, o, D, nts, [&](auto in, const T* src) {
      const float ss = row_sum(D, [=](auto v, long j) {
        const auto a = in(v, j);
        return a * a;
      });
      float r = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
      if (out_of_range(ss)) {
        const float sc = row_scale(src, D);
        if (sc != 1.0f) {
          float s2 = 0.0f;
#pragma omp simd reduction(+ : s2)
          for (long j = 0; j < D; ++j) {
            float v = ld(src, j) * sc;
            s2 += v * v;
          }
          r = static_cast<float>(scaled_rstd(s2, sc, D, eps));
        }
      }
      rstd[i] = r;
      emit_rows(y + o, D, [&](auto v, long j) { return (in(v, j) * r) * (get(v, w, j) + off); },
                nts);
    });
  }
    fence_streams(nts);  // once a thread, not once a row
  }
}

template <typename T>
void rms_bwd(const T* dy, const T* x, const float* w, float off, const float* rstd,
             const T* dsum, T* dx, float* dwpart, long R, long D, int nt) {
  const float invd = 1.0f / static_cast<float>(D);
  const bool nts = streams_norm(R, D, sizeof(T));
#pragma omp parallel num_threads(threads_for(R, D, nt))
  {
#pragma omp for schedule(static) nowait
  for (long b = 0; b < blocks(R); ++b) {
    float* acc = dwpart + b * D;  // always given (the caller passes a scratch buffer)
    std::memset(acc, 0, sizeof(float) * D);
    if (D >= kWideRow) {  // row groups (above)
      const long hi = block_lo(b + 1, R);
      for (long g = block_lo(b, R); g < hi; g += kGroupRows) {
        const long n = hi - g < kGroupRows ? hi - g : kGroupRows;
        float c[kGroupRows];
        for (long k = 0; k < n; ++k) {
          const long o = (g + k) * D;
          const float r = rstd[g + k];
          c[k] = row_sum(D, [=](auto v, long j) {
            return get(v, dy + o, j) * (get(v, w, j) + off) * (get(v, x + o, j) * r);
          });
          c[k] = c[k] * invd;
        }
        for (long j0 = 0; j0 < D; j0 += kChunk) {
          const long m = D - j0 < kChunk ? D - j0 : kChunk;
          for (long k = 0; k < n; ++k) {
            const long o = (g + k) * D + j0;
            if (g + k + kGroupRows < R) {
              prefetch_l2(dy + o + kGroupRows * D, m);
              prefetch_l2(x + o + kGroupRows * D, m);
            }
            const float r = rstd[g + k], ck = c[k];
            if constexpr (std::is_same_v<T, half>) {  // F16C conversions (halves, above)
              halves(dy + o, x + o, m, [&](const float* by, const float* bx, long i0, long n) {
                const float* wi = w + j0 + i0;
                float* a = acc + j0 + i0;
                auto grad = [&, off](long j) {
                  float xh = bx[j] * r;
                  float gj = by[j];
                  a[j] += gj * xh;
                  return r * (gj * (wi[j] + off) - xh * ck);
                };
                const long p = o + i0;
                emit_dx(dx + p, dsum == nullptr ? nullptr : dsum + p, n, grad, nts);
              });
              continue;
            }
            const float* wj = w + j0;
            float* a = acc + j0;
            auto grad = [&](long j) {
              float xh = ld(x + o, j) * r;
              float gj = ld(dy + o, j);
              a[j] += gj * xh;
              return r * (gj * (wj[j] + off) - xh * ck);
            };
            emit_dx(dx + o, dsum == nullptr ? nullptr : dsum + o, m, grad, nts);
          }
        }
      }
      continue;
    }
    for (long i = block_lo(b, R); i < block_lo(b + 1, R); ++i) {
      const long o = i * D;
      const float r = rstd[i];
      float c = row_sum(D, [=](auto v, long j) {
        return get(v, dy + o, j) * (get(v, w, j) + off) * (get(v, x + o, j) * r);
      });
      c = c * invd;
      if constexpr (std::is_same_v<T, half>) {
#if defined(__AVX512F__)
        // Without a residual sum: explicit vectors, as LayerNorm's float16 backward (below; bit-
        // for-bit the loop's values, 1,152 outputs compared): backward, two threads, 8192 x
        // 1024 1.45 -> 1.33 ms, 4096 x 1024 0.76 -> 0.68, 1024 x 2048 0.51 -> 0.45; in cache
        // (one thread, 128 x 1024) 42.8 -> 35.7 us.
        if (dsum == nullptr) {
          const __m512 vr = _mm512_set1_ps(r), vc = _mm512_set1_ps(c), voff = _mm512_set1_ps(off);
          auto step = [&](__m512 g, __m512 xv, __m512 wv, __m512& av) {
            const __m512 xh = _mm512_mul_ps(xv, vr);
            av = _mm512_fmadd_ps(g, xh, av);
            // gcc's contraction of the loop below: g (w + off) - xh c as one FMA
            const __m512 t = _mm512_fmsub_ps(g, _mm512_add_ps(wv, voff), _mm512_mul_ps(xh, vc));
            return narrow(dx, _mm512_mul_ps(vr, t));
          };
          long j = 0;
          for (; j + 16 <= D; j += 16) {
            __m512 av = _mm512_loadu_ps(acc + j);
            const __m256i d = step(get(vector(), dy + o, j), get(vector(), x + o, j),
                                   _mm512_loadu_ps(w + j), av);
            _mm512_storeu_ps(acc + j, av);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dx + o + j), d);
          }
          if (j < D) {
            const __mmask16 k = lanes(D - j);
            __m512 av = _mm512_maskz_loadu_ps(k, acc + j);
            const __m256i d = step(get(k, dy + o + j), get(k, x + o + j),
                                   _mm512_maskz_loadu_ps(k, w + j), av);
            _mm512_mask_storeu_ps(acc + j, k, av);
            _mm256_mask_storeu_epi16(dx + o + j, k, d);
          }
          continue;
        }
#endif
        // F16C conversions (halves, above)
        halves(dy + o, x + o, D, [&](const float* by, const float* bx, long j0, long n) {
          const float* wj = w + j0;
          float* a = acc + j0;
          auto grad = [&, off](long j) {
            float xh = bx[j] * r;
            float g = by[j];
            a[j] += g * xh;
            return r * (g * (wj[j] + off) - xh * c);
          };
          const long p = o + j0;
          emit_dx(dx + p, dsum == nullptr ? nullptr : dsum + p, n, grad, nts);
        });
        continue;
      }
      // off, w, dy and x by value: by reference they are the parallel region's shared
      // variables, which gcc reloaded every vector (the float stores to the partials might
      // alias them). Same operations, bit-for-bit. Measured (one thread, thread CPU time,
      // interleaved, medians of 31, load 0.9; backward kernel ms, by reference -> by value):
      // 8192 x 1024 LayerNorm fp32 4.64 -> 4.30, bf16 3.02 -> 2.84, RMSNorm 4.16 -> 3.96,
      // 2.46 -> 2.31; float16 (off alone, in halves) within 2%. The row-group loops' ld lambdas
      // keep [&]: there 2048 x 4096 LayerNorm fp32 measured 4.97 -> 5.30 by value.
      auto grad = [&, off, w, dy, x](long j) {
        float xh = ld(x + o, j) * r;
        float g = ld(dy + o, j);
        acc[j] += g * xh;
        return r * (g * (w[j] + off) - xh * c);
      };
      emit_dx(dx + o, dsum == nullptr ? nullptr : dsum + o, D, grad, nts);
    }
  }
    fence_streams(nts);  // once a thread, not once a row
  }
}

// LayerNorm saves the row mean and rstd (float32) for the backward pass, so it reads x and dy
// once each and never recomputes a statistic.
template <typename T>
void ln_fwd(const T* x, const T* res, const float* w, const float* bias, float off, T* sum,
            T* y, float* mean, float* rstd, long R, long D, float eps, int nt) {
  const bool nts = streams_norm(R, D, sizeof(T));
#pragma omp parallel num_threads(threads_for(R, D, nt))
  {
#pragma omp for schedule(static) nowait
  for (long i = 0; i < R; ++i) {
    const long o = i * D;
    with_input(x, res, sum, o, D, nts, [&](auto in, const T* src) {
      float mu = row_sum(D, in) / static_cast<float>(D);
      // Rows of 4096 to 8191: the next row's input into L2 while the two passes below read this
      // one from cache (memory would idle meanwhile): 2048 x 4096 LayerNorm forward 2.54-2.78 ->
      // 2.14-2.48 ms bf16, 3.44-4.41 -> 3.25-4.20 fp32, 1600 x 5120 3.12 -> 2.90 / 3.51 -> 3.35
      // (one thread, thread CPU time, load 1.0-2.5, interleaved, medians of 21-31). Wider rows
      // slowed (a whole row's prefetches at once stall the core): 1024 x 8192 bf16 2.30 -> 2.40,
      // 512 x 16384 2.30 -> 2.40, 128 x 65536 2.37 -> 2.77 (fp32 3.35 -> 3.64, 3.51 -> 4.04).
      // RMSNorm's forward slowed too (one pass after the sum: 2048 x 4096 bf16 1.95 -> 2.10, fp32
      // 2.80 -> 3.09), as did rows of 1024 (LayerNorm fp32 2.98 -> 3.31).
      if (D >= kWideRow && D < 2 * kWideRow && i + 1 < R) {
        prefetch_l2(x + o + D, D);
        if (res != nullptr) prefetch_l2(res + o + D, D);
      }
      float ss = 0.0f;
      long j0 = 0;
#if defined(__AVX512F__)
      // The centred sum of squares in row_sum's four accumulators, subtracting the mean in
      // vectors first (as row_sum with d * d, 3-5% faster: float32 LayerNorm forward, rows in
      // cache, 4096 x 64 74 -> 71 us, 4096 x 256 139 -> 136; from memory 1.98 -> 1.93 ms).
      {
        const __m512 m = _mm512_set1_ps(mu);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (; j0 + 64 <= D; j0 += 64) {
          const __m512 d0 = _mm512_sub_ps(in(vector(), j0), m);
          const __m512 d1 = _mm512_sub_ps(in(vector(), j0 + 16), m);
          const __m512 d2 = _mm512_sub_ps(in(vector(), j0 + 32), m);
          const __m512 d3 = _mm512_sub_ps(in(vector(), j0 + 48), m);
          a0 = _mm512_fmadd_ps(d0, d0, a0);
          a1 = _mm512_fmadd_ps(d1, d1, a1);
          a2 = _mm512_fmadd_ps(d2, d2, a2);
          a3 = _mm512_fmadd_ps(d3, d3, a3);
        }
        ss = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
      }
#endif
      ss += row_sum(D - j0, [=](auto v, long j) {
        const auto d = in(v, j0 + j) - mu;
        return d * d;
      });
      float r = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
      float sc = 1.0f, rs = r, m = mu;  // y = (x sc - mu) rs: mu is the scaled row's mean
      if (out_of_range(ss) || !(std::fabs(mu) <= FLT_MAX)) {
        sc = row_scale(src, D);
        if (sc != 1.0f) {
          float m2 = 0.0f;
#pragma omp simd reduction(+ : m2)
          for (long j = 0; j < D; ++j) m2 += ld(src, j) * sc;
          mu = m2 / static_cast<float>(D);
          float s2 = 0.0f;
#pragma omp simd reduction(+ : s2)
          for (long j = 0; j < D; ++j) {
            float d = ld(src, j) * sc - mu;
            s2 += d * d;
          }
          const double rd = scaled_rstd(s2, sc, D, eps);
          r = static_cast<float>(rd);
          rs = static_cast<float>(rd / sc);
          m = static_cast<float>(static_cast<double>(mu) / sc);
        }
      }
      mean[i] = m;
      rstd[i] = r;
      emit_rows(y + o, D, [&](auto v, long j) {
        return (in(v, j) * sc - mu) * rs * (get(v, w, j) + off) + get(v, bias, j);
      }, nts);
    });
  }
    fence_streams(nts);  // once a thread, not once a row
  }
}

// One pass over each row for c1, c2 (from the saved mean and rstd) and one for dx, dw and db
// together; dw and db go to per-block partials (always given) summed afterwards.
template <typename T>
void ln_bwd(const T* dy, const T* x, const float* w, float off, const float* mean,
            const float* rstd, const T* dsum, T* dx, float* dwpart, float* dbpart, long R,
            long D, int nt) {
  const float invd = 1.0f / static_cast<float>(D);
  const bool nts = streams_norm(R, D, sizeof(T));
#pragma omp parallel num_threads(threads_for(R, D, nt))
  {
#pragma omp for schedule(static) nowait
  for (long b = 0; b < blocks(R); ++b) {
    float* aw = dwpart + b * D;
    float* ab = dbpart + b * D;
    std::memset(aw, 0, sizeof(float) * D);
    std::memset(ab, 0, sizeof(float) * D);
    if (D >= kWideRow) {  // row groups (above)
      const long hi = block_lo(b + 1, R);
      for (long g = block_lo(b, R); g < hi; g += kGroupRows) {
        const long n = hi - g < kGroupRows ? hi - g : kGroupRows;
        float c1[kGroupRows], c2[kGroupRows];
        for (long k = 0; k < n; ++k) {
          const long o = (g + k) * D;
          const float r = rstd[g + k];
          const float mu = mean[g + k];
          row_sum2(
              D, [=](auto v, long j) { return get(v, dy + o, j) * (get(v, w, j) + off); },
              [=](auto v, long j) {
                return get(v, dy + o, j) * (get(v, w, j) + off) * ((get(v, x + o, j) - mu) * r);
              },
              c1[k], c2[k]);
          c1[k] *= invd;
          c2[k] *= invd;
        }
        for (long j0 = 0; j0 < D; j0 += kChunk) {
          const long m = D - j0 < kChunk ? D - j0 : kChunk;
          for (long k = 0; k < n; ++k) {
            const long o = (g + k) * D + j0;
            if (g + k + kGroupRows < R) {
              prefetch_l2(dy + o + kGroupRows * D, m);
              prefetch_l2(x + o + kGroupRows * D, m);
            }
            const float r = rstd[g + k], mu = mean[g + k], d1 = c1[k], d2 = c2[k];
            if constexpr (std::is_same_v<T, half>) {  // F16C conversions (halves, above)
              halves(dy + o, x + o, m, [&](const float* by, const float* bx, long i0, long n) {
                const float* wi = w + j0 + i0;
                float* awi = aw + j0 + i0;
                float* abi = ab + j0 + i0;
                auto grad = [&, off](long j) {
                  float gj = by[j];
                  float xh = (bx[j] - mu) * r;
                  awi[j] += gj * xh;
                  abi[j] += gj;
                  return r * (gj * (wi[j] + off) - d1 - xh * d2);
                };
                const long p = o + i0;
                emit_dx(dx + p, dsum == nullptr ? nullptr : dsum + p, n, grad, nts);
              });
              continue;
            }
            const float* wj = w + j0;
            float* awj = aw + j0;
            float* abj = ab + j0;
            auto grad = [&](long j) {
              float gj = ld(dy + o, j);
              float xh = (ld(x + o, j) - mu) * r;
              awj[j] += gj * xh;
              abj[j] += gj;
              return r * (gj * (wj[j] + off) - d1 - xh * d2);
            };
            emit_dx(dx + o, dsum == nullptr ? nullptr : dsum + o, m, grad, nts);
          }
        }
      }
      continue;
    }
    for (long i = block_lo(b, R); i < block_lo(b + 1, R); ++i) {
      const long o = i * D;
      const float r = rstd[i];
      const float mu = mean[i];
      float c1 = 0.0f, c2 = 0.0f;
      row_sum2(
          D, [=](auto v, long j) { return get(v, dy + o, j) * (get(v, w, j) + off); },
          [=](auto v, long j) {
            return get(v, dy + o, j) * (get(v, w, j) + off) * ((get(v, x + o, j) - mu) * r);
          },
          c1, c2);
      c1 *= invd;
      c2 *= invd;
      if constexpr (std::is_same_v<T, half>) {
#if defined(__AVX512F__)
        // Without a residual sum: explicit vectors, F16C on the fly, no buffers (the same
        // operations as the loop below, so bit-for-bit its values), and unmasked loads and
        // stores but for the row's last columns: masked ones, even with every lane set, left
        // the same code only 5% faster (Zen 4). Backward, two threads, interleaved medians of
        // 17, halves -> this: 8192 x 1024 1.91 -> 1.49 ms, 4096 x 1024 1.05 -> 0.80, 1024 x
        // 2048 0.72 -> 0.65, 64 x 1024 0.065 -> 0.062 (bfloat16's 8192 x 1024: ~1.5-1.7).
        if (dsum == nullptr) {
          const __m512 vmu = _mm512_set1_ps(mu), vr = _mm512_set1_ps(r), vc1 = _mm512_set1_ps(c1),
                       vc2 = _mm512_set1_ps(c2), voff = _mm512_set1_ps(off);
          auto step = [&](__m512 g, __m512 xv, __m512 wv, __m512& awv, __m512& abv) {
            const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(xv, vmu), vr);
            awv = _mm512_fmadd_ps(g, xh, awv);
            abv = _mm512_add_ps(abv, g);
            const __m512 t = _mm512_sub_ps(_mm512_mul_ps(g, _mm512_add_ps(wv, voff)), vc1);
            return narrow(dx, _mm512_mul_ps(vr, _mm512_fnmadd_ps(xh, vc2, t)));
          };
          long j = 0;
          for (; j + 16 <= D; j += 16) {
            __m512 awv = _mm512_loadu_ps(aw + j), abv = _mm512_loadu_ps(ab + j);
            const __m256i d = step(get(vector(), dy + o, j), get(vector(), x + o, j),
                                   _mm512_loadu_ps(w + j), awv, abv);
            _mm512_storeu_ps(aw + j, awv);
            _mm512_storeu_ps(ab + j, abv);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dx + o + j), d);
          }
          if (j < D) {
            const __mmask16 k = lanes(D - j);
            __m512 awv = _mm512_maskz_loadu_ps(k, aw + j), abv = _mm512_maskz_loadu_ps(k, ab + j);
            const __m256i d = step(get(k, dy + o + j), get(k, x + o + j),
                                   _mm512_maskz_loadu_ps(k, w + j), awv, abv);
            _mm512_mask_storeu_ps(aw + j, k, awv);
            _mm512_mask_storeu_ps(ab + j, k, abv);
            _mm256_mask_storeu_epi16(dx + o + j, k, d);
          }
          continue;
        }
#endif
        // F16C conversions (halves, above)
        halves(dy + o, x + o, D, [&](const float* by, const float* bx, long j0, long n) {
          const float* wj = w + j0;
          float* awj = aw + j0;
          float* abj = ab + j0;
          auto grad = [&, off](long j) {
            float g = by[j];
            float xh = (bx[j] - mu) * r;
            awj[j] += g * xh;
            abj[j] += g;
            return r * (g * (wj[j] + off) - c1 - xh * c2);
          };
          const long p = o + j0;
          emit_dx(dx + p, dsum == nullptr ? nullptr : dsum + p, n, grad, nts);
        });
        continue;
      }
      auto grad = [&, off, w, dy, x](long j) {  // by value: see rms_bwd
        float g = ld(dy + o, j);
        float xh = (ld(x + o, j) - mu) * r;
        aw[j] += g * xh;
        ab[j] += g;
        return r * (g * (w[j] + off) - c1 - xh * c2);
      };
      emit_dx(dx + o, dsum == nullptr ? nullptr : dsum + o, D, grad, nts);
    }
  }
    fence_streams(nts);  // once a thread, not once a row
  }
}

template <typename T>
void dyt_fwd(const T* x, float alpha, const float* w, const float* bias, T* y, long R, long D,
             int nt) {
  // Streamed as the norms' outputs (streams_norm: float32 from 16 MB at any width), fenced
  // once a thread: 8192 x 1024 float32, two threads, interleaved medians of 18, 2.21 -> 1.69
  // and 2.69 -> 2.16 ms in two runs (copy_ 1.87-2.11); a fence a row instead was 4-11% slower.
  const bool nts = streams_norm(R, D, sizeof(T));
  // Chunks of 256 columns, each first prefetching x 2048 elements ahead (into the next row
  // once D <= 2048): with rows of 4096 or more, w, b, x and y no longer fit the 48 KB L1
  // together and the hardware prefetcher alone left DyT at 3.4-3.5 ms for 8M floats
  // (1.6 at rows of 1024, copy_ 1.5-2.2); with it 2.2-2.8 ms (one thread, thread CPU
  // time, load 1.2, interleaved, medians of 15). Chunk starts stay 64-byte aligned.
  const long N = R * D;
#pragma omp parallel num_threads(threads_for(R, D, nt))
  {
#pragma omp for schedule(static) nowait
  for (long i = 0; i < R; ++i) {
    const long o = i * D;
    for (long j0 = 0; j0 < D; j0 += 256) {
      const long n = D - j0 < 256 ? D - j0 : 256;
      for (long k = 0; k < 256; k += 64 / static_cast<long>(sizeof(T))) {
        if (o + j0 + 2048 + k < N) {
          _mm_prefetch(reinterpret_cast<const char*>(x + o + j0 + 2048 + k), _MM_HINT_T0);
        }
      }
      const T* xt = x + o + j0;
      const float* wt = w + j0;
      const float* bt = bias + j0;
      T* yt = y + o + j0;
#if defined(__AVX512F__)
      // 64 columns at a time, then the chunk's last columns through masked loads and emit,
      // with the same vector arithmetic (the scalar form's clamped lanes differ by an ulp:
      // gcc evaluated tanh_fast(+-7.9053) at compile time with other roundings).
      const bool nts64 = nts && (reinterpret_cast<uintptr_t>(yt) & 63) == 0;
      const __m512 a = _mm512_set1_ps(alpha);
      long j1 = 0;
      for (; j1 + 64 <= n; j1 += 64) {
        __m512 v[4];
        for (long k = 0; k < 4; ++k) {
          const long c = j1 + 16 * k;
          v[k] = _mm512_fmadd_ps(tanh_out<T>(a * get(vector(), xt, c)), _mm512_loadu_ps(wt + c),
                                 _mm512_loadu_ps(bt + c));
        }
        put64(yt + j1, v, nts64);
      }
      if (j1 < n) {
        alignas(64) float buf[64];
        for (long c = j1; c < n; c += 16) {
          const __mmask16 m = lanes(n - c);
          const __m512 t = tanh_out<T>(a * get(m, xt + c));
          _mm512_store_ps(buf + c - j1,
                          _mm512_fmadd_ps(t, get(m, wt + c), get(m, bt + c)));
        }
        emit(yt + j1, n - j1, [&](long j) { return buf[j]; }, nts, false);
      }
#else
      emit(yt, n, [&](long j) { return tanh_out<T>(alpha * ld(xt, j)) * wt[j] + bt[j]; }, nts, false);
#endif
    }
  }
    fence_streams(nts);
  }
}

template <typename T>
void dyt_bwd(const T* dy, const T* x, float alpha, const float* w, T* dx, float* dwpart,
             float* dbpart, float* dapart, float* work, long R, long D, int nt) {
  // A row's tanh first, into the thread's row of work (nt rows of D), by tanh_precise's vector
  // form; then gcc's vectorised loop as before, so every output is bit-for-bit the same (936
  // compared: every dtype, D 1-12288, NaN and +-1e30 included, 1 and 2 threads). The scalar
  // form vectorised by gcc built 2^n in three operations and blended its clamps. The tanh pass
  // is compute-bound, so it also fetches what the second pass reads and writes (dy, dx for
  // writing, the next row's x into L2): without that, the two passes' memory and arithmetic no
  // longer overlapped and float32 from memory was 4-16% slower than the one loop. Backward,
  // old -> new, medians of 13 interleaved: one thread, rows in cache, 128 x 1024, 0.13 -> 0.10
  // ms (float32), 0.14 -> 0.11 (bfloat16); two threads from memory, 8192 x 1024 / 2048 x 4096,
  // float32 4.04-4.13 -> 3.49-3.71 / 4.79-4.84 -> 3.91-4.10, bfloat16 4.30-4.32 -> 3.41-3.54 /
  // 4.40-4.43 -> 3.46-3.54. Unmasked loads and stores for the full vectors then took another
  // 2-10% off (two runs: bf16 0.92-0.94x, fp32 0.90-0.99x).
#pragma omp parallel num_threads(threads_for(R, D, nt))
  {
    float* tb = work + static_cast<long>(omp_get_thread_num()) * D;
#pragma omp for schedule(static) nowait
    for (long b = 0; b < blocks(R); ++b) {
      float* aw = dwpart + b * D;  // dyt: the partial buffers are always given
      float* ab = dbpart + b * D;
      std::memset(aw, 0, sizeof(float) * D);
      std::memset(ab, 0, sizeof(float) * D);
      float da = 0.0f;
      for (long i = block_lo(b, R); i < block_lo(b + 1, R); ++i) {
        const long o = i * D;
#if defined(__AVX512F__)
        const __m512 va = _mm512_set1_ps(alpha);
        for (long j = 0; j < D; j += 16) {
          _mm_prefetch(reinterpret_cast<const char*>(dy + o + j), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(dx + o + j), _MM_HINT_ET0);  // for writing
          if (i + 1 < R) _mm_prefetch(reinterpret_cast<const char*>(x + o + D + j), _MM_HINT_T1);
          if (j + 16 <= D) {  // unmasked: a runtime mask on every vector costs (Zen 4)
            _mm512_storeu_ps(tb + j, tanh_precise(va * get(vector(), x + o, j)));
          } else {
            const __mmask16 k = lanes(D - j);
            _mm512_mask_storeu_ps(tb + j, k, tanh_precise(va * get(k, x + o + j)));
          }
        }
#else
#pragma omp simd
        for (long j = 0; j < D; ++j) tb[j] = tanh_precise(alpha * ld(x + o, j));
#endif
        float dar = 0.0f;
#pragma omp simd reduction(+ : dar)
        for (long j = 0; j < D; ++j) {
          float xv = ld(x + o, j);
          float t = tb[j];
          float g = ld(dy + o, j);
          float gt = g * w[j] * (1.0f - t * t);
          st(dx + o, j, gt * alpha);
          dar += gt * xv;
          aw[j] += g * t;
          ab[j] += g;
        }
        da += dar;
      }
      dapart[b] = da;
    }
  }
}

template <typename T>
void softmax1_fwd(const T* x, T* y, float* work, long R, long D, int nt) {
  // Streamed and fenced as DyT's forward: 8192 x 1024 float32 4.24 -> 3.27 and 2.29 -> 1.97
  // ms (two threads, medians of 18), 2048 x 4096 and bfloat16 within 5%.
  const bool nts = streams_norm(R, D, sizeof(T));
  // exp of degree 5 into 16-bit outputs (fast_exp.h). Forward, one thread, rows in cache,
  // 128 x 1024 (us), degree 7 with 2^n from its bits -> vscalefps -> degree 5 for 16 bits:
  // bfloat16 43.9 -> 37.5 -> 35.8, float16 44.4 -> 37.8 -> 36.5, float32 41.1 -> 38.0 (values
  // bit-for-bit the same); two threads from memory (8192 x 1024 / 2048 x 4096, interleaved,
  // four runs) 16-bit time 0.78-0.90x the old, float32 0.93-1.01x.
  constexpr int degree = std::is_same_v<T, float> ? 7 : 5;
#pragma omp parallel num_threads(threads_for(R, D, nt))
  {
    float* buf = work + static_cast<long>(omp_get_thread_num()) * D;  // nt rows of D
#pragma omp for schedule(static) nowait
    for (long i = 0; i < R; ++i) {
      const long o = i * D;
      // One pass: exp(x) unshifted, its sum and the max together. The implicit logit 0
      // bounds the shift below by 0, so when max <= 64 the sum cannot overflow (D e^64 <
      // 1e33) and y = exp(x) / (1 + sum) is the shifted form's value without its extra pass
      // over the row; a row with a larger logit is summed again shifted by its max.
      float m = 0.0f, s = 0.0f;
#if defined(__AVX512F__)
      // 64 columns at a time in four sums (one chains every add), the row's last columns
      // through masked loads, with fast_exp's vector form (the scalar loop's exp, without
      // gcc's masked arithmetic). Forward kernel, old -> new: one thread, rows in cache, ns an
      // element, float32 0.39 -> 0.32, bfloat16 0.44 -> 0.34; two threads, inputs from memory,
      // medians of 18 (8192 x 1024 / 2048 x 4096 ms): bfloat16 1.80 -> 1.39 / 2.04 -> 1.61,
      // float16 2.62 -> 1.60 / 2.67 -> 1.89, float32 1.76 -> 1.53 / 2.42 -> 2.33. Prefetching
      // the next row into L2 (as LayerNorm's forward does at 4096) was 11% slower there.
      {
        const __m512 zero = _mm512_setzero_ps();
        __m512 vm = zero, a0 = zero, a1 = zero, a2 = zero, a3 = zero;
        const T* xr = x + o;
        auto lane = [&](long j, __mmask16 k, __m512& acc) {
          const __m512 v = get(k, xr + j);
          vm = _mm512_max_ps(v, vm);  // a NaN never becomes the max, as in the scalar loop
          const __m512 e = _mm512_maskz_mov_ps(k, fast_exp<degree>(v));
          _mm512_mask_storeu_ps(buf + j, k, e);
          acc += e;
        };
        long j = 0;
        for (; j + 64 <= D; j += 64) {
          lane(j, 0xFFFF, a0);
          lane(j + 16, 0xFFFF, a1);
          lane(j + 32, 0xFFFF, a2);
          lane(j + 48, 0xFFFF, a3);
        }
        for (; j < D; j += 16) {
          lane(j, lanes(D - j), a0);
        }
        m = _mm512_reduce_max_ps(vm);
        s = _mm512_reduce_add_ps((a0 + a1) + (a2 + a3));
      }
#else
#pragma omp simd reduction(max : m) reduction(+ : s)
      for (long j = 0; j < D; ++j) {
        float v = ld(x + o, j);
        m = v > m ? v : m;
        float e = fast_exp<degree>(v);
        buf[j] = e;
        s += e;
      }
#endif
      float inv = 1.0f / (1.0f + s);
      if (m > 64.0f) {
        s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (long j = 0; j < D; ++j) {
          float e = fast_exp<degree>(ld(x + o, j) - m);
          buf[j] = e;
          s += e;
        }
        inv = 1.0f / (fast_exp<degree>(-m) + s);
      }
      emit(y + o, D, [&](long j) { return buf[j] * inv; }, nts, false);
    }
    fence_streams(nts);  // once a thread, not once a row
  }
}

template <typename T>
void softmax1_bwd(const T* dy, const T* y, T* dx, long R, long D, int nt) {
  const bool nts = streams(R, D, sizeof(T));
#pragma omp parallel for num_threads(threads_for(R, D, nt)) schedule(static)
  for (long i = 0; i < R; ++i) {
    const long o = i * D;
    float c = 0.0f;
#pragma omp simd reduction(+ : c)
    for (long j = 0; j < D; ++j) c += ld(dy + o, j) * ld(y + o, j);
    emit(dx + o, D, [&](long j) { return ld(y + o, j) * (ld(dy + o, j) - c); }, nts);
  }
}

// In dispatch, void* is read as float* (dt = 0), uint16_t* (dt = 1, bfloat16 bits) or
// half* (dt = 2, float16 bits).
#define NL_T(p) static_cast<const T*>(p)
#define NL_DISPATCH(dt, call)        \
  do {                               \
    if (dt == 1) {                   \
      using T = uint16_t;            \
      call;                          \
    } else if (dt == 2) {            \
      using T = half;                \
      call;                          \
    } else {                         \
      using T = float;               \
      call;                          \
    }                                \
  } while (0)

// y = f(x) on n values, for the tests: f's vector form (vector != 0, where the kernels have
// it) or gcc's vectorised loop over its scalar form (f takes either: a generic lambda).
template <typename F>
void map_values(const float* x, float* y, long n, int vector, F f) {
  long i = 0;
#if defined(__AVX512F__)
  for (; vector != 0 && i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, k, f(_mm512_maskz_loadu_ps(k, x + i)));
  }
#endif
#pragma omp simd
  for (long j = i; j < n; ++j) y[j] = f(x[j]);
}

}  // namespace

extern "C" {

int nl_version() { return 6; }

void nl_rms_fwd(int dt, const void* x, const void* res, const float* w, float off, void* sum,
                void* y, float* rstd, long R, long D, float eps, int nt) {
  NL_DISPATCH(dt, rms_fwd<T>(NL_T(x), NL_T(res), w, off, static_cast<T*>(sum),
                             static_cast<T*>(y), rstd, R, D, eps, nt));
}

void nl_rms_bwd(int dt, const void* dy, const void* x, const float* w, float off,
                const float* rstd, const void* dsum, void* dx, float* dwpart, float* dw, long R,
                long D, int nt) {
  NL_DISPATCH(dt, rms_bwd<T>(NL_T(dy), NL_T(x), w, off, rstd, NL_T(dsum), static_cast<T*>(dx),
                             dwpart, R, D, nt));
  if (dw != nullptr) reduce_blocks(dwpart, dw, nullptr, nullptr, blocks(R), D, nt);
}

void nl_ln_fwd(int dt, const void* x, const void* res, const float* w, const float* b, float off,
               void* sum, void* y, float* mean, float* rstd, long R, long D, float eps, int nt) {
  NL_DISPATCH(dt, ln_fwd<T>(NL_T(x), NL_T(res), w, b, off, static_cast<T*>(sum),
                            static_cast<T*>(y), mean, rstd, R, D, eps, nt));
}

void nl_ln_bwd(int dt, const void* dy, const void* x, const float* w, float off,
               const float* mean, const float* rstd, const void* dsum, void* dx, float* dwpart,
               float* dbpart, float* dw, float* db, long R, long D, int nt) {
  NL_DISPATCH(dt, ln_bwd<T>(NL_T(dy), NL_T(x), w, off, mean, rstd, NL_T(dsum),
                            static_cast<T*>(dx), dwpart, dbpart, R, D, nt));
  if (dw != nullptr || db != nullptr) reduce_blocks(dwpart, dw, dbpart, db, blocks(R), D, nt);
}

void nl_dyt_fwd(int dt, const void* x, float alpha, const float* w, const float* b, void* y,
                long R, long D, int nt) {
  NL_DISPATCH(dt, dyt_fwd<T>(NL_T(x), alpha, w, b, static_cast<T*>(y), R, D, nt));
}

void nl_dyt_bwd(int dt, const void* dy, const void* x, float alpha, const float* w, void* dx,
                float* dwpart, float* dbpart, float* dapart, float* dw, float* db, float* da,
                float* work, long R, long D, int nt) {
  NL_DISPATCH(dt, dyt_bwd<T>(NL_T(dy), NL_T(x), alpha, w, static_cast<T*>(dx), dwpart, dbpart,
                             dapart, work, R, D, nt));
  if (dw != nullptr || db != nullptr) reduce_blocks(dwpart, dw, dbpart, db, blocks(R), D, nt);
  float s = 0.0f;
  for (long b = 0; b < blocks(R); ++b) s += dapart[b];
  *da = s;
}

void nl_softmax1_fwd(int dt, const void* x, void* y, float* work, long R, long D, int nt) {
  NL_DISPATCH(dt, softmax1_fwd<T>(NL_T(x), static_cast<T*>(y), work, R, D, nt));
}

void nl_softmax1_bwd(int dt, const void* dy, const void* y, void* dx, long R, long D, int nt) {
  NL_DISPATCH(dt, softmax1_bwd<T>(NL_T(dy), NL_T(y), static_cast<T*>(dx), R, D, nt));
}

// softmax1's exp of degree 7 or 5 and DyT backward's tanh on n values, in either form (the two
// agree bit for bit: tests/kernels/test_softmax1_exp.py, test_cpu.py).
void nl_exp(const float* x, float* y, long n, int degree, int vector) {
  if (degree == 5) {
    map_values(x, y, n, vector, [](auto v) { return fast_exp<5>(v); });
  } else {
    map_values(x, y, n, vector, [](auto v) { return fast_exp<7>(v); });
  }
}
void nl_tanh_precise(const float* x, float* y, long n, int vector) {
  map_values(x, y, n, vector, [](auto v) { return tanh_precise(v); });
}

long nl_blocks() { return NB; }

// Output size (bytes) from which the kernels write with streaming stores.
long nl_stream_bytes() { return kStreamBytes; }

}  // extern "C"
