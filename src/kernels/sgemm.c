/* Blocked fp32 GEMM driver: packing, cache blocking, threads, and the entry
 * points of rp_sgemm.h. The micro-kernels are in sgemm_avx512.c, sgemm_avx2.c
 * and (plain C, the driver's test double on any CPU) below.
 *
 * Every product is C[M,Nc] (+)= A[M,K] B[K,Nc]:
 *   forward: C = out,     A = inp (N x IC),     B(k=i, j=o) = w[o][i]
 *   dinp:    C = dinp,    A = dout (N x OC),    B(k=o, j=i) = w[o][i]
 *   dweight: C = dweight, A(m=o, k=n) = dout[n][o], B(k=n, j=i) = inp[n][i]
 The usual case (forward and dinp with a weight of a few MiB): B, the operand
 * every thread reads, is packed whole once per call by all the pool's threads
 * (one dispatch), in NR-column panels of all K; then each thread takes its
 * share of MR-row tiles of C and loops
 *   for each block of mc rows
 *     for each block of k (at most kc, all blocks of one K the same size)
 *       pack the A block (mc x kc, MR-row panels) into its own buffer
 *       for each NR-column panel (B micro-panel kc x NR, reused by the tiles)
 *         for each MR-row tile: micro-kernel
 * so a thread only writes its own rows of C (where B is prepacked, threads
 * that run out of rows take another's unstarted ones: balanced_part). When B
 * is big (dweight's layer input; a weight over 16 MiB such as an LM head)
 * each thread packs its B in
 * blocks of panels by k instead, and the loops run column block, k block, row
 * block (BLIS's order); the threads then split C's columns where that makes
 * each pack only its own part (see forward and rp_sgemm_backward). The blocks
 * of k depend on K only, so a C element is the same sum in the same order
 * whichever thread, tile or rank computes it.
 *
 * Block sizes for a 48 KiB L1d and 1 MiB L2 per core: the AVX-512 kernel's B
 * micro-panel of kc = 192 is 24 KiB and its A panel 9 KiB, so both stay in L1
 * while the block's tiles run; the A block of mc = 192 rows (144 KiB) stays in
 * L2 for all the panels. A 2 MiB L2 (Sapphire Rapids), or an L1d under 48 KiB
 * (Zen 4), takes kc = 384 instead (rp_sgemm_kd_avx512_deep, deep_blocks). */
#include <stdatomic.h>

#include "fused_internal.h"
#include "kern_util.h"
#include "kern_ws.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_sgemm.h"
#include "sgemm_internal.h"
#include "work_range.h"

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
                                             ukr_portable, NULL, NULL, NULL};
const rp_sgemm_kdesc rp_sgemm_kd_avx2 = {"avx2", RP_ISA_AVX2, RP_SGEMM_MR_AVX2, RP_SGEMM_NR_AVX2,
                                         256, 120, rp_sgemm_ukr_avx2, rp_sgemm_pack_t_avx2,
                                         rp_sgemm_pack_n_avx2, rp_sgemm_pack_nblock_avx2};
/* the AVX-512 kernel with k blocks of KC and row blocks of MC */
#define KD_AVX512(KC, MC)                                                                 \
  {"avx512", RP_ISA_AVX512, RP_SGEMM_MR_AVX512, RP_SGEMM_NR_AVX512, KC, MC,                 \
   rp_sgemm_ukr_avx512, rp_sgemm_pack_t_avx2, rp_sgemm_pack_n_avx2, rp_sgemm_pack_nblock_avx2}
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
static size_t abuf_bytes(const rp_sgemm_kdesc *kd) {
  return (size_t)kd->mc * (size_t)kd->kc * sizeof(float);
}
static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

/* The k blocks of K: as few as kc allows, all of one size but the last. */
static long block_k(long K, int kc) {
  long nblk = (K + kc - 1) / kc;
  return nblk > 0 ? (K + nblk - 1) / nblk : 1;
}

/* ---- one product over a thread's region of C */

/* Panels per B block packed on the fly (dweight's B): 24 x 32 columns x kc =
 * 192 is 576 KiB (kc = 384: 1.2 MiB of a 2 MiB L2; avx2: 24 x 16 x 256, 384
 * KiB), in L2 beside the A block; 24
 * rather than 16 so that at C = 384 each of two threads packs its 768 columns
 * of fcproj's B as one block and so packs A (dout) once, not twice (measured:
 * packing was 11% of a step, bench_step under perf). */
#define NC_PANELS 24

typedef struct {
  float *c;
  long ldc;
  int M, Nc, K;
  sg_src a;
  const float *apack; /* ceil(M / mr) panels of K x mr packed before the job, or NULL: A
                         packed block by block from a by each thread */
  const float *bpack; /* npanels(Nc) panels of K x nr, packed before the job; or NULL: */
  sg_src b;           /* B(k, j) = X(j, k), packed block by block by each thread */
  const float *init;  /* Nc floats (a bias) added to every row, or NULL */
  const float *resid; /* M x Nc with C's stride added to the product, or NULL */
  int load_c;         /* C accumulates (+=) */
  int split_cols; /* threads take column panels (all rows) instead of row tiles */
  rp_sgemm_block_fn epi; /* or NULL: called on each thread's finished parts of C */
  void *epi_ctx;
  int balance; /* threads share its row tiles as they go (balanced_part); needs bpack, and an
                  epi that is elementwise */
} gemm_prob;

/* A block of a source (rows [r0, r0 + rows) by k [k0, k0 + kc)) whose lines are
 * fetched into L2 while the tiles of the block before it run, so that its pack
 * reads L2 instead of waiting on L3 or memory for each line (the activations a
 * GEMM packs were written long before, or by another thread). Kept here, where
 * the tile loops inline them (out of line they took 2 % of a step's samples). */
typedef struct {
  const sg_src *s;
  long r0, rows, k0, kc;
} pf_block;

static pf_block pf_none(void) { return (pf_block){NULL, 0, 0, 0, 0}; }

static pf_block pf_of(const sg_src *s, long r0, long rows, long k0, long kc) {
  rows = RP_MIN(rows, (long)s->rows - r0);
  kc = RP_MIN(kc, (long)s->K - k0);
  return (pf_block){rows > 0 && kc > 0 ? s : NULL, r0, rows, k0, kc};
}

/* The part-th of nparts slices of b's lines (a kcontig source has one run of
 * lines per row, the other kind one per k). */
static void pf_part(const pf_block *b, long part, long nparts) {
  if (!b->s) return;
  const sg_src *s = b->s;
  const long outer = s->kcontig ? b->rows : b->kc, run = s->kcontig ? b->kc : b->rows;
  const long lo = outer * part / nparts, hi = outer * (part + 1) / nparts;
  for (long o = lo; o < hi; o++) {
    const float *p = s->kcontig ? s->p + (b->r0 + o) * s->ld + b->k0
                                : s->p + (b->k0 + o) * s->ld + b->r0;
    for (long f = 0; f < run; f += 16) __builtin_prefetch(p + f, 0, 2);
    __builtin_prefetch(p + run - 1, 0, 2);
  }
}

/* C[m0:m1, panels p0:p1) over the k block [pc, pc + kcb), with B panel jr at
 * bp(jr) (kcb x nr): A packed per mc rows, each B micro-panel reused by the
 * block's tiles. While a block of rows runs, the next one's A source is
 * prefetched, and during the last one the blocks in next[] (those of the
 * call after this one). */
static void block_tiles(const gemm_prob *g, const rp_sgemm_kdesc *kd, float *abuf, long m0,
                        long m1, long p0, long p1, long pc, long kcb, const float *bbase,
                        long bstride, const pf_block next[2]) {
  const int MR = kd->mr, NR = kd->nr;
  for (long ic = m0; ic < m1; ic += kd->mc) {
    const long mcb = RP_MIN((long)kd->mc, m1 - ic), ntile = (mcb + MR - 1) / MR;
    /* tile t's A panel: ap + t * astride, kcb x MR */
    const float *ap = abuf;
    long astride = kcb * MR;
    if (g->apack) {
      ap = g->apack + (ic / MR) * g->K * MR + pc * MR;
      astride = (long)g->K * MR;
    } else {
      rp_sgemm_pack_panels(kd, &g->a, (int)ic, (int)ntile, MR, pc, kcb, abuf);
    }
    /* what to fetch while these rows run: the next rows' A, or after the last
     * rows the next call's blocks */
    pf_block pf[2] = {next[0], next[1]};
    if (ic + kd->mc < m1) {
      pf[0] = g->apack ? pf_none() : pf_of(&g->a, ic + kd->mc, kd->mc, pc, kcb);
      pf[1] = pf_none();
    }
    for (long jr = p0; jr < p1; jr++) {
      pf_part(&pf[0], jr - p0, p1 - p0);
      pf_part(&pf[1], jr - p0, p1 - p0);
      const float *bp = bbase + (jr - p0) * bstride;
      const int nr = (int)RP_MIN((long)NR, g->Nc - jr * NR);
      /* the first k block adds the bias and the residual (or C itself when
       * accumulating), every later one the partial sum already in C */
      const float *init = g->init && pc == 0 ? g->init + jr * NR : NULL;
      const float *add = pc > 0 || g->load_c ? g->c : pc == 0 ? g->resid : NULL;
      for (long t = 0; t < ntile; t++) {
        const long off = (ic + t * MR) * g->ldc + jr * NR;
        if (pc == 0 && !g->load_c && t + 1 < ntile) {
          /* the next tile's C lines, written cold by this first k block */
          const float *nc = g->c + off + MR * g->ldc;
          const int rows = (int)RP_MIN((long)MR, mcb - (t + 1) * MR);
          for (int r = 0; r < rows; r++)
            for (int f = 0; f < nr; f += 16) __builtin_prefetch(nc + r * g->ldc + f, 1, 3);
        }
        kd->ukr(kcb, ap + t * astride, bp, g->c + off, g->ldc,
                (int)RP_MIN((long)MR, mcb - t * MR), nr, init, add ? add + off : NULL);
      }
    }
  }
}

/* Panels per column group of a prepacked B: a block's C (mc rows x the
 * group's columns) is added to once per k block, so it should stay in L2
 * beside the A block and the streaming B panels. A quarter of the L2 for it;
 * the groups of one call are of equal size. */
static long col_group_panels(const rp_sgemm_kdesc *kd, long K, long np) {
  if (K <= kd->kc) return np; /* one k block: C is written once whatever its width */
  const long budget = RP_MAX(rp_isa_l2_bytes() / 4, 1L << 18);
  const long per_panel = (long)kd->mc * kd->nr * (long)sizeof(float);
  const long fit = RP_MAX(budget / per_panel, 1L), groups = (np + fit - 1) / fit;
  return (np + groups - 1) / groups;
}

/* Returns 1 when it has called g's epilogue on every row it computed. Rows
 * [m1, mpf) are likely the thread's next: their first A block is fetched
 * while the last block runs. */
static int gemm_region(const gemm_prob *g, const rp_sgemm_kdesc *kd, float *abuf, float *bbuf,
                       long m0, long m1, long p0, long p1, long mpf, int ith) {
  const int NR = kd->nr;
  const long kb = block_k(g->K, kd->kc);
  if (g->bpack) {
    /* per column group, blocks of mc rows outermost: the block's C (mc x the
     * group's columns) stays in L2 while all its k blocks add to it, and the
     * shared B is read once per block. Each C element is the same sum in the
     * same k order whatever the grouping. */
    const long qp = col_group_panels(kd, g->K, p1 - p0);
    /* one group over the thread's columns: a block of rows is final after
     * its k blocks, and the epilogue runs on it while it is still in L2 */
    const int epi_blocks = g->epi && qp >= p1 - p0;
    const long j0 = p0 * NR, j1 = RP_MIN(p1 * NR, (long)g->Nc);
    for (long q0 = p0; q0 < p1; q0 += qp) {
      const long q1 = RP_MIN(q0 + qp, p1);
      for (long ic = m0; ic < m1; ic += kd->mc) {
        const long ic1 = RP_MIN(ic + kd->mc, m1);
        for (long pc = 0; pc < g->K; pc += kb) {
          /* the A block after this one: the next k block, the next rows'
           * first, or the next group's first rows */
          const long npc = pc + kb < g->K ? pc + kb : 0;
          const long nic = npc ? ic : ic1 < m1 ? ic1 : q1 < p1 ? m0 : RP_MIN(ic1, mpf);
          /* none past the rows the thread expects: pf_of takes rows <= 0 as nothing */
          const long nrows = RP_MIN(kd->mc, (nic < m1 ? m1 : mpf) - nic);
          pf_block next[2] = {g->apack ? pf_none() : pf_of(&g->a, nic, nrows, npc, kb),
                              pf_none()};
          block_tiles(g, kd, abuf, ic, ic1, q0, q1, pc, RP_MIN(kb, (long)g->K - pc),
                      g->bpack + q0 * g->K * NR + pc * NR, (long)g->K * NR, next);
        }
        if (epi_blocks) g->epi(g->epi_ctx, ic, ic1, j0, j1, ith);
      }
    }
    return epi_blocks;
  }
  /* B packed here, a block of panels by a block of k at a time, so the packed
   * copy lives in L2 instead of making a round trip through memory */
  for (long q0 = p0; q0 < p1; q0 += NC_PANELS) {
    const long q1 = RP_MIN(q0 + NC_PANELS, p1);
    for (long pc = 0; pc < g->K; pc += kb) {
      const long kcb = RP_MIN(kb, (long)g->K - pc);
      /* the blocks of the next call: its B block and its first A block */
      const long npc = pc + kb < g->K ? pc + kb : 0, nq0 = npc ? q0 : q1;
      const long ncols = RP_MIN((long)NC_PANELS, p1 - nq0) * NR, nrows = RP_MIN(kd->mc, m1 - m0);
      pf_block next[2] = {pf_none(), pf_none()};
      if (nq0 < p1) {
        next[0] = pf_of(&g->b, nq0 * NR, ncols, npc, kb);
        if (!g->apack) next[1] = pf_of(&g->a, m0, nrows, npc, kb);
      }
      rp_sgemm_pack_panels(kd, &g->b, (int)(q0 * NR), (int)(q1 - q0), NR, pc, kcb, bbuf);
      block_tiles(g, kd, abuf, m0, m1, q0, q1, pc, kcb, bbuf, kcb * NR, next);
    }
  }
  return 0;
}

/* This thread's region of C: whole MR-row tiles (or NR-column panels), so
 * tiles never straddle threads. */
static void thread_region(const gemm_prob *g, const rp_sgemm_kdesc *kd, int ith, int nth,
                          long *m0, long *m1, long *p0, long *p1) {
  long t0, t1, np = npanels(g->Nc, kd->nr);
  if (g->split_cols) {
    rp_split(np, ith, nth, p0, p1);
    *m0 = 0;
    *m1 = *p1 > *p0 ? g->M : 0;
    return;
  }
  rp_split((g->M + kd->mr - 1) / kd->mr, ith, nth, &t0, &t1);
  *m0 = RP_MIN(t0 * kd->mr, (long)g->M);
  *m1 = RP_MIN(t1 * kd->mr, (long)g->M);
  *p0 = 0;
  *p1 = np;
}

/* This thread's part of one product, then its epilogue on the thread's whole
 * region (unless the region already ran it block by block). */
static void gemm_part(const gemm_prob *g, const rp_sgemm_kdesc *kd, float *abuf, float *bbuf,
                      long m0, long m1, long p0, long p1, long mpf, int ith) {
  if (m1 <= m0 || p1 <= p0) return;
  if (g->K > 0) {
    if (!gemm_region(g, kd, abuf, bbuf, m0, m1, p0, p1, mpf, ith) && g->epi)
      g->epi(g->epi_ctx, m0, m1, p0 * kd->nr, RP_MIN(p1 * kd->nr, (long)g->Nc), ith);
    return;
  }
  /* K = 0: the sum is empty */
  const long j0 = p0 * kd->nr, j1 = RP_MIN(p1 * kd->nr, (long)g->Nc);
  for (long m = m0; m < m1; m++)
    for (long j = j0; j < j1; j++) {
      float *o = g->c + m * g->ldc + j;
      float v = g->init ? g->init[j] : 0.0f;
      *o = g->load_c ? v + *o : g->resid ? v + g->resid[m * g->ldc + j] : v;
    }
  if (g->epi) g->epi(g->epi_ctx, m0, m1, j0, j1, ith);
}

/* ---- the GEMM job: up to two products, the residual start and the bias sums */

typedef struct {
  const rp_sgemm_kdesc *kd;
  gemm_prob prob[2];
  int nprob;
  char *bufs; /* per thread: an A block, then a B block */
  size_t buf_stride;
  rp_work_range *ranges; /* [nprob][ranges_nth]: each thread's row tiles of a balanced product */
  int ranges_nth;
  float *dbias;              /* dbias[OC] += column sums of dout (or NULL) */
  const float *dout;
  int N, OC;
} gemm_ctx;

/* Each thread's share of a balanced product's row tiles (its columns: all, or
 * its panels when the threads split columns), set before the job. */
static void balance_setup(gemm_ctx *c, int nth) {
  c->ranges_nth = nth;
  for (int i = 0; i < c->nprob; i++)
    for (int t = 0; t < nth; t++) {
      long m0, m1, p0, p1;
      thread_region(&c->prob[i], c->kd, t, nth, &m0, &m1, &p0, &p1);
      const int empty = !c->prob[i].balance || m1 <= m0 || p1 <= p0;
      rp_work_range_set(&c->ranges[i * nth + t], empty ? 0 : m0 / c->kd->mr,
                        empty ? 0 : RP_CEIL_DIV(m1, c->kd->mr));
    }
}

/* A balanced product: the thread's own tiles a block of rows at a time, then
 * the back halves of what the other threads have not started (each tile the
 * same sum whoever computes it, so the same bits as the static split). */
static void balanced_part(const gemm_ctx *c, int i, int ith, int nth, float *abuf, float *bbuf) {
  const gemm_prob *g = &c->prob[i];
  const rp_sgemm_kdesc *kd = c->kd;
  long m0, m1, p0, p1, a, b, hi;
  rp_work_straggle(ith);
  for (int v; (v = rp_work_next(c->ranges + (long)i * nth, ith, nth, kd->mc / kd->mr, &a, &b,
                                &hi)) >= 0;) {
    thread_region(g, kd, v, nth, &m0, &m1, &p0, &p1); /* the owner's columns */
    gemm_part(g, kd, abuf, bbuf, a * kd->mr, RP_MIN(b * kd->mr, (long)g->M), p0, p1,
              RP_MIN(hi * kd->mr, (long)g->M), ith);
  }
}

static void gemm_task(void *vctx, int ith, int nth) {
  const gemm_ctx *c = vctx;
  float *abuf = (float *)(c->bufs + (size_t)ith * c->buf_stride);
  float *bbuf = (float *)((char *)abuf + align64(abuf_bytes(c->kd)));
  for (int i = 0; i < c->nprob; i++) {
    if (c->prob[i].balance && nth == c->ranges_nth && nth > 1) {
      balanced_part(c, i, ith, nth, abuf, bbuf);
      continue;
    }
    long m0, m1, p0, p1;
    thread_region(&c->prob[i], c->kd, ith, nth, &m0, &m1, &p0, &p1);
    gemm_part(&c->prob[i], c->kd, abuf, bbuf, m0, m1, p0, p1, m1, ith);
  }
  if (c->dbias) {
    long lo, hi;
    rp_kern_split_cols(c->OC, ith, nth, &lo, &hi);
    rp_matmul_dbias_cols(c->dbias, c->dout, lo, hi, c->N, c->OC);
  }
}

/* ---- workspace: B packs and per-thread A blocks, kept between calls. One
 * GEMM at a time per process uses it (pools running side by side take turns). */

static rp_kern_ws g_ws = RP_KERN_WS_INIT("sgemm");

static char *ws_acquire(size_t bytes) { return rp_kern_ws_acquire(&g_ws, bytes); }
static void ws_release(void) { rp_kern_ws_release(&g_ws); }

void rp_sgemm_workspace_release(void) { rp_kern_ws_free(&g_ws); }

static int pool_nth(rp_pool *pool) { return pool ? rp_pool_size(pool) : 1; }

static size_t bbuf_bytes(const rp_sgemm_kdesc *kd) {
  return (size_t)NC_PANELS * (size_t)kd->nr * (size_t)kd->kc * sizeof(float);
}
/* One A block per thread, and a B block when a product packs B on the fly. */
static size_t thread_bytes(const rp_sgemm_kdesc *kd, int with_b) {
  return align64(abuf_bytes(kd)) + (with_b ? align64(bbuf_bytes(kd)) : 0);
}
/* The work ranges of a job's two products (gemm_ctx.ranges). */
static size_t ranges_bytes(int nth) { return align64(2 * (size_t)nth * sizeof(rp_work_range)); }

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
      kept ? 0 : align64(big_w ? panels_bytes(N, IC, kd->mr) : bpack_bytes(kd, OC, IC));
  const size_t per_thread = thread_bytes(kd, big_w);
  const int nth = pool_nth(pool);
  char *ws = ws_acquire(pbytes + per_thread * (size_t)nth + ranges_bytes(nth));
  float *pack = kept ? kept->buf : (float *)ws;
  bpack_ctx bc = {.kd = kd, .njobs = 1};
  bc.job[0] = big_w ? (bpack_job){{inp, IC, 1, N, IC}, N, kd->mr, pack}
                    : (bpack_job){{w, IC, 1, OC, IC}, OC, kd->nr, pack};
  if (!kept || !kept->valid) rp_sgemm_bpack_run(&bc, pool);
  if (kept) kept->valid = 1;
  gemm_ctx c = {.kd = kd, .nprob = 1, .bufs = ws + pbytes, .buf_stride = per_thread,
                .ranges = (rp_work_range *)(ws + pbytes + per_thread * (size_t)nth)};
  c.prob[0] = (gemm_prob){.c = out, .ldc = OC, .M = N, .Nc = OC, .K = IC,
                          .a = {inp, IC, 1, N, IC}, .init = bias, .resid = resid,
                          .epi = epi, .epi_ctx = epi_ctx};
  if (big_w) {
    c.prob[0].apack = pack;
    c.prob[0].b = (sg_src){w, IC, 1, OC, IC};
    c.prob[0].split_cols = 1;
  } else {
    c.prob[0].bpack = pack;
    c.prob[0].split_cols = forward_splits_cols(kd, N, IC, OC, nth);
    c.prob[0].balance = 1; /* the forward's epilogue (GELU) is elementwise */
  }
  balance_setup(&c, nth);
  rp_kern_run(pool, gemm_task, &c, (long)N * OC * (IC + 1));
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
 * packed block by block inside the job (unless dweight is big, see below). Its threads split the columns (IC)
 * when they are the wider side, so that each packs only its own part of B and
 * they share A (dout) instead, the narrower operand; else the rows (OC). */
static void backward(rp_sgemm_kernel k, float *dinp, float *dweight, float *dbias,
                     const float *dout, const float *inp, const float *w, int N, int IC, int OC,
                     int dinp_set, rp_pool *pool, rp_sgemm_block_fn epi, void *epi_ctx) {
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
  size_t b1 = dinp && !kept && !dinp_onfly ? align64(bpack_bytes(kd, IC, OC)) : 0;
  size_t b2 = dw_prepack ? align64(bpack_bytes(kd, IC, N)) : 0;
  size_t per_thread = thread_bytes(kd, (dweight && !dw_prepack) || dinp_onfly);
  char *ws = ws_acquire(b1 + b2 + per_thread * (size_t)nth + ranges_bytes(nth));
  float *wpack = kept ? kept->buf : (float *)ws;
  bpack_ctx bc = {.kd = kd};
  if (dinp && !dinp_onfly && (!kept || !kept->valid))
    bc.job[bc.njobs++] = (bpack_job){{w, IC, 0, IC, OC}, IC, kd->nr, wpack};
  if (dw_prepack)
    bc.job[bc.njobs++] = (bpack_job){{inp, IC, 0, IC, N}, IC, kd->nr, (float *)(ws + b1)};
  if (bc.njobs) rp_sgemm_bpack_run(&bc, pool);
  if (kept) kept->valid = 1;
  gemm_ctx c = {.kd = kd, .bufs = ws + b1 + b2, .buf_stride = per_thread, .dbias = dbias,
                .dout = dout, .N = N, .OC = OC,
                .ranges = (rp_work_range *)(ws + b1 + b2 + per_thread * (size_t)nth)};
  if (dinp)
    c.prob[c.nprob++] = (gemm_prob){.c = dinp, .ldc = IC, .M = N, .Nc = IC, .K = OC,
                                    .a = {dout, OC, 1, N, OC},
                                    .bpack = dinp_onfly ? NULL : wpack,
                                    .b = {w, IC, 0, IC, OC}, .load_c = !dinp_set,
                                    .epi = epi, .epi_ctx = epi_ctx, .split_cols = epi != NULL,
                                    /* not with the GELU backward's epilogue: it adds each
                                       thread's rows to dbias in row order */
                                    .balance = !dinp_onfly && !epi};
  if (dweight)
    c.prob[c.nprob++] = (gemm_prob){.c = dweight, .ldc = IC, .M = OC, .Nc = IC, .K = N,
                                    .a = {dout, OC, 0, OC, N}, .b = {inp, IC, 0, IC, N},
                                    .bpack = dw_prepack ? (const float *)(ws + b1) : NULL,
                                    .load_c = 1, .split_cols = !dw_prepack && dw_splits_cols(IC, OC)};
  balance_setup(&c, nth);
  rp_kern_run(pool, gemm_task, &c, (long)N * OC * (IC * c.nprob + 1));
  ws_release();
}

void rp_sgemm_backward(rp_sgemm_kernel k, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *w, int N, int IC,
                       int OC, int dinp_set, rp_pool *pool) {
  backward(k, dinp, dweight, dbias, dout, inp, w, N, IC, OC, dinp_set, pool, NULL, NULL);
}

void rp_sgemm_backward_epi(rp_sgemm_kernel k, float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *w, int N, int IC,
                           int OC, int dinp_set, rp_pool *pool, rp_sgemm_block_fn epi,
                           void *epi_ctx) {
  RP_CHECK(dinp && epi);
  backward(k, dinp, dweight, dbias, dout, inp, w, N, IC, OC, dinp_set, pool, epi, epi_ctx);
}
