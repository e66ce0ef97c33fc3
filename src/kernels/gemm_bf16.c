/* Blocked bf16 GEMM driver: packing, cache blocking, threads, and the public
 * matmul entry points of rp_bf16.h.
 *
 * Every product is C[M,Nc] (+)= A[M,K] B[K,Nc]:
 *   forward: C = out,     A = inp (N x IC),     B(k=i, j=o) = w[o][i]
 *   dinp:    C = dinp,    A = dout (N x OC),    B(k=o, j=i) = w[o][i]
 *   dweight: C = dweight, A(m=o, k=n) = dout[n][o], B(k=n, j=i) = inp[n][i]
 * B is packed whole, once per call (weights: once per optimizer step with
 * rp_bf16_wpack, or once per step's window in the pool's packed-weight cache of
 * rp_sgemm.h when one is attached), in 64-column panels; the threads then split
 * the rows of C in MR-row tiles and loop
 *   for each block of mc rows (A block, packed per thread)
 *     for each block of kc pairs
 *       for each 64-column panel (B micro-panel: kc pairs x 64, reused by the tiles)
 *         for each MR-row tile: micro-kernel
 * so one thread only ever writes its own rows and the result does not depend on
 * the thread count.
 *
 * Block sizes, for 48 KiB L1d and 2 MiB L2 per core (Sapphire Rapids), measured
 * with the model's shapes: the micro-kernel needs only 10 loads per 24 FMAs, and
 * L2 serves them fast enough, so the B micro-panel does not have to fit L1. What
 * costs is reloading the C tiles once per kc block: going from kc = 64 pairs
 * (32 KiB B micro-panel, L1) to 192 pairs (96 KiB, L2) raised the FMA kernel from
 * about 123 to 135 GFLOP/s on one core, with no further gain at 256 or 384.
 * With kc = 192 (fp32 slots, 8 bytes a pair) and mc = 120 the A block is 180 KiB
 * and a B micro-panel 96 KiB, together with the C block of 120 rows well inside
 * L2 also when the hyperthread sibling takes half of it. The bf16 kernel's slots
 * are half as big, so its kc = 256 pairs takes 64 KiB. */
#include <string.h>

#include "fused_internal.h"
#include "gemm_bf16_internal.h"
#include "kern_util.h"
#include "kern_ws.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_pool.h"
#include "wcache_internal.h"

const rp_bf16_kdesc rp_bf16_kd_avx512_fma = {.kernel = RP_BF16_KERNEL_AVX512_FMA,
                                             .fmt = RP_BF16_FMT_F32, .mr = RP_BF16_MR_FMA,
                                             .kc = 192, .mc = 120, .ukr = rp_bf16_ukr_avx512_fma,
                                             .pack_b32 = rp_bf16_pack_b32_f32};
/* AVX2: the same F32 panels; kc and mc as the AVX-512 FMA kernel's (the four
 * column quarters of a tile re-read its 9 KiB A panel from L1, and the 96 KiB B
 * micro-panel streams from L2 once a tile). kc = 128 and 256 pairs measured the
 * same as 192 (held to AVX2 on Sapphire Rapids, x86-64-v3 build, bench_bf16 2
 * 5: forward + backward 172-182 GFLOP/s on the default model's shapes for all
 * three). */
const rp_bf16_kdesc rp_bf16_kd_avx2_fma = {.kernel = RP_BF16_KERNEL_AVX2_FMA,
                                           .fmt = RP_BF16_FMT_F32, .mr = RP_BF16_MR_AVX2,
                                           .kc = 192, .mc = 120, .ukr = rp_bf16_ukr_avx2_fma};
const rp_bf16_kdesc rp_bf16_kd_avx512_bf16 = {.kernel = RP_BF16_KERNEL_AVX512_BF16,
                                              .fmt = RP_BF16_FMT_PAIRS, .mr = RP_BF16_MR_DP,
                                              .kc = 256, .mc = 120,
                                              .ukr = rp_bf16_ukr_avx512_bf16,
                                              .pack_a = rp_bf16_dp_pack_a, .a32 = 1,
                                              .pack_b32 = rp_bf16_pack_b32_pairs,
                                              .pack_b16k = rp_bf16_pack_b16_pairs};
/* AMX: a 32-row A panel of kc = 256 pairs is 32 KiB (L1), a B micro-panel 64 KiB
 * (L2), the A block of mc = 128 rows 128 KiB. */
const rp_bf16_kdesc rp_bf16_kd_amx = {.kernel = RP_BF16_KERNEL_AMX, .fmt = RP_BF16_FMT_PAIRS,
                                      .mr = RP_BF16_MR_AMX, .kc = RP_BF16_AMX_KC, .mc = 128,
                                      .ukr = rp_bf16_ukr_amx, .kalign = RP_BF16_PAIRS_KALIGN,
                                      .pack_a = rp_bf16_amx_pack_a, .begin = rp_bf16_amx_begin,
                                      .end = rp_bf16_amx_end, .a32 = 1,
                                      .pack_b32 = rp_bf16_pack_b32_pairs,
                                      .pack_b16k = rp_bf16_pack_b16_pairs};

#define NR RP_BF16_NR

static long kpairs(long K) { return (K + 1) / 2; }
static long round_up(long x, long a) { return (x + a - 1) / a * a; }
/* Pairs per B panel: PAIRS panels are padded for the AMX kernel's k steps. */
static long panel_pairs(rp_bf16_fmt fmt, long K) {
  return fmt == RP_BF16_FMT_PAIRS ? round_up(kpairs(K), RP_BF16_PAIRS_KALIGN) : kpairs(K);
}
static long npanels(long cols) { return (cols + NR - 1) / NR; }
static size_t panels_bytes(rp_bf16_fmt fmt, long cols, long K) {
  return (size_t)(npanels(cols) * panel_pairs(fmt, K) * NR * rp_bf16_slot_bytes(fmt));
}
static size_t abuf_bytes(const rp_bf16_kdesc *kd) {
  return (size_t)kd->mc * (size_t)kd->kc * (size_t)rp_bf16_slot_bytes(kd->fmt);
}

/* ---- shared workspace: B packs and per-thread A blocks, kept between calls */

static rp_kern_ws g_ws = RP_KERN_WS_INIT("bf16 gemm");

static char *ws_acquire(size_t bytes) { return rp_kern_ws_acquire(&g_ws, bytes); }
static void ws_release(void) { rp_kern_ws_release(&g_ws); }

void rp_bf16_workspace_release(void) { rp_kern_ws_free(&g_ws); }

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

/* ---- one GEMM over a thread's share of rows */

typedef struct {
  float *c;
  long ldc;
  int M, Nc, K;
  rp_bf16_src a;
  const char *bpack;  /* npanels(Nc) panels of kpairs(K) pairs */
  const float *init;  /* Nc floats or NULL: start values when !load_c */
  int load_c;
} gemm_prob;

/* Thread ith's rows of C: whole MR-row tiles. */
static void thread_rows(const gemm_prob *g, int MR, int ith, int nth, long *m0, long *m1) {
  long t0, t1;
  rp_split((g->M + MR - 1) / MR, ith, nth, &t0, &t1);
  *m0 = RP_MIN(t0 * MR, (long)g->M);
  *m1 = RP_MIN(t1 * MR, (long)g->M);
}

/* C is the layer's output (or weight gradient), cold when the tile starts:
 * the micro-kernel's first loads (accumulating) or its stores (write-allocate)
 * waited on memory with nothing to overlap. Prefetched for writing one tile
 * ahead, the lines arrive while the previous tile's k loop runs. */
static inline void c_prefetch(const float *c, long ldc, int rows, int cols) {
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j += 16) __builtin_prefetch(c + i * ldc + j, 1, 3);
}

static void gemm_rows(const gemm_prob *g, const rp_bf16_kdesc *kd, char *abuf, int ith,
                      int nth) {
  const int MR = kd->mr;
  const long kpt = round_up(kpairs(g->K), kd->kalign > 0 ? kd->kalign : 1);
  const long slot = rp_bf16_slot_bytes(kd->fmt);
  const long panel = panel_pairs(kd->fmt, g->K) * NR * slot, np = npanels(g->Nc);
  long m0, m1;
  thread_rows(g, MR, ith, nth, &m0, &m1);
  for (long ic = m0; ic < m1; ic += kd->mc) {
    const long mcb = RP_MIN((long)kd->mc, m1 - ic), ntile = (mcb + MR - 1) / MR;
    for (long pc = 0; pc < kpt; pc += kd->kc) {
      const long kcb = RP_MIN((long)kd->kc, kpt - pc), apanel = kcb * MR * slot;
      if (kd->pack_a) kd->pack_a(&g->a, (int)ic, (int)mcb, pc, kcb, abuf);
      else rp_bf16_pack_block(kd->fmt, &g->a, (int)ic, (int)mcb, MR, pc, kcb, abuf);
      for (long jr = 0; jr < np; jr++) {
        const char *bp = g->bpack + jr * panel + pc * NR * slot;
        const int nr = (int)RP_MIN((long)NR, g->Nc - jr * NR);
        const float *init = g->init ? g->init + jr * NR : NULL;
        for (long t = 0; t < ntile; t++) {
          const int mr = (int)RP_MIN((long)MR, mcb - t * MR);
          float *c = g->c + (ic + t * MR) * g->ldc + jr * NR;
          /* the next tile's C lines while this one computes (see c_prefetch) */
          if (t + 1 < ntile)
            c_prefetch(c + MR * g->ldc, g->ldc, (int)RP_MIN((long)MR, mcb - (t + 1) * MR), nr);
          else if (jr + 1 < np)
            c_prefetch(g->c + ic * g->ldc + (jr + 1) * NR, g->ldc, (int)RP_MIN((long)MR, mcb),
                       (int)RP_MIN((long)NR, g->Nc - (jr + 1) * NR));
          kd->ukr(kcb, abuf + t * apanel, bp, c, g->ldc, mr, nr, init, g->load_c || pc > 0);
        }
      }
    }
  }
}

/* K = 0: the sum is empty; C keeps its value or becomes init / 0. */
static void gemm_empty_k(const gemm_prob *g, int ith, int nth) {
  if (g->load_c) return;
  long lo, hi;
  rp_split(g->M, ith, nth, &lo, &hi);
  for (long m = lo; m < hi; m++)
    for (long j = 0; j < g->Nc; j++) g->c[m * g->ldc + j] = g->init ? g->init[j] : 0.0f;
}

static void gemm_part(const gemm_prob *g, const rp_bf16_kdesc *kd, char *abuf, int ith,
                      int nth) {
  if (g->M <= 0 || g->Nc <= 0) return;
  if (g->K <= 0) gemm_empty_k(g, ith, nth);
  else gemm_rows(g, kd, abuf, ith, nth);
}

/* ---- packing B panels in parallel (one or two matrices per job) */

typedef struct {
  rp_bf16_src src;
  int cols;
  void *out;
} bpack_job;

typedef struct {
  rp_bf16_fmt fmt;
  rp_bf16_pack_a_fn b32; /* the kernel's packer of fp32 row-pair sources, or NULL */
  rp_bf16_pack_a_fn b16k; /* its packer of k-contiguous bf16 sources, or NULL */
  bpack_job job[2];
  int njobs;
} bpack_ctx;

static void bpack_task(void *vctx, int ith, int nth) {
  const bpack_ctx *c = vctx;
  long n0 = c->njobs > 0 ? npanels(c->job[0].cols) : 0;
  long total = n0 + (c->njobs > 1 ? npanels(c->job[1].cols) : 0), lo, hi;
  rp_split(total, ith, nth, &lo, &hi);
  for (long q = lo; q < hi;) {
    const bpack_job *j = &c->job[q < n0 ? 0 : 1];
    const long jr = q < n0 ? q : q - n0, end = q < n0 ? RP_MIN(hi, n0) : hi - n0;
    const long kp = panel_pairs(c->fmt, j->src.K);
    /* row-pair sources a few panels at a time, each pair of source rows read
     * across them in one pass (rp_bf16_pack_block) rather than once per panel */
    const long np = j->src.kcontig ? 1 : RP_MIN(end - jr, (long)(RP_BF16_BLOCK_MAX / NR));
    char *out = (char *)j->out + jr * kp * NR * rp_bf16_slot_bytes(c->fmt);
    if (j->src.src32 && c->b32) c->b32(&j->src, (int)(jr * NR), (int)(np * NR), 0, kp, out);
    else if (j->src.kcontig && !j->src.src32 && c->b16k)
      c->b16k(&j->src, (int)(jr * NR), (int)(np * NR), 0, kp, out);
    else rp_bf16_pack_block(c->fmt, &j->src, (int)(jr * NR), (int)(np * NR), NR, 0, kp, out);
    q += np;
  }
}

static void bpack_run(bpack_ctx *c, rp_pool *pool) {
  long work = 0;
  for (int i = 0; i < c->njobs; i++) work += (long)c->job[i].cols * c->job[i].src.K;
  if (work > 0) rp_kern_run(pool, bpack_task, c, work);
}

/* ---- the GEMM job: up to two products and the bias reduction */

typedef struct {
  const rp_bf16_kdesc *kd;
  gemm_prob prob[2];
  int nprob;
  char *abufs;       /* one A block per thread */
  size_t abuf_stride;
  float *dbias;      /* dbias[OC] += column sums of dout (or NULL) */
  const uint16_t *dout;
  const float *dout32; /* or of this fp32 dout, in rp_matmul_backward's order */
  int N, OC;
  rp_sgemm_rows_fn epi; /* forward: on the thread's rows of C once they are done */
  void *epi_ctx;
} gemm_ctx;

static void gemm_task(void *vctx, int ith, int nth) {
  const gemm_ctx *c = vctx;
  char *abuf = c->abufs + (size_t)ith * c->abuf_stride;
  if (c->kd->begin) c->kd->begin();
  for (int i = 0; i < c->nprob; i++) gemm_part(&c->prob[i], c->kd, abuf, ith, nth);
  if (c->kd->end) c->kd->end();
  if (c->epi) {
    long m0, m1;
    thread_rows(&c->prob[0], c->kd->mr, ith, nth, &m0, &m1);
    if (m1 > m0) c->epi(c->epi_ctx, m0, m1, ith);
  }
  if (c->dbias) {
    long lo, hi;
    rp_kern_split_cols(c->OC, ith, nth, &lo, &hi);
    if (c->dout32) {
      rp_matmul_dbias_cols(c->dbias, c->dout32, lo, hi, c->N, c->OC);
      return;
    }
    for (long n = 0; n < c->N; n++) {
      const uint16_t *row = c->dout + n * c->OC;
      for (long o = lo; o < hi; o++) c->dbias[o] += rp_bf16_to_f32(row[o]);
    }
  }
}

static int pool_nth(rp_pool *pool) { return pool ? rp_pool_size(pool) : 1; }

static void gemm_run(gemm_ctx *c, rp_pool *pool, long work) {
  rp_kern_run(pool, gemm_task, c, work);
}

/* ---- public entry points */

static rp_bf16_src src_of(const uint16_t *p, long ld, int kcontig, int rows, int K) {
  rp_bf16_src s = {p, ld, kcontig, rows, K, NULL};
  return s;
}

/* s reading fp32 elements from p32 instead, when p32 is given. */
static rp_bf16_src src32_or(rp_bf16_src s, const float *p32) {
  if (p32) {
    s.src = NULL;
    s.src32 = p32;
  }
  return s;
}

/* inp32: the A operand in fp32 (only for a kernel with a32), else inp. */
static void forward_with(float *out, const uint16_t *inp, const float *inp32,
                         const char *bpack, char *ws, const rp_bf16_kdesc *kd,
                         const float *bias, int N, int IC, int OC, rp_pool *pool,
                         rp_sgemm_rows_fn epi, void *epi_ctx) {
  gemm_ctx c = {.kd = kd, .nprob = 1, .abufs = ws, .abuf_stride = align64(abuf_bytes(kd)),
                .epi = epi, .epi_ctx = epi_ctx};
  c.prob[0] = (gemm_prob){out, OC, N, OC, IC, src32_or(src_of(inp, IC, 1, N, IC), inp32),
                          bpack, bias, 0};
  gemm_run(&c, pool, (long)N * OC * (IC + 1));
}

/* An fp32 operand of n elements for kernel kd: kept as it is when kd packs
 * fp32 itself (*x32 stays), else rounded into tmp (workspace) and *x32 cleared. */
static const uint16_t *round_unless_a32(const rp_bf16_kdesc *kd, const float **x32, long n,
                                        uint16_t *tmp, rp_pool *pool) {
  if (!*x32 || kd->a32) return NULL;
  rp_bf16_from_f32_array(tmp, *x32, n, pool);
  *x32 = NULL;
  return tmp;
}

static size_t round_bytes(const rp_bf16_kdesc *kd, const float *x32, long n) {
  return x32 && !kd->a32 ? align64((size_t)n * sizeof(uint16_t)) : 0;
}

/* The weight's pack for this layout kept in the pool's packed-weight cache
 * (rp_sgemm.h), or NULL: no cache attached, or the pack over its size limit. */
static rp_sgemm_wentry *kept_pack(rp_pool *pool, const rp_bf16_kdesc *kd, const uint16_t *w,
                                  int layout, int K, int cols) {
  /* the portable kernel has a descriptor per format: the key holds both */
  return rp_sgemm_wcache_entry(rp_pool_wcache(pool), w, layout, K, cols,
                               2 * (int)kd->kernel + (int)kd->fmt,
                               panels_bytes(kd->fmt, cols, K));
}

static void forward_unpacked(float *out, const uint16_t *inp, const float *inp32,
                             const uint16_t *w, const float *bias, int N, int IC, int OC,
                             rp_pool *pool, rp_sgemm_rows_fn epi, void *epi_ctx) {
  const rp_bf16_kdesc *kd = rp_bf16_kdesc_active();
  rp_sgemm_wentry *kept = kept_pack(pool, kd, w, RP_WPACK_BF16_FORWARD, IC, OC);
  size_t bbytes = kept ? 0 : align64(panels_bytes(kd->fmt, OC, IC));
  size_t abytes = align64(abuf_bytes(kd)) * (size_t)pool_nth(pool);
  size_t tbytes = round_bytes(kd, inp32, (long)N * IC);
  char *ws = ws_acquire(bbytes + abytes + tbytes);
  char *bpack = kept ? kept->buf : ws;
  const uint16_t *r = round_unless_a32(kd, &inp32, (long)N * IC,
                                       (uint16_t *)(ws + bbytes + abytes), pool);
  if (!kept || !kept->valid) {
    bpack_ctx bc = {.fmt = kd->fmt, .b16k = kd->pack_b16k, .njobs = 1};
    bc.job[0] = (bpack_job){src_of(w, IC, 1, OC, IC), OC, bpack};
    bpack_run(&bc, pool);
  }
  if (kept) kept->valid = 1;
  forward_with(out, r ? r : inp, inp32, bpack, ws + bbytes, kd, bias, N, IC, OC, pool, epi,
               epi_ctx);
  ws_release();
}

void rp_matmul_bf16_forward(float *out, const uint16_t *inp, const uint16_t *w,
                            const float *bias, int N, int IC, int OC, rp_pool *pool) {
  forward_unpacked(out, inp, NULL, w, bias, N, IC, OC, pool, NULL, NULL);
}

void rp_matmul_bf16_forward_f32in(float *out, const float *inp, const uint16_t *w,
                                  const float *bias, int N, int IC, int OC, rp_pool *pool) {
  forward_unpacked(out, NULL, inp, w, bias, N, IC, OC, pool, NULL, NULL);
}

void rp_matmul_bf16_forward_f32in_epi(float *out, const float *inp, const uint16_t *w,
                                      const float *bias, int N, int IC, int OC, rp_pool *pool,
                                      rp_sgemm_rows_fn epi, void *epi_ctx) {
  forward_unpacked(out, NULL, inp, w, bias, N, IC, OC, pool, epi, epi_ctx);
}

/* dinp_set: dinp is overwritten (the product starts from +0, as after a memset,
 * without the pass over dinp); else it accumulates. */
/* dbias sums dout32 when given (the fp32 output gradient, whatever the kernel
 * packs), else dout. */
static void backward_with(float *dinp, float *dweight, float *dbias, const uint16_t *dout,
                          const float *dout32, const char *bdinp, const char *bdw,
                          char *abufs, const rp_bf16_kdesc *kd, int N, int IC, int OC,
                          int dinp_set, const float *dbias_src, rp_pool *pool) {
  gemm_ctx c = {.kd = kd, .abufs = abufs, .abuf_stride = align64(abuf_bytes(kd)),
                .dbias = dbias, .dout = dout, .dout32 = dbias_src, .N = N, .OC = OC};
  if (dinp)
    c.prob[c.nprob++] =
        (gemm_prob){dinp, IC, N, IC, OC, src32_or(src_of(dout, OC, 1, N, OC), dout32), bdinp,
                    NULL, !dinp_set};
  if (dweight)
    c.prob[c.nprob++] = (gemm_prob){dweight, IC, OC, IC, N,
                                    src32_or(src_of(dout, OC, 0, OC, N), dout32), bdw, NULL, 1};
  if (c.nprob == 0 && !dbias) return;
  gemm_run(&c, pool, (long)N * OC * (IC * c.nprob + 1));
}

/* dout32: the output gradient in fp32 (then dout is unused and dbias sums it in
 * fp32); inp32: the layer input in fp32, rounded while dweight's B is packed
 * (then inp is unused). */
static void backward_unpacked(float *dinp, float *dweight, float *dbias,
                              const uint16_t *dout, const float *dout32, const uint16_t *inp,
                              const float *inp32, const uint16_t *w, int N, int IC, int OC,
                              int dinp_set, rp_pool *pool) {
  const rp_bf16_kdesc *kd = rp_bf16_kdesc_active();
  const float *dbias_src = dout32;
  rp_sgemm_wentry *kept = dinp ? kept_pack(pool, kd, w, RP_WPACK_BF16_DINP, OC, IC) : NULL;
  size_t b1 = dinp && !kept ? align64(panels_bytes(kd->fmt, IC, OC)) : 0;
  size_t b2 = dweight ? align64(panels_bytes(kd->fmt, IC, N)) : 0;
  size_t abytes = align64(abuf_bytes(kd)) * (size_t)pool_nth(pool);
  size_t tbytes = round_bytes(kd, dout32, (long)N * OC);
  char *ws = ws_acquire(b1 + b2 + abytes + tbytes);
  char *wpack = kept ? kept->buf : ws;
  const uint16_t *r = round_unless_a32(kd, &dout32, (long)N * OC,
                                       (uint16_t *)(ws + b1 + b2 + abytes), pool);
  if (r) dout = r;
  bpack_ctx bc = {.fmt = kd->fmt, .b32 = kd->pack_b32, .b16k = kd->pack_b16k};
  if (dinp && (!kept || !kept->valid))
    bc.job[bc.njobs++] = (bpack_job){src_of(w, IC, 0, IC, OC), IC, wpack};
  if (dweight)
    bc.job[bc.njobs++] = (bpack_job){src32_or(src_of(inp, IC, 0, IC, N), inp32), IC, ws + b1};
  bpack_run(&bc, pool);
  if (kept) kept->valid = 1;
  backward_with(dinp, dweight, dbias, dout, dout32, wpack, ws + b1, ws + b1 + b2, kd, N, IC,
                OC, dinp_set, dbias_src, pool);
  ws_release();
}

void rp_matmul_bf16_backward(float *dinp, float *dweight, float *dbias,
                             const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                             int N, int IC, int OC, rp_pool *pool) {
  backward_unpacked(dinp, dweight, dbias, dout, NULL, inp, NULL, w, N, IC, OC, 0, pool);
}

void rp_matmul_bf16_backward_set(float *dinp, float *dweight, float *dbias,
                                 const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                                 int N, int IC, int OC, rp_pool *pool) {
  backward_unpacked(dinp, dweight, dbias, dout, NULL, inp, NULL, w, N, IC, OC, 1, pool);
}

void rp_matmul_bf16_backward_f32dout(float *dinp, float *dweight, const float *dout,
                                     const uint16_t *inp, const uint16_t *w, int N, int IC,
                                     int OC, int dinp_set, rp_pool *pool) {
  backward_unpacked(dinp, dweight, NULL, NULL, dout, inp, NULL, w, N, IC, OC, dinp_set, pool);
}

void rp_matmul_bf16_backward_f32(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const uint16_t *w, int N, int IC, int OC,
                                 int dinp_set, rp_pool *pool) {
  backward_unpacked(dinp, dweight, dbias, NULL, dout, NULL, inp, w, N, IC, OC, dinp_set, pool);
}

/* ---- pre-packed weights */

rp_status rp_bf16_wpack_init(rp_bf16_wpack *wp, int IC, int OC) {
  memset(wp, 0, sizeof *wp);
  if (IC < 1 || OC < 1)
    return rp_err(RP_EINVAL, "bf16 weight pack of IC=%d, OC=%d: both must be >= 1", IC, OC);
  wp->IC = IC;
  wp->OC = OC;
  wp->fmt = rp_bf16_kdesc_active()->fmt;
  size_t f = align64(panels_bytes(wp->fmt, OC, IC)), b = panels_bytes(wp->fmt, IC, OC);
  char *mem = rp_alloc(f + b, RP_MEM_PARAMS);
  if (!mem) return RP_ENOMEM;
  wp->fwd = mem;
  wp->bwd = mem + f;
  wp->bytes = f + b;
  return RP_OK;
}

void rp_bf16_wpack_update(rp_bf16_wpack *wp, const uint16_t *w, rp_pool *pool) {
  bpack_ctx bc = {.fmt = wp->fmt, .b16k = rp_bf16_kdesc_for_fmt(wp->fmt)->pack_b16k,
                  .njobs = 2};
  bc.job[0] = (bpack_job){src_of(w, wp->IC, 1, wp->OC, wp->IC), wp->OC, wp->fwd};
  bc.job[1] = (bpack_job){src_of(w, wp->IC, 0, wp->IC, wp->OC), wp->IC, wp->bwd};
  bpack_run(&bc, pool);
}

void rp_bf16_wpack_free(rp_bf16_wpack *wp) {
  rp_free(wp->fwd);
  memset(wp, 0, sizeof *wp);
}

void rp_matmul_bf16_forward_packed(float *out, const uint16_t *inp, const rp_bf16_wpack *wp,
                                   const float *bias, int N, rp_pool *pool) {
  const rp_bf16_kdesc *kd = rp_bf16_kdesc_for_fmt(wp->fmt);
  char *ws = ws_acquire(align64(abuf_bytes(kd)) * (size_t)pool_nth(pool));
  forward_with(out, inp, NULL, wp->fwd, ws, kd, bias, N, wp->IC, wp->OC, pool, NULL, NULL);
  ws_release();
}

void rp_matmul_bf16_backward_packed(float *dinp, float *dweight, float *dbias,
                                    const uint16_t *dout, const uint16_t *inp,
                                    const rp_bf16_wpack *wp, int N, rp_pool *pool) {
  const rp_bf16_kdesc *kd = rp_bf16_kdesc_for_fmt(wp->fmt);
  const int IC = wp->IC, OC = wp->OC;
  size_t b2 = dweight ? align64(panels_bytes(kd->fmt, IC, N)) : 0;
  size_t abytes = align64(abuf_bytes(kd)) * (size_t)pool_nth(pool);
  char *ws = ws_acquire(b2 + abytes);
  bpack_ctx bc = {.fmt = kd->fmt};
  if (dweight) bc.job[bc.njobs++] = (bpack_job){src_of(inp, IC, 0, IC, N), IC, ws};
  bpack_run(&bc, pool);
  backward_with(dinp, dweight, dbias, dout, NULL, wp->bwd, ws, ws + b2, kd, N, IC, OC, 0, NULL,
                pool);
  ws_release();
}
