/* The MLP's fc matmul with its GELU fused in as an epilogue, so that the
 * activation pass runs on rows the same thread has just written (the last of
 * them still in its caches) and the pool is dispatched once instead of twice.
 *
 * Each pool thread runs the plain kernel's sgemm on its row slice
 * (rp_matmul_rows_forward) and then the GELU loop (rp_gelu_forward_span) over
 * the same rows: the very calls of the unfused composition on the same data,
 * so the fused result equals rp_matmul_forward + rp_gelu_forward bitwise,
 * which tests/kernels checks. Where the plain matmul does not run the row kernels per thread (BLAS
 * threads mode on several threads, skinny products) the composition itself runs.
 *
 * The epilogue's time on the calling thread (pool thread 0) is reported when
 * asked for, so that the step profile can keep GELU apart from the GEMM.
 */
#include "fused_internal.h"
#include "gelu_internal.h"
#include "kern_util.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_sgemm.h"
#include "ringpipe/rp_util.h"

typedef struct {
  float *pre, *post;
  const float *inp, *weight, *bias;
  int N, IC, OC;
  double epi_s; /* thread 0's epilogue seconds (when timed) */
  int timed;
} fused_ctx;

/* The epilogue on a block of pre (rows [m0, m1) x columns [j0, j1)), timed on
 * thread 0: ringpipe's GEMM calls it on each block as soon as it is done.
 * GELU is elementwise (its vector tail the same code), so any blocking gives
 * the bits of one pass over the rows; whole rows are one contiguous span. */
static void gelu_block(void *vctx, long m0, long m1, long j0, long j1, int ith) {
  fused_ctx *c = vctx;
  double t0 = c->timed && ith == 0 ? rp_now() : 0.0;
  if (j0 == 0 && j1 == c->OC && m1 > m0)
    rp_gelu_forward_span(c->post + m0 * c->OC, c->pre + m0 * c->OC, (m1 - m0) * c->OC);
  else
    for (long m = m0; m < m1 && j1 > j0; m++)
      rp_gelu_forward_span(c->post + m * c->OC + j0, c->pre + m * c->OC + j0, j1 - j0);
  if (c->timed && ith == 0) c->epi_s += rp_now() - t0;
}

/* The same on whole rows [lo, hi) (the split and bf16 GEMMs' epilogue). */
static void gelu_rows(void *vctx, long lo, long hi, int ith) {
  gelu_block(vctx, lo, hi, 0, ((fused_ctx *)vctx)->OC, ith);
}

static void fwd_gelu_task(void *vctx, int ith, int nth) {
  fused_ctx *c = vctx;
  long lo, hi;
  rp_split(c->N, ith, nth, &lo, &hi);
  rp_matmul_rows_forward(c->pre, c->inp, c->weight, c->bias, NULL, lo, hi, c->IC, c->OC);
  gelu_rows(c, lo, hi, ith);
}

void rp_matmul_forward_gelu(float *pre, float *post, const float *inp, const float *weight,
                            const float *bias, int N, int IC, int OC, rp_pool *pool,
                            double *epilogue_s) {
  if (rp_matmul_own_applies(pool, N, IC, OC, 0)) {
    fused_ctx c = {.pre = pre, .post = post, .OC = OC, .timed = epilogue_s != NULL};
    rp_sgemm_forward_epi((rp_sgemm_kernel)rp_sgemm_kernel_best(), pre, inp, weight, bias, N, IC,
                         OC, pool, gelu_block, &c);
    if (epilogue_s) *epilogue_s = c.epi_s;
    return;
  }
  if (!rp_matmul_rows_fusable(pool, N)) {
    rp_matmul_forward(pre, inp, weight, bias, N, IC, OC, pool);
    double t0 = epilogue_s ? rp_now() : 0.0;
    rp_gelu_forward(post, pre, (long)N * OC, pool);
    if (epilogue_s) *epilogue_s = rp_now() - t0;
    return;
  }
  rp_blas_set_threads(1);
  fused_ctx c = {.pre = pre, .post = post, .inp = inp, .weight = weight, .bias = bias, .N = N,
                 .IC = IC, .OC = OC, .timed = epilogue_s != NULL};
  rp_pool_run(pool, fwd_gelu_task, &c);
  if (epilogue_s) *epilogue_s = c.epi_s;
}

/* ---- the MLP's c_proj backward with the GELU backward fused in */

typedef struct {
  float *dpre, *dbias_pre;
  const float *pre, *dpost;
  int C;
  double epi_s;
  int timed;
} gelu_bwd_ctx;

/* dpre = gelu'(pre) * dpost on a block the GEMM has just finished, and (when
 * dbias) the block's rows added to dbias_pre in order: each column's blocks
 * reach it in row order, as rp_gelu_backward_set_dbias walks them */
static void gelu_bwd_rows(gelu_bwd_ctx *c, long m0, long m1, long j0, long j1, int ith,
                          float *dbias) {
  double t0 = c->timed && ith == 0 ? rp_now() : 0.0;
  const rp_gelu_ops *ops = rp_gelu_ops_active();
  for (long m = m0; m < m1 && j1 > j0; m++) {
    const long at = m * c->C + j0;
    ops->backward(c->dpre + at, dbias ? dbias + j0 : NULL, c->pre + at, c->dpost + at, j1 - j0,
                  1);
  }
  if (c->timed && ith == 0) c->epi_s += rp_now() - t0;
}

static void gelu_bwd_block(void *vctx, long m0, long m1, long j0, long j1, int ith) {
  gelu_bwd_ctx *c = vctx;
  gelu_bwd_rows(c, m0, m1, j0, j1, ith, c->dbias_pre);
}

/* a block another thread's columns: dpre alone, its bias rows added by
 * gelu_bwd_dbias later */
static void gelu_bwd_block_any(void *vctx, long m0, long m1, long j0, long j1, int ith) {
  gelu_bwd_rows(vctx, m0, m1, j0, j1, ith, NULL);
}

/* dbias_pre += the block's dpre rows, in order: the same float adds as the
 * GELU backward makes with its dbias (dpre as stored) */
static void gelu_bwd_dbias(void *vctx, long m0, long m1, long j0, long j1, int ith) {
  gelu_bwd_ctx *c = vctx;
  if (!c->dbias_pre) return;
  double t0 = c->timed && ith == 0 ? rp_now() : 0.0;
  float *restrict db = c->dbias_pre;
  for (long m = m0; m < m1; m++) {
    const float *restrict d = c->dpre + m * c->C;
    for (long j = j0; j < j1; j++) db[j] += d[j];
  }
  if (c->timed && ith == 0) c->epi_s += rp_now() - t0;
}

void rp_matmul_backward_gelu(float *dpre, float *dpost, float *dbias_pre, float *dweight,
                             float *dbias, const float *dout, const float *post,
                             const float *pre, const float *weight, int N, int IC, int OC,
                             rp_pool *pool, double *epilogue_s) {
  if (rp_matmul_own_applies(pool, N, IC, OC, 1)) {
    gelu_bwd_ctx c = {.dpre = dpre, .dbias_pre = dbias_pre, .pre = pre, .dpost = dpost,
                      .C = IC, .timed = epilogue_s != NULL};
    const rp_sgemm_epi epi = {gelu_bwd_block, gelu_bwd_block_any, gelu_bwd_dbias, &c};
    rp_sgemm_backward_epi((rp_sgemm_kernel)rp_sgemm_kernel_best(), dpost, dweight, dbias, dout,
                          post, weight, N, IC, OC, 1, pool, &epi);
    if (epilogue_s) *epilogue_s = c.epi_s;
    return;
  }
  rp_matmul_backward_set(dpost, dweight, dbias, dout, post, weight, N, IC, OC, pool);
  double t0 = epilogue_s ? rp_now() : 0.0;
  rp_gelu_backward_set_dbias(dpre, dbias_pre, pre, dpost, N, IC, pool);
  if (epilogue_s) *epilogue_s = rp_now() - t0;
}

/* The bf16 GEMM (fp32 input rounded as it is packed, bf16 weight) with the same
 * GELU epilogue on each thread's finished rows: bitwise
 * rp_matmul_bf16_forward_f32in followed by rp_gelu_forward. */
void rp_matmul_bf16_forward_gelu(float *pre, float *post, const float *inp, const uint16_t *w16,
                                 const float *bias, int N, int IC, int OC, rp_pool *pool,
                                 double *epilogue_s) {
  fused_ctx c = {.pre = pre, .post = post, .OC = OC, .timed = epilogue_s != NULL};
  rp_matmul_bf16_forward_f32in_epi(pre, inp, w16, bias, N, IC, OC, pool, gelu_rows, &c);
  if (epilogue_s) *epilogue_s = c.epi_s;
}

typedef struct {
  float *out;
  const float *prod, *resid;
  int OC;
} resid_ctx;

/* out = prod + resid on rows [lo, hi), which this thread has just computed */
static void resid_rows(void *vctx, long lo, long hi, int ith) {
  (void)ith;
  const resid_ctx *c = vctx;
  const long o = lo * c->OC;
  rp_residual_forward_span(c->out + o, c->prod + o, c->resid + o, (hi - lo) * c->OC);
}

/* The bf16 GEMM into prod (out itself, or scratch when out aliases resid), then
 * out = prod + resid on each thread's finished rows: bitwise
 * rp_matmul_bf16_forward_f32in followed by rp_add_inplace, one pass and one
 * dispatch less. */
void rp_matmul_bf16_forward_residual(float *out, float *prod, const float *inp,
                                     const uint16_t *w16, const float *bias, const float *resid,
                                     int N, int IC, int OC, rp_pool *pool) {
  resid_ctx c = {.out = out, .prod = prod, .resid = resid, .OC = OC};
  rp_matmul_bf16_forward_f32in_epi(prod, inp, w16, bias, N, IC, OC, pool, resid_rows, &c);
}
