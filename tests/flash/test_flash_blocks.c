/* Block-wise attention + merge equals whole attention: what ring attention relies
 * on. Queries are cut into chunks and keys into pieces at random points (pieces
 * of 1 row, pieces smaller and larger than a tile); every piece travels as its
 * own contiguous kv[B,Tk,2C] buffer, the visibility is chosen the way a ring
 * caller would (all / causal / none), partial (O_b, L_b) are merged, and the
 * block backward with the final L and D, summed over pieces, must equal the whole
 * backward. Also: rows that see no key give O = 0 and L = -inf (never NaN), the
 * merge's -inf and extreme-L cases, NULL gradient skips, and the asynchronous
 * launch/finish path. Everything runs under each instruction-set level. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ft_util.h"

typedef struct {
  int B, T, C, NH, causal;
  float *qkv, *dout;
  float *out_w, *lse_w, *dqkv_w;   /* whole attention */
} problem;

static rp_pool *g_pool1, *g_pool2;

static int setup(void **state) {
  g_pool1 = ta_pool(1);
  g_pool2 = ta_pool(2);
  return 0;
}
static int teardown(void **state) {
  rp_pool_destroy(g_pool1);
  rp_pool_destroy(g_pool2);
  ft_reset_config();
  return 0;
}

static void problem_init(problem *p, int B, int T, int C, int NH, int causal, uint64_t seed) {
  p->B = B, p->T = T, p->C = C, p->NH = NH, p->causal = causal;
  long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C;
  rp_rng r;
  rp_rng_seed(&r, seed);
  p->qkv = ta_floats(nqkv);
  p->dout = ta_floats(nout);
  ta_fill(p->qkv, nqkv, &r, -2.0f, 2.0f);
  ta_fill(p->dout, nout, &r, -1.0f, 1.0f);
  p->out_w = ta_floats(nout);
  p->lse_w = ta_floats((long)B * NH * T);
  p->dqkv_w = ta_floats(nqkv);
  assert_int_equal(rp_flash_forward(p->out_w, p->lse_w, p->qkv, B, T, C, NH, causal, &ft_cfg, g_pool2), RP_OK);
  assert_int_equal(rp_flash_backward(p->dqkv_w, p->dout, p->qkv, p->out_w, p->lse_w, B, T, C, NH,
                                     causal, &ft_cfg, g_pool2), RP_OK);
}

static void problem_free(problem *p) {
  free(p->qkv), free(p->dout), free(p->out_w), free(p->lse_w), free(p->dqkv_w);
}

/* Visibility of keys [ka, kb) for queries [qa, qb) as a ring caller picks it. */
static rp_flash_vis pick_vis(int causal, long qa, long qb, long ka, long kb) {
  if (!causal || kb - 1 <= qa) return RP_FLASH_VIS_ALL;
  if (ka > qb - 1) return RP_FLASH_VIS_NONE;
  return RP_FLASH_VIS_CAUSAL;
}

/* Cuts [0, T) at n-1 random points (sorted, distinct); cuts[0] = 0, cuts[n] = T. */
static int random_cuts(long *cuts, int n, long T, rp_rng *r) {
  int m = 0;
  cuts[m++] = 0;
  for (int i = 0; i < n - 1; i++) {
    long c = 1 + (long)rp_rng_below(r, (uint32_t)(T > 1 ? T - 1 : 1));
    int dup = 0;
    for (int j = 0; j < m; j++) dup |= cuts[j] == c;
    if (!dup && c < T) cuts[m++] = c;
  }
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
      long t = cuts[j];
      cuts[j] = cuts[j - 1];
      cuts[j - 1] = t;
    }
  cuts[m] = T;
  return m;  /* number of pieces */
}

typedef struct {
  rp_flash_problem pr;
  float *kv, *dkv;
} piece;

/* kv[B, kb-ka, 2C]: the layout a ring peer sends (k then v per row). */
static void make_piece(piece *pc, const problem *p, long qa, long qb, long ka, long kb, int force_causal) {
  const long C = p->C, C3 = 3 * C, Tk = kb - ka;
  pc->kv = ta_floats((long)p->B * Tk * 2 * C);
  pc->dkv = ta_floats((long)p->B * Tk * 2 * C);
  for (long b = 0; b < p->B; b++)
    for (long t = 0; t < Tk; t++)
      memcpy(pc->kv + (b * Tk + t) * 2 * C, p->qkv + (b * p->T + ka + t) * C3 + C,
             sizeof(float) * (size_t)(2 * C));
  rp_flash_problem *pr = &pc->pr;
  memset(pr, 0, sizeof *pr);
  pr->B = p->B, pr->NH = p->NH, pr->HS = p->C / p->NH;
  pr->Tq = (int)(qb - qa), pr->Tk = (int)Tk;
  pr->q_pos0 = qa, pr->k_pos0 = ka;
  pr->vis = force_causal && p->causal ? RP_FLASH_VIS_CAUSAL : pick_vis(p->causal, qa, qb, ka, kb);
  pr->q = rp_flash_view_of(p->qkv + qa * C3, C3, (long)p->T * C3);
  pr->k = rp_flash_view_of(pc->kv, 2 * C, Tk * 2 * C);
  pr->v = rp_flash_view_of(pc->kv + C, 2 * C, Tk * 2 * C);
  pr->cfg = &ft_cfg;
}

/* Ring-style forward and backward over the given cuts; returns the worst error
 * against the whole attention over out, lse and dqkv. */
static double ring_sim(const problem *p, const long *qc, int nq, const long *kc, int nk,
                       rp_pool *pool, int async, int force_causal) {
  const long B = p->B, T = p->T, C = p->C, NH = p->NH, C3 = 3 * C;
  float *out = ta_floats(B * T * C), *lse = ta_floats(B * NH * T), *dqkv = ta_floats(B * T * C3);
  float *dsum = ta_floats(B * NH * T);
  for (long i = 0; i < B * NH * T; i++) lse[i] = -INFINITY;  /* running (0, -inf) */
  piece pcs[64];
  assert_true(nq * nk <= 64);
  for (int a = 0; a < nq; a++)
    for (int c = 0; c < nk; c++)
      make_piece(&pcs[a * nk + c], p, qc[a], qc[a + 1], kc[c], kc[c + 1], force_causal);

  for (int a = 0; a < nq; a++) {
    long qa = qc[a], Tq = qc[a + 1] - qa;
    float *ob = ta_floats(B * Tq * C), *lb = ta_floats(B * NH * Tq);
    for (int c = 0; c < nk; c++) {
      rp_flash_view ov = rp_flash_view_of(ob, C, Tq * C), lv = rp_flash_view_of(lb, Tq, NH * Tq);
      memset(ob, 0xff, sizeof(float) * (size_t)(B * Tq * C));  /* NaN garbage */
      if (async) {
        rp_flash_job *job = NULL;
        assert_int_equal(rp_flash_block_forward_launch(&job, &pcs[a * nk + c].pr, ov, lv, pool), RP_OK);
        while (!rp_flash_job_done(job)) {
        } /* the caller's thread is free here (a ring would progress MPI) */
        assert_int_equal(rp_flash_job_finish(job), RP_OK);
      } else {
        assert_int_equal(rp_flash_block_forward(&pcs[a * nk + c].pr, ov, lv, pool), RP_OK);
      }
      assert_int_equal(rp_flash_merge(rp_flash_view_of(out + qa * C, C, T * C),
                                      rp_flash_view_of(lse + qa, T, NH * T), ov, lv, (int)B,
                                      (int)NH, (int)Tq, (int)(C / NH), &ft_cfg, pool), RP_OK);
    }
    free(ob), free(lb);
  }
  double err = ta_maxdiff("ring out", out, p->out_w, B * T * C, FT_ATOL);
  err = fmax(err, ta_maxdiff("ring lse", lse, p->lse_w, B * NH * T, FT_ATOL));

  /* backward: D from the final O, then every (chunk, piece) with the final L, D */
  assert_int_equal(rp_flash_rowdot(rp_flash_view_of(dsum, T, NH * T), rp_flash_view_of(p->dout, C, T * C),
                                   rp_flash_view_of(out, C, T * C), (int)B, (int)NH, (int)T,
                                   (int)(C / NH), &ft_cfg, pool), RP_OK);
  for (int a = 0; a < nq; a++)
    for (int c = 0; c < nk; c++) {
      piece *pc = &pcs[a * nk + c];
      long qa = qc[a], Tk = pc->pr.Tk;
      rp_flash_view dov = rp_flash_view_of(p->dout + qa * C, C, T * C);
      rp_flash_view lv = rp_flash_view_of(lse + qa, T, NH * T);
      rp_flash_view dv = rp_flash_view_of(dsum + qa, T, NH * T);
      rp_flash_view dqv = rp_flash_view_of(dqkv + qa * C3, C3, T * C3);
      rp_flash_view dkv = rp_flash_view_of(pc->dkv, 2 * C, Tk * 2 * C);
      rp_flash_view dvv = rp_flash_view_of(pc->dkv + C, 2 * C, Tk * 2 * C);
      if (async) {
        rp_flash_job *job = NULL;
        assert_int_equal(rp_flash_block_backward_launch(&job, &pc->pr, dov, lv, dv, dqv, dkv, dvv, pool),
                         RP_OK);
        assert_int_equal(rp_flash_job_finish(job), RP_OK);
      } else {
        assert_int_equal(rp_flash_block_backward(&pc->pr, dov, lv, dv, dqv, dkv, dvv, pool), RP_OK);
      }
    }
  /* send the pieces' dK/dV home */
  for (int a = 0; a < nq; a++)
    for (int c = 0; c < nk; c++) {
      piece *pc = &pcs[a * nk + c];
      long ka = kc[c], Tk = pc->pr.Tk;
      for (long b = 0; b < B; b++)
        for (long t = 0; t < Tk; t++)
          for (long i = 0; i < 2 * C; i++)
            dqkv[(b * T + ka + t) * C3 + C + i] += pc->dkv[(b * Tk + t) * 2 * C + i];
      free(pc->kv), free(pc->dkv);
    }
  err = fmax(err, ta_maxdiff("ring dqkv", dqkv, p->dqkv_w, B * T * C3, FT_ATOL));
  free(out), free(lse), free(dqkv), free(dsum);
  return err;
}

static void test_key_splits(void **state) {
  rp_rng r;
  rp_rng_seed(&r, 42);
  for (int causal = 0; causal <= 1; causal++) {
    problem p;
    problem_init(&p, 2, 100, 64, 2, causal, 7 + causal);
    long qc[2] = {0, 100}, kc[16];
    for (int trial = 0; trial < 6; trial++) {
      int nk = random_cuts(kc, 2 + trial, 100, &r);
      double e = ring_sim(&p, qc, 1, kc, nk, trial % 2 ? g_pool2 : g_pool1, 0, 0);
      if (e > FT_ATOL) fprintf(stderr, "causal=%d trial %d: err %.3g\n", causal, trial, e);
      assert_true(e <= FT_ATOL);
    }
    problem_free(&p);
  }
}

/* Query chunks too (a zigzag rank holds two), with small tiles so that every
 * piece spans several; all three visibilities occur. */
static void test_query_and_key_splits(void **state) {
  rp_rng r;
  rp_rng_seed(&r, 43);
  ft_configure(RP_FLASH_ISA_AUTO, RP_FLASH_SPLIT_AUTO, 16, 24);
  for (int causal = 0; causal <= 1; causal++) {
    problem p;
    problem_init(&p, 1, 97, 96, 3, causal, 11 + causal);  /* HS 32 */
    long qc[8], kc[8];
    for (int trial = 0; trial < 4; trial++) {
      int nq = random_cuts(qc, 2 + trial, 97, &r), nk = random_cuts(kc, 3 + trial, 97, &r);
      double e = ring_sim(&p, qc, nq, kc, nk, g_pool2, 0, 0);
      assert_true(e <= FT_ATOL);
      /* the generic causal path must agree with the all/none shortcuts */
      e = ring_sim(&p, qc, nq, kc, nk, g_pool2, 0, 1);
      assert_true(e <= FT_ATOL);
    }
    problem_free(&p);
  }
  ft_reset_config();
}

static void test_async(void **state) {
  problem p;
  problem_init(&p, 1, 150, 64, 1, 1, 99);  /* one head: the key-block split */
  long qc[3] = {0, 70, 150}, kc[4] = {0, 33, 34, 150};
  assert_true(ring_sim(&p, qc, 2, kc, 3, g_pool2, 1, 0) <= FT_ATOL);
  assert_true(ring_sim(&p, qc, 2, kc, 3, g_pool1, 1, 0) <= FT_ATOL);
  problem_free(&p);
}

/* A query chunk entirely before a key piece, asked as CAUSAL: every row sees
 * nothing, so O = 0 and L = -inf exactly, and its backward adds nothing. */
static void test_no_visible_key(void **state) {
  problem p;
  problem_init(&p, 2, 40, 32, 2, 1, 5);
  piece pc;
  make_piece(&pc, &p, 0, 10, 20, 40, 1);
  assert_int_equal(pc.pr.vis, RP_FLASH_VIS_CAUSAL);
  const long C = 32, n = 2L * 10 * C;
  float *o = ta_floats(n), *l = ta_floats(2L * 2 * 10);
  memset(o, 0xff, sizeof(float) * (size_t)n);
  for (int vis = RP_FLASH_VIS_CAUSAL; vis <= RP_FLASH_VIS_NONE; vis++) {
    pc.pr.vis = (rp_flash_vis)vis;
    assert_int_equal(rp_flash_block_forward(&pc.pr, rp_flash_view_of(o, C, 10 * C),
                                            rp_flash_view_of(l, 10, 20), g_pool2), RP_OK);
    for (long i = 0; i < n; i++) assert_true(o[i] == 0.0f);
    for (long i = 0; i < 40; i++) assert_true(l[i] == -INFINITY);
  }
  /* backward with these rows' L = -inf: nothing added, no NaN */
  float *d = ta_floats(40), *dq = ta_floats(2L * 40 * 3 * C);
  pc.pr.vis = RP_FLASH_VIS_ALL;
  assert_int_equal(rp_flash_block_backward(&pc.pr, rp_flash_view_of(p.dout, C, 40 * C),
                                           rp_flash_view_of(l, 10, 20), rp_flash_view_of(d, 10, 20),
                                           rp_flash_view_of(dq, 3 * C, 40 * 3 * C),
                                           rp_flash_view_of(pc.dkv, 2 * C, 20 * 2 * C),
                                           rp_flash_view_of(pc.dkv + C, 2 * C, 20 * 2 * C), g_pool2),
                   RP_OK);
  for (long i = 0; i < 2L * 40 * 3 * C; i++) assert_true(dq[i] == 0.0f);
  for (long i = 0; i < 2L * 20 * 2 * C; i++) assert_true(pc.dkv[i] == 0.0f);
  /* no keys at all */
  pc.pr.Tk = 0;
  pc.pr.vis = RP_FLASH_VIS_ALL;
  memset(o, 0xff, sizeof(float) * (size_t)n);
  assert_int_equal(rp_flash_block_forward(&pc.pr, rp_flash_view_of(o, C, 10 * C),
                                          rp_flash_view_of(l, 10, 20), NULL), RP_OK);
  for (long i = 0; i < n; i++) assert_true(o[i] == 0.0f);
  free(o), free(l), free(d), free(dq), free(pc.kv), free(pc.dkv);
  problem_free(&p);
}

/* merge against a double evaluation, including -inf sides and far-apart L. */
static void test_merge_cases(void **state) {
  const int HS = 3, T = 6;
  float la[6] = {0.5f, -INFINITY, 2.0f, -INFINITY, 1e4f, -80.0f};
  float lb[6] = {1.5f, 0.25f, -INFINITY, -INFINITY, -1e4f, 80.0f};
  float oa[18], ob[18];
  for (int i = 0; i < 18; i++) {
    oa[i] = (float)(i % 5) - 2.0f;
    ob[i] = 0.5f * (float)(i % 7) - 1.0f;
  }
  oa[3] = oa[4] = oa[5] = NAN;     /* row 1: La = -inf, its O must not be read */
  ob[6] = ob[7] = ob[8] = NAN;     /* row 2: Lb = -inf */
  float o[18], l[6];
  memcpy(o, oa, sizeof o);
  memcpy(l, la, sizeof l);
  assert_int_equal(rp_flash_merge(rp_flash_view_of(o, HS, T * HS), rp_flash_view_of(l, T, T),
                                  rp_flash_view_of(ob, HS, T * HS), rp_flash_view_of(lb, T, T),
                                  1, 1, T, HS, &ft_cfg, NULL), RP_OK);
  for (int t = 0; t < T; t++) {
    double a = la[t], b = lb[t];
    double L = (a == -INFINITY && b == -INFINITY) ? -INFINITY
               : a == -INFINITY                   ? b
               : b == -INFINITY                   ? a
                                                  : fmax(a, b) + log1p(exp(fmin(a, b) - fmax(a, b)));
    if (L == -INFINITY)
      assert_true(l[t] == -INFINITY);
    else
      assert_true(fabs(l[t] - L) <= 1e-6 * fmax(1.0, fabs(L)));
    for (int d = 0; d < HS; d++) {
      double want = L == -INFINITY ? oa[t * HS + d]
                    : (a == -INFINITY ? 0.0 : exp(a - L) * oa[t * HS + d]) +
                          (b == -INFINITY ? 0.0 : exp(b - L) * ob[t * HS + d]);
      assert_false(isnan(o[t * HS + d]));
      assert_true(fabs(o[t * HS + d] - want) <= 1e-6);
    }
  }
  assert_true(o[9] == oa[9] && l[3] == -INFINITY);
}

/* NULL gradient views skip that gradient; the others are unchanged. */
static void test_null_grads(void **state) {
  problem p;
  problem_init(&p, 1, 50, 64, 2, 1, 17);
  const long T = 50, C = 64, C3 = 192;
  float *d = ta_floats(2 * T), *g = ta_floats(T * C3);
  rp_flash_problem pr = {.B = 1, .NH = 2, .HS = 32, .Tq = 50, .Tk = 50, .vis = RP_FLASH_VIS_CAUSAL};
  pr.q = rp_flash_view_of(p.qkv, C3, T * C3);
  pr.k = rp_flash_view_of(p.qkv + C, C3, T * C3);
  pr.v = rp_flash_view_of(p.qkv + 2 * C, C3, T * C3);
  pr.cfg = &ft_cfg;
  rp_flash_view dov = rp_flash_view_of(p.dout, C, T * C), lv = rp_flash_view_of(p.lse_w, T, 2 * T);
  rp_flash_view dv = rp_flash_view_of(d, T, 2 * T), none = {0};
  assert_int_equal(rp_flash_rowdot(dv, dov, rp_flash_view_of(p.out_w, C, T * C), 1, 2, 50, 32, &ft_cfg, NULL), RP_OK);
  for (int skip = 0; skip < 3; skip++) {
    memset(g, 0, sizeof(float) * (size_t)(T * C3));
    rp_flash_view gv[3];
    for (int i = 0; i < 3; i++) gv[i] = i == skip ? none : rp_flash_view_of(g + i * C, C3, T * C3);
    assert_int_equal(rp_flash_block_backward(&pr, dov, lv, dv, gv[0], gv[1], gv[2], g_pool2), RP_OK);
    for (long t = 0; t < T; t++)
      for (long i = 0; i < C3; i++) {
        float want = (i / C == skip) ? 0.0f : p.dqkv_w[t * C3 + i];
        assert_true(fabs(g[t * C3 + i] - want) <= FT_ATOL);
      }
  }
  free(d), free(g);
  problem_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_key_splits),     cmocka_unit_test(test_query_and_key_splits),
      cmocka_unit_test(test_async),          cmocka_unit_test(test_no_visible_key),
      cmocka_unit_test(test_merge_cases),    cmocka_unit_test(test_null_grads),
  };
  /* rowdot, merge and the tile loops dispatch on the ISA: run everything once per
   * level (avx512bf16 has no flash path of its own) */
  return ti_run_group_per_isa("flash_blocks", tests, sizeof tests / sizeof tests[0], setup,
                              teardown, RP_ISA_AVX512);
}
