/* Residual add and in-place accumulate, elementwise over n values. The residual
 * backward needs no kernel of its own: da += dout and db += dout are two
 * rp_add_inplace calls (or none, when the gradient is the caller's own buffer). */
#include "kern_util.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  float *out;
  const float *a, *b;
  long n;
} res_ctx;

static void res_fwd_task(void *vctx, int ith, int nth) {
  const res_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  float *restrict o = c->out;
  const float *restrict a = c->a;
  const float *restrict b = c->b;
  for (long i = lo; i < hi; i++) o[i] = a[i] + b[i];
}

void rp_residual_forward(float *out, const float *a, const float *b, long n, rp_pool *pool) {
  res_ctx c = {.out = out, .a = a, .b = b, .n = n};
  rp_kern_run(pool, res_fwd_task, &c, n);
}

static void add_task(void *vctx, int ith, int nth) {
  const res_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  float *restrict acc = c->out;
  const float *restrict x = c->a;
  for (long i = lo; i < hi; i++) acc[i] += x[i];
}

void rp_add_inplace(float *acc, const float *x, long n, rp_pool *pool) {
  res_ctx c = {.out = acc, .a = x, .n = n};
  rp_kern_run(pool, add_task, &c, n);
}
