/* AVX-512 micro-kernels of the bf16 GEMM. Compiled for their ISA through target
 * attributes (whatever -march the build uses) and only called when the rp_isa.h
 * ceiling allows avx512 (FMA kernel) or avx512bf16; the peak-rate probes that
 * choose between them are in isa_probe.c.
 *
 * Both kernels hold a 6 x 64 tile of C in 24 zmm accumulators (6 rows broadcast
 * from the A panel, 4 vectors of 16 columns loaded from the B panel); 24
 * independent chains cover the FMA latency (4 cycles x 2 ports) and vdpbf16ps's
 * (measured on this project's Sapphire Rapids VM: about 7 cycles, one issued per
 * 2 cycles, so 32 flops a cycle against the FMAs' 64). Per k slot: 4 aligned B
 * loads, 6 broadcasts, 24 multiply-adds.
 *
 * avx512-fma: operands were widened to fp32 while packing, in the pair order of
 *   rp_bf16.h (element 2p+1, then 2p), so each FMA adds one exact product with
 *   one rounding: the same result as vdpbf16ps (without its denormal flush).
 * avx512-bf16: operands are bf16 pairs; one vdpbf16ps adds two products per lane. */
#include "gemm_bf16_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T512F __attribute__((target("avx512f")))
#define T512BF __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))
#define AI static inline __attribute__((always_inline))

AI __mmask16 col_mask(int nr, int v) {
  int n = nr - 16 * v;
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

#define MR RP_BF16_MR_FMA
_Static_assert(RP_BF16_MR_FMA == RP_BF16_MR_DP, "both kernels share the tile code");

/* Start values of the tile: C (rows < mr), the init row, or zero. */
#define TILE_START(acc, mk)                                                           \
  do {                                                                                \
    if (load_c) {                                                                     \
      for (int m = 0; m < MR; m++)                                                    \
        for (int v = 0; v < 4; v++)                                                   \
          acc[m][v] = m < mr ? _mm512_maskz_loadu_ps(mk[v], c + m * ldc + 16 * v)     \
                             : _mm512_setzero_ps();                                   \
    } else {                                                                          \
      for (int v = 0; v < 4; v++) {                                                   \
        __m512 t = init ? _mm512_maskz_loadu_ps(mk[v], init + 16 * v)                 \
                        : _mm512_setzero_ps();                                        \
        for (int m = 0; m < MR; m++) acc[m][v] = t;                                   \
      }                                                                               \
    }                                                                                 \
  } while (0)

#define TILE_STORE(acc, mk)                                                           \
  do {                                                                                \
    for (int m = 0; m < MR; m++) {                                                    \
      if (m >= mr) break;                                                             \
      for (int v = 0; v < 4; v++)                                                     \
        _mm512_mask_storeu_ps(c + m * ldc + 16 * v, mk[v], acc[m][v]);                \
    }                                                                                 \
  } while (0)

T512F void rp_bf16_ukr_avx512_fma(long kp, const void *a_, const void *b_, float *c,
                                  long ldc, int mr, int nr, const float *init, int load_c) {
  const float *a = a_, *b = b_;
  __mmask16 mk[4];
  for (int v = 0; v < 4; v++) mk[v] = col_mask(nr, v);
  __m512 acc[MR][4];
  TILE_START(acc, mk);
  for (long s = 0; s < 2 * kp; s++) {
    const float *bs = b + s * RP_BF16_NR;
    __m512 b0 = _mm512_load_ps(bs), b1 = _mm512_load_ps(bs + 16);
    __m512 b2 = _mm512_load_ps(bs + 32), b3 = _mm512_load_ps(bs + 48);
    const float *as = a + s * MR;
    for (int m = 0; m < MR; m++) {
      __m512 av = _mm512_set1_ps(as[m]);
      acc[m][0] = _mm512_fmadd_ps(av, b0, acc[m][0]);
      acc[m][1] = _mm512_fmadd_ps(av, b1, acc[m][1]);
      acc[m][2] = _mm512_fmadd_ps(av, b2, acc[m][2]);
      acc[m][3] = _mm512_fmadd_ps(av, b3, acc[m][3]);
    }
  }
  TILE_STORE(acc, mk);
}

T512BF void rp_bf16_ukr_avx512_bf16(long kp, const void *a_, const void *b_, float *c,
                                    long ldc, int mr, int nr, const float *init, int load_c) {
  const uint32_t *a = a_, *b = b_;
  __mmask16 mk[4];
  for (int v = 0; v < 4; v++) mk[v] = col_mask(nr, v);
  __m512 acc[MR][4];
  TILE_START(acc, mk);
  for (long p = 0; p < kp; p++) {
    const uint32_t *bp = b + p * RP_BF16_NR;
    __m512bh b0 = (__m512bh)_mm512_load_si512(bp), b1 = (__m512bh)_mm512_load_si512(bp + 16);
    __m512bh b2 = (__m512bh)_mm512_load_si512(bp + 32);
    __m512bh b3 = (__m512bh)_mm512_load_si512(bp + 48);
    const uint32_t *ap = a + p * MR;
    for (int m = 0; m < MR; m++) {
      __m512bh av = (__m512bh)_mm512_set1_epi32((int)ap[m]);
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], av, b0);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], av, b1);
      acc[m][2] = _mm512_dpbf16_ps(acc[m][2], av, b2);
      acc[m][3] = _mm512_dpbf16_ps(acc[m][3], av, b3);
    }
  }
  TILE_STORE(acc, mk);
}

#else /* not x86-64 with GCC/clang: only the portable kernel exists */

void rp_bf16_ukr_avx512_fma(long kp, const void *a, const void *b, float *c, long ldc,
                            int mr, int nr, const float *init, int load_c) {
  rp_fatal("rp_bf16_ukr_avx512_fma called on a build without AVX-512");
}
void rp_bf16_ukr_avx512_bf16(long kp, const void *a, const void *b, float *c, long ldc,
                             int mr, int nr, const float *init, int load_c) {
  rp_fatal("rp_bf16_ukr_avx512_bf16 called on a build without AVX-512");
}

#endif
