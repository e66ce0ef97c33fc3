/* Plain-C parts of the bf16 GEMM: the panel packer, the portable micro-kernels
 * (any CPU; gcc vectorizes their column loops for the build's target) and the
 * reference loops. All of them follow the summation order of rp_bf16.h, so their
 * results equal the AVX-512 kernels' bit for bit. */
#include <string.h>

#include "gemm_bf16_internal.h"

static inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- packing */

static inline void put_pair(rp_bf16_fmt fmt, void *out, long p, int w, int width, uint32_t lo,
                            uint32_t hi) {
  if (fmt == RP_BF16_FMT_PAIRS) {
    ((uint32_t *)out)[p * width + w] = hi << 16 | lo;
  } else {
    float *o = out;
    o[2 * p * width + w] = bits_f32(hi << 16); /* element 2p+1 is added first */
    o[(2 * p + 1) * width + w] = bits_f32(lo << 16);
  }
}

/* Rows whose k runs contiguously (a weight row in forward, an activation row):
 * a transpose. Interior pairs are one 32-bit load; the pairs go in blocks of 16
 * so that the block's part of the panel (16 pairs x width slots) stays in L1
 * while every row writes into it. Each row's next panel row is prefetched at
 * the same pairs (a block's 64 bytes of it), as the AVX-512 A packer does:
 * under RINGPIPE_ISA=avx2 (x86-64-v3 build, avx2-fma), default model, 4
 * alternating pairs of bf16 step profiles, the forward matmuls' quiet time
 * 137.5-140.3 -> 133.6-135.5 ms a step. */
#define PACK_PB 16

static void pack_kcontig(rp_bf16_fmt fmt, const rp_bf16_src *s, int r0, int width, int rv,
                         long p0, long kp, void *out) {
  long kfull = (s->K / 2 - p0) < kp ? s->K / 2 - p0 : kp; /* pairs with both halves */
  if (kfull < 0) kfull = 0;
  const uint16_t *base = s->src + (long)r0 * s->ld + 2 * p0;
  for (long pb = 0; pb < kfull; pb += PACK_PB) {
    const long pe = pb + PACK_PB < kfull ? pb + PACK_PB : kfull;
    for (int w = 0; w < rv; w++) {
      const uint16_t *row = base + (long)w * s->ld;
      if (r0 + width + w < s->rows) /* the next panel's row, these pairs */
        __builtin_prefetch(row + (long)width * s->ld + 2 * pb);
      if (fmt == RP_BF16_FMT_PAIRS) {
        uint32_t *o = out;
        for (long p = pb; p < pe; p++) memcpy(o + p * width + w, row + 2 * p, 4);
      } else {
        float *o = out;
        for (long p = pb; p < pe; p++) {
          uint32_t u;
          memcpy(&u, row + 2 * p, 4);
          o[2 * p * width + w] = bits_f32(u & 0xFFFF0000u);
          o[(2 * p + 1) * width + w] = bits_f32(u << 16);
        }
      }
    }
  }
  for (int w = 0; w < width; w++) {
    const uint16_t *row = base + (long)w * s->ld;
    for (long p = w < rv ? kfull : 0; p < kp; p++) { /* K tail, padding rows */
      long k = 2 * (p0 + p);
      uint32_t lo = w < rv && k < s->K ? row[2 * p] : 0;
      uint32_t hi = w < rv && k + 1 < s->K ? row[2 * p + 1] : 0;
      put_pair(fmt, out, p, w, width, lo, hi);
    }
  }
}

/* Row k's segment [r0, r0 + n) of a row-pair source as bf16, or NULL past K: in
 * place, or an fp32 source's rounded (RNE, as rp_bf16_from_f32_array) into tmp,
 * so that dweight's activations need no conversion pass of their own. The
 * segments PF_PAIRS pairs ahead are prefetched, as the AVX-512 packers do: the
 * rows a pair apart are far apart in memory, and the hardware prefetcher did
 * not fetch their first lines ahead. Under RINGPIPE_ISA=avx2 (x86-64-v3 build,
 * the avx2-fma kernel, whose dweight operands take these packers), default
 * model, 3 alternating pairs of bf16 step profiles: the backward matmuls'
 * quiet time 258-260 -> 243-245 ms a step. */
#define PF_PAIRS 4
static const uint16_t *rowpair_seg(const rp_bf16_src *s, long k, int r0, int n,
                                   uint16_t *restrict tmp) {
  if (k >= s->K) return NULL;
  if (k + 2 * PF_PAIRS < s->K) { /* the same segment PF_PAIRS pairs ahead */
    const char *f = s->src32 ? (const char *)(s->src32 + (k + 2 * PF_PAIRS) * s->ld + r0)
                             : (const char *)(s->src + (k + 2 * PF_PAIRS) * s->ld + r0);
    const long bytes = (long)n * (s->src32 ? 4 : 2);
    for (long b = 0; b < bytes; b += 64) __builtin_prefetch(f + b);
  }
  if (!s->src32) return s->src + k * s->ld + r0;
  const uint32_t *restrict x = (const uint32_t *)(const void *)(s->src32 + k * s->ld + r0);
  for (int r = 0; r < n; r++) tmp[r] = rp_bf16_rne_bits(x[r]);
  return tmp;
}

/* Operands whose pairs come from two rows k, k+1 (weights in dinp, activations
 * and dout in dweight): interleave two contiguous row segments. */
static void pack_rowpair(rp_bf16_fmt fmt, const rp_bf16_src *s, int r0, int width, int rv,
                         long p0, long kp, void *out) {
  uint16_t tlo[RP_BF16_BLOCK_MAX], thi[RP_BF16_BLOCK_MAX];
  RP_CHECK(!s->src32 || rv <= RP_BF16_BLOCK_MAX);
  for (long p = 0; p < kp; p++) {
    long k = 2 * (p0 + p);
    const uint16_t *lo = rowpair_seg(s, k, r0, rv, tlo);
    const uint16_t *hi = rowpair_seg(s, k + 1, r0, rv, thi);
    int w = 0;
    if (fmt == RP_BF16_FMT_PAIRS) {
      uint32_t *restrict o = (uint32_t *)out + p * width;
      if (lo && hi)
        for (; w < rv; w++) o[w] = (uint32_t)hi[w] << 16 | lo[w];
      else if (lo)
        for (; w < rv; w++) o[w] = lo[w];
      for (; w < width; w++) o[w] = 0;
    } else {
      float *restrict oh = (float *)out + 2 * p * width, *restrict ol = oh + width;
      for (w = 0; w < rv; w++) {
        oh[w] = hi ? bits_f32((uint32_t)hi[w] << 16) : 0.0f;
        ol[w] = lo ? bits_f32((uint32_t)lo[w] << 16) : 0.0f;
      }
      for (; w < width; w++) oh[w] = ol[w] = 0.0f;
    }
  }
}

void rp_bf16_pack_panel(rp_bf16_fmt fmt, const rp_bf16_src *s, int r0, int width, long p0,
                        long kp, void *out) {
  int rv = s->rows - r0;
  rv = rv < 0 ? 0 : rv > width ? width : rv;
  /* fp32 sources: row pairs here, k-contiguous rows only in the a32 kernels' packers */
  RP_CHECK(!s->src32 || !s->kcontig);
  if (s->kcontig) pack_kcontig(fmt, s, r0, width, rv, p0, kp, out);
  else pack_rowpair(fmt, s, r0, width, rv, p0, kp, out);
}

#define BLOCK_MAX RP_BF16_BLOCK_MAX

/* Inlined with a constant width, so that the copies into the panels are a few
 * moves rather than memcpy calls. */
static inline __attribute__((always_inline)) void
rowpair_block(rp_bf16_fmt fmt, const rp_bf16_src *s, int r0, int nv, int npan, int width,
              long p0, long kp, long pbytes, void *out) {
  static const uint16_t zeros[BLOCK_MAX] = {0};
  uint32_t bh[BLOCK_MAX], bl[BLOCK_MAX]; /* fp32 bits (F32) or pairs (PAIRS in bh) */
  uint16_t tlo[BLOCK_MAX], thi[BLOCK_MAX];
  for (int r = nv; r < npan * width; r++) bh[r] = bl[r] = 0;
  for (long p = 0; p < kp; p++) {
    long k = 2 * (p0 + p);
    const uint16_t *restrict lo = rowpair_seg(s, k, r0, nv, tlo);
    const uint16_t *restrict hi = rowpair_seg(s, k + 1, r0, nv, thi);
    if (!lo) lo = zeros;
    if (!hi) hi = zeros;
    if (fmt == RP_BF16_FMT_PAIRS) {
      for (int r = 0; r < nv; r++) bh[r] = (uint32_t)hi[r] << 16 | lo[r];
      for (int t = 0; t < npan; t++)
        memcpy((char *)out + t * pbytes + p * width * 4, bh + t * width, (size_t)width * 4);
    } else {
      for (int r = 0; r < nv; r++) {
        bh[r] = (uint32_t)hi[r] << 16;
        bl[r] = (uint32_t)lo[r] << 16;
      }
      for (int t = 0; t < npan; t++) {
        char *o = (char *)out + t * pbytes + 2 * p * width * 4;
        memcpy(o, bh + t * width, (size_t)width * 4);
        memcpy(o + width * 4, bl + t * width, (size_t)width * 4);
      }
    }
  }
}

/* A block for the micro-kernels: ceil(nrows / width) panels of width rows, one
 * after another. Row-pair sources (dout read down its columns in dweight) go pair
 * by pair across the whole block: the two source row segments are widened or
 * interleaved in one contiguous (vectorized) pass into a small buffer, then cut
 * into the panels, instead of being read once per panel with a branch per
 * element. */
void rp_bf16_pack_block(rp_bf16_fmt fmt, const rp_bf16_src *s, int r0, int nrows, int width,
                        long p0, long kp, void *out) {
  const int npan = (nrows + width - 1) / width, len = npan * width;
  const long pbytes = kp * width * rp_bf16_slot_bytes(fmt);
  if (s->kcontig || npan == 1 || len > BLOCK_MAX) {
    for (int t = 0; t < npan; t++)
      rp_bf16_pack_panel(fmt, s, r0 + t * width, width, p0, kp, (char *)out + t * pbytes);
    return;
  }
  int nv = s->rows - r0; /* valid rows of the block */
  nv = nv < 0 ? 0 : nv > nrows ? nrows : nv;
  if (width == 6) rowpair_block(fmt, s, r0, nv, npan, 6, p0, kp, pbytes, out);
  else if (width == 4) rowpair_block(fmt, s, r0, nv, npan, 4, p0, kp, pbytes, out);
  else rowpair_block(fmt, s, r0, nv, npan, width, p0, kp, pbytes, out);
}

/* ---- portable micro-kernels: MR x 64 tile in an array the compiler keeps in
 * vector registers or L1 */

#define MRP 4

static void tile_start(float acc[MRP][RP_BF16_NR], const float *c, long ldc, int mr, int nr,
                       const float *init, int load_c) {
  for (int m = 0; m < MRP; m++)
    for (int j = 0; j < RP_BF16_NR; j++)
      acc[m][j] = j >= nr ? 0.0f
                  : load_c ? (m < mr ? c[m * ldc + j] : 0.0f)
                  : init   ? init[j]
                           : 0.0f;
}

static void tile_store(float acc[MRP][RP_BF16_NR], float *c, long ldc, int mr, int nr) {
  for (int m = 0; m < mr; m++)
    for (int j = 0; j < nr; j++) c[m * ldc + j] = acc[m][j];
}

static void ukr_portable_f32(long kp, const void *a_, const void *b_, float *c, long ldc,
                             int mr, int nr, const float *init, int load_c) {
  const float *a = a_, *b = b_;
  float acc[MRP][RP_BF16_NR];
  tile_start(acc, c, ldc, mr, nr, init, load_c);
  for (long s = 0; s < 2 * kp; s++) {
    const float *restrict bs = b + s * RP_BF16_NR;
    for (int m = 0; m < MRP; m++) {
      float av = a[s * MRP + m];
      for (int j = 0; j < RP_BF16_NR; j++) acc[m][j] += av * bs[j];
    }
  }
  tile_store(acc, c, ldc, mr, nr);
}

static void ukr_portable_pairs(long kp, const void *a_, const void *b_, float *c, long ldc,
                               int mr, int nr, const float *init, int load_c) {
  const uint32_t *a = a_, *b = b_;
  float acc[MRP][RP_BF16_NR];
  tile_start(acc, c, ldc, mr, nr, init, load_c);
  for (long p = 0; p < kp; p++) {
    const uint32_t *restrict bp = b + p * RP_BF16_NR;
    for (int m = 0; m < MRP; m++) {
      uint32_t aw = a[p * MRP + m];
      float ahi = bits_f32(aw & 0xFFFF0000u), alo = bits_f32(aw << 16);
      for (int j = 0; j < RP_BF16_NR; j++) {
        acc[m][j] += ahi * bits_f32(bp[j] & 0xFFFF0000u);
        acc[m][j] += alo * bits_f32(bp[j] << 16);
      }
    }
  }
  tile_store(acc, c, ldc, mr, nr);
}

const rp_bf16_kdesc rp_bf16_kd_portable_f32 = {.kernel = RP_BF16_KERNEL_PORTABLE,
                                               .fmt = RP_BF16_FMT_F32, .mr = MRP, .kc = 64,
                                               .mc = 64, .ukr = ukr_portable_f32};
const rp_bf16_kdesc rp_bf16_kd_portable_pairs = {.kernel = RP_BF16_KERNEL_PORTABLE,
                                                 .fmt = RP_BF16_FMT_PAIRS, .mr = MRP,
                                                 .kc = 128, .mc = 64, .ukr = ukr_portable_pairs};

/* ---- reference loops */

typedef float (*dot_fn)(float acc, const uint16_t *x, long xs, const uint16_t *y, long ys,
                        long K);

/* acc walks k in pairs, element 2p+1 first (a +0 product past an odd K). */
static float dot_pairs(float acc, const uint16_t *x, long xs, const uint16_t *y, long ys,
                       long K) {
  for (long k = 0; k < K; k += 2) {
    float hi = k + 1 < K ? rp_bf16_to_f32(x[(k + 1) * xs]) * rp_bf16_to_f32(y[(k + 1) * ys])
                         : 0.0f;
    acc += hi;
    acc += rp_bf16_to_f32(x[k * xs]) * rp_bf16_to_f32(y[k * ys]);
  }
  return acc;
}

/* The AMX kernel's order (gemm_bf16_amx.c): per block of RP_BF16_AMX_KC pairs
 * from k = 0, a sum from +0 of tdpbf16ps steps, each adding to it the sum of
 * two chains from +0 over 16 pairs (the even elements' products and the odd
 * ones'); the block's sum is then added to acc. */
static float dot_amx(float acc, const uint16_t *x, long xs, const uint16_t *y, long ys,
                     long K) {
  const long step = 2 * RP_BF16_PAIRS_KALIGN, block = 2 * RP_BF16_AMX_KC;
  for (long k0 = 0; k0 < K; k0 += block) {
    float sum = 0.0f;
    for (long k1 = k0; k1 < k0 + block && k1 < K; k1 += step) {
      float even = 0.0f, odd = 0.0f;
      for (long k = k1; k < k1 + step && k < K; k += 2) {
        even += rp_bf16_to_f32(x[k * xs]) * rp_bf16_to_f32(y[k * ys]);
        if (k + 1 < K) odd += rp_bf16_to_f32(x[(k + 1) * xs]) * rp_bf16_to_f32(y[(k + 1) * ys]);
      }
      sum += even + odd;
    }
    acc += sum;
  }
  return acc;
}

static void forward_ref(dot_fn dot, float *out, const uint16_t *inp, const uint16_t *w,
                        const float *bias, int N, int IC, int OC) {
  for (long n = 0; n < N; n++)
    for (long o = 0; o < OC; o++)
      out[n * OC + o] = dot(bias ? bias[o] : 0.0f, inp + n * IC, 1, w + o * IC, 1, IC);
}

/* dbias is a plain sum of dout rows in every kernel. */
static void backward_ref(dot_fn dot, float *dinp, float *dweight, float *dbias,
                         const uint16_t *dout, const uint16_t *inp, const uint16_t *w, int N,
                         int IC, int OC) {
  if (dinp)
    for (long n = 0; n < N; n++)
      for (long i = 0; i < IC; i++)
        dinp[n * IC + i] = dot(dinp[n * IC + i], dout + n * OC, 1, w + i, IC, OC);
  if (dweight)
    for (long o = 0; o < OC; o++)
      for (long i = 0; i < IC; i++)
        dweight[o * IC + i] = dot(dweight[o * IC + i], dout + o, OC, inp + i, IC, N);
  if (dbias)
    for (long o = 0; o < OC; o++) {
      float acc = dbias[o];
      for (long n = 0; n < N; n++) acc += rp_bf16_to_f32(dout[n * OC + o]);
      dbias[o] = acc;
    }
}

static dot_fn dot_of(rp_bf16_kernel k) { return k == RP_BF16_KERNEL_AMX ? dot_amx : dot_pairs; }

void rp_matmul_bf16_forward_ref_of(rp_bf16_kernel k, float *out, const uint16_t *inp,
                                   const uint16_t *w, const float *bias, int N, int IC, int OC) {
  forward_ref(dot_of(k), out, inp, w, bias, N, IC, OC);
}

void rp_matmul_bf16_backward_ref_of(rp_bf16_kernel k, float *dinp, float *dweight,
                                    float *dbias, const uint16_t *dout, const uint16_t *inp,
                                    const uint16_t *w, int N, int IC, int OC) {
  backward_ref(dot_of(k), dinp, dweight, dbias, dout, inp, w, N, IC, OC);
}

void rp_matmul_bf16_forward_ref(float *out, const uint16_t *inp, const uint16_t *w,
                                const float *bias, int N, int IC, int OC) {
  forward_ref(dot_pairs, out, inp, w, bias, N, IC, OC);
}

void rp_matmul_bf16_backward_ref(float *dinp, float *dweight, float *dbias,
                                 const uint16_t *dout, const uint16_t *inp,
                                 const uint16_t *w, int N, int IC, int OC) {
  backward_ref(dot_pairs, dinp, dweight, dbias, dout, inp, w, N, IC, OC);
}
