/* The buffer arena planner (rp_schedule_plan_arena): for every generator at
 * several (p, m) and every rank, no two buffers live at a common action share
 * a byte, the arena holds the bytes live at every action (and equals that
 * lower bound where the layout is simple), it is never larger than the
 * per-class slot pools it replaced, and freeing at I what W does not read
 * makes the zero-bubble schedules smaller. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ringpipe/rp_schedule.h"

static rp_schedule *make(const char *name, int p, int v, int m) {
  rp_schedule *s;
  if (rp_schedule_make(name, p, v, m, &s) != RP_OK) fail_msg("%s: %s", name, rp_errmsg());
  return s;
}

/* Sizes shaped like a GPT-2 chunk's (KEEP about 9/16 of the activations, a
 * W stash about 2/3 of them, a message 1/16), chunk 0 a bit larger than the
 * others as a chunk holding the head is; `uniform` makes every chunk alike. */
typedef struct {
  size_t keep[2], drop[2], wst[2];
  rp_buf_sizes sz;
} sizes;

static void fill_sizes(sizes *z, int uniform, size_t msg) {
  for (int c = 0; c < 2; c++) {
    size_t scale = uniform || c ? 1 : 2;
    z->keep[c] = 9 * 4096 * scale;
    z->drop[c] = 7 * 4096 * scale + 64;
    z->wst[c] = 11 * 4096 * scale;
  }
  z->sz = (rp_buf_sizes){z->keep, z->drop, z->wst, msg};
}

/* Bytes live at each action, counted from the buffer list. */
static size_t max_live(const rp_arena_plan *ap) {
  size_t peak = 0;
  for (int i = 0; i < ap->n; i++) {
    size_t live = 0;
    for (int b = 0; b < ap->nbuf; b++)
      if (ap->buf[b].first <= i && i <= ap->buf[b].last) live += ap->buf[b].size;
    if (live > peak) peak = live;
  }
  return peak;
}

/* The invariants of one rank's plan. */
static void check_plan(const rp_schedule *s, int r, const rp_arena_plan *ap) {
  for (int b = 0; b < ap->nbuf; b++) {
    const rp_buf *x = &ap->buf[b];
    assert_true(x->first >= 0 && x->first <= x->last && x->last < ap->n);
    assert_true(x->off % 64 == 0 && x->size % 64 == 0);
    assert_true(x->off + x->size <= ap->arena_bytes);
    for (int q = b + 1; q < ap->nbuf; q++) {
      const rp_buf *y = &ap->buf[q];
      int meet = x->first <= y->last && y->first <= x->last;
      int share = x->off < y->off + y->size && y->off < x->off + x->size;
      if (meet && share)
        fail_msg("%s rank %d: %s %d/%d [%d,%d] at %zu+%zu and %s %d/%d [%d,%d] at %zu+%zu "
                 "share bytes while both live", s->name, r, rp_buf_class_name(x->cls), x->chunk,
                 x->mb, x->first, x->last, x->off, x->size, rp_buf_class_name(y->cls), y->chunk,
                 y->mb, y->first, y->last, y->off, y->size);
    }
  }
  assert_int_equal(ap->live_peak, max_live(ap));
  assert_true(ap->arena_bytes >= ap->live_peak);
  assert_true(ap->arena_bytes <= ap->pooled_bytes);
  /* what the executor looks up: every F takes KEEP and DROP inside the arena */
  for (int i = 0; i < ap->n; i++) {
    rp_action a = s->acts[r][i];
    if (a.op == RP_OP_F) {
      assert_true(ap->off[RP_BUF_KEEP][i] != SIZE_MAX && ap->off[RP_BUF_DROP][i] != SIZE_MAX);
      assert_true(ap->off[RP_BUF_DROP][i] < ap->arena_bytes);
    }
    if (a.op == RP_OP_I) assert_true(ap->off[RP_BUF_WST][i] != SIZE_MAX);
    if (a.op == RP_OP_RECV_F || a.op == RP_OP_RECV_B)
      assert_true(ap->off[RP_BUF_RBUF][i] != SIZE_MAX);
  }
}

typedef struct {
  const char *name;
  int v;
} gen;
static const gen gens[] = {{"naive", 1}, {"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2},
                           {"zb-h1", 1}, {"zb-h2", 1}, {"zb-v", 2}, {"zb-v-half", 2},
                           {"zb-v-min", 2}, {"dualpipev", 2}};

static void test_invariants(void **state) {
  (void)state;
  for (size_t g = 0; g < sizeof gens / sizeof gens[0]; g++)
    for (int p = 2; p <= 4; p += 2)
      for (int m = 2 * p; m <= 4 * p; m += p)
        for (int uniform = 0; uniform < 2; uniform++) {
          rp_schedule *s = make(gens[g].name, p, gens[g].v, m);
          sizes z;
          fill_sizes(&z, uniform, uniform ? 4096 : 0);
          for (int r = 0; r < p; r++) {
            rp_arena_plan ap;
            assert_int_equal(rp_schedule_plan_arena(s, r, &z.sz, &ap), RP_OK);
            check_plan(s, r, &ap);
            rp_arena_plan_free(&ap);
          }
          rp_schedule_free(s);
        }
}

/* Without a split backward and with one size per class, every buffer of a
 * (chunk, mb) is one interval and the layout reaches the lower bound. */
static void test_simple_reaches_lower_bound(void **state) {
  (void)state;
  const char *names[] = {"naive", "gpipe", "1f1b"};
  for (int k = 0; k < 3; k++)
    for (int p = 2; p <= 8; p *= 2)
      for (int m = p; m <= 3 * p; m += p) {
        rp_schedule *s = make(names[k], p, 1, m);
        sizes z;
        fill_sizes(&z, 1, 0);
        for (int r = 0; r < p; r++) {
          rp_arena_plan ap;
          assert_int_equal(rp_schedule_plan_arena(s, r, &z.sz, &ap), RP_OK);
          if (ap.arena_bytes != ap.live_peak)
            fail_msg("%s p=%d m=%d rank %d: arena %zu above the lower bound %zu", names[k], p, m,
                     r, ap.arena_bytes, ap.live_peak);
          rp_arena_plan_free(&ap);
        }
        rp_schedule_free(s);
      }
}

/* A hand-made rank: F0 F1 I0 I1 W0 W1. DROP of 0 and 1 end at their I, the
 * stashes start there; at I0 live are both KEEP, both DROP and WST0 (the most),
 * and WST1 fits where DROP0 was. */
static void test_hand_made(void **state) {
  (void)state;
  rp_schedule *s;
  assert_int_equal(rp_schedule_new(1, 1, 2, "hand", &s), RP_OK);
  int ops[6][2] = {{RP_OP_F, 0}, {RP_OP_F, 1}, {RP_OP_I, 0},
                   {RP_OP_I, 1}, {RP_OP_W, 0}, {RP_OP_W, 1}};
  for (int i = 0; i < 6; i++) rp_schedule_push(s, 0, (rp_action){ops[i][0], 0, ops[i][1]});
  size_t keep = 1024, drop = 640, wst = 512;
  rp_buf_sizes sz = {&keep, &drop, &wst, 0};
  rp_arena_plan ap;
  assert_int_equal(rp_schedule_plan_arena(s, 0, &sz, &ap), RP_OK);
  check_plan(s, 0, &ap);
  assert_int_equal(ap.nbuf, 6);
  assert_int_equal(ap.live_peak, 2 * keep + 2 * drop + wst);  /* at I0 */
  assert_int_equal(ap.arena_bytes, ap.live_peak);
  /* F1's 2 x (keep + drop) is the pools' activation part, plus 2 stashes */
  assert_int_equal(ap.pooled_bytes, 2 * (keep + drop) + 2 * wst);
  assert_true(ap.arena_bytes < ap.pooled_bytes);
  rp_arena_plan_free(&ap);
  rp_schedule_free(s);
}

/* Freeing DROP at I: the ranks that defer W (zb-h1's rank r holds r + 1 W)
 * need less than the pools, the schedules holding more W more so. */
static void test_split_saves(void **state) {
  (void)state;
  const gen split[] = {{"zb-h1", 1}, {"zb-h2", 1}, {"zb-v", 2}, {"dualpipev", 2}};
  for (size_t g = 0; g < 4; g++)
    for (int p = 2; p <= 4; p += 2) {
      rp_schedule *s = make(split[g].name, p, split[g].v, 2 * p);
      sizes z;
      fill_sizes(&z, 1, 4096);
      size_t most = 0, most_pooled = 0;
      for (int r = 0; r < p; r++) {
        rp_arena_plan ap;
        assert_int_equal(rp_schedule_plan_arena(s, r, &z.sz, &ap), RP_OK);
        if (ap.arena_bytes > most) most = ap.arena_bytes;
        if (ap.pooled_bytes > most_pooled) most_pooled = ap.pooled_bytes;
        rp_arena_plan_free(&ap);
      }
      if (!(most < most_pooled))
        fail_msg("%s p=%d: peak arena %zu not below the pools' %zu", split[g].name, p, most,
                 most_pooled);
      rp_schedule_free(s);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_invariants),
      cmocka_unit_test(test_simple_reaches_lower_bound),
      cmocka_unit_test(test_hand_made),
      cmocka_unit_test(test_split_saves),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
