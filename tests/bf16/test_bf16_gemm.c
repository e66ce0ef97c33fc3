/* bf16 GEMM: every kernel (forced portable, AVX-512 FMA, AVX512-BF16, AMX where the
 * CPU has them), 1 and 2 threads, per-call and pre-packed weights, equal to the
 * reference loops bit for bit on shapes that are not multiples of any block size
 * (the AMX kernel to the loops of its own summation order, rp_matmul_bf16_*_ref_of); the
 * reference within the derived bf16 rounding bound of the fp32 matmul. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>

#include "bt_util.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  int N, IC, OC;
} shp;

/* MR = 4, 6 or 32, NR = 64, kc = 64, 128, 192 or 256 pairs (AMX: k steps of 16
 * pairs), mc = 64, 120 or 128 rows:
 * these cross every block edge, with odd and even K, in each of the three
 * products (forward K = IC, dinp K = OC, dweight K = N and M = OC). */
static const shp shapes[] = {{1, 1, 1},      {1, 2, 1},     {3, 5, 7},      {2, 0, 5},
                             {7, 9, 65},     {13, 31, 64},  {37, 129, 70},  {130, 257, 200},
                             {61, 300, 130}, {121, 2, 129}, {9, 517, 67},   {515, 7, 66},
                             {6, 5, 517}};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static const float NANF_BITS_FILL = -12345.0f; /* what "not written" looks like */

static void fill_const(float *x, long n, float v) {
  for (long i = 0; i < n; i++) x[i] = v;
}

static int check_equal(const char *what, const char *kern, int nth, const shp *s,
                       const float *got, const float *want, long n) {
  long d = bt_first_diff(got, want, n);
  if (d >= 0)
    fprintf(stderr, "%s [%s, %d threads, N=%d IC=%d OC=%d] differs at %ld: %.9g vs %.9g\n",
            what, kern, nth, s->N, s->IC, s->OC, d, (double)got[d], (double)want[d]);
  return d < 0;
}

static void test_forward_equals_ref(void **state) {
  (void)state;
  rp_pool *p2 = ta_pool(2);
  rp_rng rng;
  rp_rng_seed(&rng, 21);
  for (int si = 0; si < NSHAPES; si++) {
    const shp *s = &shapes[si];
    long ni = (long)s->N * s->IC, nw = (long)s->OC * s->IC, no = (long)s->N * s->OC;
    uint16_t *inp = bt_halves(ni), *w = bt_halves(nw);
    float *bias = ta_floats(s->OC), *out = ta_floats(no), *ref = ta_floats(no);
    float *aref = ta_floats(no);
    bt_fill16(inp, ni, &rng);
    bt_fill16(w, nw, &rng);
    ta_fill(bias, s->OC, &rng, -1, 1);
    for (int b = 0; b < 2; b++) {
      rp_matmul_bf16_forward_ref(ref, inp, w, b ? bias : NULL, s->N, s->IC, s->OC);
      rp_matmul_bf16_forward_ref_of(RP_BF16_KERNEL_AMX, aref, inp, w, b ? bias : NULL, s->N,
                                    s->IC, s->OC);
      const char *kn;
      for (int k = 0; (kn = bt_kernel_set(k)) != NULL; k++)
        for (int t = 1; t <= 2; t++) {
          fill_const(out, no, NANF_BITS_FILL);
          rp_matmul_bf16_forward(out, inp, w, b ? bias : NULL, s->N, s->IC, s->OC,
                                 t == 2 ? p2 : NULL);
          assert_true(
              check_equal("forward", kn, t, s, out, bt_kernel_is_amx() ? aref : ref, no));
        }
      bt_kernel_reset();
    }
    free(inp), free(w), free(bias), free(out), free(ref), free(aref);
  }
  rp_pool_destroy(p2);
}

/* Backward: nonzero starting gradients (+=), every NULL combination; skipped
 * gradients are left untouched. */
static void test_backward_equals_ref(void **state) {
  (void)state;
  rp_pool *p2 = ta_pool(2);
  rp_rng rng;
  rp_rng_seed(&rng, 22);
  for (int si = 0; si < NSHAPES; si++) {
    const shp *s = &shapes[si];
    if (s->IC == 0) continue;
    long ni = (long)s->N * s->IC, nw = (long)s->OC * s->IC, no = (long)s->N * s->OC;
    uint16_t *inp = bt_halves(ni), *w = bt_halves(nw), *dout = bt_halves(no);
    float *g0[3] = {ta_floats(ni), ta_floats(nw), ta_floats(s->OC)};
    float *ref[3] = {ta_floats(ni), ta_floats(nw), ta_floats(s->OC)};
    float *aref[3] = {ta_floats(ni), ta_floats(nw), ta_floats(s->OC)};
    float *got[3] = {ta_floats(ni), ta_floats(nw), ta_floats(s->OC)};
    const long len[3] = {ni, nw, s->OC};
    bt_fill16(inp, ni, &rng);
    bt_fill16(w, nw, &rng);
    bt_fill16(dout, no, &rng);
    for (int g = 0; g < 3; g++) ta_fill(g0[g], len[g], &rng, -1, 1);
    for (int mask = 1; mask < 8; mask++) {
      for (int g = 0; g < 3; g++) {
        memcpy(ref[g], g0[g], sizeof(float) * (size_t)len[g]);
        memcpy(aref[g], g0[g], sizeof(float) * (size_t)len[g]);
      }
      rp_matmul_bf16_backward_ref(mask & 1 ? ref[0] : NULL, mask & 2 ? ref[1] : NULL,
                                  mask & 4 ? ref[2] : NULL, dout, inp, w, s->N, s->IC, s->OC);
      rp_matmul_bf16_backward_ref_of(RP_BF16_KERNEL_AMX, mask & 1 ? aref[0] : NULL,
                                     mask & 2 ? aref[1] : NULL, mask & 4 ? aref[2] : NULL, dout,
                                     inp, w, s->N, s->IC, s->OC);
      const char *kn;
      for (int k = 0; (kn = bt_kernel_set(k)) != NULL; k++)
        for (int t = 1; t <= 2; t++) {
          for (int g = 0; g < 3; g++) memcpy(got[g], g0[g], sizeof(float) * (size_t)len[g]);
          rp_matmul_bf16_backward(mask & 1 ? got[0] : NULL, mask & 2 ? got[1] : NULL,
                                  mask & 4 ? got[2] : NULL, dout, inp, w, s->N, s->IC, s->OC,
                                  t == 2 ? p2 : NULL);
          float **want = bt_kernel_is_amx() ? aref : ref;
          assert_true(check_equal("dinp", kn, t, s, got[0], want[0], ni));
          assert_true(check_equal("dweight", kn, t, s, got[1], want[1], nw));
          assert_true(check_equal("dbias", kn, t, s, got[2], want[2], s->OC));
        }
      bt_kernel_reset();
    }
    for (int g = 0; g < 3; g++) free(g0[g]), free(ref[g]), free(aref[g]), free(got[g]);
    free(inp), free(w), free(dout);
  }
  rp_pool_destroy(p2);
}

/* backward_set overwrites dinp whatever it held (here NaN-like garbage) and gives
 * the bits of a memset to 0 followed by the accumulating backward; dweight and
 * dbias still accumulate. */
static void test_backward_set_equals_memset(void **state) {
  (void)state;
  rp_pool *p2 = ta_pool(2);
  rp_rng rng;
  rp_rng_seed(&rng, 26);
  const shp cases[3] = {{37, 129, 70}, {130, 257, 200}, {5, 3, 1}};
  for (int si = 0; si < 3; si++) {
    const shp *s = &cases[si];
    long ni = (long)s->N * s->IC, nw = (long)s->OC * s->IC, no = (long)s->N * s->OC;
    uint16_t *inp = bt_halves(ni), *w = bt_halves(nw), *dout = bt_halves(no);
    float *dw0 = ta_floats(nw), *want[3] = {ta_floats(ni), ta_floats(nw), ta_floats(s->OC)};
    float *got[3] = {ta_floats(ni), ta_floats(nw), ta_floats(s->OC)};
    bt_fill16(inp, ni, &rng);
    bt_fill16(w, nw, &rng);
    bt_fill16(dout, no, &rng);
    ta_fill(dw0, nw, &rng, -1, 1);
    const char *kn;
    for (int k = 0; (kn = bt_kernel_set(k)) != NULL; k++) {
      memset(want[0], 0, sizeof(float) * (size_t)ni);
      fill_const(got[0], ni, NANF_BITS_FILL);
      for (int q = 1; q < 3; q++) {
        long n = q == 1 ? nw : s->OC;
        memcpy(want[q], q == 1 ? dw0 : got[0], sizeof(float) * (size_t)n); /* any start */
        memcpy(got[q], want[q], sizeof(float) * (size_t)n);
      }
      rp_matmul_bf16_backward(want[0], want[1], want[2], dout, inp, w, s->N, s->IC, s->OC, p2);
      rp_matmul_bf16_backward_set(got[0], got[1], got[2], dout, inp, w, s->N, s->IC, s->OC, p2);
      assert_true(check_equal("dinp_set", kn, 2, s, got[0], want[0], ni));
      assert_true(check_equal("dweight_set", kn, 2, s, got[1], want[1], nw));
      assert_true(check_equal("dbias_set", kn, 2, s, got[2], want[2], s->OC));
    }
    bt_kernel_reset();
    for (int q = 0; q < 3; q++) free(want[q]), free(got[q]);
    free(inp), free(w), free(dout), free(dw0);
  }
  rp_pool_destroy(p2);
}

/* fp32 activations rounded inside the GEMM (while packing, on AMX) give the bits
 * of rounding them first with rp_bf16_from_f32_array: forward with bias (also
 * with the fused GELU epilogue, and with the residual added by an epilogue, out
 * of place and in place), and backward with dinp set and accumulated, with only
 * dout or also dweight's inp in fp32 (then dbias is the fp32 column
 * sum of the oracle), on shapes crossing the packers' edges (odd K, K past a kc
 * block, rows past a 32-row panel, columns past a 64-column B panel). Values
 * include halfway cases, where RNE must round to even, and a NaN. */
static void test_f32_operands_equal_rounded(void **state) {
  (void)state;
  rp_pool *p2 = ta_pool(2);
  rp_rng rng;
  rp_rng_seed(&rng, 27);
  const shp cases[4] = {{37, 129, 70}, {130, 517, 33}, {5, 3, 1}, {65, 64, 515}};
  for (int si = 0; si < 4; si++) {
    const shp *s = &cases[si];
    long ni = (long)s->N * s->IC, nw = (long)s->OC * s->IC, no = (long)s->N * s->OC;
    float *inp = ta_floats(ni), *dout = ta_floats(no), *bias = ta_floats(s->OC);
    uint16_t *inp16 = bt_halves(ni), *w = bt_halves(nw), *dout16 = bt_halves(no);
    float *want[3] = {ta_floats(no), ta_floats(ni), ta_floats(nw)};
    float *got[3] = {ta_floats(no), ta_floats(ni), ta_floats(nw)};
    float *gpost = ta_floats(no), *wpost = ta_floats(no), *gdb = ta_floats(s->OC),
          *wdb = ta_floats(s->OC);
    ta_fill(inp, ni, &rng, -2, 2);
    ta_fill(dout, no, &rng, -1e-2f, 1e-2f);
    ta_fill(bias, s->OC, &rng, -1, 1);
    inp[0] = 1.0f + ldexpf(1.0f, -8); /* halfway: rounds to even, 1.0 */
    if (ni > 1) inp[1] = 1.0f + 3 * ldexpf(1.0f, -8); /* halfway: rounds up */
    bt_fill16(w, nw, &rng);
    rp_bf16_from_f32_array(inp16, inp, ni, NULL);
    rp_bf16_from_f32_array(dout16, dout, no, NULL);
    const char *kn;
    for (int k = 0; (kn = bt_kernel_set(k)) != NULL; k++)
      for (int set = 0; set < 2; set++) {
        rp_matmul_bf16_forward(want[0], inp16, w, bias, s->N, s->IC, s->OC, p2);
        rp_matmul_bf16_forward_f32in(got[0], inp, w, bias, s->N, s->IC, s->OC, p2);
        assert_true(check_equal("forward_f32in", kn, 2, s, got[0], want[0], no));
        fill_const(want[1], ni, 0.5f), fill_const(got[1], ni, set ? NANF_BITS_FILL : 0.5f);
        fill_const(want[2], nw, 0.25f), fill_const(got[2], nw, 0.25f);
        if (set) memset(want[1], 0, sizeof(float) * (size_t)ni);
        rp_matmul_bf16_backward(want[1], want[2], NULL, dout16, inp16, w, s->N, s->IC, s->OC,
                                p2);
        rp_matmul_bf16_backward_f32dout(got[1], got[2], dout, inp16, w, s->N, s->IC, s->OC,
                                        set, p2);
        assert_true(check_equal("dinp_f32dout", kn, 2, s, got[1], want[1], ni));
        assert_true(check_equal("dweight_f32dout", kn, 2, s, got[2], want[2], nw));
        fill_const(got[1], ni, set ? NANF_BITS_FILL : 0.5f), fill_const(got[2], nw, 0.25f);
        fill_const(gdb, s->OC, 0.0f), fill_const(wdb, s->OC, 0.0f);
        rp_matmul_bf16_backward_f32(got[1], got[2], gdb, dout, inp, w, s->N, s->IC, s->OC, set,
                                    p2);
        rp_matmul_backward_ref(NULL, NULL, wdb, dout, NULL, NULL, s->N, s->IC, s->OC);
        assert_true(check_equal("dinp_f32", kn, 2, s, got[1], want[1], ni));
        assert_true(check_equal("dweight_f32", kn, 2, s, got[2], want[2], nw));
        assert_true(check_equal("dbias_f32", kn, 2, s, gdb, wdb, s->OC));
        /* the fused GELU: the same pre-activation, and gelu of it */
        double epi_s = -1.0;
        rp_matmul_bf16_forward_gelu(got[0], gpost, inp, w, bias, s->N, s->IC, s->OC, p2,
                                    set ? &epi_s : NULL);
        rp_gelu_forward(wpost, want[0], no, NULL);
        assert_true(check_equal("forward_gelu pre", kn, 2, s, got[0], want[0], no));
        assert_true(check_equal("forward_gelu post", kn, 2, s, gpost, wpost, no));
        if (set) assert_true(epi_s >= 0.0);
        /* the fused residual, into a separate output and onto the residual itself
         * (gpost holds the product there) */
        for (long i = 0; i < no; i++) wpost[i] = want[0][i] + dout[i];
        rp_matmul_bf16_forward_residual(got[0], got[0], inp, w, bias, dout, s->N, s->IC, s->OC,
                                        p2);
        assert_true(check_equal("forward_residual", kn, 2, s, got[0], wpost, no));
        memcpy(got[0], dout, sizeof(float) * (size_t)no);
        rp_matmul_bf16_forward_residual(got[0], gpost, inp, w, bias, got[0], s->N, s->IC, s->OC,
                                        p2);
        assert_true(check_equal("forward_residual in place", kn, 2, s, got[0], wpost, no));
      }
    bt_kernel_reset();
    /* a NaN in the activations stays a NaN in the products */
    inp[0] = nanf("");
    rp_matmul_bf16_forward_f32in(got[0], inp, w, NULL, s->N, s->IC, s->OC, p2);
    for (int o = 0; o < s->OC; o++) assert_true(isnan(got[0][o]));
    for (int q = 0; q < 3; q++) free(want[q]), free(got[q]);
    free(inp), free(dout), free(bias), free(inp16), free(w), free(dout16);
    free(gpost), free(wpost), free(gdb), free(wdb);
  }
  rp_pool_destroy(p2);
}

/* Which summation order a GEMM on packed weights follows: the pack is read by the
 * active kernel when the formats match, else by the best kernel of its format
 * (AMX for PAIRS where it runs), and forced-portable reads either portably. */
static int packed_runs_amx(const rp_bf16_wpack *wp, int forced) {
  rp_bf16_kernel a = rp_bf16_kernel_active();
  rp_bf16_fmt afmt = a == RP_BF16_KERNEL_AMX || a == RP_BF16_KERNEL_AVX512_BF16
                         ? RP_BF16_FMT_PAIRS : RP_BF16_FMT_F32;
  if (forced || wp->fmt != RP_BF16_FMT_PAIRS) return 0;
  return afmt == RP_BF16_FMT_PAIRS ? a == RP_BF16_KERNEL_AMX
                                   : rp_bf16_kernel_supported(RP_BF16_KERNEL_AMX);
}

/* Pre-packed weights: packed under each kernel, then used under every kernel
 * (a pack in the other format is read by the kernel of its own format). */
static void test_packed_equals_ref(void **state) {
  (void)state;
  rp_pool *p2 = ta_pool(2);
  rp_rng rng;
  rp_rng_seed(&rng, 23);
  const shp cases[3] = {{37, 129, 70}, {130, 257, 200}, {5, 3, 1}};
  for (int si = 0; si < 3; si++) {
    const shp *s = &cases[si];
    long ni = (long)s->N * s->IC, nw = (long)s->OC * s->IC, no = (long)s->N * s->OC;
    uint16_t *inp = bt_halves(ni), *w = bt_halves(nw), *dout = bt_halves(no);
    float *bias = ta_floats(s->OC), *out = ta_floats(no), *ref = ta_floats(no);
    float *dinp = ta_floats(ni), *dw = ta_floats(nw), *db = ta_floats(s->OC);
    float *rdinp = ta_floats(ni), *rdw = ta_floats(nw), *rdb = ta_floats(s->OC);
    float *aref = ta_floats(no), *adinp = ta_floats(ni), *adw = ta_floats(nw);
    float *adb = ta_floats(s->OC);
    bt_fill16(inp, ni, &rng);
    bt_fill16(w, nw, &rng);
    bt_fill16(dout, no, &rng);
    ta_fill(bias, s->OC, &rng, -1, 1);
    rp_matmul_bf16_forward_ref(ref, inp, w, bias, s->N, s->IC, s->OC);
    rp_matmul_bf16_backward_ref(rdinp, rdw, rdb, dout, inp, w, s->N, s->IC, s->OC);
    rp_matmul_bf16_forward_ref_of(RP_BF16_KERNEL_AMX, aref, inp, w, bias, s->N, s->IC, s->OC);
    rp_matmul_bf16_backward_ref_of(RP_BF16_KERNEL_AMX, adinp, adw, adb, dout, inp, w, s->N,
                                   s->IC, s->OC);
    const char *pk, *uk;
    for (int kp = 0; (pk = bt_kernel_set(kp)) != NULL; kp++) {
      rp_bf16_wpack wp;
      assert_int_equal(rp_bf16_wpack_init(&wp, s->IC, s->OC), RP_OK);
      rp_bf16_kernel pka = rp_bf16_kernel_active();
      assert_int_equal(wp.fmt, pka == RP_BF16_KERNEL_AVX512_BF16 || pka == RP_BF16_KERNEL_AMX
                                   ? RP_BF16_FMT_PAIRS : RP_BF16_FMT_F32);
      rp_bf16_wpack_update(&wp, w, p2);
      for (int ku = 0; (uk = bt_kernel_set(ku)) != NULL; ku++)
        for (int t = 1; t <= 2; t++) {
          rp_pool *pool = t == 2 ? p2 : NULL;
          const int amx = packed_runs_amx(&wp, ku == 0);
          fill_const(out, no, NANF_BITS_FILL);
          rp_matmul_bf16_forward_packed(out, inp, &wp, bias, s->N, pool);
          assert_true(check_equal("forward_packed", uk, t, s, out, amx ? aref : ref, no));
          memset(dinp, 0, sizeof(float) * (size_t)ni);
          memset(dw, 0, sizeof(float) * (size_t)nw);
          memset(db, 0, sizeof(float) * (size_t)s->OC);
          rp_matmul_bf16_backward_packed(dinp, dw, db, dout, inp, &wp, s->N, pool);
          assert_true(check_equal("dinp_packed", uk, t, s, dinp, amx ? adinp : rdinp, ni));
          assert_true(check_equal("dweight_packed", uk, t, s, dw, amx ? adw : rdw, nw));
          assert_true(check_equal("dbias_packed", uk, t, s, db, rdb, s->OC));
        }
      rp_bf16_wpack_free(&wp);
    }
    bt_kernel_reset();
    free(inp), free(w), free(dout), free(bias), free(out), free(ref);
    free(dinp), free(dw), free(db), free(rdinp), free(rdw), free(rdb);
    free(aref), free(adinp), free(adw), free(adb);
  }
  rp_pool_destroy(p2);
}

/* The bitwise comparisons above can only catch a wrong summation order if the
 * order shows in the results: here it does (element 2p first gives other bits). */
static void test_order_is_visible(void **state) {
  (void)state;
  const int N = 16, IC = 129, OC = 16;
  rp_rng rng;
  rp_rng_seed(&rng, 24);
  uint16_t *inp = bt_halves(N * IC), *w = bt_halves(OC * IC);
  float *ref = ta_floats(N * OC);
  bt_fill16(inp, N * IC, &rng);
  bt_fill16(w, OC * IC, &rng);
  rp_matmul_bf16_forward_ref(ref, inp, w, NULL, N, IC, OC);
  int differ = 0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      float acc = 0.0f;
      for (int k = 0; k < IC; k += 2) {
        acc += rp_bf16_to_f32(inp[n * IC + k]) * rp_bf16_to_f32(w[o * IC + k]);
        if (k + 1 < IC)
          acc += rp_bf16_to_f32(inp[n * IC + k + 1]) * rp_bf16_to_f32(w[o * IC + k + 1]);
      }
      differ += memcmp(&acc, &ref[n * OC + o], 4) != 0;
    }
  assert_true(differ > 0);
  /* and the AMX order gives other bits than rp_bf16.h's */
  float *aref = ta_floats(N * OC);
  rp_matmul_bf16_forward_ref_of(RP_BF16_KERNEL_AMX, aref, inp, w, NULL, N, IC, OC);
  assert_true(bt_first_diff(aref, ref, N * OC) >= 0);
  free(inp), free(w), free(ref), free(aref);
}

/* Against fp32. With u = 2^-8 (bf16 round to nearest keeps 8 significant bits)
 * each rounded input is x(1+d), |d| <= u, so each product of rounded inputs is
 * exact in fp32 and equals ab(1+t), |t| <= 2u + u^2. Recursive fp32 summation of
 * n terms errs by at most g_n * sum|terms|, g_n = n 2^-24 / (1 - n 2^-24). The
 * bf16 result sums K products and the start value s0 (bias, old gradient) with
 * at most K+1 additions (the +0 of an odd K changes nothing); the fp32 reference
 * sums the exact products with at most K+1 additions too. So, with
 * S = sum_k |a_k||b_k| (fp32 inputs) and the same s0 in both,
 *   |bf16 - fp32| <= (2u + u^2) S + g_{K+1} ((1 + 2u + u^2) S + |s0|)
 *                                  + g_{K+1} (S + |s0|)
 *                 <= (2^-7 + 2^-16) S + 2.01 g_{K+1} (S + |s0|).
 * The first term dominates (7.8e-3 S); the second is 1.2e-4 S at K = 1000. */
static double bound(double S, double s0, long K) {
  double gn = (K + 1) * ldexp(1.0, -24);
  gn = gn / (1.0 - gn);
  return (ldexp(1.0, -7) + ldexp(1.0, -16)) * S + 2.01 * gn * (S + fabs(s0));
}

static void to16(uint16_t *h, const float *x, long n) {
  for (long i = 0; i < n; i++) h[i] = rp_bf16_from_f32(x[i]);
}

static void test_within_bf16_bound_of_fp32(void **state) {
  (void)state;
  rp_pool *p2 = ta_pool(2);
  rp_rng rng;
  rp_rng_seed(&rng, 25);
  const shp cases[2] = {{64, 384, 96}, {33, 129, 70}};
  for (int ci = 0; ci < 2; ci++) {
    const int N = cases[ci].N, IC = cases[ci].IC, OC = cases[ci].OC;
    long ni = (long)N * IC, nw = (long)OC * IC, no = (long)N * OC;
    float *inp = ta_floats(ni), *w = ta_floats(nw), *bias = ta_floats(OC);
    float *dout = ta_floats(no), *g0[3] = {ta_floats(ni), ta_floats(nw), ta_floats(OC)};
    ta_fill(inp, ni, &rng, -2, 2);
    ta_fill(w, nw, &rng, -0.1f, 0.1f);
    ta_fill(bias, OC, &rng, -1, 1);
    ta_fill(dout, no, &rng, -1e-3f, 1e-3f);
    ta_fill(g0[0], ni, &rng, -1e-3f, 1e-3f);
    ta_fill(g0[1], nw, &rng, -1e-2f, 1e-2f);
    ta_fill(g0[2], OC, &rng, -1e-2f, 1e-2f);
    uint16_t *inp16 = bt_halves(ni), *w16 = bt_halves(nw), *dout16 = bt_halves(no);
    to16(inp16, inp, ni), to16(w16, w, nw), to16(dout16, dout, no);

    float *out = ta_floats(no), *out32 = ta_floats(no);
    rp_matmul_bf16_forward(out, inp16, w16, bias, N, IC, OC, p2);
    rp_matmul_forward_ref(out32, inp, w, bias, N, IC, OC);
    double worst = 0.0;
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) {
        double S = 0.0;
        for (int i = 0; i < IC; i++) S += fabs((double)inp[n * IC + i] * w[o * IC + i]);
        double err = fabs((double)out[n * OC + o] - out32[n * OC + o]);
        double r = err / bound(S, bias[o], IC);
        worst = fmax(worst, r);
        assert_true(r <= 1.0);
      }
    fprintf(stderr, "forward N=%d IC=%d OC=%d: max |err| / bound = %.3f\n", N, IC, OC, worst);
    assert_true(worst > 0.0); /* rounding really happened: the check is not vacuous */

    float *g[3] = {ta_floats(ni), ta_floats(nw), ta_floats(OC)};
    float *r32[3] = {ta_floats(ni), ta_floats(nw), ta_floats(OC)};
    const long len[3] = {ni, nw, OC};
    for (int q = 0; q < 3; q++) {
      memcpy(g[q], g0[q], sizeof(float) * (size_t)len[q]);
      memcpy(r32[q], g0[q], sizeof(float) * (size_t)len[q]);
    }
    rp_matmul_bf16_backward(g[0], g[1], g[2], dout16, inp16, w16, N, IC, OC, p2);
    rp_matmul_backward_ref(r32[0], r32[1], r32[2], dout, inp, w, N, IC, OC);
    double wd[3] = {0, 0, 0};
    for (int n = 0; n < N; n++)
      for (int i = 0; i < IC; i++) {
        double S = 0.0;
        for (int o = 0; o < OC; o++) S += fabs((double)dout[n * OC + o] * w[o * IC + i]);
        long e = (long)n * IC + i;
        double r = fabs((double)g[0][e] - r32[0][e]) / bound(S, g0[0][e], OC);
        wd[0] = fmax(wd[0], r);
        assert_true(r <= 1.0);
      }
    for (int o = 0; o < OC; o++)
      for (int i = 0; i < IC; i++) {
        double S = 0.0;
        for (int n = 0; n < N; n++) S += fabs((double)dout[n * OC + o] * inp[n * IC + i]);
        long e = (long)o * IC + i;
        double r = fabs((double)g[1][e] - r32[1][e]) / bound(S, g0[1][e], N);
        wd[1] = fmax(wd[1], r);
        assert_true(r <= 1.0);
      }
    for (int o = 0; o < OC; o++) {
      /* dbias sums dout rounded to bf16: each term carries u, no product */
      double S = 0.0;
      for (int n = 0; n < N; n++) S += fabs((double)dout[n * OC + o]);
      double gn = (N + 1) * ldexp(1.0, -24) / (1.0 - (N + 1) * ldexp(1.0, -24));
      double b = ldexp(1.0, -8) * S + 2.01 * gn * (S + fabs(g0[2][o]));
      double r = fabs((double)g[2][o] - r32[2][o]) / b;
      wd[2] = fmax(wd[2], r);
      assert_true(r <= 1.0);
    }
    fprintf(stderr, "backward: max |err| / bound: dinp %.3f dweight %.3f dbias %.3f\n", wd[0],
            wd[1], wd[2]);
    assert_true(wd[0] > 0.0 && wd[1] > 0.0 && wd[2] > 0.0);
    for (int q = 0; q < 3; q++) free(g[q]), free(r32[q]), free(g0[q]);
    free(inp), free(w), free(bias), free(dout), free(inp16), free(w16), free(dout16);
    free(out), free(out32);
  }
  rp_pool_destroy(p2);
}

static void test_kernel_choice(void **state) {
  (void)state;
  assert_int_equal(rp_bf16_set_kernel((rp_bf16_kernel)7), RP_EINVAL);
  assert_true(strstr(rp_errmsg(), "7") != NULL);
  assert_int_equal(rp_bf16_set_kernel(RP_BF16_KERNEL_PORTABLE), RP_OK);
  assert_int_equal(rp_bf16_kernel_active(), RP_BF16_KERNEL_PORTABLE);
  assert_int_equal(rp_bf16_set_kernel(RP_BF16_KERNEL_AUTO), RP_OK);
  rp_bf16_kernel a = rp_bf16_kernel_active();
  assert_true(a != RP_BF16_KERNEL_AUTO && rp_bf16_kernel_supported(a));
  rp_bf16_force_portable(1);
  assert_int_equal(rp_bf16_kernel_active(), RP_BF16_KERNEL_PORTABLE);
  rp_bf16_force_portable(0);
  assert_int_equal(rp_bf16_kernel_active(), a);
  double fma = -1, dp = -1;
  rp_bf16_peak_gflops(&fma, &dp);
  assert_true(fma >= 0.0 && dp >= 0.0);
  assert_true((fma > 0.0) == (rp_bf16_kernel_supported(RP_BF16_KERNEL_AVX512_FMA) != 0));
  assert_true((dp > 0.0) == (rp_bf16_kernel_supported(RP_BF16_KERNEL_AVX512_BF16) != 0));
  double amx = rp_isa_peak_gflops(RP_ISA_AMX);
  assert_true((amx > 0.0) == (rp_bf16_kernel_supported(RP_BF16_KERNEL_AMX) != 0));
  for (int k = 1; k <= RP_BF16_KERNEL_LAST; k++)
    if (!rp_bf16_kernel_supported((rp_bf16_kernel)k))
      assert_int_equal(rp_bf16_set_kernel((rp_bf16_kernel)k), RP_EINVAL);
  fprintf(stderr, "auto kernel: %s (peak fp32 FMA %.1f, vdpbf16ps %.1f, tdpbf16ps %.1f GFLOP/s)\n",
          rp_bf16_kernel_name(a), fma, dp, amx);
  rp_bf16_wpack wp;
  assert_int_equal(rp_bf16_wpack_init(&wp, 0, 4), RP_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernel_choice),
      cmocka_unit_test(test_forward_equals_ref),
      cmocka_unit_test(test_backward_equals_ref),
      cmocka_unit_test(test_packed_equals_ref),
      cmocka_unit_test(test_backward_set_equals_memset),
      cmocka_unit_test(test_f32_operands_equal_rounded),
      cmocka_unit_test(test_order_is_visible),
      cmocka_unit_test(test_within_bf16_bound_of_fp32),
  };
  bt_report_skipped("bf16_gemm");
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rp_bf16_workspace_release();
  return rc;
}
