/* The cross-entropies' softmax rows of every instruction-set level
 * (simd_rows.c) against the plain-C reference table (crossentropy.c), under
 * each level the machine allows: the sum of exps and the scaled softmax
 * (into another buffer and in place) on lengths around the 16 lanes and the
 * vector widths (the tails), a vocabulary-sized row, shifts that put the
 * exp's argument past its clamps, with NaN, infinities, signed zeros and
 * denormals among the inputs. Bound: bitwise where the build has FMA (the
 * SIMD code is the C code op for op and lane for lane, and losses equal
 * across levels rely on it); without FMA the C loops round each product
 * apart and the SIMD ones fuse them, so a few ulps of each exp (hence of a
 * sum of positive exps). A NaN must stay a NaN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../isa_util.h"
#include "kernels/xent_internal.h"
#include "kt_util.h"

static const long lens[] = {1, 5, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 100, 257, 50257};
#define NLENS (sizeof lens / sizeof lens[0])
#define NMAX 50257

/* logits in [-20, 20] (with a shift of 20 - 90 the exp's argument runs past
 * -87.3, with -70 past 87), the first few replaced by the special values */
static void fill_inputs(float *x, long n, rp_rng *r, int specials) {
  ta_fill(x, n, r, -20.0f, 20.0f);
  const float special[] = {INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f, 100.0f, -100.0f,
                           NAN};
  const size_t ns = sizeof special / sizeof special[0] - (specials ? 0 : 1); /* NaN last */
  for (size_t i = 0; specials && i < ns && (long)i < n; i++) x[(i * 7) % n] = special[i];
}

static int same(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
#ifdef __FMA__
  return memcmp(&a, &b, sizeof a) == 0;
#else
  return a == b || fabs((double)a - b) <= 8 * 1.2e-7 * fabs((double)b) + 1e-37;
#endif
}

static void expect_same(const char *what, long n, long at, float got, float want, float x,
                        float shift) {
  if (!same(got, want))
    fail_msg("%s (%s, n=%ld) at %ld, x=%.9g shift=%.9g: %.9g, reference %.9g", what,
             rp_xent_ops_name(), n, at, (double)x, (double)shift, (double)got, (double)want);
}

static const float shifts[] = {0.0f, 20.0f, -70.0f, 90.0f};
#define NSHIFTS (sizeof shifts / sizeof shifts[0])

static void test_sum_exp(void **state) {
  (void)state;
  const rp_xent_ops *ops = rp_xent_ops_active(), *ref = &rp_xent_ops_c;
  rp_rng r;
  rp_rng_seed(&r, 81);
  float *x = malloc(sizeof(float) * NMAX);
  assert_non_null(x);
  for (size_t li = 0; li < NLENS; li++)
    for (size_t si = 0; si < NSHIFTS; si++)
      for (int specials = 0; specials < 2; specials++) {
        const long n = lens[li];
        fill_inputs(x, n, &r, specials);
        expect_same("sum_exp", n, -1, ops->sum_exp(x, shifts[si], n),
                    ref->sum_exp(x, shifts[si], n), 0.0f, shifts[si]);
      }
  free(x);
}

/* into another buffer and in place, each against the reference's same call */
static void test_softmax(void **state) {
  (void)state;
  const rp_xent_ops *ops = rp_xent_ops_active(), *ref = &rp_xent_ops_c;
  rp_rng r;
  rp_rng_seed(&r, 82);
  float *x = malloc(sizeof(float) * NMAX * 4);
  assert_non_null(x);
  float *d = x + NMAX, *dr = d + NMAX, *in = dr + NMAX;
  const float dscale = 1.0f / 2048.0f * 3.0f;
  for (size_t li = 0; li < NLENS; li++)
    for (size_t si = 0; si < NSHIFTS; si++)
      for (int inplace = 0; inplace < 2; inplace++) {
        const long n = lens[li];
        const float sh = shifts[si];
        fill_inputs(x, n, &r, 1);
        if (inplace) {
          memcpy(d, x, sizeof(float) * (size_t)n);
          memcpy(dr, x, sizeof(float) * (size_t)n);
          ops->softmax(d, d, sh, dscale, n);
          ref->softmax(dr, dr, sh, dscale, n);
        } else {
          memcpy(in, x, sizeof(float) * (size_t)n);
          ops->softmax(d, x, sh, dscale, n);
          ref->softmax(dr, x, sh, dscale, n);
          assert_memory_equal(in, x, sizeof(float) * (size_t)n); /* the input is kept */
        }
        for (long i = 0; i < n; i++)
          expect_same(inplace ? "softmax in place" : "softmax", n, i, d[i], dr[i], x[i], sh);
      }
  free(x);
}

/* the level's table is the one dispatched: not silently the reference */
static void test_dispatch(void **state) {
  (void)state;
  const char *want = rp_isa_allows(RP_ISA_AVX512) ? "avx512"
                     : rp_isa_allows(RP_ISA_AVX2) ? "avx2"
                                                  : "c";
  assert_string_equal(rp_xent_ops_name(), want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sum_exp),
      cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_dispatch),
  };
  return ti_run_group_per_isa("xent_isa", tests, sizeof tests / sizeof tests[0], NULL, NULL,
                              RP_ISA_AVX512);
}
