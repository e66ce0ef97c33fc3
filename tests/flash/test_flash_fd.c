/* Flash attention backward vs central finite differences of a double-precision
 * attention written here, on tiny cases (causal and not, every ISA this CPU has,
 * tiles smaller than T so that the online softmax really rescales).
 * loss = sum(out * r); tolerance |g - fd| <= 1e-3 |fd| + 1e-5 max|fd| (DESIGN.md
 * section 5: backward vs finite differences, rel. 1e-3). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ft_util.h"

typedef struct {
  int B, T, C, NH, causal;
  const double *r;
} fd_ctx;

static double loss_d(const fd_ctx *c, const double *qkv) {
  const long T = c->T, C = c->C, C3 = 3L * C, HS = C / c->NH;
  double L = 0.0, s[64];
  for (long b = 0; b < c->B; b++)
    for (long h = 0; h < c->NH; h++)
      for (long t = 0; t < T; t++) {
        const double *q = qkv + (b * T + t) * C3 + h * HS;
        long n = c->causal ? t + 1 : T;
        double mx = -INFINITY, sum = 0.0;
        for (long u = 0; u < n; u++) {
          const double *k = qkv + (b * T + u) * C3 + C + h * HS;
          double d = 0.0;
          for (long i = 0; i < HS; i++) d += q[i] * k[i];
          s[u] = d / sqrt((double)HS);
          mx = fmax(mx, s[u]);
        }
        for (long u = 0; u < n; u++) sum += exp(s[u] - mx);
        for (long i = 0; i < HS; i++) {
          double o = 0.0;
          for (long u = 0; u < n; u++) o += exp(s[u] - mx) / sum * qkv[(b * T + u) * C3 + 2 * C + h * HS + i];
          L += o * c->r[(b * T + t) * C + h * HS + i];
        }
      }
  return L;
}

static void check_fd(int causal, rp_flash_isa isa) {
  const int B = 1, T = 5, C = 32, NH = 2;
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C;
  rp_rng rng;
  rp_rng_seed(&rng, 77 + (uint64_t)causal);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout), *out = ta_floats(nout);
  float *lse = ta_floats((long)B * NH * T), *dqkv = ta_floats(nqkv);
  ta_fill(qkv, nqkv, &rng, -1.5f, 1.5f);
  ta_fill(dout, nout, &rng, -1.0f, 1.0f);
  ft_configure(isa, RP_FLASH_SPLIT_AUTO, 2, 3);  /* several tiles per row */
  assert_int_equal(rp_flash_forward(out, lse, qkv, B, T, C, NH, causal, &ft_cfg, NULL), RP_OK);
  assert_int_equal(rp_flash_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, causal, &ft_cfg, NULL), RP_OK);
  ft_reset_config();

  double *x = calloc((size_t)nqkv, sizeof(double)), *r = calloc((size_t)nout, sizeof(double));
  for (long i = 0; i < nqkv; i++) x[i] = qkv[i];
  for (long i = 0; i < nout; i++) r[i] = dout[i];
  fd_ctx c = {B, T, C, NH, causal, r};
  double *fd = calloc((size_t)nqkv, sizeof(double)), maxfd = 0.0;
  const double h = 1e-5;
  for (long i = 0; i < nqkv; i++) {
    double keep = x[i];
    x[i] = keep + h;
    double lp = loss_d(&c, x);
    x[i] = keep - h;
    double lm = loss_d(&c, x);
    x[i] = keep;
    fd[i] = (lp - lm) / (2 * h);
    maxfd = fmax(maxfd, fabs(fd[i]));
  }
  int bad = 0;
  for (long i = 0; i < nqkv; i++) {
    double d = fabs(dqkv[i] - fd[i]);
    if (!(d <= 1e-3 * fabs(fd[i]) + 1e-5 * maxfd)) {
      if (bad++ < 5)
        fprintf(stderr, "causal=%d isa=%s dqkv[%ld] = %.8g, fd %.8g\n", causal,
                rp_flash_isa_name(isa), i, (double)dqkv[i], fd[i]);
    }
  }
  assert_true(maxfd > 1e-3);  /* the case is not degenerate */
  assert_int_equal(bad, 0);
  free(qkv), free(dout), free(out), free(lse), free(dqkv), free(x), free(r), free(fd);
}

static void test_fd(void **state) {
  static const rp_flash_isa isas[] = {RP_FLASH_ISA_AVX512, RP_FLASH_ISA_AVX2, RP_FLASH_ISA_SCALAR};
  for (int i = 0; i < 3; i++) {
    if (!rp_flash_isa_supported(isas[i])) continue;
    check_fd(0, isas[i]);
    check_fd(1, isas[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_fd)};
  ft_report_skipped("flash_fd");
  return cmocka_run_group_tests(tests, NULL, NULL);
}
