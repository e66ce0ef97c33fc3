/* Matmul through OpenBLAS sgemm, in the two ways of using the cores that the
 * header describes, plus plain reference loops.
 *
 * Shapes: inp[N,IC], weight[OC,IC] (llm.c layout), bias[OC], out[N,OC].
 * RP_GEMM_BLAS_THREADS: OpenBLAS gets pool-size threads and does one call while
 *   the pool's workers sleep (they never run concurrently with BLAS threads).
 * RP_GEMM_POOL_SPLIT: OpenBLAS is single-threaded and every pool thread calls
 *   sgemm on its own slice: rows of N for out and dinp, rows of OC for dweight,
 *   so no two threads write the same output element. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "fused_internal.h"
#include "kern_util.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_sgemm.h"

/* Between the two OpenBLAS modes, split is the better, by measurement
 * (bench/bench_step --gemm ab, modes alternating step by step in one process,
 * 2 threads, GPT L=6 C=384): the sgemm rates of the two modes are equal on a
 * quiet machine, but whole steps are faster in split mode, and more so on a
 * loaded machine, because OpenBLAS's idle threads keep spinning (sched_yield)
 * for ~0.1 s after every call and so compete with the pool's workers for the
 * cores during every non-GEMM kernel, while in split mode OpenBLAS never
 * starts its threads. With many threads per rank the row slices get thin and
 * blas mode may win: --gemm blas. The default (auto) runs ringpipe's own GEMM
 * for the shapes where it measured faster still, split for the rest (see
 * rp_gemm_get_mode and rp_matmul_own_applies). */
static int g_blas_threads = -1; /* unknown until the first rp_blas_set_threads */

/* The mode is the run's, kept by its pool (no pool: the default). */
void rp_gemm_set_mode(rp_pool *pool, rp_gemm_mode mode) { rp_pool_set_gemm_mode(pool, (int)mode); }
/* The instruction set OpenBLAS's sgemm kernels use, from its core name in
 * 0.3.x (DYNAMIC_ARCH builds pick the core from the CPU unless
 * OPENBLAS_CORETYPE names another one: Haswell on an AVX-512 machine halves
 * its sgemm rate). Cores without AVX2 count as scalar: ringpipe has no level
 * between. */
rp_isa rp_blas_core_isa(void) {
  static const struct {
    const char *core;
    rp_isa level;
  } cores[] = {{"skylakex", RP_ISA_AVX512}, {"cooperlake", RP_ISA_AVX512},
               {"sapphirerapids", RP_ISA_AVX512}, {"haswell", RP_ISA_AVX2},
               {"zen", RP_ISA_AVX2}, {"excavator", RP_ISA_AVX2}};
  static int known = -1; /* asked per matmul; the core is fixed at load time */
  if (known >= 0) return (rp_isa)known;
  const char *name = openblas_get_corename();
  int level = RP_ISA_SCALAR;
  for (int i = 0; name && i < (int)(sizeof cores / sizeof cores[0]); i++)
    if (strcasecmp(name, cores[i].core) == 0) level = cores[i].level;
  known = level;
  return (rp_isa)level;
}

int rp_blas_above_ceiling(void) { return !rp_isa_allows(rp_blas_core_isa()); }

rp_status rp_blas_check_cpu_rule(const char *core, rp_isa core_isa, rp_isa cpu,
                                 const char *coretype) {
  if (core_isa <= cpu) return RP_OK;
  char how[300];
  if (coretype && *coretype)
    snprintf(how, sizeof how, "OPENBLAS_CORETYPE=%s in the environment chose it: unset "
             "OPENBLAS_CORETYPE (OpenBLAS then picks a core this CPU runs) or name such a core",
             coretype);
  else
    snprintf(how, sizeof how, "OpenBLAS chose it itself: set OPENBLAS_CORETYPE to a core this "
             "CPU runs (e.g. Haswell for AVX2, Prescott without it)");
  return rp_err(RP_EINVAL, "OpenBLAS is set to run its %s kernels, which need %s, and this "
                "CPU runs at most %s: OpenBLAS's first call would end the process with an "
                "illegal instruction. %s", core, rp_isa_name(core_isa), rp_isa_name(cpu), how);
}

rp_status rp_blas_check_cpu(void) {
  return rp_blas_check_cpu_rule(rp_blas_core(), rp_blas_core_isa(), rp_isa_cpu(),
                                getenv("OPENBLAS_CORETYPE"));
}

/* The level of an own kernel (rp_sgemm_kernel_best's answer; -1 none: scalar) */
static rp_isa own_kernel_isa(int own_kernel) {
  return own_kernel == RP_SGEMM_AVX512 ? RP_ISA_AVX512
         : own_kernel == RP_SGEMM_AVX2 ? RP_ISA_AVX2 : RP_ISA_SCALAR;
}

/* What auto runs (see fused_internal.h). The own kernel measured faster than
 * OpenBLAS's AVX-512 ones on the weights up to OWN_AUTO_MAX_WEIGHT_BYTES and
 * on widening backwards (Sapphire Rapids), and faster on every weight than
 * OpenBLAS's kernels of a lower level (an OPENBLAS_CORETYPE=Haswell inherited
 * on an AVX-512 machine; the generic SSE3 "Prescott" kernels OpenBLAS 0.3.21
 * falls back to on CPUs newer than it, AVX2-only ones included, about 4x
 * slower than its Haswell ones). On an AMD core with AVX-512 it is faster on
 * every weight even against OpenBLAS's AVX-512 kernels (Zen 4, whose 256-bit
 * units run those kernels' zmm code: the 124M shape's products, N = 2048, 2
 * threads, own against split: qkv forward 212 against 193 GFLOP/s, c_fc
 * forward 212 against 192, c_proj forward 210 against 201, the rest level;
 * a 124M step's GEMMs 7.44 -> 7.23 s). At the same level as OpenBLAS's
 * Haswell kernels the own AVX2 one was 3-6 % slower, so split stays there.
 * Where OpenBLAS's kernels are above the ceiling (SkylakeX under
 * RINGPIPE_ISA=avx2) nothing but OPENBLAS_CORETYPE at load time could hold
 * them, and no ringpipe code sets it: a default-model step "held to AVX2" ran
 * its big GEMMs in AVX-512; the own kernel obeys the ceiling, so it takes
 * every weight. */
rp_gemm_mode rp_gemm_auto_rule(rp_isa blas_isa, int own_kernel, int blas_within_ceiling,
                               int cpu_amd, int *every_weight) {
  *every_weight = 0;
  if (own_kernel < 0) return RP_GEMM_POOL_SPLIT;
  const rp_isa own_isa = own_kernel_isa(own_kernel);
  if (!blas_within_ceiling || blas_isa < own_isa || (cpu_amd && own_isa == RP_ISA_AVX512)) {
    *every_weight = 1;
    return RP_GEMM_OWN;
  }
  return own_isa == RP_ISA_AVX512 ? RP_GEMM_OWN : RP_GEMM_POOL_SPLIT;
}

/* The rule for this process: OpenBLAS's core and the ceiling in force. */
static rp_gemm_mode auto_mode(int *every_weight) {
  return rp_gemm_auto_rule(rp_blas_core_isa(), rp_sgemm_kernel_best(), !rp_blas_above_ceiling(),
                           rp_isa_cpu_is_amd(), every_weight);
}

static int auto_own_every_weight(void) {
  int every;
  return auto_mode(&every) == RP_GEMM_OWN && every;
}

rp_gemm_mode rp_gemm_get_mode(const rp_pool *pool) {
  int m = rp_pool_gemm_mode(pool);
  if (m == RP_GEMM_BLAS_THREADS || m == RP_GEMM_POOL_SPLIT) return (rp_gemm_mode)m;
  /* own when asked for and the ceiling has a kernel for it; unset: the rule */
  if (m == RP_GEMM_OWN) return rp_sgemm_kernel_best() >= 0 ? RP_GEMM_OWN : RP_GEMM_POOL_SPLIT;
  int every;
  return auto_mode(&every);
}

const char *rp_gemm_describe(const rp_pool *pool) {
  static char text[200];
  const rp_gemm_mode m = rp_gemm_get_mode(pool);
  const char *core = rp_blas_core();
  if (m == RP_GEMM_OWN && rp_pool_gemm_mode(pool) != RP_GEMM_OWN) {
    if (!auto_own_every_weight())
      return "auto (own for weights up to 4 MiB and the backward of widening ones, split for "
             "the rest)";
    if (rp_blas_above_ceiling())
      snprintf(text, sizeof text, "auto (own for every weight: OpenBLAS's %s kernels are "
               "above the ceiling %s)", core, rp_isa_name(rp_isa_active()));
    else if (rp_blas_core_isa() < own_kernel_isa(rp_sgemm_kernel_best()))
      snprintf(text, sizeof text, "auto (own for every weight: OpenBLAS runs its %s kernels, "
               "without %s)", core,
               rp_sgemm_kernel_best() == RP_SGEMM_AVX512 ? "AVX-512" : "AVX2");
    else
      snprintf(text, sizeof text, "auto (own for every weight: faster than OpenBLAS's %s "
               "kernels on AMD's AVX-512 cores)", core);
    return text;
  }
  if (m != RP_GEMM_OWN && rp_blas_above_ceiling()) {
    snprintf(text, sizeof text, "%s (OpenBLAS's %s kernels: %s, not held to the ceiling %s)",
             rp_gemm_mode_name(m), core, rp_isa_name(rp_blas_core_isa()),
             rp_isa_name(rp_isa_active()));
    return text;
  }
  return rp_gemm_mode_name(m);
}

rp_status rp_gemm_apply_choice(rp_pool *pool, rp_gemm_choice choice) {
  if (choice == RP_GEMM_CHOOSE_BLAS) rp_gemm_set_mode(pool, RP_GEMM_BLAS_THREADS);
  if (choice == RP_GEMM_CHOOSE_SPLIT) rp_gemm_set_mode(pool, RP_GEMM_POOL_SPLIT);
  if (choice == RP_GEMM_CHOOSE_OWN) {
    if (rp_sgemm_kernel_best() < 0)
      return rp_err(RP_EINVAL,
                    "--gemm own needs the avx2 ISA level or above, and the ceiling is %s (%s); "
                    "use --gemm split or auto",
                    rp_isa_name(rp_isa_active()), rp_isa_source());
    rp_gemm_set_mode(pool, RP_GEMM_OWN);
  }
  return RP_OK;
}

const char *rp_gemm_mode_name(rp_gemm_mode mode) {
  switch (mode) {
    case RP_GEMM_BLAS_THREADS: return "blas";
    case RP_GEMM_POOL_SPLIT: return "split";
    case RP_GEMM_OWN: return "own";
  }
  return "?";
}

static void blas_threads_cb(void *ctx) { openblas_set_num_threads(*(const int *)ctx); }

/* openblas_set_num_threads is not free (it may wake/resize OpenBLAS's server),
 * so it is only called when the count changes. Called from the main thread.
 * It (re)starts OpenBLAS's threads when they are missing (MPI_Init's fork stops
 * them), and a started thread inherits the caller's CPU set, which the pool has
 * pinned to one core: then every OpenBLAS thread would share that core and
 * blas mode would run its GEMMs at one core's speed (measured: 150 instead of
 * 300 GFLOP/s on 2 cores). So the call runs with the process's whole CPU set. */
void rp_blas_set_threads(int n) {
  if (n < 1) n = 1;
  if (n != g_blas_threads) {
    rp_with_process_cpus(blas_threads_cb, &n);
    g_blas_threads = n;
  }
}

static int pool_threads(rp_pool *pool) { return pool ? rp_pool_size(pool) : 1; }

/* out[lo:hi,:] = inp[lo:hi,:] @ weight^T, plus bias and the residual resid when
 * given. They are written into out first and sgemm adds the product (beta = 1),
 * so the residual add costs no pass of its own. resid may alias out. */
void rp_matmul_rows_forward(float *out, const float *inp, const float *weight, const float *bias,
                            const float *resid, long lo, long hi, int IC, int OC) {
  long rows = hi - lo;
  if (rows <= 0) return;
  float *o = out + lo * OC;
  float beta = 0.0f;
  if (resid || bias) {
    for (long n = 0; n < rows; n++) {
      float *restrict orow = o + n * OC;
      if (resid && bias) {
        const float *r = resid + (lo + n) * OC;
        if (r == orow)
          for (long k = 0; k < OC; k++) orow[k] += bias[k];
        else
          for (long k = 0; k < OC; k++) orow[k] = r[k] + bias[k];
      } else if (resid) {
        const float *r = resid + (lo + n) * OC;
        if (r != orow) memcpy(orow, r, sizeof(float) * (size_t)OC);
      } else {
        memcpy(orow, bias, sizeof(float) * (size_t)OC);
      }
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, OC, IC, 1.0f,
              inp + lo * IC, IC, weight, IC, beta, o, OC);
}

/* out[:, lo:hi] for every row: the split for skinny products (a decode step has
 * one row per sequence), where splitting rows would leave threads idle. One
 * row is a matrix-vector product: sgemv reads each weight once, while sgemm
 * would first pack (copy) the whole weight slice. */
static void fwd_cols(float *out, const float *inp, const float *weight, const float *bias,
                     const float *resid, long lo, long hi, int N, int IC, int OC) {
  long cols = hi - lo;
  if (cols <= 0) return;
  float beta = resid || bias ? 1.0f : 0.0f;
  for (long n = 0; n < N && beta != 0.0f; n++) {
    float *restrict orow = out + n * OC + lo;
    const float *r = resid ? resid + n * OC + lo : NULL;
    for (long k = 0; k < cols; k++) orow[k] = (r ? r[k] : 0.0f) + (bias ? bias[lo + k] : 0.0f);
  }
  if (N == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)cols, IC, 1.0f, weight + lo * IC, IC, inp, 1,
                beta, out + lo, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, (int)cols, IC, 1.0f, inp, IC,
                weight + lo * IC, IC, beta, out + lo, OC);
}

/* dinp[lo:hi,:] = beta * dinp[lo:hi,:] + dout[lo:hi,:] @ weight. With beta 0 the
 * caller needs no memset: OpenBLAS clears C itself (each pool thread its own
 * slice in split mode) and never reads it. It then adds its K-blocks into C in
 * the same order as for beta 1, so writing equals accumulating into zeros,
 * bitwise. */
static void dinp_rows(float *dinp, const float *dout, const float *weight, long lo, long hi,
                      int IC, int OC, float beta) {
  if (hi <= lo) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo), IC, OC, 1.0f,
              dout + lo * OC, OC, weight, IC, beta, dinp + lo * IC, IC);
}

/* dweight[lo:hi,:] += dout[:,lo:hi]^T @ inp */
static void dweight_rows(float *dweight, const float *dout, const float *inp, long lo, long hi,
                         int N, int IC, int OC) {
  if (hi <= lo) return;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), IC, N, 1.0f, dout + lo,
              OC, inp, IC, 1.0f, dweight + lo * IC, IC);
}

/* dbias[lo:hi] += sum over rows of dout[:, lo:hi]; rows in order, so the result
 * is the same for any column split. */
void rp_matmul_dbias_cols(float *restrict dbias, const float *restrict dout, long lo, long hi,
                          int N, int OC) {
  for (long n = 0; n < N; n++) {
    const float *restrict row = dout + n * OC;
    for (long o = lo; o < hi; o++) dbias[o] += row[o];
  }
}

typedef struct {
  float *out, *dinp, *dweight, *dbias;
  const float *inp, *weight, *bias, *resid, *dout;
  int N, IC, OC;
  float dinp_beta; /* 1: dinp accumulates, 0: dinp is written */
  int do_gemm;     /* 0: only the bias reduction (BLAS-threads mode) */
} mm_ctx;

static void fwd_task(void *vctx, int ith, int nth) {
  mm_ctx *c = vctx;
  long lo, hi;
  rp_split(c->N, ith, nth, &lo, &hi);
  rp_matmul_rows_forward(c->out, c->inp, c->weight, c->bias, c->resid, lo, hi, c->IC, c->OC);
}

static void fwd_cols_task(void *vctx, int ith, int nth) {
  mm_ctx *c = vctx;
  long lo, hi;
  rp_kern_split_cols(c->OC, ith, nth, &lo, &hi);
  fwd_cols(c->out, c->inp, c->weight, c->bias, c->resid, lo, hi, c->N, c->IC, c->OC);
}

/* Fewer rows than this per thread: split the output columns instead. */
#define SKINNY_ROWS_PER_THREAD 16

/* In auto mode (the pool's mode unset) the own GEMM takes only weights up to
 * this size: on the default model's shapes (C = 384, weights up to 2.3 MiB) it
 * made whole steps 2-4% faster than split mode, while on the 124M shape's
 * (C = 768: 7 to 9 MiB, and the 147 MiB LM head) its GEMMs measured 5-15%
 * slower than OpenBLAS's (bench_step --gemm ab with both models' shapes, and
 * one-GEMM timings per shape, Sapphire Rapids, 2 threads). Since 2026-12-04
 * its forwards there are level with OpenBLAS's (297-300 against 298-302
 * GFLOP/s) and its backward of widening weights faster (below), so split
 * keeps only what is no slower there. That holds only
 * against OpenBLAS's AVX-512 kernels: where it runs AVX2 ones (an
 * OPENBLAS_CORETYPE=Haswell in the environment of an AVX-512 machine) the own
 * GEMM takes every weight (the 124M step 0.60 of the time on Zen 5, 2 threads:
 * GEMMs 7.1 -> 4.1 s). An explicit --gemm own takes every shape. */
#define OWN_AUTO_MAX_WEIGHT_BYTES ((long)4 << 20)
/* The backward (dinp and dweight in one job) of a weight that widens the
 * layer (IC <= OC: the 124M shape's qkv and c_fc, 7 and 9 MiB, and the LM
 * head) measured faster in the own GEMM than in split mode, whatever its size,
 * once its prepacked products kept each row block's C in L2 (sgemm.c, column
 * groups) and the LM head's dinp packed its weight block by block instead of
 * whole (147 MiB): qkv and c_fc 1.04-1.06x in dinp and dweight each, the LM
 * head's dinp 1.07-1.08x (best of 5-9 alternating calls, N = 2048, 2 threads,
 * the 2-core AMX Xeon). A narrowing weight (c_proj, 3072 -> 768) stayed
 * 0.90-0.95x in dweight, so it stays with OpenBLAS. */
int rp_matmul_own_applies(rp_pool *pool, int N, int IC, int OC, int backward) {
  if (rp_gemm_get_mode(pool) != RP_GEMM_OWN || N < SKINNY_ROWS_PER_THREAD * pool_threads(pool))
    return 0;
  const long wbytes = (long)IC * OC * (long)sizeof(float);
  return rp_pool_gemm_mode(pool) == RP_GEMM_OWN || auto_own_every_weight() ||
         wbytes <= OWN_AUTO_MAX_WEIGHT_BYTES ||
         (backward && IC <= OC);
}

/* The path matmul_forward / matmul_backward below take for a product (and
 * rp_matmul_path reports): the own GEMM; one OpenBLAS call over all rows with
 * the pool's thread count (one thread, or blas mode, whose skinny forwards
 * split columns on the pool instead); or the pool's threads each calling
 * single-threaded OpenBLAS on a slice. */
typedef enum { MM_OWN, MM_BLAS, MM_SPLIT } mm_route;

static mm_route route_of(rp_pool *pool, int N, int IC, int OC, int backward) {
  if (rp_matmul_own_applies(pool, N, IC, OC, backward)) return MM_OWN;
  const int nth = pool_threads(pool), skinny = N < SKINNY_ROWS_PER_THREAD * nth;
  if (nth == 1 || (rp_gemm_get_mode(pool) == RP_GEMM_BLAS_THREADS && (backward || !skinny)))
    return MM_BLAS;
  return MM_SPLIT;
}

const char *rp_matmul_path(rp_pool *pool, int N, int IC, int OC, int backward) {
  static const char *const names[] = {[MM_OWN] = "own", [MM_BLAS] = "blas", [MM_SPLIT] = "split"};
  return names[route_of(pool, N, IC, OC, backward)];
}

/* Mirrors the choice of matmul_forward below where the own GEMM does not
 * apply: one thread runs the row kernel over all rows (but one row takes
 * sgemv), split mode (and auto's OpenBLAS shapes, which run as split) runs it
 * on row slices unless the product is skinny. */
int rp_matmul_rows_fusable(rp_pool *pool, int N) {
  int nth = pool_threads(pool);
  if (nth == 1) return N > 1;
  return rp_gemm_get_mode(pool) != RP_GEMM_BLAS_THREADS && N >= SKINNY_ROWS_PER_THREAD * nth;
}

static void bwd_task(void *vctx, int ith, int nth) {
  mm_ctx *c = vctx;
  long lo, hi;
  if (c->do_gemm && c->dinp) {
    rp_split(c->N, ith, nth, &lo, &hi);
    dinp_rows(c->dinp, c->dout, c->weight, lo, hi, c->IC, c->OC, c->dinp_beta);
  }
  if (c->do_gemm && c->dweight) {
    rp_split(c->OC, ith, nth, &lo, &hi);
    dweight_rows(c->dweight, c->dout, c->inp, lo, hi, c->N, c->IC, c->OC);
  }
  if (c->dbias) {
    rp_kern_split_cols(c->OC, ith, nth, &lo, &hi);
    rp_matmul_dbias_cols(c->dbias, c->dout, lo, hi, c->N, c->OC);
  }
}

static void matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           const float *resid, int N, int IC, int OC, rp_pool *pool) {
  int nth = pool_threads(pool);
  int skinny = N < SKINNY_ROWS_PER_THREAD * nth;
  const mm_route route = route_of(pool, N, IC, OC, 0);
  if (route == MM_OWN) {
    rp_sgemm_forward((rp_sgemm_kernel)rp_sgemm_kernel_best(), out, inp, weight, bias, resid, N, IC,
                     OC, pool);
    return;
  }
  if (nth == 1 && N == 1) {
    rp_blas_set_threads(1);
    fwd_cols(out, inp, weight, bias, resid, 0, OC, N, IC, OC);
    return;
  }
  if (route == MM_BLAS) {
    rp_blas_set_threads(nth);
    rp_matmul_rows_forward(out, inp, weight, bias, resid, 0, N, IC, OC);
    return;
  }
  rp_blas_set_threads(1);
  mm_ctx c = {.out = out, .inp = inp, .weight = weight, .bias = bias, .resid = resid, .N = N,
              .IC = IC, .OC = OC, .do_gemm = 1};
  rp_pool_run(pool, skinny ? fwd_cols_task : fwd_task, &c);
}

void rp_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                       int N, int IC, int OC, rp_pool *pool) {
  matmul_forward(out, inp, weight, bias, NULL, N, IC, OC, pool);
}

void rp_matmul_forward_residual(float *out, const float *inp, const float *weight,
                                const float *bias, const float *resid, int N, int IC, int OC,
                                rp_pool *pool) {
  matmul_forward(out, inp, weight, bias, resid, N, IC, OC, pool);
}

static void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC,
                            float dinp_beta, rp_pool *pool) {
  int nth = pool_threads(pool);
  mm_ctx c = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout, .inp = inp,
              .weight = weight, .N = N, .IC = IC, .OC = OC, .dinp_beta = dinp_beta,
              .do_gemm = 1};
  const mm_route route = route_of(pool, N, IC, OC, 1);
  if (route == MM_OWN) {
    rp_sgemm_backward((rp_sgemm_kernel)rp_sgemm_kernel_best(), dinp, dweight, dbias, dout, inp,
                      weight, N, IC, OC, dinp_beta == 0.0f, pool);
    return;
  }
  if (route == MM_BLAS) {
    rp_blas_set_threads(nth);
    if (dinp) dinp_rows(dinp, dout, weight, 0, N, IC, OC, dinp_beta);
    if (dweight) dweight_rows(dweight, dout, inp, 0, OC, N, IC, OC);
    if (dbias) {
      c.do_gemm = 0;
      rp_kern_run(pool, bwd_task, &c, (long)N * OC);
    }
    return;
  }
  rp_blas_set_threads(1);
  rp_pool_run(pool, bwd_task, &c);
}

void rp_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, int N, int IC, int OC,
                        rp_pool *pool) {
  matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, 1.0f, pool);
}

void rp_matmul_backward_set(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC,
                            rp_pool *pool) {
  matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, 0.0f, pool);
}

/* ---- reference loops: the oracle for the sgemm paths */

void rp_matmul_forward_ref(float *out, const float *inp, const float *weight,
                           const float *bias, int N, int IC, int OC) {
  for (long n = 0; n < N; n++) {
    for (long o = 0; o < OC; o++) {
      float s = bias ? bias[o] : 0.0f;
      for (long i = 0; i < IC; i++) s += inp[n * IC + i] * weight[o * IC + i];
      out[n * OC + o] = s;
    }
  }
}

void rp_matmul_backward_ref(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC) {
  if (dinp) {
    for (long n = 0; n < N; n++)
      for (long i = 0; i < IC; i++) {
        float s = 0.0f;
        for (long o = 0; o < OC; o++) s += dout[n * OC + o] * weight[o * IC + i];
        dinp[n * IC + i] += s;
      }
  }
  if (dweight) {
    for (long o = 0; o < OC; o++)
      for (long i = 0; i < IC; i++) {
        float s = 0.0f;
        for (long n = 0; n < N; n++) s += dout[n * OC + o] * inp[n * IC + i];
        dweight[o * IC + i] += s;
      }
  }
  if (dbias) {
    for (long o = 0; o < OC; o++) {
      float s = 0.0f;
      for (long n = 0; n < N; n++) s += dout[n * OC + o];
      dbias[o] += s;
    }
  }
}
