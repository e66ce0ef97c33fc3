/* The 6 x 16 register tile of the AVX2 GEMM kernels (the fp32 one in
 * sgemm_avx2.c, the bf16 one in gemm_bf16_avx2.c): C in 12 ymm accumulators
 * c<row>_<half>; per k, 2 loads of the B panel and 6 broadcasts of the A panel
 * feed 12 multiply-adds (the 16 registers hold the 12 accumulators, 2 B vectors
 * and the broadcast). The including function names the tile c, ldc, mr, the
 * column masks m0 and m1, and `whole` (a constant after inlining: all 6 rows and
 * 16 columns exist, as in nearly every tile, and C then moves with plain loads
 * and stores: vmaskmovps is an extra uop on Intel, and its store form is
 * microcoded on AMD Zen 2/3). Include only in x86-64 GCC/clang code compiled
 * for avx2 and fma. */
#ifndef RP_TILE6X16_AVX2_H
#define RP_TILE6X16_AVX2_H

#include <immintrin.h>

/* lanes [0, n) set */
static inline __attribute__((always_inline, target("avx2"))) __m256i t16_lanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define T16_ROWS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5)
#define T16_CLOAD(p, m) (whole ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m))
#define T16_CSTORE(p, m, v) \
  if (whole) _mm256_storeu_ps(p, v); else _mm256_maskstore_ps(p, m, v);
#define T16_STORE(i)                                             \
  if ((i) < mr) {                                                \
    T16_CSTORE(c + (i) * ldc, m0, c##i##_0)                      \
    T16_CSTORE(c + (i) * ldc + 8, m1, c##i##_1)                  \
  }
#define T16_FMA(i)                                               \
  {                                                              \
    const __m256 av = _mm256_broadcast_ss(ak + (i));             \
    c##i##_0 = _mm256_fmadd_ps(av, b0, c##i##_0);                \
    c##i##_1 = _mm256_fmadd_ps(av, b1, c##i##_1);                \
  }
/* k step k: 16 columns of B row k (rows ldb floats apart), 6 rows of A */
#define T16_STEP(k, ldb)                                                        \
  {                                                                             \
    const float *bk = b + (k) * (ldb), *ak = a + (k) * 6;                       \
    const __m256 b0 = _mm256_load_ps(bk), b1 = _mm256_load_ps(bk + 8);          \
    T16_ROWS(T16_FMA)                                                           \
  }

#endif
