/* Vocabulary-parallel cross-entropy pieces (Megatron): this rank holds columns
 * [v0, v0 + Vl) of every row of the logits, of which the first `ncols` are
 * real vocabulary (the rest padding). The caller reduces the row maxima (max)
 * and the sums of exp and target logits (sum) over the tensor-parallel group
 * between the calls, so the full logits are never gathered:
 *   loss = log(sum_ranks sum exp(x - max)) + max - x[target]
 * A masked row (target -1) computes nothing: maximum 0, sums 0, gradient 0. */
#include <math.h>

#include "kern_util.h"
#include "ringpipe/rp_kernels.h"
#include "xent_internal.h"

typedef struct {
  float *out0, *out1, *dlogits;
  const float *logits, *stat;
  const int32_t *targets;
  float dscale;
  int N, Vl, ncols, v0;
} vp_ctx;

static RP_KERN_WIDE void max_task(void *vctx, int ith, int nth) {
  const vp_ctx *c = vctx;
  long lo, hi;
  rp_split(c->N, ith, nth, &lo, &hi);
  for (long n = lo; n < hi; n++)
    c->out0[n] = c->targets[n] < 0 ? 0.0f
                 : c->ncols > 0   ? rp_kern_max(c->logits + n * (long)c->Vl, c->ncols)
                                  : -INFINITY;
}

void rp_xent_vp_max(float *rowmax, const float *logits, const int32_t *targets, int N, int Vl,
                    int ncols, rp_pool *pool) {
  vp_ctx c = {.out0 = rowmax, .logits = logits, .targets = targets, .N = N, .Vl = Vl,
              .ncols = ncols};
  rp_kern_run(pool, max_task, &c, (long)N * ncols);
}

static RP_KERN_WIDE void sums_task(void *vctx, int ith, int nth) {
  const vp_ctx *c = vctx;
  const rp_xent_ops *ops = rp_xent_ops_active();
  long lo, hi;
  rp_split(c->N, ith, nth, &lo, &hi);
  for (long n = lo; n < hi; n++) {
    int32_t tgt = c->targets[n];
    c->out0[n] = c->out1[n] = 0.0f;
    if (tgt < 0) continue;
    const float *x = c->logits + n * (long)c->Vl;
    c->out0[n] = ops->sum_exp(x, c->stat[n], c->ncols);
    if (tgt >= c->v0 && tgt < c->v0 + c->ncols) c->out1[n] = x[tgt - c->v0];
  }
}

void rp_xent_vp_sums(float *sumexp, float *target_logit, const float *logits,
                     const int32_t *targets, const float *rowmax, int N, int Vl, int ncols,
                     int v0, rp_pool *pool) {
  vp_ctx c = {.out0 = sumexp, .out1 = target_logit, .logits = logits, .stat = rowmax,
              .targets = targets, .N = N, .Vl = Vl, .ncols = ncols, .v0 = v0};
  rp_kern_run(pool, sums_task, &c, (long)N * ncols);
}

/* the softmax rows of the level in force, as in rp_xent_backward */
static void bwd_task(void *vctx, int ith, int nth) {
  const vp_ctx *c = vctx;
  const rp_xent_ops *ops = rp_xent_ops_active();
  long lo, hi;
  rp_split(c->N, ith, nth, &lo, &hi);
  for (long n = lo; n < hi; n++) {
    int32_t tgt = c->targets[n];
    const float *x = c->logits + n * (long)c->Vl;
    float *d = c->dlogits + n * (long)c->Vl;
    long i = 0;
    if (tgt >= 0) {
      ops->softmax(d, x, c->stat[n], c->dscale, c->ncols);
      i = c->ncols;
      if (tgt >= c->v0 && tgt < c->v0 + c->ncols) d[tgt - c->v0] -= c->dscale;
    }
    for (; i < c->Vl; i++) d[i] = 0.0f;
  }
}

void rp_xent_vp_backward(float *dlogits, const float *logits, const int32_t *targets,
                         const float *shift, float dscale, int N, int Vl, int ncols, int v0,
                         rp_pool *pool) {
  vp_ctx c = {.dlogits = dlogits, .logits = logits, .stat = shift, .targets = targets,
              .dscale = dscale, .N = N, .Vl = Vl, .ncols = ncols, .v0 = v0};
  rp_kern_run(pool, bwd_task, &c, (long)N * Vl);
}
