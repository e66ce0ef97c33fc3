/* LayerNorm over the C channels of each row (eps 1e-5), llm.c formulation.
 *
 * Shapes: inp/out/dinp/dout [N,C]; w, b, dw, db [C]; mean, rstd [N].
 * Forward and dinp split rows. dw and db are sums over all N rows; they are split
 * over columns instead, each column summed over rows in order, so they are free
 * of races and bitwise the same for any thread count. */
#include <math.h>

#include "kern_util.h"
#include "ringpipe/rp_kernels.h"

#define LN_EPS 1e-5f

typedef struct {
  float *out, *mean, *rstd, *dinp, *dw, *db;
  const float *inp, *w, *b, *dout, *cmean, *crstd;
  int N, C;
} ln_ctx;

static void ln_fwd_task(void *vctx, int ith, int nth) {
  const ln_ctx *c = vctx;
  const long C = c->C;
  long lo, hi;
  rp_split(c->N, ith, nth, &lo, &hi);
  for (long n = lo; n < hi; n++) {
    const float *restrict x = c->inp + n * C;
    float *restrict y = c->out + n * C;
    const float *restrict w = c->w;
    const float *restrict b = c->b;
    float m = rp_kern_sum(x, C) / (float)C;
    /* two-pass variance: no cancellation when |mean| >> std */
    float acc[RP_KERN_LANES] = {0};
    long i = 0;
    for (; i + RP_KERN_LANES <= C; i += RP_KERN_LANES)
      for (int j = 0; j < RP_KERN_LANES; j++) {
        float d = x[i + j] - m;
        acc[j] += d * d;
      }
    float v = 0.0f;
    for (int j = 0; j < RP_KERN_LANES; j++) v += acc[j];
    for (; i < C; i++) v += (x[i] - m) * (x[i] - m);
    v /= (float)C;
    float s = 1.0f / sqrtf(v + LN_EPS);
    for (long k = 0; k < C; k++) y[k] = (x[k] - m) * s * w[k] + b[k];
    if (c->mean) c->mean[n] = m;
    if (c->rstd) c->rstd[n] = s;
  }
}

void rp_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C, rp_pool *pool) {
  ln_ctx c = {.out = out, .mean = mean, .rstd = rstd, .inp = inp, .w = w, .b = b, .N = N,
              .C = C};
  rp_kern_run(pool, ln_fwd_task, &c, (long)N * C);
}

/* dinp += rstd * (w*dout - mean(w*dout) - xhat * mean(w*dout*xhat)) per row. */
static void ln_dinp_rows(const ln_ctx *c, long lo, long hi) {
  const long C = c->C;
  for (long n = lo; n < hi; n++) {
    const float *restrict x = c->inp + n * C;
    const float *restrict dy = c->dout + n * C;
    const float *restrict w = c->w;
    float *restrict dx = c->dinp + n * C;
    const float m = c->cmean[n], s = c->crstd[n];
    float a1[RP_KERN_LANES] = {0}, a2[RP_KERN_LANES] = {0};
    long i = 0;
    for (; i + RP_KERN_LANES <= C; i += RP_KERN_LANES)
      for (int j = 0; j < RP_KERN_LANES; j++) {
        float dn = w[i + j] * dy[i + j];
        a1[j] += dn;
        a2[j] += dn * ((x[i + j] - m) * s);
      }
    float dmean = 0.0f, dnmean = 0.0f;
    for (int j = 0; j < RP_KERN_LANES; j++) {
      dmean += a1[j];
      dnmean += a2[j];
    }
    for (; i < C; i++) {
      float dn = w[i] * dy[i];
      dmean += dn;
      dnmean += dn * ((x[i] - m) * s);
    }
    dmean /= (float)C;
    dnmean /= (float)C;
    for (long k = 0; k < C; k++) {
      float xhat = (x[k] - m) * s;
      dx[k] += (w[k] * dy[k] - dmean - xhat * dnmean) * s;
    }
  }
}

/* dw[lo:hi] += sum_n dout*xhat, db[lo:hi] += sum_n dout, rows in order. */
static void ln_dwdb_cols(const ln_ctx *c, long lo, long hi) {
  const long C = c->C;
  float *restrict dw = c->dw;
  float *restrict db = c->db;
  for (long n = 0; n < c->N; n++) {
    const float *restrict x = c->inp + n * C;
    const float *restrict dy = c->dout + n * C;
    const float m = c->cmean[n], s = c->crstd[n];
    if (dw)
      for (long k = lo; k < hi; k++) dw[k] += dy[k] * ((x[k] - m) * s);
    if (db)
      for (long k = lo; k < hi; k++) db[k] += dy[k];
  }
}

static void ln_bwd_task(void *vctx, int ith, int nth) {
  const ln_ctx *c = vctx;
  long lo, hi;
  if (c->dinp) {
    rp_split(c->N, ith, nth, &lo, &hi);
    ln_dinp_rows(c, lo, hi);
  }
  if (c->dw || c->db) {
    rp_kern_split_cols(c->C, ith, nth, &lo, &hi);
    ln_dwdb_cols(c, lo, hi);
  }
}

void rp_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C, rp_pool *pool) {
  ln_ctx c = {.dinp = dinp, .dw = dw, .db = db, .dout = dout, .inp = inp, .w = w,
              .cmean = mean, .crstd = rstd, .N = N, .C = C};
  rp_kern_run(pool, ln_bwd_task, &c, (long)N * C);
}
