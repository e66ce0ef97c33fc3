/* LayerNorm over the C channels of each row (eps 1e-5), llm.c formulation.
 *
 * Shapes: inp/out/dinp/dout [N,C]; w, b, dw, db [C]; mean, rstd [N].
 * Forward and dinp split rows. dw and db are sums over all N rows, taken in one
 * pass with dinp: the rows are cut into fixed chunks (their number depends on N
 * only), each chunk's partial sums are kept, and a second short job adds the
 * partials in chunk order, split over columns. So they are free of races and
 * bitwise the same for any thread count, and inp and dout are read once.
 * The row loops are built for 512-bit vectors where the CPU has them
 * (RP_KERN_WIDE: the same operations in the same order, so the same bits). */
#include <math.h>
#include <stdlib.h>

#include "kern_util.h"
#include "ringpipe/rp_kernels.h"

#define LN_EPS 1e-5f

typedef struct {
  float *out, *mean, *rstd, *dinp, *dw, *db;
  const float *inp, *w, *b, *dout, *cmean, *crstd;
  int N, C;
  float *part;  /* backward: nchunks x 2C partial sums (dw then db per chunk) */
  int nchunks;
} ln_ctx;

/* Row chunks of the dw/db reduction: enough to balance many threads, few enough
 * that the partials (2C floats each) stay small. */
#define LN_CHUNKS 64

static RP_KERN_WIDE void ln_fwd_task(void *vctx, int ith, int nth) {
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
    rp_vn acc[RP_V16_PARTS] = {0};
    long i = 0;
    for (; i + RP_KERN_LANES <= C; i += RP_KERN_LANES)
      RP_V16_EACH(p) {
        const rp_vn d = rp_vn_load(x + i, p) - m;
        acc[p] += d * d;
      }
    float v = rp_v16_sum(acc);
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

/* Rows [lo, hi) of one chunk: dinp += rstd * (w*dout - mean(w*dout) - xhat *
 * mean(w*dout*xhat)) when dinp is wanted, and the chunk's partial sums
 * pw = sum dout*xhat, pb = sum dout over its rows, in row order. */
static void ln_bwd_chunk(const ln_ctx *c, long lo, long hi, float *restrict pw,
                         float *restrict pb) {
  const long C = c->C;
  const int want_w = c->dw != NULL, want_b = c->db != NULL;
  if (want_w || want_b)
    for (long k = 0; k < C; k++) pw[k] = pb[k] = 0.0f;
  for (long n = lo; n < hi; n++) {
    const float *restrict x = c->inp + n * C;
    const float *restrict dy = c->dout + n * C;
    const float *restrict w = c->w;
    const float m = c->cmean[n], s = c->crstd[n];
    if (c->dinp) {
      float *restrict dx = c->dinp + n * C;
      rp_vn a1[RP_V16_PARTS] = {0}, a2[RP_V16_PARTS] = {0};
      long i = 0;
      for (; i + RP_KERN_LANES <= C; i += RP_KERN_LANES)
        RP_V16_EACH(p) {
          const rp_vn dn = rp_vn_load(w + i, p) * rp_vn_load(dy + i, p);
          a1[p] += dn;
          a2[p] += dn * ((rp_vn_load(x + i, p) - m) * s);
        }
      float dmean = rp_v16_sum(a1), dnmean = rp_v16_sum(a2);
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
    if (want_w)
      for (long k = 0; k < C; k++) pw[k] += dy[k] * ((x[k] - m) * s);
    if (want_b)
      for (long k = 0; k < C; k++) pb[k] += dy[k];
  }
}

static RP_KERN_WIDE void ln_bwd_rows_task(void *vctx, int ith, int nth) {
  const ln_ctx *c = vctx;
  long clo, chi;
  rp_split(c->nchunks, ith, nth, &clo, &chi);
  for (long k = clo; k < chi; k++) {
    long lo, hi;
    rp_split(c->N, (int)k, c->nchunks, &lo, &hi);
    float *pw = c->part ? c->part + k * 2L * c->C : NULL;
    ln_bwd_chunk(c, lo, hi, pw, pw ? pw + c->C : NULL);
  }
}

/* dw[lo:hi] += partials of every chunk, in chunk order; db likewise. */
static void ln_bwd_reduce_task(void *vctx, int ith, int nth) {
  const ln_ctx *c = vctx;
  const long C = c->C;
  long lo, hi;
  rp_kern_split_cols(C, ith, nth, &lo, &hi);
  for (long k = 0; k < c->nchunks; k++) {
    const float *restrict pw = c->part + k * 2 * C;
    const float *restrict pb = pw + C;
    if (c->dw)
      for (long i = lo; i < hi; i++) c->dw[i] += pw[i];
    if (c->db)
      for (long i = lo; i < hi; i++) c->db[i] += pb[i];
  }
}

void rp_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C, rp_pool *pool) {
  if (!dinp && !dw && !db) return;
  ln_ctx c = {.dinp = dinp, .dw = dw, .db = db, .dout = dout, .inp = inp, .w = w,
              .cmean = mean, .crstd = rstd, .N = N, .C = C,
              .nchunks = N < LN_CHUNKS ? (N > 0 ? N : 1) : LN_CHUNKS};
  if (dw || db) {
    c.part = malloc(sizeof(float) * 2 * (size_t)C * (size_t)c.nchunks);
    RP_CHECK(c.part != NULL);
  }
  rp_kern_run(pool, ln_bwd_rows_task, &c, (long)N * C);
  if (c.part) rp_kern_run(pool, ln_bwd_reduce_task, &c, (long)c.nchunks * C);
  free(c.part);
}
