/* Schedules: golden CSVs of every generator (byte for byte), validator and
 * simulator on them, bubbles against the closed forms, liveness, peer/tag.
 *
 * The goldens were written by this test with RINGPIPE_UPDATE_GOLDEN=1 and
 * checked by eye against the papers' figures; without that variable the test
 * regenerates and compares. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ringpipe/rp_schedule.h"

typedef struct {
  const char *name;
  int p, v, m;
} config;

/* Several (p, m, v) per generator, including the edges m = p and m = 1. */
static const config configs[] = {
    {"naive", 4, 1, 1},       {"naive", 2, 1, 3},       {"gpipe", 2, 1, 4},
    {"gpipe", 4, 1, 8},       {"1f1b", 2, 1, 4},        {"1f1b", 4, 1, 4},
    {"1f1b", 4, 1, 8},        {"interleaved", 2, 2, 4}, {"interleaved", 4, 2, 4},
    {"interleaved", 4, 2, 8}, {"interleaved", 2, 3, 4}, {"zb-h1", 2, 1, 4},
    {"zb-h1", 4, 1, 4},       {"zb-h1", 4, 1, 8},       {"zb-h2", 2, 1, 4},
    {"zb-h2", 4, 1, 4},       {"zb-h2", 4, 1, 8},       {"zb-v", 2, 2, 4},
    {"zb-v", 4, 2, 4},        {"zb-v", 4, 2, 8},        {"zb-v-half", 4, 2, 8},
    {"zb-v-min", 4, 2, 8},    {"zb-v-min", 3, 2, 2},    {"zb-v-min", 6, 2, 6},
    {"zb-v-half", 3, 2, 3},   {"dualpipev", 2, 2, 4},   {"dualpipev", 3, 2, 6},
    {"dualpipev", 4, 2, 8},
};

/* A closed form holds where its text does not say "exact only for" (the V
 * orders are built for equal costs, ZB-H2's needs its full warm-up) nor starts
 * with "~" (the greedy V-Half's approximation, bounded in test_schedule_v). */
static int formula_holds(double f, const char *text) {
  return !isnan(f) && !strstr(text, "exact only") && text[0] != '~';
}
static const int nconfigs = sizeof configs / sizeof configs[0];

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  if (buf) buf[n] = '\0';
  fclose(f);
  return buf;
}

static void golden_path(char *buf, size_t n, const config *c, const char *suffix) {
  const char *root = getenv("RINGPIPE_SOURCE_ROOT");
  snprintf(buf, n, "%s/tests/schedule/golden/%s_p%d_v%d_m%d%s.csv", root ? root : ".", c->name,
           c->p, c->v, c->m, suffix);
}

/* Compares (or, when updating, writes) one golden. */
static void check_golden(const rp_schedule *s, const config *c, const char *suffix) {
  char path[1024], *text;
  golden_path(path, sizeof path, c, suffix);
  assert_int_equal(rp_schedule_csv_format(s, &text), RP_OK);
  if (getenv("RINGPIPE_UPDATE_GOLDEN")) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
  } else {
    char *want = read_text(path);
    if (!want) fail_msg("missing golden %s (run with RINGPIPE_UPDATE_GOLDEN=1)", path);
    if (strcmp(want, text) != 0)
      fail_msg("%s differs from the regenerated schedule:\n%s", path, text);
    free(want);
  }
  free(text);
}

static void test_goldens(void **state) {
  (void)state;
  for (int k = 0; k < nconfigs; k++) {
    const config *c = &configs[k];
    rp_schedule *s, *low;
    assert_int_equal(rp_schedule_generate(c->name, c->p, c->v, c->m, &s), RP_OK);
    assert_int_equal(rp_schedule_validate(s, NULL), RP_OK);
    check_golden(s, c, "");
    assert_int_equal(rp_schedule_make(c->name, c->p, c->v, c->m, &low), RP_OK);
    assert_int_equal(low->lowered, 1);
    assert_int_equal(rp_schedule_validate(low, NULL), RP_OK);
    check_golden(low, c, ".lowered");
    rp_schedule_free(s);
    rp_schedule_free(low);
  }
}

/* Every golden file loads, validates, and prints back to the same bytes. */
static void test_golden_round_trip(void **state) {
  (void)state;
  for (int k = 0; k < nconfigs; k++)
    for (int low = 0; low < 2; low++) {
      char path[1024], *text;
      rp_schedule *s;
      golden_path(path, sizeof path, &configs[k], low ? ".lowered" : "");
      char *want = read_text(path);
      assert_non_null(want);
      if (rp_schedule_csv_load(path, &s) != RP_OK) fail_msg("%s: %s", path, rp_errmsg());
      assert_int_equal(s->p, configs[k].p);
      assert_int_equal(s->v, configs[k].v);
      assert_int_equal(s->m, configs[k].m);
      assert_int_equal(s->lowered, low);
      assert_int_equal(s->map, rp_schedule_generator_chunks(configs[k].name) == 2 ? RP_MAP_V
                                                                                : RP_MAP_LOOP);
      /* The header names the generator; the loaded copy calls itself csv. */
      snprintf(s->name, sizeof s->name, "%s", configs[k].name);
      assert_int_equal(rp_schedule_csv_format(s, &text), RP_OK);
      assert_string_equal(text, want);
      free(text);
      free(want);
      rp_schedule_free(s);
    }
}

/* 1F1B p=4 m=8 as in Narayanan et al. fig. 4: rank r starts with p-1-r
 * forwards, then alternates, and ends with p-1-r backwards. */
static void test_1f1b_shape(void **state) {
  (void)state;
  rp_schedule *s;
  assert_int_equal(rp_schedule_generate("1f1b", 4, 1, 8, &s), RP_OK);
  for (int r = 0; r < 4; r++) {
    int w = 4 - 1 - r, i = 0;
    assert_int_equal(s->n[r], 16);
    for (; i < w; i++) assert_int_equal(s->acts[r][i].op, RP_OP_F);
    assert_int_equal(s->acts[r][i].op, RP_OP_F);
    assert_int_equal(s->acts[r][i + 1].op, RP_OP_B);
    assert_int_equal(s->acts[r][i + 1].mb, 0);
    for (int j = 16 - w; j < 16; j++) assert_int_equal(s->acts[r][j].op, RP_OP_B);
    assert_int_equal(rp_schedule_max_live(s, r), 4 - r);
  }
  rp_schedule_free(s);
}

static const rp_costs cost_sets[] = {{1, 2, 1, 0}, {1, 3, 1, 0}, {2, 3, 1, 0}, {1, 2, 0.5, 0}};

/* Simulated idle/ideal equals the closed form wherever the derivation holds
 * (comm = 0; for zb-h1 tW <= tI), and the makespan is ideal * (1 + bubble). */
static void test_bubble_formulas(void **state) {
  (void)state;
  for (int k = 0; k < nconfigs; k++)
    for (size_t j = 0; j < sizeof cost_sets / sizeof cost_sets[0]; j++) {
      const config *c = &configs[k];
      const rp_costs *co = &cost_sets[j];
      rp_schedule *s;
      rp_sim *sim;
      const char *text = "";
      double f = rp_schedule_bubble_formula(c->name, c->p, c->v, c->m, co, &text);
      if (!formula_holds(f, text)) continue;
      assert_int_equal(rp_schedule_make(c->name, c->p, c->v, c->m, &s), RP_OK);
      assert_int_equal(rp_schedule_simulate(s, co, &sim), RP_OK);
      double work = c->m * (co->tF + co->tB); /* one rank's share, I + W = B */
      if (fabs(sim->bubble_ideal - f) > 1e-9 || fabs(sim->makespan - work * (1 + f)) > 1e-9)
        fail_msg("%s p=%d v=%d m=%d costs %g,%g,%g: simulated %.6f (makespan %g), formula %.6f",
                 c->name, c->p, c->v, c->m, co->tF, co->tB, co->tW, sim->bubble_ideal,
                 sim->makespan, f);
      assert_true(fabs(sim->bubble_total - f / (1 + f)) < 1e-9);
      rp_sim_free(sim);
      rp_schedule_free(s);
    }
}

/* The headline ratios: interleaved v=2 halves 1F1B's bubble, ZB-H1 with
 * tF = tI = tW cuts it to a third. */
static void test_bubble_ratios(void **state) {
  (void)state;
  const char *names[3] = {"1f1b", "interleaved", "zb-h1"};
  double b[3];
  rp_costs c = {1, 2, 1, 0};
  for (int k = 0; k < 3; k++) {
    rp_schedule *s;
    rp_sim *sim;
    assert_int_equal(rp_schedule_make(names[k], 4, k == 1 ? 2 : 1, 8, &s), RP_OK);
    assert_int_equal(rp_schedule_simulate(s, &c, &sim), RP_OK);
    b[k] = sim->bubble_ideal;
    rp_sim_free(sim);
    rp_schedule_free(s);
  }
  assert_true(fabs(b[0] - 3.0 / 8) < 1e-12);
  assert_true(fabs(b[1] / b[0] - 0.5) < 1e-12);
  assert_true(fabs(b[2] / b[0] - 1.0 / 3) < 1e-12);
}

/* With latency, GPipe's fill and drain each cross p-1 links:
 * makespan (m+p-1)(tF+tB) + 2(p-1) comm. Spans are ordered and sized. */
static void test_sim_comm_and_spans(void **state) {
  (void)state;
  rp_schedule *s;
  rp_sim *sim;
  rp_costs c = {1, 2, 1, 0.25};
  assert_int_equal(rp_schedule_make("gpipe", 4, 1, 6, &s), RP_OK);
  assert_int_equal(rp_schedule_simulate(s, &c, &sim), RP_OK);
  assert_true(fabs(sim->makespan - ((6 + 3) * 3.0 + 2 * 3 * 0.25)) < 1e-12);
  for (int r = 0; r < s->p; r++) {
    double t = 0;
    for (int i = 0; i < s->n[r]; i++) {
      const rp_span *sp = &sim->spans[r][i];
      assert_true(sp->t0 >= t - 1e-12);
      double want = sp->a.op == RP_OP_F ? 1 : sp->a.op == RP_OP_B ? 2 : 0;
      assert_true(fabs(sp->t1 - sp->t0 - want) < 1e-12);
      t = sp->t1;
    }
  }
  rp_sim_free(sim);
  rp_schedule_free(s);
  /* 1F1B's steady state waits a round trip per micro-batch: latency hurts it
   * more than GPipe, which the simulator must show. */
  rp_schedule *g, *o;
  rp_sim *sg, *so;
  assert_int_equal(rp_schedule_make("gpipe", 4, 1, 8, &g), RP_OK);
  assert_int_equal(rp_schedule_make("1f1b", 4, 1, 8, &o), RP_OK);
  assert_int_equal(rp_schedule_simulate(g, &c, &sg), RP_OK);
  assert_int_equal(rp_schedule_simulate(o, &c, &so), RP_OK);
  assert_true(so->makespan > sg->makespan);
  rp_sim_free(sg);
  rp_sim_free(so);
  rp_schedule_free(g);
  rp_schedule_free(o);
}

/* Liveness: GPipe holds m on every rank, 1F1B and ZB-H1 p-r on rank r, and
 * the slot plan is consistent (B/I release the slot their F took, W the stash
 * its I took, a compute reads the buffer its RECV filled). */
static void test_liveness(void **state) {
  (void)state;
  for (int k = 0; k < nconfigs; k++) {
    const config *c = &configs[k];
    rp_schedule *s;
    assert_int_equal(rp_schedule_make(c->name, c->p, c->v, c->m, &s), RP_OK);
    for (int r = 0; r < s->p; r++) {
      int live = rp_schedule_max_live(s, r);
      if (!strcmp(c->name, "gpipe")) assert_int_equal(live, c->m);
      if (!strcmp(c->name, "naive")) assert_int_equal(live, 1);
      if (!strcmp(c->name, "1f1b") || !strcmp(c->name, "zb-h1"))
        assert_int_equal(live, RP_MIN(c->p - r, c->m));
      rp_slot_plan plan;
      assert_int_equal(rp_schedule_plan_slots(s, r, &plan), RP_OK);
      /* one plan for executor and simulator: a split backward keeps the
       * activation slot until W (W reads the layer inputs), so its slots may
       * exceed the in-flight count; without I/W they are the in-flight count */
      if (rp_schedule_splits_backward(s))
        assert_true(plan.n_act >= live);
      else
        assert_int_equal(plan.n_act, live);
      int units = s->v * s->m;
      int *fslot = malloc(sizeof(int) * units), *islot = malloc(sizeof(int) * units);
      int *rbF = malloc(sizeof(int) * units), *rbB = malloc(sizeof(int) * units);
      for (int u = 0; u < units; u++) fslot[u] = islot[u] = rbF[u] = rbB[u] = -1;
      for (int i = 0; i < s->n[r]; i++) {
        rp_action a = s->acts[r][i];
        int u = a.chunk * s->m + a.mb;
        switch (a.op) {
          case RP_OP_F:
            fslot[u] = plan.act[i];
            assert_true(plan.act[i] >= 0 && plan.act[i] < plan.n_act);
            assert_int_equal(plan.rbuf[i], rbF[u]);
            break;
          case RP_OP_B: assert_int_equal(plan.act[i], fslot[u]); assert_int_equal(plan.rbuf[i], rbB[u]); break;
          case RP_OP_I:
            assert_int_equal(plan.act[i], -1); /* held until W */
            assert_int_equal(plan.rbuf[i], rbB[u]);
            islot[u] = plan.wst[i];
            assert_true(plan.wst[i] >= 0 && plan.wst[i] < plan.n_wst);
            break;
          case RP_OP_W:
            assert_int_equal(plan.wst[i], islot[u]);
            assert_int_equal(plan.act[i], fslot[u]);
            break;
          case RP_OP_RECV_F: rbF[u] = plan.rbuf[i]; assert_true(rbF[u] >= 0 && rbF[u] < plan.n_rbuf); break;
          case RP_OP_RECV_B: rbB[u] = plan.rbuf[i]; assert_true(rbB[u] >= 0 && rbB[u] < plan.n_rbuf); break;
          default: break;
        }
      }
      if (!strcmp(c->name, "zb-h1")) assert_int_equal(plan.n_wst, RP_MIN(r + 1, c->m));
      free(fslot);
      free(islot);
      free(rbF);
      free(rbB);
      rp_slot_plan_free(&plan);
    }
    rp_schedule_free(s);
  }
}

/* Each SEND has exactly one RECV on its peer with the same tag, and tags are
 * unique per rank and direction. */
static void test_peer_tag(void **state) {
  (void)state;
  for (int k = 0; k < nconfigs; k++) {
    const config *c = &configs[k];
    rp_schedule *s;
    assert_int_equal(rp_schedule_make(c->name, c->p, c->v, c->m, &s), RP_OK);
    int ntags = 2 * s->v * s->p * s->m;
    int *sends = calloc((size_t)ntags * s->p, sizeof(int));
    int *recvs = calloc((size_t)ntags * s->p, sizeof(int));
    for (int r = 0; r < s->p; r++)
      for (int i = 0; i < s->n[r]; i++) {
        rp_action a = s->acts[r][i];
        int q = rp_schedule_peer(s, r, a), t = rp_schedule_tag(s, r, a);
        if (rp_op_is_compute(a.op)) {
          assert_int_equal(q, -1);
          continue;
        }
        assert_true(q >= 0 && q < s->p && q != r);
        assert_true(t >= 0 && t < ntags);
        if (a.op == RP_OP_SEND_F || a.op == RP_OP_SEND_B) sends[(size_t)t * s->p + r]++;
        else recvs[(size_t)t * s->p + q]++; /* indexed by the sender */
      }
    for (int t = 0; t < ntags * s->p; t++) {
      assert_true(sends[t] <= 1);
      assert_int_equal(sends[t], recvs[t]);
    }
    free(sends);
    free(recvs);
    rp_schedule_free(s);
  }
}

/* The SVG and ASCII pictures: one box per compute, a legend, an axis. */
static void test_pictures(void **state) {
  (void)state;
  rp_schedule *s;
  rp_sim *sim;
  rp_costs c = RP_COSTS_DEFAULT;
  assert_int_equal(rp_schedule_make("interleaved", 2, 2, 4, &s), RP_OK);
  assert_int_equal(rp_schedule_simulate(s, &c, &sim), RP_OK);
  const char *path = "test_schedule_pic.svg";
  rp_svg_panel panel = {"interleaved <p=2>", s, sim};
  assert_int_equal(rp_sim_write_svg(path, &panel, 1), RP_OK);
  char *svg = read_text(path);
  assert_non_null(svg);
  int boxes = 0;
  for (const char *q = svg; (q = strstr(q, "<title>rank")); q++) boxes++;
  assert_int_equal(boxes, 2 * 2 * 4 * 2); /* p * v * m * (F, B) */
  assert_non_null(strstr(svg, "interleaved &lt;p=2&gt;"));
  assert_non_null(strstr(svg, "W weight grad"));
  assert_non_null(strstr(svg, "</svg>"));
  free(svg);
  remove(path);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  rp_sim_print_ascii(f, s, sim, 0);
  fclose(f);
  assert_non_null(strstr(buf, "rank 0  |F0"));
  assert_non_null(strstr(buf, "rank 1  |"));
  assert_non_null(strstr(buf, "f3")); /* chunk 1 in lower case */
  free(buf);
  rp_sim_free(sim);
  rp_schedule_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_goldens),         cmocka_unit_test(test_golden_round_trip),
      cmocka_unit_test(test_1f1b_shape),      cmocka_unit_test(test_bubble_formulas),
      cmocka_unit_test(test_bubble_ratios),   cmocka_unit_test(test_sim_comm_and_spans),
      cmocka_unit_test(test_liveness),        cmocka_unit_test(test_peer_tag),
      cmocka_unit_test(test_pictures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
