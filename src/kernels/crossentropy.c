/* Fused softmax + cross-entropy over the first V of Vp logits per row.
 * Shapes: logits/dlogits [N,Vp], targets/losses [N]. Columns V..Vp are padding
 * (llm.c pads the vocabulary for alignment) and never enter the softmax.
 * Stable: exps are of (logit - row max). A target of -1 masks the row.
 * The row maxima use 512-bit vectors where there are any (RP_KERN_WIDE, same
 * bits); the exp rows are the table of the level in force (xent_internal.h). */
#include <math.h>

#include "kern_util.h"
#include "ringpipe/rp_kernels.h"
#include "xent_internal.h"

/* ---- the softmax rows: the plain-C reference table and the dispatch */

static float sum_exp_c(const float *x, float shift, long n) {
  return rp_kern_sum_exp_shifted(x, shift, n);
}

static void softmax_c(float *d, const float *x, float shift, float dscale, long n) {
  if (d == x)
    rp_kern_softmax_scaled_inplace(d, shift, dscale, n);
  else
    rp_kern_softmax_scaled(d, x, shift, dscale, n);
}

const rp_xent_ops rp_xent_ops_c = {sum_exp_c, softmax_c};

static rp_isa xent_level(void) {
  return rp_kern_table_level(rp_xent_ops_avx512.sum_exp != NULL, rp_xent_ops_avx2.sum_exp != NULL);
}

const rp_xent_ops *rp_xent_ops_active(void) {
  return rp_kern_table_pick(xent_level(), &rp_xent_ops_avx512, &rp_xent_ops_avx2, &rp_xent_ops_c);
}

const char *rp_xent_ops_name(void) { return rp_kern_table_name(xent_level()); }

/* ---- the fused softmax + cross-entropy */

typedef struct {
  float *dlogits, *losses;
  const float *logits;
  const int32_t *targets;
  float dscale;
  int N, V, Vp;
} xent_ctx;

static void check_target(int32_t tgt, int V) {
  if (tgt < -1 || tgt >= V) rp_fatal("xent: target %d outside [-1, %d): bad token data", tgt, V);
}

static RP_KERN_WIDE void xent_fwd_task(void *vctx, int ith, int nth) {
  const xent_ctx *c = vctx;
  const rp_xent_ops *ops = rp_xent_ops_active();
  long lo, hi;
  rp_split(c->N, ith, nth, &lo, &hi);
  for (long n = lo; n < hi; n++) {
    int32_t tgt = c->targets[n];
    check_target(tgt, c->V);
    if (tgt < 0) {
      c->losses[n] = 0.0f;
      continue;
    }
    const float *x = c->logits + n * (long)c->Vp;
    float maxv = rp_kern_max(x, c->V);
    c->losses[n] = logf(ops->sum_exp(x, maxv, c->V)) + maxv - x[tgt];
  }
}

void rp_xent_forward(float *losses, const float *logits, const int32_t *targets, int N, int V,
                     int Vp, rp_pool *pool) {
  xent_ctx c = {.losses = losses, .logits = logits, .targets = targets, .N = N, .V = V,
                .Vp = Vp};
  rp_kern_run(pool, xent_fwd_task, &c, (long)N * V);
}

/* dlogits may alias logits: the loss and target logit are read before the row
 * is overwritten. */
static RP_KERN_WIDE void xent_bwd_task(void *vctx, int ith, int nth) {
  const xent_ctx *c = vctx;
  const long V = c->V, Vp = c->Vp;
  const rp_xent_ops *ops = rp_xent_ops_active();
  long lo, hi;
  rp_split(c->N, ith, nth, &lo, &hi);
  for (long n = lo; n < hi; n++) {
    int32_t tgt = c->targets[n];
    check_target(tgt, c->V);
    const float *x = c->logits + n * Vp;
    float *d = c->dlogits + n * Vp;
    if (tgt < 0) {
      if (c->losses) c->losses[n] = 0.0f;
      for (long i = 0; i < Vp; i++) d[i] = 0.0f;
      continue;
    }
    float maxv = rp_kern_max(x, V);
    float lse = logf(ops->sum_exp(x, maxv, V));
    if (c->losses) c->losses[n] = lse + maxv - x[tgt];
    /* softmax = exp(x - max - lse): one exp per column, no divide */
    ops->softmax(d, x, maxv + lse, c->dscale, V);
    d[tgt] -= c->dscale;
    for (long i = V; i < Vp; i++) d[i] = 0.0f;
  }
}

void rp_xent_backward(float *dlogits, float *losses, const float *logits,
                      const int32_t *targets, float dscale, int N, int V, int Vp,
                      rp_pool *pool) {
  xent_ctx c = {.dlogits = dlogits, .losses = losses, .logits = logits, .targets = targets,
                .dscale = dscale, .N = N, .V = V, .Vp = Vp};
  rp_kern_run(pool, xent_bwd_task, &c, (long)N * V);
}
