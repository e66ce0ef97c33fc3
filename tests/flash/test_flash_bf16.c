/* bf16 flash attention (rp_flash_config.bf16, flash_attention_bf16.c):
 * - the packers bit for bit against rp_bf16_from_f32, and the vdpbf16ps GEMM in
 *   both A layouts (rows, transposed pair rows) against a double product of the
 *   rounded operands, over ragged shapes and odd inner dimensions;
 * - forward and backward against the fp32 reference attention on inputs that
 *   are bf16 values already (so that what is left is the rounding of P, dO and
 *   dS inside the kernel), causal and not, ragged T and head sizes (odd ones
 *   too), 1 and 2 threads, both backward splits, odd block sizes; and the bf16
 *   path must differ from the fp32 one (it ran);
 * - below an avx512bf16 ceiling, or with another flash ISA, bf16 asks for
 *   nothing: the same bits as fp32 products.
 * Skipped, saying so, where the CPU or RINGPIPE_ISA excludes avx512bf16. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "ft_util.h"
#include "kernels/flash_attention_internal.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_kernels.h"

/* Error bounds, relative to the largest |reference| of each output (inputs of
 * magnitude <= 2, HS <= 128). The kernel rounds P to bf16 (2^-9 relative) for
 * O and dV, dO for dP, and dS for dQ and dK; measured on Zen 5: out 1.5e-3,
 * lse 0 (fp32 scores of bf16 inputs), dqkv 3e-3 of their maxima. A pairing
 * mistake (a wrong half, a stale pad) gives O(1). */
#define BF_OUT_TOL 6e-3
#define BF_LSE_TOL 1e-4
#define BF_GRAD_TOL 1.2e-2

static rp_pool *g_pool[3];
static int g_can_run;

static int setup(void **state) {
  g_can_run = ti_isa_runs("flash_bf16", "bf16 products", RP_ISA_AVX512BF16);
  return ft_pools_up(g_pool);
}
static int teardown(void **state) { return ft_pools_down(g_pool); }

static float bfr(float x) { return rp_bf16_to_f32(rp_bf16_from_f32(x)); }
/* vcvtne2ps2bf16's rule: a denormal input becomes a zero of its sign; the rest
 * rounds to nearest even, NaN made quiet (rp_bf16_from_f32). */
static uint16_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7F800000u) == 0) return (uint16_t)(u >> 16 & 0x8000u);
  return rp_bf16_from_f32(x);
}
static uint32_t pair_of(float lo, float hi) {
  return (uint32_t)bf16_bits(lo) | (uint32_t)bf16_bits(hi) << 16;
}

/* Values the rounding rule treats specially, spread over the source rows. */
static void plant_specials(float *src, long n, rp_rng *rng) {
  const uint32_t bits[] = {0x00000001u, 0x807FFFFFu, 0x00400000u, 0x00800000u, 0x7F800000u,
                           0xFF800000u, 0x7FC00001u, 0xFF812345u, 0x80000000u, 0x3F808000u,
                           0x3F818000u, 0x3F80FFFFu, 0x7F7FFFFFu};
  for (long i = 0; i < n; i += 7) {
    uint32_t u = bits[(unsigned)(rp_rng_uniform(rng) * 13) % 13];
    memcpy(&src[i], &u, sizeof u);
  }
}

static const rp_flash_bf16_ops *bf16_ops(void) {
  rp_flash_config cfg = {.bf16 = 1, .isa = RP_FLASH_ISA_AVX512};
  const rp_flash_bf16_ops *op = rp_flash_bf16_ops_active(&cfg);
  assert_non_null(op);
  return op;
}

/* The three packers, bit for bit, odd widths and row counts, denormals, NaN,
 * infinities and rounding ties included. */
static void test_packers(void **state) {
  if (!g_can_run) return;
  const rp_flash_bf16_ops *op = bf16_ops();
  rp_rng rng;
  rp_rng_seed(&rng, 11);
  static const int ns[] = {1, 2, 7, 16, 17, 33}, ws[] = {1, 5, 16, 24, 63, 64, 200};
  const long ld = 260;
  float *src = ta_floats(40 * ld);
  uint32_t *dst = calloc(40 * 260, sizeof(uint32_t));
  assert_non_null(dst);
  ta_fill(src, 40 * ld, &rng, -3.0f, 3.0f);
  plant_specials(src, 40 * ld, &rng);
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (size_t b = 0; b < sizeof ws / sizeof ws[0]; b++) {
      const int n = ns[a], W = ws[b], wp = rp_flash_pairs(W), np = rp_flash_pairs(n);
      op->rows(dst, wp, src, ld, n, W);
      for (int r = 0; r < n; r++)
        for (int p = 0; p < wp; p++)
          assert_int_equal(dst[r * wp + p],
                           pair_of(src[r * ld + 2 * p], 2 * p + 1 < W ? src[r * ld + 2 * p + 1] : 0));
      op->pair_rows(dst, W, src, ld, n, W, np);
      for (int p = 0; p < np; p++)
        for (int w = 0; w < W; w++)
          assert_int_equal(dst[p * W + w],
                           pair_of(src[2 * p * ld + w], 2 * p + 1 < n ? src[(2 * p + 1) * ld + w] : 0));
      if (W > 256) continue;
      op->pack_t(dst, 37, src, ld, n, W);
      for (int p = 0; p < wp; p++)
        for (int r = 0; r < n; r++)
          assert_int_equal(dst[p * 37 + r],
                           pair_of(src[r * ld + 2 * p], 2 * p + 1 < W ? src[r * ld + 2 * p + 1] : 0));
    }
  free(src);
  free(dst);
}

/* C = (acc ? C : 0) + A B with A as rows and as transposed pair rows. */
static void test_gemm(void **state) {
  if (!g_can_run) return;
  const rp_flash_bf16_ops *op = bf16_ops();
  rp_rng rng;
  rp_rng_seed(&rng, 12);
  static const int Ms[] = {1, 5, 6, 13, 24, 25}, Ns[] = {1, 16, 17, 64, 65, 130};
  static const int Ks[] = {1, 2, 3, 31, 64, 65, 192};
  float *a = ta_floats(200 * 200), *at = ta_floats(200 * 200), *b = ta_floats(200 * 200);
  float *c = ta_floats(32 * 200), *c0 = ta_floats(32 * 200);
  uint32_t *ap = calloc(200 * 200, 4), *bp = calloc(200 * 200, 4);
  assert_non_null(ap);
  assert_non_null(bp);
  ta_fill(a, 200 * 200, &rng, -2, 2);
  ta_fill(b, 200 * 200, &rng, -2, 2);
  ta_fill(c0, 32 * 200, &rng, -1, 1);
  for (int i = 0; i < 200; i++)
    for (int k = 0; k < 200; k++) at[k * 200 + i] = a[i * 200 + k];  /* A^T rows */
  for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
      for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (int layout = 0; layout < 2; layout++)
          for (int acc = RP_FLASH_SET; acc <= RP_FLASH_ADD_COLD; acc++) {
            const int M = Ms[mi], N = Ns[ni], K = Ks[ki], KP = rp_flash_pairs(K);
            op->pair_rows(bp, N, b, 200, K, N, KP);
            long rsa, csa;
            if (layout == 0) {
              op->rows(ap, KP, a, 200, M, K);
              rsa = KP, csa = 1;
            } else {
              op->pair_rows(ap, M, at, 200, K, M, KP);
              rsa = 1, csa = M;
            }
            memcpy(c, c0, sizeof(float) * 32 * 200);
            op->gemm(M, N, KP, ap, rsa, csa, bp, N, c, 200, acc);
            double worst = 0;
            for (int i = 0; i < M; i++)
              for (int n = 0; n < N; n++) {
                double want = acc ? c0[i * 200 + n] : 0, mag = fabs(want);
                for (int k = 0; k < K; k++) {
                  double t = (double)bfr(a[i * 200 + k]) * bfr(b[k * 200 + n]);
                  want += t;
                  mag += fabs(t);
                }
                double e = fabs(c[i * 200 + n] - want) / (mag + 1e-30);
                if (e > worst) worst = e;
              }
            if (worst > 2e-6)
              fprintf(stderr, "gemm M=%d N=%d K=%d layout=%d acc=%d: rel %.3g\n", M, N, K, layout,
                      acc, worst);
            assert_true(worst <= 2e-6);
          }
  free(a), free(at), free(b), free(c), free(c0), free(ap), free(bp);
}

typedef struct {
  int B, T, C, NH;
} shape;

static double maxabs(const float *x, long n) {
  double m = 0;
  for (long i = 0; i < n; i++)
    if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
  return m;
}

/* One shape through threads x splits x blocks; returns the failures. */
static int check_shape(shape s, int causal) {
  const long nqkv = (long)s.B * s.T * 3 * s.C, nout = (long)s.B * s.T * s.C;
  const long nlse = (long)s.B * s.NH * s.T;
  rp_rng rng;
  rp_rng_seed(&rng, 300u + 7u * (unsigned)s.T + (unsigned)s.C + 13u * (unsigned)causal);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout);
  ta_fill(qkv, nqkv, &rng, -2.0f, 2.0f);
  ta_fill(dout, nout, &rng, -1.0f, 1.0f);
  for (long i = 0; i < nqkv; i++) qkv[i] = bfr(qkv[i]);
  for (long i = 0; i < nout; i++) dout[i] = bfr(dout[i]);
  float *out_r = ta_floats(nout), *lse_r = ta_floats(nlse), *dqkv_r = ta_floats(nqkv);
  float *att = ta_floats((long)s.B * s.NH * s.T * s.T);
  rp_attention_ref_forward(out_r, att, lse_r, qkv, s.B, s.T, s.C, s.NH, causal, g_pool[2]);
  rp_attention_ref_backward(dqkv_r, dout, qkv, att, s.B, s.T, s.C, s.NH, g_pool[2]);
  free(att);
  const double mo = maxabs(out_r, nout), md = maxabs(dqkv_r, nqkv);

  static const int blocks[][2] = {{0, 0}, {24, 40}, {7, 13}};
  float *out = ta_floats(nout), *lse = ta_floats(nlse), *dqkv = ta_floats(nqkv);
  float *out32 = ta_floats(nout);
  int fails = 0;
  for (int th = 1; th <= 2; th++)
    for (int sp = RP_FLASH_SPLIT_HEAD; sp <= RP_FLASH_SPLIT_KEYBLOCK; sp++)
      for (int bi = 0; bi < 3; bi++) {
        rp_flash_config cfg = {.bq = blocks[bi][0], .bk = blocks[bi][1], .split = sp, .bf16 = 1};
        assert_int_equal(rp_flash_config_check(&cfg), RP_OK);
        assert_true(rp_flash_bf16_active(&cfg));
        memset(out, 0x7f, sizeof(float) * (size_t)nout);
        memset(dqkv, 0, sizeof(float) * (size_t)nqkv);
        assert_int_equal(rp_flash_forward(out, lse, qkv, s.B, s.T, s.C, s.NH, causal, &cfg,
                                          g_pool[th]), RP_OK);
        assert_int_equal(rp_flash_backward(dqkv, dout, qkv, out, lse, s.B, s.T, s.C, s.NH,
                                           causal, &cfg, g_pool[th]), RP_OK);
        const double eo = ta_maxdiff("out", out, out_r, nout, BF_OUT_TOL * mo) / mo;
        const double el = ta_maxdiff("lse", lse, lse_r, nlse, BF_LSE_TOL);
        const double ed = ta_maxdiff("dqkv", dqkv, dqkv_r, nqkv, BF_GRAD_TOL * md) / md;
        if (getenv("FT_VERBOSE"))
          fprintf(stderr, "T=%d HS=%d causal=%d th=%d split=%d bq=%d bk=%d: %.2g %.2g %.2g\n",
                  s.T, s.C / s.NH, causal, th, sp, blocks[bi][0], blocks[bi][1], eo, el, ed);
        if (eo > BF_OUT_TOL || el > BF_LSE_TOL || ed > BF_GRAD_TOL) {
          fprintf(stderr, "FAIL B=%d T=%d C=%d NH=%d causal=%d threads=%d split=%d bq=%d bk=%d: "
                  "out %.3g lse %.3g dqkv %.3g (relative to max)\n", s.B, s.T, s.C, s.NH, causal,
                  th, sp, blocks[bi][0], blocks[bi][1], eo, el, ed);
          fails++;
        }
        if (bi == 0 && th == 2 && s.T > 1) { /* the bf16 path ran: P's rounding shows */
          cfg.bf16 = 0;
          assert_int_equal(rp_flash_forward(out32, lse, qkv, s.B, s.T, s.C, s.NH, causal, &cfg,
                                            g_pool[th]), RP_OK);
          if (memcmp(out, out32, sizeof(float) * (size_t)nout) == 0) {
            fprintf(stderr, "FAIL T=%d C=%d: bf16 output equals fp32 products'\n", s.T, s.C);
            fails++;
          }
        }
      }
  free(out), free(lse), free(dqkv), free(out32), free(qkv), free(dout);
  free(out_r), free(lse_r), free(dqkv_r);
  return fails;
}

static void run_shapes(const shape *sh, int n) {
  if (!g_can_run) return;
  int fails = 0;
  for (int i = 0; i < n; i++)
    for (int causal = 0; causal <= 1; causal++) fails += check_shape(sh[i], causal);
  assert_int_equal(fails, 0);
}

static void test_attention_small(void **state) {
  static const shape sh[] = {{2, 1, 48, 3},   /* T = 1, HS 16 */
                             {2, 7, 64, 2},   /* HS 32 */
                             {1, 9, 10, 2},   /* HS 5: odd pairs */
                             {1, 33, 72, 3},  /* HS 24 */
                             {1, 64, 192, 3}, /* HS 64 */
                             {2, 129, 80, 1}};/* HS 80, one head */
  run_shapes(sh, 6);
}

static void test_attention_long(void **state) {
  static const shape sh[] = {{1, 301, 256, 2}}; /* HS 128, several key blocks */
  run_shapes(sh, 1);
}

/* bf16 asks for nothing where it cannot run: fp32 products, the same bits. */
static void test_inactive_is_fp32(void **state) {
  const int B = 1, T = 50, C = 64, NH = 2;
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C, nlse = (long)B * NH * T;
  rp_rng rng;
  rp_rng_seed(&rng, 13);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout);
  ta_fill(qkv, nqkv, &rng, -2, 2);
  ta_fill(dout, nout, &rng, -1, 1);
  float *o1 = ta_floats(nout), *o2 = ta_floats(nout), *l1 = ta_floats(nlse), *l2 = ta_floats(nlse);
  float *d1 = ta_floats(nqkv), *d2 = ta_floats(nqkv);
  const rp_isa ceiling = rp_isa_active();
  for (int lvl = RP_ISA_SCALAR; lvl <= RP_ISA_AVX512 && lvl <= (int)ceiling; lvl++) {
    if (!rp_isa_allows((rp_isa)lvl)) continue;
    assert_int_equal(rp_isa_set((rp_isa)lvl), RP_OK);
    rp_flash_config f32 = {0}, b16 = {.bf16 = 1};
    assert_false(rp_flash_bf16_active(&b16));
    memset(d1, 0, sizeof(float) * nqkv);
    memset(d2, 0, sizeof(float) * nqkv);
    assert_int_equal(rp_flash_forward(o1, l1, qkv, B, T, C, NH, 1, &f32, g_pool[2]), RP_OK);
    assert_int_equal(rp_flash_forward(o2, l2, qkv, B, T, C, NH, 1, &b16, g_pool[2]), RP_OK);
    assert_int_equal(rp_flash_backward(d1, dout, qkv, o1, l1, B, T, C, NH, 1, &f32, g_pool[2]),
                     RP_OK);
    assert_int_equal(rp_flash_backward(d2, dout, qkv, o2, l2, B, T, C, NH, 1, &b16, g_pool[2]),
                     RP_OK);
    assert_memory_equal(o1, o2, sizeof(float) * nout);
    assert_memory_equal(d1, d2, sizeof(float) * nqkv);
  }
  assert_int_equal(rp_isa_set(ceiling), RP_OK);
  if (rp_flash_isa_supported(RP_FLASH_ISA_AVX2)) {  /* a configured lower flash ISA */
    rp_flash_config b16 = {.bf16 = 1, .isa = RP_FLASH_ISA_AVX2};
    assert_false(rp_flash_bf16_active(&b16));
  }
  rp_flash_config bad = {.bf16 = 2};
  assert_int_equal(rp_flash_config_check(&bad), RP_EINVAL);
  free(qkv), free(dout), free(o1), free(o2), free(l1), free(l2), free(d1), free(d2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_packers),         cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_attention_small), cmocka_unit_test(test_attention_long),
      cmocka_unit_test(test_inactive_is_fp32),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
