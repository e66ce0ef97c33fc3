/* The MLP's fused kernels against the unfused composition they replace, on
 * odd shapes, 1 to 3 threads (and every GEMM mode for the matmuls: BLAS
 * threads, pool split, and ringpipe's own GEMM where the CPU has its kernel):
 *   rp_matmul_forward_gelu     == rp_matmul_forward + rp_gelu_forward
 *   rp_gelu_backward_set_dbias == rp_gelu_backward_set + the next
 *                                 rp_matmul_backward's dbias of its output
 *   rp_matmul_backward_gelu    == rp_matmul_backward_set +
 *                                 rp_gelu_backward_set_dbias
 * Bound: bitwise (0 ulp). The fused kernels run the same sgemm calls on the
 * same row slices, the same per-element GELU code and the same row order per
 * bias column, so any difference is a bug (a wrong slice, a missed row, a
 * race), and the model's golden losses rely on it. The fused result is also
 * checked against double references (|err| <= 1e-5 K (1 + |want|) for K-term
 * float sums, 1e-5 elementwise), so the test fails if both paths went wrong
 * together. The profile's epilogue time must come back set. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kt_util.h"
#include "ringpipe/rp_sgemm.h"

#define GELU_K 0.7978845608028654
#define GELU_A 0.044715

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(GELU_K * (x + GELU_A * x * x * x))); }

static double gelu_grad_ref(double x) {
  double u = GELU_K * (x + GELU_A * x * x * x), t = tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
}

typedef struct {
  int N, IC, OC;
} shape;

/* forward: pre[N,OC] = inp[N,IC] @ w[OC,IC]^T + b, post = gelu(pre) */
static void forward_case(rp_gemm_mode mode, int nthreads, shape s) {
  const long nin = (long)s.N * s.IC, nout = (long)s.N * s.OC;
  rp_rng rng;
  rp_rng_seed(&rng, 500 + (uint64_t)(mode * 10 + nthreads));
  rp_pool *pool = ta_pool(nthreads);
  rp_gemm_set_mode(pool, mode);
  float *inp = ta_floats(nin), *w = ta_floats((long)s.OC * s.IC), *b = ta_floats(s.OC);
  ta_fill(inp, nin, &rng, -1, 1);
  ta_fill(w, (long)s.OC * s.IC, &rng, -1, 1);
  ta_fill(b, s.OC, &rng, -1, 1);
  float *pre_u = ta_floats(nout), *post_u = ta_floats(nout);
  rp_matmul_forward(pre_u, inp, w, b, s.N, s.IC, s.OC, pool);
  rp_gelu_forward(post_u, pre_u, nout, pool);

  float *pre_f = ta_floats(nout), *post_f = ta_floats(nout);
  ta_fill(pre_f, nout, &rng, -9, 9); /* garbage: both are written */
  ta_fill(post_f, nout, &rng, -9, 9);
  double epi = -1.0;
  rp_matmul_forward_gelu(pre_f, post_f, inp, w, b, s.N, s.IC, s.OC, pool, &epi);
  assert_true(kt_bitwise_equal(pre_f, pre_u, nout));
  assert_true(kt_bitwise_equal(post_f, post_u, nout));
  assert_true(epi >= 0.0);
  rp_matmul_forward_gelu(pre_f, post_f, inp, w, b, s.N, s.IC, s.OC, pool, NULL);
  assert_true(kt_bitwise_equal(post_f, post_u, nout));

  /* the composition against doubles */
  float *pre_r = ta_floats(nout);
  rp_matmul_forward_ref(pre_r, inp, w, b, s.N, s.IC, s.OC);
  double *want = kt_doubles(nout);
  kt_to_double(want, pre_r, nout);
  assert_int_equal(kt_check_close("pre", pre_f, want, nout, 1e-5 * s.IC, 1e-5 * s.IC), 0);
  for (long i = 0; i < nout; i++) want[i] = gelu_ref(pre_f[i]);
  assert_int_equal(kt_check_close("post", post_f, want, nout, 1e-5, 1e-5), 0);
  free(inp), free(w), free(b), free(pre_u), free(post_u), free(pre_f), free(post_f);
  free(pre_r), free(want);
  rp_pool_destroy(pool);
}

/* GELU backward + bias gradient: dinp[N,C] = gelu'(pre) * dout, and dbias[C]
 * += its column sums onto non-zero starting values */
static void gelu_dbias_case(int nthreads, int N, int C) {
  const long n = (long)N * C;
  rp_rng rng;
  rp_rng_seed(&rng, 600 + (uint64_t)(nthreads * 1000 + C));
  rp_pool *pool = ta_pool(nthreads);
  float *pre = ta_floats(n), *dout = ta_floats(n), *dinp_u = ta_floats(n), *dinp_f = ta_floats(n);
  float *db_u = ta_floats(C), *db_f = ta_floats(C);
  ta_fill(pre, n, &rng, -5, 5);
  ta_fill(dout, n, &rng, -1, 1);
  ta_fill(db_u, C, &rng, -1, 1);
  memcpy(db_f, db_u, sizeof(float) * (size_t)C);
  rp_gelu_backward_set(dinp_u, pre, dout, n, pool);
  /* the bias sums of the next matmul's backward (its dinp and dweight skipped) */
  rp_matmul_backward(NULL, NULL, db_u, dinp_u, NULL, NULL, N, 1, C, pool);

  ta_fill(dinp_f, n, &rng, -9, 9); /* garbage: written */
  rp_gelu_backward_set_dbias(dinp_f, db_f, pre, dout, N, C, pool);
  assert_true(kt_bitwise_equal(dinp_f, dinp_u, n));
  assert_true(kt_bitwise_equal(db_f, db_u, C));
  ta_fill(dinp_f, n, &rng, -9, 9);
  rp_gelu_backward_set_dbias(dinp_f, NULL, pre, dout, N, C, pool); /* no bias: the I pass */
  assert_true(kt_bitwise_equal(dinp_f, dinp_u, n));

  /* against doubles: the derivative, and the column sums (N-term float sums) */
  double *want = kt_doubles(n > C ? n : C);
  for (long i = 0; i < n; i++) want[i] = gelu_grad_ref(pre[i]) * dout[i];
  assert_int_equal(kt_check_close("dinp", dinp_f, want, n, 1e-5, 1e-5), 0);
  float *db0 = ta_floats(C);
  memcpy(db0, db_f, sizeof(float) * (size_t)C);
  memset(db_f, 0, sizeof(float) * (size_t)C);
  rp_gelu_backward_set_dbias(dinp_f, db_f, pre, dout, N, C, pool);
  for (int k = 0; k < C; k++) {
    want[k] = 0.0;
    for (int r = 0; r < N; r++) want[k] += gelu_grad_ref(pre[(long)r * C + k]) * dout[(long)r * C + k];
  }
  assert_int_equal(kt_check_close("dbias", db_f, want, C, 1e-5 * N, 1e-5 * N), 0);
  free(pre), free(dout), free(dinp_u), free(dinp_f), free(db_u), free(db_f), free(want), free(db0);
  rp_pool_destroy(pool);
}

/* c_proj's backward with the GELU's: dpost[N,IC] = dout[N,OC] @ w[OC,IC],
 * dw += dout^T @ post, db += sums of dout, dpre = gelu'(pre) * dpost and
 * dbp += sums of dpre, the accumulators starting from non-zero values */
static void backward_gelu_case(rp_gemm_mode mode, int nthreads, shape s) {
  const long nin = (long)s.N * s.IC, nout = (long)s.N * s.OC, nw = (long)s.OC * s.IC;
  rp_rng rng;
  rp_rng_seed(&rng, 700 + (uint64_t)(mode * 10 + nthreads));
  rp_pool *pool = ta_pool(nthreads);
  rp_gemm_set_mode(pool, mode);
  float *pre = ta_floats(nin), *post = ta_floats(nin), *dout = ta_floats(nout), *w = ta_floats(nw);
  ta_fill(pre, nin, &rng, -4, 4);
  rp_gelu_forward(post, pre, nin, pool);
  ta_fill(dout, nout, &rng, -1, 1);
  ta_fill(w, nw, &rng, -1, 1);
  float *acc[2][3]; /* [unfused, fused][dw, db, dbp] */
  const long len[3] = {nw, s.OC, s.IC};
  for (int j = 0; j < 3; j++) {
    acc[0][j] = ta_floats(len[j]);
    ta_fill(acc[0][j], len[j], &rng, -1, 1);
    acc[1][j] = ta_floats(len[j]);
    memcpy(acc[1][j], acc[0][j], sizeof(float) * (size_t)len[j]);
  }
  float *dpost_u = ta_floats(nin), *dpre_u = ta_floats(nin);
  rp_matmul_backward_set(dpost_u, acc[0][0], acc[0][1], dout, post, w, s.N, s.IC, s.OC, pool);
  rp_gelu_backward_set_dbias(dpre_u, acc[0][2], pre, dpost_u, s.N, s.IC, pool);

  float *dpost_f = ta_floats(nin), *dpre_f = ta_floats(nin);
  ta_fill(dpost_f, nin, &rng, -9, 9); /* garbage: both are written */
  ta_fill(dpre_f, nin, &rng, -9, 9);
  double epi = -1.0;
  rp_matmul_backward_gelu(dpre_f, dpost_f, acc[1][2], acc[1][0], acc[1][1], dout, post, pre, w,
                          s.N, s.IC, s.OC, pool, &epi);
  assert_true(kt_bitwise_equal(dpost_f, dpost_u, nin));
  assert_true(kt_bitwise_equal(dpre_f, dpre_u, nin));
  for (int j = 0; j < 3; j++) assert_true(kt_bitwise_equal(acc[1][j], acc[0][j], len[j]));
  assert_true(epi >= 0.0);
  /* the input-gradient pass alone (zero-bubble I): no weight or bias sums */
  ta_fill(dpre_f, nin, &rng, -9, 9);
  rp_matmul_backward_gelu(dpre_f, dpost_f, NULL, NULL, NULL, dout, post, pre, w, s.N, s.IC,
                          s.OC, pool, NULL);
  assert_true(kt_bitwise_equal(dpre_f, dpre_u, nin));

  /* against doubles: dpost's K = OC term sums, then the derivative */
  double *want = kt_doubles(nin);
  for (long n = 0; n < s.N; n++)
    for (long i = 0; i < s.IC; i++) {
      double sum = 0.0;
      for (long o = 0; o < s.OC; o++) sum += (double)dout[n * s.OC + o] * w[o * s.IC + i];
      want[n * s.IC + i] = sum;
    }
  assert_int_equal(kt_check_close("dpost", dpost_f, want, nin, 1e-5 * s.OC, 1e-5 * s.OC), 0);
  for (long i = 0; i < nin; i++) want[i] = gelu_grad_ref(pre[i]) * dpost_f[i];
  assert_int_equal(kt_check_close("dpre", dpre_f, want, nin, 1e-5, 1e-5), 0);
  for (int u = 0; u < 2; u++)
    for (int j = 0; j < 3; j++) free(acc[u][j]);
  free(pre), free(post), free(dout), free(w), free(dpost_u), free(dpre_u), free(dpost_f);
  free(dpre_f), free(want);
  rp_pool_destroy(pool);
}

/* odd sizes (no multiple of a vector or a cache line), rows that do not split
 * evenly, a skinny product (fewer rows than 16 per thread: the column split),
 * a single row (sgemv); then, for the own GEMM's blocking, several blocks of
 * rows per thread (the epilogue on each as it is finished) and a K of several
 * k blocks over enough columns for several column groups (the epilogue on
 * each group's blocks, each column's rows still in order) */
static const shape shapes[] = {{37, 29, 53}, {101, 17, 4 * 17}, {5, 24, 40}, {1, 16, 48},
                               {601, 40, 96}, {300, 800, 1100}};

/* the GEMM modes: ringpipe's own GEMM where this CPU (and ceiling) has a
 * kernel for it */
static int gemm_modes(rp_gemm_mode modes[3]) {
  int n = 0;
  modes[n++] = RP_GEMM_BLAS_THREADS;
  modes[n++] = RP_GEMM_POOL_SPLIT;
  if (rp_sgemm_kernel_best() >= 0) modes[n++] = RP_GEMM_OWN;
  return n;
}

static void test_forward_gelu(void **state) {
  (void)state;
  rp_gemm_mode modes[3];
  const int nm = gemm_modes(modes);
  for (int m = 0; m < nm; m++)
    for (int t = 1; t <= 3; t++)
      for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        forward_case(modes[m], t, shapes[k]);
}

static void test_backward_gelu(void **state) {
  (void)state;
  rp_gemm_mode modes[3];
  const int nm = gemm_modes(modes);
  for (int m = 0; m < nm; m++)
    for (int t = 1; t <= 3; t++)
      for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const shape b = {shapes[k].N, shapes[k].OC, shapes[k].IC}; /* c_proj: 4C -> C */
        backward_gelu_case(modes[m], t, b);
      }
}

static void test_gelu_backward_dbias(void **state) {
  (void)state;
  for (int t = 1; t <= 3; t++) {
    gelu_dbias_case(t, 37, 53);   /* columns not a multiple of a cache line */
    gelu_dbias_case(t, 64, 4 * 96);
    gelu_dbias_case(t, 3, 8);     /* fewer cache lines than threads */
    gelu_dbias_case(t, 1, 4096);  /* one row, enough work for the pool */
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forward_gelu),
      cmocka_unit_test(test_gelu_backward_dbias),
      cmocka_unit_test(test_backward_gelu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
