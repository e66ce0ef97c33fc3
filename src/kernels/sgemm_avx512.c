/* AVX-512 micro-kernel of the fp32 GEMM (sgemm.c), compiled for AVX-512 through
 * target attributes and only called when the rp_isa.h ceiling allows avx512.
 *
 * A 12 x 32 tile of C lives in 24 zmm accumulators: per k, 2 aligned loads of
 * the B panel and 12 broadcasts of the A panel feed 24 multiply-adds, enough
 * independent chains for the FMA latency (4 cycles x 2 ports). 12 x 32 rather
 * than 6 x 64 so that a B micro-panel of kc = 192 (24 KiB) and an A panel (9 KiB)
 * both stay in a 48 KiB L1 while the tiles of a block reuse the B micro-panel
 * (with a 2 MiB L2 the driver's kc = 384 streams the B micro-panel from L2).
 * The k loop is unrolled twice: on the one-tile L1 test (kc = 128, Sapphire
 * Rapids, one core) that took the kernel from 123 to 195 GFLOP/s, 0.86 of the
 * register-only FMA probe; GCC 12 then also keeps the named accumulators in
 * registers (an array of __m512 is kept in memory, see flash_attention_avx512.c).
 * rp_sgemm_ukr_avx512_da is the same tile reading A in place (no A pack). */
#include "sgemm_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx2,fma")))

#define DECL(i) __m512 c##i##_0, c##i##_1;
#define START(i) c##i##_0 = s0, c##i##_1 = s1;
#define PREFETCH_C(i)                                              \
  if ((i) < mr) {                                                  \
    _mm_prefetch((const char *)(cin + (i) * ldc), _MM_HINT_T0);    \
    _mm_prefetch((const char *)(cin + (i) * ldc + 16), _MM_HINT_T0); \
  }
#define ADD_C(i)                                                                    \
  if ((i) < mr) {                                                                   \
    c##i##_0 = _mm512_add_ps(c##i##_0, _mm512_maskz_loadu_ps(m0, cin + (i) * ldc));      \
    c##i##_1 = _mm512_add_ps(c##i##_1, _mm512_maskz_loadu_ps(m1, cin + (i) * ldc + 16)); \
  }
#define FMA(i)                                                   \
  {                                                              \
    const __m512 av = _mm512_set1_ps(ak[i]);                     \
    c##i##_0 = _mm512_fmadd_ps(av, b0, c##i##_0);                \
    c##i##_1 = _mm512_fmadd_ps(av, b1, c##i##_1);                \
  }
#define STORE(i)                                                 \
  if ((i) < mr) {                                                \
    _mm512_mask_storeu_ps(c + (i) * ldc, m0, c##i##_0);          \
    _mm512_mask_storeu_ps(c + (i) * ldc + 16, m1, c##i##_1);     \
  }
#define ROWS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7) OP(8) OP(9) OP(10) OP(11)
#define STEP(k)                                                   \
  {                                                               \
    const float *bk = b + (k) * 32, *ak = a + (k) * 12;           \
    const __m512 b0 = _mm512_load_ps(bk), b1 = _mm512_load_ps(bk + 16); \
    ROWS(FMA)                                                     \
  }

_Static_assert(RP_SGEMM_MR_AVX512 == 12 && RP_SGEMM_NR_AVX512 == 32, "the tile is spelled out");

static __mmask16 cols_mask(int n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* A tile's start (C at the bias row or zero; the addend's lines fetched
 * while the k loop runs) and its end (the addend added, mr rows stored) */
#define TILE_BEGIN                                                    \
  const __mmask16 m0 = cols_mask(nr), m1 = cols_mask(nr - 16);        \
  const __m512 zero = _mm512_setzero_ps();                            \
  const __m512 s0 = init ? _mm512_maskz_loadu_ps(m0, init) : zero;    \
  const __m512 s1 = init ? _mm512_maskz_loadu_ps(m1, init + 16) : zero; \
  ROWS(DECL)                                                          \
  ROWS(START)                                                         \
  if (cin) {                                                          \
    ROWS(PREFETCH_C)                                                  \
  }
#define TILE_END   \
  if (cin) {       \
    ROWS(ADD_C)    \
  }                \
  ROWS(STORE)

T512 void rp_sgemm_ukr_avx512(long kc, const float *a, const float *b, float *c, long ldc,
                              int mr, int nr, const float *init, const float *cin) {
  TILE_BEGIN
  long k = 0;
  for (; k + 2 <= kc; k += 2) {
    STEP(k)
    STEP(k + 1)
  }
  if (k < kc) STEP(k)
  TILE_END
}

/* The same tile with A read where it lies (k-contiguous rows lda apart)
 * instead of from a packed panel: the forward's and dinp's A (an activation
 * or an output gradient, row-major) then needs no pack. Every row's element
 * k is broadcast from its own row; rows i = 4q + s are at base q (a + 4q lda)
 * plus s lda, so three bases advanced by one float a step and three offsets
 * (lda, 2 lda, 3 lda) address all twelve. The tile always has 12 rows (the
 * driver packs a last partial tile instead). Same products in the same
 * order as the packed kernel: bitwise the same C. */
#define FMA_DA(i)                                                                    \
  {                                                                                  \
    const float *row = ((i) < 4 ? r0 : (i) < 8 ? r4 : r8) + (((i) & 3) == 0   ? 0     \
                                                        : ((i) & 3) == 1 ? l1    \
                                                        : ((i) & 3) == 2 ? l2    \
                                                                         : l3);   \
    const __m512 av = _mm512_set1_ps(row[kk]);                                       \
    c##i##_0 = _mm512_fmadd_ps(av, b0, c##i##_0);                                    \
    c##i##_1 = _mm512_fmadd_ps(av, b1, c##i##_1);                                    \
  }
#define STEP_DA(kk_)                                                        \
  {                                                                         \
    const long kk = (kk_);                                                  \
    const __m512 b0 = _mm512_load_ps(b + kk * 32), b1 = _mm512_load_ps(b + kk * 32 + 16); \
    ROWS(FMA_DA)                                                            \
  }

T512 void rp_sgemm_ukr_avx512_da(long kc, const float *a, long lda, const float *b, float *c,
                                 long ldc, int nr, const float *init, const float *cin) {
  const int mr = RP_SGEMM_MR_AVX512;
  const float *r0 = a, *r4 = a + 4 * lda, *r8 = a + 8 * lda;
  const long l1 = lda, l2 = 2 * lda, l3 = 3 * lda;
  TILE_BEGIN
  long k = 0;
  for (; k + 2 <= kc; k += 2) {
    STEP_DA(0)
    STEP_DA(1)
    b += 64, r0 += 2, r4 += 2, r8 += 2;
  }
  if (k < kc) STEP_DA(0)
  TILE_END
}

#else

void rp_sgemm_ukr_avx512_da(long kc, const float *a, long lda, const float *b, float *c,
                            long ldc, int nr, const float *init, const float *cin) {
  (void)kc, (void)a, (void)lda, (void)b, (void)c, (void)ldc, (void)nr, (void)init, (void)cin;
  rp_fatal("rp_sgemm_ukr_avx512_da called on a build without AVX-512");
}

void rp_sgemm_ukr_avx512(long kc, const float *a, const float *b, float *c, long ldc, int mr,
                         int nr, const float *init, const float *cin) {
  (void)kc, (void)a, (void)b, (void)c, (void)ldc, (void)mr, (void)nr, (void)init, (void)cin;
  rp_fatal("rp_sgemm_ukr_avx512 called on a build without AVX-512");
}

#endif
