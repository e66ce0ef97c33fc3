/* Tasks: reward functions on hand-written cases (correct, well formed but
 * wrong, malformed), generated problems (deterministic, in their split, the
 * reference answer scores 1, lengths within the stated maxima), bad names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "ringpipe/rp_rl.h"

static rp_task mk(const char *name, int size) {
  rp_task t;
  assert_int_equal(rp_task_init(&t, name, size), RP_OK);
  return t;
}

static float rew(const rp_task *t, const char *prompt, const char *completion) {
  return rp_task_reward(t, prompt, completion, (int)strlen(completion));
}

#define FORMAT 0.1f

static void test_add_rewards(void **state) {
  (void)state;
  rp_task t = mk("add", 3);
  assert_true(rew(&t, "12+34=", "46\n") == 1.0f);
  assert_true(rew(&t, "999+1=", "1000\n") == 1.0f);
  assert_true(rew(&t, "0+0=", "0\n") == 1.0f);
  assert_true(rew(&t, "12+34=", "47\n") == FORMAT);   /* wrong digits */
  assert_true(rew(&t, "12+34=", "046\n") == FORMAT);  /* leading zero: not the answer */
  assert_true(rew(&t, "12+34=", "46") == 0.0f);       /* cut off before the stop byte */
  assert_true(rew(&t, "12+34=", "4a\n") == 0.0f);
  assert_true(rew(&t, "12+34=", "\n") == 0.0f);       /* no digits */
  assert_true(rew(&t, "12+34=", "46\n\n") == 0.0f);   /* stop byte twice */
  assert_true(rew(&t, "12+34=", " 46\n") == 0.0f);
  assert_true(rew(&t, "12+34=", "") == 0.0f);
  t.format_bonus = 0.25f;
  assert_true(rew(&t, "12+34=", "45\n") == 0.25f);
}

static void test_reverse_sort_rewards(void **state) {
  (void)state;
  rp_task r = mk("reverse", 3), s = mk("sort", 4);
  assert_true(rew(&r, "rev:abc=", "cba\n") == 1.0f);
  assert_true(rew(&r, "rev:abc=", "abc\n") == FORMAT);
  assert_true(rew(&r, "rev:abc=", "cb\n") == 0.0f);   /* wrong length */
  assert_true(rew(&r, "rev:abc=", "cBa\n") == 0.0f);  /* not lowercase */
  assert_true(rew(&r, "rev:abc=", "cba") == 0.0f);
  assert_true(rew(&s, "sort:3141=", "1134\n") == 1.0f);
  assert_true(rew(&s, "sort:3141=", "1143\n") == FORMAT);  /* not sorted */
  assert_true(rew(&s, "sort:3141=", "1135\n") == FORMAT);  /* sorted, other digits */
  assert_true(rew(&s, "sort:3141=", "113\n") == 0.0f);
  assert_true(rew(&s, "sort:3141=", "11x4\n") == 0.0f);
  assert_true(rew(&s, "sort:0000=", "0000\n") == 1.0f);
}

static void test_countdown_rewards(void **state) {
  (void)state;
  rp_task t = mk("countdown", 4);
  const char *p = "cd:75:3,7,25,50=";
  assert_true(rew(&t, p, "50+25\n") == 1.0f);
  assert_true(rew(&t, p, "25*3\n") == 1.0f);
  assert_true(rew(&t, p, "(50+25)\n") == 1.0f);
  assert_true(rew(&t, p, "(7-3)*25-50+25\n") == FORMAT);  /* 25 used twice */
  assert_true(rew(&t, p, "50+25+3-3\n") == FORMAT);       /* 3 used twice */
  assert_true(rew(&t, p, "50+26-1\n") == FORMAT);         /* numbers not given */
  assert_true(rew(&t, p, "50/3*3+25\n") == FORMAT);       /* inexact division */
  assert_true(rew(&t, p, "50+7\n") == FORMAT);            /* wrong value */
  assert_true(rew(&t, p, "(7*3+50)+(25-25)\n") == FORMAT);
  assert_true(rew(&t, p, "50+\n") == 0.0f);               /* malformed */
  assert_true(rew(&t, p, "(50+25\n") == 0.0f);
  assert_true(rew(&t, p, "50+25)\n") == 0.0f);
  assert_true(rew(&t, p, "50 + 25\n") == 0.0f);
  assert_true(rew(&t, p, "50+25") == 0.0f);
  assert_true(rew(&t, "cd:10:2,5=", "2*5\n") == 1.0f);
  assert_true(rew(&t, "cd:10:2,5=", "5*2\n") == 1.0f);
  assert_true(rew(&t, "cd:10:2,5=", "10\n") == FORMAT);   /* 10 is not a given number */
  assert_true(rew(&t, "cd:3:2,5,2=", "(5*2-2)/2-1\n") == FORMAT); /* 2 used three times */
  assert_true(rew(&t, "cd:3:2,5,2=", "5-2\n") == 1.0f);
  assert_true(rew(&t, "cd:6:2,5,2=", "(5-2)*2\n") == 1.0f);
  assert_true(rew(&t, "cd:8:2,5,2=", "(5-2)*2+2\n") == FORMAT); /* three 2s */
}

static void test_generated_examples(void **state) {
  (void)state;
  const char *names[] = {"add", "reverse", "sort", "countdown"};
  const int sizes[] = {3, 6, 7, 4};
  for (int k = 0; k < 4; k++) {
    rp_task t = mk(names[k], sizes[k]);
    int heldout_seen = 0;
    for (int split = 0; split < 2; split++)
      for (uint64_t i = 0; i < 300; i++) {
        rp_task_example a, b;
        rp_task_example_get(&t, 42, (rp_task_split)split, i, &a);
        rp_task_example_get(&t, 42, (rp_task_split)split, i, &b);
        assert_string_equal(a.prompt, b.prompt);  /* deterministic */
        assert_int_equal(rp_task_split_of(a.prompt), split);
        int pl = (int)strlen(a.prompt), al = (int)strlen(a.answer);
        assert_true(pl <= rp_task_max_prompt(&t));
        assert_true(al <= rp_task_max_answer(&t));
        assert_int_equal(a.answer[al - 1], RP_TASK_STOP);
        if (rp_task_reward(&t, a.prompt, a.answer, al) != 1.0f)
          fail_msg("%s: reference answer '%s' of '%s' does not score 1", names[k], a.answer,
                   a.prompt);
        heldout_seen += split;
      }
    assert_int_equal(heldout_seen, 300);
    /* another seed gives other problems */
    rp_task_example a, b;
    int same = 0;
    for (uint64_t i = 0; i < 20; i++) {
      rp_task_example_get(&t, 1, RP_SPLIT_TRAIN, i, &a);
      rp_task_example_get(&t, 2, RP_SPLIT_TRAIN, i, &b);
      same += strcmp(a.prompt, b.prompt) == 0;
    }
    assert_true(same < 5);
  }
}

static void test_split_fraction(void **state) {
  (void)state;
  /* the held-out bucket is about 1 in RP_TASK_HELDOUT_MOD of all problems */
  char p[32];
  int held = 0, n = 0;
  for (int a = 0; a < 1000; a += 7)
    for (int b = 0; b < 1000; b += 3, n++) {
      snprintf(p, sizeof p, "%d+%d=", a, b);
      held += rp_task_split_of(p) == RP_SPLIT_HELDOUT;
    }
  double frac = (double)held / n, want = 1.0 / RP_TASK_HELDOUT_MOD;
  assert_true(frac > want * 0.9 && frac < want * 1.1);
}

static void test_bad_tasks(void **state) {
  (void)state;
  rp_task t;
  assert_int_equal(rp_task_init(&t, "multiply", 3), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "multiply"));
  assert_int_equal(rp_task_init(&t, "add", 0), RP_EINVAL);
  assert_int_equal(rp_task_init(&t, "countdown", 7), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "2..6"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_rewards),       cmocka_unit_test(test_reverse_sort_rewards),
      cmocka_unit_test(test_countdown_rewards), cmocka_unit_test(test_generated_examples),
      cmocka_unit_test(test_split_fraction),    cmocka_unit_test(test_bad_tasks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
