/* The ENUM option rows parse a word to its position in "a|b|c", so each row's
 * word order must be its enum's order. This test ties every row of the train
 * and RL tables to the enum the code compares against, by the enum's own name
 * function where it has one, so that reordering either side fails here and
 * not as a silently different run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_rl.h"
#include "ringpipe/rp_train.h"

static const char *word(const rp_opt *t, int n, const char *name, int value, char *buf) {
  const rp_opt *o = rp_opts_find(t, n, name);
  assert_non_null(o);
  assert_int_equal(o->type, RP_OPT_ENUM);
  return rp_opts_enum_word(t, n, name, value, buf, 64);
}

#define TRAIN(name, v) word(rp_train_opt_table, rp_train_opt_count, name, v, buf)

static void test_train_rows(void **state) {
  (void)state;
  char buf[64];
  for (int r = RP_RECOMPUTE_NONE; r <= RP_RECOMPUTE_FULL; r++)
    assert_string_equal(TRAIN("recompute", r), rp_recompute_name((rp_recompute)r));
  assert_string_equal(TRAIN("cp-layout", RP_CP_SPLIT_ZIGZAG), rp_cp_layout_name(RP_CP_ZIGZAG));
  assert_string_equal(TRAIN("cp-layout", RP_CP_SPLIT_CONTIGUOUS),
                      rp_cp_layout_name(RP_CP_CONTIGUOUS));
  for (int s = RP_CP_SPLIT_DOC_ZIGZAG; s <= RP_CP_SPLIT_BALANCED; s++) {
    rp_cp_layout base;
    rp_cp_place place;
    rp_cp_split_resolve((rp_cp_split)s, &base, &place);
    assert_string_equal(TRAIN("cp-layout", s), rp_cp_place_name(place));
  }
  assert_string_equal(TRAIN("cp-impl", RP_CP_RING), "ring");
  assert_string_equal(TRAIN("cp-impl", RP_CP_ULYSSES), "ulysses");
  assert_string_equal(TRAIN("lr-schedule", RP_LR_COSINE), "cosine");
  assert_string_equal(TRAIN("lr-schedule", RP_LR_CONSTANT), "constant");
  assert_string_equal(TRAIN("precision", RP_PRECISION_FP32), "fp32");
  assert_string_equal(TRAIN("precision", RP_PRECISION_BF16), "bf16");
  assert_string_equal(TRAIN("attention", RP_ATTN_NAIVE), "naive");
  assert_string_equal(TRAIN("attention", RP_ATTN_FLASH), "flash");
  assert_string_equal(TRAIN("gemm", RP_GEMM_CHOOSE_AUTO), "auto");
  assert_string_equal(TRAIN("gemm", RP_GEMM_CHOOSE_BLAS), "blas");
  assert_string_equal(TRAIN("gemm", RP_GEMM_CHOOSE_SPLIT), "split");
  assert_string_equal(TRAIN("post-validate", RP_POSTVAL_OFF), "off");
  assert_string_equal(TRAIN("post-validate", RP_POSTVAL_ON), "on");
  assert_string_equal(TRAIN("post-validate", RP_POSTVAL_ALWAYS_ROLLBACK), "always-rollback");
  /* one past the last word is no word */
  assert_string_equal(TRAIN("recompute", RP_RECOMPUTE_FULL + 1), "");
}

static void test_rl_rows(void **state) {
  (void)state;
  char buf[64];
  const rp_rl_algo algos[3] = {RP_RL_SFT, RP_RL_GRPO, RP_RL_PPO};
  for (int a = 0; a < 3; a++) {
    int n;
    const rp_opt *t = rp_rl_opt_table(algos[a], &n);
    for (int k = RP_TASK_ADD; k <= RP_TASK_COUNTDOWN; k++)
      assert_string_equal(word(t, n, "task", k, buf), rp_task_name((rp_task_kind)k));
    assert_string_equal(word(t, n, "precision", RP_PRECISION_BF16, buf), "bf16");
    assert_string_equal(word(t, n, "attention", RP_ATTN_FLASH, buf), "flash");
    assert_string_equal(word(t, n, "lr-schedule", RP_LR_CONSTANT, buf), "constant");
    if (algos[a] == RP_RL_SFT) continue;
    for (int g = RP_AGG_TOKEN_MEAN; g <= RP_AGG_SEQ_MEAN_TOKEN_SUM_NORM; g++) {
      rp_loss_agg parsed;
      assert_int_equal(rp_loss_agg_parse(word(t, n, "loss-agg", g, buf), &parsed), RP_OK);
      assert_int_equal(parsed, g);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_train_rows),
                                     cmocka_unit_test(test_rl_rows)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
