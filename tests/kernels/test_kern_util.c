/* The bit tricks of src/kernels/kern_util.h on the inputs that break bit tricks:
 * NaN (both signs, quiet and signalling), +-Inf, +-0, denormals, the clamp
 * edges, and the ordinary range against double exp. Each case goes through the
 * scalar call and through a loop the compiler vectorizes, and through GELU
 * (its forward is built on the sigmoid). Under -Db_sanitize=undefined this is
 * also the check that no input shifts a negative value. The lane reductions
 * (sum, dot, max in 16 lanes of a vector type) are held bitwise to their
 * definition, 16 partial results reduced in lane order, on random lengths with
 * those special values mixed in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>

#include "kernels/kern_util.h"
#include "kt_util.h"
#include "lanes_ref.h"

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

enum { NSPECIAL = 14 };
static const uint32_t special_bits[NSPECIAL] = {
    0x7FC00000u, 0xFFC00000u, /* quiet NaN, both signs */
    0x7F800001u, 0xFFA00000u, /* signalling NaN payloads */
    0x7F800000u, 0xFF800000u, /* +-Inf */
    0x00000000u, 0x80000000u, /* +-0 */
    0x00000001u, 0x807FFFFFu, /* smallest and largest denormal, both signs */
    0x00400000u, 0x80000010u, /* more denormals */
    0x42AE0000u, 0xC2AE999Au, /* 87 and -87.3: the clamp edges */
};

/* exp of a special input as documented: NaN stays NaN, Inf saturates at the
 * clamp, zeros and denormals give exactly 1. Returns 1 when it holds. */
static int expf_special_ok(float x, float y) {
  if (isnan(x)) return isnan(y);
  if (x == INFINITY) return y == rp_kern_expf(87.0f) && isfinite(y);
  if (x == -INFINITY) return y == rp_kern_expf(-87.3f) && y > 0.0f && isnormal(y);
  if (fabsf(x) < 1e-30f) return y == 1.0f;
  return fabs((double)y - exp((double)x)) <= 4e-7 * exp((double)x);
}

static void test_expf_special(void **state) {
  (void)state;
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = f_of(special_bits[i % NSPECIAL]);
  for (int i = 0; i < 64; i++) out[i] = rp_kern_expf(in[i]); /* vectorized */
  for (int i = 0; i < 64; i++) {
    float scalar = rp_kern_expf(in[i]);
    int ok = expf_special_ok(in[i], out[i]) && expf_special_ok(in[i], scalar);
    if (!ok)
      fprintf(stderr, "rp_kern_expf(0x%08x) = %.9g (loop) / %.9g (call)\n",
              special_bits[i % NSPECIAL], (double)out[i], (double)scalar);
    assert_true(ok);
  }
}

static void test_sigmoid_special(void **state) {
  (void)state;
  for (int i = 0; i < NSPECIAL; i++) {
    float x = f_of(special_bits[i]), s = rp_kern_sigmoidf(x);
    if (isnan(x)) assert_true(isnan(s));
    else if (x == INFINITY) assert_true(s == 1.0f);
    else if (x == -INFINITY) assert_true(s > 0.0f && s < 1e-37f);
    else if (fabsf(x) < 1e-30f) assert_true(s == 0.5f);
  }
}

/* Every float in [-87.3, 87] on a fine grid, against double exp. */
static void test_expf_accuracy(void **state) {
  (void)state;
  enum { N = 200001 };
  float *x = ta_floats(N), *y = ta_floats(N);
  for (long i = 0; i < N; i++) x[i] = -87.3f + (float)((87.0 + 87.3) * i / (N - 1));
  for (long i = 0; i < N; i++) y[i] = rp_kern_expf(x[i]);
  double worst = 0;
  for (long i = 0; i < N; i++) {
    double want = exp((double)x[i]), ulp = ldexp(1.0, ilogb(want) - 23);
    worst = fmax(worst, fabs(y[i] - want) / ulp);
  }
  fprintf(stderr, "rp_kern_expf: worst error %.2f ulp on [-87.3, 87]\n", worst);
  assert_true(worst <= 2.0);
  free(x), free(y);
}

/* GELU forward: NaN in, NaN out; infinities and tiny inputs behave. */
static void test_gelu_special(void **state) {
  (void)state;
  float in[NSPECIAL], out[NSPECIAL];
  for (int i = 0; i < NSPECIAL; i++) in[i] = f_of(special_bits[i]);
  rp_gelu_forward(out, in, NSPECIAL, NULL);
  for (int i = 0; i < NSPECIAL; i++) {
    float x = in[i], y = out[i];
    if (isnan(x)) assert_true(isnan(y));
    else if (fabsf(x) < 1e-30f) assert_true(fabsf(y) <= fabsf(x));
    else if (isfinite(x)) assert_true(fabs(y - 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))) <= 1e-5 * fabsf(x));
  }
}

/* equal bits, or both NaN: which NaN payload a sum of two NaNs keeps depends on
 * the operand order the compiler picks for an add */
static int same_bits(float a, float b) {
  return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

static void test_lane_reductions(void **state) {
  (void)state;
  enum { MAXN = 300 };
  float x[MAXN], y[MAXN];
  rp_rng rng;
  rp_rng_seed(&rng, 5);
  int bad_sum = 0, bad_dot = 0, bad_max = 0;
  for (int t = 0; t < 4000; t++) {
    const long n = 1 + (long)(rp_rng_u64(&rng) % MAXN);
    /* rows of three kinds: ordinary values; NaN, Inf and zeros mixed in; and
     * only +0, -0 and negatives, where the max's sign of zero shows which of
     * two equal values a lane kept */
    const int kind = t % 3;
    static const float zeros_kind[4] = {0.0f, -0.0f, -1.0f, -INFINITY};
    for (long i = 0; i < n; i++) {
      x[i] = (float)(rp_rng_uniform(&rng) * 200.0 - 100.0);
      y[i] = (float)(rp_rng_uniform(&rng) * 2.0 - 1.0);
      if (kind == 1 && rp_rng_u64(&rng) % 8 == 0)
        x[i] = f_of(special_bits[rp_rng_u64(&rng) % NSPECIAL]);
      if (kind == 2) x[i] = zeros_kind[rp_rng_u64(&rng) % 4];
    }
    bad_sum += !same_bits(rp_kern_sum(x, n), lanes_sum(x, NULL, n));
    bad_dot += !same_bits(rp_kern_dot(x, y, n), lanes_sum(x, y, n));
    bad_max += !same_bits(rp_kern_max(x, n), lanes_max(x, n));
  }
  if (bad_sum || bad_dot || bad_max)
    print_message("lane reductions off their definition: sum %d, dot %d, max %d of 4000\n",
                  bad_sum, bad_dot, bad_max);
  assert_int_equal(bad_sum + bad_dot + bad_max, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_expf_special),
      cmocka_unit_test(test_sigmoid_special),
      cmocka_unit_test(test_expf_accuracy),
      cmocka_unit_test(test_gelu_special),
      cmocka_unit_test(test_lane_reductions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
