/* Ring attention: each rank keeps its queries and passes K/V blocks around the
 * cp ring (send to r+1, receive from r-1) while the pool's workers attend the
 * local queries to the block in hand.
 *
 * Forward, step s = 0..P-1: the block in hand is the K/V of rank src = r - s.
 * With overlap the transfer of the next block is posted before the compute of
 * this one, and the main thread tests the requests while the workers run the
 * flash tiles (rp_flash_*_launch). Each (local piece, remote piece) pair is
 * attended with the visibility its global positions give (all, causal, or
 * skipped), and the partial (O, L) is merged into the running pair.
 *
 * Backward: D = rowsum(dO * O) from the final O; the K/V blocks go around again,
 * and with each one an fp32 dK/dV accumulator: at step s >= 1 a rank computes
 * its contribution into a zeroed partial, adds the accumulator that arrived from
 * r-1 (the sum of the ranks that saw the block before) and sends the sum on to
 * r+1; after step P-1 that hop takes every accumulator home, where the owner's
 * own contribution was added straight into dqkv. dQ stays local. The
 * accumulator sent at step s travels during the compute of step s+1 (or of the
 * second half of the own block, for the last hop). */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "cp_internal.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_util.h"
#include "ringpipe/rp_wait.h"

enum { TAG_KV = 11, TAG_DKV = 12 };

typedef struct {
  rp_cp_common c;      /* first: cp_common.c reads the ctx through it */
  int overlap;
  float *kv[2];        /* [B,Tl,2C] K/V block in hand and the one arriving */
  size_t kv_cap[2];
  float *dkv[2];       /* [B,Tl,2C] dK/dV partial of this step (and last step's, in flight) */
  size_t dkv_cap[2];
  float *acc;          /* [B,Tl,2C] accumulator received from r-1 */
  size_t acc_cap;
  float *ob;           /* [B,Tl,C] partial O of one block */
  size_t ob_cap;
  float *lb;           /* [B,NH,Tl] partial L (forward) or D (backward) */
  size_t lb_cap;
  int32_t *kr_own;     /* packed rows: the own block's key ranges, kept through backward */
  size_t kr_own_cap;
} ring_ctx;

/* One flash call of a ring step: local query rows [q0, q0+nq) against rows
 * [k0, k0+nk) of the block in hand. */
typedef struct {
  int q0, nq, k0, nk;
  long qpos0, kpos0;
  rp_flash_vis vis;
  const int32_t *kr;   /* RANGE (packed rows): [B][Tl][2] key ranges of every local query */
  double pairs;        /* RANGE: visible pairs per batch row */
} ring_task;

static rp_flash_vis classify(long qpos0, int nq, long kpos0, int nk) {
  if (kpos0 + nk - 1 <= qpos0) return RP_FLASH_VIS_ALL;     /* every key before every query */
  if (kpos0 > qpos0 + nq - 1) return RP_FLASH_VIS_NONE;     /* every key after every query */
  return RP_FLASH_VIS_CAUSAL;
}

/* Tasks of a step, fully masked pairs dropped. Unmasked pairs that share their
 * query rows (or key rows) and are adjacent in the other are fused into one
 * call: zigzag's "lower" step becomes all local queries against the peer's first
 * chunk, its "upper" step the local second chunk against the whole block. */
static int step_tasks(ring_task *t, const rp_cp_pieces *mine, const rp_cp_pieces *peer) {
  int n = 0;
  for (int i = 0; i < mine->n; i++)
    for (int j = 0; j < peer->n; j++) {
      ring_task k = {mine->local0[i], mine->len, peer->local0[j], peer->len,
                     mine->global0[i], peer->global0[j], RP_FLASH_VIS_ALL, NULL, 0};
      k.vis = classify(k.qpos0, k.nq, k.kpos0, k.nk);
      if (k.vis != RP_FLASH_VIS_NONE && k.nq > 0 && k.nk > 0) t[n++] = k;
    }
  for (int fused = 1; fused;) {
    fused = 0;
    for (int a = 0; a < n && !fused; a++)
      for (int b = 0; b < n && !fused; b++) {
        if (a == b || t[a].vis != RP_FLASH_VIS_ALL || t[b].vis != RP_FLASH_VIS_ALL) continue;
        if (t[a].q0 == t[b].q0 && t[a].nq == t[b].nq && t[a].k0 + t[a].nk == t[b].k0)
          t[a].nk += t[b].nk;
        else if (t[a].k0 == t[b].k0 && t[a].nk == t[b].nk && t[a].q0 + t[a].nq == t[b].q0)
          t[a].nq += t[b].nq;
        else
          continue;
        t[b] = t[--n];
        fused = 1;
      }
  }
  return n;
}

/* Packed rows: one task per step, every local query against the whole block
 * of rank peer with its document key ranges; none when no query sees a key of
 * that block (the block pair is skipped, the block still travels on). */
static int doc_step_tasks(ring_ctx *x, const rp_attn_batch *ab, int peer, ring_task *t,
                          rp_status *st) {
  double pairs = 0;
  const int32_t *kr =
      rp_cp_doc_ranges(&x->c, &x->c.kr, &x->c.kr_cap, ab->docs, ab->B, ab->T, peer, &pairs);
  if (!kr) *st = RP_ENOMEM;
  if (!kr || pairs == 0) return 0;
  t[0] = (ring_task){0, ab->T, 0, ab->T, 0, 0, RP_FLASH_VIS_RANGE, kr, pairs / ab->B};
  return 1;
}

/* Packed rows, backward: the own block's task cut at the query row that halves
 * its visible pairs (as split_halves does for the layouts' tasks), so that the
 * second half hides the accumulators' last hop. Its ranges have their own
 * buffer: the steps in between rebuild the shared one. */
static rp_status doc_own_halves(ring_ctx *x, const rp_attn_batch *ab, ring_task *early, int *ne,
                                ring_task *late, int *nl) {
  const int B = ab->B, Tl = ab->T;
  double total = 0;
  const int32_t *kr = rp_cp_doc_ranges(&x->c, &x->kr_own, &x->kr_own_cap, ab->docs, B, Tl,
                                       x->c.rank, &total);
  if (!kr) return RP_ENOMEM;
  double acc = 0;
  int h = 0;
  while (h < Tl && acc < total / 2) {
    for (int b = 0; b < B; b++) acc += kr[((long)b * Tl + h) * 2 + 1] - kr[((long)b * Tl + h) * 2];
    h++;
  }
  *ne = *nl = 0;
  if (acc > 0) early[(*ne)++] = (ring_task){0, h, 0, Tl, 0, 0, RP_FLASH_VIS_RANGE, kr, acc / B};
  if (total - acc > 0)
    late[(*nl)++] = (ring_task){h, Tl - h, 0, Tl, 0, 0, RP_FLASH_VIS_RANGE, kr, (total - acc) / B};
  return RP_OK;
}

/* The tasks of attending this rank's queries to rank peer's block. */
static int tasks_for(ring_ctx *x, const rp_attn_batch *ab, const rp_cp_pieces *mine, int peer,
                     ring_task *t, rp_status *st) {
  if (ab->docs) return doc_step_tasks(x, ab, peer, t, st);
  rp_cp_pieces pp;
  *st = rp_cp_pieces_of(&pp, x->c.layout, ab->T * x->c.P, x->c.P, peer);
  return *st == RP_OK ? step_tasks(t, mine, &pp) : 0;
}

/* Visible (query, key) pairs of a task. */
static double task_pairs(const ring_task *t) {
  if (t->vis == RP_FLASH_VIS_RANGE) return t->pairs;
  if (t->vis == RP_FLASH_VIS_ALL) return (double)t->nq * t->nk;
  double n = 0;
  for (int i = 0; i < t->nq; i++) {
    long v = t->qpos0 + i - t->kpos0 + 1;
    n += v <= 0 ? 0 : (v >= t->nk ? t->nk : v);
  }
  return n;
}

/* Rows view starting at row r0 of a [B,Tl,ld] buffer; stat view starting at
 * row r0 of a [B,NH,Tl] buffer. */
static rp_flash_view rows_at(const float *p, long ld, int Tl, int r0) {
  return rp_flash_view_of(p + (long)r0 * ld, ld, (long)Tl * ld);
}
static rp_flash_view stat_at(const float *p, int NH, int Tl, int r0) {
  return rp_flash_view_of(p + r0, Tl, (long)NH * Tl);
}

/* Keys and values of a task: rows of kb (k at kb, v at kb + C, rows ld apart):
 * the packed block [B,Tl,2C] received from a peer, or qkv + C (ld 3C) for the
 * rank's own block. */
static rp_flash_problem make_problem(const ring_task *t, const float *qkv, const float *kb,
                                     long ld, int B, int Tl, int C, int NH,
                                     const rp_flash_config *cfg) {
  rp_flash_problem pr;
  memset(&pr, 0, sizeof pr);
  pr.B = B;
  pr.NH = NH;
  pr.HS = C / NH;
  pr.Tq = t->nq;
  pr.Tk = t->nk;
  pr.q_pos0 = t->qpos0;
  pr.k_pos0 = t->kpos0;
  pr.vis = t->vis;
  pr.q = rows_at(qkv, 3L * C, Tl, t->q0);
  pr.k = rows_at(kb, ld, Tl, t->k0);
  pr.v = rows_at(kb + C, ld, Tl, t->k0);
  pr.cfg = cfg;
  pr.krange = t->kr ? t->kr + 2L * t->q0 : NULL;   /* [B][Tl][2]: from the task's first query */
  pr.krange_bs = 2L * Tl;
  return pr;
}

/* Requests in flight: a K/V exchange or an accumulator exchange (recv + send). */
typedef struct {
  MPI_Request r[2];
  int n;
} reqs;

/* Waits for the workers' job while testing the requests in flight, so that a
 * rendezvous transfer moves during the compute instead of after it. */
static void drive(ring_ctx *x, int dir, rp_flash_job *job, reqs *a, reqs *b) {
  double t0 = rp_now();
  MPI_Request all[4];
  int n = 0, flag = 0;
  if (x->overlap) {
    for (int i = 0; i < a->n; i++) all[n++] = a->r[i];
    for (int i = 0; i < b->n; i++) all[n++] = b->r[i];
  }
  flag = n == 0;
  while (!flag && !rp_flash_job_done(job)) {
    MPI_Testall(n, all, &flag, MPI_STATUSES_IGNORE);
    if (!flag) sched_yield();   /* the core may be shared with a worker */
  }
  if (n > 0) {   /* completed requests became MPI_REQUEST_NULL: keep them so */
    for (int i = 0; i < a->n; i++) a->r[i] = all[i];
    for (int i = 0; i < b->n; i++) b->r[i] = all[a->n + i];
  }
  rp_status s = rp_flash_job_finish(job);
  x->c.st[dir].compute_s += rp_now() - t0;
  if (s != RP_OK) rp_fatal("ring attention: flash block failed: %s", rp_errmsg());
}

static void wait_all(ring_ctx *x, int dir, reqs *q) {
  if (q->n == 0) return;
  double t0 = rp_now();
  int prev = (x->c.rank + x->c.P - 1) % x->c.P; /* the rank we receive from */
  rp_waitall(q->n, q->r, x->c.comm, prev, "ring attention %s block exchange",
             dir ? "backward" : "forward");
  x->c.st[dir].wait_s += rp_now() - t0;
  q->n = 0;
}

/* Send `send` to r+1 and receive `recv` from r-1 (n floats each). */
static void post_pair(ring_ctx *x, int dir, const float *send, float *recv, int n, int tag,
                      reqs *q) {
  int next = (x->c.rank + 1) % x->c.P, prev = (x->c.rank + x->c.P - 1) % x->c.P;
  MPI_Irecv(recv, n, MPI_FLOAT, prev, tag, x->c.comm, &q->r[0]);
  MPI_Isend(send, n, MPI_FLOAT, next, tag, x->c.comm, &q->r[1]);
  q->n = 2;
  x->c.st[dir].bytes_sent += sizeof(float) * (double)n;
}

/* The batch's checks, once per micro-batch: the layout must place T * P rows,
 * the heads divide the channels, a K/V block fits MPI's int count. */
static rp_status ring_prepare(const rp_attn_backend *a, rp_attn_batch *batch, int B, int T, int C,
                              int NH, const rp_docs *docs) {
  ring_ctx *x = a->ctx;
  rp_cp_pieces mine;
  if (B < 1 || T < 1) return rp_err(RP_EINVAL, "ring attention: batch %d x %d needs B, T >= 1", B, T);
  if (rp_cp_pieces_of(&mine, x->c.layout, T * x->c.P, x->c.P, x->c.rank) != RP_OK)
    return rp_err(RP_EINVAL, "ring attention: local sequence %d x cp %d: %s", T, x->c.P,
                  rp_errmsg());
  if (NH < 1 || C % NH != 0)
    return rp_err(RP_EINVAL, "ring attention: heads %d must divide channels %d", NH, C);
  size_t nkv = (size_t)B * T * 2 * C;
  if (nkv > (size_t)INT32_MAX)
    return rp_err(RP_EINVAL, "ring attention: a K/V block of %zu floats exceeds MPI's int "
                  "count; use a smaller micro-batch or more cp ranks", nkv);
  RP_TRY(rp_cp_docs_prepare(&x->c, docs, B, T));
  *batch = (rp_attn_batch){.backend = a, .B = B, .T = T, .C = C, .NH = NH, .docs = docs};
  return RP_OK;
}

/* Sizes the scratch for a prepared batch. */
static rp_status reserve(ring_ctx *x, rp_cp_pieces *mine, const rp_attn_batch *ab, int bwd) {
  const int B = ab->B, T = ab->T, C = ab->C, NH = ab->NH;
  RP_TRY(rp_cp_pieces_of(mine, x->c.layout, T * x->c.P, x->c.P, x->c.rank));
  size_t nkv = (size_t)B * T * 2 * C;
  rp_status s = RP_OK;
  for (int i = 0; i < 2 && s == RP_OK; i++) s = rp_cp_reserve(&x->kv[i], &x->kv_cap[i], nkv, RP_MEM_COMM);
  if (s == RP_OK) s = rp_cp_reserve(&x->lb, &x->lb_cap, (size_t)B * NH * T, RP_MEM_WORKSPACE);
  if (s == RP_OK && !bwd) s = rp_cp_reserve(&x->ob, &x->ob_cap, (size_t)B * T * C, RP_MEM_WORKSPACE);
  for (int i = 0; i < 2 && s == RP_OK && bwd; i++)
    s = rp_cp_reserve(&x->dkv[i], &x->dkv_cap[i], nkv, RP_MEM_COMM);
  if (s == RP_OK && bwd) s = rp_cp_reserve(&x->acc, &x->acc_cap, nkv, RP_MEM_COMM);
  if (s != RP_OK) return rp_err(s, "ring attention: out of memory for %zu-float K/V blocks", nkv);
  return RP_OK;
}

/* kv[B,T,2C] = the K and V columns of qkv[B,T,3C]. */
static void pack_kv(float *kv, const float *qkv, long rows, int C) {
  for (long i = 0; i < rows; i++)
    memcpy(kv + i * 2 * C, qkv + i * 3 * C + C, sizeof(float) * 2 * (size_t)C);
}

static rp_status ring_forward(const rp_attn_backend *a, const rp_attn_batch *ab, float *out,
                              float *saved, const float *qkv, rp_pool *pool) {
  ring_ctx *x = a->ctx;
  const double t_start = rp_now();
  const int B = ab->B, T = ab->T, C = ab->C, NH = ab->NH;
  const int P = x->c.P, r = x->c.rank, HS = C / NH, nkv = B * T * 2 * C;
  rp_cp_pieces mine;
  RP_TRY(reserve(x, &mine, ab, 0));
  if (P > 1) pack_kv(x->kv[0], qkv, (long)B * T, C);
  memset(out, 0, sizeof(float) * (size_t)B * T * C);
  for (long i = 0; i < (long)B * NH * T; i++) saved[i] = -INFINITY;

  reqs kv = {.n = 0}, none = {.n = 0};
  for (int s = 0; s < P; s++) {
    /* step s holds the block of rank r-s: its own K/V straight from qkv at s = 0 */
    const float *kb = s == 0 ? qkv + C : x->kv[s & 1];
    const long kld = s == 0 ? 3L * C : 2L * C;
    if (s < P - 1 && x->overlap) post_pair(x, 0, x->kv[s & 1], x->kv[(s + 1) & 1], nkv, TAG_KV, &kv);
    ring_task tk[4];
    rp_status st = RP_OK;
    int nt = tasks_for(x, ab, &mine, (r - s + P) % P, tk, &st);
    if (st != RP_OK) rp_fatal("ring attention forward: %s", rp_errmsg());  /* mid-ring */
    for (int i = 0; i < nt; i++) {
      rp_flash_problem pr = make_problem(&tk[i], qkv, kb, kld, B, T, C, NH, &x->c.flash);
      rp_flash_view ob = rows_at(x->ob, C, T, tk[i].q0), lb = stat_at(x->lb, NH, T, tk[i].q0);
      rp_flash_job *job = NULL;
      if (rp_flash_block_forward_launch(&job, &pr, ob, lb, pool) != RP_OK)
        rp_fatal("ring attention forward: %s", rp_errmsg());
      drive(x, 0, job, &kv, &none);
      rp_flash_merge(rows_at(out, C, T, tk[i].q0), stat_at(saved, NH, T, tk[i].q0), ob, lb, B,
                     NH, tk[i].nq, HS, &x->c.flash, pool);
      x->c.st[0].flops += 4.0 * HS * B * NH * task_pairs(&tk[i]);
    }
    if (s < P - 1 && !x->overlap) post_pair(x, 0, x->kv[s & 1], x->kv[(s + 1) & 1], nkv, TAG_KV, &kv);
    wait_all(x, 0, &kv);
  }
  x->c.st[0].calls++;
  x->c.st[0].total_s += rp_now() - t_start;
  return RP_OK;
}

/* Cuts each task at the query row that halves its visible pairs: first parts
 * to early, second parts to late (fully masked parts dropped). */
static void split_halves(const ring_task *t, int n, ring_task *early, int *ne, ring_task *late,
                         int *nl) {
  *ne = *nl = 0;
  for (int i = 0; i < n; i++) {
    double total = task_pairs(&t[i]), acc = 0;
    int h = 0;
    while (h < t[i].nq && acc < total / 2) {
      ring_task row = t[i];
      row.q0 += h, row.qpos0 += h, row.nq = 1;
      acc += task_pairs(&row);
      h++;
    }
    ring_task a = t[i], b = t[i];
    a.nq = h;
    b.q0 += h, b.qpos0 += h, b.nq -= h;
    a.vis = classify(a.qpos0, a.nq, a.kpos0, a.nk);
    b.vis = classify(b.qpos0, b.nq, b.kpos0, b.nk);
    if (a.nq > 0 && a.vis != RP_FLASH_VIS_NONE) early[(*ne)++] = a;
    if (b.nq > 0 && b.vis != RP_FLASH_VIS_NONE) late[(*nl)++] = b;
  }
}

typedef struct {
  const float *dout, *saved, *D, *qkv;
  float *dqkv;
  int B, T, C, NH;
  rp_pool *pool;
} bwd_args;

/* Backward of tasks against one block: keys from kb (row stride kld), their
 * gradients into db (row stride dld); dQ into dqkv. */
static void bwd_tasks(ring_ctx *x, const bwd_args *g, const ring_task *tk, int nt,
                      const float *kb, long kld, float *db, long dld, reqs *q1, reqs *q2) {
  const int T = g->T, C = g->C, NH = g->NH;
  for (int i = 0; i < nt; i++) {
    rp_flash_problem pr = make_problem(&tk[i], g->qkv, kb, kld, g->B, T, C, NH, &x->c.flash);
    rp_flash_job *job = NULL;
    if (rp_flash_block_backward_launch(
            &job, &pr, rows_at(g->dout, C, T, tk[i].q0), stat_at(g->saved, NH, T, tk[i].q0),
            stat_at(g->D, NH, T, tk[i].q0), rows_at(g->dqkv, 3L * C, T, tk[i].q0),
            rows_at(db, dld, T, tk[i].k0), rows_at(db + C, dld, T, tk[i].k0), g->pool) != RP_OK)
      rp_fatal("ring attention backward: %s", rp_errmsg());
    drive(x, 1, job, q1, q2);
    x->c.st[1].flops += 10.0 * (C / NH) * g->B * NH * task_pairs(&tk[i]);
  }
}

/* The rank's own block is done in two halves, first and last: the first hides
 * the arrival of block r-1, the last hides the final hop of the accumulators
 * (each rank's own dK/dV coming home), which nothing else could hide. Its
 * gradients go straight into dqkv; blocks of other ranks accumulate in
 * part[s&1], which travels on. */
static rp_status ring_backward(const rp_attn_backend *a, const rp_attn_batch *ab, float *dqkv,
                               const float *dout, const float *qkv, const float *out,
                               const float *saved, rp_pool *pool) {
  ring_ctx *x = a->ctx;
  const double t_start = rp_now();
  const int B = ab->B, T = ab->T, C = ab->C, NH = ab->NH;
  const int P = x->c.P, r = x->c.rank, HS = C / NH, nkv = B * T * 2 * C;
  rp_cp_pieces mine;
  RP_TRY(reserve(x, &mine, ab, 1));
  bwd_args g = {dout, saved, x->lb, qkv, dqkv, B, T, C, NH, pool};
  rp_flash_rowdot(rp_flash_view_of(x->lb, T, (long)NH * T), rows_at(dout, C, T, 0),
                  rows_at(out, C, T, 0), B, NH, T, HS, &x->c.flash, pool);
  if (P > 1) pack_kv(x->kv[0], qkv, (long)B * T, C);
  ring_task own[4], early[4], late[4];
  int ne = 0, nl = 0;
  rp_status st = RP_OK;
  if (ab->docs)
    st = doc_own_halves(x, ab, early, &ne, late, &nl);
  else
    split_halves(own, step_tasks(own, &mine, &mine), early, &ne, late, &nl);
  RP_TRY(st);

  reqs kv = {.n = 0}, dk = {.n = 0};
  for (int s = 0; s < P; s++) {
    if (s < P - 1 && x->overlap) post_pair(x, 1, x->kv[s & 1], x->kv[(s + 1) & 1], nkv, TAG_KV, &kv);
    float *part = x->dkv[s & 1];
    if (s == 0) {
      bwd_tasks(x, &g, early, ne, qkv + C, 3L * C, dqkv + C, 3L * C, &kv, &dk);
    } else {
      /* part's previous send (step s-2) completed at the end of step s-1 */
      memset(part, 0, sizeof(float) * (size_t)nkv);
      ring_task tk[4];
      int nt = tasks_for(x, ab, &mine, (r - s + P) % P, tk, &st);
      if (st != RP_OK) rp_fatal("ring attention backward: %s", rp_errmsg());  /* mid-ring */
      bwd_tasks(x, &g, tk, nt, x->kv[s & 1], 2L * C, part, 2L * C, &kv, &dk);
    }
    if (s < P - 1 && !x->overlap) post_pair(x, 1, x->kv[s & 1], x->kv[(s + 1) & 1], nkv, TAG_KV, &kv);
    wait_all(x, 1, &kv);
    if (s == 0) continue;
    if (s >= 2) {
      /* the accumulator of this block from the ranks that saw it before */
      wait_all(x, 1, &dk);
      rp_add_inplace(part, x->acc, nkv, pool);
    }
    post_pair(x, 1, part, x->acc, nkv, TAG_DKV, &dk);
    if (!x->overlap) wait_all(x, 1, &dk);
  }
  reqs none = {.n = 0};
  bwd_tasks(x, &g, late, nl, qkv + C, 3L * C, dqkv + C, 3L * C, &dk, &none);
  if (P > 1) {
    /* the last hop brought the other ranks' share of this rank's dK/dV */
    wait_all(x, 1, &dk);
    for (long i = 0; i < (long)B * T; i++) {
      float *d = dqkv + i * 3 * C + C;
      const float *s = x->acc + i * 2 * C;
      for (int j = 0; j < 2 * C; j++) d[j] += s[j];
    }
  }
  x->c.st[1].calls++;
  x->c.st[1].total_s += rp_now() - t_start;
  return RP_OK;
}

static size_t ring_saved(const rp_attn_backend *a, int B, int T, int C, int NH) {
  return (size_t)B * NH * T;
}

static void ring_free(rp_cp_common *c) {
  ring_ctx *x = (ring_ctx *)c;
  for (int i = 0; i < 2; i++) {
    rp_free(x->kv[i]);
    rp_free(x->dkv[i]);
  }
  rp_free(x->acc);
  rp_free(x->kr_own);
  rp_free(x->ob);
  rp_free(x->lb);
  free(x);
}

rp_status rp_cp_ring_create(rp_attn_backend **out, MPI_Comm cp_comm, rp_cp_layout layout,
                            int T_global, int overlap) {
  *out = NULL;
  int P = 1;
  MPI_Comm_size(cp_comm, &P);
  /* pure function of the arguments: every rank fails alike, nobody hangs */
  RP_TRY(rp_cp_check(layout, T_global, P));
  rp_attn_backend *a = calloc(1, sizeof *a);
  ring_ctx *x = calloc(1, sizeof *x);
  if (!a || !x) {
    free(a);
    free(x);
    return rp_err(RP_ENOMEM, "out of memory creating the ring attention backend");
  }
  rp_status s = rp_cp_common_init(&x->c, cp_comm, layout);
  if (s != RP_OK) {
    free(a);
    free(x);
    return s;
  }
  x->c.free_fn = ring_free;
  x->overlap = overlap != 0;
  a->name = layout == RP_CP_ZIGZAG ? "ring-zigzag" : "ring-contiguous";
  a->saved_floats = ring_saved;
  a->prepare = ring_prepare;
  a->forward = ring_forward;
  a->backward = ring_backward;
  a->destroy = rp_cp_destroy;
  a->ctx = x;
  *out = a;
  return RP_OK;
}
