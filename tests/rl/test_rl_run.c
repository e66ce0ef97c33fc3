/* Whole jobs on a tiny model: SFT, then GRPO and PPO from its checkpoint.
 * Every metric is finite, SFT's loss falls, the first pass is on-policy
 * (ratio exactly 1, and no clipping with one pass), the trainer's log-probs
 * of the sampled tokens equal the sampler's, KL is >= 0, the loss
 * aggregations and dynamic sampling run, a resumed GRPO job continues
 * bitwise, and resuming from another job's checkpoint is refused. */
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_rl.h"

static char g_dir[256];

/* Runs a job with the tiny model's options plus `extra` (NULL-terminated). */
static rp_status job(rp_rl_algo algo, const char *out, const char *const *extra) {
  const char *base[] = {"--layers", "1", "--channels", "32", "--heads", "2", "--seq", "16",
                        "--task", "add", "--task-size", "2", "--eval-n", "24", "--threads", "1",
                        "--no-pin", "--quiet", "--out", out};
  char *argv[64];
  int argc = 0;
  for (size_t i = 0; i < sizeof base / sizeof *base; i++) argv[argc++] = (char *)base[i];
  for (int i = 0; extra && extra[i]; i++) argv[argc++] = (char *)extra[i];
  int n;
  const rp_opt *tab = rp_rl_opt_table(algo, &n);
  rp_rl_opts o;
  memset(&o, 0, sizeof o);
  rp_status s = rp_opts_parse(tab, n, &o, argc, argv, NULL, NULL, NULL);
  if (s != RP_OK) fail_msg("options: %s", rp_errmsg());
  return rp_rl_run(algo, &o);
}

#define expect_ok(call)                                                    \
  do {                                                                     \
    rp_status st_ = (call);                                                \
    if (st_ != RP_OK) fail_msg("%s: %s", rp_status_name(st_), rp_errmsg()); \
  } while (0)

static void path_in(char *buf, size_t cap, const char *sub) {
  snprintf(buf, cap, "%s/%s", g_dir, sub);
}

/* metrics.jsonl as lines (malloc'd), checking that nothing is nan or inf. */
static int read_lines(const char *out, char lines[][1024], int cap) {
  char path[512];
  snprintf(path, sizeof path, "%s/metrics.jsonl", out);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  int n = 0;
  while (n < cap && fgets(lines[n], 1024, f)) {
    lines[n][strcspn(lines[n], "\n")] = '\0';
    assert_int_equal(rp_json_validate(lines[n]), RP_OK);
    if (strstr(lines[n], "nan") || strstr(lines[n], "inf"))
      fail_msg("non-finite metric in %s: %s", path, lines[n]);
    n++;
  }
  fclose(f);
  return n;
}

static double num(const char *line, const char *key) {
  double v;
  if (rp_json_get_number(line, key, &v) != RP_OK) fail_msg("no %s in %s", key, line);
  return v;
}

static char lines[64][1024];

static void test_sft(void **state) {
  (void)state;
  char out[300];
  path_in(out, sizeof out, "sft");
  const char *extra[] = {"--steps", "40", "--batch", "32", "--micro", "12", "--lr", "3e-3",
                         "--warmup", "5", "--eval-every", "20", NULL};
  expect_ok(job(RP_RL_SFT, out, extra));
  int n = read_lines(out, lines, 64);
  assert_int_equal(n, 41);  /* step 0 evaluation + 40 steps */
  double acc0 = num(lines[0], "heldout_acc");
  assert_true(acc0 >= 0 && acc0 <= 1);
  double first = num(lines[1], "loss"), last = num(lines[40], "loss");
  assert_true(last < 0.7 * first);
  num(lines[20], "heldout_acc");
  num(lines[40], "heldout_acc");
}

static void check_rl_lines(int n, int grpo) {
  for (int i = 1; i < n; i++) {
    double r = num(lines[i], "reward_mean");
    assert_true(r >= 0 && r <= 1);
    assert_true(num(lines[i], "reward_std") >= 0);
    assert_true(num(lines[i], "kl_ref") >= 0 && num(lines[i], "kl_old") >= 0);
    double c = num(lines[i], "clip_frac");
    assert_true(c >= 0 && c <= 1);
    assert_true(num(lines[i], "resp_len") >= 1);
    assert_true(num(lines[i], "grad_norm") >= 0);
    /* the trainer's log-probs of the sampled tokens are the sampler's */
    assert_true(num(lines[i], "sampler_logp_gap") < 1e-4);
    if (grpo) {
      double z = num(lines[i], "zero_std_frac");
      assert_true(z >= 0 && z <= 1);
    }
  }
}

static void test_grpo(void **state) {
  (void)state;
  char out[300], init[300];
  path_in(out, sizeof out, "grpo");
  path_in(init, sizeof init, "sft/ckpt");
  /* several passes, a reference model, two micro-batches */
  const char *extra[] = {"--init-from", init, "--steps", "4", "--prompts", "4", "--group", "4",
                         "--mu", "2", "--beta", "0.05", "--micro", "8", "--eval-every", "2",
                         "--lr", "1e-3", NULL};
  expect_ok(job(RP_RL_GRPO, out, extra));
  int n = read_lines(out, lines, 64);
  assert_int_equal(n, 5);
  check_rl_lines(n, 1);
  for (int i = 1; i < n; i++) {
    if (num(lines[i], "groups_kept") > 0) assert_true(num(lines[i], "ratio_first") == 1.0);
  }
  num(lines[2], "heldout_acc");
  /* one pass: on-policy, nothing clipped, old and new policies equal */
  path_in(out, sizeof out, "grpo_mu1");
  const char *extra1[] = {"--init-from", init, "--steps", "3", "--prompts", "4", "--group", "4",
                          "--eval-every", "0", NULL};
  expect_ok(job(RP_RL_GRPO, out, extra1));
  n = read_lines(out, lines, 64);
  assert_int_equal(n, 4);
  check_rl_lines(n, 1);
  for (int i = 1; i < n; i++) {
    assert_true(num(lines[i], "clip_frac") == 0.0);
    assert_true(num(lines[i], "kl_old") == 0.0);
  }
}

static void test_grpo_variants(void **state) {
  (void)state;
  char out[300], init[300];
  path_in(init, sizeof init, "sft/ckpt");
  path_in(out, sizeof out, "grpo_ds");
  const char *ds[] = {"--init-from", init, "--steps", "2", "--prompts", "4", "--group", "3",
                      "--dynamic-sampling", "--ds-rounds", "3", "--loss-agg", "token-mean",
                      "--clip-high", "0.28", "--eval-every", "0", NULL};
  expect_ok(job(RP_RL_GRPO, out, ds));
  int n = read_lines(out, lines, 64);
  check_rl_lines(n, 1);
  for (int i = 1; i < n; i++) {
    double rounds = num(lines[i], "rounds");
    assert_true(rounds >= 1 && rounds <= 3);
    assert_true(num(lines[i], "groups_kept") <= 4 * rounds);
  }
  path_in(out, sizeof out, "grpo_drgrpo");
  const char *dr[] = {"--init-from", init, "--steps", "2", "--prompts", "4", "--group", "3",
                      "--no-scale-std", "--loss-agg", "seq-mean-token-sum-norm",
                      "--eval-every", "0", NULL};
  expect_ok(job(RP_RL_GRPO, out, dr));
  check_rl_lines(read_lines(out, lines, 64), 1);
}

static void test_ppo(void **state) {
  (void)state;
  char out[300], init[300];
  path_in(out, sizeof out, "ppo");
  path_in(init, sizeof init, "sft/ckpt");
  const char *extra[] = {"--init-from", init, "--steps", "3", "--prompts", "6", "--group", "2",
                         "--mu", "2", "--micro", "5", "--eval-every", "3", NULL};
  expect_ok(job(RP_RL_PPO, out, extra));
  int n = read_lines(out, lines, 64);
  assert_int_equal(n, 4);
  check_rl_lines(n, 0);
  for (int i = 1; i < n; i++) {
    assert_true(num(lines[i], "ratio_first") == 1.0);
    assert_true(num(lines[i], "value_loss") >= 0);
    double v = num(lines[i], "vf_clip_frac");
    assert_true(v >= 0 && v <= 1);
  }
  num(lines[3], "heldout_acc");
}

/* The same job straight through, and stopped at step 2 then resumed. */
static void test_grpo_resume_bitwise(void **state) {
  (void)state;
  char a[300], b[300], init[300], ck[320];
  path_in(init, sizeof init, "sft/ckpt");
  path_in(a, sizeof a, "resume_a");
  path_in(b, sizeof b, "resume_b");
  const char *common[] = {"--init-from", init, "--prompts", "4", "--group", "4", "--mu", "2",
                          "--beta", "0.05", "--eval-every", "2", "--lr", "1e-3"};
  const char *ea[32], *eb[32];
  int k = 0;
  for (; k < 14; k++) ea[k] = eb[k] = common[k];
  ea[k] = "--steps", ea[k + 1] = "4", ea[k + 2] = NULL;
  eb[k] = "--steps", eb[k + 1] = "2", eb[k + 2] = NULL;
  expect_ok(job(RP_RL_GRPO, a, ea));
  expect_ok(job(RP_RL_GRPO, b, eb));
  snprintf(ck, sizeof ck, "%s/ckpt", b);
  eb[k + 1] = "4";
  eb[k + 2] = "--resume", eb[k + 3] = ck, eb[k + 4] = NULL;
  expect_ok(job(RP_RL_GRPO, b, eb));
  static char la[8][1024], lb[8][1024];
  assert_int_equal(read_lines(a, la, 8), 5);
  assert_int_equal(read_lines(b, lb, 8), 5);  /* the resumed job appends steps 3 and 4 */
  const char *keys[] = {"step", "reward_mean", "loss", "grad_norm", "kl_ref", "kl_old",
                        "resp_len"};
  for (int i = 1; i < 5; i++)
    for (size_t j = 0; j < sizeof keys / sizeof *keys; j++)
      if (num(la[i], keys[j]) != num(lb[i], keys[j]))
        fail_msg("step %d %s: straight %.9g, resumed %.9g", i, keys[j], num(la[i], keys[j]),
                 num(lb[i], keys[j]));
  assert_true(num(la[4], "heldout_acc") == num(lb[4], "heldout_acc"));
}

static void test_wrong_checkpoint_kind(void **state) {
  (void)state;
  char out[300], init[300];
  path_in(out, sizeof out, "wrong");
  path_in(init, sizeof init, "sft/ckpt");
  const char *extra[] = {"--resume", init, "--steps", "1", NULL};
  assert_int_equal(job(RP_RL_GRPO, out, extra), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "not a grpo checkpoint"));
  /* a task that does not fit the positions */
  const char *big[] = {"--task-size", "9", "--steps", "1", NULL};
  assert_int_equal(job(RP_RL_SFT, out, big), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "--seq"));
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

int main(int argc, char **argv) {
  if (rp_mpi_init(&argc, &argv) != RP_OK) return 1;
  snprintf(g_dir, sizeof g_dir, "/tmp/rp_rl_test_XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sft),         cmocka_unit_test(test_grpo),
      cmocka_unit_test(test_grpo_variants), cmocka_unit_test(test_ppo),
      cmocka_unit_test(test_grpo_resume_bitwise), cmocka_unit_test(test_wrong_checkpoint_kind),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  rp_mpi_finalize();
  return rc;
}
