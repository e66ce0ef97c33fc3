/* Optimizer kernels: AdamW (decoupled weight decay, llm.c formulation), the sum
 * of squares for gradient-norm clipping, scaling, and the cosine lr schedule.
 * All are elementwise over n values except rp_sumsq, whose partial sums live in
 * fixed chunks so that the total is bitwise the same for any thread count. */
#include <math.h>

#include "kern_util.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_kernels.h"
#include "work_range.h"

/* The updates are shared among the threads (work_range.h) in units of 16K
 * elements (256 KiB of AdamW's four arrays), so that a core slowed by a
 * neighbour does not hold the step up; each element is the same whoever
 * updates it. */
#define RP_OPTIM_UNIT 16384L

typedef struct {
  float *param, *m, *v;
  uint16_t *param16; /* or NULL: the bf16 copy of each updated parameter (RNE) */
  const float *grad;
  float lr, b1, b2, eps, wd, icorr1, icorr2, gscale;
} adamw_ctx;

/* llm.c's update with the bias corrections applied as multiplications by their
 * reciprocals: one divide and one square root per element instead of three
 * divides and a root. At AVX-512 width the divider, not memory, limits this
 * loop: measured 1.9x faster on cache-resident tensors and 1.25x on the 10.8M
 * parameters of the L=6 C=384 model with 2 threads. Not bitwise llm.c's (the
 * quotients round differently in the last bit). Compiled for 512-bit vectors
 * where the CPU has them (RP_KERN_WIDE, the same bits): 0.95 of the time of
 * the 256-bit loop on those parameters (Sapphire Rapids, 2 threads). */
static inline float adamw_element(const adamw_ctx *c, float *restrict p, float *restrict m,
                                   float *restrict v, const float *restrict g, long i) {
  const float b1 = c->b1, b2 = c->b2;
  float gi = g[i] * c->gscale; /* exact when gscale == 1 */
  float mi = b1 * m[i] + (1.0f - b1) * gi;
  float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  float mhat = mi * c->icorr1, vhat = vi * c->icorr2;
  return p[i] -= c->lr * (mhat / (sqrtf(vhat) + c->eps) + c->wd * p[i]);
}

static RP_KERN_WIDE void adamw_range(void *vctx, long lo, long hi) {
  const adamw_ctx *c = vctx;
  float *restrict p = c->param;
  float *restrict m = c->m;
  float *restrict v = c->v;
  const float *restrict g = c->grad;
  uint16_t *restrict p16 = c->param16;
  /* two loops rather than a test inside one, which gcc would not vectorize */
  if (p16)
    for (long i = lo; i < hi; i++) p16[i] = rp_bf16_from_f32(adamw_element(c, p, m, v, g, i));
  else
    for (long i = lo; i < hi; i++) adamw_element(c, p, m, v, g, i);
}

static void adamw_update(float *param, uint16_t *param16, const float *grad, float *m,
                         float *v, long n, const rp_adamw_hparams *h, float wd, int t,
                         float gscale, rp_pool *pool) {
  RP_CHECK(t >= 1);
  adamw_ctx c = {.param = param, .param16 = param16, .m = m, .v = v, .grad = grad,
                 .lr = h->lr, .b1 = h->beta1, .b2 = h->beta2, .eps = h->eps, .wd = wd,
                 .icorr1 = (float)(1.0 / (1.0 - pow(h->beta1, t))),
                 .icorr2 = (float)(1.0 / (1.0 - pow(h->beta2, t))), .gscale = gscale};
  rp_kern_run_shared(pool, adamw_range, &c, n, RP_OPTIM_UNIT);
}

/* `wd` is the decoupled decay coefficient for this tensor: the trainer passes
 * h->weight_decay for matrices and 0 for biases, norms (and whatever else it
 * exempts), so h->weight_decay itself is not read here. */
void rp_adamw_update(float *param, const float *grad, float *m, float *v, long n,
                     const rp_adamw_hparams *h, float wd, int t, rp_pool *pool) {
  adamw_update(param, NULL, grad, m, v, n, h, wd, t, 1.0f, pool);
}

/* The clipping scale applied on the fly: one pass over the gradients less than
 * rp_scale followed by rp_adamw_update, and bitwise the same parameters and
 * moments (each gradient is rounded to g * gscale once either way). */
void rp_adamw_update_scaled(float *param, const float *grad, float *m, float *v, long n,
                            const rp_adamw_hparams *h, float wd, int t, float gscale,
                            rp_pool *pool) {
  adamw_update(param, NULL, grad, m, v, n, h, wd, t, gscale, pool);
}

/* --precision bf16: the weights' bf16 copies written in the same pass, bitwise
 * rp_bf16_from_f32_array over the updated parameters afterwards (the same
 * integer rounding rule, rp_bf16.h), without reading the parameters again. */
void rp_adamw_update_scaled_bf16(float *param, uint16_t *param16, const float *grad, float *m,
                                 float *v, long n, const rp_adamw_hparams *h, float wd, int t,
                                 float gscale, rp_pool *pool) {
  adamw_update(param, param16, grad, m, v, n, h, wd, t, gscale, pool);
}

/* rp_sumsq: x is cut into SUMSQ_CHUNKS fixed chunks (independent of nth); each is
 * summed in double in a fixed order, then the chunk sums are added in order. */
#define SUMSQ_CHUNKS 256
#define SUMSQ_LANES 8

typedef struct {
  const float *x;
  long n;
  double part[SUMSQ_CHUNKS];
} sumsq_ctx;

/* A chunk's sum of squares in double: lane j has added the elements at lo + j,
 * lo + j + SUMSQ_LANES, ... in order; the lanes are added in order, then the
 * tail x[i, hi). */
static double sumsq_finish(const double acc[SUMSQ_LANES], const float *x, long i, long hi) {
  double s = 0.0;
  for (int j = 0; j < SUMSQ_LANES; j++) s += acc[j];
  for (; i < hi; i++) s += (double)x[i] * x[i];
  return s;
}

/* acc[j] += x[i + j]^2 for the lanes j of each of n / SUMSQ_LANES steps */
static inline void sumsq_lanes(double acc[SUMSQ_LANES], const float *restrict x, long steps) {
  for (long q = 0; q < steps; q++)
    for (int j = 0; j < SUMSQ_LANES; j++) {
      double d = x[q * SUMSQ_LANES + j];
      acc[j] += d * d;
    }
}

/* SUMSQ_GROUP chunks at a time, each exactly as one chunk alone (the same
 * lanes in the same order, so the same bits), interleaved: one chunk's lanes
 * are a chain of dependent adds, several chunks' chains keep the adders busy.
 * Written so that gcc vectorizes it (the one-chunk loop it left scalar):
 * 10.6M gradients on 2 threads, 2.6-2.9 -> 1.4-1.6 ms. */
#define SUMSQ_GROUP 4
_Static_assert(SUMSQ_GROUP == 4, "sumsq_chunk_group spells out its four chunks");

static RP_KERN_WIDE void sumsq_chunk_group(const float *restrict x, const long *lo,
                                           const long *hi, double *out) {
  double acc[SUMSQ_GROUP][SUMSQ_LANES] = {{0}};
  long common = hi[0] - lo[0];
  for (int c = 1; c < SUMSQ_GROUP; c++) common = RP_MIN(common, hi[c] - lo[c]);
  const long steps = common / SUMSQ_LANES;
  const float *x0 = x + lo[0], *x1 = x + lo[1], *x2 = x + lo[2], *x3 = x + lo[3];
  for (long q = 0; q < steps * SUMSQ_LANES; q += SUMSQ_LANES)
    for (int j = 0; j < SUMSQ_LANES; j++) {
      double d0 = x0[q + j], d1 = x1[q + j], d2 = x2[q + j], d3 = x3[q + j];
      acc[0][j] += d0 * d0;
      acc[1][j] += d1 * d1;
      acc[2][j] += d2 * d2;
      acc[3][j] += d3 * d3;
    }
  for (int c = 0; c < SUMSQ_GROUP; c++) {
    long i = lo[c] + steps * SUMSQ_LANES;
    const long more = (hi[c] - i) / SUMSQ_LANES;
    sumsq_lanes(acc[c], x + i, more);
    out[c] = sumsq_finish(acc[c], x, i + more * SUMSQ_LANES, hi[c]);
  }
}

static RP_KERN_WIDE double sumsq_range(const float *restrict x, long lo, long hi) {
  double acc[SUMSQ_LANES] = {0};
  const long steps = (hi - lo) / SUMSQ_LANES;
  sumsq_lanes(acc, x + lo, steps);
  return sumsq_finish(acc, x, lo + steps * SUMSQ_LANES, hi);
}

static void sumsq_task(void *vctx, int ith, int nth) {
  sumsq_ctx *c = vctx;
  long clo, chi, k;
  rp_split(SUMSQ_CHUNKS, ith, nth, &clo, &chi);
  long lo[SUMSQ_GROUP], hi[SUMSQ_GROUP];
  for (k = clo; k + SUMSQ_GROUP <= chi; k += SUMSQ_GROUP) {
    for (int g = 0; g < SUMSQ_GROUP; g++) rp_split(c->n, (int)(k + g), SUMSQ_CHUNKS, &lo[g], &hi[g]);
    sumsq_chunk_group(c->x, lo, hi, c->part + k);
  }
  for (; k < chi; k++) {
    rp_split(c->n, (int)k, SUMSQ_CHUNKS, &lo[0], &hi[0]);
    c->part[k] = sumsq_range(c->x, lo[0], hi[0]);
  }
}

double rp_sumsq(const float *x, long n, rp_pool *pool) {
  sumsq_ctx c = {.x = x, .n = n};
  rp_kern_run(pool, sumsq_task, &c, n);
  double s = 0.0;
  for (int k = 0; k < SUMSQ_CHUNKS; k++) s += c.part[k];
  return s;
}

typedef struct {
  float *x;
  float s;
} scale_ctx;

static void scale_range(void *vctx, long lo, long hi) {
  const scale_ctx *c = vctx;
  float *restrict x = c->x;
  const float s = c->s;
  for (long i = lo; i < hi; i++) x[i] *= s;
}

void rp_scale(float *x, float s, long n, rp_pool *pool) {
  scale_ctx c = {.x = x, .s = s};
  rp_kern_run_shared(pool, scale_range, &c, n, RP_OPTIM_UNIT);
}

/* Warmup: lr*(step+1)/warmup for step < warmup (so step 0 already trains, as in
 * llm.c). Then cosine from lr at step == warmup down to min_lr at step == total,
 * and min_lr after. */
float rp_lr_cosine(int step, int warmup, int total, float lr, float min_lr) {
  if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
  if (total <= warmup || step >= total) return min_lr;
  double ratio = (double)(step - warmup) / (double)(total - warmup);
  double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
  return (float)(min_lr + coeff * ((double)lr - min_lr));
}
