/* GELU over the model's tensors: the thread split and the bias-gradient pass
 * here, the per-element spans in the table of the instruction-set level in
 * force (gelu_internal.h: the plain-C loops below are the reference; the
 * AVX-512 and AVX2 ones in simd_rows.c give their bits). rp_kern_expf keeps
 * the exp in plain arithmetic so that the C loops vectorize as well (libm
 * tanhf/expf are scalar calls per element). */
#include "fused_internal.h"
#include "gelu_internal.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  float *out;
  const float *inp, *dout;
  long n;
  int set; /* backward: 1 writes dinp, 0 accumulates into it */
} gelu_ctx;

/* ---- the reference spans (plain C, vectorized by the compiler) */

static RP_KERN_WIDE void gelu_forward_c(float *restrict y, const float *restrict x, long n) {
  for (long i = 0; i < n; i++) y[i] = rp_gelu_value(x[i]);
}

/* the set / accumulate / bias-gradient loops apart: with the choice inside
 * the loop gcc left it scalar (7x slower with -march=haswell) */
static RP_KERN_WIDE void gelu_backward_c(float *restrict dx, float *restrict db,
                                         const float *restrict x, const float *restrict dy,
                                         long n, int set) {
  if (db && set) {
    for (long i = 0; i < n; i++) {
      float g = rp_gelu_grad(x[i]) * dy[i];
      dx[i] = g;
      db[i] += g;
    }
  } else if (db) {
    for (long i = 0; i < n; i++) {
      float g = rp_gelu_grad(x[i]) * dy[i];
      dx[i] += g;
      db[i] += g;
    }
  } else if (set) {
    for (long i = 0; i < n; i++) dx[i] = rp_gelu_grad(x[i]) * dy[i];
  } else {
    for (long i = 0; i < n; i++) dx[i] += rp_gelu_grad(x[i]) * dy[i];
  }
}

const rp_gelu_ops rp_gelu_ops_c = {gelu_forward_c, gelu_backward_c};

static rp_isa gelu_level(void) {
  return rp_kern_table_level(rp_gelu_ops_avx512.forward != NULL, rp_gelu_ops_avx2.forward != NULL);
}

const rp_gelu_ops *rp_gelu_ops_active(void) {
  return rp_kern_table_pick(gelu_level(), &rp_gelu_ops_avx512, &rp_gelu_ops_avx2, &rp_gelu_ops_c);
}

const char *rp_gelu_ops_name(void) { return rp_kern_table_name(gelu_level()); }

void rp_gelu_forward_span(float *y, const float *x, long n) {
  rp_gelu_ops_active()->forward(y, x, n);
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

static void gelu_bwd_task(void *vctx, int ith, int nth) {
  const gelu_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  if (hi > lo)
    rp_gelu_ops_active()->backward(c->out + lo, NULL, c->inp + lo, c->dout + lo, hi - lo,
                                   c->set);
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

static void gelu_bwd_dbias_task(void *vctx, int ith, int nth) {
  const gelu_dbias_ctx *c = vctx;
  const rp_gelu_ops *ops = rp_gelu_ops_active();
  long lo, hi;
  rp_kern_split_cols(c->C, ith, nth, &lo, &hi);
  if (hi <= lo) return;
  for (long n = 0; n < c->N; n++) {
    const long at = n * c->C + lo;
    ops->backward(c->dinp + at, c->dbias ? c->dbias + lo : NULL, c->inp + at, c->dout + at,
                  hi - lo, 1);
  }
}

void rp_gelu_backward_set_dbias(float *dinp, float *dbias, const float *inp, const float *dout,
                                int N, int C, rp_pool *pool) {
  gelu_dbias_ctx c = {.dinp = dinp, .dbias = dbias, .inp = inp, .dout = dout, .N = N, .C = C};
  rp_kern_run(pool, gelu_bwd_dbias_task, &c, (long)N * C);
}
