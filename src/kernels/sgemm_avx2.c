/* AVX2 + FMA micro-kernel of the fp32 GEMM (sgemm.c), compiled through target
 * attributes and only called when the rp_isa.h ceiling allows avx2.
 *
 * A 6 x 16 tile of C in 12 ymm accumulators (tile6x16_avx2.h, shared with the
 * bf16 GEMM's AVX2 kernel). k is unrolled twice, as in the AVX-512 kernel.
 * Columns past nr are masked (vmaskmov), rows past mr are neither read nor
 * written. */
#include "sgemm_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "tile6x16_avx2.h"

#define TAVX2 __attribute__((target("avx2,fma")))

#define DECL(i) __m256 c##i##_0, c##i##_1;
#define START(i) c##i##_0 = s0, c##i##_1 = s1;
#define PREFETCH_C(i)                                              \
  if ((i) < mr) {                                                  \
    _mm_prefetch((const char *)(cin + (i) * ldc), _MM_HINT_T0);    \
    _mm_prefetch((const char *)(cin + (i) * ldc + 8), _MM_HINT_T0); \
  }
#define ADD_C(i)                                                                   \
  if ((i) < mr) {                                                                  \
    c##i##_0 = _mm256_add_ps(c##i##_0, T16_CLOAD(cin + (i) * ldc, m0));            \
    c##i##_1 = _mm256_add_ps(c##i##_1, T16_CLOAD(cin + (i) * ldc + 8, m1));        \
  }
/* A tile's start (C at the bias row or zero, the addend's lines fetched)
 * and end (the addend added, mr rows stored) */
#define TILE_BEGIN                                                  \
  const __m256i m0 = t16_lanes(nr), m1 = t16_lanes(nr - 8);         \
  const __m256 zero = _mm256_setzero_ps();                          \
  const __m256 s0 = init ? T16_CLOAD(init, m0) : zero;              \
  const __m256 s1 = init ? T16_CLOAD(init + 8, m1) : zero;          \
  T16_ROWS(DECL)                                                    \
  T16_ROWS(START)                                                   \
  if (cin) {                                                        \
    T16_ROWS(PREFETCH_C)                                            \
  }
#define TILE_END      \
  if (cin) {          \
    T16_ROWS(ADD_C)   \
  }                   \
  T16_ROWS(T16_STORE)
_Static_assert(RP_SGEMM_MR_AVX2 == 6 && RP_SGEMM_NR_AVX2 == 16, "the tile is spelled out");

TAVX2 static inline __attribute__((always_inline)) void
ukr_body(long kc, const float *a, const float *b, float *c, long ldc, int mr, int nr,
         const float *init, const float *cin, const int whole) {
  TILE_BEGIN
  long k = 0;
  for (; k + 2 <= kc; k += 2) {
    T16_STEP(k, 16)
    T16_STEP(k + 1, 16)
  }
  if (k < kc) T16_STEP(k, 16)
  TILE_END
}

TAVX2 void rp_sgemm_ukr_avx2(long kc, const float *a, const float *b, float *c, long ldc,
                             int mr, int nr, const float *init, const float *cin) {
  if (mr == RP_SGEMM_MR_AVX2 && nr == RP_SGEMM_NR_AVX2)
    ukr_body(kc, a, b, c, ldc, RP_SGEMM_MR_AVX2, RP_SGEMM_NR_AVX2, init, cin, 1);
  else
    ukr_body(kc, a, b, c, ldc, mr, nr, init, cin, 0);
}

/* The same tile with A read in place (k-contiguous rows lda apart, all 6
 * rows real; see rp_sgemm_ukr_avx512_da): rows 0-3 at r0 plus 0, lda, 2 lda,
 * 3 lda, rows 4-5 at r4 plus 0, lda. */
#define DA_FMA(i)                                                                       \
  {                                                                                     \
    const float *row = ((i) < 4 ? r0 : r4) + (((i) & 3) == 0   ? 0                       \
                                              : ((i) & 3) == 1 ? l1                      \
                                              : ((i) & 3) == 2 ? l2                      \
                                                               : l3);                    \
    const __m256 av = _mm256_broadcast_ss(row + kk);                                    \
    c##i##_0 = _mm256_fmadd_ps(av, b0, c##i##_0);                                       \
    c##i##_1 = _mm256_fmadd_ps(av, b1, c##i##_1);                                       \
  }
#define DA_STEP(kk_)                                                                    \
  {                                                                                     \
    const long kk = (kk_);                                                              \
    const __m256 b0 = _mm256_load_ps(b + kk * 16), b1 = _mm256_load_ps(b + kk * 16 + 8); \
    T16_ROWS(DA_FMA)                                                                    \
  }

TAVX2 static inline __attribute__((always_inline)) void
ukr_da_body(long kc, const float *a, long lda, const float *b, float *c, long ldc, int nr,
            const float *init, const float *cin, const int whole) {
  const int mr = RP_SGEMM_MR_AVX2;
  const float *r0 = a, *r4 = a + 4 * lda;
  const long l1 = lda, l2 = 2 * lda, l3 = 3 * lda;
  TILE_BEGIN
  long k = 0;
  for (; k + 2 <= kc; k += 2) {
    DA_STEP(0)
    DA_STEP(1)
    b += 32, r0 += 2, r4 += 2;
  }
  if (k < kc) DA_STEP(0)
  TILE_END
}

TAVX2 void rp_sgemm_ukr_avx2_da(long kc, const float *a, long lda, const float *b, float *c,
                                long ldc, int nr, const float *init, const float *cin) {
  if (nr == RP_SGEMM_NR_AVX2)
    ukr_da_body(kc, a, lda, b, c, ldc, RP_SGEMM_NR_AVX2, init, cin, 1);
  else
    ukr_da_body(kc, a, lda, b, c, ldc, nr, init, cin, 0);
}

/* ---- the transposing pack: out[k][w] = src[r][k] for the w rows r of a
 * panel, in 8 x 8 blocks (8 row loads, 24 shuffles, 8 stores) instead of one
 * scalar store per element; both kernels' panels take it (w = 12, 16, 32). */

TAVX2 static inline __attribute__((always_inline)) void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* The first nw (1..8) lanes of v to o, in 4-, 2- and 1-float stores. Not
 * through a copy on the stack: gcc makes that loop a memcpy call, and the
 * AVX2 kernel's A panels are 6 wide, so every 8 x 8 block of them went
 * through 8 calls (perf, default model under RINGPIPE_ISA=avx2: 4.9 % of the
 * step's samples in memmove). Nor a vmaskmovps, microcoded on AMD Zen 2/3. */
TAVX2 static inline __attribute__((always_inline)) void
store_rows8(float *o, __m256 v, int nw) {
  if (nw == 8) {
    _mm256_storeu_ps(o, v);
    return;
  }
  __m128 x = _mm256_castps256_ps128(v);
  if (nw >= 4) {
    _mm_storeu_ps(o, x);
    x = _mm256_extractf128_ps(v, 1);
    o += 4, nw -= 4;
  }
  if (nw >= 2) {
    _mm_storel_epi64((__m128i *)o, _mm_castps_si128(x));
    x = _mm_movehl_ps(x, x);
    o += 2, nw -= 2;
  }
  if (nw >= 1) _mm_store_ss(o, x);
}

/* 8 x 8 block: rows [r0, r0 + 8) (those past have read as 0), k [k, k + 8) */
TAVX2 static inline __attribute__((always_inline)) void
pack_t_block(const float *src, long ld, int have, int w, int r0, long k, float *out) {
  const int nw = RP_MIN(8, w - r0), nv = RP_MAX(0, RP_MIN(nw, have - r0));
  __m256 r[8];
  for (int i = 0; i < 8; i++)
    r[i] = i < nv ? _mm256_loadu_ps(src + (long)(r0 + i) * ld + k) : _mm256_setzero_ps();
  transpose8(r);
  for (int j = 0; j < 8; j++) store_rows8(out + (k + j) * w + r0, r[j], nw);
}

TAVX2 static void pack_t_tail(const float *src, long ld, int have, int w, long k8, long kc,
                              float *out) {
  for (int r0 = 0; r0 < w; r0 += 8) {
    const int nw = RP_MIN(8, w - r0), nv = RP_MAX(0, RP_MIN(nw, have - r0));
    for (long k = k8; k < kc; k++)
      for (int i = 0; i < nw; i++)
        out[k * w + r0 + i] = i < nv ? src[(long)(r0 + i) * ld + k] : 0.0f;
  }
}

/* Row groups outer: for a panel that stays in L1 (an A panel, 12 x 384), whose
 * lines the row groups' passes then complete in L1. */
TAVX2 static void pack_t_by_rows(const float *src, long ld, int have, int w, long kc,
                                 float *out) {
  const long k8 = kc / 8 * 8;
  for (int r0 = 0; r0 < w; r0 += 8) {
    /* the next 8 rows' lines (the next panel's after the last 8) while these
     * are transposed: each row's first touch is otherwise a miss the hardware
     * prefetcher does not see coming */
    const int npf = RP_MAX(0, RP_MIN(8, have - r0 - 8));
    for (long k = 0; k < k8; k += 8) {
      if (k % 16 == 0)
        for (int i = 0; i < npf; i++)
          _mm_prefetch((const char *)(src + (long)(r0 + 8 + i) * ld + k), _MM_HINT_T0);
      pack_t_block(src, ld, have, w, r0, k, out);
    }
  }
  pack_t_tail(src, ld, have, w, k8, kc, out);
}

/* k blocks outer: for a panel bigger than L1 (a weight's 32 x K panel in the
 * forward), so that each 8 x w block of output lines is written whole once,
 * not a quarter at a time in four passes that each evict the last. Every row's
 * line PK_PF floats ahead is fetched, and past the panel's end the next
 * panel's rows. On one Sapphire Rapids core, the 124M shape's weights: 20-25
 * % faster than by rows (20 -> 25 GB/s); the A panels stay faster by rows. */
#define PK_PF 64
TAVX2 static void pack_t_by_k(const float *src, long ld, int have, int w, long kc, float *out) {
  const long k8 = kc / 8 * 8;
  const int hv = RP_MIN(have, w), nx = RP_MAX(0, RP_MIN(w, have - w));
  for (long k = 0; k < k8; k += 8) {
    if (k % 16 == 0) {
      const long kk = k + PK_PF;
      if (kk < kc)
        for (int i = 0; i < hv; i++)
          _mm_prefetch((const char *)(src + (long)i * ld + kk), _MM_HINT_T0);
      else
        for (int i = 0; i < nx; i++)
          _mm_prefetch((const char *)(src + (long)(w + i) * ld + kk - kc), _MM_HINT_T0);
    }
    for (int r0 = 0; r0 < w; r0 += 8) pack_t_block(src, ld, have, w, r0, k, out);
  }
  pack_t_tail(src, ld, have, w, k8, kc, out);
}

TAVX2 void rp_sgemm_pack_t_avx2(const float *src, long ld, int have, int w, long kc,
                                float *out) {
  if ((long)w * kc * (long)sizeof(float) > (32L << 10))
    pack_t_by_k(src, ld, have, w, kc, out);
  else
    pack_t_by_rows(src, ld, have, w, kc, out);
}

/* The plain pack: out[k][w] = src[k * ld + r] for r < have, 0 up to w; eight
 * lanes at a time with masks for both edges (a memcpy per k of 12 to 32
 * floats cost more in calls than in bytes). */
TAVX2 void rp_sgemm_pack_n_avx2(const float *src, long ld, int have, int w, long kc,
                                float *out) {
  enum { MAXV = 8 }; /* w <= 64 */
  __m256i lm[MAXV], sm[MAXV];
  const int nv = (w + 7) / 8;
  for (int v = 0; v < nv; v++) {
    lm[v] = t16_lanes(RP_MAX(0, RP_MIN(8, have - 8 * v)));
    sm[v] = t16_lanes(RP_MIN(8, w - 8 * v));
  }
  const int whole = have == w && w % 8 == 0;
  for (long k = 0; k < kc; k++) {
    const float *s = src + k * ld;
    float *o = out + k * w;
    if (whole) {
      for (int v = 0; v < nv; v++) _mm256_storeu_ps(o + 8 * v, _mm256_loadu_ps(s + 8 * v));
    } else {
      for (int v = 0; v < nv; v++)
        _mm256_maskstore_ps(o + 8 * v, sm[v], _mm256_maskload_ps(s + 8 * v, lm[v]));
    }
  }
}

/* The block pack of panels that are r-contiguous in the source: np panels of
 * w columns, out panel p at out + p * kc * w, swept row by row of the source
 * (k outer) so that each source row is read once, front to back, and the
 * hardware prefetcher can stream it. Packed panel by panel instead, every
 * panel's pass visits each row at a stride of ld, and its first touches are
 * cache misses the prefetcher does not see coming (perf: the first load of
 * each row took most of the pack's time on dweight's layer inputs). The sweep
 * still starts every row with a miss: the rows PF_ROWS ahead are prefetched
 * (perf on Zen 5: this pack's share of a step's samples 3.5 -> 2.2 %). */
#define PF_ROWS 4

TAVX2 static inline __attribute__((always_inline)) void
copy_cols(const float *restrict s, float *restrict o, int n, const int w) {
  int c = 0;
  if (n == w) {
    for (; c + 8 <= w; c += 8) _mm256_storeu_ps(o + c, _mm256_loadu_ps(s + c));
    for (; c + 4 <= w; c += 4) _mm_storeu_ps(o + c, _mm_loadu_ps(s + c));
    for (; c < w; c++) o[c] = s[c];
    return;
  }
  for (; c < n; c++) o[c] = s[c];
  for (; c < w; c++) o[c] = 0.0f;
}

TAVX2 static inline __attribute__((always_inline)) void
pack_nblock_body(const float *src, long ld, int have, int np, long kc, float *out, const int w) {
  const long pstride = kc * w, len = RP_MIN((long)have, (long)np * w);
  for (long k = 0; k < kc; k++) {
    const float *s = src + k * ld;
    float *o = out + k * w;
    if (k + PF_ROWS < kc)
      for (long c = 0; c < len; c += 16)
        _mm_prefetch((const char *)(s + PF_ROWS * ld + c), _MM_HINT_T0);
    for (int p = 0; p < np; p++)
      copy_cols(s + p * w, o + p * pstride, RP_MAX(0, RP_MIN(w, have - p * w)), w);
  }
}

TAVX2 void rp_sgemm_pack_nblock_avx2(const float *src, long ld, int have, int w, int np,
                                     long kc, float *out) {
  switch (w) { /* the two kernels' panel widths, constants for the compiler */
    case RP_SGEMM_NR_AVX512: pack_nblock_body(src, ld, have, np, kc, out, RP_SGEMM_NR_AVX512); break;
    case RP_SGEMM_MR_AVX512: pack_nblock_body(src, ld, have, np, kc, out, RP_SGEMM_MR_AVX512); break;
    case RP_SGEMM_NR_AVX2: pack_nblock_body(src, ld, have, np, kc, out, RP_SGEMM_NR_AVX2); break;
    case RP_SGEMM_MR_AVX2: pack_nblock_body(src, ld, have, np, kc, out, RP_SGEMM_MR_AVX2); break;
    default: pack_nblock_body(src, ld, have, np, kc, out, w);
  }
}

#else

void rp_sgemm_ukr_avx2_da(long kc, const float *a, long lda, const float *b, float *c,
                          long ldc, int nr, const float *init, const float *cin) {
  (void)kc, (void)a, (void)lda, (void)b, (void)c, (void)ldc, (void)nr, (void)init, (void)cin;
  rp_fatal("rp_sgemm_ukr_avx2_da called on a build without AVX2");
}

void rp_sgemm_pack_nblock_avx2(const float *src, long ld, int have, int w, int np, long kc,
                               float *out) {
  (void)src, (void)ld, (void)have, (void)w, (void)np, (void)kc, (void)out;
  rp_fatal("rp_sgemm_pack_nblock_avx2 called on a build without AVX2");
}

void rp_sgemm_pack_n_avx2(const float *src, long ld, int have, int w, long kc, float *out) {
  (void)src, (void)ld, (void)have, (void)w, (void)kc, (void)out;
  rp_fatal("rp_sgemm_pack_n_avx2 called on a build without AVX2");
}

void rp_sgemm_pack_t_avx2(const float *src, long ld, int have, int w, long kc, float *out) {
  (void)src, (void)ld, (void)have, (void)w, (void)kc, (void)out;
  rp_fatal("rp_sgemm_pack_t_avx2 called on a build without AVX2");
}

void rp_sgemm_ukr_avx2(long kc, const float *a, const float *b, float *c, long ldc, int mr,
                       int nr, const float *init, const float *cin) {
  (void)kc, (void)a, (void)b, (void)c, (void)ldc, (void)mr, (void)nr, (void)init, (void)cin;
  rp_fatal("rp_sgemm_ukr_avx2 called on a build without AVX2");
}

#endif
