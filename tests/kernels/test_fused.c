/* Fused and write-variant kernels against what they replace: the residual
 * matmul against the reference matmul plus an add (with out aliasing resid), the
 * _set backward variants against their accumulating versions run into zeros
 * (bitwise: the model relies on it to keep the zero-bubble I/W split equal to the
 * full backward), AdamW with the clipping scale fused against scale-then-update,
 * and rp_zero (memset and streaming stores). Both GEMM modes, 1 and 2 threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kt_util.h"

static void residual_case(rp_gemm_mode mode, int nthreads, int N, int IC, int OC, int with_bias) {
  rp_rng rng;
  rp_rng_seed(&rng, 200 + (uint64_t)(mode * 10 + nthreads));
  rp_pool *pool = ta_pool(nthreads);
  rp_gemm_set_mode(pool, mode);
  float *inp, *w, *b;
  kt_linear_operands(&rng, N, IC, OC, &inp, &w, &b);
  float *res = ta_floats((long)N * OC);
  ta_fill(res, (long)N * OC, &rng, -3, 3);
  const float *bias = with_bias ? b : NULL;
  float *want = ta_floats((long)N * OC), *out = ta_floats((long)N * OC);
  rp_matmul_forward_ref(want, inp, w, bias, N, IC, OC);
  for (long i = 0; i < (long)N * OC; i++) want[i] += res[i];

  ta_fill(out, (long)N * OC, &rng, -5, 5); /* overwritten, never read */
  rp_matmul_forward_residual(out, inp, w, bias, res, N, IC, OC, pool);
  assert_int_equal(kt_close_k("residual matmul", out, want, (long)N * OC, IC), 0);
  /* in place: the residual stream accumulates the projection */
  float *acc = ta_floats((long)N * OC);
  memcpy(acc, res, sizeof(float) * (size_t)N * OC);
  rp_matmul_forward_residual(acc, inp, w, bias, acc, N, IC, OC, pool);
  assert_true(kt_bitwise_equal(acc, out, (long)N * OC));

  free(inp), free(w), free(b), free(res), free(want), free(out), free(acc);
  rp_pool_destroy(pool);
}

static void test_matmul_forward_residual(void **state) {
  (void)state;
  const rp_gemm_mode modes[2] = {RP_GEMM_BLAS_THREADS, RP_GEMM_POOL_SPLIT};
  for (int m = 0; m < 2; m++)
    for (int t = 1; t <= 2; t++) {
      residual_case(modes[m], t, 37, 29, 19, 1);
      residual_case(modes[m], t, 128, 96, 160, 0);
      residual_case(modes[m], t, 1, 16, 48, 1);
    }
}

/* rp_matmul_backward_set writes dinp, bitwise what rp_matmul_backward adds into
 * zeros, and leaves the weight gradients' accumulation as it was. */
static void backward_set_case(rp_gemm_mode mode, int nthreads, int N, int IC, int OC) {
  rp_rng rng;
  rp_rng_seed(&rng, 300 + (uint64_t)(mode * 10 + nthreads));
  rp_pool *pool = ta_pool(nthreads);
  rp_gemm_set_mode(pool, mode);
  float *inp = ta_floats((long)N * IC), *w = ta_floats((long)OC * IC);
  float *dout = ta_floats((long)N * OC);
  ta_fill(inp, (long)N * IC, &rng, -1, 1);
  ta_fill(w, (long)OC * IC, &rng, -1, 1);
  ta_fill(dout, (long)N * OC, &rng, -1, 1);
  float *dinp_a = ta_floats((long)N * IC), *dinp_s = ta_floats((long)N * IC);
  float *dw_a = ta_floats((long)OC * IC), *dw_s = ta_floats((long)OC * IC);
  float *db_a = ta_floats(OC), *db_s = ta_floats(OC);
  ta_fill(dw_a, (long)OC * IC, &rng, -1, 1);
  ta_fill(db_a, OC, &rng, -1, 1);
  memcpy(dw_s, dw_a, sizeof(float) * (size_t)OC * IC);
  memcpy(db_s, db_a, sizeof(float) * (size_t)OC);
  ta_fill(dinp_s, (long)N * IC, &rng, -9, 9); /* garbage: must be overwritten */
  rp_matmul_backward(dinp_a, dw_a, db_a, dout, inp, w, N, IC, OC, pool); /* into zeros */
  rp_matmul_backward_set(dinp_s, dw_s, db_s, dout, inp, w, N, IC, OC, pool);
  assert_true(kt_bitwise_equal(dinp_s, dinp_a, (long)N * IC));
  assert_true(kt_bitwise_equal(dw_s, dw_a, (long)OC * IC));
  assert_true(kt_bitwise_equal(db_s, db_a, OC));
  /* dinp alone, and against the reference */
  float *dinp_r = ta_floats((long)N * IC);
  rp_matmul_backward_ref(dinp_r, NULL, NULL, dout, inp, w, N, IC, OC);
  ta_fill(dinp_s, (long)N * IC, &rng, -9, 9);
  rp_matmul_backward_set(dinp_s, NULL, NULL, dout, inp, w, N, IC, OC, pool);
  assert_true(kt_bitwise_equal(dinp_s, dinp_a, (long)N * IC));
  assert_int_equal(kt_close_k("dinp set", dinp_s, dinp_r, (long)N * IC, OC), 0);
  free(inp), free(w), free(dout), free(dinp_a), free(dinp_s), free(dw_a), free(dw_s);
  free(db_a), free(db_s), free(dinp_r);
  rp_pool_destroy(pool);
}

static void test_matmul_backward_set(void **state) {
  (void)state;
  const rp_gemm_mode modes[2] = {RP_GEMM_BLAS_THREADS, RP_GEMM_POOL_SPLIT};
  for (int m = 0; m < 2; m++)
    for (int t = 1; t <= 2; t++) {
      backward_set_case(modes[m], t, 37, 29, 19);
      backward_set_case(modes[m], t, 256, 64, 192);
      backward_set_case(modes[m], t, 1, 16, 48);
    }
}

/* The same call on the same pool repeats bitwise in both GEMM modes: resume and
 * layout-invariance tests compare runs bitwise and rely on it. */
static void test_matmul_repeatable(void **state) {
  (void)state;
  const int N = 300, IC = 64, OC = 96;
  rp_rng rng;
  rp_rng_seed(&rng, 400);
  float *inp, *w, *b;
  kt_linear_operands(&rng, N, IC, OC, &inp, &w, &b);
  float *res = ta_floats((long)N * OC), *o1 = ta_floats((long)N * OC), *o2 = ta_floats((long)N * OC);
  ta_fill(res, (long)N * OC, &rng, -1, 1);
  rp_pool *pool = ta_pool(2);
  for (int m = 0; m < 2; m++) {
    rp_gemm_set_mode(pool, m ? RP_GEMM_POOL_SPLIT : RP_GEMM_BLAS_THREADS);
    rp_matmul_forward_residual(o1, inp, w, b, res, N, IC, OC, pool);
    rp_matmul_forward_residual(o2, inp, w, b, res, N, IC, OC, pool);
    assert_true(kt_bitwise_equal(o1, o2, (long)N * OC));
  }
  rp_pool_destroy(pool);
  free(inp), free(w), free(b), free(res), free(o1), free(o2);
}

/* rp_gelu_backward_set: bitwise what rp_gelu_backward adds into zeros, for 1 and
 * 2 threads alike. */
static void test_gelu_backward_set(void **state) {
  (void)state;
  const long n = 40009;
  rp_rng rng;
  rp_rng_seed(&rng, 33);
  float *x = ta_floats(n), *dy = ta_floats(n), *acc = ta_floats(n);
  ta_fill(x, n, &rng, -6, 6);
  ta_fill(dy, n, &rng, -1, 1);
  rp_gelu_backward(acc, x, dy, n, NULL);
  float *set[2];
  for (int t = 0; t < 2; t++) {
    rp_pool *pool = ta_pool(t + 1);
    set[t] = ta_floats(n);
    ta_fill(set[t], n, &rng, -9, 9);
    rp_gelu_backward_set(set[t], x, dy, n, pool);
    rp_pool_destroy(pool);
    assert_true(kt_bitwise_equal(set[t], acc, n));
  }
  free(x), free(dy), free(acc), free(set[0]), free(set[1]);
}

/* rp_adamw_update_scaled: bitwise rp_scale + rp_adamw_update over a few steps,
 * 1 and 2 threads, and the gradient left as it was. */
static void test_adamw_scaled(void **state) {
  (void)state;
  const long n = 30011;
  const float gs = 0.37f;
  rp_rng rng;
  rp_rng_seed(&rng, 35);
  rp_adamw_hparams h = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f};
  float *g = ta_floats(n), *g0 = ta_floats(n), *p0 = ta_floats(n);
  ta_fill(g0, n, &rng, -1, 1);
  ta_fill(p0, n, &rng, -1, 1);
  for (int t = 1; t <= 2; t++) {
    rp_pool *pool = ta_pool(t);
    float *pa = ta_floats(n), *ma = ta_floats(n), *va = ta_floats(n);
    float *pb = ta_floats(n), *mb = ta_floats(n), *vb = ta_floats(n);
    memcpy(pa, p0, sizeof(float) * n);
    memcpy(pb, p0, sizeof(float) * n);
    for (int step = 1; step <= 3; step++) {
      memcpy(g, g0, sizeof(float) * n);
      rp_scale(g, gs, n, pool);
      rp_adamw_update(pa, g, ma, va, n, &h, 0.1f, step, pool);
      memcpy(g, g0, sizeof(float) * n);
      rp_adamw_update_scaled(pb, g, mb, vb, n, &h, 0.1f, step, gs, pool);
      assert_true(kt_bitwise_equal(g, g0, n));
    }
    assert_true(kt_bitwise_equal(pa, pb, n));
    assert_true(kt_bitwise_equal(ma, mb, n));
    assert_true(kt_bitwise_equal(va, vb, n));
    /* gscale 1 is the plain update */
    rp_adamw_update(pa, g0, ma, va, n, &h, 0.0f, 4, pool);
    rp_adamw_update_scaled(pb, g0, mb, vb, n, &h, 0.0f, 4, 1.0f, pool);
    assert_true(kt_bitwise_equal(pa, pb, n));
    free(pa), free(ma), free(va), free(pb), free(mb), free(vb);
    rp_pool_destroy(pool);
  }
  free(g), free(g0), free(p0);
}

/* rp_zero (or rp_zero_cold) over n floats starting `offset` floats into an
 * allocation: every one cleared, the floats either side left alone; 1 and 2
 * threads. */
static void zero_case_with(void (*zero)(float *, long, rp_pool *), long n, int offset,
                           uint64_t seed) {
  rp_rng rng;
  rp_rng_seed(&rng, seed);
  for (int t = 1; t <= 2; t++) {
    rp_pool *pool = ta_pool(t);
    float *buf = ta_floats(n + offset + 2);
    ta_fill(buf, n + offset + 2, &rng, 1, 2);
    float *x = buf + offset;
    zero(x, n, pool);
    long nonzero = 0;
    for (long i = 0; i < n; i++) nonzero += x[i] != 0.0f;
    assert_int_equal(nonzero, 0);
    assert_true(x[n] >= 1.0f && x[n + 1] >= 1.0f && (offset == 0 || x[-1] >= 1.0f));
    zero(x, 7, pool); /* below the parallel threshold: serial path */
    free(buf);
    rp_pool_destroy(pool);
  }
}

static void zero_case(long n, int offset, uint64_t seed) { zero_case_with(rp_zero, n, offset, seed); }

static void test_zero(void **state) {
  (void)state;
  zero_case(100003, 0, 34); /* above the parallel threshold, not a multiple of 16 */
}

/* The streaming-store path (buffers past the caches): a start that is not
 * 16-byte aligned and a ragged end. */
static void test_zero_streaming(void **state) {
  (void)state;
  long n = 1;
  while (!rp_zero_streams(n)) n *= 2;
  zero_case(n + 13, 1, 35);
}

/* rp_zero_cold: streaming from a smaller size than rp_zero, both paths */
static void test_zero_cold(void **state) {
  (void)state;
  long n = 1;
  while (!rp_zero_cold_streams(n)) n *= 2;
  assert_false(rp_zero_streams(n)); /* a smaller size than rp_zero streams from */
  zero_case_with(rp_zero_cold, n + 13, 1, 36);
  zero_case_with(rp_zero_cold, n / 2 - 5, 0, 37);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_forward_residual),
      cmocka_unit_test(test_matmul_backward_set),
      cmocka_unit_test(test_matmul_repeatable),
      cmocka_unit_test(test_gelu_backward_set),
      cmocka_unit_test(test_adamw_scaled),
      cmocka_unit_test(test_zero),
      cmocka_unit_test(test_zero_streaming),
      cmocka_unit_test(test_zero_cold),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
