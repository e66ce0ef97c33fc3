/* The fp32 GEMM's driver: one product's cache-blocked loops over a region of
 * C, and a job's threads sharing its products (sgemm.c sets the products up;
 * sgemm_internal.h has their description, gemm_prob).
 *
 * With B prepacked whole, a thread's region runs
 *   for each block of mc rows
 *     for each block of k (at most kc, all blocks of one K the same size)
 *       pack the A block (mc x kc, MR-row panels) into its own buffer
 *       for each NR-column panel (B micro-panel kc x NR, reused by the tiles)
 *         for each MR-row tile: micro-kernel
 * and with B packed on the fly (dweight's layer input, an LM head's weight)
 * column block, k block, row block (BLIS's order), each thread packing its
 * block of B into L2. The blocks of k depend on K only, so a C element is the
 * same sum in the same order whichever thread, tile or rank computes it.
 *
 * On cores where it pays (rp_sgemm_a_inplace_rule) a k-contiguous A (the
 * forward's input, dinp's output gradient) is not packed: the kernel's
 * direct-A variant (AVX-512, AVX2) reads its full tiles in place and only a
 * last partial tile is packed. On Zen 5 (one thread, hot operands) the pack
 * was 6-9 % of a forward or dinp, and without it 1024 x 384 x 1152 ran at
 * 0.93 of the FMA probe (0.90), dinp 0.92 (0.87); a whole default step
 * 1.02-1.10x (5 pairs), and held to AVX2 (RINGPIPE_ISA=avx2 --gemm own)
 * 1.02-1.03x (4 pairs).
 *
 * Work sharing (work_range.h): a job's threads start from static shares, and
 * a thread out of work takes the back half of what another has not started,
 * so that a job does not last as long as its slowest thread. How depends on
 * the product's loops (share_mode):
 *   rows:    B prepacked: units are row tiles, each over all of k;
 *   panels:  B on the fly, threads split the columns: units are column panels
 *            (a block of NC_PANELS at a time), each over all of k and rows;
 *   k-order: B on the fly, threads split the rows (each packs every column):
 *            units are row tiles within one k block, one set of ranges per
 *            column block and k block, and a tile's k blocks are added in
 *            order (each tile counts the blocks added; a thread that takes a
 *            tile whose earlier block another thread still runs waits for it).
 * Each unit is the same sum whoever runs it: the same bits as the static
 * split. */
#include <sched.h>
#include <stdatomic.h>

#include "fused_internal.h"
#include "kern_util.h"
#include "kern_ws.h"
#include "ringpipe/rp_arena.h"
#include "sgemm_internal.h"
#include "work_range.h"

/* The k blocks of K: as few as kc allows, all of one size but the last. */
static long block_k(long K, int kc) {
  long nblk = (K + kc - 1) / kc;
  return nblk > 0 ? (K + nblk - 1) / nblk : 1;
}

/* ---- one product over a thread's region of C */

/* Rows [m0, m1) by column panels [p0, p1) of C; rows up to mpf and panels up
 * to ppf are likely the thread's next (their first operands are prefetched
 * while its last block runs). */
typedef struct {
  long m0, m1, p0, p1, mpf, ppf;
} region;

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
 * prefetched (rows up to mpf), and during the last one the blocks in next[]
 * (those of the call after this one). */
static void block_tiles(const gemm_prob *g, const rp_sgemm_kdesc *kd, float *abuf, long m0,
                        long m1, long mpf, long p0, long p1, long pc, long kcb,
                        const float *bbase, long bstride, const pf_block next[2]) {
  const int MR = kd->mr, NR = kd->nr;
  for (long ic = m0; ic < m1; ic += kd->mc) {
    const long mcb = RP_MIN((long)kd->mc, m1 - ic), ntile = (mcb + MR - 1) / MR;
    /* tile t's A panel: ap + t * astride, kcb x MR; or, for the first
     * ndirect tiles, the source itself (a k-contiguous A read in place by
     * the kernel, with only a last partial tile packed, into abuf) */
    const float *ap = abuf;
    long astride = kcb * MR, ndirect = 0;
    if (g->apack) {
      ap = g->apack + (ic / MR) * g->K * MR + pc * MR;
      astride = (long)g->K * MR;
    } else if (g->a_inplace && kd->ukr_da && g->a.kcontig) {
      ndirect = mcb / MR;
      astride = 0; /* the partial tile's panel is abuf */
      if (ndirect < ntile)
        rp_sgemm_pack_panels(kd, &g->a, (int)(ic + ndirect * MR), 1, MR, pc, kcb, abuf);
    } else {
      rp_sgemm_pack_panels(kd, &g->a, (int)ic, (int)ntile, MR, pc, kcb, abuf);
    }
    /* what to fetch while these rows run: the next rows' A, or after the last
     * rows the next call's blocks */
    pf_block pf[2] = {next[0], next[1]};
    if (ic + kd->mc < mpf) {
      pf[0] = g->apack ? pf_none()
                       : pf_of(&g->a, ic + kd->mc, RP_MIN(kd->mc, mpf - ic - kd->mc), pc, kcb);
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
        if (t < ndirect)
          kd->ukr_da(kcb, g->a.p + (ic + t * MR) * g->a.ld + pc, g->a.ld, bp, g->c + off,
                     g->ldc, nr, init, add ? add + off : NULL);
        else
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

/* A prepacked B: per column group, blocks of mc rows outermost, so the
 * block's C (mc x the group's columns) stays in L2 while all its k blocks add
 * to it, and the shared B is read once per block. Each C element is the same
 * sum in the same k order whatever the grouping. A block is final after its
 * k blocks, and the epilogue runs on it then, while it is still in L2: each
 * column still meets its rows in order (a column is in one group, whose row
 * blocks go in order), all that an in-order epilogue needs. (It used to run
 * once over the thread's whole part where there were several groups, C then
 * read back from L3: default model, 4 alternating pairs of step profiles, the
 * fused GELU rows 5.02-5.87 -> 4.50-5.59 ms a step, the GEMM rows alike.)
 * Returns 1 when it has called g's epilogue on every block it computed. */
static int prepacked_region(const gemm_prob *g, const rp_sgemm_kdesc *kd, float *abuf,
                            const region *r, int ith) {
  const int NR = kd->nr;
  const long kb = block_k(g->K, kd->kc), m0 = r->m0, m1 = r->m1, p0 = r->p0, p1 = r->p1;
  const long qp = col_group_panels(kd, g->K, p1 - p0);
  for (long q0 = p0; q0 < p1; q0 += qp) {
    const long q1 = RP_MIN(q0 + qp, p1);
    const long j0 = q0 * NR, j1 = RP_MIN(q1 * NR, (long)g->Nc);
    for (long ic = m0; ic < m1; ic += kd->mc) {
      const long ic1 = RP_MIN(ic + kd->mc, m1);
      for (long pc = 0; pc < g->K; pc += kb) {
        /* the A block after this one: the next k block, the next rows'
         * first, or the next group's first rows */
        const long npc = pc + kb < g->K ? pc + kb : 0;
        const long nic = npc ? ic : ic1 < m1 ? ic1 : q1 < p1 ? m0 : RP_MIN(ic1, r->mpf);
        /* none past the rows the thread expects: pf_of takes rows <= 0 as nothing */
        const long nrows = RP_MIN(kd->mc, (nic < m1 ? m1 : r->mpf) - nic);
        pf_block next[2] = {g->apack ? pf_none() : pf_of(&g->a, nic, nrows, npc, kb),
                            pf_none()};
        block_tiles(g, kd, abuf, ic, ic1, ic1, q0, q1, pc, RP_MIN(kb, (long)g->K - pc),
                    g->bpack + q0 * g->K * NR + pc * NR, (long)g->K * NR, next);
      }
      if (g->epi) g->epi(g->epi_ctx, ic, ic1, j0, j1, ith);
    }
  }
  return g->epi != NULL;
}

/* B packed here, a block of panels by a block of k at a time, so the packed
 * copy lives in L2 instead of making a round trip through memory. */
static void onfly_region(const gemm_prob *g, const rp_sgemm_kdesc *kd, float *abuf,
                         float *bbuf, const region *r) {
  const int NR = kd->nr;
  const long kb = block_k(g->K, kd->kc), m0 = r->m0, m1 = r->m1;
  for (long q0 = r->p0; q0 < r->p1; q0 += NC_PANELS) {
    const long q1 = RP_MIN(q0 + NC_PANELS, r->p1);
    for (long pc = 0; pc < g->K; pc += kb) {
      const long kcb = RP_MIN(kb, (long)g->K - pc);
      /* the blocks of the next call: its B block and its first A block */
      const long npc = pc + kb < g->K ? pc + kb : 0, nq0 = npc ? q0 : q1;
      const long ncols = RP_MIN((long)NC_PANELS, r->ppf - nq0) * NR;
      const long nrows = RP_MIN(kd->mc, m1 - m0);
      pf_block next[2] = {pf_none(), pf_none()};
      if (nq0 < r->ppf) {
        next[0] = pf_of(&g->b, nq0 * NR, ncols, npc, kb);
        if (!g->apack) next[1] = pf_of(&g->a, m0, nrows, npc, kb);
      }
      rp_sgemm_pack_panels(kd, &g->b, (int)(q0 * NR), (int)(q1 - q0), NR, pc, kcb, bbuf);
      block_tiles(g, kd, abuf, m0, m1, m1, q0, q1, pc, kcb, bbuf, kcb * NR, next);
    }
  }
}

/* This thread's region of C: whole MR-row tiles (or NR-column panels), so
 * tiles never straddle threads. */
static region thread_region(const gemm_prob *g, const rp_sgemm_kdesc *kd, int ith, int nth) {
  long t0, t1, p0, p1;
  const long np = npanels(g->Nc, kd->nr);
  if (g->split_cols) {
    rp_split(np, ith, nth, &p0, &p1);
    const long m1 = p1 > p0 ? g->M : 0;
    return (region){0, m1, p0, p1, m1, p1};
  }
  rp_split((g->M + kd->mr - 1) / kd->mr, ith, nth, &t0, &t1);
  const long m0 = RP_MIN(t0 * kd->mr, (long)g->M), m1 = RP_MIN(t1 * kd->mr, (long)g->M);
  return (region){m0, m1, 0, np, m1, np};
}

/* A part of one product, then its epilogue on the whole part (unless the
 * part already ran it block by block). */
static void gemm_part(const gemm_prob *g, const rp_sgemm_kdesc *kd, float *abuf, float *bbuf,
                      const region *r, int ith) {
  if (r->m1 <= r->m0 || r->p1 <= r->p0) return;
  const long j0 = r->p0 * kd->nr, j1 = RP_MIN(r->p1 * kd->nr, (long)g->Nc);
  if (g->K > 0) {
    const int epi_done = g->bpack ? prepacked_region(g, kd, abuf, r, ith)
                                  : (onfly_region(g, kd, abuf, bbuf, r), 0);
    if (!epi_done && g->epi) g->epi(g->epi_ctx, r->m0, r->m1, j0, j1, ith);
    return;
  }
  /* K = 0: the sum is empty */
  for (long m = r->m0; m < r->m1; m++)
    for (long j = j0; j < j1; j++) {
      float *o = g->c + m * g->ldc + j;
      float v = g->init ? g->init[j] : 0.0f;
      *o = g->load_c ? v + *o : g->resid ? v + g->resid[m * g->ldc + j] : v;
    }
  if (g->epi) g->epi(g->epi_ctx, r->m0, r->m1, j0, j1, ith);
}

/* ---- work sharing */

enum { SHARE_STATIC, SHARE_ROWS, SHARE_PANELS, SHARE_KORDER };

struct gemm_share {
  int mode;
  long nkb, ngroups, ntiles; /* k-order: k blocks, column blocks (ordered rows: owners), tiles */
  rp_work_range *ranges;     /* [nth], or k-order [ngroups * nkb][nth] */
  _Atomic int *tile_k;       /* k-order: [ngroups][ntiles] k blocks added to each tile; rows
                                with an ordered epilogue: [nth][ntiles] 1 once a thief is done
                                with that tile of that owner's columns (per owner: a tile taken
                                from one owner says nothing of the same rows of another's) */
};

static int share_mode(const gemm_prob *g, int nth) {
  if (!g->balance || nth < 2 || g->K <= 0 || g->M <= 0 || g->Nc <= 0) return SHARE_STATIC;
  if (g->bpack) return SHARE_ROWS;
  if (g->split_cols) return SHARE_PANELS;
  return g->epi ? SHARE_STATIC : SHARE_KORDER; /* an epilogue would need a tile's last block */
}

static void share_shape(struct gemm_share *s, const gemm_prob *g, const rp_sgemm_kdesc *kd,
                        int nth) {
  s->mode = share_mode(g, nth);
  s->nkb = s->ngroups = s->ntiles = 0;
  if (s->mode == SHARE_ROWS && g->epi_order) { /* the tiles others finish for each owner */
    s->ngroups = nth;
    s->ntiles = RP_CEIL_DIV(g->M, kd->mr);
  }
  if (s->mode != SHARE_KORDER) return;
  s->nkb = RP_CEIL_DIV(g->K, block_k(g->K, kd->kc));
  s->ngroups = RP_CEIL_DIV(npanels(g->Nc, kd->nr), NC_PANELS);
  s->ntiles = RP_CEIL_DIV(g->M, kd->mr);
}

static long share_nranges(const struct gemm_share *s, int nth) {
  return s->mode == SHARE_STATIC ? 0 : s->mode == SHARE_KORDER ? s->ngroups * s->nkb * nth : nth;
}

static size_t share_bytes(const struct gemm_share *s, int nth) {
  return rp_sgemm_align64(sizeof *s) +
         rp_sgemm_align64((size_t)share_nranges(s, nth) * sizeof(rp_work_range)) +
         rp_sgemm_align64((size_t)(s->ngroups * s->ntiles) * sizeof(_Atomic int));
}

/* Each thread's static share, as units of the product's kind of sharing. */
static void share_set(struct gemm_share *s, const gemm_prob *g, const rp_sgemm_kdesc *kd,
                      int nth) {
  const long nsets = s->mode == SHARE_KORDER ? s->ngroups * s->nkb : 1;
  for (int t = 0; t < nth; t++) {
    const region r = thread_region(g, kd, t, nth);
    const int empty = r.m1 <= r.m0 || r.p1 <= r.p0;
    long lo = r.m0 / kd->mr, hi = RP_CEIL_DIV(r.m1, kd->mr);
    if (s->mode == SHARE_PANELS) lo = r.p0, hi = r.p1;
    for (long k = 0; k < nsets; k++)
      rp_work_range_set(&s->ranges[k * nth + t], empty ? 0 : lo, empty ? 0 : hi);
  }
  for (long i = 0; i < s->ngroups * s->ntiles; i++)
    atomic_store_explicit(&s->tile_k[i], 0, memory_order_relaxed);
}

/* Waits until tiles [a, b) have their first kbi k blocks added (by whichever
 * threads took them): pause a while, then yield, in case the thread running
 * one has lost its core. */
static void tiles_wait(_Atomic int *added, long a, long b, long kbi) {
  for (long t = a; t < b; t++)
    for (int spins = 0; atomic_load_explicit(&added[t], memory_order_acquire) < kbi; spins++) {
#if defined(__x86_64__) || defined(__i386__)
      if (spins < 4096) {
        __builtin_ia32_pause();
        continue;
      }
#endif
      sched_yield();
    }
}

static void tiles_added(_Atomic int *added, long a, long b, long nblocks) {
  for (long t = a; t < b; t++) atomic_store_explicit(&added[t], (int)nblocks, memory_order_release);
}

/* The in-order part of the epilogue on the owner's rows that others took:
 * the back of its share, from where its own claims stopped, in row order,
 * each block once its thief is done. */
static void ordered_rest(const gemm_ctx *c, int i, int ith, int nth) {
  const gemm_prob *g = &c->prob[i];
  const rp_sgemm_kdesc *kd = c->kd;
  const struct gemm_share *s = c->share[i];
  const region own = thread_region(g, kd, ith, nth);
  if (own.m1 <= own.m0 || own.p1 <= own.p0) return;
  /* empty now: lo = hi = where the thieves' part begins */
  const long cut = (long)(atomic_load_explicit(&s->ranges[ith], memory_order_acquire) >> 32);
  const long end = RP_CEIL_DIV(own.m1, kd->mr), blk = kd->mc / kd->mr;
  const long j0 = own.p0 * kd->nr, j1 = RP_MIN(own.p1 * kd->nr, (long)g->Nc);
  for (long t = cut; t < end; t += blk) {
    const long e = RP_MIN(t + blk, end);
    tiles_wait(s->tile_k + ith * s->ntiles, t, e, 1);
    g->epi_order(g->epi_ctx, t * kd->mr, RP_MIN(e * kd->mr, (long)g->M), j0, j1, ith);
  }
}

/* B prepacked: the thread's own row tiles a block of rows at a time, then the
 * back halves of what the others have not started (over the owner's
 * columns: all, or its panels when the threads split columns). Where the
 * epilogue has an in-order part, a thief runs the rest of it and marks its
 * tiles done, and each owner runs that part on them afterwards. */
static void share_rows(const gemm_ctx *c, int i, int ith, int nth, float *abuf) {
  const gemm_prob *g = &c->prob[i];
  const rp_sgemm_kdesc *kd = c->kd;
  const struct gemm_share *s = c->share[i];
  gemm_prob taken = *g; /* another's rows */
  if (g->epi_order) taken.epi = g->epi_any;
  long a, b, hi;
  for (int v; (v = rp_work_next(s->ranges, ith, nth, kd->mc / kd->mr, &a, &b, &hi)) >= 0;) {
    region r = thread_region(g, kd, v, nth);
    r.m0 = a * kd->mr, r.m1 = RP_MIN(b * kd->mr, (long)g->M);
    r.mpf = RP_MIN(hi * kd->mr, (long)g->M);
    gemm_part(v == ith ? g : &taken, kd, abuf, NULL, &r, ith);
    if (g->epi_order && v != ith) tiles_added(s->tile_k + v * s->ntiles, a, b, 1);
  }
  if (g->epi_order) ordered_rest(c, i, ith, nth);
}

/* B on the fly, columns split: the thread's own column blocks, then the back
 * halves of the others' (each over all rows and k). */
static void share_panels(const gemm_ctx *c, int i, int ith, int nth, float *abuf, float *bbuf) {
  const gemm_prob *g = &c->prob[i];
  long a, b, hi;
  for (int v; (v = rp_work_next(c->share[i]->ranges, ith, nth, NC_PANELS, &a, &b, &hi)) >= 0;) {
    const region r = {0, g->M, a, b, g->M, hi};
    gemm_part(g, c->kd, abuf, bbuf, &r, ith);
  }
}

/* B on the fly, rows split: per column block and k block, the thread packs
 * B's block (once it has rows to run with it), then runs its own row tiles a
 * block at a time and the back halves of the others', each tile after its
 * earlier k blocks. */
static void share_korder(const gemm_ctx *c, int i, int ith, int nth, float *abuf, float *bbuf) {
  const gemm_prob *g = &c->prob[i];
  const rp_sgemm_kdesc *kd = c->kd;
  const struct gemm_share *s = c->share[i];
  const int MR = kd->mr, NR = kd->nr;
  const long kb = block_k(g->K, kd->kc), np = npanels(g->Nc, NR), blk = kd->mc / MR;
  const region own = thread_region(g, kd, ith, nth);
  const pf_block none[2] = {pf_none(), pf_none()};
  for (long qi = 0; qi < s->ngroups; qi++) {
    const long q0 = qi * NC_PANELS, q1 = RP_MIN(q0 + NC_PANELS, np);
    _Atomic int *added = s->tile_k + qi * s->ntiles;
    for (long kbi = 0; kbi < s->nkb; kbi++) {
      const long pc = kbi * kb, kcb = RP_MIN(kb, (long)g->K - pc);
      /* what the thread's last own block prefetches: the next B block (the
       * next k block's or group's) and its own first rows' A block there */
      const long npc = kbi + 1 < s->nkb ? pc + kb : 0, nq0 = kbi + 1 < s->nkb ? q0 : q1;
      pf_block next[2] = {pf_none(), pf_none()};
      if (nq0 < np) {
        next[0] = pf_of(&g->b, nq0 * NR, RP_MIN((long)NC_PANELS, np - nq0) * NR, npc, kb);
        if (!g->apack) next[1] = pf_of(&g->a, own.m0, RP_MIN(kd->mc, own.m1 - own.m0), npc, kb);
      }
      rp_work_range *r = s->ranges + (qi * s->nkb + kbi) * nth;
      int packed = 0;
      long a, b, hi;
      for (int v; (v = rp_work_next(r, ith, nth, blk, &a, &b, &hi)) >= 0;) {
        if (!packed)
          rp_sgemm_pack_panels(kd, &g->b, (int)(q0 * NR), (int)(q1 - q0), NR, pc, kcb, bbuf);
        /* a straggler under test holds its first tiles, so that the others
         * take their later k blocks and wait for them */
        if (!packed && qi == 0 && kbi == 0) rp_work_straggle(ith);
        packed = 1;
        tiles_wait(added, a, b, kbi);
        const long m0 = a * MR, m1 = RP_MIN(b * MR, (long)g->M), mpf = RP_MIN(hi * MR, (long)g->M);
        block_tiles(g, kd, abuf, m0, m1, mpf, q0, q1, pc, kcb, bbuf, kcb * NR,
                    v == ith && b >= hi ? next : none);
        tiles_added(added, a, b, kbi + 1);
      }
    }
  }
}

/* ---- the job */

static void gemm_task(void *vctx, int ith, int nth) {
  const gemm_ctx *c = vctx;
  float *abuf = (float *)(c->bufs + (size_t)ith * c->buf_stride);
  float *bbuf = (float *)((char *)abuf + rp_sgemm_thread_bytes(c->kd, 0));
  for (int i = 0; i < c->nprob; i++) {
    const int mode = nth == c->share_nth ? c->share[i]->mode : SHARE_STATIC;
    if (mode == SHARE_ROWS || mode == SHARE_PANELS) rp_work_straggle(ith);
    switch (mode) {
      case SHARE_ROWS: share_rows(c, i, ith, nth, abuf); break;
      case SHARE_PANELS: share_panels(c, i, ith, nth, abuf, bbuf); break;
      case SHARE_KORDER: share_korder(c, i, ith, nth, abuf, bbuf); break;
      default: {
        const region r = thread_region(&c->prob[i], c->kd, ith, nth);
        gemm_part(&c->prob[i], c->kd, abuf, bbuf, &r, ith);
      }
    }
  }
  if (c->dbias) {
    long lo, hi;
    rp_kern_split_cols(c->OC, ith, nth, &lo, &hi);
    rp_matmul_dbias_cols(c->dbias, c->dout, lo, hi, c->N, c->OC);
  }
}

/* The work-sharing state, kept between calls like sgemm.c's packs (taken
 * after them: one GEMM at a time holds both). */
static rp_kern_ws g_share_ws = RP_KERN_WS_INIT("sgemm work sharing");

void rp_sgemm_driver_ws_free(void) { rp_kern_ws_free(&g_share_ws); }

void rp_sgemm_job_run(gemm_ctx *c, rp_pool *pool, long work) {
  const int nth = pool ? rp_pool_size(pool) : 1;
  struct gemm_share shape[2];
  size_t bytes = 0;
  const int a_inplace = rp_sgemm_a_inplace(c->kd->isa);
  for (int i = 0; i < c->nprob; i++) {
    c->prob[i].a_inplace = a_inplace;
    share_shape(&shape[i], &c->prob[i], c->kd, nth);
    bytes += share_bytes(&shape[i], nth);
  }
  char *p = rp_kern_ws_acquire(&g_share_ws, bytes);
  for (int i = 0; i < c->nprob; i++) {
    struct gemm_share *s = c->share[i] = (struct gemm_share *)p;
    *s = shape[i];
    p += rp_sgemm_align64(sizeof *s);
    s->ranges = (rp_work_range *)p;
    p += rp_sgemm_align64((size_t)share_nranges(s, nth) * sizeof(rp_work_range));
    s->tile_k = (_Atomic int *)p;
    p += rp_sgemm_align64((size_t)(s->ngroups * s->ntiles) * sizeof(_Atomic int));
    share_set(s, &c->prob[i], c->kd, nth);
  }
  c->share_nth = nth;
  rp_kern_run(pool, gemm_task, c, work);
  rp_kern_ws_release(&g_share_ws);
}
