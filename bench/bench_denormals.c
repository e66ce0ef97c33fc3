/* bench_denormals: what flushing denormals to zero (the pool's threads run
 * with MXCSR FTZ and DAZ, src/base/pool.c) is worth when attention is sharp.
 *
 * A softmax probability exp(s - m) for a score more than 87 below its row's
 * maximum is a denormal fp32 (below 2^-126), and on many x86 cores each
 * multiply-add that writes or reads one takes a microcode assist. The inputs
 * here are Q = K rows of random values scaled so that a query's score with its
 * own key stands 84-108 above the others (a sharp head): the bench counts the
 * share of visible (query, key) pairs whose probability is a denormal, then
 * times flash attention forward + backward (B 4, T 256, NH 6, HS 64, causal:
 * one default-model layer) on one thread, flushed and not flushed (the
 * calling thread's MXCSR toggled) in alternating rounds, by the thread's CPU
 * time. Printed: each mode's fastest time and the median (min..max) over
 * rounds of not-flushed / flushed.
 *
 * usage: bench_denormals [rounds=5] [scale=6] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"
#include "bench_time.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FLUSH_BITS 0x8040u /* FTZ | DAZ */
static void set_flush(int on) {
  _mm_setcsr(on ? (_mm_getcsr() | FLUSH_BITS) : (_mm_getcsr() & ~FLUSH_BITS));
}
#else
static void set_flush(int on) { (void)on; }
#endif

enum { B = 4, T = 256, NH = 6, HS = 64, C = NH * HS, REPS = 3 };

/* Share of visible pairs of head 0, batch 0 whose exp(scale * (s - m)) is a
 * nonzero denormal: gap in natural units between 126 ln 2 and 149 ln 2. */
static double denormal_share(const float *qkv) {
  const double scale = 1.0 / sqrt((double)HS), lo = 126 * log(2.0), hi = 149 * log(2.0);
  long hits = 0, pairs = 0;
  double s[T];
  for (int t = 0; t < T; t++) {
    double m = -INFINITY;
    for (int j = 0; j <= t; j++) {
      double d = 0;
      for (int e = 0; e < HS; e++) d += (double)qkv[t * 3 * C + e] * qkv[j * 3 * C + C + e];
      s[j] = d * scale;
      if (s[j] > m) m = s[j];
    }
    for (int j = 0; j <= t; j++, pairs++) hits += m - s[j] > lo && m - s[j] < hi;
  }
  return (double)hits / (double)pairs;
}

/* One fwd + bwd, its thread CPU seconds. */
static double fwd_bwd(float *out, float *lse, float *dqkv, const float *dout, const float *qkv,
                      rp_pool *pool) {
  double t0 = bench_cpu_now();
  if (rp_flash_forward(out, lse, qkv, B, T, C, NH, 1, NULL, pool) != RP_OK ||
      rp_flash_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, 1, NULL, pool) != RP_OK) {
    fprintf(stderr, "bench_denormals: flash attention failed\n");
    exit(1);
  }
  return bench_cpu_now() - t0;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  double amp = argc > 2 ? atof(argv[2]) : 6.0;
  if (rounds < 1 || rounds > 1000 || !(amp > 0 && amp < 1e3)) {
    fprintf(stderr, "usage: bench_denormals [rounds 1..1000 (5)] [scale > 0 (6)]\n");
    return 2;
  }
  const long n = (long)B * T * 3 * C;
  float *qkv = malloc(sizeof(float) * (size_t)n), *dqkv = malloc(sizeof(float) * (size_t)n);
  float *out = malloc(sizeof(float) * (size_t)B * T * C);
  float *dout = malloc(sizeof(float) * (size_t)B * T * C);
  float *lse = malloc(sizeof(float) * (size_t)B * NH * T);
  if (!qkv || !dqkv || !out || !dout || !lse) {
    fprintf(stderr, "bench_denormals: out of memory\n");
    return 1;
  }
  rp_rng rng;
  rp_rng_seed(&rng, 1);
  /* K = Q (each query's own key scores highest), V and dout plain */
  for (long r = 0; r < (long)B * T; r++)
    for (int c = 0; c < C; c++) {
      float q = amp * (2 * rp_rng_uniform(&rng) - 1);
      qkv[r * 3 * C + c] = q;
      qkv[r * 3 * C + C + c] = q;
      qkv[r * 3 * C + 2 * C + c] = 2 * rp_rng_uniform(&rng) - 1;
    }
  for (long i = 0; i < (long)B * T * C; i++) dout[i] = 2 * rp_rng_uniform(&rng) - 1;

  rp_pool *pool;
  if (rp_pool_create(&pool, 1, 0) != RP_OK) return 1;
  printf("flash attention fwd+bwd, B %d T %d NH %d HS %d causal, 1 thread, scale %.2f\n", B, T,
         NH, HS, amp);
  printf("visible pairs whose probability is a denormal (head 0): %.1f %%\n",
         100.0 * denormal_share(qkv));
  double best[2] = {1e30, 1e30}, *ratio = malloc(sizeof(double) * (size_t)rounds);
  for (int r = 0; r < rounds; r++) {
    double t[2];
    for (int k = 0; k < 2; k++) {
      const int flush = (r + k) % 2 == 0; /* alternate which mode goes first */
      set_flush(flush);
      double m = 1e30;
      for (int i = 0; i < REPS; i++) m = fmin(m, fwd_bwd(out, lse, dqkv, dout, qkv, pool));
      t[flush] = m;
      if (m < best[flush]) best[flush] = m;
    }
    ratio[r] = t[0] / t[1];
    printf("round %d: flushed %.2f ms, not flushed %.2f ms\n", r + 1, 1e3 * t[1], 1e3 * t[0]);
  }
  set_flush(1);
  qsort(ratio, (size_t)rounds, sizeof *ratio, bench_cmp_double);
  printf("fastest: flushed %.2f ms, not flushed %.2f ms; not flushed / flushed %.2fx "
         "(%.2f..%.2f)\n",
         1e3 * best[1], 1e3 * best[0], ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
  rp_pool_destroy(pool);
  free(ratio), free(qkv), free(dqkv), free(out), free(dout), free(lse);
  return 0;
}
