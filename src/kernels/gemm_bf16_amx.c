/* AMX micro-kernel of the bf16 GEMM (tdpbf16ps on tiles), its A-panel packer,
 * the per-thread tile configuration and the AMX peak probe. This file alone is
 * compiled with -mamx-tile -mamx-bf16 (src/kernels/meson.build, where the
 * compiler has them; RP_BUILD_AMX says so) and its functions are only called
 * when the rp_isa.h ceiling allows amx, which implies that isa.c got Linux's
 * permission for tile data.
 *
 * Tiles: 8 registers of up to 16 rows x 64 bytes. The kernel computes a 32 x 64
 * tile of C in two 32 x 32 halves, each in 4 fp32 accumulator tiles (tmm0-3,
 * 2 x 2 blocks of 16 x 16) fed by 2 A tiles (tmm4-5: 16 rows x 16 bf16 pairs)
 * and 2 B tiles (tmm6-7: 16 pairs x 16 columns): every tile loaded serves two
 * tdpbf16ps, each 16 x 16 x 32 multiply-adds.
 *
 * Layouts: B is the PAIRS panel of rp_bf16.h as it is ([pairs][64 columns]
 * uint32, padded to a multiple of 16 pairs), so a B tile is 16 consecutive
 * pairs of 16 columns, loaded with a 256-byte row stride. A tiles want rows of
 * pairs, so A is packed here as [kp/16][32 rows][16 pairs] per 32-row panel,
 * zero past the matrix.
 *
 * Summation order: tdpbf16ps sums, per output and per instruction (16 pairs),
 * the even and the odd products in two fp32 chains and adds their sum to the
 * accumulator (Intel SDM pseudo-code), with denormals flushed like vdpbf16ps.
 * The accumulator starts at +0 for each block of kc pairs (the driver's k
 * blocks, RP_BF16_AMX_KC) and its sum is added to C (or the bias) at the end of
 * the block. That is not the order of rp_bf16.h, so this kernel's results
 * differ from the others' in the last bits; rp_matmul_bf16_*_ref_of(AMX) loops
 * in this order, and tests/bf16 hold the kernel to it bit for bit. Results
 * depend only on the data, not on the thread count or the row and column
 * split, because the k blocking always starts at k = 0. */
#include <string.h>

#include "gemm_bf16_internal.h"

#define NR RP_BF16_NR
#define MR RP_BF16_MR_AMX
#define KB RP_BF16_PAIRS_KALIGN /* pairs per tile step */
_Static_assert(MR == 32 && KB == 16, "the kernel below is written for 2 x 16 rows, 16 pairs");

#if defined(RP_BUILD_AMX)
#include <immintrin.h>

#include "gemm_bf16_rne512.h"

/* ---- tile configuration: per thread (ldtilecfg sets the calling thread's
 * state only), loaded before a thread's share of a GEMM and released after it,
 * so no thread keeps the 8 KiB tile state live between GEMMs. */

typedef struct {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

void rp_bf16_amx_begin(void) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) { /* every tile: 16 rows of 64 bytes */
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  /* not _tile_loadconfig: GCC 12's macro tells the compiler it reads 8 bytes
   * only, and the stores of rows and colsb above were optimized away */
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

void rp_bf16_amx_end(void) { _tile_release(); }

/* ---- packing A: 32-row panels of [kp/16][32][16] pairs */

/* Pair p of a k-contiguous row: elements 2p (low half) and 2p+1 (high half). */
static inline uint32_t pair_kcontig(const uint16_t *row, long p, int K) {
  long k = 2 * p;
  uint32_t lo = k < K ? row[k] : 0, hi = k + 1 < K ? row[k + 1] : 0;
  return hi << 16 | lo;
}

/* One row of 16 pairs from p: a 64-byte copy inside the matrix, the tail and
 * past-K pairs one by one. */
static void row16_kcontig(const rp_bf16_src *s, int r, long p, uint32_t *dst) {
  if (r >= s->rows) {
    memset(dst, 0, KB * 4);
    return;
  }
  const uint16_t *row = s->src + (long)r * s->ld;
  if (2 * (p + KB) <= s->K) {
    memcpy(dst, row + 2 * p, KB * 4);
    return;
  }
  for (int q = 0; q < KB; q++) dst[q] = pair_kcontig(row, p + q, s->K);
}

/* The same from an fp32 row, each element rounded to bf16 (RNE) as it is read:
 * the model's activations go into the tiles without a separate conversion
 * pass. 32 floats -> 32 bf16 in order are 16 pairs, element 2p low. */
static void row16_kcontig32(const rp_bf16_src *s, int r, long p, uint32_t *dst) {
  if (r >= s->rows) memset(dst, 0, KB * 4);
  else rp_rne512_pairs16(s->src32 + (long)r * s->ld, s->K, p, dst);
}

/* Pairs from rows k, k+1 of the source (A(m, k) = src[k * ld + m]): the two
 * rows are interleaved into column q of the 32-row panels (fp32 sources are
 * rounded first, one contiguous row segment at a time). */
static void pairs_rowpair(const rp_bf16_src *s, int r0, int nrows, long p, int q,
                          uint32_t *out, long panel_stride, long kb) {
  static const uint16_t zeros[MR] = {0};
  const long k = 2 * p;
  for (int t = 0; t * MR < nrows; t++) {
    uint32_t *dst = out + t * panel_stride + kb * MR * KB + q;
    const int rb = r0 + t * MR, nv = s->rows - rb < MR ? s->rows - rb : MR;
    uint16_t lo32[MR], hi32[MR];
    const uint16_t *lo = zeros, *hi = zeros;
    if (nv > 0 && s->src32) {
      if (k < s->K) rp_rne512_row(s->src32 + k * s->ld + rb, nv, lo32);
      if (k + 1 < s->K) rp_rne512_row(s->src32 + (k + 1) * s->ld + rb, nv, hi32);
      lo = k < s->K ? lo32 : zeros;
      hi = k + 1 < s->K ? hi32 : zeros;
    } else if (nv > 0) {
      lo = k < s->K ? s->src + k * s->ld + rb : zeros;
      hi = k + 1 < s->K ? s->src + (k + 1) * s->ld + rb : zeros;
    }
    int w = 0;
    for (; w < nv; w++) dst[w * KB] = (uint32_t)hi[w] << 16 | lo[w];
    for (; w < MR; w++) dst[w * KB] = 0;
  }
}

void rp_bf16_amx_pack_a(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                        void *out_) {
  uint32_t *out = out_;
  const long nkb = kp / KB, panel_stride = kp * MR;
  if (s->kcontig) { /* each source row read front to back: the prefetchers stream it */
    for (int t = 0; t * MR < nrows; t++)
      for (int w = 0; w < MR; w++)
        for (long kb = 0; kb < nkb; kb++)
          (s->src32 ? row16_kcontig32 : row16_kcontig)(s, r0 + t * MR + w, p0 + kb * KB,
                                                       out + t * panel_stride + (kb * MR + w) * KB);
    return;
  }
  for (long kb = 0; kb < nkb; kb++)
    for (int q = 0; q < KB; q++) pairs_rowpair(s, r0, nrows, p0 + kb * KB + q, q, out,
                                               panel_stride, kb);
}

/* ---- the micro-kernel
 *
 * The accumulators start at zero and the start value (C itself, the init row,
 * or +0) is added when the tile is stored: C = start + S, S the tile's sum over
 * this call's kp pairs. Loading C or a bias block into a tile instead would
 * read memory just written by vector stores, which a tile load cannot take
 * from the store buffer: on Sapphire Rapids that stall was 20-25% of the
 * kernel's time in training. */

/* C[r0.., c0..] (16 x 16, clipped to mr x nr) = start + the stored tile s. */
static inline void add_store(const float *s, float *c, long ldc, int mr, int nr,
                             const float *init, int load_c, int r0, int c0) {
  const int ncol = nr - c0 < 16 ? nr - c0 : 16;
  const __mmask16 mk = (__mmask16)((1u << ncol) - 1u);
  const __m512 bias = init && !load_c ? _mm512_maskz_loadu_ps(mk, init + c0)
                                      : _mm512_setzero_ps();
  for (int i = 0; i < 16 && r0 + i < mr; i++) {
    float *row = c + (long)(r0 + i) * ldc + c0;
    __m512 start = load_c ? _mm512_maskz_loadu_ps(mk, row) : bias;
    _mm512_mask_storeu_ps(row, mk, _mm512_add_ps(start, _mm512_load_ps(s + 16 * i)));
  }
}

#define TILE_FINISH(T, r0, c0)                                                         \
  do {                                                                                 \
    if ((r0) < mr && (c0) < nr) {                                                      \
      _tile_stored(T, sum, 64);                                                        \
      add_store(sum, c, ldc, mr, nr, init, load_c, r0, c0);                            \
    }                                                                                  \
  } while (0)

void rp_bf16_ukr_amx(long kp, const void *a_, const void *b_, float *c, long ldc, int mr,
                     int nr, const float *init, int load_c) {
  const uint32_t *a = a_, *b = b_;
  float sum[256] __attribute__((aligned(64)));
  for (int col = 0; col < nr; col += 32) { /* the two 32-column halves */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const uint32_t *ak = a, *bk = b + col;
    for (long kb = 0; kb < kp / KB; kb++, ak += MR * KB, bk += KB * NR) {
      _tile_loadd(4, ak, KB * 4);
      _tile_loadd(6, bk, NR * 4);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, bk + 16, NR * 4);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, ak + 16 * KB, KB * 4);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    TILE_FINISH(0, 0, col);
    TILE_FINISH(1, 0, col + 16);
    TILE_FINISH(2, 16, col);
    TILE_FINISH(3, 16, col + 16);
  }
}

/* ---- peak probe: the kernel's inner step on tiles that stay loaded, so no
 * memory traffic: 4 independent accumulators, 2 x 2 operand tiles. */
double rp_bf16_amx_probe_flops(long iters) {
  static uint16_t ops[2][16 * 32] __attribute__((aligned(64)));
  for (int i = 0; i < 16 * 32; i++) {
    ops[0][i] = 0x3280; /* small values: the sums stay finite */
    ops[1][i] = 0x3f00;
  }
  rp_bf16_amx_begin();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ops[0], 64);
  _tile_loadd(5, ops[1], 64);
  _tile_loadd(6, ops[1], 64);
  _tile_loadd(7, ops[0], 64);
  for (long it = 0; it < iters; it++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float sink[256] __attribute__((aligned(64)));
  _tile_stored(0, sink, 64);
  rp_bf16_amx_end();
  volatile float keep = sink[0];
  (void)keep;
  return 4.0 * 16 * 16 * 32 * 2 * (double)iters; /* 2 flops per multiply-add */
}

#else /* a compiler without AMX: the amx level does not exist in this build */

void rp_bf16_amx_begin(void) { rp_fatal("AMX tile code called on a build without AMX"); }
void rp_bf16_amx_end(void) { rp_fatal("AMX tile code called on a build without AMX"); }
void rp_bf16_amx_pack_a(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                        void *out) {
  rp_fatal("rp_bf16_amx_pack_a called on a build without AMX");
}
void rp_bf16_ukr_amx(long kp, const void *a, const void *b, float *c, long ldc, int mr,
                     int nr, const float *init, int load_c) {
  rp_fatal("rp_bf16_ukr_amx called on a build without AMX");
}
double rp_bf16_amx_probe_flops(long iters) { return 0.0; }

#endif
