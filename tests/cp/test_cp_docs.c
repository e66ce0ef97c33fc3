/* Context-parallel attention over packed rows (run under mpirun with 2 and 4
 * ranks): every placement (whole-row zigzag, per-document zigzag, cost
 * balanced) through ring attention (overlap on and off) and Ulysses equals the
 * single-rank O(T^2) reference with an explicit document mask (O, L, dQKV,
 * 1e-5 absolute), with documents of length 1, one filling a row, and lengths
 * that 2P does not divide (all but doc-zigzag). The counted work equals the
 * placement's visible pairs, block pairs with no visible key are skipped, the
 * balanced placement evens the work that the whole-row zigzag does not, and a
 * layout that cannot place a document is refused (RP_EINVAL). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>

#include "cp_test_util.h"
#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_kernels.h"

static int g_P, g_rank;

enum { B = 2, C = 32, NH = 4 };

typedef struct {
  int T;
  float *qkv, *dout, *out, *lse, *dqkv;
} ref_case;

/* Row 0: mixed lengths with 1s; row 1: one document filling the row. With
 * align > 1 every length is a multiple of align (for doc-zigzag). */
static void make_docs(rp_docs *d, int T, int align) {
  assert_int_equal(rp_docs_init(d, B, T), RP_OK);
  int32_t lens[64];
  int n = 0, left = T;
  static const int want[] = {1, 13, 1, 37, 5, 2, 29};
  for (int i = 0; left > 0; i = (i + 1) % 7) {
    int L = align > 1 ? RP_MAX(1, (want[i] + align - 1) / align) * align : want[i];
    if (L > left) L = left;
    lens[n++] = L;
    left -= L;
  }
  assert_int_equal(rp_docs_set_row(d, 0, lens, n), RP_OK);
  int32_t full = T;
  assert_int_equal(rp_docs_set_row(d, 1, &full, 1), RP_OK);
}

static void ref_init(ref_case *f, const rp_docs *d) {
  const long T = d->T, nqkv = (long)B * T * 3 * C, nout = (long)B * T * C;
  rp_rng r;
  rp_rng_seed(&r, 77);
  f->T = (int)T;
  f->qkv = ta_floats(nqkv), f->dout = ta_floats(nout), f->out = ta_floats(nout);
  f->lse = ta_floats((long)B * NH * T), f->dqkv = ta_floats(nqkv);
  ta_fill(f->qkv, nqkv, &r, -1.5f, 1.5f);
  ta_fill(f->dout, nout, &r, -1.0f, 1.0f);
  uint8_t *mask = calloc((size_t)B * T * T, 1);
  for (int b = 0; b < B; b++)
    for (long q = 0; q < T; q++)
      for (long k = rp_docs_start(d, b, (int)q); k <= q; k++) mask[((long)b * T + q) * T + k] = 1;
  float *att = ta_floats((long)B * NH * T * T);
  rp_attention_ref_forward_masked(f->out, att, f->lse, f->qkv, B, (int)T, C, NH, mask, NULL);
  rp_attention_ref_backward(f->dqkv, f->dout, f->qkv, att, B, (int)T, C, NH, NULL);
  free(att);
  free(mask);
}

static void ref_free(ref_case *f) {
  free(f->qkv), free(f->dout), free(f->out), free(f->lse), free(f->dqkv);
}

/* One backend on one placement: returns the worst difference over the ranks. */
static double run_case(const ref_case *f, rp_docs *d, rp_cp_layout base, rp_cp_place place,
                       int ulysses, int overlap, rp_pool *pool) {
  const int T = f->T, Tl = T / g_P;
  assert_int_equal(rp_cp_docs_place(d, base, place, g_P), RP_OK);
  rp_attn_backend *a = NULL;
  if (ulysses)
    assert_int_equal(rp_cp_ulysses_create(&a, MPI_COMM_WORLD, base, T, NH), RP_OK);
  else
    assert_int_equal(rp_cp_ring_create(&a, MPI_COMM_WORLD, base, T, overlap), RP_OK);
  float *qkv = ta_floats((long)B * Tl * 3 * C), *dout = ta_floats((long)B * Tl * C);
  float *out = ta_floats((long)B * Tl * C), *lse = ta_floats((long)B * NH * Tl);
  float *dqkv = ta_floats((long)B * Tl * 3 * C);
  rp_cp_docs_shard(qkv, f->qkv, sizeof(float) * 3 * C, d, g_rank);
  rp_cp_docs_shard(dout, f->dout, sizeof(float) * C, d, g_rank);
  rp_attn_batch ab;
  assert_int_equal(rp_attn_prepare(a, &ab, B, Tl, C, NH, d), RP_OK);
  assert_int_equal(a->forward(a, &ab, out, lse, qkv, pool), RP_OK);
  assert_int_equal(a->backward(a, &ab, dqkv, dout, qkv, out, lse, pool), RP_OK);
  /* the reference's rows of this rank */
  float *wout = ta_floats((long)B * Tl * C), *wd = ta_floats((long)B * Tl * 3 * C);
  float *wl = ta_floats((long)B * NH * Tl);
  rp_cp_docs_shard(wout, f->out, sizeof(float) * C, d, g_rank);
  rp_cp_docs_shard(wd, f->dqkv, sizeof(float) * 3 * C, d, g_rank);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < Tl; t++)
        wl[((long)b * NH + h) * Tl + t] =
            f->lse[((long)b * NH + h) * T + rp_cp_docs_rows(d, b, g_rank)[t]];
  double w = ta_maxdiff("out", out, wout, (long)B * Tl * C, CP_ATOL);
  w = fmax(w, ta_maxdiff("lse", lse, wl, (long)B * NH * Tl, CP_ATOL));
  w = fmax(w, ta_maxdiff("dqkv", dqkv, wd, (long)B * Tl * 3 * C, CP_ATOL));
  /* the work counted is the placement's visible pairs (ring: per rank) */
  rp_cp_stats fs;
  assert_int_equal(rp_cp_get_stats(a, &fs, NULL), RP_OK);
  double pairs = ulysses ? rp_docs_pairs(d) / g_P : rp_cp_docs_work(d, g_rank);
  double want = 4.0 * (C / NH) * NH * pairs;
  if (fabs(fs.flops - want) > 1e-9 * want) {
    fprintf(stderr, "  flops %g, the placement's pairs give %g\n", fs.flops, want);
    w = INFINITY;
  }
  free(qkv), free(dout), free(out), free(lse), free(dqkv), free(wout), free(wd), free(wl);
  rp_cp_destroy(a);
  return cpt_agree_max(w, MPI_COMM_WORLD);
}

static void check_all(int T, int align, const rp_cp_place *places, int np) {
  rp_docs d;
  make_docs(&d, T, align);
  ref_case f;
  ref_init(&f, &d);
  rp_pool *pool = ta_pool(2);
  for (int i = 0; i < np; i++)
    for (int impl = 0; impl < 3; impl++) {
      rp_cp_layout base = places[i] == RP_CP_PLACE_BALANCED ? RP_CP_CONTIGUOUS : RP_CP_ZIGZAG;
      double w = run_case(&f, &d, base, places[i], impl == 2, impl == 1, pool);
      if (w > CP_ATOL && g_rank == 0)
        fprintf(stderr, "FAILED %s T=%d %s\n", rp_cp_place_name(places[i]), T,
                impl == 2 ? "ulysses" : impl ? "ring overlap" : "ring");
      assert_true(w <= CP_ATOL);
    }
  rp_pool_destroy(pool);
  ref_free(&f);
  rp_docs_free(&d);
}

/* Whole-row zigzag and balanced on lengths that 2P does not divide. */
static void test_row_and_balanced(void **state) {
  static const rp_cp_place p[] = {RP_CP_PLACE_ROW, RP_CP_PLACE_BALANCED};
  check_all(16 * g_P, 1, p, 2);
  check_all(40 * g_P, 1, p, 2);
}

/* Per-document zigzag: every document padded to a multiple of 2P by the loader. */
static void test_doc_zigzag(void **state) {
  static const rp_cp_place p[] = {RP_CP_PLACE_DOC_ZIGZAG};
  check_all(24 * g_P, 2 * g_P, p, 1);
}

/* Counted work: balanced is no worse than the whole-row zigzag on a long-tail
 * row (one long document among short ones), and within 10% of even. */
static void test_balance(void **state) {
  const int T = 256 * g_P;
  rp_docs d;
  assert_int_equal(rp_docs_init(&d, 1, T), RP_OK);
  int32_t lens[64];
  int n = 0;
  lens[n++] = T / 2;
  for (int left = T - T / 2; left > 0; left -= lens[n], n++)
    lens[n] = RP_MIN(left, 24 + 8 * (n % 5));
  assert_int_equal(rp_docs_set_row(&d, 0, lens, n), RP_OK);
  double ratio[2];
  for (int k = 0; k < 2; k++) {
    rp_cp_place pl = k ? RP_CP_PLACE_BALANCED : RP_CP_PLACE_ROW;
    assert_int_equal(rp_cp_docs_place(&d, k ? RP_CP_CONTIGUOUS : RP_CP_ZIGZAG, pl, g_P), RP_OK);
    double mx = 0, sum = 0;
    for (int r = 0; r < g_P; r++) {
      double w = rp_cp_docs_work(&d, r);
      mx = fmax(mx, w);
      sum += w;
    }
    assert_true(fabs(sum - rp_docs_pairs(&d)) < 0.5);   /* every pair on exactly one rank */
    ratio[k] = mx / (sum / g_P);
  }
  if (g_rank == 0) printf("work max/mean: row zigzag %.3f, balanced %.3f\n", ratio[0], ratio[1]);
  assert_true(ratio[1] <= ratio[0] + 1e-9);
  assert_true(ratio[1] <= 1.10);
  rp_docs_free(&d);
}

/* The picture: one panel per placement, the work shares in the titles. */
static void test_svg(void **state) {
  rp_docs d[2];
  const rp_docs *pp[2] = {&d[0], &d[1]};
  const char *names[2] = {"row zigzag", "balanced"};
  for (int k = 0; k < 2; k++) {
    make_docs(&d[k], 16 * g_P, 1);
    assert_int_equal(rp_cp_docs_place(&d[k], k ? RP_CP_CONTIGUOUS : RP_CP_ZIGZAG,
                                      k ? RP_CP_PLACE_BALANCED : RP_CP_PLACE_ROW, g_P), RP_OK);
  }
  char path[64];
  snprintf(path, sizeof path, "/tmp/rp_cp_docs_%d_%d.svg", (int)getpid(), g_rank);
  assert_int_equal(rp_cp_docs_svg(path, pp, names, 2, 4), RP_OK);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char buf[1 << 18];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  remove(path);
  assert_non_null(strstr(buf, "<svg"));
  assert_non_null(strstr(buf, "balanced"));
  assert_non_null(strstr(buf, "work max/mean"));
  rp_docs_free(&d[1]);
  assert_int_equal(rp_cp_docs_svg(path, pp, names, 2, 4), RP_EINVAL);   /* unplaced panel */
  rp_docs_free(&d[0]);
}

/* A document the layout cannot place, and a batch placed for another cp size. */
static void test_refusals(void **state) {
  rp_docs d;
  make_docs(&d, 16 * g_P, 1);   /* lengths 1, 13, ...: not multiples of 2P */
  assert_int_equal(rp_cp_docs_place(&d, RP_CP_ZIGZAG, RP_CP_PLACE_DOC_ZIGZAG, g_P), RP_EINVAL);
  assert_null(d.gpos);
  rp_attn_backend *a = NULL;
  assert_int_equal(rp_cp_ring_create(&a, MPI_COMM_WORLD, RP_CP_ZIGZAG, d.T, 1), RP_OK);
  rp_attn_batch ab;
  assert_int_equal(rp_attn_prepare(a, &ab, B, d.T / g_P, C, NH, &d), RP_EINVAL);  /* unplaced */
  assert_int_equal(rp_cp_docs_place(&d, RP_CP_ZIGZAG, RP_CP_PLACE_ROW, 1), RP_OK);
  assert_int_equal(rp_attn_prepare(a, &ab, B, d.T / g_P, C, NH, &d), RP_EINVAL);  /* cp 1 */
  rp_cp_destroy(a);
  rp_docs_free(&d);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_row_and_balanced), cmocka_unit_test(test_doc_zigzag),
      cmocka_unit_test(test_balance), cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_svg),
  };
  CPT_MAIN(tests, g_P, g_rank);
}
