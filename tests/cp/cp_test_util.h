/* Helpers for the context-parallel MPI tests: random tensors, pools, and the
 * agreement step that keeps every rank's cmocka verdict the same (a check that
 * failed on one rank only would leave the others waiting in the next
 * collective). */
#ifndef CP_TEST_UTIL_H
#define CP_TEST_UTIL_H

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"

#define CP_ATOL 1e-5  /* cp vs single rank, fp32, absolute (the tolerance) */

static inline float *cpt_floats(long n) {
  float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
  if (!p) abort();
  return p;
}

static inline void cpt_fill(float *x, long n, rp_rng *r, float lo, float hi) {
  for (long i = 0; i < n; i++) x[i] = lo + (hi - lo) * rp_rng_uniform(r);
}

static inline rp_pool *cpt_pool(int n) {
  rp_pool *p = NULL;
  if (rp_pool_create(&p, n, 0) != RP_OK || !p) {
    fprintf(stderr, "rp_pool_create(%d): %s\n", n, rp_errmsg());
    abort();
  }
  return p;
}

/* Max |got - want|; -inf == -inf is equal, any NaN or other infinity is +inf.
 * Names the worst element when it is over tol. */
static inline double cpt_maxdiff(const char *what, const float *got, const float *want, long n,
                                 double tol) {
  double worst = 0.0;
  long wi = -1;
  for (long i = 0; i < n; i++) {
    double d;
    if (isinf(got[i]) || isinf(want[i]))
      d = got[i] == want[i] ? 0.0 : INFINITY;
    else
      d = fabs((double)got[i] - (double)want[i]);
    if (isnan(d)) d = INFINITY;
    if (wi < 0 || d > worst) worst = d, wi = i;
  }
  if (worst > tol && wi >= 0)
    fprintf(stderr, "  %s: max |diff| %.3g at [%ld] (got %.9g want %.9g)\n", what, worst, wi,
            (double)got[wi], (double)want[wi]);
  return worst;
}

/* The largest value over the ranks of comm (NaN-safe: NaN becomes +inf). */
static inline double cpt_agree_max(double x, MPI_Comm comm) {
  double in = isnan(x) ? INFINITY : x, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_MAX, comm);
  return out;
}

static inline int cpt_agree_min_int(int x, MPI_Comm comm) {
  int out = 0;
  MPI_Allreduce(&x, &out, 1, MPI_INT, MPI_MIN, comm);
  return out;
}

static inline int cpt_agree_max_int(int x, MPI_Comm comm) {
  int out = 0;
  MPI_Allreduce(&x, &out, 1, MPI_INT, MPI_MAX, comm);
  return out;
}

/* MPI up, the world's size and rank, and the agreed verdict of a cmocka group
 * (include after <cmocka.h>): the body of every cp test's main. */
#define CPT_MAIN(tests, P, rank)                                  \
  do {                                                            \
    if (rp_mpi_init(&argc, &argv) != RP_OK) {                     \
      fprintf(stderr, "%s\n", rp_errmsg());                       \
      return 1;                                                   \
    }                                                             \
    P = rp_mpi_world_size();                                      \
    rank = rp_mpi_world_rank();                                   \
    int failed_ = cmocka_run_group_tests(tests, NULL, NULL);      \
    failed_ = cpt_agree_max_int(failed_, MPI_COMM_WORLD);         \
    rp_mpi_finalize();                                            \
    return failed_ ? 1 : 0;                                       \
  } while (0)

#endif
