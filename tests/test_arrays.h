/* What every C test suite needs around its arrays: zeroed floats, uniform
 * random fills, a thread pool that ends the test when it cannot be made, and
 * the worst absolute difference between two arrays. Each suite's own helper
 * header (kt_util.h, ft_util.h, bt_util.h, cp_test_util.h) includes it and
 * adds what only that suite needs. */
#ifndef TEST_ARRAYS_H
#define TEST_ARRAYS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"

/* n zeroed floats (at least one, so that n = 0 is not a failed allocation). */
static inline float *ta_floats(long n) {
  float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
  if (!p) abort();
  return p;
}

static inline void ta_fill(float *x, long n, rp_rng *r, float lo, float hi) {
  for (long i = 0; i < n; i++) x[i] = lo + (hi - lo) * rp_rng_uniform(r);
}

static inline rp_pool *ta_pool(int n) {
  rp_pool *p = NULL;
  if (rp_pool_create(&p, n, 0) != RP_OK || !p) {
    fprintf(stderr, "rp_pool_create(%d): %s\n", n, rp_errmsg());
    abort();
  }
  return p;
}

/* Max |got - want| over n values; -inf == -inf counts as equal, any NaN or
 * other infinity as a failure (returns +inf). Names the worst element when it
 * is over tol. */
static inline double ta_maxdiff(const char *what, const float *got, const float *want, long n,
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
    if (wi < 0 || d > worst) {
      worst = d;
      wi = i;
    }
  }
  if (worst > tol && wi >= 0)
    fprintf(stderr, "  %s: max |diff| %.3g at [%ld] (got %.9g want %.9g)\n", what, worst, wi,
            (double)got[wi], (double)want[wi]);
  return worst;
}

#endif
