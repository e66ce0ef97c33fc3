/* Context-parallel attention equals single-rank attention (run under mpirun with
 * 2 and 4 ranks). Every rank builds the same random qkv and dO for the whole
 * sequence, computes the reference (rp_attention_ref_*, O(T^2)) on its own,
 * keeps its shard with the layout helpers, runs the backend's forward and
 * backward on the shard, and the gathered O, L, dQ, dK, dV must match the
 * reference within 1e-5 absolute: ring zigzag, ring contiguous (overlap on and
 * off) and Ulysses on both layouts, for short sequences (one row per zigzag
 * chunk) up to several tiles per chunk, pools of 1-3 threads, tiny flash tiles
 * (chunks that straddle tiles), a head size that is not a multiple of 8, two
 * layers interleaved through one backend (fwd 1, fwd 2, bwd 2, bwd 1), and the
 * counted attention work against the layout's visible pairs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "cp_test_util.h"
#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_kernels.h"

typedef enum { RING_ZIGZAG, RING_CONTIGUOUS, ULYSSES_ZIGZAG, ULYSSES_CONTIGUOUS } impl;
static const char *impl_name[] = {"ring-zigzag", "ring-contiguous", "ulysses-zigzag",
                                  "ulysses-contiguous"};

static int g_P, g_rank;

static rp_cp_layout layout_of(impl im) {
  return im == RING_ZIGZAG || im == ULYSSES_ZIGZAG ? RP_CP_ZIGZAG : RP_CP_CONTIGUOUS;
}

/* The whole problem and its single-rank answer. */
typedef struct {
  int B, T, C, NH;
  float *qkv, *dout, *out, *lse, *dqkv;
} ref_case;

static void ref_init(ref_case *f, int B, int T, int C, int NH, uint64_t seed) {
  f->B = B, f->T = T, f->C = C, f->NH = NH;
  long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C;
  rp_rng r;
  rp_rng_seed(&r, seed);
  f->qkv = ta_floats(nqkv);
  f->dout = ta_floats(nout);
  ta_fill(f->qkv, nqkv, &r, -1.5f, 1.5f);
  ta_fill(f->dout, nout, &r, -1.0f, 1.0f);
  f->out = ta_floats(nout);
  f->lse = ta_floats((long)B * NH * T);
  f->dqkv = ta_floats(nqkv);
  float *att = ta_floats((long)B * NH * T * T);
  rp_attention_ref_forward(f->out, att, f->lse, f->qkv, B, T, C, NH, 1, NULL);
  rp_attention_ref_backward(f->dqkv, f->dout, f->qkv, att, B, T, C, NH, NULL);
  free(att);
}

static void ref_free(ref_case *f) {
  free(f->qkv), free(f->dout), free(f->out), free(f->lse), free(f->dqkv);
}

/* The flash settings the next backends run with (NULL: automatic). */
static const rp_flash_config *g_flash;

static rp_status make_backend(rp_attn_backend **a, impl im, int T, int NH, int overlap) {
  rp_status s = im == RING_ZIGZAG || im == RING_CONTIGUOUS
                    ? rp_cp_ring_create(a, MPI_COMM_WORLD, layout_of(im), T, overlap)
                    : rp_cp_ulysses_create(a, MPI_COMM_WORLD, layout_of(im), T, NH);
  return s == RP_OK ? rp_cp_set_flash(*a, g_flash) : s;
}

/* One rank's shard of a problem and the backend's answers for it. */
typedef struct {
  int Tl;
  float *qkv, *dout, *out, *lse, *dqkv;
} shard;

#define DQKV_BIAS 0.25f /* dqkv starts here: backward must accumulate, not overwrite */

static void shard_init(shard *s, const ref_case *f, rp_cp_layout layout) {
  const int B = f->B, T = f->T, C = f->C, P = g_P;
  s->Tl = T / P;
  long rows = (long)B * s->Tl;
  s->qkv = ta_floats(rows * 3 * C);
  s->dout = ta_floats(rows * C);
  s->out = ta_floats(rows * C);
  s->lse = ta_floats((long)B * f->NH * s->Tl);
  s->dqkv = ta_floats(rows * 3 * C);
  for (long i = 0; i < rows * 3 * C; i++) s->dqkv[i] = DQKV_BIAS;
  assert_int_equal(rp_cp_shard_rows(s->qkv, f->qkv, sizeof(float) * 3 * C, B, layout, T, P, g_rank), RP_OK);
  assert_int_equal(rp_cp_shard_rows(s->dout, f->dout, sizeof(float) * C, B, layout, T, P, g_rank), RP_OK);
}

static void shard_free(shard *s) {
  free(s->qkv), free(s->dout), free(s->out), free(s->lse), free(s->dqkv);
}

static void run_fwd(const rp_attn_backend *a, shard *s, const ref_case *f, rp_pool *pool) {
  assert_int_equal(a->saved_floats(a, f->B, s->Tl, f->C, f->NH), (size_t)f->B * f->NH * s->Tl);
  rp_attn_batch ab;
  assert_int_equal(rp_attn_prepare(a, &ab, f->B, s->Tl, f->C, f->NH, NULL), RP_OK);
  assert_int_equal(a->forward(a, &ab, s->out, s->lse, s->qkv, pool), RP_OK);
}

static void run_bwd(const rp_attn_backend *a, shard *s, const ref_case *f, rp_pool *pool) {
  rp_attn_batch ab;
  assert_int_equal(rp_attn_prepare(a, &ab, f->B, s->Tl, f->C, f->NH, NULL), RP_OK);
  assert_int_equal(a->backward(a, &ab, s->dqkv, s->dout, s->qkv, s->out, s->lse, pool), RP_OK);
}

/* Max |diff| of columns [c0, c0+n) of rows ld apart. */
static double cmp_cols(const char *what, const float *got, const float *want, long rows,
                       int ld, int c0, int n) {
  float *g = ta_floats(rows * n), *w = ta_floats(rows * n);
  for (long i = 0; i < rows; i++)
    for (int j = 0; j < n; j++) {
      g[i * n + j] = got[i * ld + c0 + j];
      w[i * n + j] = want[i * ld + c0 + j];
    }
  double d = ta_maxdiff(what, g, w, rows * n, CP_ATOL);
  free(g), free(w);
  return d;
}

/* Gathers the shard's answers and returns the worst error over every rank. */
static double check_shard(const shard *s, const ref_case *f, rp_cp_layout layout,
                          const char *label) {
  const int B = f->B, T = f->T, C = f->C, NH = f->NH;
  long rows = (long)B * T;
  float *out = ta_floats(rows * C), *lse = ta_floats((long)B * NH * T);
  float *dqkv = ta_floats(rows * 3 * C);
  assert_int_equal(rp_cp_gather_rows(out, s->out, sizeof(float) * C, B, layout, T, MPI_COMM_WORLD), RP_OK);
  assert_int_equal(rp_cp_gather_rows(lse, s->lse, sizeof(float), B * NH, layout, T, MPI_COMM_WORLD), RP_OK);
  assert_int_equal(rp_cp_gather_rows(dqkv, s->dqkv, sizeof(float) * 3 * C, B, layout, T, MPI_COMM_WORLD), RP_OK);
  for (long i = 0; i < rows * 3 * C; i++) dqkv[i] -= DQKV_BIAS;
  double e[5] = {ta_maxdiff("out", out, f->out, rows * C, CP_ATOL),
                 ta_maxdiff("L", lse, f->lse, (long)B * NH * T, CP_ATOL),
                 cmp_cols("dq", dqkv, f->dqkv, rows, 3 * C, 0, C),
                 cmp_cols("dk", dqkv, f->dqkv, rows, 3 * C, C, C),
                 cmp_cols("dv", dqkv, f->dqkv, rows, 3 * C, 2 * C, C)};
  double worst = 0;
  for (int i = 0; i < 5; i++) worst = e[i] > worst ? e[i] : worst;
  worst = cpt_agree_max(worst, MPI_COMM_WORLD);
  if (worst > CP_ATOL && g_rank == 0)
    fprintf(stderr, "FAIL %s: max error %.3g (out %.2g L %.2g dq %.2g dk %.2g dv %.2g on rank 0)\n",
            label, worst, e[0], e[1], e[2], e[3], e[4]);
  free(out), free(lse), free(dqkv);
  return worst;
}

/* Forward + backward of one configuration; returns the agreed worst error. */
static double run_case(impl im, int overlap, int B, int T, int C, int NH, int threads,
                       uint64_t seed) {
  ref_case f;
  ref_init(&f, B, T, C, NH, seed);
  shard s;
  shard_init(&s, &f, layout_of(im));
  rp_attn_backend *a = NULL;
  rp_status st = make_backend(&a, im, T, NH, overlap);
  assert_int_equal(cpt_agree_min_int(st, MPI_COMM_WORLD), RP_OK);
  rp_pool *pool = ta_pool(threads);
  run_fwd(a, &s, &f, pool);
  run_bwd(a, &s, &f, pool);
  char label[128];
  snprintf(label, sizeof label, "%s overlap=%d P=%d B=%d T=%d C=%d NH=%d threads=%d",
           impl_name[im], overlap, g_P, B, T, C, NH, threads);
  double e = check_shard(&s, &f, layout_of(im), label);
  rp_pool_destroy(pool);
  rp_cp_destroy(a);
  shard_free(&s);
  ref_free(&f);
  return e;
}

/* Sequence lengths per layout: the shortest possible, a few rows per chunk, and
 * several flash tiles per chunk. */
static void lengths(impl im, int T[3]) {
  int unit = layout_of(im) == RP_CP_ZIGZAG ? 2 * g_P : g_P;
  T[0] = unit;
  T[1] = 3 * unit;
  T[2] = (layout_of(im) == RP_CP_ZIGZAG ? 40 : 75) * unit;
}

static void sweep_ring(impl im) {
  int T[3];
  lengths(im, T);
  for (int ti = 0; ti < 3; ti++)
    for (int threads = 1; threads <= 3; threads++)
      for (int overlap = 1; overlap >= 0; overlap--)
        assert_true(run_case(im, overlap, 2, T[ti], 32, 2, threads, 100 + ti) <= CP_ATOL);
}

static void test_ring_zigzag(void **state) { sweep_ring(RING_ZIGZAG); }
static void test_ring_contiguous(void **state) { sweep_ring(RING_CONTIGUOUS); }

static void test_ulysses(void **state) {
  for (impl im = ULYSSES_ZIGZAG; im <= ULYSSES_CONTIGUOUS; im++) {
    int T[3];
    lengths(im, T);
    for (int ti = 0; ti < 3; ti++)
      for (int threads = 1; threads <= 3; threads += 2) {
        /* NH = P (one head per rank) and NH = 2P */
        assert_true(run_case(im, 1, 2, T[ti], 16 * g_P, g_P, threads, 200 + ti) <= CP_ATOL);
        assert_true(run_case(im, 1, 1, T[ti], 32 * g_P, 2 * g_P, threads, 300 + ti) <= CP_ATOL);
      }
  }
}

/* Flash tiles smaller than a zigzag chunk and not dividing it: chunk borders
 * fall inside tiles, the diagonal tiles are partly masked. */
static void test_small_tiles(void **state) {
  rp_flash_config cfg = {.bq = 8, .bk = 5};
  g_flash = &cfg;
  for (impl im = RING_ZIGZAG; im <= ULYSSES_CONTIGUOUS; im++)
    assert_true(run_case(im, 1, 2, 2 * g_P * 11, 8 * g_P, g_P, 2, 400 + im) <= CP_ATOL);
  g_flash = NULL;
}

/* Head size 10 (not a multiple of the vector width) and a single head per rank. */
static void test_odd_head_size(void **state) {
  for (impl im = RING_ZIGZAG; im <= ULYSSES_CONTIGUOUS; im++)
    assert_true(run_case(im, 1, 2, 2 * g_P * 7, 10 * g_P, g_P, 2, 500 + im) <= CP_ATOL);
}

/* One backend for two layers, in the order the model calls it; a first call with
 * a smaller batch makes the backend grow its scratch in between. */
static void test_layers_reentrant(void **state) {
  for (impl im = RING_ZIGZAG; im <= ULYSSES_CONTIGUOUS; im++) {
    const int T = 2 * g_P * 6, C = 16 * g_P, NH = g_P;
    ref_case f0, f1, f2;
    ref_init(&f0, 1, T, C, NH, 600);
    ref_init(&f1, 2, T, C, NH, 601);
    ref_init(&f2, 2, T, C, NH, 602);
    shard s0, s1, s2;
    shard_init(&s0, &f0, layout_of(im));
    shard_init(&s1, &f1, layout_of(im));
    shard_init(&s2, &f2, layout_of(im));
    rp_attn_backend *a = NULL;
    assert_int_equal(cpt_agree_min_int(make_backend(&a, im, T, NH, 1), MPI_COMM_WORLD), RP_OK);
    rp_pool *pool = ta_pool(2);
    run_fwd(a, &s0, &f0, pool);
    run_bwd(a, &s0, &f0, pool);
    run_fwd(a, &s1, &f1, pool);
    run_fwd(a, &s2, &f2, pool);
    run_bwd(a, &s2, &f2, pool);
    run_bwd(a, &s1, &f1, pool);
    assert_true(check_shard(&s0, &f0, layout_of(im), "reentrant B=1") <= CP_ATOL);
    assert_true(check_shard(&s1, &f1, layout_of(im), "reentrant layer 1") <= CP_ATOL);
    assert_true(check_shard(&s2, &f2, layout_of(im), "reentrant layer 2") <= CP_ATOL);
    rp_cp_stats fw, bw;
    assert_int_equal(rp_cp_get_stats(a, &fw, &bw), RP_OK);
    assert_int_equal(fw.calls, 3);
    assert_int_equal(bw.calls, 3);
    rp_pool_destroy(pool);
    rp_cp_destroy(a);
    shard_free(&s0), shard_free(&s1), shard_free(&s2);
    ref_free(&f0), ref_free(&f1), ref_free(&f2);
  }
}

/* The ring runs exactly the visible (query, key) pairs of its rows, none twice
 * and none skipped: counted flops = 4 HS B NH x pairs (forward), 10 x (backward).
 * Zigzag gives every rank the same work. */
static void test_work_counts(void **state) {
  const int B = 2, C = 32, NH = 2, HS = C / NH, T = 2 * g_P * 8;
  for (impl im = RING_ZIGZAG; im <= RING_CONTIGUOUS; im++) {
    ref_case f;
    ref_init(&f, B, T, C, NH, 700);
    shard s;
    shard_init(&s, &f, layout_of(im));
    rp_attn_backend *a = NULL;
    assert_int_equal(cpt_agree_min_int(make_backend(&a, im, T, NH, 1), MPI_COMM_WORLD), RP_OK);
    rp_pool *pool = ta_pool(1);
    run_fwd(a, &s, &f, pool);
    run_bwd(a, &s, &f, pool);
    rp_cp_stats fw, bw;
    assert_int_equal(rp_cp_get_stats(a, &fw, &bw), RP_OK);
    double pairs = rp_cp_visible_pairs(layout_of(im), T, g_P, g_rank);
    int ok = fabs(fw.flops - 4.0 * HS * B * NH * pairs) < 0.5 &&
             fabs(bw.flops - 10.0 * HS * B * NH * pairs) < 0.5;
    if (!ok)
      fprintf(stderr, "rank %d %s: counted %.0f / %.0f flops, expected %.0f / %.0f\n", g_rank,
              impl_name[im], fw.flops, bw.flops, 4.0 * HS * B * NH * pairs,
              10.0 * HS * B * NH * pairs);
    assert_true(cpt_agree_min_int(ok, MPI_COMM_WORLD));
    double mx = cpt_agree_max(fw.flops, MPI_COMM_WORLD), mn = -cpt_agree_max(-fw.flops, MPI_COMM_WORLD);
    if (im == RING_ZIGZAG) assert_true(mx == mn);
    if (im == RING_CONTIGUOUS) assert_true(mx > mn);
    /* the ring sent P-1 K/V blocks forward; backward P-1 blocks and P-1
     * accumulator hops (the owner's own share never travels) */
    double kv = sizeof(float) * (double)B * s.Tl * 2 * C;
    assert_true(fabs(fw.bytes_sent - (g_P - 1) * kv) < 0.5);
    assert_true(fabs(bw.bytes_sent - 2.0 * (g_P - 1) * kv) < 0.5);
    assert_true(fw.wait_s >= 0 && fw.wait_s <= fw.total_s && bw.wait_s <= bw.total_s);
    rp_cp_reset_stats(a);
    assert_int_equal(rp_cp_get_stats(a, &fw, NULL), RP_OK);
    assert_int_equal(fw.calls, 0);
    rp_pool_destroy(pool);
    rp_cp_destroy(a);
    shard_free(&s);
    ref_free(&f);
  }
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring_zigzag),      cmocka_unit_test(test_ring_contiguous),
      cmocka_unit_test(test_ulysses),          cmocka_unit_test(test_small_tiles),
      cmocka_unit_test(test_odd_head_size),    cmocka_unit_test(test_layers_reentrant),
      cmocka_unit_test(test_work_counts),
  };
  CPT_MAIN(tests, g_P, g_rank);
}
