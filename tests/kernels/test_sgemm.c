/* ringpipe's own fp32 GEMM (rp_sgemm.h): every kernel the ISA ceiling allows
 * (portable, avx2, avx512) against the reference loops in double, on shapes
 * with ragged edges on every side (rows not a multiple of MR, columns not of
 * NR, odd K, K = 0), with bias, residual (aliased and not), accumulate and set;
 * results bitwise equal for 1, 2 and 3 threads, and for 2 with either thread
 * held back so that the other takes its tiles; the epilogue sees each row
 * once; past the driver's size limits (a weight like an LM head's, a big
 * dweight) the other loop orders hold to the same; the matmul entry points in
 * RP_GEMM_OWN mode are these calls. Everything runs twice, under the k blocking
 * of a 1 MiB L2 and of a 2 MiB one (the avx512 kernel's kc is 192 or 384), and
 * the two are checked to be different sums. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/fused_internal.h"
#include "kernels/sgemm_internal.h"
#include "kernels/work_range.h"
#include "kt_util.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_sgemm.h"

typedef struct {
  int N, IC, OC;
} shape;

/* Edges of every tile size: MR 4/6/12, NR 16/32; K odd, above one k block
 * (kc 192/256) and not a multiple of it; the dweight column split (IC > OC)
 * and row split; more than one B block of panels (IC > 16 * 32); a prepacked
 * B over several k blocks in more than one column group (300 x 700 at kc 192;
 * 700 x 1000, forward and dinp, at kc 192 and 384). */
static const shape shapes[] = {
    {1, 1, 1},    {5, 7, 3},     {13, 33, 17},  {25, 31, 65},   {37, 200, 48},
    {64, 385, 96}, {50, 96, 600}, {30, 520, 40}, {129, 64, 130}, {40, 1030, 20},
    {29, 300, 700}, {31, 700, 1000},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

/* Each output is a sum of K products of |x| <= 1; its float rounding error is
 * about sqrt(K) roundings of partial sums of size about sqrt(K) (random signs):
 * the bound allows 2^-22 * K^1.5, while one wrong or missing term is off by
 * about 1/3 on average. */
static double tol_of(int K) { return 2.4e-7 * K * sqrt((double)K) + 1e-6; }

static double *fwd_want(const float *inp, const float *w, const float *b, const float *resid,
                        int N, int IC, int OC) {
  double *o = kt_doubles((long)N * OC);
  for (long n = 0; n < N; n++)
    for (long j = 0; j < OC; j++) {
      double s = (b ? b[j] : 0.0) + (resid ? resid[n * OC + j] : 0.0);
      for (long i = 0; i < IC; i++) s += (double)inp[n * IC + i] * w[j * IC + i];
      o[n * OC + j] = s;
    }
  return o;
}

static int close_to(const char *what, const float *got, const double *want, long n, int K) {
  return kt_check_close(what, got, want, n, 0.0, tol_of(K));
}

static void check_forward(rp_sgemm_kernel k, const shape *s, rp_pool *pool, rp_rng *rng) {
  const int N = s->N, IC = s->IC, OC = s->OC;
  float *inp = ta_floats((long)N * IC), *w = ta_floats((long)OC * IC), *b = ta_floats(OC);
  float *out = ta_floats((long)N * OC), *res = ta_floats((long)N * OC);
  ta_fill(inp, (long)N * IC, rng, -1, 1);
  ta_fill(w, (long)OC * IC, rng, -1, 1);
  ta_fill(b, OC, rng, -1, 1);
  ta_fill(res, (long)N * OC, rng, -1, 1);
  double *want = fwd_want(inp, w, b, NULL, N, IC, OC);
  rp_sgemm_forward(k, out, inp, w, b, NULL, N, IC, OC, pool);
  assert_int_equal(close_to("forward+bias", out, want, (long)N * OC, IC), 0);
  free(want);
  want = fwd_want(inp, w, NULL, NULL, N, IC, OC);
  rp_sgemm_forward(k, out, inp, w, NULL, NULL, N, IC, OC, pool);
  assert_int_equal(close_to("forward", out, want, (long)N * OC, IC), 0);
  free(want);
  /* residual into a separate output, then in place (out aliases resid) */
  want = fwd_want(inp, w, b, res, N, IC, OC);
  rp_sgemm_forward(k, out, inp, w, b, res, N, IC, OC, pool);
  assert_int_equal(close_to("forward+resid", out, want, (long)N * OC, IC), 0);
  memcpy(out, res, sizeof(float) * (size_t)N * OC);
  rp_sgemm_forward(k, out, inp, w, b, out, N, IC, OC, pool);
  assert_int_equal(close_to("forward+resid in place", out, want, (long)N * OC, IC), 0);
  free(want);
  free(inp), free(w), free(b), free(out), free(res);
}

static void check_backward(rp_sgemm_kernel k, const shape *s, rp_pool *pool, rp_rng *rng) {
  const int N = s->N, IC = s->IC, OC = s->OC;
  float *inp = ta_floats((long)N * IC), *w = ta_floats((long)OC * IC);
  float *dout = ta_floats((long)N * OC);
  float *dinp = ta_floats((long)N * IC), *dw = ta_floats((long)OC * IC), *db = ta_floats(OC);
  float *dinp0 = ta_floats((long)N * IC), *dw0 = ta_floats((long)OC * IC), *db0 = ta_floats(OC);
  ta_fill(inp, (long)N * IC, rng, -1, 1);
  ta_fill(w, (long)OC * IC, rng, -1, 1);
  ta_fill(dout, (long)N * OC, rng, -1, 1);
  ta_fill(dinp0, (long)N * IC, rng, -1, 1);
  ta_fill(dw0, (long)OC * IC, rng, -1, 1);
  ta_fill(db0, OC, rng, -1, 1);
  double *wdi = kt_doubles((long)N * IC), *wdw = kt_doubles((long)OC * IC);
  double *wdb = kt_doubles(OC);
  for (long n = 0; n < N; n++)
    for (long i = 0; i < IC; i++) {
      double a = 0;
      for (long o = 0; o < OC; o++) a += (double)dout[n * OC + o] * w[o * IC + i];
      wdi[n * IC + i] = a;
    }
  for (long o = 0; o < OC; o++) {
    double sb = db0[o];
    for (long n = 0; n < N; n++) sb += dout[n * OC + o];
    wdb[o] = sb;
    for (long i = 0; i < IC; i++) {
      double a = dw0[o * IC + i];
      for (long n = 0; n < N; n++) a += (double)dout[n * OC + o] * inp[n * IC + i];
      wdw[o * IC + i] = a;
    }
  }
  /* set: dinp is written (start from NaN to prove it is never read) */
  for (long i = 0; i < (long)N * IC; i++) dinp[i] = NAN;
  memcpy(dw, dw0, sizeof(float) * (size_t)OC * IC);
  memcpy(db, db0, sizeof(float) * (size_t)OC);
  rp_sgemm_backward(k, dinp, dw, db, dout, inp, w, N, IC, OC, 1, pool);
  assert_int_equal(close_to("dinp (set)", dinp, wdi, (long)N * IC, OC), 0);
  assert_int_equal(close_to("dweight", dw, wdw, (long)OC * IC, N), 0);
  assert_int_equal(close_to("dbias", db, wdb, OC, N), 0);
  /* accumulate: dinp += */
  memcpy(dinp, dinp0, sizeof(float) * (size_t)N * IC);
  for (long i = 0; i < (long)N * IC; i++) wdi[i] += dinp0[i];
  rp_sgemm_backward(k, dinp, NULL, NULL, dout, inp, w, N, IC, OC, 0, pool);
  assert_int_equal(close_to("dinp (+=)", dinp, wdi, (long)N * IC, OC), 0);
  free(inp), free(w), free(dout), free(dinp), free(dw), free(db);
  free(dinp0), free(dw0), free(db0), free(wdi), free(wdw), free(wdb);
}

static void test_sgemm_against_reference(void **state) {
  (void)state;
  rp_pool *pools[2] = {NULL, ta_pool(2)};
  int tested = 0;
  for (int k = 0; k < RP_SGEMM_KERNELS; k++) {
    if (!rp_sgemm_kernel_supported((rp_sgemm_kernel)k)) {
      printf("sgemm kernel %s: not allowed by the ISA ceiling here, skipped\n",
             rp_sgemm_kernel_name((rp_sgemm_kernel)k));
      continue;
    }
    tested++;
    for (int p = 0; p < 2; p++)
      for (int s = 0; s < NSHAPES; s++) {
        rp_rng rng;
        rp_rng_seed(&rng, 100 + (uint64_t)s);
        check_forward((rp_sgemm_kernel)k, &shapes[s], pools[p], &rng);
        check_backward((rp_sgemm_kernel)k, &shapes[s], pools[p], &rng);
      }
  }
  assert_true(tested >= 1); /* the portable kernel runs everywhere */
  rp_pool_destroy(pools[1]);
}

/* K = 0: the sums are empty; out becomes the bias, or zero without one. */
static void test_sgemm_empty_k(void **state) {
  (void)state;
  const int N = 13, OC = 37;
  float b[37], out[13 * 37], unused[1] = {0};
  for (int j = 0; j < OC; j++) b[j] = (float)j;
  for (int k = 0; k < RP_SGEMM_KERNELS; k++) {
    if (!rp_sgemm_kernel_supported((rp_sgemm_kernel)k)) continue;
    for (int i = 0; i < N * OC; i++) out[i] = NAN;
    rp_sgemm_forward((rp_sgemm_kernel)k, out, unused, unused, b, NULL, N, 0, OC, NULL);
    for (int i = 0; i < N * OC; i++) assert_true(out[i] == b[i % OC]);
    rp_sgemm_forward((rp_sgemm_kernel)k, out, unused, unused, NULL, NULL, N, 0, OC, NULL);
    for (int i = 0; i < N * OC; i++) assert_true(out[i] == 0.0f);
  }
}

/* Every C element is one sum in one order, so 1, 2 and 3 threads (and every
 * row split they make) agree bitwise. */
static void test_sgemm_thread_invariance(void **state) {
  (void)state;
  const int N = 203, IC = 389, OC = 171;
  rp_rng rng;
  rp_rng_seed(&rng, 7);
  float *inp, *w, *b;
  kt_linear_operands(&rng, N, IC, OC, &inp, &w, &b);
  float *dout = ta_floats((long)N * OC);
  ta_fill(dout, (long)N * OC, &rng, -1, 1);
  rp_pool *pools[3] = {NULL, ta_pool(2), ta_pool(3)};
  for (int k = 0; k < RP_SGEMM_KERNELS; k++) {
    if (!rp_sgemm_kernel_supported((rp_sgemm_kernel)k)) continue;
    float *out[3], *dinp[3], *dw[3], *db[3];
    for (int p = 0; p < 3; p++) {
      out[p] = ta_floats((long)N * OC), dinp[p] = ta_floats((long)N * IC);
      dw[p] = ta_floats((long)OC * IC), db[p] = ta_floats(OC);
      rp_sgemm_forward((rp_sgemm_kernel)k, out[p], inp, w, b, NULL, N, IC, OC, pools[p]);
      rp_sgemm_backward((rp_sgemm_kernel)k, dinp[p], dw[p], db[p], dout, inp, w, N, IC, OC, 1,
                        pools[p]);
    }
    for (int p = 1; p < 3; p++) {
      assert_memory_equal(out[0], out[p], sizeof(float) * (size_t)N * OC);
      assert_memory_equal(dinp[0], dinp[p], sizeof(float) * (size_t)N * IC);
      assert_memory_equal(dw[0], dw[p], sizeof(float) * (size_t)OC * IC);
      assert_memory_equal(db[0], db[p], sizeof(float) * (size_t)OC);
    }
    /* rows 50.. alone (as a rank holding part of the batch would compute them) */
    float *part = ta_floats((long)N * OC);
    rp_sgemm_forward((rp_sgemm_kernel)k, part, inp + 50L * IC, w, b, NULL, N - 50, IC, OC,
                     pools[1]);
    assert_memory_equal(part, out[0] + 50L * OC, sizeof(float) * (size_t)(N - 50) * OC);
    free(part);
    for (int p = 0; p < 3; p++) free(out[p]), free(dinp[p]), free(dw[p]), free(db[p]);
  }
  rp_pool_destroy(pools[1]);
  rp_pool_destroy(pools[2]);
  free(inp), free(w), free(b), free(dout);
}

/* Past the driver's size limits: a weight over 16 MiB (the forward packs the
 * input and splits the weight's rows among threads, as for an LM head; dinp
 * packs the weight block by block inside the job instead of whole) and a
 * dweight whose revisited block (a thread's 4100 / nth rows by 768 columns)
 * is past four L2s on one thread (12.6 MB: B packed whole, rows outermost)
 * and, under the 2 MiB L2's blocking, not on 2 or 3 (6.3 and 4.2 MB: B packed
 * on the fly); under the 1 MiB one all three prepack. Against the reference
 * (2 threads) and bitwise across thread counts, so across the two orders. */
static void test_sgemm_big_operands(void **state) {
  (void)state;
  const shape big = {37, 1030, 4100};
  rp_pool *pools[3] = {NULL, ta_pool(2), ta_pool(3)};
  for (int k = 0; k < RP_SGEMM_KERNELS; k++) {
    if (!rp_sgemm_kernel_supported((rp_sgemm_kernel)k)) continue;
    rp_rng rng;
    rp_rng_seed(&rng, 41);
    check_forward((rp_sgemm_kernel)k, &big, pools[1], &rng);
    check_backward((rp_sgemm_kernel)k, &big, pools[1], &rng);
    const int N = big.N, IC = big.IC, OC = big.OC;
    float *inp = ta_floats((long)N * IC), *w = ta_floats((long)OC * IC);
    float *dout = ta_floats((long)N * OC);
    ta_fill(inp, (long)N * IC, &rng, -1, 1);
    ta_fill(w, (long)OC * IC, &rng, -1, 1);
    ta_fill(dout, (long)N * OC, &rng, -1, 1);
    float *out[3], *dw[3], *dinp[3];
    for (int p = 0; p < 3; p++) {
      out[p] = ta_floats((long)N * OC), dw[p] = ta_floats((long)OC * IC);
      dinp[p] = ta_floats((long)N * IC);
      rp_sgemm_forward((rp_sgemm_kernel)k, out[p], inp, w, NULL, NULL, N, IC, OC, pools[p]);
      rp_sgemm_backward((rp_sgemm_kernel)k, dinp[p], dw[p], NULL, dout, inp, w, N, IC, OC, 1,
                        pools[p]);
    }
    for (int p = 1; p < 3; p++) {
      assert_memory_equal(out[0], out[p], sizeof(float) * (size_t)N * OC);
      assert_memory_equal(dw[0], dw[p], sizeof(float) * (size_t)OC * IC);
      assert_memory_equal(dinp[0], dinp[p], sizeof(float) * (size_t)N * IC);
    }
    for (int p = 0; p < 3; p++) free(out[p]), free(dw[p]), free(dinp[p]);
    free(inp), free(w), free(dout);
  }
  rp_pool_destroy(pools[1]);
  rp_pool_destroy(pools[2]);
}

typedef struct {
  int *seen; /* per element of out */
  const float *out;
  int OC;
  int bad;
} epi_ctx;

static void epi_mark(void *vctx, long m0, long m1, long j0, long j1, int ith) {
  epi_ctx *c = vctx;
  (void)ith;
  for (long r = m0; r < m1; r++)
    for (long j = j0; j < j1; j++) {
      __atomic_fetch_add(&c->seen[r * c->OC + j], 1, __ATOMIC_RELAXED);
      /* the block is finished when the epilogue sees it */
      if (c->out[r * c->OC + j] != c->out[r * c->OC + j]) c->bad = 1;
    }
}

/* Every element of out reaches the epilogue once, finished, whether the
 * threads split rows (a weight smaller than the input) or columns (a wider
 * one, N 40 x IC 24 -> OC 200), on 2 and 3 threads. */
static void test_sgemm_epilogue_blocks(void **state) {
  (void)state;
  const int dims[2][3] = {{77, 40, 50}, {40, 24, 200}};
  for (int s = 0; s < 2; s++)
    for (int nth = 2; nth <= 3; nth++) {
      const int N = dims[s][0], IC = dims[s][1], OC = dims[s][2];
      rp_rng rng;
      rp_rng_seed(&rng, 3);
      float *inp = ta_floats((long)N * IC), *w = ta_floats((long)OC * IC);
      float *out = ta_floats((long)N * OC), *ref = ta_floats((long)N * OC);
      int *seen = calloc((size_t)N * OC, sizeof(int));
      ta_fill(inp, (long)N * IC, &rng, -1, 1);
      ta_fill(w, (long)OC * IC, &rng, -1, 1);
      rp_pool *pool = ta_pool(nth);
      for (int k = 0; k < RP_SGEMM_KERNELS; k++) {
        if (!rp_sgemm_kernel_supported((rp_sgemm_kernel)k)) continue;
        memset(seen, 0, sizeof(int) * (size_t)N * OC);
        for (int i = 0; i < N * OC; i++) out[i] = NAN;
        epi_ctx c = {seen, out, OC, 0};
        rp_sgemm_forward_epi((rp_sgemm_kernel)k, out, inp, w, NULL, N, IC, OC, pool, epi_mark,
                             &c);
        for (int i = 0; i < N * OC; i++) assert_int_equal(seen[i], 1);
        assert_int_equal(c.bad, 0);
        rp_sgemm_forward((rp_sgemm_kernel)k, ref, inp, w, NULL, NULL, N, IC, OC, pool);
        assert_memory_equal(out, ref, sizeof(float) * (size_t)N * OC);
      }
      rp_pool_destroy(pool);
      free(inp), free(w), free(out), free(ref), free(seen);
    }
}

/* A layer's random operands: its input, weight and output gradient. */
typedef struct {
  float *inp, *w, *dout;
} operands;

static operands random_operands(int N, int IC, int OC, uint64_t seed) {
  rp_rng rng;
  rp_rng_seed(&rng, seed);
  operands o = {ta_floats((long)N * IC), ta_floats((long)OC * IC), ta_floats((long)N * OC)};
  ta_fill(o.inp, (long)N * IC, &rng, -1, 1);
  ta_fill(o.w, (long)OC * IC, &rng, -1, 1);
  ta_fill(o.dout, (long)N * OC, &rng, -1, 1);
  return o;
}

static void free_operands(operands *o) { free(o->inp), free(o->w), free(o->dout); }

/* Every shared product: one thread held back at the start of each until
 * the other has taken some of its work (rp_work_set_straggler); bitwise the one-thread results, units
 * counted as taken, with the caller as the straggler and with the worker.
 * The shapes take each way of sharing (sgemm_driver.c): the forward with
 * rows and with columns split (B prepacked); dinp; dweight with B on the fly
 * and rows split (k-order: IC <= OC, and N over several k blocks), with
 * columns split (IC > OC: panels); and the big weight's forward (columns, A
 * prepacked) and dinp (B on the fly, k-order), with dweight prepacked or not
 * as this machine's L2 decides. */
static void test_sgemm_straggler(void **state) {
  (void)state;
  const shape cases[5] = {{1000, 96, 200}, {100, 64, 1200}, {900, 40, 300}, {64, 1200, 100},
                          {37, 1030, 4100}};
  rp_pool *pool = ta_pool(2);
  for (int k = 0; k < RP_SGEMM_KERNELS; k++) {
    if (!rp_sgemm_kernel_supported((rp_sgemm_kernel)k)) continue;
    for (int s = 0; s < 5; s++)
      for (int late = 0; late < 2; late++) {
        const int N = cases[s].N, IC = cases[s].IC, OC = cases[s].OC;
        operands op = random_operands(N, IC, OC, 11);
        const float *inp = op.inp, *w = op.w, *dout = op.dout;
        float *out[2], *dinp[2], *dw[2];
        for (int p = 0; p < 2; p++) {
          out[p] = ta_floats((long)N * OC), dinp[p] = ta_floats((long)N * IC);
          dw[p] = ta_floats((long)OC * IC);
          const double hold = p ? RP_WORK_TEST_HOLD_S : 0.0; /* each product's own hold */
          long before = rp_work_units_taken();
          rp_work_set_straggler(late, hold);
          rp_sgemm_forward((rp_sgemm_kernel)k, out[p], inp, w, NULL, NULL, N, IC, OC,
                           p ? pool : NULL);
          if (p) assert_true(rp_work_units_taken() > before);
          before = rp_work_units_taken();
          rp_work_set_straggler(late, hold);
          rp_sgemm_backward((rp_sgemm_kernel)k, dinp[p], NULL, NULL, dout, inp, w, N, IC, OC, 1,
                            p ? pool : NULL);
          if (p) assert_true(rp_work_units_taken() > before);
          before = rp_work_units_taken();
          rp_work_set_straggler(late, hold);
          rp_sgemm_backward((rp_sgemm_kernel)k, NULL, dw[p], NULL, dout, inp, w, N, IC, OC, 1,
                            p ? pool : NULL);
          if (p) assert_true(rp_work_units_taken() > before);
          rp_work_set_straggler(0, 0.0);
        }
        assert_memory_equal(out[0], out[1], sizeof(float) * (size_t)N * OC);
        assert_memory_equal(dinp[0], dinp[1], sizeof(float) * (size_t)N * IC);
        assert_memory_equal(dw[0], dw[1], sizeof(float) * (size_t)OC * IC);
        for (int p = 0; p < 2; p++) free(out[p]), free(dinp[p]), free(dw[p]);
        free_operands(&op);
      }
  }
  rp_pool_destroy(pool);
}

/* dinp's epilogue with an in-order part (rp_sgemm_epi), as the GELU backward
 * uses it: half = dinp / 2 elementwise, and colsum[j] += half[m][j] over the
 * rows in order. */
typedef struct {
  float *half, *colsum;
  const float *dinp;
  long *next_row; /* per column: the row its in-order sum expects next */
  int IC, bad;
  int slow_thief, slow_owner; /* a pool thread that sleeps in `any` / in `both`, or -1 */
} order_epi;

static void order_half(order_epi *e, long m0, long m1, long j0, long j1) {
  for (long m = m0; m < m1; m++)
    for (long j = j0; j < j1; j++) e->half[m * e->IC + j] = e->dinp[m * e->IC + j] * 0.5f;
}

/* half starts as NaN: a sum that reads one has run before the block's
 * elementwise part */
static void order_sum(order_epi *e, long m0, long m1, long j0, long j1) {
  for (long j = j0; j < j1; j++) {
    if (e->next_row[j] != m0) e->bad = 1;
    e->next_row[j] = m1;
  }
  for (long m = m0; m < m1; m++)
    for (long j = j0; j < j1; j++) {
      if (e->half[m * e->IC + j] != e->half[m * e->IC + j]) e->bad = 1;
      e->colsum[j] += e->half[m * e->IC + j];
    }
}

static void order_both(void *ctx, long m0, long m1, long j0, long j1, int ith) {
  order_epi *e = ctx;
  if (ith == e->slow_owner) kt_sleep_ms(4);
  order_half(ctx, m0, m1, j0, j1);
  order_sum(ctx, m0, m1, j0, j1);
}

static void order_any(void *ctx, long m0, long m1, long j0, long j1, int ith) {
  order_epi *e = ctx;
  if (ith == e->slow_thief) kt_sleep_ms(40);
  order_half(ctx, m0, m1, j0, j1);
}

static void order_only(void *ctx, long m0, long m1, long j0, long j1, int ith) {
  (void)ith;
  order_sum(ctx, m0, m1, j0, j1);
}

/* One dinp with the in-order epilogue, thread `late` held back until
 * another takes from its share (at most `hold` seconds; and the slow thief
 * and owner of order_epi): every column's rows
 * reach the in-order sum once, in order, each after its elementwise part. */
typedef struct {
  float *dinp, *half, *colsum;
} order_out;

static void run_ordered(rp_sgemm_kernel k, rp_pool *pool, const operands *op, int N, int IC,
                        int OC, const order_out *o, int late, double hold, int slow_thief,
                        int slow_owner) {
  order_epi e = {o->half, o->colsum, o->dinp, calloc((size_t)IC, sizeof(long)), IC, 0,
                 slow_thief, slow_owner};
  const rp_sgemm_epi epi = {order_both, order_any, order_only, &e};
  rp_work_set_straggler(late, hold);
  rp_sgemm_backward_epi(k, o->dinp, NULL, NULL, op->dout, op->inp, op->w, N, IC, OC, 1, pool,
                        &epi);
  rp_work_set_straggler(0, 0.0);
  assert_false(e.bad);
  for (int j = 0; j < IC; j++) assert_int_equal(e.next_row[j], N);
  free(e.next_row);
}

/* With one thread held back, the other takes row blocks of its columns: the
 * column sums still see every row once and in order, bitwise one thread's. */
static void test_sgemm_ordered_epilogue_straggler(void **state) {
  (void)state;
  const int N = 700, IC = 256, OC = 96;
  rp_pool *pool = ta_pool(2);
  operands op = random_operands(N, IC, OC, 29);
  for (int k = 0; k < RP_SGEMM_KERNELS; k++) {
    if (!rp_sgemm_kernel_supported((rp_sgemm_kernel)k)) continue;
    for (int late = 0; late < 2; late++) {
      float *dinp[2], *half[2], *colsum[2];
      for (int p = 0; p < 2; p++) {
        dinp[p] = ta_floats((long)N * IC), half[p] = ta_floats((long)N * IC);
        colsum[p] = ta_floats(IC);
        const long before = rp_work_units_taken();
        const order_out o = {dinp[p], half[p], colsum[p]};
        run_ordered((rp_sgemm_kernel)k, p ? pool : NULL, &op, N, IC, OC, &o, late,
                    p ? RP_WORK_TEST_HOLD_S : 0.0, -1, -1);
        if (p) assert_true(rp_work_units_taken() > before);
      }
      assert_memory_equal(dinp[0], dinp[1], sizeof(float) * (size_t)N * IC);
      assert_memory_equal(half[0], half[1], sizeof(float) * (size_t)N * IC);
      assert_memory_equal(colsum[0], colsum[1], sizeof(float) * (size_t)IC);
      for (int p = 0; p < 2; p++) free(dinp[p]), free(half[p]), free(colsum[p]);
    }
  }
  free_operands(&op);
  rp_pool_destroy(pool);
}

/* Three owners of columns, each losing the back of its rows to thieves: an
 * owner's in-order sums wait for its own tiles' thieves, not for the same
 * rows of another owner's columns. Thread 0 is slow on its own blocks (so
 * thread 2 takes its back rows), thread 2 slow as a thief, and thread 1 held
 * back at the start (so thread 0, done with its own, takes thread 1's back
 * rows, the same tile numbers, quickly): thread 0's sums must still wait for
 * thread 2. (The tiles' done marks were once one array for all owners, and
 * under load the GELU's bias gradient came out different.) */
static void test_sgemm_ordered_epilogue_three_owners(void **state) {
  (void)state;
  const int N = 700, IC = 256, OC = 96;
  const rp_sgemm_kernel k = (rp_sgemm_kernel)rp_sgemm_kernel_best();
  if ((int)k < 0) return;
  rp_pool *pool = ta_pool(3);
  operands op = random_operands(N, IC, OC, 31);
  float *dinp[2], *half[2], *colsum[2];
  for (int p = 0; p < 2; p++) {
    dinp[p] = ta_floats((long)N * IC), half[p] = ta_floats((long)N * IC);
    colsum[p] = ta_floats(IC);
    for (long i = 0; i < (long)N * IC; i++) half[p][i] = NAN;
    const order_out o = {dinp[p], half[p], colsum[p]};
    run_ordered(k, p ? pool : NULL, &op, N, IC, OC, &o, 1, p ? RP_WORK_TEST_HOLD_S : 0.0,
                p ? 2 : -1, p ? 0 : -1);
  }
  assert_memory_equal(colsum[0], colsum[1], sizeof(float) * (size_t)IC);
  for (int p = 0; p < 2; p++) free(dinp[p]), free(half[p]), free(colsum[p]);
  free_operands(&op);
  rp_pool_destroy(pool);
}

/* RP_GEMM_OWN: rp_matmul_* are the rp_sgemm calls of the best kernel (bitwise). */
static void test_matmul_own_mode(void **state) {
  (void)state;
  int best = rp_sgemm_kernel_best();
  if (best < 0) {
    printf("no own GEMM kernel at this ISA ceiling: rp_matmul_* use OpenBLAS, skipped\n");
    return;
  }
  const int N = 96, IC = 70, OC = 90;
  rp_rng rng;
  rp_rng_seed(&rng, 5);
  float *inp, *w, *b;
  kt_linear_operands(&rng, N, IC, OC, &inp, &w, &b);
  float *dout = ta_floats((long)N * OC);
  float *o1 = ta_floats((long)N * OC), *o2 = ta_floats((long)N * OC);
  float *d1 = ta_floats((long)N * IC), *d2 = ta_floats((long)N * IC);
  float *w1 = ta_floats((long)OC * IC), *w2 = ta_floats((long)OC * IC);
  ta_fill(dout, (long)N * OC, &rng, -1, 1);
  rp_pool *pool = ta_pool(2);
  rp_gemm_set_mode(pool, RP_GEMM_OWN);
  assert_int_equal(rp_gemm_get_mode(pool), RP_GEMM_OWN);
  rp_matmul_forward(o1, inp, w, b, N, IC, OC, pool);
  rp_sgemm_forward((rp_sgemm_kernel)best, o2, inp, w, b, NULL, N, IC, OC, pool);
  assert_memory_equal(o1, o2, sizeof(float) * (size_t)N * OC);
  rp_matmul_backward_set(d1, w1, NULL, dout, inp, w, N, IC, OC, pool);
  rp_sgemm_backward((rp_sgemm_kernel)best, d2, w2, NULL, dout, inp, w, N, IC, OC, 1, pool);
  assert_memory_equal(d1, d2, sizeof(float) * (size_t)N * IC);
  assert_memory_equal(w1, w2, sizeof(float) * (size_t)OC * IC);
  rp_pool_destroy(pool);
  free(inp), free(w), free(b), free(dout), free(o1), free(o2), free(d1), free(d2), free(w1);
  free(w2);
}

/* The auto rule in every case, whatever this machine's OpenBLAS: own takes
 * every weight where OpenBLAS's kernels are of a lower level than the own
 * kernel (a generic "Prescott" core, an inherited Haswell on AVX-512) or above
 * the ceiling (SkylakeX under RINGPIPE_ISA=avx2, which RINGPIPE_ISA cannot hold),
 * or its kernel is AVX-512 on an AMD CPU; the measured split of weights
 * against OpenBLAS's AVX-512 kernels on other CPUs; split
 * against OpenBLAS's AVX2 ones at the AVX2 level; split without an own kernel. */
static void test_auto_rule_cases(void **state) {
  (void)state;
  const struct {
    rp_isa blas;
    int own, within, amd, mode, every;
  } cases[] = {
      {RP_ISA_AVX512, RP_SGEMM_AVX512, 1, 0, RP_GEMM_OWN, 0},
      {RP_ISA_AVX512, RP_SGEMM_AVX512, 1, 1, RP_GEMM_OWN, 1},
      {RP_ISA_AVX2, RP_SGEMM_AVX512, 1, 0, RP_GEMM_OWN, 1},
      {RP_ISA_SCALAR, RP_SGEMM_AVX512, 1, 0, RP_GEMM_OWN, 1},
      {RP_ISA_AVX2, RP_SGEMM_AVX2, 1, 0, RP_GEMM_POOL_SPLIT, 0},
      {RP_ISA_AVX2, RP_SGEMM_AVX2, 1, 1, RP_GEMM_POOL_SPLIT, 0},
      {RP_ISA_SCALAR, RP_SGEMM_AVX2, 1, 0, RP_GEMM_OWN, 1},
      {RP_ISA_AVX512, RP_SGEMM_AVX2, 0, 0, RP_GEMM_OWN, 1},
      {RP_ISA_AVX512, RP_SGEMM_AVX2, 0, 1, RP_GEMM_OWN, 1},
      {RP_ISA_AVX512, -1, 0, 0, RP_GEMM_POOL_SPLIT, 0},
      {RP_ISA_AVX2, -1, 0, 1, RP_GEMM_POOL_SPLIT, 0},
      {RP_ISA_SCALAR, -1, 1, 0, RP_GEMM_POOL_SPLIT, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int every = -1;
    rp_gemm_mode m = rp_gemm_auto_rule(cases[i].blas, cases[i].own, cases[i].within,
                                       cases[i].amd, &every);
    if ((int)m != cases[i].mode || every != cases[i].every)
      fail_msg("case %zu (OpenBLAS %s, own kernel %d, within the ceiling %d, AMD %d): mode %d "
               "every weight %d, want %d %d", i, rp_isa_name(cases[i].blas), cases[i].own,
               cases[i].within, cases[i].amd, (int)m, every, cases[i].mode, cases[i].every);
  }
}

/* This process under every ceiling the CPU allows: the pool's auto mode is
 * the rule's for OpenBLAS's core and that ceiling, where the rule gives the
 * own GEMM every weight a 9 MiB one (which the measured split leaves to
 * OpenBLAS) and a narrowing backward run on it, and the mode's description
 * says why. */
static void test_auto_mode_holds_to_ceiling(void **state) {
  (void)state;
  const rp_isa ceiling = rp_isa_active();
  rp_pool *pool = ta_pool(2);
  const int N = 2048, IC = 768, OC = 3072; /* c_fc of the 124M shape: 9 MiB */
  int above_checked = 0;
  for (int l = RP_ISA_SCALAR; l <= (int)ceiling; l++) {
    assert_int_equal(rp_isa_set((rp_isa)l), RP_OK);
    const int best = rp_sgemm_kernel_best(), above = rp_blas_above_ceiling();
    assert_int_equal(above, rp_blas_core_isa() > (rp_isa)l);
    int every;
    const rp_gemm_mode want =
        rp_gemm_auto_rule(rp_blas_core_isa(), best, !above, rp_isa_cpu_is_amd(), &every);
    const char *what = rp_gemm_describe(pool);
    assert_int_equal(rp_gemm_get_mode(pool), want);
    if (want == RP_GEMM_OWN && every) {
      assert_true(rp_matmul_own_applies(pool, N, IC, OC, 0));
      assert_true(rp_matmul_own_applies(pool, N, OC, IC, 1)); /* a narrowing backward */
      assert_non_null(strstr(what, "own for every weight"));
    }
    if (best >= 0 && above) {
      assert_int_equal(want, RP_GEMM_OWN);
      assert_non_null(strstr(what, "above the ceiling"));
      above_checked = 1;
    }
    if (best < 0 && above) assert_non_null(strstr(what, "not held to the ceiling"));
    printf("ceiling %s, OpenBLAS %s (%s): gemm mode %s\n", rp_isa_name((rp_isa)l), rp_blas_core(),
           rp_isa_name(rp_blas_core_isa()), what);
  }
  assert_int_equal(rp_isa_set(ceiling), RP_OK);
  if (!above_checked)
    printf("auto above the ceiling: not reachable here (OpenBLAS %s is within every ceiling "
           "with an own kernel); test_auto_rule_cases covers it\n", rp_blas_core());
  rp_pool_destroy(pool);
}

/* The deep blocks' rule on the caches of the machines it was measured on:
 * Sapphire Rapids (48 KiB L1d, 2 MiB L2) and Zen 4 (32 KiB, 1 MiB) deep, Zen 5
 * (48 KiB, 1 MiB) 192 x 192. */
static void test_deep_blocks_rule(void **state) {
  (void)state;
  assert_int_equal(rp_sgemm_deep_blocks_rule(48L << 10, 2L << 20), 1);
  assert_int_equal(rp_sgemm_deep_blocks_rule(32L << 10, 1L << 20), 1);
  assert_int_equal(rp_sgemm_deep_blocks_rule(48L << 10, 1L << 20), 0);
  assert_int_equal(rp_sgemm_deep_blocks_rule(48L << 10, (1L << 20) + (256L << 10)), 0);
  assert_int_equal(rp_sgemm_deep_blocks_rule(32L << 10, 2L << 20), 1);
}

/* A read in place on AMD cores with a 48 KiB L1d (Zen 5) by either kernel,
 * on Intel ones (Sapphire and Emerald Rapids) by the AVX-512 kernel only;
 * packed on Zen 4 (32 KiB) */
static void test_a_inplace_rule(void **state) {
  (void)state;
  for (int zmm = 0; zmm < 2; zmm++) {
    assert_int_equal(rp_sgemm_a_inplace_rule(1, zmm, 48L << 10), 1);
    assert_int_equal(rp_sgemm_a_inplace_rule(1, zmm, 64L << 10), 1);
    assert_int_equal(rp_sgemm_a_inplace_rule(1, zmm, 32L << 10), 0);
    assert_int_equal(rp_sgemm_a_inplace_rule(0, zmm, 32L << 10), 0);
  }
  assert_int_equal(rp_sgemm_a_inplace_rule(0, 1, 48L << 10), 1);
  assert_int_equal(rp_sgemm_a_inplace_rule(0, 0, 48L << 10), 0);
}

/* Reading A in place or packing it: the same bits, on a shape with partial
 * row tiles (packed either way), several k blocks and a residual */
static void test_a_inplace_same_bits(void **state) {
  (void)state;
  const int N = 301, IC = 700, OC = 97;
  rp_pool *pool = ta_pool(2);
  operands op = random_operands(N, IC, OC, 37);
  for (int k = 0; k < RP_SGEMM_KERNELS; k++) {
    if (!rp_sgemm_kernel_supported((rp_sgemm_kernel)k)) continue;
    float *out[2], *dinp[2];
    for (int on = 0; on < 2; on++) {
      out[on] = ta_floats((long)N * OC), dinp[on] = ta_floats((long)N * IC);
      rp_sgemm_force_a_inplace(on);
      rp_sgemm_forward((rp_sgemm_kernel)k, out[on], op.inp, op.w, NULL, op.dout, N, IC, OC,
                       pool);
      rp_sgemm_backward((rp_sgemm_kernel)k, dinp[on], NULL, NULL, op.dout, op.inp, op.w, N, IC,
                        OC, 1, pool);
    }
    rp_sgemm_force_a_inplace(-1);
    assert_memory_equal(out[0], out[1], sizeof(float) * (size_t)N * OC);
    assert_memory_equal(dinp[0], dinp[1], sizeof(float) * (size_t)N * IC);
    for (int on = 0; on < 2; on++) free(out[on]), free(dinp[on]);
  }
  free_operands(&op);
  rp_pool_destroy(pool);
}

/* The machine picks the avx512 kernel's k blocks: at K = 600 the 192 x 192
 * blocks (4 x 150) and the deep ones (2 x 300) round differently, so some
 * output differs in its bits (each run is checked against the reference
 * above). */
static void test_sgemm_blockings_differ(void **state) {
  (void)state;
  if (!rp_sgemm_kernel_supported(RP_SGEMM_AVX512)) {
    printf("sgemm avx512 kernel: not allowed by the ISA ceiling here, skipped\n");
    return;
  }
  const int N = 24, IC = 600, OC = 64;
  rp_rng rng;
  rp_rng_seed(&rng, 9);
  float *inp = ta_floats((long)N * IC), *w = ta_floats((long)OC * IC);
  float *o1 = ta_floats((long)N * OC), *o2 = ta_floats((long)N * OC);
  ta_fill(inp, (long)N * IC, &rng, -1, 1);
  ta_fill(w, (long)OC * IC, &rng, -1, 1);
  rp_sgemm_force_blocks(0);
  rp_sgemm_forward(RP_SGEMM_AVX512, o1, inp, w, NULL, NULL, N, IC, OC, NULL);
  rp_sgemm_force_blocks(1);
  rp_sgemm_forward(RP_SGEMM_AVX512, o2, inp, w, NULL, NULL, N, IC, OC, NULL);
  rp_sgemm_force_blocks(-1);
  assert_true(memcmp(o1, o2, sizeof(float) * (size_t)N * OC) != 0);
  free(inp), free(w), free(o1), free(o2);
}

/* The AVX2 packs (which both vector kernels use) at every panel width 1..16
 * and the block pack's, not only the kernels' own (6, 12, 16, 32): each output
 * element is the source's (rows past `have` read as 0) or 0. pack_t's `have`
 * may exceed w (those rows are only prefetched). */
static void expect_panel(const float *out, int w, int have, long kc, const float *src, long ld,
                         int kcontig, const char *what) {
  for (long k = 0; k < kc; k++)
    for (int r = 0; r < w; r++) {
      const float want = r < have ? (kcontig ? src[r * ld + k] : src[k * ld + r]) : 0.0f;
      if (memcmp(&out[k * w + r], &want, sizeof want) != 0)
        fail_msg("%s: w=%d have=%d kc=%ld: out[%ld][%d] = %g, want %g", what, w, have, kc, k, r,
                 (double)out[k * w + r], (double)want);
    }
}

static void test_packs_every_width(void **state) {
  (void)state;
  if (!rp_isa_allows(RP_ISA_AVX2)) {
    printf("sgemm avx2 packs: not allowed by the ISA ceiling here, skipped\n");
    return;
  }
  const long kcs[] = {1, 7, 8, 9, 16, 33}, ld = 80, rows = 80;
  rp_rng rng;
  rp_rng_seed(&rng, 11);
  float *src = ta_floats(rows * ld), *out = ta_floats(4 * 64 * 33);
  ta_fill(src, rows * ld, &rng, -1, 1);
  for (int w = 1; w <= 16; w++)
    for (size_t ki = 0; ki < sizeof kcs / sizeof kcs[0]; ki++)
      for (int have = 0; have <= w + 3; have++) {
        const long kc = kcs[ki];
        memset(out, 0x7f, sizeof(float) * (size_t)(w * kc)); /* no stale zeros */
        rp_sgemm_pack_t_avx2(src, ld, have, w, kc, out);
        expect_panel(out, w, RP_MIN(have, w), kc, src, ld, 1, "pack_t");
        if (have > w) continue;
        memset(out, 0x7f, sizeof(float) * (size_t)(w * kc));
        rp_sgemm_pack_n_avx2(src, ld, have, w, kc, out);
        expect_panel(out, w, have, kc, src, ld, 0, "pack_n");
        /* three panels side by side, `have` columns of them real */
        const int np = 3, hv = RP_MIN(have + w, np * w);
        memset(out, 0x7f, sizeof(float) * (size_t)(np * w * kc));
        rp_sgemm_pack_nblock_avx2(src, ld, hv, w, np, kc, out);
        for (int p = 0; p < np; p++)
          expect_panel(out + p * kc * w, w, RP_MAX(0, RP_MIN(w, hv - p * w)), kc, src + p * w, ld,
                       0, "pack_nblock");
      }
  free(src), free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgemm_against_reference),
      cmocka_unit_test(test_sgemm_empty_k),
      cmocka_unit_test(test_sgemm_thread_invariance),
      cmocka_unit_test(test_sgemm_big_operands),
      cmocka_unit_test(test_sgemm_epilogue_blocks),
      cmocka_unit_test(test_sgemm_straggler),
      cmocka_unit_test(test_sgemm_ordered_epilogue_straggler),
      cmocka_unit_test(test_sgemm_ordered_epilogue_three_owners),
      cmocka_unit_test(test_matmul_own_mode),
      cmocka_unit_test(test_auto_rule_cases),
      cmocka_unit_test(test_auto_mode_holds_to_ceiling),
  };
  int rc = 0;
  /* every case with A packed and with A read in place (the kernels'
   * direct-A variants), under both blockings */
  for (int deep = 0; deep < 2; deep++)
    for (int inplace = 0; inplace < 2; inplace++) {
      printf("the AVX-512 kernel's %s blocks, A %s\n", deep ? "deep (kc = 384)" : "192 x 192",
             inplace ? "read in place" : "packed");
      rp_sgemm_force_blocks(deep);
      rp_sgemm_force_a_inplace(inplace);
      rc |= cmocka_run_group_tests(tests, NULL, NULL);
    }
  rp_sgemm_force_blocks(-1);
  rp_sgemm_force_a_inplace(-1);
  const struct CMUnitTest differ[] = {cmocka_unit_test(test_deep_blocks_rule),
                                      cmocka_unit_test(test_a_inplace_rule),
                                      cmocka_unit_test(test_a_inplace_same_bits),
                                      cmocka_unit_test(test_sgemm_blockings_differ),
                                      cmocka_unit_test(test_packs_every_width)};
  rc |= cmocka_run_group_tests(differ, NULL, NULL);
  rp_sgemm_workspace_release();
  return rc;
}
