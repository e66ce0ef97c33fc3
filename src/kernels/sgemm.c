/* The fp32 GEMM's entry points (rp_sgemm.h): which operand each call packs
 * whole and which the threads pack block by block, how the threads split C,
 * and the blocks by cache size. The loops and the threads' work sharing are in
 * sgemm_driver.c; the micro-kernels in sgemm_avx512.c, sgemm_avx2.c and (plain
 * C, the driver's test double on any CPU) below.
 *
 * Every product is C[M,Nc] (+)= A[M,K] B[K,Nc]:
 *   forward: C = out,     A = inp (N x IC),     B(k=i, j=o) = w[o][i]
 *   dinp:    C = dinp,    A = dout (N x OC),    B(k=o, j=i) = w[o][i]
 *   dweight: C = dweight, A(m=o, k=n) = dout[n][o], B(k=n, j=i) = inp[n][i]
 * The usual case (forward and dinp with a weight of a few MiB): B, the
 * operand every thread reads, is packed whole once per call by all the pool's
 * threads (one dispatch), in NR-column panels of all K, then the threads take
 * MR-row tiles of C. When B is big (dweight's layer input; a weight over 16
 * MiB such as an LM head) each thread packs its B in blocks of panels by k
 * instead; the threads then split C's columns where that makes each pack
 * only its own part (see forward and rp_sgemm_backward).
 *
 * Block sizes for a 48 KiB L1d and 1 MiB L2 per core: the AVX-512 kernel's B
 * micro-panel of kc = 192 is 24 KiB and its A panel 9 KiB, so both stay in L1
 * while the block's tiles run; the A block of mc = 192 rows (144 KiB) stays in
 * L2 for all the panels. A 2 MiB L2 (Sapphire Rapids), or an L1d under 48 KiB
 * (Zen 4), takes kc = 384 instead (rp_sgemm_kd_avx512_deep, deep_blocks). */
#include <stdatomic.h>

#include "kern_util.h"
#include "kern_ws.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_sgemm.h"
#include "sgemm_internal.h"

/* ---- the portable micro-kernel: any MR x NR, plain C (a*b + c rounded as the
 * build rounds it, fused where the target has FMA) */

#define PMR 4
#define PNR 16

static void ukr_portable(long kc, const float *a, const float *b, float *c, long ldc, int mr,
                         int nr, const float *init, const float *cin) {
  float acc[PMR][PNR];
  for (int m = 0; m < PMR; m++)
    for (int j = 0; j < PNR; j++) acc[m][j] = init && j < nr ? init[j] : 0.0f;
  for (long k = 0; k < kc; k++)
    for (int m = 0; m < PMR; m++)
      for (int j = 0; j < PNR; j++) acc[m][j] = RP_FMAF(a[k * PMR + m], b[k * PNR + j], acc[m][j]);
  for (int m = 0; m < mr; m++)
    for (int j = 0; j < nr; j++) c[m * ldc + j] = acc[m][j] + (cin ? cin[m * ldc + j] : 0.0f);
}

const rp_sgemm_kdesc rp_sgemm_kd_portable = {"portable", RP_ISA_SCALAR, PMR, PNR, 256, 64,
                                             ukr_portable, NULL, NULL, NULL, NULL};
const rp_sgemm_kdesc rp_sgemm_kd_avx2 = {"avx2", RP_ISA_AVX2, RP_SGEMM_MR_AVX2, RP_SGEMM_NR_AVX2,
                                         256, 120, rp_sgemm_ukr_avx2, rp_sgemm_ukr_avx2_da,
                                         rp_sgemm_pack_t_avx2, rp_sgemm_pack_n_avx2,
                                         rp_sgemm_pack_nblock_avx2};
/* the AVX-512 kernel with k blocks of KC and row blocks of MC */
#define KD_AVX512(KC, MC)                                                                 \
  {"avx512", RP_ISA_AVX512, RP_SGEMM_MR_AVX512, RP_SGEMM_NR_AVX512, KC, MC,                 \
   rp_sgemm_ukr_avx512, rp_sgemm_ukr_avx512_da, rp_sgemm_pack_t_avx2, rp_sgemm_pack_n_avx2,     \
   rp_sgemm_pack_nblock_avx2}
const rp_sgemm_kdesc rp_sgemm_kd_avx512 = KD_AVX512(192, 192);
/* The same kernel with deeper k blocks for a core with a 2 MiB L2: kc = 384
 * makes the model's C = 384 products one k block (each C tile written once,
 * each A row block packed once) and its B micro-panel (48 KiB) streams from
 * L2 rather than staying in L1. That needs the L2 to hold the A block (144 x
 * 384, 216 KiB) beside dweight's B block (NC_PANELS panels, 1.2 MiB), more
 * than a 1 MiB L2 has. Measured on Sapphire Rapids (2 MiB L2, 2 threads, L6
 * C384 step, 8 paired runs): 0.981 of the step time of 192 x 192 (mc = 192:
 * 0.988, 96 and 288 no better). */
const rp_sgemm_kdesc rp_sgemm_kd_avx512_deep = KD_AVX512(384, 144);
#define DEEP_KC_MIN_L2 (2L << 20)
#define DEEP_KC_BELOW_L1D (48L << 10)

static _Atomic int g_forced_blocks = -1; /* rp_sgemm_force_blocks */

void rp_sgemm_force_blocks(int deep) { atomic_store(&g_forced_blocks, deep < 0 ? -1 : !!deep); }

/* Deep k blocks (kc = 384) on a core with a 2 MiB L2, where the 48 KiB B
 * micro-panel streams from L2 beside dweight's 1.2 MiB B block (Sapphire
 * Rapids: 0.981 of the step time), and on a core whose L1d is under 48 KiB,
 * where the 192 x 192 blocks' B micro-panel and A panel (33 KiB) do not fit
 * in L1 either. On Zen 4 (32 KiB L1d, 1 MiB L2, AVX-512 on 256-bit units;
 * 2 threads, hot operands, the 124M shape's layers and the default model's)
 * the deep blocks ran each product at 0.90-0.94 of the FMA probe against
 * 0.85-0.87 (one thread: 1-3 % faster), and a default-model `bench train`
 * took 0.96 of the time (median of 8 alternating pairs). The rule reads cache
 * sizes, not timings: the blocks set the summation order, so every process
 * on a machine must pick the same ones. */
int rp_sgemm_deep_blocks_rule(long l1d_bytes, long l2_bytes) {
  return l2_bytes >= DEEP_KC_MIN_L2 || l1d_bytes < DEEP_KC_BELOW_L1D;
}

static int deep_blocks(void) {
  const int forced = atomic_load(&g_forced_blocks);
  if (forced >= 0) return forced;
  return rp_sgemm_deep_blocks_rule(rp_isa_l1d_bytes(), rp_isa_l2_bytes());
}

static _Atomic int g_forced_a_inplace = -1; /* rp_sgemm_force_a_inplace */

void rp_sgemm_force_a_inplace(int on) {
  atomic_store(&g_forced_a_inplace, on < 0 ? -1 : !!on);
}

/* A k-contiguous A read in place by the kernels' direct-A variants, not
 * packed, on cores with a 48 KiB L1d: AMD's (Zen 5) with either kernel and
 * Intel's with the AVX-512 one. On Zen 5 a default step took 0.91-0.98 of
 * the time (5 pairs; held to AVX2 0.97-0.98, 4 pairs) and the products one
 * at a time ran at 0.90-0.94 of the FMA probe against 0.84-0.89. On an
 * Emerald Rapids VM (48 KiB L1d, 2 MiB L2) a default step ran 1.02x (median
 * of 8 pairs, 7 faster), the 124M shape's 1.01x (7 pairs, within noise),
 * while held to AVX2 there it ran 0.98x (6 pairs), so Intel's AVX2 kernel
 * packs; the Sapphire Rapids VM's step gained 0.5 % on its GEMM row. On Zen 4
 * (32 KiB L1d) it bought nothing (tokens/s 0.985x, 8 pairs; the GEMMs' quiet
 * time 0.996x: the pack's time moved into the kernel's loads), so it packs.
 * Either way the same bits: the rule may read anything. */
int rp_sgemm_a_inplace_rule(int amd, int avx512_kernel, long l1d_bytes) {
  return l1d_bytes >= (48L << 10) && (amd || avx512_kernel);
}

int rp_sgemm_a_inplace(rp_isa kernel_isa) {
  const int forced = atomic_load(&g_forced_a_inplace);
  if (forced >= 0) return forced;
  return rp_sgemm_a_inplace_rule(rp_isa_cpu_is_amd(), kernel_isa >= RP_ISA_AVX512,
                                 rp_isa_l1d_bytes());
}

static const rp_sgemm_kdesc *kdesc_of(rp_sgemm_kernel k) {
  switch (k) {
    case RP_SGEMM_AVX512:
      return deep_blocks() ? &rp_sgemm_kd_avx512_deep : &rp_sgemm_kd_avx512;
    case RP_SGEMM_AVX2: return &rp_sgemm_kd_avx2;
    default: return &rp_sgemm_kd_portable;
  }
}

const char *rp_sgemm_kernel_name(rp_sgemm_kernel k) {
  return k >= 0 && k < RP_SGEMM_KERNELS ? kdesc_of(k)->name : "?";
}

int rp_sgemm_kernel_kc(rp_sgemm_kernel k) {
  return k >= 0 && k < RP_SGEMM_KERNELS ? kdesc_of(k)->kc : 0;
}

int rp_sgemm_kernel_supported(rp_sgemm_kernel k) {
  return k >= 0 && k < RP_SGEMM_KERNELS && rp_isa_allows(kdesc_of(k)->isa);
}

int rp_sgemm_kernel_best(void) {
  if (rp_sgemm_kernel_supported(RP_SGEMM_AVX512)) return RP_SGEMM_AVX512;
  if (rp_sgemm_kernel_supported(RP_SGEMM_AVX2)) return RP_SGEMM_AVX2;
  return -1;
}

/* ---- operands (their packing: sgemm_pack.c) */

static size_t bpack_bytes(const rp_sgemm_kdesc *kd, long cols, long K) {
  return panels_bytes(cols, K, kd->nr);
}

/* ---- workspace: B packs and per-thread A blocks, kept between calls. One
 * GEMM at a time per process uses it (pools running side by side take turns). */

static rp_kern_ws g_ws = RP_KERN_WS_INIT("sgemm");

static char *ws_acquire(size_t bytes) { return rp_kern_ws_acquire(&g_ws, bytes); }
static void ws_release(void) { rp_kern_ws_release(&g_ws); }

void rp_sgemm_workspace_release(void) {
  rp_kern_ws_free(&g_ws);
  rp_sgemm_driver_ws_free();
}

static int pool_nth(rp_pool *pool) { return pool ? rp_pool_size(pool) : 1; }

/* ---- entry points */

/* A weight packed whole before the job is read by every thread from L3 (or
 * memory) once per block of rows: good while it is a few MiB (a layer's
 * weights), bad for the LM head (V x C, 154 MiB at GPT-2's vocabulary), whose
 * packed copy would make a round trip through memory and then be streamed
 * again per block of rows (measured: 0.77x OpenBLAS's rate on the 124M shape's
 * LM head). Above this size the forward packs the input (N x IC) instead, and
 * the threads split the weight's rows, each packing its own part in L2-sized
 * blocks. */
#define PREPACK_MAX_BYTES ((size_t)16 << 20)

/* The forward's threads split the weight's columns (all rows each) instead
 * of the rows when the input's pack is no bigger than the weight's: each
 * thread then packs the whole input block by block but reads only its half
 * of the packed weight, which stays in its L2 across the blocks of rows
 * instead of being fetched from L3 once per block (the same rule as
 * dweight's: the threads share the narrower operand). Measured on the
 * default model's shapes (N 1024, 2 threads, Sapphire Rapids, 4 rounds):
 * qkv (384 -> 1152) 387 -> 397 GFLOP/s and fc (384 -> 1536) 387 -> 400;
 * where the input is the bigger pack (attproj 384 -> 384, fcproj 1536 ->
 * 384, the byte LM head) rows stay 2-8 % faster. */
static int forward_splits_cols(const rp_sgemm_kdesc *kd, int N, int IC, int OC, int nth) {
  return nth > 1 && panels_bytes(N, IC, kd->mr) <= bpack_bytes(kd, OC, IC);
}

static void forward(rp_sgemm_kernel k, float *out, const float *inp, const float *w,
                    const float *bias, const float *resid, int N, int IC, int OC,
                    rp_pool *pool, rp_sgemm_block_fn epi, void *epi_ctx) {
  const rp_sgemm_kdesc *kd = kdesc_of(k);
  const int big_w = !epi && bpack_bytes(kd, OC, IC) > PREPACK_MAX_BYTES &&
                    bpack_bytes(kd, N, IC) < bpack_bytes(kd, OC, IC);
  /* the weight's pack kept from an earlier call, or kept for later ones */
  rp_sgemm_wentry *kept = big_w ? NULL
                                : rp_sgemm_wcache_entry(rp_pool_wcache(pool), w, RP_WPACK_FORWARD,
                                                        IC, OC, (int)k, bpack_bytes(kd, OC, IC));
  const size_t pbytes =
      kept ? 0 : rp_sgemm_align64(big_w ? panels_bytes(N, IC, kd->mr) : bpack_bytes(kd, OC, IC));
  const size_t per_thread = rp_sgemm_thread_bytes(kd, big_w);
  const int nth = pool_nth(pool);
  char *ws = ws_acquire(pbytes + per_thread * (size_t)nth);
  float *pack = kept ? kept->buf : (float *)ws;
  bpack_ctx bc = {.kd = kd, .njobs = 1};
  bc.job[0] = big_w ? (bpack_job){{inp, IC, 1, N, IC}, N, kd->mr, pack}
                    : (bpack_job){{w, IC, 1, OC, IC}, OC, kd->nr, pack};
  if (!kept || !kept->valid) rp_sgemm_bpack_run(&bc, pool);
  if (kept) kept->valid = 1;
  gemm_ctx c = {.kd = kd, .nprob = 1, .bufs = ws + pbytes, .buf_stride = per_thread};
  c.prob[0] = (gemm_prob){.c = out, .ldc = OC, .M = N, .Nc = OC, .K = IC,
                          .a = {inp, IC, 1, N, IC}, .init = bias, .resid = resid,
                          .epi = epi, .epi_ctx = epi_ctx,
                          .balance = 1}; /* the forward's epilogue (GELU) is elementwise */
  if (big_w) {
    c.prob[0].apack = pack;
    c.prob[0].b = (sg_src){w, IC, 1, OC, IC};
    c.prob[0].split_cols = 1;
  } else {
    c.prob[0].bpack = pack;
    c.prob[0].split_cols = forward_splits_cols(kd, N, IC, OC, nth);
  }
  rp_sgemm_job_run(&c, pool, (long)N * OC * (IC + 1));
  ws_release();
}

void rp_sgemm_forward(rp_sgemm_kernel k, float *out, const float *inp, const float *weight,
                      const float *bias, const float *resid, int N, int IC, int OC,
                      rp_pool *pool) {
  forward(k, out, inp, weight, bias, resid, N, IC, OC, pool, NULL, NULL);
}

void rp_sgemm_forward_epi(rp_sgemm_kernel k, float *out, const float *inp, const float *weight,
                          const float *bias, int N, int IC, int OC, rp_pool *pool,
                          rp_sgemm_block_fn epi, void *epi_ctx) {
  forward(k, out, inp, weight, bias, NULL, N, IC, OC, pool, epi, epi_ctx);
}

/* dweight packed on the fly splits its columns (IC) among the threads when they
 * are the wider side (see backward), else its rows (OC). */
static int dw_splits_cols(int IC, int OC) { return IC > OC; }

/* The bytes of dweight that its on-the-fly order (column block, k block, the
 * thread's rows) revisits once per k block: the thread's rows by a block of
 * NC_PANELS panels. */
static size_t dw_revisited_bytes(const rp_sgemm_kdesc *kd, int IC, int OC, int nth) {
  const int split_cols = dw_splits_cols(IC, OC);
  const long rows = split_cols ? OC : (OC + nth - 1) / nth;
  const long cols = split_cols ? (IC + nth - 1) / nth : IC;
  return (size_t)rows * (size_t)RP_MIN(cols, (long)NC_PANELS * kd->nr) * sizeof(float);
}

/* dweight's B is the layer input (N x IC, as big as an activation): it is
 * packed block by block inside the job (unless dweight is big, see below).
 * Its threads split the columns (IC) when they are the wider side, so that
 * each packs only its own part of B and they share A (dout) instead, the
 * narrower operand; else the rows (OC). */
static void backward(rp_sgemm_kernel k, float *dinp, float *dweight, float *dbias,
                     const float *dout, const float *inp, const float *w, int N, int IC, int OC,
                     int dinp_set, rp_pool *pool, const rp_sgemm_epi *epi) {
  if (!dinp && !dweight && !dbias) return;
  const rp_sgemm_kdesc *kd = kdesc_of(k);
  const int nth = pool_nth(pool);
  /* dweight's B packed whole first when the block of dweight the k blocks
   * revisit is beyond four L2s: then the k blocks must all add to one block
   * of rows before the next (rows outermost), or that block would go through
   * memory once per k block (the 124M shape's LM head: 77 MiB a thread,
   * 340.7 GFLOP/s prepacked against 320.2 on the fly). Below that the block
   * stays in the outer caches and the on-the-fly pack, into L2 and of each
   * thread's own columns only, beats a whole pack that makes a round trip
   * through memory: 124M shapes' dweight at N 2048, 2 threads, 2 alternating
   * rounds: c_proj (3072 -> 768, 2.4 MB revisited) 285-295 -> 324-329
   * GFLOP/s, qkv (3.5 MB) 317-325 -> 328-351, c_fc (4.7 MB) 326-339 ->
   * 327-343. (The rule before, a thread's whole share of dweight within 1.5
   * MiB, prepacked all three.) */
  const int dw_prepack =
      dweight && dw_revisited_bytes(kd, IC, OC, nth) > 4 * (size_t)rp_isa_l2_bytes();
  /* dinp's weight packed block by block inside the job when its whole pack
   * would be too big to stay in L3 (the LM head: 147 MiB, then streamed from
   * memory once per block of rows), as forward does */
  const int dinp_onfly = dinp && bpack_bytes(kd, IC, OC) > PREPACK_MAX_BYTES;
  rp_sgemm_wentry *kept = dinp && !dinp_onfly
                              ? rp_sgemm_wcache_entry(rp_pool_wcache(pool), w, RP_WPACK_DINP, OC,
                                                      IC, (int)k, bpack_bytes(kd, IC, OC))
                              : NULL;
  size_t b1 = dinp && !kept && !dinp_onfly ? rp_sgemm_align64(bpack_bytes(kd, IC, OC)) : 0;
  size_t b2 = dw_prepack ? rp_sgemm_align64(bpack_bytes(kd, IC, N)) : 0;
  size_t per_thread = rp_sgemm_thread_bytes(kd, (dweight && !dw_prepack) || dinp_onfly);
  char *ws = ws_acquire(b1 + b2 + per_thread * (size_t)nth);
  float *wpack = kept ? kept->buf : (float *)ws;
  bpack_ctx bc = {.kd = kd};
  if (dinp && !dinp_onfly && (!kept || !kept->valid))
    bc.job[bc.njobs++] = (bpack_job){{w, IC, 0, IC, OC}, IC, kd->nr, wpack};
  if (dw_prepack)
    bc.job[bc.njobs++] = (bpack_job){{inp, IC, 0, IC, N}, IC, kd->nr, (float *)(ws + b1)};
  if (bc.njobs) rp_sgemm_bpack_run(&bc, pool);
  if (kept) kept->valid = 1;
  gemm_ctx c = {.kd = kd, .bufs = ws + b1 + b2, .buf_stride = per_thread, .dbias = dbias,
                .dout = dout, .N = N, .OC = OC};
  if (dinp)
    c.prob[c.nprob++] = (gemm_prob){.c = dinp, .ldc = IC, .M = N, .Nc = IC, .K = OC,
                                    .a = {dout, OC, 1, N, OC},
                                    .bpack = dinp_onfly ? NULL : wpack,
                                    .b = {w, IC, 0, IC, OC}, .load_c = !dinp_set,
                                    .epi = epi ? epi->both : NULL,
                                    .epi_any = epi ? epi->any : NULL,
                                    .epi_order = epi ? epi->ordered : NULL,
                                    .epi_ctx = epi ? epi->ctx : NULL,
                                    /* each column's rows in order by one thread */
                                    .split_cols = epi != NULL, .balance = 1};
  if (dweight)
    c.prob[c.nprob++] = (gemm_prob){.c = dweight, .ldc = IC, .M = OC, .Nc = IC, .K = N,
                                    .a = {dout, OC, 0, OC, N}, .b = {inp, IC, 0, IC, N},
                                    .bpack = dw_prepack ? (const float *)(ws + b1) : NULL,
                                    .load_c = 1, .balance = 1,
                                    .split_cols = !dw_prepack && dw_splits_cols(IC, OC)};
  rp_sgemm_job_run(&c, pool, (long)N * OC * (IC * c.nprob + 1));
  ws_release();
}

void rp_sgemm_backward(rp_sgemm_kernel k, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *w, int N, int IC,
                       int OC, int dinp_set, rp_pool *pool) {
  backward(k, dinp, dweight, dbias, dout, inp, w, N, IC, OC, dinp_set, pool, NULL);
}

void rp_sgemm_backward_epi(rp_sgemm_kernel k, float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *w, int N, int IC,
                           int OC, int dinp_set, rp_pool *pool, const rp_sgemm_epi *epi) {
  RP_CHECK(dinp && epi && epi->both && epi->any && epi->ordered);
  backward(k, dinp, dweight, dbias, dout, inp, w, N, IC, OC, dinp_set, pool, epi);
}
