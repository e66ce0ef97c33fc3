/* Reference attention (the oracle of every other attention) against a double
 * implementation in this file: forward out/att/lse, backward dqkv by finite
 * differences (causal and not), += convention, and 1 vs 2 threads bitwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kt_util.h"

typedef struct {
  int B, T, C, NH, causal;
  const double *r; /* dout: loss = sum(out * r) */
} at_ctx;

/* out[B,T,C] (and lse[B,NH,T] if non-NULL) from qkv[B,T,3C], in double. */
static void attn_d(const at_ctx *c, const double *qkv, double *out, double *lse) {
  const long T = c->T, C = c->C, C3 = 3L * C, NH = c->NH, HS = C / NH;
  double *s = kt_doubles(T);
  for (long b = 0; b < c->B; b++)
    for (long h = 0; h < NH; h++)
      for (long t = 0; t < T; t++) {
        const double *q = qkv + (b * T + t) * C3 + h * HS;
        long tend = c->causal ? t + 1 : T;
        double mx = -INFINITY, sum = 0.0;
        for (long t2 = 0; t2 < tend; t2++) {
          const double *k = qkv + (b * T + t2) * C3 + C + h * HS;
          double d = 0.0;
          for (long i = 0; i < HS; i++) d += q[i] * k[i];
          s[t2] = d / sqrt((double)HS);
          mx = fmax(mx, s[t2]);
        }
        for (long t2 = 0; t2 < tend; t2++) sum += exp(s[t2] - mx);
        if (lse) lse[(b * NH + h) * T + t] = mx + log(sum);
        double *o = out + (b * T + t) * C + h * HS;
        for (long i = 0; i < HS; i++) o[i] = 0.0;
        for (long t2 = 0; t2 < tend; t2++) {
          const double *v = qkv + (b * T + t2) * C3 + 2 * C + h * HS;
          double p = exp(s[t2] - mx) / sum;
          for (long i = 0; i < HS; i++) o[i] += p * v[i];
        }
      }
  free(s);
}

static double attn_loss(void *vctx, double *qkv) {
  const at_ctx *c = vctx;
  long n = (long)c->B * c->T * c->C;
  double *out = kt_doubles(n);
  attn_d(c, qkv, out, NULL);
  double L = 0.0;
  for (long i = 0; i < n; i++) L += out[i] * c->r[i];
  free(out);
  return L;
}

static void check_attention(int causal) {
  const int B = 2, T = 6, C = 12, NH = 3;
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C, natt = (long)B * NH * T * T;
  rp_rng rng;
  rp_rng_seed(&rng, 61 + (uint64_t)causal);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout), *out = ta_floats(nout);
  float *att = ta_floats(natt), *lse = ta_floats((long)B * NH * T);
  ta_fill(qkv, nqkv, &rng, -1.5f, 1.5f);
  ta_fill(dout, nout, &rng, -1, 1);
  rp_attention_ref_forward(out, att, lse, qkv, B, T, C, NH, causal, NULL);

  double *qd = kt_doubles(nqkv), *rd = kt_doubles(nout), *od = kt_doubles(nout);
  double *lsed = kt_doubles((long)B * NH * T);
  kt_to_double(qd, qkv, nqkv);
  kt_to_double(rd, dout, nout);
  at_ctx c = {.B = B, .T = T, .C = C, .NH = NH, .causal = causal, .r = rd};
  attn_d(&c, qd, od, lsed);
  assert_int_equal(kt_check_close("attn out", out, od, nout, 0, 1e-5), 0);
  assert_int_equal(kt_check_close("attn lse", lse, lsed, (long)B * NH * T, 0, 1e-5), 0);
  /* att rows are distributions; causal rows are zero above the diagonal */
  for (long row = 0; row < (long)B * NH * T; row++) {
    long t = row % T;
    double s = 0.0;
    for (long t2 = 0; t2 < T; t2++) {
      s += att[row * T + t2];
      if (causal && t2 > t) assert_true(att[row * T + t2] == 0.0f);
    }
    kt_assert_near(s, 1.0, 1e-5);
  }

  float *dqkv = ta_floats(nqkv), *dqkv0 = ta_floats(nqkv);
  ta_fill(dqkv0, nqkv, &rng, -1, 1);
  memcpy(dqkv, dqkv0, sizeof(float) * (size_t)nqkv);
  rp_attention_ref_backward(dqkv, dout, qkv, att, B, T, C, NH, NULL);
  double *fd = kt_doubles(nqkv);
  kt_fd(attn_loss, &c, qd, nqkv, fd);
  assert_int_equal(kt_check_grad(causal ? "dqkv causal" : "dqkv full", dqkv, dqkv0, fd, nqkv),
                   0);
  free(qkv), free(dout), free(out), free(att), free(lse), free(qd), free(rd), free(od);
  free(lsed), free(dqkv), free(dqkv0), free(fd);
}

static void test_attention_causal(void **state) {
  (void)state;
  check_attention(1);
}

static void test_attention_full(void **state) {
  (void)state;
  check_attention(0);
}

static void test_attention_threads_bitwise(void **state) {
  (void)state;
  const int B = 2, T = 32, C = 32, NH = 4; /* B*NH*T*T above the serial cut-off */
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C, natt = (long)B * NH * T * T;
  rp_rng rng;
  rp_rng_seed(&rng, 63);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout);
  ta_fill(qkv, nqkv, &rng, -1, 1);
  ta_fill(dout, nout, &rng, -1, 1);
  float *out[2], *att[2], *lse[2], *dqkv[2];
  for (int t = 0; t < 2; t++) {
    rp_pool *pool = ta_pool(t + 1);
    out[t] = ta_floats(nout), att[t] = ta_floats(natt), lse[t] = ta_floats((long)B * NH * T);
    dqkv[t] = ta_floats(nqkv);
    rp_attention_ref_forward(out[t], att[t], lse[t], qkv, B, T, C, NH, 1, pool);
    rp_attention_ref_backward(dqkv[t], dout, qkv, att[t], B, T, C, NH, pool);
    rp_pool_destroy(pool);
  }
  assert_true(kt_bitwise_equal(out[0], out[1], nout));
  assert_true(kt_bitwise_equal(att[0], att[1], natt));
  assert_true(kt_bitwise_equal(lse[0], lse[1], (long)B * NH * T));
  assert_true(kt_bitwise_equal(dqkv[0], dqkv[1], nqkv));
  for (int t = 0; t < 2; t++) free(out[t]), free(att[t]), free(lse[t]), free(dqkv[t]);
  free(qkv), free(dout);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attention_causal),
      cmocka_unit_test(test_attention_full),
      cmocka_unit_test(test_attention_threads_bitwise),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
