/* Schedules that must be rejected: corrupted lists (a missing RECV, a swap
 * that deadlocks, a duplicated F, W before I), invalid configurations, bad CSV
 * (with line:column); plus CSV round trips and the `ringpipe sim` command. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ringpipe/rp_schedule.h"

int rp_cmd_sim(int argc, char **argv);

static rp_schedule *make(const char *name, int p, int v, int m, int lowered) {
  rp_schedule *s;
  rp_status st = lowered ? rp_schedule_make(name, p, v, m, &s)
                         : rp_schedule_generate(name, p, v, m, &s);
  if (st != RP_OK) fail_msg("%s: %s", name, rp_errmsg());
  return s;
}

static int find(const rp_schedule *s, int r, int op, int chunk, int mb) {
  for (int i = 0; i < s->n[r]; i++)
    if (s->acts[r][i].op == op && s->acts[r][i].chunk == chunk && s->acts[r][i].mb == mb) return i;
  fail_msg("rank %d has no %s of chunk %d mb %d", r, rp_op_name(op), chunk, mb);
  return -1;
}

static void drop(rp_schedule *s, int r, int i) {
  memmove(&s->acts[r][i], &s->acts[r][i + 1], (size_t)(s->n[r] - i - 1) * sizeof(rp_action));
  s->n[r]--;
}

static void swap(rp_schedule *s, int r, int i, int j) {
  rp_action t = s->acts[r][i];
  s->acts[r][i] = s->acts[r][j];
  s->acts[r][j] = t;
}

/* The validator rejects s with a message containing every given piece. */
static void expect_invalid(const rp_schedule *s, int rank, const char *a, const char *b) {
  rp_sched_pos where;
  rp_errclear();
  assert_int_equal(rp_schedule_validate(s, &where), RP_EINVAL);
  const char *msg = rp_errmsg();
  if (!strstr(msg, a) || (b && !strstr(msg, b)))
    fail_msg("message lacks '%s'/'%s': %s", a, b ? b : "", msg);
  if (rank >= 0) assert_int_equal(where.rank, rank);
}

static void test_missing_recv(void **state) {
  (void)state;
  rp_schedule *s = make("1f1b", 4, 1, 8, 1);
  drop(s, 2, find(s, 2, RP_OP_RECV_F, 0, 3));
  expect_invalid(s, 2, "rank 2: chunk 0 micro-batch 3 has 0 RECV_F", "needs 1");
  rp_schedule_free(s);
  s = make("zb-h1", 4, 1, 8, 1);
  drop(s, 1, find(s, 1, RP_OP_SEND_B, 0, 5));
  expect_invalid(s, 1, "0 SEND_B", NULL);
  rp_schedule_free(s);
}

/* Rank 0 waits for gradient 0 before sending activation 3, which rank 1
 * receives (blocking) before it sends gradient 0: a cycle. */
static void test_swap_deadlocks(void **state) {
  (void)state;
  rp_schedule *s = make("1f1b", 4, 1, 8, 1);
  int a = find(s, 0, RP_OP_SEND_F, 0, 3), b = find(s, 0, RP_OP_RECV_B, 0, 0);
  swap(s, 0, a, b);
  expect_invalid(s, -1, "deadlock", "rank 0 waits at action 7 (0RECV_B0) for rank 1's 0SEND_B0");
  rp_schedule_free(s);

  /* Compute-only: rank 0 runs B0 before F1, but B0's gradient needs F1 to
   * have passed rank 0 first (rank 2 runs F1 before B0). */
  s = make("1f1b", 4, 1, 8, 0);
  swap(s, 0, find(s, 0, RP_OP_F, 0, 1), find(s, 0, RP_OP_B, 0, 0));
  expect_invalid(s, -1, "deadlock", "rank 0 waits at action 1 (0B0)");
  rp_schedule *low;
  rp_sched_pos where;
  assert_int_equal(rp_schedule_lower(s, &low, &where), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "deadlocks"));
  assert_int_equal(where.rank, 0);
  assert_int_equal(where.index, 1);
  rp_schedule_free(s);
}

static void test_duplicate_and_missing(void **state) {
  (void)state;
  rp_schedule *s = make("gpipe", 2, 1, 4, 0);
  assert_int_equal(rp_schedule_push(s, 1, (rp_action){RP_OP_F, 0, 2}), RP_OK);
  expect_invalid(s, 1, "rank 1: chunk 0 micro-batch 2 has 2 F", NULL);
  rp_schedule_free(s);
  s = make("interleaved", 2, 2, 4, 1);
  drop(s, 0, find(s, 0, RP_OP_B, 1, 3));
  expect_invalid(s, 0, "chunk 1 micro-batch 3 has 0 B, 0 I, 0 W", NULL);
  rp_schedule_free(s);
  s = make("gpipe", 2, 1, 4, 0);
  s->acts[0][0].chunk = 1;
  expect_invalid(s, 0, "chunk 1 outside 0..0", NULL);
  rp_schedule_free(s);
}

static void test_order_errors(void **state) {
  (void)state;
  rp_schedule *s = make("zb-h1", 4, 1, 8, 0);
  swap(s, 0, find(s, 0, RP_OP_I, 0, 2), find(s, 0, RP_OP_W, 0, 2));
  expect_invalid(s, 0, "its W (action", "comes before its I");
  rp_schedule_free(s);
  s = make("1f1b", 2, 1, 4, 0);
  swap(s, 1, find(s, 1, RP_OP_F, 0, 1), find(s, 1, RP_OP_B, 0, 1));
  expect_invalid(s, 1, "its B (action", "comes before its F");
  rp_schedule_free(s);
  s = make("1f1b", 2, 1, 4, 1);
  int f = find(s, 0, RP_OP_F, 0, 0), snd = find(s, 0, RP_OP_SEND_F, 0, 0);
  swap(s, 0, f, snd);
  expect_invalid(s, 0, "SEND_F (action 0) comes before the F", NULL);
  rp_schedule_free(s);
}

static void test_bad_configs(void **state) {
  (void)state;
  static const struct {
    const char *name;
    int p, v, m;
    const char *says;
  } bad[] = {
      {"interleaved", 4, 2, 6, "multiple of --pp (got m=6, p=4)"},
      {"interleaved", 4, 1, 8, "--vpp >= 2"},
      {"1f1b", 4, 1, 3, "--microbatches >= --pp (got m=3, p=4)"},
      {"zb-h1", 4, 1, 2, "--microbatches >= --pp"},
      {"gpipe", 4, 2, 8, "--vpp 2: gpipe runs one chunk per rank"},
      {"pipedream", 4, 1, 8, "unknown schedule 'pipedream'"},
      {"gpipe", 0, 1, 4, "--pp 0"},
      {"naive", 2, 1, 0, "--microbatches 0"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    rp_schedule *s = (rp_schedule *)1;
    assert_int_equal(rp_schedule_make(bad[k].name, bad[k].p, bad[k].v, bad[k].m, &s), RP_EINVAL);
    assert_null(s);
    if (!strstr(rp_errmsg(), bad[k].says)) fail_msg("expected '%s' in: %s", bad[k].says, rp_errmsg());
  }
}

static void test_csv_errors(void **state) {
  (void)state;
  rp_schedule *s;
  const char *bad_token = "# two ranks\n0F0,0SEND_F0,0B0\n0RECV_F0, 0Q0,0B0,0SEND_B0\n";
  assert_int_equal(rp_schedule_csv_parse(bad_token, "x.csv", &s), RP_EFORMAT);
  assert_non_null(strstr(rp_errmsg(), "x.csv:3:11: '0Q0' is not an action"));
  /* Micro-batch 1 has a backward but no forward on rank 1. */
  const char *no_f = "0F0,0F1,0B0,0B1\n0F0,0B0,0B1\n";
  assert_int_equal(rp_schedule_csv_parse(no_f, "y.csv", &s), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "y.csv:2:1: rank 1: chunk 0 micro-batch 1 has 0 F"));
  /* A RECV after its compute is located at the RECV. */
  const char *late = "0F0,0SEND_F0,0RECV_B0,0B0\n0F0,0RECV_F0,0B0,0SEND_B0\n";
  assert_int_equal(rp_schedule_csv_parse(late, "z.csv", &s), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "z.csv:2:5: rank 1: chunk 0 micro-batch 0: RECV_F"));
  assert_int_equal(rp_schedule_csv_parse("# nothing\n\n", "e.csv", &s), RP_EFORMAT);
  assert_non_null(strstr(rp_errmsg(), "no schedule rows"));
  assert_int_equal(rp_schedule_csv_load("/nonexistent/dir/s.csv", &s), RP_EIO);
}

static int same(const rp_schedule *a, const rp_schedule *b) {
  if (a->p != b->p || a->v != b->v || a->m != b->m || a->lowered != b->lowered) return 0;
  for (int r = 0; r < a->p; r++) {
    if (a->n[r] != b->n[r]) return 0;
    if (memcmp(a->acts[r], b->acts[r], (size_t)a->n[r] * sizeof(rp_action))) return 0;
  }
  return 1;
}

static void test_csv_round_trip(void **state) {
  (void)state;
  static const char *names[] = {"naive", "gpipe", "1f1b", "interleaved", "zb-h1"};
  for (int k = 0; k < 5; k++) {
    rp_schedule *s = make(names[k], 4, k == 3 ? 2 : 1, 8, 1), *back;
    char *text, *again;
    assert_int_equal(rp_schedule_csv_format(s, &text), RP_OK);
    assert_int_equal(rp_schedule_csv_parse(text, "mem", &back), RP_OK);
    assert_true(same(s, back));
    snprintf(back->name, sizeof back->name, "%s", s->name);
    assert_int_equal(rp_schedule_csv_format(back, &again), RP_OK);
    assert_string_equal(text, again);
    free(text);
    free(again);
    rp_schedule_free(s);
    rp_schedule_free(back);
  }
}

/* Rows written with global stage numbers (torch's pipelining CSVs) import to
 * the same schedule as local chunk numbers. */
static void test_csv_stage_notation(void **state) {
  (void)state;
  rp_schedule *s = make("interleaved", 2, 2, 4, 1), *back;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  for (int r = 0; r < s->p; r++) {
    for (int i = 0; i < s->n[r]; i++) {
      rp_action a = s->acts[r][i];
      fprintf(f, "%s%d%s%d", i ? "," : "", a.chunk * s->p + r, rp_op_name(a.op), a.mb);
    }
    fputc('\n', f);
  }
  fclose(f);
  assert_non_null(strstr(buf, "3SEND_B")); /* rank 1 chunk 1 = stage 3 */
  assert_int_equal(rp_schedule_csv_parse(buf, "torch.csv", &back), RP_OK);
  assert_true(same(s, back));
  free(buf);
  rp_schedule_free(s);
  rp_schedule_free(back);
}

/* A compute-only CSV given to rp_schedule_make is lowered like a generator's. */
static void test_make_from_csv(void **state) {
  (void)state;
  char path[] = "/tmp/rp_sched_XXXXXX.csv";
  int fd = mkstemps(path, 4);
  assert_true(fd >= 0);
  close(fd);
  rp_schedule *c = make("zb-h1", 3, 1, 5, 0), *want = make("zb-h1", 3, 1, 5, 1), *got;
  assert_int_equal(rp_schedule_csv_save(c, path), RP_OK);
  assert_int_equal(rp_schedule_make(path, 0, 0, 0, &got), RP_OK);
  assert_true(same(got, want));
  rp_schedule_free(got);
  assert_int_equal(rp_schedule_make(path, 4, 0, 0, &got), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "p (rows) = 3 but 4 was asked for"));
  remove(path);
  rp_schedule_free(c);
  rp_schedule_free(want);
}

/* Runs `ringpipe sim` with stdout silenced; returns its exit code. */
static int sim(int argc, const char **argv) {
  fflush(stdout);
  int saved = dup(1), devnull = open("/dev/null", O_WRONLY);
  dup2(devnull, 1);
  int rc = rp_cmd_sim(argc, (char **)argv);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  close(devnull);
  return rc;
}

static void test_cli(void **state) {
  (void)state;
  const char *csv = "test_sim_cli.csv", *svg = "test_sim_cli.svg";
  const char *one[] = {"--schedule", "zb-h1", "--pp", "4", "--microbatches", "8",
                       "--csv", csv, "--svg", svg};
  assert_int_equal(sim(10, one), 0);
  rp_schedule *got, *want = make("zb-h1", 4, 1, 8, 1);
  assert_int_equal(rp_schedule_csv_load(csv, &got), RP_OK);
  assert_true(same(got, want));
  rp_schedule_free(got);
  rp_schedule_free(want);
  const char *from_csv[] = {"--schedule", csv, "--costs", "1,2,1,0.1"};
  assert_int_equal(sim(4, from_csv), 0);
  const char *all[] = {"--all", "--pp", "4", "--microbatches", "8", "--svg", svg, "--no-timeline"};
  assert_int_equal(sim(8, all), 0);
  FILE *f = fopen(svg, "r");
  assert_non_null(f);
  fclose(f);
  const char *bad_m[] = {"--schedule", "interleaved", "--pp", "4", "--microbatches", "6"};
  assert_int_equal(sim(6, bad_m), 2);
  const char *bad_costs[] = {"--costs", "1,x"};
  assert_int_equal(sim(2, bad_costs), 2);
  const char *bad_tw[] = {"--schedule", "zb-h1", "--costs", "1,2,3"};
  assert_int_equal(sim(4, bad_tw), 2);
  const char *bad_opt[] = {"--pipeline", "4"};
  assert_int_equal(sim(2, bad_opt), 2);
  remove(csv);
  remove(svg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_missing_recv),     cmocka_unit_test(test_swap_deadlocks),
      cmocka_unit_test(test_duplicate_and_missing), cmocka_unit_test(test_order_errors),
      cmocka_unit_test(test_bad_configs),      cmocka_unit_test(test_csv_errors),
      cmocka_unit_test(test_csv_round_trip),   cmocka_unit_test(test_csv_stage_notation),
      cmocka_unit_test(test_make_from_csv),    cmocka_unit_test(test_cli),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
