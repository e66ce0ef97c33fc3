/* AVX2 micro-kernel of the bf16 GEMM, for CPUs without AVX-512 (AMD Zen 2 and
 * Zen 3, Intel before Skylake-SP, and any CPU under --isa avx2). Compiled for
 * AVX2 + FMA through target attributes (whatever -march the build uses) and only
 * called when the rp_isa.h ceiling allows avx2.
 *
 * Operands are those of the avx512-fma kernel (gemm_bf16_avx512.c): widened to
 * fp32 while packing, in the pair order of rp_bf16.h (element 2p+1, then 2p),
 * A panels [2*kp][MR], B panels [2*kp][64]. A bf16 x bf16 product is exact in
 * fp32, so each FMA adds one exact product with one rounding, in the same slot
 * order: every C element is bitwise the avx512-fma and portable kernels' (and
 * rp_matmul_bf16_*_ref's).
 *
 * A 6 x 64 tile of C would take 48 ymm accumulators; AVX2 has 16 registers. The
 * tile runs as four column quarters of 6 x 16 (12 accumulators, 2 B vectors, 1
 * broadcast: the fp32 AVX2 GEMM's register block), each over all k: the A panel
 * (6 x 2*kp floats, 9 KiB at kc = 192 pairs) stays in L1 for the four passes,
 * and each B row is read once in all (a quarter's 64 bytes per pass). The
 * plain-C kernel this replaces kept a 4 x 64 tile in an array and ran at 0.46x
 * the fp32 GEMM's rate on the default model's shapes under the avx2 ceiling, so
 * --precision bf16 trained at 0.63-0.66x fp32's tokens/s there. */
#include "gemm_bf16_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "tile6x16_avx2.h"

#define T2 __attribute__((target("avx2,fma")))
#define AI static inline __attribute__((always_inline))
_Static_assert(RP_BF16_MR_AVX2 == 6, "the tile is tile6x16_avx2.h's");

#define DECL(i) __m256 c##i##_0 = s0, c##i##_1 = s1;
/* C as the start value (rows < mr; the rest stay s0, s1 and are not stored) */
#define LOAD_C(i)                                                                  \
  if ((i) < mr) {                                                                  \
    c##i##_0 = T16_CLOAD(c + (i) * ldc, m0);                                       \
    c##i##_1 = T16_CLOAD(c + (i) * ldc + 8, m1);                                   \
  }

/* C[0:mr, 0:16) (c, b and init at the quarter's first column; nr counted from
 * it) over all k slots. */
T2 AI void quarter(long kp, const float *a, const float *b, float *c, long ldc, int mr, int nr,
                   const float *init, int load_c, const int whole) {
  const __m256i m0 = t16_lanes(nr), m1 = t16_lanes(nr - 8);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 s0 = init ? T16_CLOAD(init, m0) : zero;
  const __m256 s1 = init ? T16_CLOAD(init + 8, m1) : zero;
  T16_ROWS(DECL)
  if (load_c) {
    T16_ROWS(LOAD_C)
  }
  /* two slots a step (2 * kp is even): the loop's scalar uops halved, as in
   * the other GEMM kernels */
  for (long sl = 0; sl < 2 * kp; sl += 2) {
    T16_STEP(sl, RP_BF16_NR)
    T16_STEP(sl + 1, RP_BF16_NR)
  }
  T16_ROWS(T16_STORE)
}

T2 void rp_bf16_ukr_avx2_fma(long kp, const void *a_, const void *b_, float *c, long ldc,
                             int mr, int nr, const float *init, int load_c) {
  const float *a = a_, *b = b_;
  for (int n0 = 0; n0 < nr; n0 += 16) {
    const float *in = init ? init + n0 : NULL;
    if (mr == RP_BF16_MR_AVX2 && nr - n0 >= 16)
      quarter(kp, a, b + n0, c + n0, ldc, RP_BF16_MR_AVX2, 16, in, load_c, 1);
    else
      quarter(kp, a, b + n0, c + n0, ldc, mr, nr - n0, in, load_c, 0);
  }
}

#else /* not x86-64 with GCC/clang: only the portable kernel exists */

#include "ringpipe/rp_base.h"

void rp_bf16_ukr_avx2_fma(long kp, const void *a, const void *b, float *c, long ldc, int mr,
                          int nr, const float *init, int load_c) {
  rp_fatal("rp_bf16_ukr_avx2_fma called on a build without AVX2");
}

#endif
