/* GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3).
 * Evaluated as x * sigmoid(2u), the same function: 0.5 (1 + tanh u) = sigmoid(2u).
 * This form has no 1 + tanh cancellation for negative x (where 1 + tanhf loses
 * all relative precision), and its exp is rp_kern_expf, so the loops vectorize
 * (libm tanhf/expf are scalar calls per element). */
#include "fused_internal.h"
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

static inline float gelu_value(float v) {
  float u = GELU_K * RP_FMAF(GELU_A * v * v, v, v);
  return v * rp_kern_sigmoidf(2.0f * u);
}

RP_KERN_WIDE void rp_gelu_forward_span(float *restrict y, const float *restrict x, long n) {
  for (long i = 0; i < n; i++) y[i] = gelu_value(x[i]);
}

static void gelu_fwd_task(void *vctx, int ith, int nth) {
  const gelu_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  if (hi > lo) rp_gelu_forward_span(c->out + lo, c->inp + lo, hi - lo);
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

static void gelu_backward_span(float *restrict dx, const float *restrict x,
                               const float *restrict dy, long n, int set) {
  if (set)
    for (long i = 0; i < n; i++) dx[i] = gelu_grad(x[i]) * dy[i];
  else
    for (long i = 0; i < n; i++) dx[i] += gelu_grad(x[i]) * dy[i];
}

/* wide here, not only on the span: an inlined callee is compiled with its
 * caller's vector width */
static RP_KERN_WIDE void gelu_bwd_task(void *vctx, int ith, int nth) {
  const gelu_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  if (hi > lo) gelu_backward_span(c->out + lo, c->inp + lo, c->dout + lo, hi - lo, c->set);
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

/* The GELU backward with the next matmul's bias gradient (the column sums of
 * its output) taken in the same pass, so dinp is not read again for them.
 * Split by columns at cache-line boundaries: each thread walks every row of
 * its columns in row order, the order rp_matmul_backward sums a bias column
 * in, so dbias is bitwise the same for any thread count and equal to
 * rp_gelu_backward_set followed by rp_matmul_backward's dbias. */
typedef struct {
  float *dinp, *dbias;
  const float *inp, *dout;
  int N, C;
} gelu_dbias_ctx;

static RP_KERN_WIDE void gelu_bwd_dbias_task(void *vctx, int ith, int nth) {
  const gelu_dbias_ctx *c = vctx;
  long lo, hi;
  rp_kern_split_cols(c->C, ith, nth, &lo, &hi);
  float *restrict db = c->dbias;
  for (long n = 0; n < c->N; n++) {
    const long row = n * c->C;
    float *restrict dx = c->dinp + row;
    const float *restrict x = c->inp + row;
    const float *restrict dy = c->dout + row;
    if (db) {
      for (long k = lo; k < hi; k++) {
        float v = gelu_grad(x[k]) * dy[k];
        dx[k] = v;
        db[k] += v;
      }
    } else {
      for (long k = lo; k < hi; k++) dx[k] = gelu_grad(x[k]) * dy[k];
    }
  }
}

void rp_gelu_backward_set_dbias(float *dinp, float *dbias, const float *inp, const float *dout,
                                int N, int C, rp_pool *pool) {
  gelu_dbias_ctx c = {.dinp = dinp, .dbias = dbias, .inp = inp, .dout = dout, .N = N, .C = C};
  rp_kern_run(pool, gelu_bwd_dbias_task, &c, (long)N * C);
}
