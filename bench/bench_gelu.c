/* bench_gelu: GELU's spans at each instruction-set level the machine allows
 * (src/kernels/simd_rows.c against the plain-C reference of gelu.c), one
 * thread, timed by the thread's CPU time (steady on a shared machine).
 *
 * Two sizes: a block of rows that stays in L1/L2 (the compute the SIMD spans
 * change) and the model's whole fc activation N x 4C (what a step reads). Per
 * round every level runs forward (rp_gelu_forward) and backward with c_fc's
 * bias gradient (rp_gelu_backward_set_dbias), the levels in alternating order;
 * printed are each level's fastest ns per element and the median over rounds
 * of the reference's time over that level's, with its min..max. The levels
 * give the same bits (tests/kernels/test_gelu_isa.c); this checks that here
 * too and fails if they do not. "scalar" is the plain-C reference compiled for
 * the build's -march (at 512 bits on an AVX-512 build machine, where it can beat
 * the avx2 spans; a -march=haswell build shows what an AVX2-only CPU gets).
 *
 * usage: bench_gelu [rounds=7] [C=384] [N=1024] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_util.h"
#include "bench_time.h"

#define MAX_LEVELS 3
#define REPS 7 /* timed calls per (round, level, case); the fastest counts */

typedef struct {
  float *x, *dy, *y, *dx, *db;
  int rows, cols;
} bufs;

/* fastest of REPS calls, in seconds: case 0 forward, 1 backward + dbias */
static double time_case(const bufs *b, int which) {
  double best = 1e30;
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_cpu_now();
    if (which == 0)
      rp_gelu_forward(b->y, b->x, (long)b->rows * b->cols, NULL);
    else
      rp_gelu_backward_set_dbias(b->dx, b->db, b->x, b->dy, b->rows, b->cols, NULL);
    double t = bench_cpu_now() - t0;
    if (t < best) best = t;
  }
  return best;
}

static int alloc_bufs(bufs *b, int rows, int cols, rp_rng *rng) {
  long n = (long)rows * cols;
  b->rows = rows, b->cols = cols;
  b->x = malloc(sizeof(float) * (size_t)n), b->dy = malloc(sizeof(float) * (size_t)n);
  b->y = malloc(sizeof(float) * (size_t)n), b->dx = malloc(sizeof(float) * (size_t)n);
  b->db = calloc((size_t)cols, sizeof(float));
  if (!b->x || !b->dy || !b->y || !b->dx || !b->db) return 0;
  for (long i = 0; i < n; i++) {
    b->x[i] = (float)(rp_rng_uniform(rng) * 12.0 - 6.0);
    b->dy[i] = (float)(rp_rng_uniform(rng) * 2.0 - 1.0);
  }
  return 1;
}

static void free_bufs(bufs *b) { free(b->x), free(b->dy), free(b->y), free(b->dx), free(b->db); }

/* every level's forward output and backward output, bit for bit the first's */
static int same_bits(const bufs *b, const rp_isa *lv, int nl) {
  long n = (long)b->rows * b->cols;
  float *ref = malloc(sizeof(float) * (size_t)n * 2);
  if (!ref) return 0;
  int ok = 1;
  for (int l = 0; l < nl && ok; l++) {
    rp_isa_set(lv[l]);
    rp_gelu_forward(b->y, b->x, n, NULL);
    rp_gelu_backward_set_dbias(b->dx, NULL, b->x, b->dy, b->rows, b->cols, NULL);
    if (l == 0) {
      memcpy(ref, b->y, sizeof(float) * (size_t)n);
      memcpy(ref + n, b->dx, sizeof(float) * (size_t)n);
    } else {
      ok = memcmp(ref, b->y, sizeof(float) * (size_t)n) == 0 &&
           memcmp(ref + n, b->dx, sizeof(float) * (size_t)n) == 0;
    }
  }
  free(ref);
  return ok;
}

static void run_size(const char *label, bufs *b, const rp_isa *lv, int nl, int rounds) {
  double best[MAX_LEVELS][2], *ratio[MAX_LEVELS][2];
  for (int l = 0; l < nl; l++)
    for (int c = 0; c < 2; c++) {
      best[l][c] = 1e30;
      ratio[l][c] = calloc((size_t)rounds, sizeof(double));
    }
  for (int r = 0; r < rounds; r++) {
    double t[MAX_LEVELS][2];
    for (int i = 0; i < nl; i++) {
      int l = r % 2 ? nl - 1 - i : i; /* alternate the order round by round */
      rp_isa_set(lv[l]);
      for (int c = 0; c < 2; c++) {
        t[l][c] = time_case(b, c);
        if (t[l][c] < best[l][c]) best[l][c] = t[l][c];
      }
    }
    for (int l = 0; l < nl; l++)
      for (int c = 0; c < 2; c++) ratio[l][c][r] = t[0][c] / t[l][c];
  }
  const double n = (double)b->rows * b->cols;
  printf("\n%s: %d x %d floats (%.1f MiB a tensor)\n", label, b->rows, b->cols,
         n * 4 / (1024.0 * 1024.0));
  printf("  level     forward ns/elem  c/level            backward+dbias ns/elem  c/level\n");
  for (int l = 0; l < nl; l++) {
    printf("  %-8s", rp_isa_name(lv[l]));
    for (int c = 0; c < 2; c++) {
      qsort(ratio[l][c], (size_t)rounds, sizeof(double), bench_cmp_double);
      printf("  %14.3f  %5.2fx (%.2f..%.2f)", best[l][c] / n * 1e9, ratio[l][c][rounds / 2],
             ratio[l][c][0], ratio[l][c][rounds - 1]);
      free(ratio[l][c]);
    }
    printf("\n");
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 7, C = argc > 2 ? atoi(argv[2]) : 384;
  int N = argc > 3 ? atoi(argv[3]) : 1024;
  if (rounds < 1 || C < 1 || N < 16) {
    fprintf(stderr, "usage: bench_gelu [rounds>=1] [C>=1] [N>=16]\n");
    return 2;
  }
  const rp_isa want[MAX_LEVELS] = {RP_ISA_SCALAR, RP_ISA_AVX2, RP_ISA_AVX512};
  const rp_isa ceiling = rp_isa_active();
  rp_isa lv[MAX_LEVELS];
  int nl = 0;
  for (int i = 0; i < MAX_LEVELS; i++) {
    if (rp_isa_allows(want[i])) lv[nl++] = want[i];
    else printf("bench_gelu: %s skipped (%s)\n", rp_isa_name(want[i]), rp_isa_why_not(want[i]));
  }
  printf("bench_gelu: 1 thread (CPU time), %d rounds, best of %d calls; scalar = the plain-C "
         "reference (compiled for %s)\n", rounds, REPS, rp_isa_build_target());
  rp_rng rng;
  rp_rng_seed(&rng, 1);
  bufs warm, model;
  if (!alloc_bufs(&warm, 16, 4 * C, &rng) || !alloc_bufs(&model, N, 4 * C, &rng)) {
    fprintf(stderr, "bench_gelu: out of memory\n");
    return 1;
  }
  int ok = same_bits(&warm, lv, nl) && same_bits(&model, lv, nl);
  run_size("cache-resident (16 rows of the fc activation)", &warm, lv, nl, rounds);
  run_size("the model's fc activation", &model, lv, nl, rounds);
  rp_isa_set(ceiling);
  printf("\nsame bits at every level: %s\n", ok ? "yes" : "NO");
  free_bufs(&warm);
  free_bufs(&model);
  return ok ? 0 : 1;
}
