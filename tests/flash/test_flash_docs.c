/* Document-masked flash attention (packed variable-length rows): forward and
 * backward with cu_seqlens equal (1e-5) running each document on its own and
 * the O(T^2) reference with an explicit [B,T,T] mask; documents of length 1, a
 * document filling the row, lengths not divisible by 2P; every ISA here, both
 * backward splits, automatic and odd block sizes. Tiles that no query sees are
 * skipped (checked with NaN keys and values there), and the backends refuse a
 * layout that does not match the batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ft_util.h"
#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"

static rp_pool *g_pool[3];

static int setup(void **state) { return ft_pools_up(g_pool); }
static int teardown(void **state) { return ft_pools_down(g_pool); }

/* A packed batch: B rows of T tokens, row b's documents given by lens. */
typedef struct {
  int B, T, C, NH;
  const int32_t *lens[3];
  int n[3];
} packed_case;

typedef struct {
  float *qkv, *dout, *out, *lse, *dqkv;
} tensors;

static void tensors_init(tensors *t, const packed_case *pc, uint64_t seed) {
  const long rows = (long)pc->B * pc->T;
  rp_rng rng;
  rp_rng_seed(&rng, seed);
  t->qkv = ta_floats(rows * 3 * pc->C);
  t->dout = ta_floats(rows * pc->C);
  t->out = ta_floats(rows * pc->C);
  t->lse = ta_floats((long)pc->B * pc->NH * pc->T);
  t->dqkv = ta_floats(rows * 3 * pc->C);
  ta_fill(t->qkv, rows * 3 * pc->C, &rng, -1.5f, 1.5f);
  ta_fill(t->dout, rows * pc->C, &rng, -1.0f, 1.0f);
}

static void tensors_free(tensors *t) {
  free(t->qkv), free(t->dout), free(t->out), free(t->lse), free(t->dqkv);
}

static void docs_of(rp_docs *d, const packed_case *pc) {
  assert_int_equal(rp_docs_init(d, pc->B, pc->T), RP_OK);
  for (int b = 0; b < pc->B; b++) assert_int_equal(rp_docs_set_row(d, b, pc->lens[b], pc->n[b]), RP_OK);
}

/* The packed run: flash with the documents' key ranges. */
static void run_packed(tensors *t, const packed_case *pc, const rp_docs *d, rp_pool *pool) {
  int32_t *kr = calloc((size_t)pc->B * pc->T * 2, sizeof(int32_t));
  rp_docs_self_ranges(d, kr);
  assert_int_equal(rp_flash_forward_ranges(t->out, t->lse, t->qkv, pc->B, pc->T, pc->C, pc->NH,
                                           kr, &ft_cfg, pool), RP_OK);
  assert_int_equal(rp_flash_backward_ranges(t->dqkv, t->dout, t->qkv, t->out, t->lse, pc->B,
                                            pc->T, pc->C, pc->NH, kr, &ft_cfg, pool), RP_OK);
  free(kr);
}

/* Each document on its own (plain causal flash on a copy of its rows). */
static void run_per_document(tensors *t, const packed_case *pc, const rp_docs *d, rp_pool *pool) {
  const int C = pc->C, NH = pc->NH;
  for (int b = 0; b < pc->B; b++) {
    const int32_t *cu = rp_docs_row(d, b);
    for (int i = 0; i < d->ndocs[b]; i++) {
      const int L = cu[i + 1] - cu[i];
      const long r0 = (long)b * pc->T + cu[i];
      tensors one;
      one.qkv = ta_floats((long)L * 3 * C), one.dout = ta_floats((long)L * C);
      one.out = ta_floats((long)L * C), one.lse = ta_floats((long)NH * L);
      one.dqkv = ta_floats((long)L * 3 * C);
      memcpy(one.qkv, t->qkv + r0 * 3 * C, sizeof(float) * L * 3 * C);
      memcpy(one.dout, t->dout + r0 * C, sizeof(float) * L * C);
      assert_int_equal(rp_flash_forward(one.out, one.lse, one.qkv, 1, L, C, NH, 1, &ft_cfg, pool),
                       RP_OK);
      assert_int_equal(rp_flash_backward(one.dqkv, one.dout, one.qkv, one.out, one.lse, 1, L, C,
                                         NH, 1, &ft_cfg, pool), RP_OK);
      memcpy(t->out + r0 * C, one.out, sizeof(float) * L * C);
      memcpy(t->dqkv + r0 * 3 * C, one.dqkv, sizeof(float) * L * 3 * C);
      for (int h = 0; h < NH; h++)
        memcpy(t->lse + ((long)b * NH + h) * pc->T + cu[i], one.lse + (long)h * L,
               sizeof(float) * L);
      tensors_free(&one);
    }
  }
}

/* The oracle: reference attention with the explicit mask. */
static void run_reference(tensors *t, const packed_case *pc, const rp_docs *d) {
  const long T = pc->T;
  uint8_t *mask = calloc((size_t)pc->B * T * T, 1);
  for (int b = 0; b < pc->B; b++)
    for (long q = 0; q < T; q++)
      for (long k = 0; k < T; k++)
        mask[((long)b * T + q) * T + k] = k <= q && k >= rp_docs_start(d, b, (int)q);
  float *att = ta_floats((long)pc->B * pc->NH * T * T);
  rp_attention_ref_forward_masked(t->out, att, t->lse, t->qkv, pc->B, pc->T, pc->C, pc->NH, mask,
                                  NULL);
  rp_attention_ref_backward(t->dqkv, t->dout, t->qkv, att, pc->B, pc->T, pc->C, pc->NH, NULL);
  free(att);
  free(mask);
}

static int compare(const char *what, const tensors *got, const tensors *want,
                   const packed_case *pc) {
  const long rows = (long)pc->B * pc->T;
  char name[96];
  int fails = 0;
  snprintf(name, sizeof name, "%s out", what);
  fails += ta_maxdiff(name, got->out, want->out, rows * pc->C, FT_ATOL) > FT_ATOL;
  snprintf(name, sizeof name, "%s lse", what);
  fails += ta_maxdiff(name, got->lse, want->lse, (long)pc->B * pc->NH * pc->T, FT_ATOL) > FT_ATOL;
  snprintf(name, sizeof name, "%s dqkv", what);
  fails += ta_maxdiff(name, got->dqkv, want->dqkv, rows * 3 * pc->C, FT_ATOL) > FT_ATOL;
  return fails;
}

static int check_case(const packed_case *pc) {
  rp_docs d;
  docs_of(&d, pc);
  tensors ref, solo;
  tensors_init(&ref, pc, 11);
  tensors_init(&solo, pc, 11);
  run_reference(&ref, pc, &d);
  run_per_document(&solo, pc, &d, g_pool[1]);
  int fails = compare("per-document vs reference", &solo, &ref, pc);
  static const int blocks[3][2] = {{0, 0}, {7, 13}, {16, 32}};
  static const rp_flash_split splits[2] = {RP_FLASH_SPLIT_HEAD, RP_FLASH_SPLIT_KEYBLOCK};
  for (int ii = 0; ii < 3; ii++) {
    if (!rp_flash_isa_supported(ft_isas[ii])) continue;
    for (int bi = 0; bi < 3; bi++)
      for (int si = 0; si < 2; si++)
        for (int th = 1; th <= 2; th++) {
          ft_configure(ft_isas[ii], splits[si], blocks[bi][0], blocks[bi][1]);
          tensors got;
          tensors_init(&got, pc, 11);
          run_packed(&got, pc, &d, g_pool[th]);
          char what[96];
          snprintf(what, sizeof what, "T=%d isa=%s bq=%d bk=%d split=%d threads=%d", pc->T,
                   rp_flash_isa_name(ft_isas[ii]), blocks[bi][0], blocks[bi][1], si, th);
          int f = compare(what, &got, &ref, pc) + compare(what, &got, &solo, pc);
          if (f) fprintf(stderr, "FAILED %s\n", what);
          fails += f;
          tensors_free(&got);
        }
  }
  ft_reset_config();
  tensors_free(&ref);
  tensors_free(&solo);
  rp_docs_free(&d);
  return fails;
}

/* Lengths 1, a full row, and lengths that 2P = 4 or 8 does not divide. */
static void test_packed_equals_per_document(void **state) {
  static const int32_t r0[] = {1, 13, 37, 1, 45}, r1[] = {97}, r2[] = {50, 1, 1, 45};
  packed_case a = {.B = 3, .T = 97, .C = 32, .NH = 2, .lens = {r0, r1, r2}, .n = {5, 1, 4}};
  assert_int_equal(check_case(&a), 0);
  static const int32_t s0[] = {5, 100, 1, 150}, s1[] = {256};
  packed_case b = {.B = 2, .T = 256, .C = 64, .NH = 4, .lens = {s0, s1}, .n = {4, 1}};
  assert_int_equal(check_case(&b), 0);
}

/* A key tile that no query row sees is never read: NaN keys and values there
 * would poison O (0 * NaN) and dQ if the tile were computed and masked. */
static void test_invisible_tiles_skipped(void **state) {
  const int B = 1, NH = 1, HS = 16, Tq = 16, Tk = 48;
  ft_configure(RP_FLASH_ISA_AUTO, RP_FLASH_SPLIT_AUTO, 16, 16);
  rp_rng rng;
  rp_rng_seed(&rng, 3);
  float *q = ta_floats(Tq * HS), *k = ta_floats(Tk * HS), *v = ta_floats(Tk * HS);
  float *o = ta_floats(Tq * HS), *lse = ta_floats(Tq), *dout = ta_floats(Tq * HS);
  float *dsum = ta_floats(Tq), *dq = ta_floats(Tq * HS);
  ta_fill(q, Tq * HS, &rng, -1, 1);
  ta_fill(k, Tk * HS, &rng, -1, 1);
  ta_fill(v, Tk * HS, &rng, -1, 1);
  ta_fill(dout, Tq * HS, &rng, -1, 1);
  for (int i = 0; i < 16 * HS; i++) k[i] = v[i] = NAN;            /* tile 0: nobody sees it */
  for (int i = 32 * HS; i < Tk * HS; i++) k[i] = v[i] = NAN;      /* tile 2 neither */
  int32_t kr[2 * 16];
  for (int i = 0; i < Tq; i++) kr[2 * i] = 16 + i / 2, kr[2 * i + 1] = 17 + i;  /* in tile 1 */
  rp_flash_problem pr = {.B = B, .NH = NH, .HS = HS, .Tq = Tq, .Tk = Tk,
                         .vis = RP_FLASH_VIS_RANGE, .q = rp_flash_view_of(q, HS, Tq * HS),
                         .k = rp_flash_view_of(k, HS, Tk * HS), .v = rp_flash_view_of(v, HS, Tk * HS),
                         .krange = kr, .krange_bs = 2 * Tq, .cfg = &ft_cfg};
  assert_int_equal(rp_flash_block_forward(&pr, rp_flash_view_of(o, HS, Tq * HS),
                                          rp_flash_view_of(lse, Tq, Tq), g_pool[2]), RP_OK);
  assert_int_equal(rp_flash_rowdot(rp_flash_view_of(dsum, Tq, Tq), rp_flash_view_of(dout, HS, Tq * HS),
                                   rp_flash_view_of(o, HS, Tq * HS), B, NH, Tq, HS, &ft_cfg, NULL), RP_OK);
  rp_flash_view none = {0};
  assert_int_equal(rp_flash_block_backward(&pr, rp_flash_view_of(dout, HS, Tq * HS),
                                           rp_flash_view_of(lse, Tq, Tq),
                                           rp_flash_view_of(dsum, Tq, Tq),
                                           rp_flash_view_of(dq, HS, Tq * HS), none, none,
                                           g_pool[2]), RP_OK);
  for (int i = 0; i < Tq * HS; i++) {
    assert_true(isfinite(o[i]));
    assert_true(isfinite(dq[i]));
  }
  ft_reset_config();
  free(q), free(k), free(v), free(o), free(lse), free(dout), free(dsum), free(dq);
}

/* The backends with documents: flash equals the reference backend, and a
 * layout that does not match the batch, or a bad length, is refused. */
static void test_backends_with_docs(void **state) {
  static const int32_t r0[] = {3, 1, 29}, r1[] = {20, 13};
  packed_case pc = {.B = 2, .T = 33, .C = 32, .NH = 4, .lens = {r0, r1}, .n = {3, 2}};
  rp_docs d;
  docs_of(&d, &pc);
  const rp_attn_backend *fa = rp_attn_flash(), *ra = rp_attn_reference();
  rp_attn_batch bf, br;
  assert_int_equal(rp_attn_prepare(fa, &bf, pc.B, pc.T, pc.C, pc.NH, &d), RP_OK);
  assert_int_equal(rp_attn_prepare(ra, &br, pc.B, pc.T, pc.C, pc.NH, &d), RP_OK);
  tensors f, r;
  tensors_init(&f, &pc, 5);
  tensors_init(&r, &pc, 5);
  float *sr = ta_floats((long)ra->saved_floats(ra, pc.B, pc.T, pc.C, pc.NH));
  assert_int_equal(fa->forward(fa, &bf, f.out, f.lse, f.qkv, g_pool[2]), RP_OK);
  assert_int_equal(ra->forward(ra, &br, r.out, sr, r.qkv, g_pool[2]), RP_OK);
  assert_int_equal(fa->backward(fa, &bf, f.dqkv, f.dout, f.qkv, f.out, f.lse, g_pool[2]), RP_OK);
  assert_int_equal(ra->backward(ra, &br, r.dqkv, r.dout, r.qkv, r.out, sr, g_pool[2]), RP_OK);
  const long rows = (long)pc.B * pc.T;
  assert_true(ta_maxdiff("backend out", f.out, r.out, rows * pc.C, FT_ATOL) <= FT_ATOL);
  assert_true(ta_maxdiff("backend dqkv", f.dqkv, r.dqkv, rows * 3 * pc.C, FT_ATOL) <= FT_ATOL);
  /* a layout of another shape, and bad lengths */
  assert_int_equal(rp_attn_prepare(fa, &bf, pc.B, pc.T + 1, pc.C, pc.NH, &d), RP_EINVAL);
  assert_null(bf.backend);
  static const int32_t zero[] = {33, 0}, shortrow[] = {10, 10};
  assert_int_equal(rp_docs_set_row(&d, 0, zero, 2), RP_EINVAL);
  assert_int_equal(rp_docs_set_row(&d, 0, shortrow, 2), RP_EINVAL);
  d.cu[1] = d.cu[2];  /* an empty document written behind the setter's back */
  assert_int_equal(rp_attn_prepare(ra, &br, pc.B, pc.T, pc.C, pc.NH, &d), RP_EINVAL);
  free(sr);
  tensors_free(&f);
  tensors_free(&r);
  rp_docs_free(&d);
}

/* Position ids restart per document; the key ranges are [doc start, t + 1). */
static void test_positions_and_ranges(void **state) {
  static const int32_t r0[] = {2, 1, 3};
  rp_docs d;
  assert_int_equal(rp_docs_init(&d, 1, 6), RP_OK);
  assert_int_equal(rp_docs_set_row(&d, 0, r0, 3), RP_OK);
  int32_t pos[6], kr[12];
  rp_docs_positions(&d, pos);
  rp_docs_self_ranges(&d, kr);
  static const int32_t want_pos[6] = {0, 1, 0, 0, 1, 2}, want_kr[12] = {0, 1, 0, 2, 2, 3,
                                                                        3, 4, 3, 5, 3, 6};
  assert_memory_equal(pos, want_pos, sizeof pos);
  assert_memory_equal(kr, want_kr, sizeof kr);
  assert_true(rp_docs_pairs(&d) == 3 + 1 + 6);
  rp_docs_free(&d);
}

/* The length mix: seeded (same seed, same rows), rows filled exactly, long and
 * short documents in their ranges (the last of a row may be cut shorter). */
static void test_length_mix(void **state) {
  rp_docs_mix mix = rp_docs_mix_default();
  mix.long_frac = 0.2;
  rp_docs a, b;
  assert_int_equal(rp_docs_init(&a, 3, 20000), RP_OK);
  assert_int_equal(rp_docs_init(&b, 3, 20000), RP_OK);
  assert_int_equal(rp_docs_fill_mix(&a, &mix, 9), RP_OK);
  assert_int_equal(rp_docs_fill_mix(&b, &mix, 9), RP_OK);
  assert_int_equal(rp_docs_check(&a, 3, 20000), RP_OK);
  assert_memory_equal(a.cu, b.cu, sizeof(int32_t) * 3 * 20001);
  int longs = 0, shorts = 0;
  for (int r = 0; r < 3; r++) {
    const int32_t *cu = rp_docs_row(&a, r);
    for (int i = 0; i + 1 < a.ndocs[r]; i++) {   /* the last may be cut */
      int L = cu[i + 1] - cu[i];
      assert_true((L >= 64 && L <= 512) || (L >= 4096 && L <= 8192));
      longs += L >= 4096, shorts += L <= 512;
    }
  }
  assert_true(longs > 0 && shorts > longs);   /* 20% long by count */
  assert_int_equal(rp_docs_fill_mix(&b, &mix, 10), RP_OK);
  assert_true(memcmp(a.cu, b.cu, sizeof(int32_t) * 3 * 20001) != 0);
  mix.short_min = 0;
  assert_int_equal(rp_docs_fill_mix(&b, &mix, 9), RP_EINVAL);
  rp_docs_free(&a);
  rp_docs_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_positions_and_ranges),
      cmocka_unit_test(test_packed_equals_per_document),
      cmocka_unit_test(test_invisible_tiles_skipped),
      cmocka_unit_test(test_backends_with_docs),
      cmocka_unit_test(test_length_mix),
  };
  ft_report_skipped("flash_docs");
  return cmocka_run_group_tests(tests, setup, teardown);
}
