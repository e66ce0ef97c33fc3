/* Flash attention forward: for each (batch, head, query block) stream the key
 * blocks through cache-sized tiles with the online softmax.
 *
 * Per query row the tile loop keeps the running max m (in scaled units) and the
 * running sum l; when m grows the output accumulator (the O rows themselves) is
 * rescaled by exp(m_old - m_new). At the end O /= l and L = m + log l. A causal
 * query block visits only key blocks that hold a visible key, and only tiles that
 * straddle the diagonal pay for per-row masking (visible prefix lengths; no -inf
 * arithmetic, so rows that see nothing stay exactly 0 and L = -inf).
 *
 * Tasks are (b, h, query block), taken from an atomic counter head by head,
 * heaviest causal blocks of each head first; each task writes only its own O
 * rows and L entries. Short heads that the threads divide evenly go instead
 * to each thread as its own contiguous share (rp_flash_own_heads). K is needed
 * transposed (the micro-kernel wants B with
 * contiguous columns) and V as contiguous rows: in the model's qkv layout V's
 * rows of one head lie 3C floats apart, a stride that maps every row to the
 * same few L1 sets, so the P V product streamed V from L2. Each (b, h, key
 * block) is packed once, K^T and V side by side, by whichever worker first
 * needs it, into the slot of its head: group + nthreads - 1 head slots
 * (tasks go head by head, so that many hold the heads in flight), not B*NH of
 * them. The whole-problem buffer was as large as K and V together and,
 * allocated (zeroed, page-faulted) on every call, cost 5 % of the forward at T
 * = 2048. A worker whose head's slot still serves an earlier head waits until
 * that head's workers leave it. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "flash_attention_internal.h"
#include "flash_attention_mask.h"
#include "ringpipe/rp_arena.h"
#include "work_range.h"

/* the most rows a forward strip has */
#define RP_FWD_STRIP_MAX (RP_FLASH_FWD_STRIP > RP_FLASH_STRIP ? RP_FLASH_FWD_STRIP : RP_FLASH_STRIP)

/* One head's packed K^T and V tiles (bf16: their pair layouts in the same room). head and users change under mu. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t left;  /* users dropped to 0 */
  long head;            /* the (b, h) held, -1 none */
  int users;            /* workers running a task of that head */
  float *kt;            /* [nkb]: K^T [HS][bk], then V [bk][HS] */
  atomic_int *state;    /* per tile: 0 not packed, 1 being packed, 2 ready */
} kv_slot;

typedef struct {
  rp_flash_problem pr;
  rp_flash_view o, lse;
  rp_flash_plan pl;
  kv_slot *slots;
  int nslots, slots_ready; /* slots_ready: mutexes initialised */
  int group;               /* heads whose tasks interleave (see task_of) */
  int own_heads;           /* each thread takes its own equal share of heads */
  rp_work_range *heads;    /* own_heads: [nthreads], each thread's heads not yet started */
  float *kt;            /* [nslots][nkb] tiles */
  atomic_int *kt_state; /* [nslots][nkb] */
  float *scratch;       /* per thread: S[bq*bk], m[bq], l[bq], packed Q [bq*HS], the
                           bf16 P strip, written[bq] */
  long scratch_floats, pb_words;
  int nthreads;
  long ntasks;
  atomic_long next;
} fwd_ctx;

/* Slot s held for head bh: waits while it serves another head. */
static kv_slot *slot_take(fwd_ctx *c, kv_slot *s, long bh) {
  pthread_mutex_lock(&s->mu);
  while (s->head != bh && s->users > 0) pthread_cond_wait(&s->left, &s->mu);
  if (s->head != bh) {
    s->head = bh;
    for (int kb = 0; kb < c->pl.nkb; kb++) atomic_store(&s->state[kb], 0);
  }
  s->users++;
  pthread_mutex_unlock(&s->mu);
  return s;
}

/* The slot of head bh (heads group + nthreads - 1 apart share one). */
static kv_slot *slot_acquire(fwd_ctx *c, long bh) {
  return slot_take(c, &c->slots[bh % c->nslots], bh);
}

static void slot_release(kv_slot *s) {
  pthread_mutex_lock(&s->mu);
  if (--s->users == 0) pthread_cond_broadcast(&s->left);
  pthread_mutex_unlock(&s->mu);
}

static const float *packed_kt(fwd_ctx *c, kv_slot *slot, long bh, int kb) {
  const rp_flash_problem *pr = &c->pr;
  const int HS = pr->HS, bk = c->pl.bk;
  float *dst = slot->kt + (long)kb * 2 * HS * bk;
  atomic_int *st = &slot->state[kb];
  int s = atomic_load_explicit(st, memory_order_acquire);
  if (s == 2) return dst;
  int expect = 0;
  if (s == 0 && atomic_compare_exchange_strong(st, &expect, 1)) {
    long b = bh / pr->NH, h = bh % pr->NH, j0 = (long)kb * bk;
    int nk = (int)RP_MIN((long)bk, pr->Tk - j0);
    const float *k = rp_flash_row(pr->k, b, j0, h, HS), *v = rp_flash_row(pr->v, b, j0, h, HS);
    if (c->pl.bf16) {  /* K^T pairs [HS/2][bk], then V pair rows [bk/2][HS] */
      uint32_t *d16 = (uint32_t *)dst;
      c->pl.bf16->pack_t(d16, bk, k, pr->k.ld, nk, HS);
      c->pl.bf16->pair_rows(d16 + (long)rp_flash_pairs(HS) * bk, HS, v, pr->v.ld, nk, HS,
                            rp_flash_pairs(nk));
    } else {
      c->pl.ops->pack_t(dst, bk, k, pr->k.ld, nk, HS);
      rp_flash_pack_rows(dst + (long)HS * bk, v, pr->v.ld, nk, HS);
    }
    atomic_store_explicit(st, 2, memory_order_release);
    return dst;
  }
  /* another worker is packing this tile: a 64x64 transpose, wait it out */
  for (int spins = 0; atomic_load_explicit(st, memory_order_acquire) != 2; spins++)
    if (spins > 64) sched_yield();
  return dst;
}

/* Online softmax over rows [r0, r0 + hh) of a tile whose scores are in S:
 * P = exp(scale*S - m) in place (0 outside each row's span, up to the strip's
 * ns keys, all that P V reads), l and m updated
 * and the O rows rescaled when a row's max grows. The strip's row maxima are
 * all taken before any exp: a row's exp pass waits for its max (a horizontal
 * reduction), and row by row that wait was not hidden. Rows of 192 keys in
 * L1, one thread of Sapphire Rapids: 100 TSC cycles per row max + exp, 71 with
 * the maxima first (the same operations, so the same bits). */
static void fwd_softmax_rows(const fwd_ctx *c, long b, long i0, int r0, int hh, long j0, int nk,
                             int ns, int full, float *S, float *m, float *l, float *o,
                             long ldo) {
  const rp_flash_problem *pr = &c->pr;
  const rp_flash_ops *ops = c->pl.ops;
  const int HS = pr->HS, bk = c->pl.bk;
  const float scale = c->pl.scale;
  float rmax[RP_FWD_STRIP_MAX];
  int span_a[sizeof rmax / sizeof rmax[0]], span_n[sizeof rmax / sizeof rmax[0]];
  for (int r = r0; r < r0 + hh; r++) {
    float *s = S + (long)r * bk;
    int a = 0, n = full ? nk : rp_flash_row_span(pr, b, i0 + r, j0, nk, &a);
    span_a[r - r0] = a;
    span_n[r - r0] = n;
    if (n > 0) rmax[r - r0] = ops->rowmax(s + a, n) * scale;
  }
  for (int r = r0; r < r0 + hh; r++) {
    float *s = S + (long)r * bk;
    const int a = span_a[r - r0], n = span_n[r - r0];
    /* P V reads the strip's first ns columns: only those need their zeros */
    if (n == 0) {
      memset(s, 0, sizeof(float) * (size_t)ns);
      continue;
    }
    float mnew = rmax[r - r0];
    if (mnew < m[r]) mnew = m[r];
    float sum = ops->expsum(s + a, n, scale, mnew);
    if (n < ns) rp_flash_zero_outside(s, a, n, ns);
    if (mnew != m[r]) {
      /* m[r] = -inf on a row's first visible tile: alpha = 0, l and O are 0 */
      float alpha = expf(m[r] - mnew);
      if (l[r] > 0.0f) ops->scal(o + r * ldo, HS, alpha);
      l[r] *= alpha;
      m[r] = mnew;
    }
    l[r] += sum;
  }
}

/* The forward's two products on strip rows [r0, r0 + hh) over ns keys, fp32 or
 * bf16 (pl->bf16: q, kt in its pair layouts; P is rounded into pb first).
 * scores: S = Q K^T (unscaled); accumulate: O += P V. */
static void fwd_scores(const fwd_ctx *c, int r0, int hh, int ns, const float *q,
                       const float *kt, float *s) {
  const int HS = c->pr.HS, bk = c->pl.bk;
  if (c->pl.bf16) {
    const int hp = rp_flash_pairs(HS);
    c->pl.bf16->gemm(hh, ns, hp, (const uint32_t *)q + (long)r0 * hp, hp, 1,
                     (const uint32_t *)kt, bk, s, bk, 0);
  } else {
    c->pl.ops->gemm(hh, ns, HS, q + r0 * HS, HS, 1, kt, bk, s, bk, 0);
  }
}

static void fwd_accumulate(const fwd_ctx *c, int hh, int ns, const float *s, const float *kt,
                           uint32_t *pb, float *o, long ldo, int acc) {
  const int HS = c->pr.HS, bk = c->pl.bk;
  if (c->pl.bf16) {
    const int ldp = rp_flash_pairs(bk);
    const uint32_t *v16 = (const uint32_t *)kt + (long)rp_flash_pairs(HS) * bk;
    c->pl.bf16->rows(pb, ldp, s, bk, hh, ns);
    c->pl.bf16->gemm(hh, HS, rp_flash_pairs(ns), pb, ldp, 1, v16, HS, o, ldo, acc);
  } else {
    c->pl.ops->gemm(hh, HS, ns, s, bk, 1, kt + (long)HS * bk, HS, o, ldo, acc);
  }
}

/* Whether O += P V on strip rows [r0, r0 + hh) must add to what the rows hold
 * (1) or may set them (0): the rows are not zeroed when a query block starts,
 * so a strip's first product sets them (acc = 0 adds to a zero register, so
 * the bits are those of adding to zeroed rows). Rows of a strip written apart
 * from the rest (only where RP_FLASH_FWD_STRIP and RP_FLASH_STRIP differ, so
 * that full and diagonal tiles cut the rows apart) are zeroed here first. The
 * zeroing pass it replaces took the first write of the cold O lines: one
 * thread, bench_flash_cpu, 6 alternating pairs, forward 1.96-2.04 -> 1.86-1.93
 * ms at T = 256 with 24 heads, median 6.30 -> 6.19 ms at T = 1024 causal. */
static int fwd_strip_acc(uint8_t *written, int r0, int hh, float *o, long ldo, int HS) {
  int n = 0;
  for (int r = r0; r < r0 + hh; r++) n += written[r];
  if (n == hh) return 1;
  for (int r = r0; r < r0 + hh; r++) {
    if (n > 0 && !written[r]) memset(o + r * ldo, 0, sizeof(float) * (size_t)HS);
    written[r] = 1;
  }
  return n > 0;
}

/* One query block against every key tile it sees. Each tile runs strip by strip
 * (RP_FLASH_FWD_STRIP rows; diagonal tiles RP_FLASH_STRIP over the keys the strip
 * sees): S = Q K^T, the softmax, O += P V for one strip before the next, so that
 * the strip's scores stay in L1 between the three passes (whole 96 x 192 tiles
 * are 72 KiB, more than the L1, and went through L2 three times). q is the
 * block's Q rows packed [nq][HS]. */
static void fwd_tile_rows(fwd_ctx *c, kv_slot *slot, long b, long h, int qb, float *S,
                          float *m, float *l, float *q, uint32_t *pb, uint8_t *written) {
  const rp_flash_problem *pr = &c->pr;
  const rp_flash_plan *pl = &c->pl;
  const rp_flash_ops *ops = pl->ops;
  const int HS = pr->HS, bq = pl->bq, bk = pl->bk;
  const long i0 = (long)qb * bq;
  const int nq = (int)RP_MIN((long)bq, pr->Tq - i0);
  float *o = rp_flash_row(c->o, b, i0, h, HS);
  const long ldo = c->o.ld;

  const float *qsrc = rp_flash_row(pr->q, b, i0, h, HS);
  if (pl->bf16)
    pl->bf16->rows((uint32_t *)q, rp_flash_pairs(HS), qsrc, pr->q.ld, nq, HS);
  else
    rp_flash_pack_rows(q, qsrc, pr->q.ld, nq, HS);
  memset(written, 0, (size_t)nq); /* O rows: set by each strip's first P V */
  for (int r = 0; r < nq; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  long last = rp_flash_last_key(pr, i0 + nq);
  int kb_end = last < 0 ? 0 : (int)RP_MIN((long)pl->nkb, last / bk + 1);
  for (int kb = 0; kb < kb_end; kb++) {
    const long j0 = (long)kb * bk;
    const int nk = (int)RP_MIN((long)bk, pr->Tk - j0);
    if (!rp_flash_tile_any(pr, b, i0, nq, j0, nk)) continue;  /* between documents */
    const float *kt = packed_kt(c, slot, b * pr->NH + h, kb);
    /* a tile is unmasked when every row sees every key (causal: its last key is
     * visible to its first query) */
    const int full = rp_flash_tile_full(pr, b, i0, nq, j0, nk);
    for (int r0 = 0, hh; r0 < nq; r0 += hh) {
      hh = full ? RP_MIN(nq - r0, RP_FLASH_FWD_STRIP) : rp_flash_strip_rows(0, nq, r0);
      int ns = rp_flash_strip_keys(pr, full, i0, r0, hh, j0, nk);
      float *s = S + (long)r0 * bk;
      /* unscaled scores (the scale is folded into the exp); columns past the
       * strip's keys are zeroed by the softmax */
      if (ns > 0) fwd_scores(c, r0, hh, ns, q, kt, s);
      fwd_softmax_rows(c, b, i0, r0, hh, j0, nk, ns, full, S, m, l, o, ldo);
      if (ns > 0)
        fwd_accumulate(c, hh, ns, s, kt, pb, o + r0 * ldo, ldo,
                       fwd_strip_acc(written, r0, hh, o, ldo, HS));
    }
  }
  for (int r = 0; r < nq; r++) {
    float *L = rp_flash_stat(c->lse, b, h, i0 + r);
    if (!written[r]) memset(o + r * ldo, 0, sizeof(float) * (size_t)HS); /* no product reached it */
    if (l[r] > 0.0f) {
      ops->scal(o + r * ldo, HS, 1.0f / l[r]);
      *L = m[r] + logf(l[r]);
    } else {
      *L = -INFINITY;  /* saw no key: O stays 0 */
    }
  }
}

/* Task t's head and query block (0: the heaviest). Heads go in groups of
 * c->group heads, the group's tasks interleaved head by head. With short
 * sequences a group is as many heads as threads, so that the workers start it
 * on different heads: each packs its own head's K and V tiles instead of
 * waiting while another packs the one tile they both need first (T = 256,
 * B 4, 6 heads, 2 threads: forward 0.90 of the time). A long head's tiles
 * fill the L2, and workers sharing one head were 1.4 % faster at T = 4096:
 * there a group is one head. */
static void task_of(const fwd_ctx *c, long t, long *bh, long *qb_rank) {
  const long nqb = c->pl.nqb, BNH = (long)c->pr.B * c->pr.NH, g = c->group;
  const long group = t / (g * nqb), first = group * g;
  const long heads = BNH - first < g ? BNH - first : g, in = t - first * nqb;
  *bh = first + in % heads;
  *qb_rank = in / heads;
}

/* Rows [t0, t1) of head bh of v towards the L2. */
static void prefetch_head_rows(rp_flash_view v, long bh, int NH, int HS, long t0, long t1) {
  for (long t = t0; t < t1; t++) {
    const char *p = (const char *)rp_flash_row(v, bh / NH, t, bh % NH, HS);
    for (int f = 0; f < HS * (int)sizeof(float); f += 64) __builtin_prefetch(p + f, 0, 2);
  }
}

/* Head bh on thread ith's slot, its query blocks heaviest first. While a
 * query block runs, the same positions of head `next` (the one the thread
 * expects to take next, or -1) are prefetched: Q, K, V and O rows. In a
 * training step they come cold from L3 (the qkv GEMM wrote them, split by
 * columns between the cores), and the head's packing and first products
 * waited on them. Default model, 3 alternating pairs of step profiles: forward
 * attention 6.85-6.86 -> 6.40-6.51 ms a step (O, about to be written, with the
 * write hint: 6.55-6.69). The backward's same prefetch
 * (its Q, dO, K, V and gradient rows, a key block's share at a time) measured
 * no faster and is not done. */
static void fwd_own_head(fwd_ctx *c, int ith, long bh, long next, float *S, float *m, float *l,
                         float *q, uint32_t *pb, uint8_t *written) {
  const rp_flash_problem *pr = &c->pr;
  const int NH = pr->NH, HS = pr->HS, bq = c->pl.bq;
  kv_slot *slot = slot_take(c, &c->slots[ith], bh);
  for (int qb = c->pl.nqb - 1; qb >= 0; qb--) {
    if (next >= 0) {
      const long t0 = (long)qb * bq, t1 = RP_MIN(t0 + bq, (long)pr->Tq);
      const long k0 = RP_MIN(t0, (long)pr->Tk), k1 = RP_MIN(t1, (long)pr->Tk);
      prefetch_head_rows(pr->q, next, NH, HS, t0, t1);
      prefetch_head_rows(pr->k, next, NH, HS, k0, k1);
      prefetch_head_rows(pr->v, next, NH, HS, k0, k1);
      prefetch_head_rows(c->o, next, NH, HS, t0, t1);
    }
    fwd_tile_rows(c, slot, bh / NH, bh % NH, qb, S, m, l, q, pb, written);
  }
  slot_release(slot);
}

/* Thread ith's own share of the heads (rp_flash_own_heads), one at a time,
 * then the back halves of what the other threads have not started (a head's
 * results do not depend on the thread, so the same bits): a thread slowed by
 * a neighbour no longer holds up the job (work_range.h). */
static void fwd_run_own_heads(fwd_ctx *c, int ith, int nth, float *S, float *m, float *l,
                              float *q, uint32_t *pb, uint8_t *written) {
  long a, b, hi;
  rp_work_straggle(ith);
  while (rp_work_next(c->heads, ith, nth, 1, &a, &b, &hi) >= 0)
    for (long bh = a; bh < b; bh++)
      fwd_own_head(c, ith, bh, bh + 1 < hi ? bh + 1 : -1, S, m, l, q, pb, written);
}

void rp_flash_fwd_run(void *vctx, int ith, int nth) {
  fwd_ctx *c = vctx;
  float *S = c->scratch + ith * c->scratch_floats;
  float *m = S + (long)c->pl.bq * c->pl.bk;
  float *l = m + c->pl.bq, *q = l + c->pl.bq;
  uint32_t *pb = (uint32_t *)(q + (long)c->pl.bq * c->pr.HS);  /* bf16 P strip */
  uint8_t *written = (uint8_t *)(pb + c->pb_words);
  if (c->own_heads && nth == c->nthreads) {
    fwd_run_own_heads(c, ith, nth, S, m, l, q, pb, written);
    return;
  }
  for (;;) {
    long t = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
    if (t >= c->ntasks) break;
    /* head by head, so that the workers share one head's packed K and V while
     * it is in L2 (cycling over heads kept B*NH heads' tiles live, beyond the
     * L2 from T = 2048: 4 % slower); within a head the last query blocks come
     * first: under causal masking they see the most keys, and the light ones
     * left at the end balance the threads */
    long bh, qb_rank;
    task_of(c, t, &bh, &qb_rank);
    int qb = c->pl.nqb - 1 - (int)qb_rank;
    kv_slot *slot = slot_acquire(c, bh);
    fwd_tile_rows(c, slot, bh / c->pr.NH, bh % c->pr.NH, qb, S, m, l, q, pb, written);
    slot_release(slot);
  }
}

/* Nothing to attend: O = 0 and L = -inf for every query row. */
static void fwd_write_empty(const rp_flash_problem *pr, rp_flash_view o, rp_flash_view lse) {
  for (long b = 0; b < pr->B; b++)
    for (long h = 0; h < pr->NH; h++)
      for (long t = 0; t < pr->Tq; t++) {
        memset(rp_flash_row(o, b, t, h, pr->HS), 0, sizeof(float) * (size_t)pr->HS);
        *rp_flash_stat(lse, b, h, t) = -INFINITY;
      }
}

rp_status rp_flash_fwd_prepare(void **out, const rp_flash_problem *pr, rp_flash_view o,
                               rp_flash_view lse, int nthreads) {
  *out = NULL;
  RP_TRY(rp_flash_check_problem(pr));
  if (!o.p || !lse.p || o.ld < (long)pr->NH * pr->HS || lse.ld < pr->Tq)
    return rp_err(RP_EINVAL, "flash forward needs o (row stride >= NH*HS = %d, got %ld) and "
                  "lse (head stride >= Tq = %d, got %ld)",
                  pr->NH * pr->HS, o.ld, pr->Tq, lse.ld);
  if (pr->Tq == 0) return RP_OK;
  if (pr->Tk == 0 || pr->vis == RP_FLASH_VIS_NONE) {
    fwd_write_empty(pr, o, lse);
    return RP_OK;
  }
  fwd_ctx *c = calloc(1, sizeof *c);
  if (!c) return rp_err(RP_ENOMEM, "out of memory for a flash forward context");
  c->pr = *pr;
  c->o = o;
  c->lse = lse;
  rp_flash_make_plan(&c->pl, pr);
  const long BNH = (long)pr->B * pr->NH;
  c->nthreads = nthreads;
  c->ntasks = BNH * c->pl.nqb;
  /* one head's K and V within a quarter of the L2: groups of nthreads heads */
  const long head_kv_bytes = 2L * pr->Tk * pr->HS * (long)sizeof(float);
  c->group = head_kv_bytes <= rp_flash_l2_bytes(pr->cfg) / 4 ? nthreads : 1;
  /* The heads in flight: the group, and the next heads a worker moves on to
   * while the others finish theirs; a slot's tiles are packed into memory that
   * its previous head, the most recent one possible, left in the caches. With
   * one slot more, a head's tiles went where a head further back had left
   * them, and each store of the packing waited for its line. 2
   * threads, `bench attention`, 3 alternating pairs: forward 3.37-3.39 ->
   * 3.15-3.30 ms at T = 1024 causal, 12.62-13.26 -> 12.61-12.85 at 2048
   * causal, alike non-causal; one thread (one slot) T = 1024 causal
   * 6.42-6.73 -> 6.33-6.46 (4 pairs). */
  c->nslots = (int)RP_MIN(BNH, (long)c->group + nthreads - 1);
  c->own_heads = rp_flash_own_heads(pr, nthreads, rp_flash_l2_bytes(pr->cfg));
  if (c->own_heads) c->heads = rp_work_ranges_split(BNH, nthreads);
  const long tiles = (long)c->nslots * c->pl.nkb, tile_floats = 2L * pr->HS * c->pl.bk;
  atomic_init(&c->next, 0);
  /* S, m, l, packed Q, (bf16) a strip of P in pairs, and a byte a row */
  c->pb_words = c->pl.bf16 ? (long)RP_FWD_STRIP_MAX * rp_flash_pairs(c->pl.bk) : 0;
  c->scratch_floats = ((long)c->pl.bq * (c->pl.bk + 2L + pr->HS) + c->pb_words +
                       (c->pl.bq + 3) / 4 + 15) & ~15L;
  c->kt = rp_scratch_alloc(sizeof(float) * (size_t)(tiles * tile_floats));
  c->scratch = rp_scratch_alloc(sizeof(float) * (size_t)(c->scratch_floats * nthreads));
  c->kt_state = malloc(sizeof(atomic_int) * (size_t)tiles);
  c->slots = calloc((size_t)c->nslots, sizeof *c->slots);
  if (!c->kt || !c->scratch || !c->kt_state || !c->slots || (c->own_heads && !c->heads)) {
    rp_flash_fwd_finish(c, NULL);
    return rp_err(RP_ENOMEM, "out of memory for flash forward workspace (B*NH=%ld, T=%d, HS=%d)",
                  BNH, pr->Tk, pr->HS);
  }
  for (long i = 0; i < tiles; i++) atomic_init(&c->kt_state[i], 0);
  for (int i = 0; i < c->nslots; i++) {
    kv_slot *sl = &c->slots[i];
    pthread_mutex_init(&sl->mu, NULL);
    pthread_cond_init(&sl->left, NULL);
    sl->head = -1;
    sl->kt = c->kt + (long)i * c->pl.nkb * tile_floats;
    sl->state = c->kt_state + (long)i * c->pl.nkb;
  }
  c->slots_ready = 1;
  *out = c;
  return RP_OK;
}

rp_status rp_flash_fwd_finish(void *vctx, rp_pool *pool) {
  (void)pool;
  fwd_ctx *c = vctx;
  if (!c) return RP_OK;
  for (int i = 0; c->slots_ready && i < c->nslots; i++) {
    pthread_mutex_destroy(&c->slots[i].mu);
    pthread_cond_destroy(&c->slots[i].left);
  }
  free(c->slots);
  free(c->heads);
  rp_scratch_free(c->kt);
  rp_scratch_free(c->scratch);
  free(c->kt_state);
  free(c);
  return RP_OK;
}
