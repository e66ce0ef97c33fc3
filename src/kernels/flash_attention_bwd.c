/* Flash attention backward, key block outer, query blocks inner (FlashAttention-2
 * order). For key block j with K_j, V_j packed transposed once, and each query
 * block i that can see it:
 *   S = Q_i K_j^T,  P = exp(scale*S - L_i)     (recomputed from the saved L)
 *   dV_j += P^T dO_i,  dP = dO_i V_j^T,  dS = scale * P * (dP - D_i)
 *   dQ_i += dS K_j,    dK_j += dS^T Q_i
 * with D_i = rowsum(dO_i * O_i) given by the caller (the FINAL O's, so the same
 * code is the ring's block backward), or, for the whole attention over short
 * heads, computed by each head's task from O (rp_flash_bwd_take_dsum). dK_j
 * and dV_j accumulate straight into the output rows (the GEMMs take their row
 * stride), which the task owns, in query-block order. The per-thread tiles
 * they once went through cost a memset and an add pass per key block: T = 256,
 * 24 heads, one thread, those two passes simply dropped (wrong results, an
 * upper bound) saved 7 % of the backward, accumulating in place 2.5 %. The
 * products that add to dQ, dK and dV add C after their k loop
 * (RP_FLASH_ADD_COLD): those rows arrive from L2 or memory. Every
 * GEMM operand is packed into per-thread scratch first (K_j rows once per key
 * block; Q and dO rows once per head under the head split, per tile under the
 * key-block split): in the model's qkv layout a head's rows lie 3C floats
 * apart, a stride that aliases in L1 and made the micro-kernel stream its B
 * panels from L2.
 *
 * Who writes what (no two workers ever write the same row without a reduction):
 * - split by head: a task is one (b, h) and owns that head's dQ, dK and dV
 *   (short heads the threads divide evenly: each thread its own contiguous
 *   share, rp_flash_own_heads, and the back halves of the others' unstarted
 *   heads once its own are done, work_range.h);
 * - split by key block (few heads for the threads): a task is (b, h, key block)
 *   and owns those dK/dV rows; its dQ contribution to a query block is computed
 *   into a per-thread [bq, HS] tile and added to dq in key-block order: a turn
 *   counter per (b, h, query block) says which key block may add next. The key
 *   blocks that see a query block are 0..K, tasks are taken key block first,
 *   so the key block a task waits for was taken before it and waits only on an
 *   earlier one: no deadlock, and the sum's order (hence dq bit for bit) does
 *   not depend on the threads. No [threads, B*NH, Tq, HS] partials, no
 *   reduction pass. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "flash_attention_internal.h"
#include "flash_attention_mask.h"
#include "ringpipe/rp_arena.h"
#include "work_range.h"

/* bf16 products (pl.bf16): each operand in the pair layout its product reads
 * (flash_attention_bf16.c). A query block's Q and dO are needed twice each:
 * as rows (A of S = Q K^T, dP = dO V^T) and as pair rows (B of dK += dS^T Q,
 * dV += P^T dO); a key block's K as transposed pairs (B of S) and pair rows
 * (B of dQ += dS K), V as transposed pairs (B of dP). P and dS are rounded per
 * strip: P as pair rows (A of dV, transposed), dS as rows (A of dQ) and pair
 * rows (A of dK, transposed). */
typedef struct {
  uint32_t *kt, *vt, *kpr;       /* [HS/2][bk], [HS/2][bk], [bk/2][HS] */
  uint32_t *ppr, *ds, *dspr;     /* [bq/2][bk], [bq][bk/2], [bq/2][bk] */
} bf16_tiles;

/* Where one key block's dK and dV rows accumulate: the output's own rows
 * (NULL when that gradient is not wanted). */
typedef struct {
  float *dk, *dv;
  long ldk, ldv;
} kv_grads;

typedef struct {
  rp_flash_problem pr;
  rp_flash_view dout, lse, dsum, dq, dk, dv;
  rp_flash_view o;         /* own_dsum: the output rows D is taken from */
  int own_dsum;            /* each head task writes its D (rp_flash_bwd_take_dsum) */
  rp_flash_plan pl;
  rp_flash_split split;    /* resolved: HEAD or KEYBLOCK */
  int own_heads;           /* HEAD: each thread takes its own share (rp_flash_own_heads) */
  rp_work_range *heads;    /* own_heads: [nthreads], each thread's heads not yet started */
  float *scratch;          /* per thread: S, dS [bq*bk]; K^T, V^T [HS*bk]; K [bk*HS];
                              Q, dO, dQ tile [bq*HS] */
  long scratch_floats;
  float *head_rows;        /* HEAD: per thread, the head's packed Q and dO [2][Tq][HS]
                              (bf16: [2][nqb] query-block forms, see qform_words) */
  long head_rows_floats;
  long qform_words;        /* bf16: one query block's rows [bq][HS/2] + pair rows
                              [bq/2][HS] */
  long bf16_words;         /* bf16: the per-thread bf16_tiles and Q, dO forms */
  atomic_int *dq_turn;     /* KEYBLOCK with dq: [B*NH][nqb], the key block whose
                              dQ contribution to that query block goes next */
  int nthreads;
  long ntasks;
  atomic_long next;
} bwd_ctx;

/* Q or dO rows [0, nq) of a query block into dst: fp32 rows [nq][HS], or
 * (bf16) rows [nq][HS/2] then pair rows [bq/2][HS]. */
static void pack_query_rows(const bwd_ctx *c, float *dst, const float *src, long ld, int nq) {
  const int HS = c->pr.HS;
  if (!c->pl.bf16) {
    rp_flash_pack_rows(dst, src, ld, nq, HS);
    return;
  }
  uint32_t *rows = (uint32_t *)dst, *pairs = rows + (long)c->pl.bq * rp_flash_pairs(HS);
  c->pl.bf16->rows(rows, rp_flash_pairs(HS), src, ld, nq, HS);
  c->pl.bf16->pair_rows(pairs, HS, src, ld, nq, HS, rp_flash_pairs(nq));
}

/* Where query block qb's packed rows start in a head's buffer (HEAD split). */
static const float *query_block_rows(const bwd_ctx *c, const float *head, int qb) {
  return c->pl.bf16 ? head + qb * c->qform_words : head + (long)qb * c->pl.bq * c->pr.HS;
}

/* The tile's gradient products with bf16 operands: bwd_tile_grads' order and
 * strips. qf, dof: the query block's forms (pack_query_rows). */
static void bwd_tile_grads_bf16(const bwd_ctx *c, const float *S, float *dS, const bf16_tiles *t,
                                const float *qf, const float *dof, const float *D, long i0,
                                int nq, long j0, int nk, int full, float *dq, long ldq,
                                const kv_grads *g) {
  const rp_flash_bf16_ops *op = c->pl.bf16;
  const int HS = c->pr.HS, bk = c->pl.bk, hp = rp_flash_pairs(HS), ldh = rp_flash_pairs(bk);
  const uint32_t *q16 = (const uint32_t *)qf, *qpr = q16 + (long)c->pl.bq * hp;
  const uint32_t *do16 = (const uint32_t *)dof, *dopr = do16 + (long)c->pl.bq * hp;
  const int need_ds = dq != NULL || c->dk.p != NULL;
  for (int r0 = 0, hh; r0 < nq; r0 += hh) {  /* r0 is even: strips are 24 rows */
    hh = rp_flash_strip_rows(full, nq, r0);
    int ns = rp_flash_strip_keys(&c->pr, full, i0, r0, hh, j0, nk);
    if (ns == 0) continue;
    const float *s = S + (long)r0 * bk;
    float *ds = dS + (long)r0 * bk;
    const int hpr = rp_flash_pairs(hh);
    if (c->dv.p) {
      op->pair_rows(t->ppr, bk, s, bk, hh, ns, hpr);
      op->gemm(ns, HS, hpr, t->ppr, 1, bk, dopr + (long)(r0 / 2) * HS, HS, g->dv, g->ldv,
               RP_FLASH_ADD_COLD);
    }
    if (!need_ds) continue;
    op->gemm(hh, ns, hp, do16 + (long)r0 * hp, hp, 1, t->vt, bk, ds, bk, 0);
    for (int r = 0; r < hh; r++)
      c->pl.ops->dsoft(ds + (long)r * bk, s + (long)r * bk, ns, D[r0 + r], c->pl.scale);
    if (dq) {
      op->rows(t->ds, ldh, ds, bk, hh, ns);
      op->gemm(hh, HS, rp_flash_pairs(ns), t->ds, ldh, 1, t->kpr, HS, dq + r0 * ldq, ldq,
               RP_FLASH_ADD_COLD);
    }
    if (c->dk.p) {
      op->pair_rows(t->dspr, bk, ds, bk, hh, ns, hpr);
      op->gemm(ns, HS, hpr, t->dspr, 1, bk, qpr + (long)(r0 / 2) * HS, HS, g->dk, g->ldk,
               RP_FLASH_ADD_COLD);
    }
  }
}

/* Whether a tile's dV and dK products run by key strips after its row strips
 * (bwd_tile_key_strips): an fp32 causal tile that straddles the diagonal.
 * Document ranges (not monotonic in the row), unmasked tiles (one strip of
 * all rows) and bf16 products keep the row strips. */
static int bwd_by_key_strips(const bwd_ctx *c, int full) {
  return !full && !c->pl.bf16 && c->pr.vis == RP_FLASH_VIS_CAUSAL;
}

/* The keys [0, n) any row of a causal tile sees: its last row's. */
static int bwd_tile_keys(const bwd_ctx *c, long i0, int nq, long j0, int nk) {
  return rp_flash_visible(&c->pr, i0 + nq - 1, j0, nk);
}

/* dV += P^T dO and dK += dS^T Q of a diagonal tile by strips of keys: keys
 * [k0, k0 + RP_FLASH_STRIP) against the rows from the first that sees key k0
 * on, whose P and dS are 0 wherever masked up to the tile's ns_max keys. By
 * row strips these two products had an inner dimension of 24 rows and loaded
 * and stored their dV or dK block once per strip; by key strips the inner
 * dimension is every row that sees the keys. One thread, B1 NH6 causal,
 * bench_flash_cpu, medians of alternating runs: backward 12.09 -> 11.90 ms
 * at T = 1024 (5 pairs), 4.14 -> 4.06 ms at T = 256 with 24 heads (4 pairs);
 * in rdtsc counts the diagonal tiles' dK went from 2.52 to 1.83 cycles a
 * visible pair (unmasked tiles: 1.58). */
static void bwd_tile_key_strips(const bwd_ctx *c, const float *S, const float *dS,
                                const float *qp, const float *dop, long i0, int nq, long j0,
                                int ns_max, const kv_grads *g) {
  const rp_flash_ops *ops = c->pl.ops;
  const int HS = c->pr.HS, bk = c->pl.bk;
  for (int k0 = 0; k0 < ns_max; k0 += RP_FLASH_STRIP) {
    const int ks = RP_MIN(RP_FLASH_STRIP, ns_max - k0);
    const long r0 = RP_MIN(RP_MAX(0L, rp_flash_first_query(&c->pr, j0 + k0) - i0), (long)nq);
    const int rows = (int)(nq - r0);
    if (rows <= 0) continue;
    const long at = r0 * bk + k0;
    if (g->dv)
      ops->gemm(ks, HS, rows, S + at, 1, bk, dop + r0 * HS, HS, g->dv + k0 * g->ldv, g->ldv,
                RP_FLASH_ADD_COLD);
    if (g->dk)
      ops->gemm(ks, HS, rows, dS + at, 1, bk, qp + r0 * HS, HS, g->dk + k0 * g->ldk, g->ldk,
                RP_FLASH_ADD_COLD);
  }
}

/* The gradient GEMMs of one tile given P in S, strip by strip (RP_FLASH_STRIP):
 * dV += P^T dO, dP = dO V^T, dS = softmax'(P, dP), dQ += dS K, dK += dS^T Q.
 * Each strip's dS is computed over the keys it multiplies, so the columns its
 * GEMMs read are all written (P is 0 past a row's visible keys, so dS is too).
 * A causal diagonal tile runs dV and dK afterwards by key strips, its dS
 * zeroed past each strip's keys up to the tile's (bwd_by_key_strips). */
static void bwd_tile_grads(const bwd_ctx *c, const float *S, float *dS, const float *vt,
                           const float *kp, const float *qp, const float *dop, const float *D,
                           long i0, int nq, long j0, int nk, int full, float *dq, long ldq,
                           const kv_grads *g) {
  const rp_flash_ops *ops = c->pl.ops;
  const int HS = c->pr.HS, bk = c->pl.bk;
  const int need_ds = dq != NULL || c->dk.p != NULL;
  const int by_keys = bwd_by_key_strips(c, full);
  const int ns_max = by_keys ? bwd_tile_keys(c, i0, nq, j0, nk) : 0;
  for (int r0 = 0, hh; r0 < nq; r0 += hh) {
    hh = rp_flash_strip_rows(full, nq, r0);
    int ns = rp_flash_strip_keys(&c->pr, full, i0, r0, hh, j0, nk);
    if (ns == 0) continue;  /* rows that see nothing here: before every key strip's rows */
    const float *s = S + (long)r0 * bk;
    float *ds = dS + (long)r0 * bk;
    if (g->dv && !by_keys)
      ops->gemm(ns, HS, hh, s, 1, bk, dop + r0 * HS, HS, g->dv, g->ldv, RP_FLASH_ADD_COLD);
    if (!need_ds) continue;
    ops->gemm(hh, ns, HS, dop + r0 * HS, HS, 1, vt, bk, ds, bk, 0);
    for (int r = 0; r < hh; r++) {
      ops->dsoft(ds + (long)r * bk, s + (long)r * bk, ns, D[r0 + r], c->pl.scale);
      if (ns < ns_max) memset(ds + (long)r * bk + ns, 0, sizeof(float) * (size_t)(ns_max - ns));
    }
    if (dq) ops->gemm(hh, HS, ns, ds, bk, 1, kp, HS, dq + r0 * ldq, ldq, RP_FLASH_ADD_COLD);
    if (g->dk && !by_keys)
      ops->gemm(ns, HS, hh, ds, 1, bk, qp + r0 * HS, HS, g->dk, g->ldk, RP_FLASH_ADD_COLD);
  }
  if (by_keys) bwd_tile_key_strips(c, S, dS, qp, dop, i0, nq, j0, ns_max, g);
}

static void dq_wait_turn(atomic_int *turn, int kb) {
  for (int spins = 0; atomic_load_explicit(turn, memory_order_acquire) != kb; spins++)
    if (spins > 64) sched_yield();
}

/* dq rows of a query block += tile, when it is key block kb's turn (KEYBLOCK). */
static void dq_add_in_turn(atomic_int *turn, int kb, float *dq, long ldq, const float *tile,
                           int nq, int HS) {
  dq_wait_turn(turn, kb);
  for (int r = 0; r < nq; r++)
    for (int d = 0; d < HS; d++) dq[r * ldq + d] += tile[(long)r * HS + d];
  atomic_store_explicit(turn, kb + 1, memory_order_release);
}

/* A key block that no row of the query block sees (another document) still
 * takes its turn, adding nothing: with document masks the key blocks seeing a
 * query block are not 0..K, and a later one would otherwise wait forever. */
static void dq_pass_turn(atomic_int *turn, int kb) {
  dq_wait_turn(turn, kb);
  atomic_store_explicit(turn, kb + 1, memory_order_release);
}

/* One key block of one head against every query block that sees it. dqb points
 * at query row 0 of this head's dQ target, rows ldq apart. */
static void bwd_key_block(bwd_ctx *c, long b, long h, int kb, float *dqb, long ldq, float *ws,
                          const float *hq, const float *hdo) {
  const rp_flash_problem *pr = &c->pr;
  const rp_flash_plan *pl = &c->pl;
  const rp_flash_ops *ops = pl->ops;
  const int HS = pr->HS, bq = pl->bq, bk = pl->bk;
  const long j0 = (long)kb * bk;
  const int nk = (int)RP_MIN((long)bk, pr->Tk - j0);
  /* first query row that sees key j0 */
  long i_first = rp_flash_first_query(pr, j0);
  if (i_first >= pr->Tq) return;

  float *S = ws, *dS = S + (long)bq * bk, *kt = dS + (long)bq * bk, *vt = kt + (long)HS * bk;
  float *kp = vt + (long)HS * bk;
  float *qp = kp + (long)bk * HS, *dop = qp + (long)bq * HS, *dqt = dop + (long)bq * HS;
  bf16_tiles t16 = {0};
  if (pl->bf16) {  /* after the fp32 layout: K, V forms, P / dS strips, Q and dO forms */
    const long hp = rp_flash_pairs(HS), qp2 = rp_flash_pairs(bq);
    t16.kt = (uint32_t *)(dqt + (long)bq * HS);
    t16.vt = t16.kt + hp * bk;
    t16.kpr = t16.vt + hp * bk;
    t16.ppr = t16.kpr + (long)rp_flash_pairs(bk) * HS;
    t16.ds = t16.ppr + qp2 * bk;
    t16.dspr = t16.ds + (long)bq * rp_flash_pairs(bk);
    qp = (float *)(t16.dspr + qp2 * bk);
    dop = qp + c->qform_words;
  }
  /* KEYBLOCK: dQ goes through the ordered tile (see the file comment) */
  atomic_int *turn = c->dq_turn && dqb ? c->dq_turn + (b * pr->NH + h) * pl->nqb : NULL;
  const float *k = rp_flash_row(pr->k, b, j0, h, HS), *v = rp_flash_row(pr->v, b, j0, h, HS);
  const int need_ds = dqb != NULL || c->dk.p != NULL;
  if (pl->bf16) {
    pl->bf16->pack_t(t16.kt, bk, k, pr->k.ld, nk, HS);
    if (dqb) pl->bf16->pair_rows(t16.kpr, HS, k, pr->k.ld, nk, HS, rp_flash_pairs(nk));
    if (need_ds) pl->bf16->pack_t(t16.vt, bk, v, pr->v.ld, nk, HS);
  } else {
    ops->pack_t(kt, bk, k, pr->k.ld, nk, HS);
    if (dqb) rp_flash_pack_rows(kp, k, pr->k.ld, nk, HS);
    if (need_ds) ops->pack_t(vt, bk, v, pr->v.ld, nk, HS);
  }
  const kv_grads g = {c->dk.p ? rp_flash_row(c->dk, b, j0, h, HS) : NULL,
                      c->dv.p ? rp_flash_row(c->dv, b, j0, h, HS) : NULL, c->dk.ld, c->dv.ld};

  for (int qb = (int)(i_first / bq); qb < pl->nqb; qb++) {
    const long i0 = (long)qb * bq;
    const int nq = (int)RP_MIN((long)bq, pr->Tq - i0);
    if (!rp_flash_tile_any(pr, b, i0, nq, j0, nk)) {  /* between documents */
      if (turn) dq_pass_turn(turn + qb, kb);
      continue;
    }
    const float *L = rp_flash_stat(c->lse, b, h, i0);
    const float *D = rp_flash_stat(c->dsum, b, h, i0);
    /* hq, hdo: the whole head packed once by the caller (HEAD); else per tile */
    if (!hq) pack_query_rows(c, qp, rp_flash_row(pr->q, b, i0, h, HS), pr->q.ld, nq);
    if (!hdo) pack_query_rows(c, dop, rp_flash_row(c->dout, b, i0, h, HS), c->dout.ld, nq);
    const float *qt = hq ? query_block_rows(c, hq, qb) : qp;
    const float *dot = hdo ? query_block_rows(c, hdo, qb) : dop;
    const int full = rp_flash_tile_full(pr, b, i0, nq, j0, nk);
    const int hp = rp_flash_pairs(HS);
    for (int r0 = 0, hh; r0 < nq; r0 += hh) {   /* strips: see RP_FLASH_STRIP */
      hh = rp_flash_strip_rows(full, nq, r0);
      int ns = rp_flash_strip_keys(pr, full, i0, r0, hh, j0, nk);
      if (ns == 0) continue;
      if (pl->bf16)
        pl->bf16->gemm(hh, ns, hp, (const uint32_t *)qt + (long)r0 * hp, hp, 1, t16.kt, bk,
                       S + (long)r0 * bk, bk, 0);
      else
        ops->gemm(hh, ns, HS, qt + r0 * HS, HS, 1, kt, bk, S + (long)r0 * bk, bk, 0);
    }
    /* the key strips of a diagonal tile read P up to the tile's keys */
    const int p_keys = bwd_by_key_strips(c, full) ? bwd_tile_keys(c, i0, nq, j0, nk) : 0;
    for (int r0 = 0, hh; r0 < nq; r0 += hh) {
      hh = rp_flash_strip_rows(full, nq, r0);
      /* the gradient products read the first ns columns of the strip's rows:
       * only those need their zeros */
      const int ns = RP_MAX(rp_flash_strip_keys(pr, full, i0, r0, hh, j0, nk), p_keys);
      for (int r = r0; r < r0 + hh; r++) {
        float *s = S + (long)r * bk;
        int a = 0, n = full ? nk : rp_flash_row_span(pr, b, i0 + r, j0, nk, &a);
        if (L[r] == -INFINITY) n = 0;  /* a row that saw no key anywhere */
        if (n > 0) ops->expsum(s + a, n, pl->scale, L[r]);
        if (n < ns) rp_flash_zero_outside(s, a, n, ns);
      }
    }
    if (turn) memset(dqt, 0, sizeof(float) * (size_t)nq * HS);
    float *dq_tile = turn ? dqt : dqb ? dqb + i0 * ldq : NULL;
    if (pl->bf16)
      bwd_tile_grads_bf16(c, S, dS, &t16, qt, dot, D, i0, nq, j0, nk, full, dq_tile,
                          turn ? HS : ldq, &g);
    else
      bwd_tile_grads(c, S, dS, vt, kp, qt, dot, D, i0, nq, j0, nk, full, dq_tile,
                     turn ? HS : ldq, &g);
    if (turn) dq_add_in_turn(turn + qb, kb, dqb + i0 * ldq, ldq, dqt, nq, HS);
  }
}

/* One head's Q or dO rows, packed once (HEAD split): fp32 rows [Tq][HS], or
 * bf16 one query block after another. */
static void pack_head_rows(const bwd_ctx *c, float *dst, rp_flash_view src, long b, long h) {
  const int HS = c->pr.HS, Tq = c->pr.Tq;
  if (!c->pl.bf16) {
    rp_flash_pack_rows(dst, rp_flash_row(src, b, 0, h, HS), src.ld, Tq, HS);
    return;
  }
  for (int qb = 0; qb < c->pl.nqb; qb++) {
    const long i0 = (long)qb * c->pl.bq;
    pack_query_rows(c, dst + qb * c->qform_words, rp_flash_row(src, b, i0, h, HS), src.ld,
                    (int)RP_MIN((long)c->pl.bq, Tq - i0));
  }
}

int rp_flash_bwd_take_dsum(void *vctx, rp_flash_view o) {
  bwd_ctx *c = vctx;
  /* short heads each thread takes its share of (rp_flash_own_heads): there
   * the pass cost 4-5 % of the backward; with long heads, one head a task, it
   * measured no faster (B 1, T = 2048) and stays */
  c->own_dsum = c->split == RP_FLASH_SPLIT_HEAD && c->own_heads;
  c->o = o;
  return c->own_dsum;
}

/* D = rowsum(dO O) for head (b, h)'s query rows: rp_flash_rowdot's dot on the
 * same rows, so the same bits; done as the head starts, its dO rows about to
 * be packed, rather than in a pass over every head before the backward
 * (default model, B 4 T 256, 2 threads: that pass took 0.14 ms of the 2.7 ms
 * backward with the data out of the caches). */
static void head_rowdot(const bwd_ctx *c, long b, long h) {
  const int HS = c->pr.HS;
  for (long t = 0; t < c->pr.Tq; t++)
    *rp_flash_stat(c->dsum, b, h, t) =
        c->pl.ops->dot(rp_flash_row(c->dout, b, t, h, HS), rp_flash_row(c->o, b, t, h, HS), HS);
}

/* HEAD split: all of head t's gradients (b = t / NH, h = t % NH). */
static void bwd_head(bwd_ctx *c, long t, int ith, float *ws) {
  const int HS = c->pr.HS;
  long b = t / c->pr.NH, h = t % c->pr.NH;
  float *dqb = c->dq.p ? rp_flash_row(c->dq, b, 0, h, HS) : NULL;
  float *hq = c->head_rows + ith * c->head_rows_floats;
  float *hdo = hq + c->head_rows_floats / 2;
  if (c->own_dsum) head_rowdot(c, b, h);
  pack_head_rows(c, hq, c->pr.q, b, h);
  pack_head_rows(c, hdo, c->dout, b, h);
  for (int kb = 0; kb < c->pl.nkb; kb++) bwd_key_block(c, b, h, kb, dqb, c->dq.ld, ws, hq, hdo);
}

void rp_flash_bwd_run(void *vctx, int ith, int nth) {
  bwd_ctx *c = vctx;
  const long BNH = (long)c->pr.B * c->pr.NH;
  const int HS = c->pr.HS;
  float *ws = c->scratch + ith * c->scratch_floats;
  if (c->own_heads && nth == c->nthreads) {
    /* its own heads, then the back halves of the others' unstarted ones (a
     * head's gradients do not depend on the thread): work_range.h */
    long a, b, hi;
    rp_work_straggle(ith);
    while (rp_work_next(c->heads, ith, nth, 1, &a, &b, &hi) >= 0)
      for (long t = a; t < b; t++) bwd_head(c, t, ith, ws);
    return;
  }
  for (;;) {
    long t = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
    if (t >= c->ntasks) break;
    if (c->split == RP_FLASH_SPLIT_HEAD) {
      bwd_head(c, t, ith, ws);
    } else {
      /* first key blocks first: under causal masking they see the most queries */
      int kb = (int)(t / BNH);
      long bh = t % BNH;
      long b = bh / c->pr.NH, h = bh % c->pr.NH;
      float *dqb = c->dq.p ? rp_flash_row(c->dq, b, 0, h, HS) : NULL;
      bwd_key_block(c, b, h, kb, dqb, c->dq.ld, ws, NULL, NULL);
    }
  }
}

static rp_flash_split resolve_split(rp_flash_split want, long BNH, int nthreads) {
  if (want != RP_FLASH_SPLIT_AUTO) return want;
  /* whole heads balance when they divide evenly or are many; otherwise key
   * blocks give every thread work at the price of a dQ reduction */
  if (nthreads <= 1 || BNH % nthreads == 0 || BNH >= 4L * nthreads) return RP_FLASH_SPLIT_HEAD;
  return RP_FLASH_SPLIT_KEYBLOCK;
}

rp_status rp_flash_bwd_prepare(void **out, const rp_flash_problem *pr, rp_flash_view dout,
                               rp_flash_view lse, rp_flash_view dsum, rp_flash_view dq,
                               rp_flash_view dk, rp_flash_view dv, int nthreads) {
  *out = NULL;
  RP_TRY(rp_flash_check_problem(pr));
  const long width = (long)pr->NH * pr->HS;
  if (!dout.p || !lse.p || !dsum.p || dout.ld < width || lse.ld < pr->Tq || dsum.ld < pr->Tq)
    return rp_err(RP_EINVAL, "flash backward needs dout (row stride >= NH*HS = %ld, got %ld), "
                  "lse and dsum (head stride >= Tq = %d, got %ld and %ld)",
                  width, dout.ld, pr->Tq, lse.ld, dsum.ld);
  if ((dq.p && dq.ld < width) || (dk.p && dk.ld < width) || (dv.p && dv.ld < width))
    return rp_err(RP_EINVAL, "flash gradient views need row strides >= NH*HS = %ld", width);
  if (pr->Tq == 0 || pr->Tk == 0 || pr->vis == RP_FLASH_VIS_NONE) return RP_OK;
  if (!dq.p && !dk.p && !dv.p) return RP_OK;
  bwd_ctx *c = calloc(1, sizeof *c);
  if (!c) return rp_err(RP_ENOMEM, "out of memory for a flash backward context");
  c->pr = *pr;
  c->dout = dout;
  c->lse = lse;
  c->dsum = dsum;
  c->dq = dq;
  c->dk = dk;
  c->dv = dv;
  rp_flash_make_plan(&c->pl, pr);
  const long BNH = (long)pr->B * pr->NH;
  c->split = resolve_split(c->pl.split, BNH, nthreads);
  c->nthreads = nthreads;
  c->ntasks = c->split == RP_FLASH_SPLIT_HEAD ? BNH : BNH * c->pl.nkb;
  c->own_heads = c->split == RP_FLASH_SPLIT_HEAD &&
                 rp_flash_own_heads(pr, nthreads, rp_flash_l2_bytes(pr->cfg));
  if (c->own_heads) c->heads = rp_work_ranges_split(BNH, nthreads);
  atomic_init(&c->next, 0);
  const long bq = c->pl.bq, bk = c->pl.bk, HS = pr->HS;
  if (c->pl.bf16) {  /* see bwd_key_block's layout */
    const long hp = rp_flash_pairs((int)HS), qp2 = rp_flash_pairs((int)bq);
    const long kp2 = rp_flash_pairs((int)bk);
    c->qform_words = (bq * hp + qp2 * HS + 15) & ~15L;
    c->bf16_words = 2 * hp * bk + kp2 * HS + 2 * qp2 * bk + bq * kp2 + 2 * c->qform_words;
  }
  c->scratch_floats = (2 * bq * bk + 3 * HS * bk + 3 * HS * bq + c->bf16_words + 15) & ~15L;
  c->scratch = rp_scratch_alloc(sizeof(float) * (size_t)(c->scratch_floats * nthreads));
  int ok = c->scratch != NULL && (!c->own_heads || c->heads);
  if (ok && c->split == RP_FLASH_SPLIT_HEAD) {
    c->head_rows_floats = c->pl.bf16 ? 2L * c->pl.nqb * c->qform_words
                                     : (2L * pr->Tq * HS + 15) & ~15L;
    c->head_rows = rp_scratch_alloc(sizeof(float) * (size_t)(c->head_rows_floats * nthreads));
    ok = c->head_rows != NULL;
  }
  if (ok && c->split == RP_FLASH_SPLIT_KEYBLOCK && dq.p) {
    long n = BNH * c->pl.nqb;
    c->dq_turn = malloc(sizeof(atomic_int) * (size_t)n);
    ok = c->dq_turn != NULL;
    for (long i = 0; ok && i < n; i++) atomic_init(&c->dq_turn[i], 0);
  }
  if (!ok) {
    rp_scratch_free(c->scratch);
    rp_scratch_free(c->head_rows);
    free(c->dq_turn);
    free(c->heads);
    free(c);
    return rp_err(RP_ENOMEM, "out of memory for flash backward workspace (B*NH=%ld, T=%d, HS=%d)",
                  BNH, pr->Tq, pr->HS);
  }
  *out = c;
  return RP_OK;
}

rp_status rp_flash_bwd_finish(void *vctx, rp_pool *pool) {
  bwd_ctx *c = vctx;
  if (!c) return RP_OK;
  (void)pool;
  free(c->dq_turn);
  free(c->heads);
  rp_scratch_free(c->head_rows);
  rp_scratch_free(c->scratch);
  free(c);
  return RP_OK;
}
