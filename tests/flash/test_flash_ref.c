/* Flash attention vs the reference attention (rp_attention_ref_*), fp32, 1e-5
 * absolute: forward out and lse, backward dq, dk, dv (through dqkv, which both
 * ACCUMULATE into a random starting value), causal and not, T in
 * {1, 7, 64, 129, 1000}, head sizes 16..128 (and ragged 24, 80), several B and
 * NH, 1 and 2 threads, every instruction set this CPU has, both backward splits,
 * automatic and odd block sizes (bq != bk, not multiples of 16). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ft_util.h"
#include "kernels/work_range.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"

typedef struct {
  int B, T, C, NH;
} shape;

static rp_pool *g_pool[3];

static int setup(void **state) { return ft_pools_up(g_pool); }
static int teardown(void **state) { return ft_pools_down(g_pool); }

/* Runs one shape through every configuration; returns the number of failures. */
static int check_shape(shape s, int causal, int sweep) {
  const long nqkv = (long)s.B * s.T * 3 * s.C, nout = (long)s.B * s.T * s.C;
  const long nlse = (long)s.B * s.NH * s.T;
  rp_rng rng;
  rp_rng_seed(&rng, 1000u + 7u * (unsigned)s.T + (unsigned)s.C + 13u * (unsigned)causal);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout), *dqkv0 = ta_floats(nqkv);
  ta_fill(qkv, nqkv, &rng, -2.0f, 2.0f);
  ta_fill(dout, nout, &rng, -1.0f, 1.0f);
  ta_fill(dqkv0, nqkv, &rng, -0.5f, 0.5f);

  float *out_r = ta_floats(nout), *lse_r = ta_floats(nlse), *dqkv_r = ta_floats(nqkv);
  float *att = ta_floats((long)s.B * s.NH * s.T * s.T);
  rp_attention_ref_forward(out_r, att, lse_r, qkv, s.B, s.T, s.C, s.NH, causal, g_pool[2]);
  memcpy(dqkv_r, dqkv0, sizeof(float) * (size_t)nqkv);
  rp_attention_ref_backward(dqkv_r, dout, qkv, att, s.B, s.T, s.C, s.NH, g_pool[2]);
  free(att);

  static const rp_flash_isa isas[] = {RP_FLASH_ISA_AVX512, RP_FLASH_ISA_AVX2, RP_FLASH_ISA_SCALAR};
  /* (ft_report_skipped in main names the ISAs the ceiling or the CPU excludes) */
  static const int blocks[][2] = {{0, 0}, {24, 40}, {48, 16}};
  float *out = ta_floats(nout), *lse = ta_floats(nlse), *dqkv = ta_floats(nqkv);
  int fails = 0;
  for (int ii = 0; ii < 3; ii++) {
    if (!rp_flash_isa_supported(isas[ii])) continue;
    for (int th = 1; th <= 2; th++)
      for (int sp = RP_FLASH_SPLIT_HEAD; sp <= RP_FLASH_SPLIT_KEYBLOCK; sp++)
        for (int bi = 0; bi < 3; bi++) {
          /* the full sweep on small shapes; big ones take a representative subset */
          if (!sweep && (bi == 2 || (ii > 0 && th == 1))) continue;
          ft_configure(isas[ii], (rp_flash_split)sp, blocks[bi][0], blocks[bi][1]);
          memset(out, 0x7f, sizeof(float) * (size_t)nout);  /* garbage: must be overwritten */
          memcpy(dqkv, dqkv0, sizeof(float) * (size_t)nqkv);
          assert_int_equal(rp_flash_forward(out, lse, qkv, s.B, s.T, s.C, s.NH, causal,
                                            &ft_cfg, g_pool[th]), RP_OK);
          assert_int_equal(rp_flash_backward(dqkv, dout, qkv, out, lse, s.B, s.T, s.C, s.NH,
                                             causal, &ft_cfg, g_pool[th]), RP_OK);
          double e_o = ta_maxdiff("out", out, out_r, nout, FT_ATOL);
          double e_l = ta_maxdiff("lse", lse, lse_r, nlse, FT_ATOL);
          double e_d = ta_maxdiff("dqkv", dqkv, dqkv_r, nqkv, FT_ATOL);
          if (getenv("FT_VERBOSE"))
            fprintf(stderr, "T=%d HS=%d causal=%d %s th=%d split=%d bq=%d bk=%d: %.2g %.2g %.2g\n",
                    s.T, s.C / s.NH, causal, rp_flash_isa_name(isas[ii]), th, sp,
                    blocks[bi][0], blocks[bi][1], e_o, e_l, e_d);
          if (e_o > FT_ATOL || e_l > FT_ATOL || e_d > FT_ATOL) {
            fprintf(stderr,
                    "FAIL B=%d T=%d C=%d NH=%d causal=%d isa=%s threads=%d split=%d bq=%d bk=%d: "
                    "out %.3g lse %.3g dqkv %.3g\n",
                    s.B, s.T, s.C, s.NH, causal, rp_flash_isa_name(isas[ii]), th, sp,
                    blocks[bi][0], blocks[bi][1], e_o, e_l, e_d);
            fails++;
          }
        }
  }
  ft_reset_config();
  free(out), free(lse), free(dqkv), free(qkv), free(dout), free(dqkv0);
  free(out_r), free(lse_r), free(dqkv_r);
  return fails;
}

static void run_shapes(const shape *sh, int n, int sweep) {
  int fails = 0;
  for (int i = 0; i < n; i++)
    for (int causal = 0; causal <= 1; causal++) fails += check_shape(sh[i], causal, sweep);
  assert_int_equal(fails, 0);
}

static void test_small_T(void **state) {
  static const shape sh[] = {{2, 1, 48, 3},  /* T = 1, HS 16 */
                             {2, 7, 64, 2},  /* HS 32 */
                             {1, 7, 72, 3},  /* HS 24: ragged vector tail */
                             {1, 64, 192, 3} /* HS 64 */};
  run_shapes(sh, 4, 1);
}

static void test_T129(void **state) {
  static const shape sh[] = {{2, 129, 80, 1},   /* HS 80, one head: key-block split matters */
                             {1, 129, 256, 2}}; /* HS 128 */
  run_shapes(sh, 2, 1);
}

static void test_T1000(void **state) {
  static const shape sh[] = {{1, 1000, 128, 2}}; /* HS 64 */
  run_shapes(sh, 1, 0);
}

/* The model backend: saved state is lse (B*NH*T floats) and forward/backward
 * match the reference backend's. */
static void test_backend(void **state) {
  const rp_attn_backend *fa = rp_attn_flash(), *ra = rp_attn_reference();
  assert_string_equal(fa->name, "flash");
  const int B = 2, T = 33, C = 64, NH = 4;
  assert_int_equal(fa->saved_floats(fa, B, T, C, NH), (size_t)B * NH * T);
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C;
  rp_rng rng;
  rp_rng_seed(&rng, 5);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout);
  ta_fill(qkv, nqkv, &rng, -1.5f, 1.5f);
  ta_fill(dout, nout, &rng, -1.0f, 1.0f);
  float *of = ta_floats(nout), *orf = ta_floats(nout), *df = ta_floats(nqkv), *dr = ta_floats(nqkv);
  float *sf = ta_floats((long)fa->saved_floats(fa, B, T, C, NH));
  float *sr = ta_floats((long)ra->saved_floats(ra, B, T, C, NH));
  rp_attn_batch bf, br;
  assert_int_equal(rp_attn_prepare(fa, &bf, B, T, C, NH, NULL), RP_OK);
  assert_int_equal(rp_attn_prepare(ra, &br, B, T, C, NH, NULL), RP_OK);
  assert_int_equal(fa->forward(fa, &bf, of, sf, qkv, g_pool[2]), RP_OK);
  assert_int_equal(ra->forward(ra, &br, orf, sr, qkv, g_pool[2]), RP_OK);
  assert_int_equal(fa->backward(fa, &bf, df, dout, qkv, of, sf, g_pool[2]), RP_OK);
  assert_int_equal(ra->backward(ra, &br, dr, dout, qkv, orf, sr, g_pool[2]), RP_OK);
  assert_true(ta_maxdiff("backend out", of, orf, nout, FT_ATOL) <= FT_ATOL);
  assert_true(ta_maxdiff("backend dqkv", df, dr, nqkv, FT_ATOL) <= FT_ATOL);
  free(qkv), free(dout), free(of), free(orf), free(df), free(dr), free(sf), free(sr);
}

/* Two runs in one process with different flash settings (tiny tiles on the
 * scalar path, and automatic), called alternately: each matches the reference,
 * so neither leaks its settings into the other. */
static void test_two_configs_interleaved(void **state) {
  rp_flash_config tiny = {.bq = 3, .bk = 5, .isa = RP_FLASH_ISA_SCALAR}, autocfg = {0};
  rp_attn_backend a1, a2;
  assert_int_equal(rp_attn_flash_with(&a1, &tiny), RP_OK);
  assert_int_equal(rp_attn_flash_with(&a2, &autocfg), RP_OK);
  const rp_attn_backend *ra = rp_attn_reference();
  const int B = 1, T = 29, C = 64, NH = 2;
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C;
  rp_rng rng;
  rp_rng_seed(&rng, 9);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout), *orf = ta_floats(nout);
  float *dr = ta_floats(nqkv), *sr = ta_floats((long)ra->saved_floats(ra, B, T, C, NH));
  ta_fill(qkv, nqkv, &rng, -1.5f, 1.5f);
  ta_fill(dout, nout, &rng, -1.0f, 1.0f);
  rp_attn_batch br, bf;
  assert_int_equal(rp_attn_prepare(ra, &br, B, T, C, NH, NULL), RP_OK);
  assert_int_equal(ra->forward(ra, &br, orf, sr, qkv, g_pool[2]), RP_OK);
  assert_int_equal(ra->backward(ra, &br, dr, dout, qkv, orf, sr, g_pool[2]), RP_OK);
  const rp_attn_backend *order[4] = {&a1, &a2, &a1, &a2};
  for (int i = 0; i < 4; i++) {
    const rp_attn_backend *fa = order[i];
    float *of = ta_floats(nout), *df = ta_floats(nqkv), *sf = ta_floats((long)B * NH * T);
    assert_int_equal(rp_attn_prepare(fa, &bf, B, T, C, NH, NULL), RP_OK);
    assert_int_equal(fa->forward(fa, &bf, of, sf, qkv, g_pool[2]), RP_OK);
    assert_int_equal(fa->backward(fa, &bf, df, dout, qkv, of, sf, g_pool[2]), RP_OK);
    assert_true(ta_maxdiff("interleaved out", of, orf, nout, FT_ATOL) <= FT_ATOL);
    assert_true(ta_maxdiff("interleaved dqkv", df, dr, nqkv, FT_ATOL) <= FT_ATOL);
    free(of), free(df), free(sf);
  }
  free(qkv), free(dout), free(orf), free(dr), free(sr);
}

/* The key-block split adds dQ in key-block order whatever thread ran which
 * block: 1, 2 and 3 threads give the same dqkv bit for bit (the old per-thread
 * partial sums depended on which thread took which block). */
static void test_keyblock_dq_deterministic(void **state) {
  const int B = 1, T = 203, C = 96, NH = 3;   /* 3 heads: never a multiple of 2 */
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C;
  rp_rng rng;
  rp_rng_seed(&rng, 21);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout), *out = ta_floats(nout);
  float *lse = ta_floats((long)B * NH * T), *d[3];
  ta_fill(qkv, nqkv, &rng, -1.5f, 1.5f);
  ta_fill(dout, nout, &rng, -1.0f, 1.0f);
  rp_pool *p3 = ta_pool(3);
  rp_pool *pools[3] = {g_pool[1], g_pool[2], p3};
  for (int causal = 0; causal <= 1; causal++) {
    rp_flash_config cfg = {.bq = 16, .bk = 24, .split = RP_FLASH_SPLIT_KEYBLOCK};
    assert_int_equal(rp_flash_forward(out, lse, qkv, B, T, C, NH, causal, &cfg, g_pool[1]),
                     RP_OK);
    for (int i = 0; i < 3; i++) {
      d[i] = ta_floats(nqkv);
      for (int rep = 0; rep < 2; rep++) /* twice: += onto the first result */
        assert_int_equal(rp_flash_backward(d[i], dout, qkv, out, lse, B, T, C, NH, causal,
                                           &cfg, pools[i]), RP_OK);
    }
    assert_memory_equal(d[0], d[1], sizeof(float) * (size_t)nqkv);
    assert_memory_equal(d[0], d[2], sizeof(float) * (size_t)nqkv);
    for (int i = 0; i < 3; i++) free(d[i]);
  }
  rp_pool_destroy(p3);
  free(qkv), free(dout), free(out), free(lse);
}

/* The forward packs K/V into group + nthreads - 1 head slots (here 1, 3 and
 * 5: the heads are short, a group is nthreads of them) that later heads reuse:
 * with B*NH = 10 heads on 1, 2 and 3 threads every slot serves several heads
 * (a worker waits while its head's slot still serves an earlier head); out and
 * lse must match the reference and be the same bit for bit whatever the
 * thread count. Where the threads divide the heads (10 on 2, 12 on 2 and 3)
 * each takes its own share in its own slot (rp_flash_own_heads), else they
 * share a counter: both ways give the same bits. */
static void head_slots_case(int B, int NH);

static void test_forward_head_slots(void **state) {
  head_slots_case(2, 5);
  head_slots_case(3, 4);
}

static void head_slots_case(int B, int NH) {
  const int T = 203, C = 16 * NH;
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C, nlse = (long)B * NH * T;
  rp_rng rng;
  rp_rng_seed(&rng, 33);
  float *qkv = ta_floats(nqkv), *att = ta_floats((long)B * NH * T * T);
  float *out_r = ta_floats(nout), *lse_r = ta_floats(nlse), *out[3], *lse[3];
  ta_fill(qkv, nqkv, &rng, -2.0f, 2.0f);
  rp_pool *p3 = ta_pool(3);
  rp_pool *pools[3] = {g_pool[1], g_pool[2], p3};
  for (int causal = 0; causal <= 1; causal++) {
    rp_attention_ref_forward(out_r, att, lse_r, qkv, B, T, C, NH, causal, g_pool[2]);
    rp_flash_config cfg = {.bq = 16, .bk = 24};
    for (int i = 0; i < 3; i++) {
      out[i] = ta_floats(nout), lse[i] = ta_floats(nlse);
      assert_int_equal(rp_flash_forward(out[i], lse[i], qkv, B, T, C, NH, causal, &cfg,
                                        pools[i]), RP_OK);
    }
    assert_true(ta_maxdiff("out", out[0], out_r, nout, FT_ATOL) <= FT_ATOL);
    assert_true(ta_maxdiff("lse", lse[0], lse_r, nlse, FT_ATOL) <= FT_ATOL);
    for (int i = 1; i < 3; i++) {
      assert_memory_equal(out[0], out[i], sizeof(float) * (size_t)nout);
      assert_memory_equal(lse[0], lse[i], sizeof(float) * (size_t)nlse);
    }
    for (int i = 0; i < 3; i++) free(out[i]), free(lse[i]);
  }
  rp_pool_destroy(p3);
  free(qkv), free(att), free(out_r), free(lse_r);
}

/* Short heads the threads divide evenly (own shares), one thread held back
 * as each pass starts until the other has taken some of its heads
 * (work_range.h):
 * the forward's out and lse and the backward's dqkv bitwise the one-thread
 * ones, with the caller held back and with the worker, and heads counted as
 * taken. */
static void test_own_heads_straggler(void **state) {
  const int B = 2, T = 64, C = 64, NH = 4;
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C, nlse = (long)B * NH * T;
  rp_rng rng;
  rp_rng_seed(&rng, 44);
  float *qkv = ta_floats(nqkv), *dout = ta_floats(nout);
  ta_fill(qkv, nqkv, &rng, -1.5f, 1.5f);
  ta_fill(dout, nout, &rng, -1.0f, 1.0f);
  for (int late = 0; late < 2; late++) {
    float *out[2], *lse[2], *d[2];
    for (int i = 0; i < 2; i++) {
      out[i] = ta_floats(nout), lse[i] = ta_floats(nlse), d[i] = ta_floats(nqkv);
      const long before = rp_work_units_taken();
      rp_work_set_straggler(late, i ? RP_WORK_TEST_HOLD_S : 0.0);
      assert_int_equal(rp_flash_forward(out[i], lse[i], qkv, B, T, C, NH, 1, NULL, g_pool[i + 1]),
                       RP_OK);
      rp_work_set_straggler(late, i ? RP_WORK_TEST_HOLD_S : 0.0); /* the backward's own hold */
      assert_int_equal(rp_flash_backward(d[i], dout, qkv, out[i], lse[i], B, T, C, NH, 1, NULL,
                                         g_pool[i + 1]), RP_OK);
      rp_work_set_straggler(0, 0.0);
      if (i) assert_true(rp_work_units_taken() >= before + 2); /* a head in each pass */
    }
    assert_memory_equal(out[0], out[1], sizeof(float) * (size_t)nout);
    assert_memory_equal(lse[0], lse[1], sizeof(float) * (size_t)nlse);
    assert_memory_equal(d[0], d[1], sizeof(float) * (size_t)nqkv);
    for (int i = 0; i < 2; i++) free(out[i]), free(lse[i]), free(d[i]);
  }
  free(qkv), free(dout);
}

/* Bad shapes and configurations are refused with a message, not a crash. */
static void test_errors(void **state) {
  float x[48] = {0};
  assert_int_equal(rp_flash_forward(x, x, x, 1, 1, 10, 3, 1, NULL, NULL), RP_EINVAL);
  assert_true(strstr(rp_errmsg(), "divide") != NULL);
  rp_flash_config cfg = {.bq = -1};
  assert_int_equal(rp_flash_config_check(&cfg), RP_EINVAL);
  rp_attn_backend bad;
  assert_int_equal(rp_attn_flash_with(&bad, &cfg), RP_EINVAL);
  assert_true(strstr(rp_errmsg(), "bq=-1") != NULL);
  rp_flash_problem pr = {.B = 1, .NH = 1, .HS = 300, .Tq = 1, .Tk = 1};
  assert_int_equal(rp_flash_block_forward(&pr, rp_flash_view_of(x, 300, 300),
                                          rp_flash_view_of(x, 1, 1), NULL), RP_EINVAL);
  assert_true(strstr(rp_errmsg(), "HS=300") != NULL);
  int bq, bk;
  rp_flash_block_sizes(NULL, 64, 4096, 4096, &bq, &bk);
  assert_true(bq >= 16 && bk >= 16 && bq <= 1024 && bk <= 1024);
  assert_true(rp_flash_l2_bytes(NULL) > 0);
  /* a config's settings are its own: blocks and L2 follow it, NULL stays automatic */
  rp_flash_config small = {.bq = 8, .bk = 5, .l2_bytes = 65536};
  rp_flash_block_sizes(&small, 64, 4096, 4096, &bq, &bk);
  assert_true(bq == 8 && bk == 5);
  assert_int_equal(rp_flash_l2_bytes(&small), 65536);
  rp_flash_block_sizes(NULL, 64, 4096, 4096, &bq, &bk);
  assert_true(bq != 8 && bk != 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_small_T), cmocka_unit_test(test_T129),
      cmocka_unit_test(test_T1000),   cmocka_unit_test(test_backend),
      cmocka_unit_test(test_two_configs_interleaved),
      cmocka_unit_test(test_keyblock_dq_deterministic),
      cmocka_unit_test(test_forward_head_slots),
      cmocka_unit_test(test_own_heads_straggler),
      cmocka_unit_test(test_errors),
  };
  ft_report_skipped("flash_ref");
  return cmocka_run_group_tests(tests, setup, teardown);
}
