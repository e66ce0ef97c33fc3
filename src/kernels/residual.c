/* Residual add, in-place accumulate and zero fill, elementwise over n values. The
 * residual backward needs no kernel of its own: da += dout and db += dout are two
 * rp_add_inplace calls (or none, when the gradient is the caller's own buffer). */
#include "fused_internal.h"
#include "kern_util.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  float *out;
  const float *a, *b;
  long n;
} res_ctx;

/* out may be a or b itself (elementwise, so that is well defined): no restrict */
void rp_residual_forward_span(float *out, const float *a, const float *b, long n) {
  for (long i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void res_fwd_task(void *vctx, int ith, int nth) {
  const res_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  if (hi > lo) rp_residual_forward_span(c->out + lo, c->a + lo, c->b + lo, hi - lo);
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

static void zero_task(void *vctx, int ith, int nth) {
  const res_ctx *c = vctx;
  long lo, hi;
  rp_kern_split_cols(c->n, ith, nth, &lo, &hi); /* cache-line boundaries */
  if (hi > lo) memset(c->out + lo, 0, sizeof(float) * (size_t)(hi - lo));
}

/* On the pool rather than the caller alone: the workers would otherwise spin
 * idle (or fall asleep) while the caller clears a gradient buffer. */
void rp_zero(float *x, long n, rp_pool *pool) {
  res_ctx c = {.out = x, .n = n};
  rp_kern_run(pool, zero_task, &c, n);
}
