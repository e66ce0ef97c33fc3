/* The schedules beyond ZB-H1: ZB-H2, ZB-V, V-Half (its greedy limit), V-Min
 * (the building block), DualPipeV. The V stage map, their closed forms against the simulator at
 * several (p, m), their activation memory against the buffer plan, CSV in
 * torch's global-stage notation, and every constraint as a named RP_EINVAL. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ringpipe/rp_schedule.h"
#include "../../src/parallel/schedule_gen.h"

static rp_schedule *make(const char *name, int p, int v, int m) {
  rp_schedule *s;
  if (rp_schedule_make(name, p, v, m, &s) != RP_OK) fail_msg("%s: %s", name, rp_errmsg());
  return s;
}

static rp_sim *simulate(const rp_schedule *s, rp_costs c) {
  rp_sim *sim;
  if (rp_schedule_simulate(s, &c, &sim) != RP_OK) fail_msg("%s: %s", s->name, rp_errmsg());
  return sim;
}

/* Stage -> (rank, chunk) -> stage is the identity; the V puts stages 0 and
 * 2p-1 on rank 0 and the turn (p-1, p) on rank p-1. */
static void test_stage_maps(void **state) {
  (void)state;
  for (int p = 2; p <= 8; p++)
    for (int map = RP_MAP_LOOP; map <= RP_MAP_V; map++)
      for (int st = 0; st < 2 * p; st++) {
        int r, c;
        rp_stage_owner(map, p, st, &r, &c);
        assert_true(r >= 0 && r < p && c >= 0 && c < 2);
        assert_int_equal(rp_stage_of(map, p, r, c), st);
      }
  assert_int_equal(rp_stage_of(RP_MAP_V, 4, 0, 1), 7);
  assert_int_equal(rp_stage_of(RP_MAP_V, 4, 3, 0), 3);
  assert_int_equal(rp_stage_of(RP_MAP_V, 4, 3, 1), 4);
  assert_int_equal(rp_stage_of(RP_MAP_LOOP, 4, 0, 1), 4);
  /* the V's turn stays on one rank: rank p-1 sends its chunk-0 output to itself */
  rp_schedule *s = make("zb-v", 4, 2, 8);
  for (int i = 0; i < s->n[3]; i++)
    if (s->acts[3][i].op == RP_OP_SEND_F) assert_int_equal(s->acts[3][i].chunk, 1);
  rp_schedule_free(s);
}

/* ZB-H2 at tF = tI = tW: one step (p-1)/(3m) (the last rank's late start),
 * zero with steps overlapped; at other costs the paper's (p-1)(tF+tI-2tW). */
static void test_zbh2_forms(void **state) {
  (void)state;
  const rp_costs costs[] = {{1, 2, 1, 0}, {2, 3, 1.5, 0}, {1, 3, 1, 0}, {2, 4, 1, 0}, {1, 2, 0.5, 0}};
  for (int p = 2; p <= 8; p *= 2)
    for (int m = 2 * p - 1; m <= 4 * p; m += p + 1)
      for (size_t k = 0; k < sizeof costs / sizeof costs[0]; k++) {
        rp_schedule *s = make("zb-h2", p, 1, m);
        rp_sim *sim = simulate(s, costs[k]);
        double one = rp_schedule_bubble_formula("zb-h2", p, 1, m, &costs[k], NULL);
        double steady = rp_schedule_steady_formula("zb-h2", p, 1, m, &costs[k], NULL);
        if (fabs(sim->bubble_ideal - one) > 1e-9 || fabs(sim->bubble_steady - steady) > 1e-9)
          fail_msg("zb-h2 p=%d m=%d costs %g,%g,%g: simulated %.6f / %.6f, formulas %.6f / %.6f",
                   p, m, costs[k].tF, costs[k].tB, costs[k].tW, sim->bubble_ideal,
                   sim->bubble_steady, one, steady);
        if (k == 0) assert_true(fabs(sim->bubble_steady) < 1e-12);
        rp_sim_free(sim);
        rp_schedule_free(s);
      }
}

/* ZB-V and DualPipeV at equal costs: (p-1)/(6m), half of ZB-H2's one step,
 * for every p and m tried; and 1F1B's memory (2p chunks) for ZB-V. */
static void test_v_forms(void **state) {
  (void)state;
  const char *names[] = {"zb-v", "dualpipev"};
  rp_costs c = {1, 2, 1, 0};
  for (int k = 0; k < 2; k++)
    for (int p = 2; p <= 8; p++)
      for (int m = k ? 2 * p : p; m <= 4 * p; m += p) {
        rp_schedule *s = make(names[k], p, 2, m);
        rp_sim *sim = simulate(s, c);
        double f = rp_schedule_bubble_formula(names[k], p, 2, m, &c, NULL);
        if (fabs(sim->bubble_ideal - f) > 1e-9 || fabs(f - (p - 1) / (6.0 * m)) > 1e-12)
          fail_msg("%s p=%d m=%d: simulated %.6f, formula %.6f", names[k], p, m,
                   sim->bubble_ideal, f);
        rp_sim_free(sim);
        rp_schedule_free(s);
      }
}

/* ZB-V between multiples of p: the formula is a lower bound, and the list
 * without the W-first rule is taken where it is shorter (p = 6, m = 8: 29.5
 * unit steps, 31.5 with the rule; p = 8, m = 9: 34.5 against 41.5). */
static void test_zbv_between_multiples(void **state) {
  (void)state;
  rp_costs c = {1, 2, 1, 0};
  for (int p = 2; p <= 8; p++)
    for (int m = p + 1; m < 3 * p; m++) {
      if (m % p == 0) continue;
      rp_schedule *s = make("zb-v", p, 2, m);
      rp_sim *sim = simulate(s, c);
      const char *text;
      double f = rp_schedule_bubble_formula("zb-v", p, 2, m, &c, &text);
      if (sim->bubble_ideal < f - 1e-9)
        fail_msg("zb-v p=%d m=%d: simulated %.6f below the bound %.6f", p, m, sim->bubble_ideal, f);
      assert_non_null(strstr(text, "lower bound"));
      if (p == 6 && m == 8) assert_true(fabs(sim->makespan - 29.5) < 1e-9);
      if (p == 8 && m == 9) assert_true(fabs(sim->makespan - 34.5) < 1e-9);
      rp_sim_free(sim);
      rp_schedule_free(s);
    }
}

/* The memory closed forms are the buffer plan's peak, exactly. */
static void test_memory_forms(void **state) {
  (void)state;
  const struct {
    const char *name;
    int v, exact;
  } cases[] = {{"zb-h1", 1, 1}, {"zb-h2", 1, 1},     {"zb-v", 2, 1},
               {"dualpipev", 2, 1}, {"zb-v-half", 2, 1}, {"zb-v-min", 2, 1}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int p = 2; p <= 6; p += 2)
      for (int m = 2 * p; m <= 4 * p; m += 2 * p) {
        rp_schedule *s = make(cases[k].name, p, cases[k].v, m);
        int peak = 0, f = rp_schedule_memory_formula(cases[k].name, p, cases[k].v, m, NULL);
        for (int r = 0; r < p; r++) {
          rp_slot_plan plan;
          assert_int_equal(rp_schedule_plan_slots(s, r, &plan), RP_OK);
          peak = RP_MAX(peak, plan.n_act);
          rp_slot_plan_free(&plan);
        }
        if (cases[k].exact ? peak != f : peak > f)
          fail_msg("%s p=%d m=%d: planned peak %d, formula %d", cases[k].name, p, m, peak, f);
        rp_schedule_free(s);
      }
}

/* Peak chunk-activations over the ranks, as the executor's buffer plan
 * allocates them (held from F to W). */
static int planned_peak(const rp_schedule *s) {
  int peak = 0;
  for (int r = 0; r < s->p; r++) {
    rp_slot_plan plan;
    assert_int_equal(rp_schedule_plan_slots(s, r, &plan), RP_OK);
    peak = RP_MAX(peak, plan.n_act);
    rp_slot_plan_free(&plan);
  }
  return peak;
}

/* V-Min, the building block, at tF = tI = tW: the paper's memory,
 * M = 2 floor((p+4)/3) chunks (a third of 1F1B's 2p, rounded up; 2m when m is
 * smaller), and the paper's bound on its bubble, 6p - 1 - 3M idle chunk
 * passes per rank (idle/ideal over 6m), exactly, for every p >= 3 and m >= 3
 * tried (m < p included: one micro-batch is the whole block); the stated
 * exceptions m = 1, p = 2 (4p-5) and m = 2 with p = 2 mod 3 (4p-7). All of
 * it below the paper's ~2p/(3m) and 1F1B's (p-1)/m; the order stays valid at
 * other costs. */
static int vmin_idle_passes(int p, int m) {
  if (p == 2 || m == 1) return 4 * p - 5;
  if (m == 2 && p % 3 == 2) return 4 * p - 7;
  return 6 * p - 1 - 3 * (2 * ((p + 4) / 3));
}

static void test_vmin_paper(void **state) {
  (void)state;
  rp_costs c = {1, 2, 1, 0}, skew = {1, 3, 0.5, 0};
  for (int p = 2; p <= 16; p++)
    for (int m = 1; m <= 40; m += m < 2 * p ? 1 : 7) {
      rp_schedule *s = make("zb-v-min", p, 2, m);
      rp_sim *sim = simulate(s, c);
      double f = rp_schedule_bubble_formula("zb-v-min", p, 2, m, &c, NULL);
      int mem = planned_peak(s), paper = 2 * ((p + 4) / 3);
      if (fabs(sim->bubble_ideal - f) > 1e-9 || fabs(f - vmin_idle_passes(p, m) / (6.0 * m)) > 1e-12)
        fail_msg("zb-v-min p=%d m=%d: simulated %.6f, formula %.6f, %d idle passes expected", p, m,
                 sim->bubble_ideal, f, vmin_idle_passes(p, m));
      if (mem != rp_schedule_memory_formula("zb-v-min", p, 2, m, NULL) || mem != RP_MIN(paper, 2 * m))
        fail_msg("zb-v-min p=%d m=%d: planned peak %d, paper %d", p, m, mem, paper);
      assert_true(f <= 2.0 * p / (3 * m) && f < (p - 1.0) / m);
      rp_sim_free(sim);
      rp_sim *sk = simulate(s, skew); /* valid (the validator ran), just not tuned */
      rp_sim_free(sk);
      rp_schedule_free(s);
    }
}

/* V-Half, the greedy under p + 2 chunk-activations: exactly that memory
 * (= the paper's 2(p/2 + 1) for even p), and idle/ideal within 4/(6m) of
 * (p-1)/(2m) for every p <= 10 and m tried (the bound its formula states; the
 * paper's ~p/(2m)); exactly that at p = 4 for m = 8, 16, 32. */
static void test_vhalf_paper(void **state) {
  (void)state;
  rp_costs c = {1, 2, 1, 0};
  double worst = 0;
  for (int p = 2; p <= 10; p++)
    for (int m = p; m <= 40; m += m < 2 * p ? 1 : 5) {
      rp_schedule *s = make("zb-v-half", p, 2, m);
      rp_sim *sim = simulate(s, c);
      double f = rp_schedule_bubble_formula("zb-v-half", p, 2, m, &c, NULL);
      double off = (sim->bubble_ideal - f) * 6 * m; /* in chunk passes */
      int mem = planned_peak(s);
      if (fabs(off) > 4 + 1e-9 || mem != p + 2 || mem != rp_schedule_memory_formula("zb-v-half", p, 2, m, NULL))
        fail_msg("zb-v-half p=%d m=%d: simulated %.6f, formula %.6f (%+.1f passes), peak %d", p, m,
                 sim->bubble_ideal, f, off, mem);
      if (p == 4 && (m == 8 || m == 16 || m == 32)) assert_true(fabs(off) < 1e-9);
      worst = RP_MAX(worst, fabs(off));
      rp_sim_free(sim);
      rp_schedule_free(s);
    }
  assert_true(worst > 0); /* approximate: the text's "~" is true */
}

static int same_actions(const rp_schedule *a, const rp_schedule *b) {
  if (a->p != b->p || a->v != b->v || a->m != b->m || a->map != b->map) return 0;
  for (int r = 0; r < a->p; r++) {
    if (a->n[r] != b->n[r]) return 0;
    for (int i = 0; i < a->n[r]; i++)
      if (memcmp(&a->acts[r][i], &b->acts[r][i], sizeof(rp_action))) return 0;
  }
  return 1;
}

/* torch's global-stage rows: rank 0's row of a V schedule names stage 2p-1;
 * reading them back gives the V schedule again, lowered or not. Without its
 * "# stage map: v" line a local-chunk V file is not the same schedule. */
static void test_csv_stage_rows(void **state) {
  (void)state;
  const char *names[] = {"zb-v", "dualpipev", "zb-v-min", "zb-h2", "interleaved"};
  for (int k = 0; k < 5; k++)
    for (int low = 0; low < 2; low++) {
      int v = k == 3 ? 1 : 2;
      rp_schedule *s;
      if (low) s = make(names[k], 4, v, 8);
      else assert_int_equal(rp_schedule_generate(names[k], 4, v, 8, &s), RP_OK);
      char *text = NULL;
      size_t len = 0;
      FILE *f = open_memstream(&text, &len);
      assert_int_equal(rp_schedule_csv_write_stages(s, f), RP_OK);
      fclose(f);
      if (k < 3) assert_non_null(strstr(text, "7F0")); /* rank 0 holds the last stage */
      rp_schedule *back;
      if (rp_schedule_csv_parse(text, "stages.csv", &back) != RP_OK)
        fail_msg("%s: %s\n%s", names[k], rp_errmsg(), text);
      assert_true(same_actions(s, back));
      free(text);
      rp_schedule_free(back);
      rp_schedule_free(s);
    }
  rp_schedule *s = make("zb-v", 2, 2, 4), *back = NULL;
  char *text;
  assert_int_equal(rp_schedule_csv_format(s, &text), RP_OK);
  char *line = strstr(text, "# stage map: v\n");
  assert_non_null(line);
  memset(line, ' ', strlen("# stage map: v")); /* a blank line: the map is lost */
  rp_status st = rp_schedule_csv_parse(text, "nomap.csv", &back);
  assert_true(st != RP_OK || !same_actions(s, back));
  rp_schedule_free(back);
  free(text);
  rp_schedule_free(s);
}

static void expect_refused(const char *name, int p, int v, int m, const char *a, const char *b) {
  rp_schedule *s = NULL;
  rp_errclear();
  assert_int_equal(rp_schedule_make(name, p, v, m, &s), RP_EINVAL);
  assert_null(s);
  if (!strstr(rp_errmsg(), a) || (b && !strstr(rp_errmsg(), b)))
    fail_msg("%s p=%d v=%d m=%d: message lacks '%s'/'%s': %s", name, p, v, m, a, b ? b : "",
             rp_errmsg());
}

static void test_constraints(void **state) {
  (void)state;
  expect_refused("zb-h2", 4, 1, 3, "--microbatches >= --pp", "m=3");
  expect_refused("zb-h2", 4, 2, 8, "--vpp 2", "one chunk per rank");
  expect_refused("zb-v", 4, 1, 8, "--vpp 1", "use --vpp 2");
  expect_refused("zb-v", 1, 2, 8, "--pp 1", "at least 2 pipeline ranks");
  expect_refused("zb-v", 4, 2, 3, "--microbatches >= --pp", "use m >= 4");
  expect_refused("zb-v-half", 3, 2, 2, "m=2", "use m >= 3");
  expect_refused("dualpipev", 4, 2, 7, "2 x --pp", "use m >= 8");
  expect_refused("dualpipev", 4, 3, 8, "--vpp 3", NULL);
  /* the list schedule says when its memory limit cannot finish the V */
  rp_schedule *s;
  assert_int_equal(rp_schedule_new(4, 2, 8, "zb-v-tiny", &s), RP_OK);
  s->map = RP_MAP_V;
  rp_errclear();
  assert_int_equal(rp_gen_zb_list(s, 1, 0), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "too small"));
  rp_schedule_free(s);
}

/* The advisor: feasible candidates by step time, each within the limit and
 * simulated as ranked; over-limit ones say so; with no limit and equal costs
 * the V schedules win at the largest m with (p-1)/(6m); under a limit that
 * 2p chunk-activations exceed, the winner holds less. */
static void test_advisor(void **state) {
  (void)state;
  rp_advise_in in = {.costs = {1, 2, 1, 0}, .p = 4, .m_ref = 8, .batch = 1, .act_mib = 8,
                     .wstash_mib = 4, .msg_mib = 0};
  rp_advice *a;
  int n;
  assert_int_equal(rp_schedule_advise(&in, &a, &n), RP_OK);
  assert_true(n > 20 && a[0].ok);
  assert_true(!strcmp(a[0].schedule, "zb-v") || !strcmp(a[0].schedule, "dualpipev"));
  assert_int_equal(a[0].m, 8);
  assert_true(fabs(a[0].bubble - 3.0 / 48) < 1e-12);
  assert_non_null(strstr(a[0].why, "best"));
  for (int k = 1; k < n && a[k].ok; k++) {
    assert_true(a[k].step >= a[k - 1].step);
    assert_non_null(strstr(a[k].why, "step time"));
  }
  int refused = 0;
  for (int k = 0; k < n; k++) refused += !strncmp(a[k].why, "refused:", 8);
  assert_true(refused > 0); /* e.g. dualpipev at m < 8 */
  free(a);
  /* zb-v at m = 8: slot pools of 8 x 8/2 + 8 stashes x 4/2 = 48 MiB, its arena above 40 too */
  in.limit_mib = 40;
  assert_int_equal(rp_schedule_advise(&in, &a, &n), RP_OK);
  assert_true(a[0].ok && a[0].mem_mib <= 40);
  int over = 0;
  for (int k = 0; k < n; k++) {
    if (a[k].ok) assert_true(a[k].mem_mib <= 40);
    if (!strncmp(a[k].why, "memory:", 7)) assert_true(a[k].mem_mib > 40), over++;
    if (!strcmp(a[k].schedule, "zb-v") && a[k].m == 8) assert_false(a[k].ok);
  }
  assert_true(over > 0);
  free(a);
  in.p = 1;
  assert_int_equal(rp_schedule_advise(&in, &a, &n), RP_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stage_maps),   cmocka_unit_test(test_zbh2_forms),
      cmocka_unit_test(test_v_forms),
      cmocka_unit_test(test_zbv_between_multiples),
      cmocka_unit_test(test_memory_forms),
      cmocka_unit_test(test_csv_stage_rows), cmocka_unit_test(test_constraints),
      cmocka_unit_test(test_advisor),      cmocka_unit_test(test_vmin_paper),
      cmocka_unit_test(test_vhalf_paper),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
