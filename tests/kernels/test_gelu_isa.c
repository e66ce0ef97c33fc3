/* The GELU spans of every instruction-set level (simd_rows.c) against the
 * plain-C reference table (gelu.c), under each level the machine allows:
 * forward, backward writing, accumulating and taking a bias gradient, on
 * lengths around the vector widths (the element tails), over the range the
 * model feeds it and past the exp's clamps, with NaN, infinities, signed zeros
 * and denormals among the inputs. Bound: bitwise where the build has FMA (the
 * SIMD code is the C code op for op, and the model's losses equal across
 * levels rely on it); without FMA the C loops round each product apart and the
 * SIMD ones fuse them, so a few ulps there, more where the exp's argument is
 * large (x < -5, where GELU is below 1e-7). A NaN must stay a NaN (its sign
 * may not). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "../isa_util.h"
#include "kernels/gelu_internal.h"
#include "kt_util.h"

/* around the vector widths, and for the spans' pipeline (pairs of vectors,
 * from four vectors on): 61 and 83 leave one full vector after the pairs at
 * 8 and at 16 lanes, 33 and 100 none */
static const long lens[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 61, 83, 100, 1536};
#define NLENS (sizeof lens / sizeof lens[0])
#define NMAX 1536

/* random values in [-12, 12] (|x| > 10 drives the exp past its clamps),
 * the first few replaced by the special values */
static void fill_inputs(float *x, long n, rp_rng *r) {
  ta_fill(x, n, r, -12.0f, 12.0f);
  const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f,
                           100.0f, -100.0f, -9.3f};
  for (size_t i = 0; i < sizeof special / sizeof special[0] && (long)i < n; i++)
    x[(i * 7) % n] = special[i];
}

/* x: the input and scale (0, or |dy| for a gradient) for the bound without
 * FMA (see the file comment) */
static int same(float a, float b, float x, float scale) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
#ifdef __FMA__
  (void)x, (void)scale;
  return memcmp(&a, &b, sizeof a) == 0;
#else
  /* a rounding apart in the exp's argument 2u ~ 1.6 (x + 0.045 x^3) moves the
   * result by that many ulps of its size; the gradient's terms are of size
   * |dy| (1 + |x|) and cancel near its zero (x ~ -0.75) */
  double ax = fabs((double)x), ulps = 8.0 + 2.0 * (ax + 0.045 * ax * ax * ax);
  double size = fabs((double)b) + fabs((double)scale) * (1.0 + ax);
  return a == b || fabs((double)a - b) <= ulps * 1.2e-7 * size + 1e-37;
#endif
}

/* dy: the output gradient of a backward (its size bounds the terms), or NULL */
static void expect_same(const char *what, long n, const float *got, const float *want,
                        const float *x, const float *dy) {
  for (long i = 0; i < n; i++)
    if (!same(got[i], want[i], x[i], dy ? dy[i] : 0.0f))
      fail_msg("%s (%s, n=%ld) at %ld, x=%.9g: %.9g, reference %.9g", what, rp_gelu_ops_name(),
               n, i, (double)x[i], (double)got[i], (double)want[i]);
}

static void test_forward(void **state) {
  (void)state;
  const rp_gelu_ops *ops = rp_gelu_ops_active(), *ref = &rp_gelu_ops_c;
  rp_rng r;
  rp_rng_seed(&r, 71);
  float x[NMAX], y[NMAX], yr[NMAX];
  for (size_t li = 0; li < NLENS; li++) {
    long n = lens[li];
    fill_inputs(x, n, &r);
    ops->forward(y, x, n);
    ref->forward(yr, x, n);
    expect_same("forward", n, y, yr, x, NULL);
  }
}

/* every (set, bias) combination the table promises */
static void test_backward(void **state) {
  (void)state;
  const rp_gelu_ops *ops = rp_gelu_ops_active(), *ref = &rp_gelu_ops_c;
  rp_rng r;
  rp_rng_seed(&r, 72);
  float x[NMAX], dy[NMAX], dx[NMAX], dxr[NMAX], db[NMAX], dbr[NMAX];
  for (size_t li = 0; li < NLENS; li++)
    for (int mode = 0; mode < 4; mode++) {
      long n = lens[li];
      const int set = mode & 1, bias = mode >> 1;
      fill_inputs(x, n, &r);
      ta_fill(dy, n, &r, -2.0f, 2.0f);
      ta_fill(dx, n, &r, -1.0f, 1.0f);
      ta_fill(db, n, &r, -1.0f, 1.0f);
      memcpy(dxr, dx, sizeof(float) * (size_t)n);
      memcpy(dbr, db, sizeof(float) * (size_t)n);
      ops->backward(dx, bias ? db : NULL, x, dy, n, set);
      ref->backward(dxr, bias ? dbr : NULL, x, dy, n, set);
      char what[64];
      snprintf(what, sizeof what, "backward set=%d bias=%d: dx", set, bias);
      expect_same(what, n, dx, dxr, x, dy);
      snprintf(what, sizeof what, "backward set=%d bias=%d: db", set, bias);
      expect_same(what, n, db, dbr, x, dy);
    }
}

/* the level's table is the one dispatched: not silently the reference */
static void test_dispatch(void **state) {
  (void)state;
  const char *want = rp_isa_allows(RP_ISA_AVX512) ? "avx512"
                     : rp_isa_allows(RP_ISA_AVX2) ? "avx2"
                                                  : "c";
  assert_string_equal(rp_gelu_ops_name(), want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forward),
      cmocka_unit_test(test_backward),
      cmocka_unit_test(test_dispatch),
  };
  return ti_run_group_per_isa("gelu_isa", tests, sizeof tests / sizeof tests[0], NULL, NULL,
                              RP_ISA_AVX512);
}
