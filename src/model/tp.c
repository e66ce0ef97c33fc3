/* The model's side of tensor parallelism: Megatron's conjugate operators over
 * the injected collectives (rp_exec.tp; the model knows no MPI), the
 * vocabulary-parallel embedding and the vocabulary-parallel cross-entropy.
 *
 *   f: identity forward, all-reduce backward -- before a column-parallel layer
 *      (c_attn, c_fc, the LM head): the input gradient of a replicated input is
 *      the sum of every rank's partial product (rp_tp_all_reduce on dln1, dln2,
 *      dlnf in backward.c);
 *   g: all-reduce forward, identity backward -- after a row-parallel layer
 *      (attn and mlp c_proj): rp_tp_row_parallel_forward.
 * With tp = 1 none of these is called: the one-rank path is the kernels alone. */
#include <math.h>
#include <string.h>

#include "model_internal.h"
#include "ringpipe/rp_kernels.h"

static void local_all_reduce(const rp_tp_ops *o, float *buf, long n, rp_tp_op op) {}

static void local_all_gather(const rp_tp_ops *o, float *out, const float *in, long n) {
  if (out != in) memmove(out, in, (size_t)n * sizeof *out);
}

static const rp_tp_ops local_ops = {.size = 1, .rank = 0, .all_reduce = local_all_reduce,
                                    .all_gather = local_all_gather,
                                    .reduce_scatter = local_all_gather};

const rp_tp_ops *rp_tp_local(void) { return &local_ops; }

void rp_tp_all_reduce(const rp_chunk *m, const rp_exec *x, float *buf, long n, rp_tp_op op) {
  if (m->tp == 1) return;
  RP_CHECK(x->tp && x->tp->size == m->tp && x->tp->rank == m->tp_rank);
  x->tp->all_reduce(x->tp, buf, n, op);
}

/* out[N,OC] = resid + (sum over tp of inp @ w^T) + bias: the g operator after
 * a row-parallel matmul. inp holds this rank's IC input features; the bias
 * (replicated) is added once, after the reduction. At tp = 1 the fused GEMM. */
void rp_tp_row_parallel_forward(const rp_chunk *m, float *out, const float *inp, const float *w,
                                const float *bias, const float *resid, int N, int IC, int OC,
                                const rp_exec *x) {
  if (m->tp == 1) {
    rp_mm_forward_residual(out, inp, w, bias, resid, N, IC, OC, x);
    return;
  }
  rp_mm_forward(out, inp, w, NULL, N, IC, OC, x);
  rp_tp_all_reduce(m, x, out, (long)N * OC, RP_TP_SUM);
  for (long i = 0; i < N; i++) {
    float *o = out + i * OC;
    const float *r = resid + i * OC;
    for (int j = 0; j < OC; j++) o[j] += bias[j] + r[j];
  }
}

/* The token rows this rank's wte shard holds. */
static void vocab_range(const rp_chunk *m, int *lo, int *n) {
  *n = m->cfg.Vp / m->tp;
  *lo = m->tp_rank * *n;
}

/* out = wte[tok] + wpe[pos]: the owner of a token's row writes it, rank 0
 * adds the position embedding, the rest write zeros, and the all-reduce sums
 * them (every addition but one adds 0, so the sum is the one-rank value). */
void rp_tp_embed_partial(const rp_chunk *m, const rp_acts *a, float *out) {
  int lo, nv, N = a->B * a->T, C = m->cfg.C;
  vocab_range(m, &lo, &nv);
  for (long i = 0; i < N; i++) {
    float *o = out + i * C;
    int tok = a->tokens[i] - lo;
    const float *pe = m->p.wpe + (long)a->pos[i] * C;
    const float *te = tok >= 0 && tok < nv ? m->p.wte + (long)tok * C : NULL;
    for (int k = 0; k < C; k++)
      o[k] = te && m->tp_rank == 0 ? te[k] + pe[k] : te ? te[k] : m->tp_rank == 0 ? pe[k] : 0.0f;
  }
}

void rp_tp_embed_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x) {
  rp_tp_embed_partial(m, a, a->input);
  rp_tp_all_reduce(m, x, a->input, (long)a->B * a->T * m->cfg.C, RP_TP_SUM);
}

/* dwte rows of this rank's tokens; dwpe from the (replicated) gradient, the
 * same on every rank. */
void rp_tp_embed_backward(rp_chunk *m, const float *dres, const rp_acts *a) {
  int lo, nv, N = a->B * a->T, C = m->cfg.C;
  vocab_range(m, &lo, &nv);
  for (long i = 0; i < N; i++) {
    const float *d = dres + i * C;
    int tok = a->tokens[i] - lo;
    if (m->g.wte && tok >= 0 && tok < nv) {
      float *g = m->g.wte + (long)tok * C;
      for (int k = 0; k < C; k++) g[k] += d[k];
    }
    float *gp = m->g.wpe + (long)a->pos[i] * C;
    for (int k = 0; k < C; k++) gp[k] += d[k];
  }
}

/* Real vocabulary columns of this rank's logits. */
static int vocab_cols(const rp_chunk *m, int lo, int nv) {
  int n = m->cfg.V - lo;
  return n < 0 ? 0 : n > nv ? nv : n;
}

/* Losses of a->logits (this rank's vocabulary columns): max reduced, then the
 * sums of exp and the target logit (picked by its owner) reduced in one call.
 * Leaves the backward's shift (max + log sum) in a->xent_stats[0..N). */
void rp_tp_xent_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x) {
  int lo, nv, N = a->B * a->T;
  vocab_range(m, &lo, &nv);
  int ncols = vocab_cols(m, lo, nv);
  float *mx = a->xent_stats, *se = mx + N, *tl = se + N;
  rp_xent_vp_max(mx, a->logits, a->targets, N, nv, ncols, x->pool);
  rp_tp_all_reduce(m, x, mx, N, RP_TP_MAX);
  rp_xent_vp_sums(se, tl, a->logits, a->targets, mx, N, nv, ncols, lo, x->pool);
  rp_tp_all_reduce(m, x, se, 2L * N, RP_TP_SUM);
  for (int i = 0; i < N; i++) {
    if (a->targets[i] < 0) {
      a->losses[i] = mx[i] = 0.0f;
      continue;
    }
    float lse = logf(se[i]);
    a->losses[i] = lse + mx[i] - tl[i];
    mx[i] += lse;
  }
}

/* dlogits (in place over a->logits) = (softmax - onehot) * dscale. */
void rp_tp_xent_backward(const rp_chunk *m, rp_acts *a, float dscale, const rp_exec *x) {
  int lo, nv, N = a->B * a->T;
  vocab_range(m, &lo, &nv);
  rp_xent_vp_backward(a->logits, a->logits, a->targets, a->xent_stats, dscale, N, nv,
                      vocab_cols(m, lo, nv), lo, x->pool);
}
