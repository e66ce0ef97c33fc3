/* Each instruction set's flash inner loops (flash_attention_avx2.c, _avx512.c)
 * against the portable C table beside them (flash_attention_scalar.c), op by
 * op: the micro-kernel GEMM over ragged shapes, both A layouts and both
 * accumulate modes; the softmax exp (the vector paths use 2^t polynomials, the
 * reference expf) over the whole range the softmax feeds it, far-negative
 * inputs included; rowmax, dsoft, dot, scal, the transposing pack. Paths the
 * machine or the RINGPIPE_ISA ceiling excludes are reported skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ft_util.h"
#include "kernels/flash_attention_internal.h"

static const rp_flash_ops *ops_of(rp_flash_isa isa) {
  rp_flash_config cfg = {.isa = isa};
  assert_int_equal(rp_flash_isa_active(&cfg), isa);
  return rp_flash_ops_active(&cfg);
}

/* max |got - want| / (|want| + floor) */
static double rel_err(const float *got, const float *want, long n, double floor) {
  double worst = 0;
  for (long i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]) / (fabs((double)want[i]) + floor);
    if (isnan(d)) return INFINITY;
    if (d > worst) worst = d;
  }
  return worst;
}

/* One product of random operands (A row-major M x K, or its transpose with
 * trans, row stride lda; B K x N, row stride ldb; C M x (N + 2)) through ops
 * and ref; the relative error over all of C, padding columns included (they
 * must be left alone too). */
static double gemm_case(const rp_flash_ops *ops, const rp_flash_ops *ref, rp_rng *r, int M, int N,
                        int K, int trans, int acc, long lda, long ldb) {
  const long ldc = N + 2, arows = trans ? K : M;
  float *a = ta_floats(arows * lda), *b = ta_floats(K * ldb);
  float *c = ta_floats(M * ldc), *cr = ta_floats(M * ldc);
  ta_fill(a, arows * lda, r, -1, 1);
  ta_fill(b, K * ldb, r, -1, 1);
  ta_fill(c, M * ldc, r, -1, 1);
  memcpy(cr, c, sizeof(float) * (size_t)(M * ldc));
  const long rsa = trans ? 1 : lda, csa = trans ? lda : 1;
  ops->gemm(M, N, K, a, rsa, csa, b, ldb, c, ldc, acc);
  ref->gemm(M, N, K, a, rsa, csa, b, ldb, cr, ldc, acc);
  const double e = rel_err(c, cr, M * ldc, 1.0);
  free(a), free(b), free(c), free(cr);
  return e;
}

static void check_gemm(const rp_flash_ops *ops, const rp_flash_ops *ref, rp_rng *r) {
  /* 100 and 193: inner dimensions the AVX-512 gemm splits in chunks */
  static const int dims[] = {1, 5, 6, 7, 13, 16, 24, 33, 64, 70, 100, 193};
  const int nd = (int)(sizeof dims / sizeof dims[0]);
  for (int t = 0; t < 40; t++) {
    int M = dims[rp_rng_below(r, nd)], N = dims[rp_rng_below(r, nd)];
    /* acc 0, 1, 2: set, add loading C first, add C last (RP_FLASH_ADD_COLD) */
    int K = dims[rp_rng_below(r, nd)], trans = t & 1, acc = (t >> 1) % 3;
    double e = gemm_case(ops, ref, r, M, N, K, trans, acc, (trans ? M : K) + 3, N + 5);
    if (e > 1e-5)
      fail_msg("gemm M=%d N=%d K=%d trans=%d acc=%d: rel err %.3g", M, N, K, trans, acc, e);
  }
}

/* Every row count up to two of the largest row block (12) past a multiple of
 * it, at every block width (N up to 64: 1 to 4 vectors of 16, or 1 to 8 of 8,
 * whole and ragged): the kernels' ragged last row blocks run as blocks of 8,
 * 4, 2 and 1 rows, each of which some M here reaches at each width. */
static void check_gemm_rows(const rp_flash_ops *ops, const rp_flash_ops *ref, rp_rng *r) {
  static const int widths[] = {8, 13, 16, 24, 32, 40, 48, 57, 64};
  const int K = 9;
  for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
    for (int M = 1; M <= 26; M++)
      for (int acc = RP_FLASH_SET; acc <= RP_FLASH_ADD_COLD; acc++) {
        const int N = widths[w];
        double e = gemm_case(ops, ref, r, M, N, K, 0, acc, K + 1, N + 3);
        if (e > 1e-5) fail_msg("gemm rows M=%d N=%d acc=%d: rel err %.3g", M, N, acc, e);
      }
}

static void check_softmax(const rp_flash_ops *ops, const rp_flash_ops *ref, rp_rng *r) {
  static const int lens[] = {1, 7, 8, 15, 16, 17, 33, 192, 200};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    const int n = lens[li];
    float *x = ta_floats(n), *y = ta_floats(n), *yr = ta_floats(n);
    /* scaled scores from 0 down to -100 below the row max: exp from 1 to 4e-44 */
    ta_fill(x, n, r, -800.0f, 8.0f);
    const float scale = 0.125f, m = ops->rowmax(x, n) * scale;
    assert_true(m == ref->rowmax(x, n) * scale);
    memcpy(y, x, sizeof(float) * (size_t)n);
    memcpy(yr, x, sizeof(float) * (size_t)n);
    float s = ops->expsum(y, n, scale, m), sr = ref->expsum(yr, n, scale, m);
    /* relative for the probabilities that carry weight (the row max is 1),
     * absolute 2e-10 below 1e-4, where the rounding of t = log2(e) (s x - m)
     * (|t| up to 144 here) dominates and nothing sums to a visible error */
    double e = rel_err(y, yr, n, 1e-4);
    if (e > 2e-6 || fabs((double)s - sr) > 2e-6 * sr)
      fail_msg("expsum n=%d: rel err %.3g, sums %.9g vs %.9g", n, e, (double)s, (double)sr);
    /* far below the max: 0 or a denormal-free tiny value, never NaN */
    for (int i = 0; i < n; i++) x[i] = -1e30f;
    memcpy(y, x, sizeof(float) * (size_t)n);
    s = ops->expsum(y, n, 1.0f, 0.0f);
    assert_true(s >= 0.0f && s < 1e-30f);
    float *ds = ta_floats(n), *dsr = ta_floats(n);
    ta_fill(ds, n, r, -1, 1);
    memcpy(dsr, ds, sizeof(float) * (size_t)n);
    ops->dsoft(ds, yr, n, 0.3f, scale);
    ref->dsoft(dsr, yr, n, 0.3f, scale);
    assert_true(rel_err(ds, dsr, n, 1e-6) <= 1e-6);
    assert_true(fabs(ops->dot(ds, yr, n) - ref->dot(ds, yr, n)) <= 1e-5);
    ops->scal(ds, n, 0.7f);
    ref->scal(dsr, n, 0.7f);
    assert_true(rel_err(ds, dsr, n, 1e-6) <= 1e-6);
    free(x), free(y), free(yr), free(ds), free(dsr);
  }
}

/* The vector exp itself against exp in double, over a dense grid of the
 * softmax's arguments (scale 1, max 0: exp(x), x in [-87, 0]): relative error
 * at most 2.5e-7 (the degree-5 polynomial's 1.6e-7 in fp32 plus the final
 * multiply), plus 1e-7 |x| for the rounding of t = log2(e) x (an absolute
 * error in t of about 9e-8 |t| moves 2^t by that relative amount). A
 * polynomial or range reduction that is off by one step, a wrong tie of the
 * floor or a coefficient in the wrong order fails by orders of magnitude. */
static void check_exp_accuracy(const rp_flash_ops *ops, const char *isa) {
  enum { N = 4096, ROUNDS = 64 };
  float *x = ta_floats(N), *y = ta_floats(N);
  double worst = 0, at = 0;
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < N; i++) x[i] = -87.0f * (float)(r * N + i) / (float)(ROUNDS * N);
    /* integers and half-integers exactly: the floor's ties */
    if (r == 0)
      for (int i = 0; i < 64; i++) x[i] = -0.5f * (float)i;
    memcpy(y, x, sizeof(float) * N);
    ops->expsum(y, N, 1.0f, 0.0f);
    for (int i = 0; i < N; i++) {
      double want = exp((double)x[i]);
      double e = fabs((double)y[i] - want) / want / (2.5e-7 + 1e-7 * fabs((double)x[i]));
      if (!(e <= worst)) worst = e, at = x[i];  /* NaN lands here too */
    }
  }
  if (!(worst <= 1.0))
    fail_msg("flash exp isa=%s: error %.3g of the bound at x=%.9g", isa, worst, at);
  printf("flash_ops: isa=%s exp within %.2f of its bound\n", isa, worst);
  free(x), free(y);
}

/* The transposing pack against the portable one, ragged in both directions
 * (rows and head sizes that are not multiples of the 8 x 8 register blocks),
 * strided source rows, and destination padding left alone. */
static void check_pack_t(const rp_flash_ops *ops, const rp_flash_ops *ref, rp_rng *r) {
  static const int ns[] = {1, 7, 8, 13, 64, 192}, hs[] = {8, 12, 24, 64, 80};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
    for (size_t j = 0; j < sizeof hs / sizeof hs[0]; j++) {
      const int n = ns[i], HS = hs[j];
      const long ld = 3L * HS + 5, ldd = n + 3;
      float *src = ta_floats(n * ld), *d = ta_floats(HS * ldd), *dr = ta_floats(HS * ldd);
      ta_fill(src, n * ld, r, -1, 1);
      ta_fill(d, HS * ldd, r, -1, 1);
      memcpy(dr, d, sizeof(float) * (size_t)(HS * ldd));
      ops->pack_t(d, ldd, src, ld, n, HS);
      ref->pack_t(dr, ldd, src, ld, n, HS);
      if (memcmp(d, dr, sizeof(float) * (size_t)(HS * ldd)) != 0)
        fail_msg("pack_t n=%d HS=%d differs from the portable pack", n, HS);
      free(src), free(d), free(dr);
    }
}

static void test_ops_vs_portable(void **state) {
  const rp_flash_ops *ref = &rp_flash_ops_scalar;
  for (int i = 0; i < 3; i++) {
    char path[32];
    snprintf(path, sizeof path, "flash isa=%s", rp_flash_isa_name(ft_isas[i]));
    if (!ti_isa_runs("flash_ops", path, ft_isa_level(ft_isas[i]))) continue;
    rp_rng r;
    rp_rng_seed(&r, 77 + (uint64_t)i);
    const rp_flash_ops *ops = ops_of(ft_isas[i]);
    check_gemm(ops, ref, &r);
    rp_rng rows_rng; /* its own stream: the others' draws stay as they were */
    rp_rng_seed(&rows_rng, 177 + (uint64_t)i);
    check_gemm_rows(ops, ref, &rows_rng);
    check_softmax(ops, ref, &r);
    check_pack_t(ops, ref, &r);
    if (ops != ref) check_exp_accuracy(ops, rp_flash_isa_name(ft_isas[i]));
    printf("flash_ops: isa=%s matches the portable loops\n", rp_flash_isa_name(ft_isas[i]));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_ops_vs_portable)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
