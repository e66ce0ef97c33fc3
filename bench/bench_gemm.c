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
 * usage: bench_gemm [threads=2] [rounds=7] [pin=0]  (pin: rp_pool_create's pin flag) */
#include <stdio.h>
#include <stdlib.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"

typedef struct {
  const char *name;
  int IC, OC, per_model; /* per_model: how many times one step runs it (L or 1) */
} shape;

enum { NSHAPES = 5, L = 6, N = 1024, C = 384 };
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

static double run_shape(const shape *s, bufs *m, rp_pool *pool, int with_gelu) {
  double t0 = rp_now();
  rp_matmul_forward(m->out, m->inp, m->w, m->b, N, s->IC, s->OC, pool);
  if (with_gelu) rp_gelu_forward(m->dinp, m->out, (long)N * 4 * C, pool);
  rp_matmul_backward(m->dinp, m->dw, m->db, m->dout, m->inp, m->w, N, s->IC, s->OC, pool);
  if (with_gelu) rp_gelu_backward(m->dinp, m->out, m->dout, (long)N * 4 * C, pool);
  return rp_now() - t0;
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

  const rp_gemm_mode modes[2] = {RP_GEMM_BLAS_THREADS, RP_GEMM_POOL_SPLIT};
  const char *mode_name[2] = {"blas_threads", "pool_split"};
  double best[2][2][NSHAPES]; /* [with_gelu][mode][shape] */
  for (int g = 0; g < 2; g++)
    for (int k = 0; k < 2; k++)
      for (int s = 0; s < NSHAPES; s++) best[g][k][s] = 1e30;

  for (int k = 0; k < 2; k++) { /* warm up: OpenBLAS buffers, thread start, caches */
    rp_gemm_set_mode(pool, modes[k]);
    for (int s = 0; s < NSHAPES; s++) run_shape(&shapes[s], &m, pool, 1);
  }
  for (int r = 0; r < rounds; r++)
    for (int g = 0; g < 2; g++)
      for (int k = 0; k < 2; k++) {
        rp_gemm_set_mode(pool, modes[(k + r) % 2]); /* alternate which mode goes first */
        for (int s = 0; s < NSHAPES; s++) {
          double t = run_shape(&shapes[s], &m, pool, g);
          double *b = &best[g][(k + r) % 2][s];
          if (t < *b) *b = t;
        }
      }

  printf("bench_gemm: N=%d (B=4,T=256), C=%d, L=%d, %d threads (pin=%d), best of %d rounds\n",
         N, C, L, threads, pin, rounds);
  printf("forward+backward GFLOP/s (3 * 2*N*IC*OC flops per shape)\n");
  printf("%-9s %6s %6s %13s %13s\n", "shape", "IC", "OC", mode_name[0], mode_name[1]);
  double step_t[2][2] = {{0, 0}, {0, 0}}, step_flops = 0;
  for (int s = 0; s < NSHAPES; s++) {
    double fl = 3.0 * 2.0 * N * shapes[s].IC * shapes[s].OC;
    printf("%-9s %6d %6d %13.1f %13.1f\n", shapes[s].name, shapes[s].IC, shapes[s].OC,
           fl / best[0][0][s] * 1e-9, fl / best[0][1][s] * 1e-9);
    step_flops += fl * shapes[s].per_model;
    for (int g = 0; g < 2; g++)
      for (int k = 0; k < 2; k++) step_t[g][k] += best[g][k][s] * shapes[s].per_model;
  }
  printf("%-22s %13.1f %13.1f   (GFLOP/s over one step's GEMMs)\n", "model-weighted",
         step_flops / step_t[0][0] * 1e-9, step_flops / step_t[0][1] * 1e-9);
  printf("%-22s %12.2fms %12.2fms   (each GEMM followed by a pool GELU of N*4C)\n",
         "with pool kernels", step_t[1][0] * 1e3, step_t[1][1] * 1e3);
  int win = step_t[0][1] < step_t[0][0];
  int win_mixed = step_t[1][1] < step_t[1][0];
  printf("faster (GEMMs alone): %s by %.2fx\n", mode_name[win],
         step_t[0][!win] / step_t[0][win]);
  printf("faster (with pool kernels): %s by %.2fx\n", mode_name[win_mixed],
         step_t[1][!win_mixed] / step_t[1][win_mixed]);

  rp_free(m.inp), rp_free(m.w), rp_free(m.b), rp_free(m.out), rp_free(m.dout);
  rp_free(m.dinp), rp_free(m.dw), rp_free(m.db);
  rp_pool_destroy(pool);
  return 0;
}
