/* fp32 -> bf16 rounding in 512-bit integer ops, for the bf16 GEMM's packers that
 * read fp32 operands (the AMX and the vdpbf16ps A packers): the same bits as
 * rp_bf16_rne_bits (round to nearest even, a NaN made quiet with its sign and top
 * payload), so such a pack equals a conversion pass followed by a bf16 pack.
 * Not vcvtneps2bf16: it flushes denormals, and results must not depend on the CPU.
 * Include only in x86-64 GCC/clang code; callers need avx512f, bw and vl. */
#ifndef RP_GEMM_BF16_RNE512_H
#define RP_GEMM_BF16_RNE512_H

#include <immintrin.h>
#include <stdint.h>

#define RP_RNE512_AI \
  static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl")))

/* The first n lanes of 16. */
RP_RNE512_AI __mmask16 rp_rne512_first_n(int n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* bf16 of the 16 floats at src (lanes outside m read as +0). */
RP_RNE512_AI __m256i rp_rne512_16(const float *src, __mmask16 m) {
  const __m512i u = _mm512_maskz_loadu_epi32(m, src);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                       _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  const __m512i q = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, r, q));
}

/* dst[0:n) = bf16 of src[0:n), any n >= 0. */
RP_RNE512_AI void rp_rne512_row(const float *src, int n, uint16_t *dst) {
  for (int e = 0; e < n; e += 16) {
    const __mmask16 m = rp_rne512_first_n(n - e);
    _mm256_mask_storeu_epi16(dst + e, m, rp_rne512_16(src + e, m));
  }
}

/* Pairs [p, p + 16) of an fp32 row of K elements as bf16 pairs (element 2p in
 * the low half), +0 past K. */
RP_RNE512_AI void rp_rne512_pairs16(const float *row, long K, long p, uint32_t *dst) {
  const long have = K - 2 * p;
  if (have >= 32) {
    _mm256_storeu_si256((__m256i *)dst, rp_rne512_16(row + 2 * p, 0xFFFF));
    _mm256_storeu_si256((__m256i *)(dst + 8), rp_rne512_16(row + 2 * p + 16, 0xFFFF));
    return;
  }
  uint16_t h[32] = {0};
  rp_rne512_row(row + 2 * p, have > 0 ? (int)have : 0, h);
  __builtin_memcpy(dst, h, sizeof h);
}

#endif
