/* LayerNorm, GELU, residual and embedding: backward against double finite
 * differences, the += convention, NULL skips, and bitwise equality of 1- and
 * 2-thread runs (sizes above the kernels' serial cut-off so that the pool really
 * splits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kt_util.h"

/* ---------------- layernorm */

typedef struct {
  int N, C;
  const double *inp, *w, *b, *r;
  int which; /* 0 inp, 1 w, 2 b */
} ln_loss_ctx;

static double ln_loss(void *vctx, double *x) {
  const ln_loss_ctx *c = vctx;
  const double *inp = c->which == 0 ? x : c->inp;
  const double *w = c->which == 1 ? x : c->w;
  const double *b = c->which == 2 ? x : c->b;
  double L = 0.0;
  for (long n = 0; n < c->N; n++) {
    const double *xr = inp + n * c->C;
    double m = 0.0, v = 0.0;
    for (long i = 0; i < c->C; i++) m += xr[i];
    m /= c->C;
    for (long i = 0; i < c->C; i++) v += (xr[i] - m) * (xr[i] - m);
    v /= c->C;
    double s = 1.0 / sqrt(v + 1e-5);
    for (long i = 0; i < c->C; i++) L += ((xr[i] - m) * s * w[i] + b[i]) * c->r[n * c->C + i];
  }
  return L;
}

static void test_layernorm_fd(void **state) {
  (void)state;
  const int N = 5, C = 19;
  rp_rng rng;
  rp_rng_seed(&rng, 21);
  float *inp = ta_floats(N * C), *w = ta_floats(C), *b = ta_floats(C), *dout = ta_floats(N * C);
  float *out = ta_floats(N * C), *mean = ta_floats(N), *rstd = ta_floats(N);
  ta_fill(inp, N * C, &rng, -2, 3);
  ta_fill(w, C, &rng, 0.5f, 1.5f);
  ta_fill(b, C, &rng, -1, 1);
  ta_fill(dout, N * C, &rng, -1, 1);
  rp_layernorm_forward(out, mean, rstd, inp, w, b, N, C, NULL);

  float *dinp = ta_floats(N * C), *dw = ta_floats(C), *db = ta_floats(C);
  float *dinp0 = ta_floats(N * C), *dw0 = ta_floats(C), *db0 = ta_floats(C);
  ta_fill(dinp0, N * C, &rng, -1, 1);
  ta_fill(dw0, C, &rng, -1, 1);
  ta_fill(db0, C, &rng, -1, 1);
  memcpy(dinp, dinp0, sizeof(float) * N * C);
  memcpy(dw, dw0, sizeof(float) * C);
  memcpy(db, db0, sizeof(float) * C);
  rp_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, NULL);

  double *id = kt_doubles(N * C), *wd = kt_doubles(C), *bd = kt_doubles(C), *rd = kt_doubles(N * C);
  kt_to_double(id, inp, N * C);
  kt_to_double(wd, w, C);
  kt_to_double(bd, b, C);
  kt_to_double(rd, dout, N * C);
  ln_loss_ctx c = {.N = N, .C = C, .inp = id, .w = wd, .b = bd, .r = rd};

  /* forward against the double forward: out = d loss / d r, checked directly */
  for (long n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (long i = 0; i < C; i++) m += id[n * C + i];
    m /= C;
    for (long i = 0; i < C; i++) v += (id[n * C + i] - m) * (id[n * C + i] - m);
    v /= C;
    kt_assert_near(mean[n], m, 1e-5);
    kt_assert_near(rstd[n], 1.0 / sqrt(v + 1e-5), 1e-4);
    for (long i = 0; i < C; i++)
      kt_assert_near(out[n * C + i], (id[n * C + i] - m) / sqrt(v + 1e-5) * wd[i] + bd[i],
                         1e-5);
  }

  double *x = kt_doubles(N * C), *fd = kt_doubles(N * C);
  c.which = 0;
  memcpy(x, id, sizeof(double) * N * C);
  kt_fd(ln_loss, &c, x, N * C, fd);
  assert_int_equal(kt_check_grad("ln dinp", dinp, dinp0, fd, N * C), 0);
  c.which = 1;
  memcpy(x, wd, sizeof(double) * C);
  kt_fd(ln_loss, &c, x, C, fd);
  assert_int_equal(kt_check_grad("ln dw", dw, dw0, fd, C), 0);
  c.which = 2;
  memcpy(x, bd, sizeof(double) * C);
  kt_fd(ln_loss, &c, x, C, fd);
  assert_int_equal(kt_check_grad("ln db", db, db0, fd, C), 0);

  /* NULL skip: dinp alone, then dw/db alone, equal the full call bitwise */
  float *g = ta_floats(N * C), *gw = ta_floats(C), *gb = ta_floats(C);
  memcpy(g, dinp0, sizeof(float) * N * C);
  rp_layernorm_backward(g, NULL, NULL, dout, inp, w, mean, rstd, N, C, NULL);
  assert_true(kt_bitwise_equal(g, dinp, N * C));
  memcpy(gw, dw0, sizeof(float) * C);
  memcpy(gb, db0, sizeof(float) * C);
  rp_layernorm_backward(NULL, gw, gb, dout, inp, w, mean, rstd, N, C, NULL);
  assert_true(kt_bitwise_equal(gw, dw, C));
  assert_true(kt_bitwise_equal(gb, db, C));

  free(inp), free(w), free(b), free(dout), free(out), free(mean), free(rstd);
  free(dinp), free(dw), free(db), free(dinp0), free(dw0), free(db0);
  free(id), free(wd), free(bd), free(rd), free(x), free(fd), free(g), free(gw), free(gb);
}

static void test_layernorm_threads_bitwise(void **state) {
  (void)state;
  const int N = 70, C = 100; /* C not a multiple of 16: ragged column split */
  rp_rng rng;
  rp_rng_seed(&rng, 22);
  float *inp = ta_floats(N * C), *w = ta_floats(C), *b = ta_floats(C), *dout = ta_floats(N * C);
  ta_fill(inp, N * C, &rng, -2, 3);
  ta_fill(w, C, &rng, 0.5f, 1.5f);
  ta_fill(b, C, &rng, -1, 1);
  ta_fill(dout, N * C, &rng, -1, 1);
  float *res[2][6];
  for (int t = 0; t < 2; t++) {
    rp_pool *pool = ta_pool(t + 1);
    float *out = ta_floats(N * C), *mean = ta_floats(N), *rstd = ta_floats(N);
    float *dinp = ta_floats(N * C), *dw = ta_floats(C), *db = ta_floats(C);
    rp_layernorm_forward(out, mean, rstd, inp, w, b, N, C, pool);
    rp_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, pool);
    float *r[6] = {out, mean, rstd, dinp, dw, db};
    memcpy(res[t], r, sizeof r);
    rp_pool_destroy(pool);
  }
  const long len[6] = {N * C, N, N, N * C, C, C};
  for (int k = 0; k < 6; k++) {
    assert_true(kt_bitwise_equal(res[0][k], res[1][k], len[k]));
    free(res[0][k]), free(res[1][k]);
  }
  free(inp), free(w), free(b), free(dout);
}

/* ---------------- gelu */

static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

typedef struct {
  const double *r;
} gelu_loss_ctx;

static long g_gelu_n;
static double gelu_loss(void *vctx, double *x) {
  const gelu_loss_ctx *c = vctx;
  double L = 0.0;
  for (long i = 0; i < g_gelu_n; i++) L += gelu_d(x[i]) * c->r[i];
  return L;
}

static void test_gelu_fd(void **state) {
  (void)state;
  const long n = 203;
  rp_rng rng;
  rp_rng_seed(&rng, 31);
  float *x = ta_floats(n), *y = ta_floats(n), *dy = ta_floats(n), *dx = ta_floats(n);
  float *dx0 = ta_floats(n);
  ta_fill(x, n, &rng, -6, 6);
  x[0] = 0.0f, x[1] = 1e-4f, x[2] = -1e-4f, x[3] = 20.0f, x[4] = -20.0f; /* edges */
  ta_fill(dy, n, &rng, -1, 1);
  ta_fill(dx0, n, &rng, -1, 1);
  memcpy(dx, dx0, sizeof(float) * n);
  rp_gelu_forward(y, x, n, NULL);
  rp_gelu_backward(dx, x, dy, n, NULL);
  double *xd = kt_doubles(n), *rd = kt_doubles(n), *fd = kt_doubles(n), *yd = kt_doubles(n);
  kt_to_double(xd, x, n);
  kt_to_double(rd, dy, n);
  for (long i = 0; i < n; i++) yd[i] = gelu_d(xd[i]);
  /* forward to 1e-5 relative, also in the far negative tail (x ~ -6) where gelu
   * is ~1e-9 and a naive 1 + tanhf keeps no relative precision; what is left is
   * the float rounding of u amplified by |2u| inside the exp */
  assert_int_equal(kt_check_close("gelu out", y, yd, n, 1e-5, 1e-30), 0);
  gelu_loss_ctx c = {.r = rd};
  g_gelu_n = n;
  kt_fd(gelu_loss, &c, xd, n, fd);
  assert_int_equal(kt_check_grad("gelu dinp", dx, dx0, fd, n), 0);
  free(x), free(y), free(dy), free(dx), free(dx0), free(xd), free(rd), free(fd), free(yd);
}

static void test_gelu_threads_bitwise(void **state) {
  (void)state;
  const long n = 40009;
  rp_rng rng;
  rp_rng_seed(&rng, 32);
  float *x = ta_floats(n), *dy = ta_floats(n);
  ta_fill(x, n, &rng, -5, 5);
  ta_fill(dy, n, &rng, -1, 1);
  float *y[2], *dx[2];
  for (int t = 0; t < 2; t++) {
    rp_pool *pool = ta_pool(t + 1);
    y[t] = ta_floats(n), dx[t] = ta_floats(n);
    rp_gelu_forward(y[t], x, n, pool);
    rp_gelu_backward(dx[t], x, dy, n, pool);
    rp_pool_destroy(pool);
  }
  assert_true(kt_bitwise_equal(y[0], y[1], n));
  assert_true(kt_bitwise_equal(dx[0], dx[1], n));
  free(x), free(dy), free(y[0]), free(y[1]), free(dx[0]), free(dx[1]);
}

/* ---------------- residual, add_inplace */

static void test_residual(void **state) {
  (void)state;
  const long n = 10007;
  rp_rng rng;
  rp_rng_seed(&rng, 41);
  float *a = ta_floats(n), *b = ta_floats(n), *o = ta_floats(n), *acc = ta_floats(n);
  ta_fill(a, n, &rng, -1, 1);
  ta_fill(b, n, &rng, -1, 1);
  rp_pool *pool = ta_pool(2);
  rp_residual_forward(o, a, b, n, pool);
  memcpy(acc, a, sizeof(float) * n);
  rp_add_inplace(acc, b, n, pool);
  for (long i = 0; i < n; i++) {
    assert_true(o[i] == a[i] + b[i]);
    assert_true(acc[i] == a[i] + b[i]);
  }
  rp_pool_destroy(pool);
  free(a), free(b), free(o), free(acc);
}

/* ---------------- embedding */

static void test_embedding(void **state) {
  (void)state;
  /* few tokens and positions, so rows collide in the scatter-add */
  const int N = 96, C = 72, V = 5, P = 7;
  rp_rng rng;
  rp_rng_seed(&rng, 51);
  int32_t tok[96], pos[96];
  for (int i = 0; i < N; i++) tok[i] = (int32_t)rp_rng_below(&rng, V), pos[i] = i % P;
  float *wte = ta_floats(V * C), *wpe = ta_floats(P * C), *dout = ta_floats(N * C);
  ta_fill(wte, V * C, &rng, -1, 1);
  ta_fill(wpe, P * C, &rng, -1, 1);
  ta_fill(dout, N * C, &rng, -1, 1);

  float *out = ta_floats(N * C);
  rp_embed_forward(out, tok, pos, wte, wpe, N, C, NULL);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < C; k++)
      assert_true(out[n * C + k] == wte[tok[n] * C + k] + wpe[pos[n] * C + k]);

  /* embedding is linear, so its exact gradient is the double scatter-add */
  double *gte = kt_doubles(V * C), *gpe = kt_doubles(P * C);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < C; k++) {
      gte[tok[n] * C + k] += dout[n * C + k];
      gpe[pos[n] * C + k] += dout[n * C + k];
    }
  float *d0te = ta_floats(V * C), *d0pe = ta_floats(P * C);
  ta_fill(d0te, V * C, &rng, -1, 1);
  ta_fill(d0pe, P * C, &rng, -1, 1);
  float *dte[2], *dpe[2];
  for (int t = 0; t < 2; t++) {
    rp_pool *pool = ta_pool(t + 1);
    dte[t] = ta_floats(V * C), dpe[t] = ta_floats(P * C);
    memcpy(dte[t], d0te, sizeof(float) * V * C);
    memcpy(dpe[t], d0pe, sizeof(float) * P * C);
    rp_embed_backward(dte[t], dpe[t], dout, tok, pos, N, C, pool);
    rp_pool_destroy(pool);
  }
  assert_int_equal(kt_check_grad("dwte", dte[0], d0te, gte, V * C), 0);
  assert_int_equal(kt_check_grad("dwpe", dpe[0], d0pe, gpe, P * C), 0);
  assert_true(kt_bitwise_equal(dte[0], dte[1], V * C));
  assert_true(kt_bitwise_equal(dpe[0], dpe[1], P * C));

  /* NULL skip of one table leaves the other identical */
  float *only = ta_floats(P * C);
  memcpy(only, d0pe, sizeof(float) * P * C);
  rp_embed_backward(NULL, only, dout, tok, pos, N, C, NULL);
  assert_true(kt_bitwise_equal(only, dpe[0], P * C));

  free(wte), free(wpe), free(dout), free(out), free(gte), free(gpe), free(d0te), free(d0pe);
  free(dte[0]), free(dte[1]), free(dpe[0]), free(dpe[1]), free(only);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layernorm_fd),     cmocka_unit_test(test_layernorm_threads_bitwise),
      cmocka_unit_test(test_gelu_fd),          cmocka_unit_test(test_gelu_threads_bitwise),
      cmocka_unit_test(test_residual),         cmocka_unit_test(test_embedding),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
