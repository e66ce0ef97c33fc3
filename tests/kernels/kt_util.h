/* Helpers for the kernel tests (the arrays, fills and pools of every suite come
 * from test_arrays.h): the finite-difference comparison used by every backward
 * test.
 *
 * Finite differences are taken of a double-precision forward written in the test
 * itself (central, h = 1e-5), so they are accurate to ~1e-10 and the only error
 * left is the float kernel's own. Comparison: |got - fd| <= 1e-3 |fd| + atol with
 * atol = 1e-5 * max|fd| over the tensor, so gradients that are nearly zero (where
 * float rounding dominates any relative measure) do not fail spuriously. */
#ifndef KT_UTIL_H
#define KT_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"
#include "../test_arrays.h"

#define KT_FD_H 1e-5
#define KT_FD_RTOL 1e-3
#define KT_FD_ATOL_FRAC 1e-5

static inline double *kt_doubles(long n) {
  double *p = calloc((size_t)n, sizeof(double));
  if (!p) abort();
  return p;
}

static inline void kt_to_double(double *d, const float *x, long n) {
  for (long i = 0; i < n; i++) d[i] = x[i];
}

static inline void kt_sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Largest |a - b| relative to tol; returns count of elements over tol and
 * prints the first few. */
static inline int kt_check_close(const char *what, const float *got, const double *want,
                                 long n, double rtol, double atol) {
  int bad = 0;
  for (long i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]);
    if (!(d <= rtol * fabs(want[i]) + atol)) {
      if (bad < 5)
        fprintf(stderr, "%s[%ld]: got %.9g want %.9g (diff %.3g)\n", what, i, (double)got[i],
                want[i], d);
      bad++;
    }
  }
  return bad;
}

/* A linear layer's operands for a GEMM test, allocated and drawn uniform in
 * [-1, 1) in this order from r: inp [N, IC], w [OC, IC], b [OC]. */
static inline void kt_linear_operands(rp_rng *r, int N, int IC, int OC, float **inp, float **w,
                                      float **b) {
  *inp = ta_floats((long)N * IC);
  *w = ta_floats((long)OC * IC);
  *b = ta_floats(OC);
  ta_fill(*inp, (long)N * IC, r, -1, 1);
  ta_fill(*w, (long)OC * IC, r, -1, 1);
  ta_fill(*b, OC, r, -1, 1);
}

/* |got - want| <= 1e-5 * K * (1 + |want|) over n floats: sums of K float
 * terms in any order (a GEMM's K, a blocked or threaded order). */
static inline int kt_close_k(const char *what, const float *got, const float *want, long n, int K) {
  double *wd = kt_doubles(n);
  kt_to_double(wd, want, n);
  int bad = kt_check_close(what, got, wd, n, 1e-5 * K, 1e-5 * K);
  free(wd);
  return bad;
}

/* Compare an analytic gradient (grad - grad0, because kernels accumulate) with
 * the finite-difference gradient fd of the same length. */
static inline int kt_check_grad(const char *what, const float *grad, const float *grad0,
                                const double *fd, long n) {
  double maxfd = 0.0;
  for (long i = 0; i < n; i++) maxfd = fmax(maxfd, fabs(fd[i]));
  float *delta = ta_floats(n);
  for (long i = 0; i < n; i++) delta[i] = grad[i] - (grad0 ? grad0[i] : 0.0f);
  int bad = kt_check_close(what, delta, fd, n, KT_FD_RTOL, KT_FD_ATOL_FRAC * maxfd + 1e-7);
  free(delta);
  return bad;
}

/* Central finite differences of a double-valued loss(ctx, x) over every element
 * of x (n values), written to fd. x is restored. */
typedef double (*kt_loss_fn)(void *ctx, double *x);
static inline void kt_fd(kt_loss_fn loss, void *ctx, double *x, long n, double *fd) {
  for (long i = 0; i < n; i++) {
    double keep = x[i];
    x[i] = keep + KT_FD_H;
    double lp = loss(ctx, x);
    x[i] = keep - KT_FD_H;
    double lm = loss(ctx, x);
    x[i] = keep;
    fd[i] = (lp - lm) / (2.0 * KT_FD_H);
  }
}

/* |a - b| <= tol in double (cmocka 1.1's assert_float_equal compares in float and
 * is not reliable for small tolerances). */
#define kt_assert_near(a, b, tol)                                                   \
  do {                                                                              \
    double kt_a_ = (double)(a), kt_b_ = (double)(b);                                \
    if (!(fabs(kt_a_ - kt_b_) <= (tol)))                                            \
      fprintf(stderr, "%s = %.10g, want %.10g (tol %g)\n", #a, kt_a_, kt_b_, (double)(tol)); \
    assert_true(fabs(kt_a_ - kt_b_) <= (tol));                                      \
  } while (0)

static inline int kt_bitwise_equal(const float *a, const float *b, long n) {
  return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

#endif
