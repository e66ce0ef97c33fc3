/* The MFU denominator: sgemm FLOP/s on given GEMM shapes (the model's own, see
 * rp_gpt_gemm_peak), measured in the same process with the same threads and
 * GEMM mode as training; and what OpenBLAS runs them with. */
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_util.h"

/* Largest of each operand over the shapes: a weight is IC x OC, so its buffer
 * is the largest product, not the square of the largest side (which for a
 * 50257-token vocabulary was 10 GB a buffer). */
static void operand_sizes(const long shapes[][2], int n, long *max_in, long *max_out,
                          long *max_w) {
  *max_in = *max_out = *max_w = 0;
  for (int s = 0; s < n; s++) {
    if (shapes[s][0] > *max_in) *max_in = shapes[s][0];
    if (shapes[s][1] > *max_out) *max_out = shapes[s][1];
    if (shapes[s][0] * shapes[s][1] > *max_w) *max_w = shapes[s][0] * shapes[s][1];
  }
}

/* Operands carved from the caller's idle buffer when it is big enough (the
 * activations, before the first step: the measurement then costs no memory),
 * else allocated as workspace. */
typedef struct {
  float *inp, *out, *w, *dw, *dinp;
  uint16_t *inp16; /* bf16: inp rounded, as the model rounds dweight's operand (else NULL) */
  int owned;
} peak_operands;

static int carve_operands(peak_operands *op, long N, long max_in, long max_out, long max_w,
                          int bf16, void *scratch, size_t scratch_bytes) {
  long in16_floats = bf16 ? (N * max_in + 1) / 2 : 0;
  size_t need = ((size_t)2 * N * max_in + (size_t)N * max_out + (size_t)2 * max_w +
                 (size_t)in16_floats) * sizeof(float);
  op->owned = !scratch || scratch_bytes < need;
  if (op->owned) {
    op->inp = rp_alloc(N * max_in * sizeof(float), RP_MEM_WORKSPACE);
    op->dinp = rp_alloc(N * max_in * sizeof(float), RP_MEM_WORKSPACE);
    op->out = rp_alloc(N * max_out * sizeof(float), RP_MEM_WORKSPACE);
    op->w = rp_alloc(max_w * sizeof(float), RP_MEM_WORKSPACE);
    op->dw = rp_alloc(max_w * sizeof(float), RP_MEM_WORKSPACE);
    op->inp16 = bf16 ? rp_alloc(in16_floats * sizeof(float), RP_MEM_WORKSPACE) : NULL;
    return op->inp && op->dinp && op->out && op->w && op->dw && (!bf16 || op->inp16);
  }
  op->inp = scratch;
  op->dinp = op->inp + N * max_in;
  op->out = op->dinp + N * max_in;
  op->w = op->out + N * max_out;
  op->dw = op->w + max_w;
  op->inp16 = bf16 ? (uint16_t *)(op->dw + max_w) : NULL;
  return 1;
}

static void release_operands(peak_operands *op) {
  if (!op->owned) return;
  rp_free(op->inp);
  rp_free(op->dinp);
  rp_free(op->out);
  rp_free(op->w);
  rp_free(op->dw);
  rp_free(op->inp16);
}

/* One shape's forward + backward, as training runs it; *t_fwd gets the
 * forward's seconds, the return the whole pass's. */
typedef double (*peak_pass)(const peak_operands *op, int N, int IC, int OC, rp_pool *pool,
                            double *t_fwd);

static double sgemm_pass(const peak_operands *op, int N, int IC, int OC, rp_pool *pool,
                         double *t_fwd) {
  const double t0 = rp_now();
  rp_matmul_forward(op->out, op->inp, op->w, NULL, N, IC, OC, pool);
  const double t1 = rp_now();
  rp_matmul_backward(op->dinp, op->dw, NULL, op->out, op->inp, op->w, N, IC, OC, pool);
  *t_fwd = t1 - t0;
  return rp_now() - t0;
}

/* bf16 weights (the fp32 weight buffer holds twice as many uint16), the
 * activations rounded inside the GEMM and dweight's operand rounded first:
 * what the bf16 model does (src/model/precision.c) */
static double bf16_pass(const peak_operands *op, int N, int IC, int OC, rp_pool *pool,
                        double *t_fwd) {
  const uint16_t *w16 = (const uint16_t *)op->w;
  const double t0 = rp_now();
  rp_matmul_bf16_forward_f32in(op->out, op->inp, w16, NULL, N, IC, OC, pool);
  const double t1 = rp_now();
  rp_bf16_from_f32_array(op->inp16, op->inp, (long)N * IC, pool);
  rp_matmul_bf16_backward_f32dout(op->dinp, op->dw, op->out, op->inp16, w16, N, IC, OC, 1, pool);
  *t_fwd = t1 - t0;
  return rp_now() - t0;
}

/* each shape's forward and backward at their best so far */
static void keep_shape_best(rp_gemm_shape_rate *r, double flops_fwd, double t_fwd,
                            double t_pass) {
  if (t_fwd > 0 && flops_fwd / t_fwd > r->fwd) r->fwd = flops_fwd / t_fwd;
  if (t_pass > t_fwd && 2.0 * flops_fwd / (t_pass - t_fwd) > r->bwd)
    r->bwd = 2.0 * flops_fwd / (t_pass - t_fwd);
}

/* Inputs and weights with values in [-0.5, 0.5) (no denormals, no zeros that
 * a kernel could skip). */
static void fill_operands(const peak_operands *op, long N, long max_in, long max_w) {
  for (long i = 0; i < N * max_in; i++) op->inp[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  for (long i = 0; i < max_w; i++) op->w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
}

#define PEAK_MIN_SECONDS 0.4
#define PEAK_MAX_REPS 64

static double time_passes(const long shapes[][2], int nshapes, long N, rp_pool *pool,
                          void *scratch, size_t scratch_bytes, int bf16,
                          rp_gemm_shape_rate *per_shape) {
  for (int s = 0; per_shape && s < nshapes; s++)
    per_shape[s] = (rp_gemm_shape_rate){.in = shapes[s][0], .out = shapes[s][1]};
  long max_in, max_out, max_w;
  operand_sizes(shapes, nshapes, &max_in, &max_out, &max_w);
  peak_operands op;
  if (!carve_operands(&op, N, max_in, max_out, max_w, bf16, scratch, scratch_bytes)) {
    release_operands(&op);
    return 0;
  }
  fill_operands(&op, N, max_in, max_w);
  if (bf16) { /* round into dw (free until the first backward), then into w's front half */
    rp_bf16_from_f32_array((uint16_t *)op.dw, op.w, max_w, pool);
    memcpy(op.w, op.dw, (size_t)max_w * sizeof(uint16_t));
  }
  peak_pass pass = bf16 ? bf16_pass : sgemm_pass;
  double best = 0;
  /* the first rep warms caches and BLAS threads; then the best of the reps in
   * at least PEAK_MIN_SECONDS, so that a few busy milliseconds on a shared
   * machine (a neighbour on the cores' other hyperthreads) cannot halve the
   * denominator of every MFU figure (seen: 104.8 against 182-202 GFLOP/s in
   * the runs around it, a default model's three reps being 0.17 s) */
  const double start = rp_now();
  for (int rep = 0; rep < PEAK_MAX_REPS && (rep < 4 || rp_now() - start < PEAK_MIN_SECONDS);
       rep++) {
    double flops = 0, seconds = 0;
    for (int s = 0; s < nshapes; s++) {
      double t_fwd;
      const double t = pass(&op, (int)N, (int)shapes[s][0], (int)shapes[s][1], pool, &t_fwd);
      const double flops_fwd = 2.0 * N * shapes[s][0] * shapes[s][1];
      flops += 3.0 * flops_fwd;
      seconds += t;
      if (rep > 0 && per_shape) keep_shape_best(&per_shape[s], flops_fwd, t_fwd, t);
    }
    double rate = flops / seconds;
    if (rep > 0 && rate > best) best = rate;
  }
  release_operands(&op);
  return best;
}

double rp_gemm_peak(const long shapes[][2], int nshapes, long N, rp_pool *pool, void *scratch,
                    size_t scratch_bytes, rp_gemm_shape_rate *per_shape) {
  return time_passes(shapes, nshapes, N, pool, scratch, scratch_bytes, 0, per_shape);
}

/* One shape's fp32 forward and backward apart: the best of at least three
 * repeats after a warm-up, more while under SHAPE_MIN_SECONDS (a small shape's
 * best of three moves by several percent on a shared machine). */
#define SHAPE_MIN_SECONDS 0.25
void rp_gemm_shape_rates(long IC, long OC, long N, rp_pool *pool, double *fwd, double *bwd) {
  peak_operands op;
  rp_gemm_shape_rate r = {.in = IC, .out = OC};
  *fwd = *bwd = 0.0;
  if (!carve_operands(&op, N, IC, OC, IC * OC, 0, NULL, 0)) {
    release_operands(&op);
    return;
  }
  fill_operands(&op, N, IC, IC * OC);
  const double flops = 2.0 * N * IC * OC; /* forward; the backward is twice it */
  const double start = rp_now();
  for (int rep = 0; rep < 4 || (rp_now() - start < SHAPE_MIN_SECONDS && rep < 200); rep++) {
    double t_fwd;
    const double t = sgemm_pass(&op, (int)N, (int)IC, (int)OC, pool, &t_fwd);
    if (rep > 0) keep_shape_best(&r, flops, t_fwd, t); /* rep 0 warms caches and BLAS threads */
  }
  release_operands(&op);
  *fwd = r.fwd;
  *bwd = r.bwd;
}

/* The GEMM beside the FMA probe (`bench fma`): one shape's forward and
 * backward back to back for `seconds`, every repeat's rate kept. The
 * register-only loop feels the cores' clocks and units; this also feels the
 * caches and memory bandwidth it shares with a VM's neighbours, which
 * /proc/stat's steal does not count. Capped like the probe's runs. */
#define SUSTAINED_MAX_RUNS RP_GEMM_CHECK_MAX_RUNS
#define SUSTAINED_MAX_GIB 4.0
rp_status rp_gemm_sustained(long N, long IC, long OC, rp_pool *pool, double seconds,
                            rp_isa_probe_stats *st) {
  *st = (rp_isa_probe_stats){0};
  if (N < 1 || IC < 1 || OC < 1)
    return rp_err(RP_EINVAL, "GEMM check shape %ld x %ld -> %ld: every side must be positive",
                  N, IC, OC);
  /* a check, not a stress test: refused before the allocation could pass on
   * overcommit and the filling be killed for memory */
  const double gib = (2.0 * N * IC + (double)N * OC + 2.0 * IC * OC) * sizeof(float) / (1 << 30);
  if (gib > SUSTAINED_MAX_GIB)
    return rp_err(RP_EINVAL, "GEMM check shape %ld x %ld -> %ld: %.1f GiB of operands, over "
                  "the %g GiB a check takes; make the shape smaller", N, IC, OC, gib,
                  SUSTAINED_MAX_GIB);
  if (!(seconds > 0.0))
    return rp_err(RP_EINVAL, "GEMM check seconds %g: must be positive", seconds);
  peak_operands op;
  double *rates = rp_alloc(SUSTAINED_MAX_RUNS * sizeof(double), RP_MEM_WORKSPACE);
  if (!rates || !carve_operands(&op, N, IC, OC, IC * OC, 0, NULL, 0)) {
    if (rates) release_operands(&op);
    rp_free(rates);
    return rp_err(RP_ENOMEM, "GEMM check operands for %ld x %ld -> %ld", N, IC, OC);
  }
  fill_operands(&op, N, IC, IC * OC);
  double t_fwd;
  sgemm_pass(&op, (int)N, (int)IC, (int)OC, pool, &t_fwd); /* warms caches and BLAS threads */
  const double gflop = 6.0 * N * IC * OC / 1e9;
  const double start = rp_now();
  int n = 0;
  while (n < SUSTAINED_MAX_RUNS && (n == 0 || rp_now() - start < seconds)) {
    rates[n++] = gflop / sgemm_pass(&op, (int)N, (int)IC, (int)OC, pool, &t_fwd);
  }
  rp_isa_probe_summarize(rates, n, st);
  release_operands(&op);
  rp_free(rates);
  return RP_OK;
}

double rp_gemm_peak_bf16(const long shapes[][2], int nshapes, long N, rp_pool *pool,
                         void *scratch, size_t scratch_bytes, rp_gemm_shape_rate *per_shape) {
  return time_passes(shapes, nshapes, N, pool, scratch, scratch_bytes, 1, per_shape);
}

char *openblas_get_corename(void);

/* OpenBLAS 0.3.21 does not know some newer CPUs and falls back to its generic
 * "Prescott" (SSE3) kernels, about 4x slower than its AVX-512 ones; users can
 * override that with OPENBLAS_CORETYPE, which ringpipe never sets itself. */
const char *rp_blas_advice(void) {
  const char *core = openblas_get_corename();
  if (!core) return NULL;
  int generic = strcmp(core, "Prescott") == 0 || strcmp(core, "Core2") == 0 ||
                strcmp(core, "Nehalem") == 0 || strcmp(core, "Atom") == 0;
  if (!generic) return NULL;
  /* the advice follows the rp_isa.h ceiling: under RINGPIPE_ISA=avx2 an AVX-512
   * coretype would break the AVX2-only behaviour the user asked for */
  /* auto then runs every weight on the own GEMM (rp_gemm_auto_rule): what is
   * left to OpenBLAS is --gemm blas / split and the skinny products */
  if (rp_isa_allows(RP_ISA_AVX512))
    return "OpenBLAS picked its generic kernels on an AVX-512 CPU, so --gemm auto runs every "
           "weight on ringpipe's own GEMM; --gemm blas or split, and products of under 16 rows "
           "a thread (sampling), still use OpenBLAS, which OPENBLAS_CORETYPE=SKYLAKEX "
           "typically makes ~4x faster";
  if (rp_isa_allows(RP_ISA_AVX2))
    return "OpenBLAS picked its generic kernels on an AVX2 CPU, so --gemm auto runs every "
           "weight on ringpipe's own GEMM (2.3-2.4x the generic kernels on the default model's "
           "shapes); --gemm blas or split, and products of under 16 rows a thread (sampling), "
           "still use OpenBLAS, which OPENBLAS_CORETYPE=HASWELL typically makes several times "
           "faster (its Haswell kernels then take the weights: 3-6 % faster than the own ones)";
  return NULL;
}

const char *rp_blas_core(void) {
  const char *core = openblas_get_corename();
  return core ? core : "unknown";
}
