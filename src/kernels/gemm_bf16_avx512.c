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
#include <string.h>

#include "gemm_bf16_rne512.h"

#define T512F __attribute__((target("avx512f")))
#define T512BF __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))
#define AI static inline __attribute__((always_inline))

AI __mmask16 col_mask(int nr, int v) {
  int n = nr - 16 * v;
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

#define MR RP_BF16_MR_FMA
_Static_assert(RP_BF16_MR_FMA == RP_BF16_MR_DP, "both kernels share the tile code");

/* The tile in 24 named accumulators c<row>_<vector>: GCC 12 keeps an array of
 * __m512 in memory around the k loop (a memset and 24 stack stores and loads
 * per tile, 5-8 % of the kernel on Zen 5). */
#define ROWS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5)
#define DECL(i) __m512 c##i##_0, c##i##_1, c##i##_2, c##i##_3;
/* Start values: C (rows < mr; zero below), or the init row (bias) or zero. */
#define START(i)                                                                   \
  if (load_c) {                                                                    \
    const int in = (i) < mr;                                                       \
    c##i##_0 = in ? _mm512_maskz_loadu_ps(m0, c + (i) * ldc) : zero;               \
    c##i##_1 = in ? _mm512_maskz_loadu_ps(m1, c + (i) * ldc + 16) : zero;          \
    c##i##_2 = in ? _mm512_maskz_loadu_ps(m2, c + (i) * ldc + 32) : zero;          \
    c##i##_3 = in ? _mm512_maskz_loadu_ps(m3, c + (i) * ldc + 48) : zero;          \
  } else {                                                                         \
    c##i##_0 = s0, c##i##_1 = s1, c##i##_2 = s2, c##i##_3 = s3;                    \
  }
#define STORE(i)                                                                   \
  if ((i) < mr) {                                                                  \
    _mm512_mask_storeu_ps(c + (i) * ldc, m0, c##i##_0);                            \
    _mm512_mask_storeu_ps(c + (i) * ldc + 16, m1, c##i##_1);                       \
    _mm512_mask_storeu_ps(c + (i) * ldc + 32, m2, c##i##_2);                       \
    _mm512_mask_storeu_ps(c + (i) * ldc + 48, m3, c##i##_3);                       \
  }
#define TILE_PROLOGUE                                                              \
  const __mmask16 m0 = col_mask(nr, 0), m1 = col_mask(nr, 1);                      \
  const __mmask16 m2 = col_mask(nr, 2), m3 = col_mask(nr, 3);                      \
  const __m512 zero = _mm512_setzero_ps();                                         \
  const __m512 s0 = init ? _mm512_maskz_loadu_ps(m0, init) : zero;                 \
  const __m512 s1 = init ? _mm512_maskz_loadu_ps(m1, init + 16) : zero;            \
  const __m512 s2 = init ? _mm512_maskz_loadu_ps(m2, init + 32) : zero;            \
  const __m512 s3 = init ? _mm512_maskz_loadu_ps(m3, init + 48) : zero;            \
  ROWS(DECL)                                                                       \
  ROWS(START)

/* avx512-fma: one k slot (a widened element) */
#define FMA(i)                                                                     \
  {                                                                                \
    const __m512 av = _mm512_set1_ps(as[i]);                                       \
    c##i##_0 = _mm512_fmadd_ps(av, b0, c##i##_0);                                  \
    c##i##_1 = _mm512_fmadd_ps(av, b1, c##i##_1);                                  \
    c##i##_2 = _mm512_fmadd_ps(av, b2, c##i##_2);                                  \
    c##i##_3 = _mm512_fmadd_ps(av, b3, c##i##_3);                                  \
  }
#define FMA_STEP(sl)                                                               \
  {                                                                                \
    const float *bs = b + (sl) * RP_BF16_NR, *as = a + (sl) * MR;                  \
    const __m512 b0 = _mm512_load_ps(bs), b1 = _mm512_load_ps(bs + 16);            \
    const __m512 b2 = _mm512_load_ps(bs + 32), b3 = _mm512_load_ps(bs + 48);       \
    ROWS(FMA)                                                                      \
  }

T512F void rp_bf16_ukr_avx512_fma(long kp, const void *a_, const void *b_, float *c,
                                  long ldc, int mr, int nr, const float *init, int load_c) {
  const float *a = a_, *b = b_;
  TILE_PROLOGUE
  /* two slots a step: the k loop unrolled twice, as the fp32 GEMM's */
  for (long sl = 0; sl < 2 * kp; sl += 2) {
    FMA_STEP(sl)
    FMA_STEP(sl + 1)
  }
  ROWS(STORE)
}

/* avx512-bf16: one pair of k */
#define DP(i)                                                                      \
  {                                                                                \
    const __m512bh av = (__m512bh)_mm512_set1_epi32((int)ap[i]);                   \
    c##i##_0 = _mm512_dpbf16_ps(c##i##_0, av, b0);                                 \
    c##i##_1 = _mm512_dpbf16_ps(c##i##_1, av, b1);                                 \
    c##i##_2 = _mm512_dpbf16_ps(c##i##_2, av, b2);                                 \
    c##i##_3 = _mm512_dpbf16_ps(c##i##_3, av, b3);                                 \
  }
#define DP_STEP(pp)                                                                \
  {                                                                                \
    const uint32_t *bp = b + (pp) * RP_BF16_NR, *ap = a + (pp) * MR;               \
    const __m512bh b0 = (__m512bh)_mm512_load_si512(bp);                           \
    const __m512bh b1 = (__m512bh)_mm512_load_si512(bp + 16);                      \
    const __m512bh b2 = (__m512bh)_mm512_load_si512(bp + 32);                      \
    const __m512bh b3 = (__m512bh)_mm512_load_si512(bp + 48);                      \
    ROWS(DP)                                                                       \
  }

T512BF void rp_bf16_ukr_avx512_bf16(long kp, const void *a_, const void *b_, float *c,
                                    long ldc, int mr, int nr, const float *init, int load_c) {
  const uint32_t *a = a_, *b = b_;
  TILE_PROLOGUE
  long p = 0;
  for (; p + 2 <= kp; p += 2) {
    DP_STEP(p)
    DP_STEP(p + 1)
  }
  if (p < kp) DP_STEP(p)
  ROWS(STORE)
}

/* ---- A panels of the vdpbf16ps kernel from fp32 operands: pack_a with a32, so
 * the model's fp32 activations and output gradients are rounded (RNE) as they
 * are packed, not in a conversion pass that writes a bf16 copy first. The
 * panels are [kp][MR] pairs, the bits of rounding first and rp_bf16_pack_block
 * (tests/bf16 holds them to it). */

/* Software prefetch. The packers read their fp32 sources cold (written by the
 * previous layer's kernels, out of L2 by now), and the hardware prefetcher
 * misses each row's first lines: a k-contiguous row is read only 128 bytes at
 * a time, interleaved with the panel's other rows, and row pairs jump by two
 * rows of the source per pair. Measured on Zen 5 (one thread, source out of
 * L2): the A pack from 8-10 to 25-27 GB/s (the next panel's rows fetched while
 * this one is packed), the row-pair packs from 2.4-3.6 to 10-16 GB/s (PF_RP
 * pairs ahead); the bf16 training step 0.92 of its time. */
#define PF_RP 4
#define PB 16 /* pairs of a k-contiguous row rounded per step (rp_rne512_pairs16) */

/* Rows whose k runs contiguously (the forward's input, dinp's output gradient):
 * MR rows of PB pairs rounded into a small block, then transposed into the panel. */
T512BF static void pack_kcontig32(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                                  uint32_t *out) {
  for (int t = 0; t * MR < nrows; t++) {
    uint32_t *panel = out + (long)t * kp * MR;
    for (long pb = 0; pb < kp; pb += PB) {
      const int np = kp - pb < PB ? (int)(kp - pb) : PB;
      uint32_t blk[MR][PB];
      for (int w = 0; w < MR; w++) {
        const int r = r0 + t * MR + w;
        if (r < s->rows) {
          const float *row = s->src32 + (long)r * s->ld;
          if (r + MR < s->rows) { /* the next panel's row */
            const float *next = row + MR * s->ld + 2 * (p0 + pb);
            _mm_prefetch((const char *)next, _MM_HINT_T0);
            _mm_prefetch((const char *)(next + 16), _MM_HINT_T0);
          }
          rp_rne512_pairs16(row, s->K, p0 + pb, blk[w]);
        }
        else memset(blk[w], 0, sizeof blk[w]);
      }
      for (int q = 0; q < np; q++)
        for (int w = 0; w < MR; w++) panel[(pb + q) * MR + w] = blk[w][q];
    }
  }
}

/* Columns [e, e + 16) of the fp32 rows k and k+1 from lo (+0 past K and outside
 * the lanes of m), rounded: row k's bf16 in the low half of each 32-bit lane of
 * *wl, row k+1's in the high half of *wh. The same columns of the rows PF_RP
 * pairs ahead are prefetched. */
T512BF AI void rowpair16(const rp_bf16_src *s, long k, const float *lo, int e, __mmask16 m,
                         __m512i *wl, __m512i *wh) {
  if (k + 2 * PF_RP + 1 < s->K) {
    _mm_prefetch((const char *)(lo + 2 * PF_RP * s->ld + e), _MM_HINT_T0);
    _mm_prefetch((const char *)(lo + (2 * PF_RP + 1) * s->ld + e), _MM_HINT_T0);
  }
  const __m256i l = k < s->K ? rp_rne512_16(lo + e, m) : _mm256_setzero_si256();
  const __m256i h = k + 1 < s->K ? rp_rne512_16(lo + s->ld + e, m) : _mm256_setzero_si256();
  *wl = _mm512_cvtepu16_epi32(l);
  *wh = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

/* Pairs from source rows k, k+1 (dweight's output gradient, A(m, k) = src[k*ld + m]):
 * both row segments rounded and interleaved 16 lanes at a time across the
 * block, then cut into the panels. At most BLOCK rows per call. */
#define BLOCK (RP_BF16_BLOCK_MAX / MR * MR)
T512BF static void pack_rowpair32(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                                  uint32_t *out) {
  const int npan = (nrows + MR - 1) / MR;
  int nv = s->rows - r0;
  nv = nv < 0 ? 0 : nv > nrows ? nrows : nv;
  uint32_t pairs[BLOCK + 16];
  for (long p = 0; p < kp; p++) {
    const long k = 2 * (p0 + p);
    const float *lo = s->src32 + k * s->ld + r0;
    for (int e = 0; e < npan * MR; e += 16) {
      __m512i wl, wh;
      rowpair16(s, k, lo, e, rp_rne512_first_n(nv - e), &wl, &wh);
      _mm512_storeu_si512(pairs + e, _mm512_or_si512(wl, wh));
    }
    for (int t = 0; t < npan; t++)
      memcpy(out + (long)t * kp * MR + p * MR, pairs + t * MR, MR * sizeof(uint32_t));
  }
}

/* ---- B panels from an fp32 row-pair source (dweight's layer input, B(k, j) =
 * src[k*ld + j]): rows k and k+1 rounded 16 columns at a time and written
 * straight into the 64-column panels, as pairs (PAIRS: [kp][64], element 2p
 * in the low half) or widened (F32: [2*kp][64], element 2p+1 first). The bits
 * of rounding with rp_bf16_from_f32_array and packing with rp_bf16_pack_block,
 * without the conversion pass. */
#define BNR RP_BF16_NR
T512BF static void pack_b32(rp_bf16_fmt fmt, const rp_bf16_src *s, int r0, int nrows, long p0,
                            long kp, uint32_t *out) {
  const int npan = (nrows + BNR - 1) / BNR;
  int nv = s->rows - r0;
  nv = nv < 0 ? 0 : nv > nrows ? nrows : nv;
  const long pstride = kp * BNR * (fmt == RP_BF16_FMT_PAIRS ? 1 : 2);
  for (long p = 0; p < kp; p++) {
    const long k = 2 * (p0 + p);
    const float *lo = s->src32 + k * s->ld + r0;
    for (int e = 0; e < npan * BNR; e += 16) {
      __m512i wl, wh;
      rowpair16(s, k, lo, e, rp_rne512_first_n(nv - e), &wl, &wh);
      uint32_t *o = out + (e / BNR) * pstride + e % BNR;
      if (fmt == RP_BF16_FMT_PAIRS) {
        _mm512_storeu_si512(o + p * BNR, _mm512_or_si512(wl, wh));
      } else {
        _mm512_storeu_si512(o + 2 * p * BNR, wh);
        _mm512_storeu_si512(o + (2 * p + 1) * BNR, _mm512_slli_epi32(wl, 16));
      }
    }
  }
}

void rp_bf16_pack_b32_pairs(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                            void *out) {
  pack_b32(RP_BF16_FMT_PAIRS, s, r0, nrows, p0, kp, out);
}

void rp_bf16_pack_b32_f32(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                          void *out) {
  pack_b32(RP_BF16_FMT_F32, s, r0, nrows, p0, kp, out);
}

/* ---- B panels from a k-contiguous bf16 source (the forward's weight, B(k, j) =
 * w[j*ld + k]): a pair of k is one 32-bit word of the source row, so a panel
 * is a transpose of such words, 16 rows x 16 pairs per step in registers
 * (unpack 32, unpack 64, two lane shuffles). The plain-C transpose spent its
 * time waiting for each row's first lines, so the next 16 rows' lines are
 * prefetched while these are transposed. */

/* r[i] (16 words each) -> r[j] holds word j of r[0..15] */
T512BF AI void transpose16x16(__m512i r[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; i++) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) { /* b[4i + c], lane L: word 4L + c of rows 4i..4i+3 */
    b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int c = 0; c < 4; c++) {
    const __m512i e0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44);
    const __m512i e1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xEE);
    const __m512i f0 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i f1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(e0, f0, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(e0, f0, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(e1, f1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(e1, f1, 0xDD);
  }
}

/* Pairs [pb, pb + 16) of the panel's 16 rows g0.. (rows at or past nv are +0);
 * the source has rows up to navail from base. */
T512BF AI void kcontig_words16(const uint16_t *base, long ld, int g0, int nv, int navail,
                               long pb, uint32_t *panel) {
  __m512i r[16];
  for (int i = 0; i < 16; i++)
    r[i] = g0 + i < nv ? _mm512_loadu_si512(base + (long)(g0 + i) * ld + 2 * pb)
                       : _mm512_setzero_si512();
  for (int i = 0; i < 16 && g0 + 16 + i < navail; i++)
    _mm_prefetch((const char *)(base + (long)(g0 + 16 + i) * ld + 2 * pb), _MM_HINT_T0);
  transpose16x16(r);
  for (int j = 0; j < 16; j++) _mm512_storeu_si512(panel + (pb + j) * BNR + g0, r[j]);
}

T512BF void rp_bf16_pack_b16_pairs(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                            void *out) {
  RP_CHECK(s->kcontig && !s->src32);
  for (int t = 0; t * BNR < nrows; t++) {
    uint32_t *panel = (uint32_t *)out + (long)t * kp * BNR;
    const int pr0 = r0 + t * BNR;
    const int navail = s->rows - pr0;
    const int nv = navail < 0 ? 0 : navail > BNR ? BNR : navail; /* valid rows of the panel */
    const uint16_t *base = s->src + (long)pr0 * s->ld + 2 * p0;
    long kfull = s->K / 2 - p0; /* pairs with both halves inside K */
    kfull = kfull < 0 ? 0 : kfull > kp ? kp : kfull;
    const long kv = kfull / 16 * 16;
    for (int g0 = 0; g0 < BNR; g0 += 16)
      for (long pb = 0; pb < kv; pb += 16)
        kcontig_words16(base, s->ld, g0, nv, navail, pb, panel);
    /* the K tail and the padding pairs: a panel's pairs [kv, kp) are the
     * [kp - kv][BNR] panel that starts kv rows into it */
    if (kv < kp) rp_bf16_pack_panel(RP_BF16_FMT_PAIRS, s, pr0, BNR, p0 + kv, kp - kv,
                                    panel + kv * BNR);
  }
}

void rp_bf16_dp_pack_a(const rp_bf16_src *s, int r0, int nrows, long p0, long kp, void *out) {
  if (!s->src32) {
    rp_bf16_pack_block(RP_BF16_FMT_PAIRS, s, r0, nrows, MR, p0, kp, out);
    return;
  }
  if (s->kcontig) {
    pack_kcontig32(s, r0, nrows, p0, kp, out);
    return;
  }
  for (int c0 = 0; c0 < nrows; c0 += BLOCK)
    pack_rowpair32(s, r0 + c0, nrows - c0 < BLOCK ? nrows - c0 : BLOCK, p0, kp,
                   (uint32_t *)out + (long)(c0 / MR) * kp * MR);
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
void rp_bf16_dp_pack_a(const rp_bf16_src *s, int r0, int nrows, long p0, long kp, void *out) {
  rp_fatal("rp_bf16_dp_pack_a called on a build without AVX-512");
}
void rp_bf16_pack_b16_pairs(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                            void *out) {
  rp_fatal("rp_bf16_pack_b16_pairs called on a build without AVX-512");
}
void rp_bf16_pack_b32_pairs(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                            void *out) {
  rp_fatal("rp_bf16_pack_b32_pairs called on a build without AVX-512");
}
void rp_bf16_pack_b32_f32(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                          void *out) {
  rp_fatal("rp_bf16_pack_b32_f32 called on a build without AVX-512");
}

#endif
