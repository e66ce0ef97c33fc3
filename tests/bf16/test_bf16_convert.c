/* fp32 <-> bf16 conversions: round-to-nearest-even ties and special values, the
 * round trip of every bf16, array conversions equal to the scalar rule under
 * every code path and thread count, and stochastic rounding (neighbours only,
 * unbiased, deterministic per seed, independent of threads). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>

#include "bt_util.h"

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t u_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static void test_rne_cases(void **state) {
  (void)state;
  static const struct { uint32_t in; uint16_t out; } cases[] = {
      {0x3F800000u, 0x3F80}, /* 1.0 exact */
      {0x3F808000u, 0x3F80}, /* tie, even below */
      {0x3F818000u, 0x3F82}, /* tie, odd below: up to even */
      {0x3F808001u, 0x3F81}, /* just above the tie */
      {0x3F807FFFu, 0x3F80}, /* just below the tie */
      {0xBF808000u, 0xBF80}, /* negative ties mirror */
      {0xBF818000u, 0xBF82},
      {0x7F7F7FFFu, 0x7F7F}, /* below the tie at the top: largest finite */
      {0x7F7F8000u, 0x7F80}, /* tie with infinity: even is infinity */
      {0x7F7FFFFFu, 0x7F80}, /* largest fp32 rounds to infinity */
      {0x7F800000u, 0x7F80}, /* +inf */
      {0xFF800000u, 0xFF80}, /* -inf */
      {0x00000000u, 0x0000}, /* +0 */
      {0x80000000u, 0x8000}, /* -0 */
      {0x00008000u, 0x0000}, /* denormal tie to even zero: no flush rule needed */
      {0x00018000u, 0x0002}, /* denormal tie, odd below */
      {0x00010001u, 0x0001}, /* denormal rounds down */
      {0x007FFFFFu, 0x0080}, /* largest denormal rounds up to the smallest normal */
      {0x7F800001u, 0x7FC0}, /* signalling NaN with low payload: quiet NaN */
      {0xFFC12345u, 0xFFC1}, /* quiet NaN keeps sign and top payload */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = rp_bf16_from_f32(f_of(cases[i].in));
    if (got != cases[i].out)
      fprintf(stderr, "rne(0x%08x) = 0x%04x, want 0x%04x\n", cases[i].in, got, cases[i].out);
    assert_int_equal(got, cases[i].out);
  }
  /* the NaN results really are NaN */
  assert_true(isnan(rp_bf16_to_f32(rp_bf16_from_f32(f_of(0x7F800001u)))));
}

/* Every bf16 widens exactly and converts back to itself; NaNs stay NaN. */
static void test_round_trip_all(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = rp_bf16_to_f32((uint16_t)h);
    assert_int_equal(u_of(f), h << 16);
    uint16_t back = rp_bf16_from_f32(f);
    if (isnan(f)) assert_true(isnan(rp_bf16_to_f32(back)));
    else assert_int_equal(back, h);
  }
}

/* RNE result is the nearest bf16 (checked in double), ties to even mantissa. */
static void test_rne_is_nearest(void **state) {
  (void)state;
  rp_rng rng;
  rp_rng_seed(&rng, 5);
  for (int i = 0; i < 200000; i++) {
    uint32_t u = (uint32_t)rp_rng_u64(&rng);
    float x = f_of(u);
    if (!isfinite(x) || fabsf(x) >= 3.38e38f) continue;
    uint16_t h = rp_bf16_from_f32(x);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1); /* truncation and next */
    double dl = fabs((double)rp_bf16_to_f32(lo) - x), dh = fabs((double)rp_bf16_to_f32(hi) - x);
    uint16_t want = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    assert_int_equal(h, want);
  }
}

static void fill_bits(float *x, long n, rp_rng *r) {
  for (long i = 0; i < n; i++) x[i] = f_of((uint32_t)rp_rng_u64(r));
  x[0] = f_of(0x3F808000u), x[1] = f_of(0x7F7F8000u), x[2] = f_of(0x7F800001u);
  x[3] = f_of(0x00018000u);
}

/* Array conversions equal the scalar rule bit for bit: portable and AVX-512
 * loops, 1 and 2 threads, lengths that are not multiples of the vector width. */
static void test_array_equals_scalar(void **state) {
  (void)state;
  const long n = 100003;
  rp_rng rng;
  rp_rng_seed(&rng, 7);
  float *x = ta_floats(n), *back = ta_floats(n);
  uint16_t *h = bt_halves(n);
  fill_bits(x, n, &rng);
  rp_pool *p2 = ta_pool(2);
  for (int forced = 0; forced < 2; forced++)
    for (int t = 0; t < 2; t++) {
      rp_bf16_force_portable(forced);
      for (long len = n; len >= n - 17; len -= 17) {
        memset(h, 0xAB, sizeof(uint16_t) * (size_t)n);
        rp_bf16_from_f32_array(h, x, len, t ? p2 : NULL);
        for (long i = 0; i < len; i++)
          if (h[i] != rp_bf16_from_f32(x[i])) {
            fprintf(stderr, "FAIL %s conversions, %d threads: [%ld] 0x%08x -> 0x%04x, want 0x%04x\n",
                    rp_bf16_conversions_name(), t + 1, i, u_of(x[i]), h[i],
                    rp_bf16_from_f32(x[i]));
            fail();
          }
        for (long i = len; i < n; i++) assert_int_equal(h[i], 0xABAB); /* no overrun */
        rp_bf16_to_f32_array(back, h, len, t ? p2 : NULL);
        for (long i = 0; i < len; i++) assert_int_equal(u_of(back[i]), (uint32_t)h[i] << 16);
      }
    }
  rp_bf16_force_portable(0);
  rp_pool_destroy(p2);
  free(x), free(back), free(h);
}

/* Stochastic rounding: the result is the truncation or the next bf16 toward
 * larger magnitude, matches (bits + sr_bits) >> 16, is a pure function of (seed,
 * index) under any path and thread count, and exact bf16 values never move. */
static void test_sr_rule_and_determinism(void **state) {
  (void)state;
  const long n = 50001;
  rp_rng rng;
  rp_rng_seed(&rng, 9);
  float *x = ta_floats(n);
  uint16_t *h0 = bt_halves(n), *h = bt_halves(n);
  for (long i = 0; i < n; i++) x[i] = (rp_rng_uniform(&rng) - 0.5f) * 1e3f;
  for (long i = 0; i < n; i += 97) x[i] = rp_bf16_to_f32(rp_bf16_from_f32(x[i])); /* exact */
  x[1] = INFINITY, x[2] = -INFINITY, x[3] = f_of(0x7F800001u);
  rp_pool *p2 = ta_pool(2);
  const uint64_t seed = 1234;
  rp_bf16_from_f32_stochastic(h0, x, n, seed, NULL);
  for (long i = 0; i < n; i++) {
    uint32_t u = u_of(x[i]);
    if (isnan(x[i])) {
      assert_true(isnan(rp_bf16_to_f32(h0[i])));
      continue;
    }
    uint16_t want = (uint16_t)((u + rp_bf16_sr_bits(seed, i)) >> 16);
    assert_int_equal(h0[i], want);
    uint16_t tr = (uint16_t)(u >> 16);
    assert_true(h0[i] == tr || h0[i] == (uint16_t)(tr + 1));
    if ((u & 0xFFFFu) == 0) assert_int_equal(h0[i], tr);
  }
  for (int forced = 0; forced < 2; forced++)
    for (int t = 0; t < 2; t++) {
      rp_bf16_force_portable(forced);
      rp_bf16_from_f32_stochastic(h, x, n, seed, t ? p2 : NULL);
      assert_memory_equal(h, h0, sizeof(uint16_t) * (size_t)n);
    }
  rp_bf16_force_portable(0);
  rp_bf16_from_f32_stochastic(h, x, n, seed + 1, p2);
  long moved = 0;
  for (long i = 0; i < n; i++) moved += h[i] != h0[i];
  assert_true(moved > n / 10); /* another seed draws other bits */
  rp_pool_destroy(p2);
  free(x), free(h0), free(h);
}

/* Unbiasedness: the mean of many stochastic roundings of x is x. For a value at
 * fraction f of the way between neighbours lo and hi (gap g), each draw is hi
 * with probability f, so the mean over D draws has standard deviation
 * g*sqrt(f(1-f)/D); accept 5 of them. Checked over seeds (one element) and over
 * elements (one seed, all equal values), for both signs and several f. */
static void test_sr_unbiased(void **state) {
  (void)state;
  const int D = 40000;
  const float fracs[5] = {0.5f, 0.25f, 0.1f, 0.9f, 1.0f / 65536.0f * 3.0f};
  float *x = ta_floats(D);
  uint16_t *h = bt_halves(D);
  for (int sgn = 0; sgn < 2; sgn++)
    for (int q = 0; q < 5; q++) {
      uint16_t lo = sgn ? 0xC0A3 : 0x3C0B; /* -5.09375, ~0.0085 */
      float flo = rp_bf16_to_f32(lo), fhi = rp_bf16_to_f32((uint16_t)(lo + 1));
      /* x exactly at fraction f: the low 16 bits of the fp32 pattern */
      uint32_t low = (uint32_t)(fracs[q] * 65536.0f + 0.5f);
      float xv = f_of(((uint32_t)lo << 16) | low);
      double f = low / 65536.0, g = fabs((double)fhi - flo);
      double sd = g * sqrt(f * (1 - f) / D);
      /* over seeds, element 17 */
      double mean = 0.0;
      float one[18];
      uint16_t outs[18];
      for (int k = 0; k < 18; k++) one[k] = xv;
      for (int d = 0; d < D; d++) {
        rp_bf16_from_f32_stochastic(outs, one, 18, 1000 + (uint64_t)d, NULL);
        mean += rp_bf16_to_f32(outs[17]);
      }
      mean /= D;
      if (!(fabs(mean - xv) <= 5 * sd + 1e-12))
        fprintf(stderr, "seeds: x %.9g mean %.9g sd %.3g\n", xv, mean, sd);
      assert_true(fabs(mean - xv) <= 5 * sd + 1e-12);
      /* over elements, one seed */
      for (int d = 0; d < D; d++) x[d] = xv;
      rp_bf16_from_f32_stochastic(h, x, D, 77 + (uint64_t)q, NULL);
      mean = 0.0;
      for (int d = 0; d < D; d++) mean += rp_bf16_to_f32(h[d]);
      mean /= D;
      if (!(fabs(mean - xv) <= 5 * sd + 1e-12))
        fprintf(stderr, "elements: x %.9g mean %.9g sd %.3g\n", xv, mean, sd);
      assert_true(fabs(mean - xv) <= 5 * sd + 1e-12);
      /* while round to nearest is biased far beyond that (f = 1/4, 1/10, 9/10):
       * the tolerance can tell the two apart */
      double rne_err = fabs((double)rp_bf16_to_f32(rp_bf16_from_f32(xv)) - xv);
      if (q >= 1 && q <= 3) assert_true(rne_err > 5 * sd);
    }
  free(x), free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rne_cases),
      cmocka_unit_test(test_round_trip_all),
      cmocka_unit_test(test_rne_is_nearest),
      cmocka_unit_test(test_array_equals_scalar),
      cmocka_unit_test(test_sr_rule_and_determinism),
      cmocka_unit_test(test_sr_unbiased),
  };
  bt_report_skipped("bf16_convert");
  return cmocka_run_group_tests(tests, NULL, NULL);
}
