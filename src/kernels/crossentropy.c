/* Fused softmax + cross-entropy over the first V of Vp logits per row.
 * Shapes: logits/dlogits [N,Vp], targets/losses [N]. Columns V..Vp are padding
 * (llm.c pads the vocabulary for alignment) and never enter the softmax.
 * Stable: exps are of (logit - row max). A target of -1 masks the row.
 * The row loops use 512-bit vectors where there are any (RP_KERN_WIDE, same bits). */
#include <math.h>

#include "kern_util.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  float *dlogits, *losses;
  const float *logits;
  const int32_t *targets;
  float dscale;
  int N, V, Vp;
} xent_ctx;

/* log of sum_i exp(x[i] - maxv) over V columns, in float, vectorized exp. */
static float row_logsumexp_shifted(const float *restrict x, float maxv, long V) {
  return logf(rp_kern_sum_exp_shifted(x, maxv, V));
}

static void check_target(int32_t tgt, int V) {
  if (tgt < -1 || tgt >= V) rp_fatal("xent: target %d outside [-1, %d): bad token data", tgt, V);
}

static RP_KERN_WIDE void xent_fwd_task(void *vctx, int ith, int nth) {
  const xent_ctx *c = vctx;
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
    c->losses[n] = row_logsumexp_shifted(x, maxv, c->V) + maxv - x[tgt];
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
    float lse = row_logsumexp_shifted(x, maxv, V);
    if (c->losses) c->losses[n] = lse + maxv - x[tgt];
    /* softmax = exp(x - max - lse): one exp per column, no divide */
    float shift = maxv + lse;
    if (d == x)
      rp_kern_softmax_scaled_inplace(d, shift, c->dscale, V);
    else
      rp_kern_softmax_scaled(d, x, shift, c->dscale, V);
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
