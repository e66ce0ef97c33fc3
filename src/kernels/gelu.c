/* GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3).
 * Evaluated as x * sigmoid(2u), the same function: 0.5 (1 + tanh u) = sigmoid(2u).
 * This form has no 1 + tanh cancellation for negative x (where 1 + tanhf loses
 * all relative precision), and its exp is rp_kern_expf, so the loops vectorize
 * (libm tanhf/expf are scalar calls per element). */
#include "kern_util.h"
#include "ringpipe/rp_kernels.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

typedef struct {
  float *out;
  const float *inp, *dout;
  long n;
  int set; /* backward: 1 writes dinp, 0 accumulates into it */
} gelu_ctx;

static void gelu_fwd_task(void *vctx, int ith, int nth) {
  const gelu_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  float *restrict y = c->out;
  const float *restrict x = c->inp;
  for (long i = lo; i < hi; i++) {
    float v = x[i];
    float u = GELU_K * RP_FMAF(GELU_A * v * v, v, v);
    y[i] = v * rp_kern_sigmoidf(2.0f * u);
  }
}

void rp_gelu_forward(float *out, const float *inp, long n, rp_pool *pool) {
  gelu_ctx c = {.out = out, .inp = inp, .n = n};
  rp_kern_run(pool, gelu_fwd_task, &c, n);
}

/* d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3*0.044715 x^2);
 * with s = sigmoid(2u): 0.5 (1 + tanh u) = s and 0.5 (1 - tanh^2 u) = 2 s (1 - s),
 * and 1 - s = e^{-2u} s avoids cancellation for large u. The two backward loops
 * differ only in whether they write or add g * dy. */
static inline float gelu_grad(float v) {
  float u = GELU_K * RP_FMAF(GELU_A * v * v, v, v);
  float e = rp_kern_expf(-2.0f * u);
  float s = 1.0f / (1.0f + e);
  return RP_FMAF(2.0f * GELU_K * v * s * (e * s), RP_FMAF(3.0f * GELU_A, v * v, 1.0f), s);
}

static void gelu_bwd_task(void *vctx, int ith, int nth) {
  const gelu_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  float *restrict dx = c->out;
  const float *restrict x = c->inp;
  const float *restrict dy = c->dout;
  if (c->set)
    for (long i = lo; i < hi; i++) dx[i] = gelu_grad(x[i]) * dy[i];
  else
    for (long i = lo; i < hi; i++) dx[i] += gelu_grad(x[i]) * dy[i];
}

void rp_gelu_backward(float *dinp, const float *inp, const float *dout, long n,
                      rp_pool *pool) {
  gelu_ctx c = {.out = dinp, .inp = inp, .dout = dout, .n = n, .set = 0};
  rp_kern_run(pool, gelu_bwd_task, &c, n);
}

void rp_gelu_backward_set(float *dinp, const float *inp, const float *dout, long n,
                          rp_pool *pool) {
  gelu_ctx c = {.out = dinp, .inp = inp, .dout = dout, .n = n, .set = 1};
  rp_kern_run(pool, gelu_bwd_task, &c, n);
}
