/* Ulysses attention: an all-to-all turns sequence shards into head shards, each
 * rank runs ordinary causal flash attention over the WHOLE sequence for its
 * NH/P heads, and a second all-to-all turns the result back.
 *
 * Rank g owns heads [g*NH/P, (g+1)*NH/P), i.e. columns [g*C/P, (g+1)*C/P) of each
 * of q, k, v. The received rows come in the senders' local order; they are
 * placed at their global positions (zigzag shards are not contiguous) so that
 * the causal mask of the local kernel is the global one.
 *
 * The backward needs the forward's O and L of its heads on the whole sequence;
 * rather than keep them (the model gives a backend only the local L slot), it
 * sends qkv, O, dO and L through the all-to-all again and recomputes nothing. */
#include <stdlib.h>
#include <string.h>

#include "cp_internal.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_util.h"
#include "ringpipe/rp_wait.h"

typedef struct {
  rp_cp_common c;      /* first: cp_common.c reads the ctx through it */
  int NH;
  float *sbuf, *rbuf;  /* all-to-all segments, [P][seg] */
  size_t sbuf_cap, rbuf_cap;
  float *full;         /* whole-sequence tensors of this rank's heads (see below) */
  size_t full_cap;
} uly_ctx;

/* Whole-sequence scratch for Tg rows and Cl = C/P columns per tensor:
 * qkv[B,Tg,3Cl], o[B,Tg,Cl], dout[B,Tg,Cl], lse[B,NHl,Tg], dqkv[B,Tg,3Cl]. */
typedef struct {
  float *qkv, *o, *dout, *lse, *dqkv;
} uly_full;

static rp_status uly_prepare(const rp_attn_backend *a, rp_attn_batch *batch, int B, int T,
                             int C, int NH, const rp_docs *docs) {
  uly_ctx *x = a->ctx;
  const int P = x->c.P;
  rp_cp_pieces pc;
  if (B < 1 || T < 1) return rp_err(RP_EINVAL, "ulysses attention: batch %d x %d needs B, T >= 1", B, T);
  if (NH != x->NH || NH % P != 0 || C % NH != 0)
    return rp_err(RP_EINVAL, "ulysses attention: called with %d heads (C=%d), created for %d "
                  "heads and %d ranks; heads must be divisible by the cp size", NH, C, x->NH, P);
  if (rp_cp_pieces_of(&pc, x->c.layout, T * P, P, x->c.rank) != RP_OK)
    return rp_err(RP_EINVAL, "ulysses attention: local sequence %d x cp %d: %s", T, P,
                  rp_errmsg());
  /* the larger (backward) segment: 5 Cl per row plus L */
  size_t seg = (size_t)B * T * 5 * (C / P) + (size_t)B * (NH / P) * T;
  if (seg > (size_t)INT32_MAX)
    return rp_err(RP_EINVAL, "ulysses attention: an all-to-all segment of %zu floats exceeds "
                  "MPI's int count; use a smaller micro-batch", seg);
  RP_TRY(rp_cp_docs_prepare(&x->c, docs, B, T));
  *batch = (rp_attn_batch){.backend = a, .B = B, .T = T, .C = C, .NH = NH, .docs = docs};
  return RP_OK;
}

/* Sizes the buffers of a prepared batch and carves the whole-sequence views. */
static rp_status reserve(uly_ctx *x, uly_full *f, const rp_attn_batch *ab, size_t seg) {
  const int P = x->c.P, B = ab->B, T = ab->T, C = ab->C, NH = ab->NH;
  const size_t Tg = (size_t)T * P, Cl = (size_t)(C / P), rows = (size_t)B * Tg;
  const size_t nfull = rows * (3 * Cl + Cl + Cl + 3 * Cl) + (size_t)B * (NH / P) * Tg;
  rp_status s = rp_cp_reserve(&x->sbuf, &x->sbuf_cap, seg * P, RP_MEM_COMM);
  if (s == RP_OK) s = rp_cp_reserve(&x->rbuf, &x->rbuf_cap, seg * P, RP_MEM_COMM);
  if (s == RP_OK) s = rp_cp_reserve(&x->full, &x->full_cap, nfull, RP_MEM_WORKSPACE);
  if (s != RP_OK) return rp_err(s, "ulysses attention: out of memory for %zu floats", nfull);
  f->qkv = x->full;
  f->o = f->qkv + rows * 3 * Cl;
  f->dout = f->o + rows * Cl;
  f->dqkv = f->dout + rows * Cl;
  f->lse = f->dqkv + rows * 3 * Cl;
  return RP_OK;
}

static void alltoall(uly_ctx *x, int dir, size_t seg) {
  double t0 = rp_now();
  MPI_Request r;
  if (MPI_Ialltoall(x->sbuf, (int)seg, MPI_FLOAT, x->rbuf, (int)seg, MPI_FLOAT, x->c.comm, &r) !=
      MPI_SUCCESS)
    rp_fatal("ulysses attention: MPI_Ialltoall failed");
  rp_wait(&r, x->c.comm, -1, "Ulysses all-to-all (%s)", dir ? "backward" : "forward");
  x->c.st[dir].wait_s += rp_now() - t0;
  x->c.st[dir].bytes_sent += sizeof(float) * (double)seg * (x->c.P - 1);
}

/* Sequence shard -> head shard. Segment for rank g, per local row (b, t):
 * q, k, v columns of g's heads (3Cl), then (backward) o and dout columns (Cl
 * each); after the rows, (backward) L of g's heads [B,NHl,Tl]. */
static void scatter_heads(float *sbuf, size_t seg, const float *qkv, const float *o,
                          const float *dout, const float *lse, int B, int T, int C, int NH,
                          int P) {
  const int Cl = C / P, NHl = NH / P, w = o ? 5 * Cl : 3 * Cl;
  for (int g = 0; g < P; g++) {
    float *s = sbuf + (size_t)g * seg;
    for (long i = 0; i < (long)B * T; i++, s += w) {
      for (int p = 0; p < 3; p++) memcpy(s + p * Cl, qkv + i * 3 * C + p * C + g * Cl, sizeof(float) * Cl);
      if (!o) continue;
      memcpy(s + 3 * Cl, o + i * C + g * Cl, sizeof(float) * Cl);
      memcpy(s + 4 * Cl, dout + i * C + g * Cl, sizeof(float) * Cl);
    }
    if (!lse) continue;
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NHl; h++, s += T)
        memcpy(s, lse + ((long)b * NH + g * NHl + h) * T, sizeof(float) * T);
  }
}

/* Global position of local row t of rank q's row b: the layout's pieces, or
 * the packed batch's placement. */
static long row_pos(const rp_attn_batch *ab, const rp_cp_pieces *pc, int b, int q, int t) {
  if (ab->docs) return rp_cp_docs_rows(ab->docs, b, q)[t];
  return rp_cp_global_pos(pc, t);
}

/* Places the received segments at their global rows of the whole-sequence tensors. */
static void gather_sequence(uly_full *f, const float *rbuf, size_t seg, int bwd,
                            const rp_attn_batch *ab, const uly_ctx *x) {
  const int B = ab->B, T = ab->T, C = ab->C, NH = ab->NH;
  const int P = x->c.P, Cl = C / P, NHl = NH / P, Tg = T * P, w = bwd ? 5 * Cl : 3 * Cl;
  for (int q = 0; q < P; q++) {
    rp_cp_pieces pc;
    rp_cp_pieces_of(&pc, x->c.layout, Tg, P, q);
    const float *s = rbuf + (size_t)q * seg;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++, s += w) {
        long row = (long)b * Tg + row_pos(ab, &pc, b, q, t);
        memcpy(f->qkv + row * 3 * Cl, s, sizeof(float) * 3 * Cl);
        if (!bwd) continue;
        memcpy(f->o + row * Cl, s + 3 * Cl, sizeof(float) * Cl);
        memcpy(f->dout + row * Cl, s + 4 * Cl, sizeof(float) * Cl);
      }
    if (!bwd) continue;
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NHl; h++)
        for (int t = 0; t < T; t++)
          f->lse[((long)b * NHl + h) * Tg + row_pos(ab, &pc, b, q, t)] = *s++;
  }
}

static double causal_pairs(int Tg) { return (double)Tg * (Tg + 1) / 2.0; }

/* Visible pairs per batch row of the whole sequence: causal, or within documents. */
static double seq_pairs(const rp_attn_batch *ab, int Tg) {
  return ab->docs ? rp_docs_pairs(ab->docs) / ab->B : causal_pairs(Tg);
}

/* Whole-sequence attention of this rank's heads: causal, or with the packed
 * batch's document ranges (built per call, B*Tg pairs). */
static rp_status seq_attention(uly_ctx *x, const rp_attn_batch *ab, uly_full *f, int bwd,
                               rp_pool *pool) {
  const int B = ab->B, Tg = ab->T * x->c.P, Cl = ab->C / x->c.P, NHl = ab->NH / x->c.P;
  const rp_flash_config *cfg = &x->c.flash;
  if (!ab->docs)
    return bwd ? rp_flash_backward(f->dqkv, f->dout, f->qkv, f->o, f->lse, B, Tg, Cl, NHl, 1, cfg,
                                   pool)
               : rp_flash_forward(f->o, f->lse, f->qkv, B, Tg, Cl, NHl, 1, cfg, pool);
  RP_TRY(rp_cp_reserve_i32(&x->c.kr, &x->c.kr_cap, (size_t)B * Tg * 2));
  rp_docs_self_ranges(ab->docs, x->c.kr);
  return bwd ? rp_flash_backward_ranges(f->dqkv, f->dout, f->qkv, f->o, f->lse, B, Tg, Cl, NHl,
                                        x->c.kr, cfg, pool)
             : rp_flash_forward_ranges(f->o, f->lse, f->qkv, B, Tg, Cl, NHl, x->c.kr, cfg, pool);
}

static rp_status uly_forward(const rp_attn_backend *a, const rp_attn_batch *ab, float *out,
                             float *saved, const float *qkv, rp_pool *pool) {
  uly_ctx *x = a->ctx;
  const double t_start = rp_now();
  const int B = ab->B, T = ab->T, C = ab->C, NH = ab->NH;
  const int P = x->c.P, Cl = C / P, NHl = NH / P, Tg = T * P;
  uly_full f;
  /* one segment size serves both directions: 3Cl per row there, Cl + L back */
  size_t seg = (size_t)B * T * 3 * Cl;
  RP_TRY(reserve(x, &f, ab, seg));
  scatter_heads(x->sbuf, seg, qkv, NULL, NULL, NULL, B, T, C, NH, P);
  alltoall(x, 0, seg);
  gather_sequence(&f, x->rbuf, seg, 0, ab, x);

  double t0 = rp_now();
  if (seq_attention(x, ab, &f, 0, pool) != RP_OK)
    rp_fatal("ulysses attention forward: %s", rp_errmsg());  /* between all-to-alls */
  x->c.st[0].compute_s += rp_now() - t0;
  x->c.st[0].flops += 4.0 * (C / NH) * B * NHl * seq_pairs(ab, Tg);

  /* head shard -> sequence shard: for rank q, its rows of O, then its L */
  for (int q = 0; q < P; q++) {
    rp_cp_pieces pq;
    rp_cp_pieces_of(&pq, x->c.layout, Tg, P, q);
    float *s = x->sbuf + (size_t)q * seg;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++, s += Cl)
        memcpy(s, f.o + ((long)b * Tg + row_pos(ab, &pq, b, q, t)) * Cl, sizeof(float) * Cl);
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NHl; h++)
        for (int t = 0; t < T; t++) *s++ = f.lse[((long)b * NHl + h) * Tg + row_pos(ab, &pq, b, q, t)];
  }
  alltoall(x, 0, seg);
  for (int g = 0; g < P; g++) {
    const float *s = x->rbuf + (size_t)g * seg;
    for (long i = 0; i < (long)B * T; i++, s += Cl) memcpy(out + i * C + g * Cl, s, sizeof(float) * Cl);
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NHl; h++, s += T)
        memcpy(saved + ((long)b * NH + g * NHl + h) * T, s, sizeof(float) * T);
  }
  x->c.st[0].calls++;
  x->c.st[0].total_s += rp_now() - t_start;
  return RP_OK;
}

static rp_status uly_backward(const rp_attn_backend *a, const rp_attn_batch *ab, float *dqkv,
                              const float *dout, const float *qkv, const float *out,
                              const float *saved, rp_pool *pool) {
  uly_ctx *x = a->ctx;
  const double t_start = rp_now();
  const int B = ab->B, T = ab->T, C = ab->C, NH = ab->NH;
  const int P = x->c.P, Cl = C / P, NHl = NH / P, Tg = T * P;
  uly_full f;
  size_t seg = (size_t)B * T * 5 * Cl + (size_t)B * NHl * T;
  RP_TRY(reserve(x, &f, ab, seg));
  scatter_heads(x->sbuf, seg, qkv, out, dout, saved, B, T, C, NH, P);
  alltoall(x, 1, seg);
  gather_sequence(&f, x->rbuf, seg, 1, ab, x);

  double t0 = rp_now();
  memset(f.dqkv, 0, sizeof(float) * (size_t)B * Tg * 3 * Cl);
  if (seq_attention(x, ab, &f, 1, pool) != RP_OK)
    rp_fatal("ulysses attention backward: %s", rp_errmsg());  /* between all-to-alls */
  x->c.st[1].compute_s += rp_now() - t0;
  x->c.st[1].flops += 10.0 * (C / NH) * B * NHl * seq_pairs(ab, Tg);

  /* dqkv of rank q's rows back to q; the segment is the first 3Cl of each row */
  size_t seg2 = (size_t)B * T * 3 * Cl;
  for (int q = 0; q < P; q++) {
    rp_cp_pieces pq;
    rp_cp_pieces_of(&pq, x->c.layout, Tg, P, q);
    float *s = x->sbuf + (size_t)q * seg2;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++, s += 3 * Cl)
        memcpy(s, f.dqkv + ((long)b * Tg + row_pos(ab, &pq, b, q, t)) * 3 * Cl,
               sizeof(float) * 3 * Cl);
  }
  alltoall(x, 1, seg2);
  for (int g = 0; g < P; g++) {
    const float *s = x->rbuf + (size_t)g * seg2;
    for (long i = 0; i < (long)B * T; i++, s += 3 * Cl)
      for (int p = 0; p < 3; p++) {
        float *d = dqkv + i * 3 * C + p * C + g * Cl;
        for (int j = 0; j < Cl; j++) d[j] += s[p * Cl + j];
      }
  }
  x->c.st[1].calls++;
  x->c.st[1].total_s += rp_now() - t_start;
  return RP_OK;
}

static size_t uly_saved(const rp_attn_backend *a, int B, int T, int C, int NH) {
  return (size_t)B * NH * T;
}

static void uly_free(rp_cp_common *c) {
  uly_ctx *x = (uly_ctx *)c;
  rp_free(x->sbuf);
  rp_free(x->rbuf);
  rp_free(x->full);
  free(x);
}

rp_status rp_cp_ulysses_create(rp_attn_backend **out, MPI_Comm cp_comm, rp_cp_layout layout,
                               int T_global, int NH) {
  *out = NULL;
  int P = 1;
  MPI_Comm_size(cp_comm, &P);
  RP_TRY(rp_cp_check(layout, T_global, P));
  if (NH < 1 || NH % P != 0)
    return rp_err(RP_EINVAL,
                  "--heads %d is not divisible by --cp %d, which Ulysses attention needs "
                  "(each rank takes heads/cp heads); use --cp-impl ring or a head count "
                  "that is a multiple of %d",
                  NH, P, P);
  rp_attn_backend *a = calloc(1, sizeof *a);
  uly_ctx *x = calloc(1, sizeof *x);
  if (!a || !x) {
    free(a);
    free(x);
    return rp_err(RP_ENOMEM, "out of memory creating the Ulysses attention backend");
  }
  rp_status s = rp_cp_common_init(&x->c, cp_comm, layout);
  if (s != RP_OK) {
    free(a);
    free(x);
    return s;
  }
  x->c.free_fn = uly_free;
  x->NH = NH;
  a->name = "ulysses";
  a->saved_floats = uly_saved;
  a->prepare = uly_prepare;
  a->forward = uly_forward;
  a->backward = uly_backward;
  a->destroy = rp_cp_destroy;
  a->ctx = x;
  *out = a;
  return RP_OK;
}
