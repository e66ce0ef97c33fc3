/* Cross-entropy (masked targets, padded vocab, aliasing, finite differences) and
 * the optimizer kernels (AdamW against hand-computed steps, sumsq, scale, lr). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kernels/work_range.h"
#include "kt_util.h"
#include "ringpipe/rp_bf16.h"

/* ---------------- cross-entropy */

enum { XN = 7, XV = 11, XVP = 16 };
static const int32_t xtargets[XN] = {3, -1, 0, 10, -1, 7, 5};

/* sum of losses over the first V columns, in double; padded columns ignored */
static double xent_loss_d(void *vctx, double *x) {
  (void)vctx;
  double L = 0.0;
  for (int n = 0; n < XN; n++) {
    if (xtargets[n] < 0) continue;
    const double *r = x + n * XVP;
    double mx = r[0], s = 0.0;
    for (int i = 1; i < XV; i++) mx = fmax(mx, r[i]);
    for (int i = 0; i < XV; i++) s += exp(r[i] - mx);
    L += log(s) + mx - r[xtargets[n]];
  }
  return L;
}

static void test_xent(void **state) {
  (void)state;
  rp_rng rng;
  rp_rng_seed(&rng, 71);
  float *logits = ta_floats(XN * XVP);
  ta_fill(logits, XN * XVP, &rng, -4, 4);
  logits[2 * XVP + 4] = 60.0f; /* large logit: stability needs max subtraction */
  for (int n = 0; n < XN; n++)
    for (int i = XV; i < XVP; i++) logits[n * XVP + i] = 1e4f; /* padding must be ignored */

  float losses[XN], losses_b[XN];
  rp_xent_forward(losses, logits, xtargets, XN, XV, XVP, NULL);
  double *ld = kt_doubles(XN * XVP);
  kt_to_double(ld, logits, XN * XVP);
  for (int n = 0; n < XN; n++) {
    if (xtargets[n] < 0) {
      assert_true(losses[n] == 0.0f);
      continue;
    }
    const double *r = ld + n * XVP;
    double mx = r[0], s = 0.0;
    for (int i = 1; i < XV; i++) mx = fmax(mx, r[i]);
    for (int i = 0; i < XV; i++) s += exp(r[i] - mx);
    kt_assert_near(losses[n], log(s) + mx - r[xtargets[n]], 1e-5);
  }

  const float dscale = 0.25f;
  float *dl = ta_floats(XN * XVP);
  ta_fill(dl, XN * XVP, &rng, -9, 9); /* written, not accumulated */
  rp_xent_backward(dl, losses_b, logits, xtargets, dscale, XN, XV, XVP, NULL);
  assert_true(kt_bitwise_equal(losses, losses_b, XN));
  for (int n = 0; n < XN; n++) {
    for (int i = XV; i < XVP; i++) assert_true(dl[n * XVP + i] == 0.0f);
    if (xtargets[n] < 0)
      for (int i = 0; i < XVP; i++) assert_true(dl[n * XVP + i] == 0.0f);
  }
  double *fd = kt_doubles(XN * XVP);
  kt_fd(xent_loss_d, NULL, ld, XN * XVP, fd);
  for (long i = 0; i < XN * XVP; i++) fd[i] *= dscale;
  assert_int_equal(kt_check_grad("dlogits", dl, NULL, fd, XN * XVP), 0);

  /* in place (dlogits == logits) gives the same bits; losses may be NULL */
  float *inplace = ta_floats(XN * XVP);
  memcpy(inplace, logits, sizeof(float) * XN * XVP);
  rp_xent_backward(inplace, NULL, inplace, xtargets, dscale, XN, XV, XVP, NULL);
  assert_true(kt_bitwise_equal(inplace, dl, XN * XVP));
  free(logits), free(ld), free(dl), free(fd), free(inplace);
}

static void test_xent_threads_bitwise(void **state) {
  (void)state;
  const int N = 64, V = 250, Vp = 256;
  rp_rng rng;
  rp_rng_seed(&rng, 72);
  float *logits = ta_floats((long)N * Vp);
  int32_t tg[64];
  ta_fill(logits, (long)N * Vp, &rng, -5, 5);
  for (int n = 0; n < N; n++) tg[n] = n % 9 == 0 ? -1 : (int32_t)rp_rng_below(&rng, V);
  float *dl[2], *ls[2];
  for (int t = 0; t < 2; t++) {
    rp_pool *pool = ta_pool(t + 1);
    dl[t] = ta_floats((long)N * Vp), ls[t] = ta_floats(N);
    rp_xent_backward(dl[t], ls[t], logits, tg, 1.0f / N, N, V, Vp, pool);
    rp_pool_destroy(pool);
  }
  assert_true(kt_bitwise_equal(dl[0], dl[1], (long)N * Vp));
  assert_true(kt_bitwise_equal(ls[0], ls[1], N));
  /* each unmasked row of the gradient sums to 0 (softmax minus one-hot) */
  for (int n = 0; n < N; n++) {
    double s = 0.0;
    for (int i = 0; i < Vp; i++) s += dl[0][n * Vp + i];
    kt_assert_near(s, 0.0, 1e-6);
  }
  free(logits), free(dl[0]), free(dl[1]), free(ls[0]), free(ls[1]);
}

/* The vocabulary-parallel pieces (rp_xent_vp_*) with the reductions done here:
 * one shard holding the whole vocabulary gives rp_xent_forward's losses and
 * rp_xent_backward's dlogits bit for bit (in place and not, 2 threads); two
 * shards (columns [0, 8) and [8, 16), the second with 3 real columns) agree
 * with them to float rounding. */
static void vp_losses_shift(float *loss, float *shift, const float *mx, const float *se,
                            const float *tl, const int32_t *tg, int N) {
  for (int n = 0; n < N; n++) {
    const float lse = logf(se[n]);
    loss[n] = tg[n] < 0 ? 0.0f : lse + mx[n] - tl[n];
    shift[n] = tg[n] < 0 ? 0.0f : mx[n] + lse;
  }
}

static void test_xent_vocab_parallel(void **state) {
  (void)state;
  rp_rng rng;
  rp_rng_seed(&rng, 73);
  float *logits = ta_floats(XN * XVP), *dl = ta_floats(XN * XVP), *d = ta_floats(XN * XVP);
  ta_fill(logits, XN * XVP, &rng, -6, 6);
  const float dscale = 0.5f;
  float losses[XN], mx[XN], se[XN], tl[XN], loss[XN], shift[XN];
  rp_xent_forward(losses, logits, xtargets, XN, XV, XVP, NULL);
  rp_xent_backward(dl, NULL, logits, xtargets, dscale, XN, XV, XVP, NULL);

  rp_pool *pool = ta_pool(2);
  rp_xent_vp_max(mx, logits, xtargets, XN, XVP, XV, pool);
  rp_xent_vp_sums(se, tl, logits, xtargets, mx, XN, XVP, XV, 0, pool);
  vp_losses_shift(loss, shift, mx, se, tl, xtargets, XN);
  assert_true(kt_bitwise_equal(loss, losses, XN));
  rp_xent_vp_backward(d, logits, xtargets, shift, dscale, XN, XVP, XV, 0, pool);
  assert_true(kt_bitwise_equal(d, dl, XN * XVP));
  memcpy(d, logits, sizeof(float) * XN * XVP);
  rp_xent_vp_backward(d, d, xtargets, shift, dscale, XN, XVP, XV, 0, pool);
  assert_true(kt_bitwise_equal(d, dl, XN * XVP));

  enum { W = XVP / 2 };
  const int ncols[2] = {W, XV - W}; /* the real vocabulary columns of each shard */
  float sh[2][XN * W], m2[2][XN], s2[2][XN], t2[2][XN];
  for (int r = 0; r < 2; r++) {
    for (int n = 0; n < XN; n++) memcpy(sh[r] + n * W, logits + n * XVP + r * W, sizeof(float) * W);
    rp_xent_vp_max(m2[r], sh[r], xtargets, XN, W, ncols[r], pool);
  }
  for (int n = 0; n < XN; n++) mx[n] = fmaxf(m2[0][n], m2[1][n]);
  for (int r = 0; r < 2; r++)
    rp_xent_vp_sums(s2[r], t2[r], sh[r], xtargets, mx, XN, W, ncols[r], r * W, pool);
  for (int n = 0; n < XN; n++) se[n] = s2[0][n] + s2[1][n], tl[n] = t2[0][n] + t2[1][n];
  vp_losses_shift(loss, shift, mx, se, tl, xtargets, XN);
  for (int n = 0; n < XN; n++) kt_assert_near(loss[n], losses[n], 1e-5);
  for (int r = 0; r < 2; r++) {
    rp_xent_vp_backward(sh[r], sh[r], xtargets, shift, dscale, XN, W, ncols[r], r * W, pool);
    for (int n = 0; n < XN; n++)
      for (int j = 0; j < W; j++) kt_assert_near(sh[r][n * W + j], dl[n * XVP + r * W + j], 1e-6);
  }
  rp_pool_destroy(pool);
  free(logits), free(dl), free(d);
}

/* ---------------- AdamW */

static void test_adamw_hand(void **state) {
  (void)state;
  rp_adamw_hparams h = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                        .weight_decay = 0.1f};
  float p[2] = {1.0f, 1.0f}, g[2] = {0.5f, 0.5f}, m[2] = {0, 0}, v[2] = {0, 0};
  /* step 1: m = 0.05, v = 0.00025, mhat = 0.5, vhat = 0.25, mhat/(sqrt(vhat)+eps)
   * = 0.5/0.50000001; element 0 decays (wd 0.1): p = 1 - 0.1*(0.99999998 + 0.1)
   * = 0.890000002; element 1 does not: p = 1 - 0.1*0.99999998 = 0.900000002 */
  rp_adamw_update(p, g, m, v, 1, &h, 0.1f, 1, NULL);
  rp_adamw_update(p + 1, g + 1, m + 1, v + 1, 1, &h, 0.0f, 1, NULL);
  /* tolerances: 1 - 0.9f is 0.1 only to ~2e-7 relative, 1 - 0.999f is 0.001
   * to ~1.3e-5 */
  kt_assert_near(m[0], 0.05, 1e-7);
  kt_assert_near(v[0], 0.00025, 1e-8);
  kt_assert_near(p[0], 0.890000002, 1e-6);
  kt_assert_near(p[1], 0.900000002, 1e-6);
  /* step 2 with g = -0.25 on element 0: m = 0.045 - 0.025 = 0.02,
   * v = 0.00024975 + 0.0000625 = 0.00031225, mhat = 0.02/0.19 = 0.105263158,
   * vhat = 0.00031225/0.001999 = 0.156203102, sqrt = 0.395225381,
   * ratio = 0.266337033; p = 0.89 - 0.1*(0.266337033 + 0.1*0.89) = 0.854466299 */
  g[0] = -0.25f;
  rp_adamw_update(p, g, m, v, 1, &h, 0.1f, 2, NULL);
  kt_assert_near(m[0], 0.02, 1e-7);
  kt_assert_near(v[0], 0.00031225, 1e-8);
  kt_assert_near(p[0], 0.854466299, 2e-6);
}

static void test_adamw_threads_bitwise(void **state) {
  (void)state;
  const long n = 200003;
  rp_rng rng;
  rp_rng_seed(&rng, 81);
  rp_adamw_hparams h = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f};
  float *g = ta_floats(n), *p0 = ta_floats(n);
  ta_fill(g, n, &rng, -1, 1);
  ta_fill(p0, n, &rng, -1, 1);
  /* 1 thread, 2, and 3 with one held back so that the others take its
   * units (the updates and the scaling are shared, rp_kern_run_shared) */
  float *p[3], *m[3], *v[3], *gs[3];
  for (int t = 0; t < 3; t++) {
    rp_pool *pool = ta_pool(t + 1);
    p[t] = ta_floats(n), m[t] = ta_floats(n), v[t] = ta_floats(n), gs[t] = ta_floats(n);
    memcpy(p[t], p0, sizeof(float) * n);
    memcpy(gs[t], g, sizeof(float) * n);
    const long before = rp_work_units_taken();
    rp_work_set_straggler(1, t == 2 ? RP_WORK_TEST_HOLD_S : 0.0);
    for (int step = 1; step <= 3; step++) rp_adamw_update(p[t], g, m[t], v[t], n, &h, 0.1f, step, pool);
    rp_scale(gs[t], 0.37f, n, pool);
    rp_work_set_straggler(0, 0.0);
    if (t == 2) assert_true(rp_work_units_taken() > before);
    rp_pool_destroy(pool);
  }
  for (int t = 1; t < 3; t++) {
    assert_true(kt_bitwise_equal(p[0], p[t], n));
    assert_true(kt_bitwise_equal(m[0], m[t], n));
    assert_true(kt_bitwise_equal(v[0], v[t], n));
    assert_true(kt_bitwise_equal(gs[0], gs[t], n));
  }
  for (int t = 0; t < 3; t++) free(p[t]), free(m[t]), free(v[t]), free(gs[t]);
  free(g), free(p0);
}

/* AdamW writing the bf16 copies in its own pass: the same parameters and
 * moments as the plain scaled update, and copies bitwise the array conversion
 * of those parameters (the separate pass it replaces), on 1 to 3 threads,
 * over three updates of values in [-3, 3], one of them clipped. */
static void test_adamw_bf16_copies(void **state) {
  (void)state;
  const long n = 30011;
  rp_rng rng;
  rp_rng_seed(&rng, 82);
  rp_adamw_hparams h = {.lr = 3e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f};
  float *g = ta_floats(n), *p0 = ta_floats(n);
  ta_fill(g, n, &rng, -1, 1);
  ta_fill(p0, n, &rng, -3, 3);
  for (int th = 1; th <= 3; th++) {
    rp_pool *pool = ta_pool(th);
    float *p[2], *m[2], *v[2];
    for (int u = 0; u < 2; u++) {
      p[u] = ta_floats(n), m[u] = ta_floats(n), v[u] = ta_floats(n);
      memcpy(p[u], p0, sizeof(float) * n);
      memset(m[u], 0, sizeof(float) * n), memset(v[u], 0, sizeof(float) * n);
    }
    uint16_t *want = malloc(sizeof(uint16_t) * n), *got = malloc(sizeof(uint16_t) * n);
    assert_non_null(want), assert_non_null(got);
    for (int step = 1; step <= 3; step++) {
      const float gs = step == 2 ? 0.37f : 1.0f; /* a clipping step */
      rp_adamw_update_scaled(p[0], g, m[0], v[0], n, &h, 0.1f, step, gs, pool);
      rp_bf16_from_f32_array(want, p[0], n, pool);
      memset(got, 0xA5, sizeof(uint16_t) * n); /* garbage: every copy is written */
      rp_adamw_update_scaled_bf16(p[1], got, g, m[1], v[1], n, &h, 0.1f, step, gs, pool);
      assert_true(kt_bitwise_equal(p[0], p[1], n));
      assert_true(kt_bitwise_equal(m[0], m[1], n));
      assert_true(kt_bitwise_equal(v[0], v[1], n));
      assert_memory_equal(got, want, sizeof(uint16_t) * n);
    }
    for (int u = 0; u < 2; u++) free(p[u]), free(m[u]), free(v[u]);
    free(want), free(got);
    rp_pool_destroy(pool);
  }
  free(g), free(p0);
}

/* ---------------- sumsq, scale, lr */

/* rp_sumsq's documented order, spelled out: 256 fixed chunks, each summed in
 * 8 double lanes in order, the lanes and then the chunk's tail added, then the
 * chunks in order */
static double sumsq_in_order(const float *x, long n) {
  double total = 0.0;
  for (int k = 0; k < 256; k++) {
    long lo, hi, i;
    rp_split(n, k, 256, &lo, &hi);
    double acc[8] = {0}, s = 0.0;
    for (i = lo; i + 8 <= hi; i += 8)
      for (int j = 0; j < 8; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
    for (int j = 0; j < 8; j++) s += acc[j];
    for (; i < hi; i++) s += (double)x[i] * x[i];
    total += s;
  }
  return total;
}

/* The kernel interleaves chunks (4 at a time, the rest alone): every length
 * and thread count must still give the in-order sum's bits. */
static void test_sumsq_order(void **state) {
  (void)state;
  const long ns[] = {1, 9, 255, 257, 2048 + 5, 4096 * 8 + 13, 100003};
  float *x = ta_floats(100003);
  rp_rng rng;
  rp_rng_seed(&rng, 92);
  ta_fill(x, 100003, &rng, -3, 3);
  for (int t = 1; t <= 3; t++) {
    rp_pool *pool = ta_pool(t);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
      double want = sumsq_in_order(x, ns[i]), got = rp_sumsq(x, ns[i], pool);
      assert_memory_equal(&got, &want, sizeof(double));
    }
    rp_pool_destroy(pool);
  }
  free(x);
}

static void test_sumsq_scale(void **state) {
  (void)state;
  const long n = 100003;
  rp_rng rng;
  rp_rng_seed(&rng, 91);
  float *x = ta_floats(n);
  ta_fill(x, n, &rng, -2, 2);
  double want = 0.0;
  for (long i = 0; i < n; i++) want += (double)x[i] * x[i];
  double got[2];
  for (int t = 0; t < 2; t++) {
    rp_pool *pool = ta_pool(t + 1);
    got[t] = rp_sumsq(x, n, pool);
    rp_pool_destroy(pool);
  }
  assert_true(fabs(got[0] - want) <= 1e-12 * want);
  assert_memory_equal(&got[0], &got[1], sizeof(double)); /* thread-count invariant */
  assert_true(rp_sumsq(x, 0, NULL) == 0.0);
  assert_true(rp_sumsq(x, 3, NULL) == (double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2]);

  float *y = ta_floats(n);
  memcpy(y, x, sizeof(float) * n);
  rp_pool *pool = ta_pool(2);
  rp_scale(y, 0.5f, n, pool);
  rp_pool_destroy(pool);
  for (long i = 0; i < n; i++) assert_true(y[i] == x[i] * 0.5f);
  free(x), free(y);
}

static void test_lr_cosine(void **state) {
  (void)state;
  const float lr = 1e-3f, mn = 1e-4f;
  kt_assert_near(rp_lr_cosine(0, 10, 100, lr, mn), 1e-4, 1e-9);   /* (0+1)/10 */
  kt_assert_near(rp_lr_cosine(4, 10, 100, lr, mn), 5e-4, 1e-9);
  kt_assert_near(rp_lr_cosine(9, 10, 100, lr, mn), 1e-3, 1e-9);   /* end of warmup */
  kt_assert_near(rp_lr_cosine(10, 10, 100, lr, mn), 1e-3, 1e-9);  /* cosine start */
  kt_assert_near(rp_lr_cosine(55, 10, 100, lr, mn), 5.5e-4, 1e-9); /* midpoint */
  kt_assert_near(rp_lr_cosine(100, 10, 100, lr, mn), 1e-4, 1e-9); /* end */
  kt_assert_near(rp_lr_cosine(500, 10, 100, lr, mn), 1e-4, 1e-9); /* past the end */
  /* monotone non-increasing after warmup */
  for (int s = 10; s < 100; s++)
    assert_true(rp_lr_cosine(s + 1, 10, 100, lr, mn) <= rp_lr_cosine(s, 10, 100, lr, mn));
  /* constant when warmup == 0 and min_lr == lr */
  for (int s = 0; s < 50; s += 7) assert_true(rp_lr_cosine(s, 0, 40, lr, lr) == lr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_xent),          cmocka_unit_test(test_xent_threads_bitwise),
      cmocka_unit_test(test_xent_vocab_parallel),
      cmocka_unit_test(test_adamw_hand),    cmocka_unit_test(test_adamw_threads_bitwise),
      cmocka_unit_test(test_adamw_bf16_copies),
      cmocka_unit_test(test_sumsq_scale),
      cmocka_unit_test(test_sumsq_order),
      cmocka_unit_test(test_lr_cosine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
