/* Matmul: sgemm paths (both gemm modes, 1 and 2 threads) against the reference
 * loops, the reference backward against finite differences, the += convention
 * and NULL-skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <string.h>

#include "kt_util.h"
#include "ringpipe/rp_arena.h"

typedef struct {
  int N, IC, OC;
  const double *w, *b, *inp, *r; /* r: the dout that defines loss = sum(out * r) */
  int which;                     /* 0: x is inp, 1: x is weight, 2: x is bias */
} mm_loss_ctx;

static double mm_loss(void *vctx, double *x) {
  const mm_loss_ctx *c = vctx;
  const double *inp = c->which == 0 ? x : c->inp;
  const double *w = c->which == 1 ? x : c->w;
  const double *b = c->which == 2 ? x : c->b;
  double L = 0.0;
  for (long n = 0; n < c->N; n++)
    for (long o = 0; o < c->OC; o++) {
      double s = b[o];
      for (long i = 0; i < c->IC; i++) s += inp[n * c->IC + i] * w[o * c->IC + i];
      L += s * c->r[n * c->OC + o];
    }
  return L;
}

/* The reference backward (the oracle for sgemm) against double finite differences. */
static void test_matmul_ref_fd(void **state) {
  (void)state;
  const int N = 7, IC = 9, OC = 5;
  rp_rng rng;
  rp_rng_seed(&rng, 11);
  float *inp = ta_floats(N * IC), *w = ta_floats(OC * IC), *b = ta_floats(OC);
  float *dout = ta_floats(N * OC);
  ta_fill(inp, N * IC, &rng, -1, 1);
  ta_fill(w, OC * IC, &rng, -1, 1);
  ta_fill(b, OC, &rng, -1, 1);
  ta_fill(dout, N * OC, &rng, -1, 1);
  /* nonzero starting gradients: backward must add to them */
  float *dinp = ta_floats(N * IC), *dw = ta_floats(OC * IC), *db = ta_floats(OC);
  float *dinp0 = ta_floats(N * IC), *dw0 = ta_floats(OC * IC), *db0 = ta_floats(OC);
  ta_fill(dinp0, N * IC, &rng, -1, 1);
  ta_fill(dw0, OC * IC, &rng, -1, 1);
  ta_fill(db0, OC, &rng, -1, 1);
  memcpy(dinp, dinp0, sizeof(float) * N * IC);
  memcpy(dw, dw0, sizeof(float) * OC * IC);
  memcpy(db, db0, sizeof(float) * OC);
  rp_matmul_backward_ref(dinp, dw, db, dout, inp, w, N, IC, OC);

  double *dinpd = kt_doubles(N * IC), *dwd = kt_doubles(OC * IC), *dbd = kt_doubles(OC);
  double *rd = kt_doubles(N * OC);
  kt_to_double(dinpd, inp, N * IC);
  kt_to_double(dwd, w, OC * IC);
  kt_to_double(dbd, b, OC);
  kt_to_double(rd, dout, N * OC);
  mm_loss_ctx c = {.N = N, .IC = IC, .OC = OC, .w = dwd, .b = dbd, .inp = dinpd, .r = rd};
  double *fd = kt_doubles(N * IC);
  double *x = kt_doubles(N * IC);

  c.which = 0;
  memcpy(x, dinpd, sizeof(double) * N * IC);
  kt_fd(mm_loss, &c, x, N * IC, fd);
  assert_int_equal(kt_check_grad("dinp", dinp, dinp0, fd, N * IC), 0);
  c.which = 1;
  memcpy(x, dwd, sizeof(double) * OC * IC);
  kt_fd(mm_loss, &c, x, OC * IC, fd);
  assert_int_equal(kt_check_grad("dweight", dw, dw0, fd, OC * IC), 0);
  c.which = 2;
  memcpy(x, dbd, sizeof(double) * OC);
  kt_fd(mm_loss, &c, x, OC, fd);
  assert_int_equal(kt_check_grad("dbias", db, db0, fd, OC), 0);

  free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db);
  free(dinp0), free(dw0), free(db0), free(dinpd), free(dwd), free(dbd), free(rd);
  free(fd), free(x);
}

static void run_mode(rp_gemm_mode mode, int nthreads, int N, int IC, int OC, int with_bias) {
  rp_rng rng;
  rp_rng_seed(&rng, 100 + (uint64_t)(mode * 10 + nthreads));
  rp_pool *pool = ta_pool(nthreads);
  rp_gemm_set_mode(pool, mode);
  assert_int_equal(rp_gemm_get_mode(pool), mode);
  float *inp, *w, *b;
  kt_linear_operands(&rng, N, IC, OC, &inp, &w, &b);
  float *dout = ta_floats((long)N * OC);
  ta_fill(dout, (long)N * OC, &rng, -1, 1);
  const float *bias = with_bias ? b : NULL;

  float *out = ta_floats((long)N * OC), *out_ref = ta_floats((long)N * OC);
  ta_fill(out, (long)N * OC, &rng, -5, 5); /* forward overwrites, never adds */
  rp_matmul_forward(out, inp, w, bias, N, IC, OC, pool);
  rp_matmul_forward_ref(out_ref, inp, w, bias, N, IC, OC);
  assert_int_equal(kt_close_k("out", out, out_ref, (long)N * OC, IC), 0);

  float *dinp = ta_floats((long)N * IC), *dw = ta_floats((long)OC * IC), *db = ta_floats(OC);
  float *dinp_r = ta_floats((long)N * IC), *dw_r = ta_floats((long)OC * IC);
  float *db_r = ta_floats(OC);
  ta_fill(dinp, (long)N * IC, &rng, -1, 1);
  ta_fill(dw, (long)OC * IC, &rng, -1, 1);
  ta_fill(db, OC, &rng, -1, 1);
  memcpy(dinp_r, dinp, sizeof(float) * (size_t)N * IC);
  memcpy(dw_r, dw, sizeof(float) * (size_t)OC * IC);
  memcpy(db_r, db, sizeof(float) * (size_t)OC);
  rp_matmul_backward(dinp, dw, db, dout, inp, w, N, IC, OC, pool);
  rp_matmul_backward_ref(dinp_r, dw_r, db_r, dout, inp, w, N, IC, OC);
  assert_int_equal(kt_close_k("dinp", dinp, dinp_r, (long)N * IC, OC), 0);
  assert_int_equal(kt_close_k("dweight", dw, dw_r, (long)OC * IC, N), 0);
  assert_int_equal(kt_close_k("dbias", db, db_r, OC, N), 0);

  /* NULL skips: each gradient alone must equal its value from the full call, and
   * skipped ones stay untouched */
  float *g1 = ta_floats((long)N * IC), *g2 = ta_floats((long)OC * IC), *g3 = ta_floats(OC);
  memcpy(g1, dinp_r, sizeof(float) * (size_t)N * IC); /* sentinel content */
  rp_matmul_backward(NULL, g2, NULL, dout, inp, w, N, IC, OC, pool);
  rp_matmul_backward(NULL, NULL, g3, dout, inp, w, N, IC, OC, pool);
  float *g2r = ta_floats((long)OC * IC), *g3r = ta_floats(OC);
  rp_matmul_backward_ref(NULL, g2r, g3r, dout, inp, w, N, IC, OC);
  assert_int_equal(kt_close_k("dweight only", g2, g2r, (long)OC * IC, N), 0);
  assert_int_equal(kt_close_k("dbias only", g3, g3r, OC, N), 0);
  assert_true(kt_bitwise_equal(g1, dinp_r, (long)N * IC));
  memset(g1, 0, sizeof(float) * (size_t)N * IC);
  rp_matmul_backward(g1, NULL, NULL, dout, inp, w, N, IC, OC, pool);
  float *g1r = ta_floats((long)N * IC);
  rp_matmul_backward_ref(g1r, NULL, NULL, dout, inp, w, N, IC, OC);
  assert_int_equal(kt_close_k("dinp only", g1, g1r, (long)N * IC, OC), 0);

  free(inp), free(w), free(b), free(dout), free(out), free(out_ref);
  free(dinp), free(dw), free(db), free(dinp_r), free(dw_r), free(db_r);
  free(g1), free(g2), free(g3), free(g1r), free(g2r), free(g3r);
  rp_pool_destroy(pool);
}

static void test_matmul_modes(void **state) {
  (void)state;
  const rp_gemm_mode modes[2] = {RP_GEMM_BLAS_THREADS, RP_GEMM_POOL_SPLIT};
  for (int m = 0; m < 2; m++)
    for (int t = 1; t <= 2; t++) {
      run_mode(modes[m], t, 37, 29, 19, 1);  /* odd shapes, slices of unequal size */
      run_mode(modes[m], t, 128, 96, 160, 0);
      run_mode(modes[m], t, 1, 16, 48, 1);   /* fewer rows than threads */
    }
}

/* OpenBLAS's core against the CPU (rp_blas_check_cpu_rule): a core above the
 * CPU is refused, naming the core, both levels and the fix (which depends on
 * whether OPENBLAS_CORETYPE chose it); a core at or below it passes, and so
 * does this machine's own (the suite runs on it). */
static void test_blas_core_above_cpu(void **state) {
  (void)state;
  assert_int_equal(rp_blas_check_cpu_rule("SkylakeX", RP_ISA_AVX512, RP_ISA_AVX2, "SkylakeX"),
                   RP_EINVAL);
  const char *m = rp_errmsg();
  assert_non_null(strstr(m, "SkylakeX kernels, which need avx512"));
  assert_non_null(strstr(m, "runs at most avx2"));
  assert_non_null(strstr(m, "OPENBLAS_CORETYPE=SkylakeX in the environment"));
  assert_non_null(strstr(m, "unset OPENBLAS_CORETYPE"));
  assert_int_equal(rp_blas_check_cpu_rule("Haswell", RP_ISA_AVX2, RP_ISA_SCALAR, NULL), RP_EINVAL);
  m = rp_errmsg();
  assert_non_null(strstr(m, "runs at most scalar"));
  assert_non_null(strstr(m, "set OPENBLAS_CORETYPE to a core this CPU runs"));
  assert_int_equal(rp_blas_check_cpu_rule("Haswell", RP_ISA_AVX2, RP_ISA_AVX2, "Haswell"), RP_OK);
  assert_int_equal(rp_blas_check_cpu_rule("Zen", RP_ISA_AVX2, RP_ISA_AVX512, NULL), RP_OK);
  assert_int_equal(rp_blas_check_cpu_rule("Prescott", RP_ISA_SCALAR, RP_ISA_SCALAR, ""), RP_OK);
  assert_int_equal(rp_blas_check_cpu(), RP_OK);
}

/* `bench fma`'s GEMM check (rp_gemm_sustained): repeats for the time asked,
 * their rates in order, its operands given back; a side or time that is not
 * positive and operands past its limit are refused before any allocation. */
static void test_gemm_sustained(void **state) {
  (void)state;
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 2, 0), RP_OK);
  rp_isa_probe_stats st;
  /* the first call leaves the GEMM's own pack buffers, which it keeps */
  assert_int_equal(rp_gemm_sustained(64, 32, 48, pool, 0.01, &st), RP_OK);
  const size_t ws = rp_mem_current(RP_MEM_WORKSPACE);
  const double t0 = rp_now();
  assert_int_equal(rp_gemm_sustained(64, 32, 48, pool, 0.05, &st), RP_OK);
  assert_true(rp_now() - t0 >= 0.05);
  assert_true(st.runs >= 2);
  assert_true(st.best >= st.p90 && st.p90 >= st.median && st.median >= st.p10 && st.p10 > 0);
  assert_int_equal(rp_mem_current(RP_MEM_WORKSPACE), ws);
  assert_int_equal(rp_gemm_sustained(0, 32, 48, pool, 0.05, &st), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "0 x 32 -> 48: every side must be positive"));
  assert_int_equal(st.runs, 0);
  assert_int_equal(rp_gemm_sustained(64, 32, 48, pool, 0.0, &st), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "must be positive"));
  assert_int_equal(rp_gemm_sustained(1L << 20, 1L << 10, 16, pool, 0.05, &st), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "make the shape smaller"));
  assert_int_equal(rp_mem_current(RP_MEM_WORKSPACE), ws);
  rp_pool_destroy(pool);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_ref_fd),
      cmocka_unit_test(test_matmul_modes),
      cmocka_unit_test(test_blas_core_above_cpu),
      cmocka_unit_test(test_gemm_sustained),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
