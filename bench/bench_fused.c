/* bench_fused: each fused kernel against the unfused composition it replaces,
 * on the model's shapes, in alternating pairs within one process.
 *
 * Per round every case runs its fused and its unfused form back to back (the
 * order alternating round by round), and the round's ratio unfused / fused is
 * kept; printed are the median ratio with its min..max over the rounds and
 * each form's fastest time. With one thread the clock is the thread's CPU time
 * (steady on a shared machine, where another process's time slices do not
 * count); with more, wall-clock (the pool's waits are the cost being saved).
 *
 * Cases (N = B*T rows): fc forward, pre = inp @ Wfc^T + b and post = gelu(pre)
 * (C -> 4C); the GELU backward dpre = gelu'(pre) * dpost with c_fc's bias
 * gradient (the column sums of dpre) in the same pass, against the GELU pass
 * followed by the column sums.
 *
 * usage: bench_fused [threads=2] [rounds=9] [C=384] [N=1024] [pin=1] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"

typedef struct {
  int N, C;
  rp_pool *pool;
  float *inp, *w, *b, *pre, *post, *db, *scratch;
} bench_bufs;

typedef void (*form_fn)(bench_bufs *m);

static void fc_fused(bench_bufs *m) {
  rp_matmul_forward_gelu(m->pre, m->post, m->inp, m->w, m->b, m->N, m->C, 4 * m->C, m->pool,
                         NULL);
}

static void fc_unfused(bench_bufs *m) {
  rp_matmul_forward(m->pre, m->inp, m->w, m->b, m->N, m->C, 4 * m->C, m->pool);
  rp_gelu_forward(m->post, m->pre, (long)m->N * 4 * m->C, m->pool);
}

/* the GELU backward and the c_fc bias gradient: one pass, or the GELU pass and
 * then the column sums of its output (what rp_matmul_backward adds for db) */
static void gelu_dbias_fused(bench_bufs *m) {
  rp_gelu_backward_set_dbias(m->post, m->db, m->pre, m->scratch, m->N, 4 * m->C, m->pool);
}

static void gelu_dbias_unfused(bench_bufs *m) {
  rp_gelu_backward_set(m->post, m->pre, m->scratch, (long)m->N * 4 * m->C, m->pool);
  rp_matmul_backward(NULL, NULL, m->db, m->post, NULL, NULL, m->N, 1, 4 * m->C, m->pool);
}

typedef struct {
  const char *name;
  form_fn fused, unfused;
} bench_case;

static const bench_case cases[] = {
    {"fc forward + GELU", fc_fused, fc_unfused},
    {"GELU backward + c_fc dbias", gelu_dbias_fused, gelu_dbias_unfused},
};
enum { NCASES = sizeof cases / sizeof cases[0], MAX_ROUNDS = 101 };

static double clock_s(int threads) {
  if (threads > 1) return rp_now();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double timed(form_fn f, bench_bufs *m, int threads) {
  double t0 = clock_s(threads);
  f(m);
  return clock_s(threads) - t0;
}

static float *take(long n, rp_rng *r) {
  float *p = rp_alloc(sizeof(float) * (size_t)n, RP_MEM_WORKSPACE);
  if (!p) {
    fprintf(stderr, "bench_fused: %s\n", rp_errmsg());
    exit(1);
  }
  for (long i = 0; i < n; i++) p[i] = 2.0f * rp_rng_uniform(r) - 1.0f;
  return p;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 9;
  int C = argc > 3 ? atoi(argv[3]) : 384, N = argc > 4 ? atoi(argv[4]) : 1024;
  int pin = argc > 5 ? atoi(argv[5]) : 1;
  if (threads < 1 || rounds < 1 || rounds > MAX_ROUNDS || C < 1 || N < 1) {
    fprintf(stderr, "usage: bench_fused [threads>=1] [rounds 1..%d] [C>=1] [N>=1] [pin]\n",
            MAX_ROUNDS);
    return 2;
  }
  bench_bufs m = {.N = N, .C = C};
  if (rp_pool_create(&m.pool, threads, pin) != RP_OK) {
    fprintf(stderr, "bench_fused: %s\n", rp_errmsg());
    return 1;
  }
  rp_rng rng;
  rp_rng_seed(&rng, 7);
  long n4 = (long)N * 4 * C;
  m.inp = take((long)N * C, &rng), m.w = take(4L * C * C, &rng), m.b = take(4 * C, &rng);
  m.pre = take(n4, &rng), m.post = take(n4, &rng), m.db = take(4 * C, &rng);
  m.scratch = take(n4, &rng);

  printf("bench_fused: N=%d C=%d, %d thread(s) (%s clock), %d alternating rounds\n", N, C,
         threads, threads > 1 ? "wall" : "thread CPU", rounds);
  printf("%-34s %12s %12s %24s\n", "case", "fused ms", "unfused ms", "unfused/fused median");
  for (int k = 0; k < NCASES; k++) {
    const bench_case *c = &cases[k];
    c->fused(&m), c->unfused(&m); /* warm up: OpenBLAS buffers, pages, caches */
    double ratio[MAX_ROUNDS], best_f = 1e30, best_u = 1e30;
    for (int r = 0; r < rounds; r++) {
      double tf, tu;
      if (r % 2 == 0) {
        tf = timed(c->fused, &m, threads);
        tu = timed(c->unfused, &m, threads);
      } else {
        tu = timed(c->unfused, &m, threads);
        tf = timed(c->fused, &m, threads);
      }
      ratio[r] = tu / tf;
      if (tf < best_f) best_f = tf;
      if (tu < best_u) best_u = tu;
    }
    qsort(ratio, (size_t)rounds, sizeof ratio[0], cmp_double);
    printf("%-34s %12.3f %12.3f %10.3f (%.3f..%.3f)\n", c->name, best_f * 1e3, best_u * 1e3,
           ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
  }
  rp_pool_destroy(m.pool);
  return 0;
}
