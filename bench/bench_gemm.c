/* bench_gemm: which way of using the cores is faster for the model's GEMMs,
 * RP_GEMM_BLAS_THREADS (one multi-threaded sgemm, pool asleep) or
 * RP_GEMM_POOL_SPLIT (each pool thread runs a single-threaded sgemm on a slice)?
 *
 * Shapes are those of GPT L=6, C=384, T=256, B=4 (N = B*T = 1024 rows): per layer
 * qkv 384->1152, attproj 384->384, fc 384->1536, fcproj 1536->384, and once the
 * LM head 384->256. Each shape runs forward + backward (dinp, dweight, dbias),
 * 3 * 2*N*IC*OC flops. The two modes alternate within every round so that load
 * from other processes on a shared machine hits both alike; the best round of
 * each counts. A second measurement interleaves every GEMM with a pool kernel
 * (GELU over the fc output), because OpenBLAS's own threads keep spinning after
 * a call and may slow the pool's next kernel: that cost belongs to the mode.
 *
 * A third mode, own, is ringpipe's GEMM (rp_sgemm.h) where the ISA ceiling has
 * a kernel for it.
 *
 * A third measurement runs each shape on cold operands: a buffer twice the
 * last-level cache (64 MiB to 1 GiB) is written before its forward and again
 * before its backward, as in a training step, where a GEMM's activations were
 * written long before it and its output is fresh memory. The gap to the warm
 * rate is what a step loses to cache misses (train --profile's GEMM row against
 * this benchmark's).
 *
 * usage: bench_gemm [threads=2] [rounds=7] [pin=0]  (pin: rp_pool_create's pin flag) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_sgemm.h"
#include "ringpipe/rp_util.h"

typedef struct {
  const char *name;
  int IC, OC, per_model; /* per_model: how many times one step runs it (L or 1) */
} shape;

enum { NM = 3, NSHAPES = 5, L = 6, N = 1024, C = 384 };
static const shape shapes[NSHAPES] = {
    {"qkv", C, 3 * C, L},       {"attproj", C, C, L}, {"fc", C, 4 * C, L},
    {"fcproj", 4 * C, C, L},    {"lm_head", C, 256, 1},
};

typedef struct {
  float *inp, *w, *b, *out, *dout, *dinp, *dw, *db;
} bufs;

static float *take(long n, rp_rng *r) {
  float *p = rp_alloc(sizeof(float) * (size_t)n, RP_MEM_WORKSPACE);
  if (!p) {
    fprintf(stderr, "bench_gemm: %s\n", rp_errmsg());
    exit(1);
  }
  for (long i = 0; i < n; i++) p[i] = rp_rng_uniform(r) - 0.5f;
  return p;
}

/* Bytes written to push every operand out of the caches: twice the last-level
 * cache the C library reports, within [64 MiB, 1 GiB]. */
static size_t flush_bytes(void) {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  size_t llc = (size_t)(l3 > 0 ? l3 : l2 > 0 ? l2 : 0), b = 2 * llc;
  const size_t lo = (size_t)64 << 20, hi = (size_t)1 << 30;
  return b < lo ? lo : b > hi ? hi : b;
}

/* g: 0 GEMMs alone, 1 each followed by a pool GELU, 2 on cold operands (the
 * caches flushed before the forward and again before the backward, which in a
 * step runs long after it; the flushes are not timed) */
static double run_shape(const shape *s, bufs *m, rp_pool *pool, int g, char *flush,
                        size_t flush_n) {
  const int with_gelu = g == 1;
  if (g == 2) memset(flush, (int)(flush[0] + 1), flush_n);
  double t0 = rp_now();
  rp_matmul_forward(m->out, m->inp, m->w, m->b, N, s->IC, s->OC, pool);
  if (with_gelu) rp_gelu_forward(m->dinp, m->out, (long)N * 4 * C, pool);
  double t = rp_now() - t0;
  if (g == 2) memset(flush, (int)(flush[0] + 1), flush_n);
  t0 = rp_now();
  rp_matmul_backward(m->dinp, m->dw, m->db, m->dout, m->inp, m->w, N, s->IC, s->OC, pool);
  if (with_gelu) rp_gelu_backward(m->dinp, m->out, m->dout, (long)N * 4 * C, pool);
  return t + rp_now() - t0;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  int rounds = argc > 2 ? atoi(argv[2]) : 7;
  int pin = argc > 3 ? atoi(argv[3]) : 0;
  if (threads < 1 || rounds < 1) {
    fprintf(stderr, "usage: bench_gemm [threads>=1] [rounds>=1] [pin=0|1]\n");
    return 2;
  }
  rp_pool *pool = NULL;
  if (rp_pool_create(&pool, threads, pin) != RP_OK) {
    fprintf(stderr, "bench_gemm: %s\n", rp_errmsg());
    return 1;
  }
  rp_rng rng;
  rp_rng_seed(&rng, 1);
  const long maxin = 4 * C, maxout = 4 * C; /* every buffer sized for the largest shape */
  bufs m = {take((long)N * maxin, &rng), take(maxin * maxout, &rng), take(maxout, &rng),
            take((long)N * maxout, &rng), take((long)N * maxout, &rng),
            take((long)N * maxout, &rng), take(maxin * maxout, &rng), take(maxout, &rng)};

  const rp_gemm_mode modes[NM] = {RP_GEMM_BLAS_THREADS, RP_GEMM_POOL_SPLIT, RP_GEMM_OWN};
  const char *mode_name[NM] = {"blas_threads", "pool_split", "own"};
  /* own needs a kernel at the ISA ceiling (avx2 and up); without one it is left out */
  const int nm = rp_sgemm_kernel_best() >= 0 ? NM : NM - 1;
  const size_t flush_n = flush_bytes();
  char *flush = malloc(flush_n);
  if (!flush) {
    fprintf(stderr, "bench_gemm: out of memory for a %zu MiB cache flush buffer\n", flush_n >> 20);
    return 1;
  }
  flush[0] = 0;
  double best[3][NM][NSHAPES]; /* [alone, with GELU, cold][mode][shape] */
  for (int g = 0; g < 3; g++)
    for (int k = 0; k < NM; k++)
      for (int s = 0; s < NSHAPES; s++) best[g][k][s] = 1e30;

  for (int k = 0; k < nm; k++) { /* warm up: OpenBLAS buffers, thread start, caches */
    rp_gemm_set_mode(pool, modes[k]);
    for (int s = 0; s < NSHAPES; s++) run_shape(&shapes[s], &m, pool, 1, flush, flush_n);
  }
  for (int r = 0; r < rounds; r++)
    for (int g = 0; g < 3; g++)
      for (int k = 0; k < nm; k++) {
        int mk = (k + r) % nm; /* rotate which mode goes first */
        rp_gemm_set_mode(pool, modes[mk]);
        for (int s = 0; s < NSHAPES; s++) {
          double t = run_shape(&shapes[s], &m, pool, g, flush, flush_n);
          double *b = &best[g][mk][s];
          if (t < *b) *b = t;
        }
      }

  printf("bench_gemm: N=%d (B=4,T=256), C=%d, L=%d, %d threads (pin=%d), best of %d rounds\n",
         N, C, L, threads, pin, rounds);
  if (nm == NM)
    printf("own = ringpipe's GEMM, %s kernel\n",
           rp_sgemm_kernel_name((rp_sgemm_kernel)rp_sgemm_kernel_best()));
  printf("forward+backward GFLOP/s (3 * 2*N*IC*OC flops per shape)\n");
  printf("%-9s %6s %6s", "shape", "IC", "OC");
  for (int k = 0; k < nm; k++) printf(" %13s", mode_name[k]);
  printf("\n");
  double step_t[3][NM] = {{0}}, step_flops = 0;
  for (int s = 0; s < NSHAPES; s++) {
    double fl = 3.0 * 2.0 * N * shapes[s].IC * shapes[s].OC;
    printf("%-9s %6d %6d", shapes[s].name, shapes[s].IC, shapes[s].OC);
    for (int k = 0; k < nm; k++) printf(" %13.1f", fl / best[0][k][s] * 1e-9);
    printf("\n");
    step_flops += fl * shapes[s].per_model;
    for (int g = 0; g < 3; g++)
      for (int k = 0; k < nm; k++) step_t[g][k] += best[g][k][s] * shapes[s].per_model;
  }
  printf("%-22s", "model-weighted");
  for (int k = 0; k < nm; k++) printf(" %13.1f", step_flops / step_t[0][k] * 1e-9);
  printf("   (GFLOP/s over one step's GEMMs)\n%-22s", "with pool kernels");
  for (int k = 0; k < nm; k++) printf(" %11.2fms", step_t[1][k] * 1e3);
  printf("   (each GEMM followed by a pool GELU of N*4C)\n%-22s", "model-weighted, cold");
  for (int k = 0; k < nm; k++) printf(" %13.1f", step_flops / step_t[2][k] * 1e-9);
  printf("   (GFLOP/s, %zu MiB written before each forward and backward)\n%-22s", flush_n >> 20,
         "cold / warm");
  for (int k = 0; k < nm; k++) printf(" %13.3f", step_t[0][k] / step_t[2][k]);
  printf("\n");
  for (int g = 0; g < 2; g++) {
    int win = 0;
    for (int k = 1; k < nm; k++)
      if (step_t[g][k] < step_t[g][win]) win = k;
    printf("fastest (%s): %s;", g ? "with pool kernels" : "GEMMs alone", mode_name[win]);
    for (int k = 0; k < nm; k++)
      if (k != win) printf(" %.2fx %s", step_t[g][k] / step_t[g][win], mode_name[k]);
    printf("\n");
  }

  rp_free(m.inp), rp_free(m.w), rp_free(m.b), rp_free(m.out), rp_free(m.dout);
  rp_free(m.dinp), rp_free(m.dw), rp_free(m.db);
  rp_pool_destroy(pool);
  free(flush);
  return 0;
}
