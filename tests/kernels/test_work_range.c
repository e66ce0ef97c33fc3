/* src/kernels/work_range.h: the owner's blocks from the front, thieves' back
 * halves, and under threads claiming from both ends at once every unit taken
 * exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/work_range.h"
#include "kt_util.h"
#include "ringpipe/rp_pool.h"

/* rp_kern_run_shared: every element of [0, n) exactly once, on 1 to 4
 * threads, with a thread held back (so the others take its units) and
 * without; and serially below the parallel threshold. */
typedef struct {
  _Atomic int *seen;
} seen_ctx;

static void mark_range(void *vctx, long lo, long hi) {
  seen_ctx *c = vctx;
  for (long i = lo; i < hi; i++) atomic_fetch_add(&c->seen[i], 1);
}

static void test_run_shared(void **state) {
  (void)state;
  const long sizes[] = {0, 100, 50001, 300007};
  for (int nth = 1; nth <= 4; nth++) {
    rp_pool *pool = NULL;
    assert_int_equal(rp_pool_create(&pool, nth, 0), RP_OK);
    for (int late = 0; late < 2; late++)
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const long n = sizes[k];
        _Atomic int *seen = calloc((size_t)n + 1, sizeof *seen);
        assert_non_null(seen);
        seen_ctx c = {seen};
        const long before = rp_work_units_taken();
        rp_work_set_straggler(nth - 1, late ? RP_WORK_TEST_HOLD_S : 0.0);
        rp_kern_run_shared(pool, mark_range, &c, n, 4096);
        rp_work_set_straggler(0, 0.0);
        for (long i = 0; i < n; i++) assert_int_equal(atomic_load(&seen[i]), 1);
        if (late && nth > 1 && n > 4096 * nth) assert_true(rp_work_units_taken() > before);
        free(seen);
      }
    rp_pool_destroy(pool);
  }
}

static void test_front_blocks(void **state) {
  (void)state;
  rp_work_range r;
  rp_work_range_set(&r, 3, 10);
  long a, b, hi;
  assert_true(rp_work_range_front(&r, 4, &a, &b, &hi));
  assert_int_equal(a, 3), assert_int_equal(b, 7), assert_int_equal(hi, 10);
  assert_true(rp_work_range_front(&r, 4, &a, &b, &hi)); /* the last block is short */
  assert_int_equal(a, 7), assert_int_equal(b, 10), assert_int_equal(hi, 10);
  assert_false(rp_work_range_front(&r, 4, &a, &b, &hi));
  assert_false(rp_work_range_back(&r, 0, &a, &b));
}

static void test_back_halves(void **state) {
  (void)state;
  rp_work_range r;
  rp_work_range_set(&r, 0, 9);
  long a, b, hi;
  assert_true(rp_work_range_back(&r, 0, &a, &b)); /* the back half, rounded up: 5 of 9 */
  assert_int_equal(a, 4), assert_int_equal(b, 9);
  assert_true(rp_work_range_back(&r, 0, &a, &b));
  assert_int_equal(a, 2), assert_int_equal(b, 4);
  assert_true(rp_work_range_front(&r, 8, &a, &b, &hi)); /* the owner sees what is left */
  assert_int_equal(a, 0), assert_int_equal(b, 2), assert_int_equal(hi, 2);
  assert_false(rp_work_range_back(&r, 0, &a, &b));
  rp_work_range_set(&r, 5, 6); /* one unit: a thief takes it */
  assert_true(rp_work_range_back(&r, 0, &a, &b));
  assert_int_equal(a, 5), assert_int_equal(b, 6);
  rp_work_range_set(&r, 7, 2); /* hi below lo: empty */
  assert_false(rp_work_range_front(&r, 1, &a, &b, &hi));
  assert_false(rp_work_range_back(&r, 0, &a, &b));
}

enum { UNITS = 200000, THREADS = 4 };

typedef struct {
  rp_work_range *r;
  unsigned char *hits;
  int owner;
} stress_arg;

/* The owner takes blocks of 3, the others back halves, all at once. */
static void *stress_main(void *varg) {
  stress_arg *s = varg;
  long a, b, hi;
  for (;;) {
    int got = s->owner ? rp_work_range_front(s->r, 3, &a, &b, &hi)
                       : rp_work_range_back(s->r, 0, &a, &b);
    if (!got) return NULL;
    for (long u = a; u < b; u++) __atomic_fetch_add(&s->hits[u], 1, __ATOMIC_RELAXED);
  }
}

static void test_concurrent_claims(void **state) {
  (void)state;
  unsigned char *hits = calloc(UNITS, 1);
  assert_non_null(hits);
  for (int round = 0; round < 5; round++) {
    rp_work_range r;
    rp_work_range_set(&r, 0, UNITS);
    for (long u = 0; u < UNITS; u++) hits[u] = 0;
    pthread_t t[THREADS];
    stress_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
      args[i] = (stress_arg){&r, hits, i == 0};
      assert_int_equal(pthread_create(&t[i], NULL, stress_main, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    long bad = 0;
    for (long u = 0; u < UNITS; u++) bad += hits[u] != 1;
    assert_int_equal(bad, 0);
  }
  free(hits);
}

/* The straggler's hold (rp_work_straggle): it ends at a take from the
 * straggler's share since the set, not at a take from another's, and at the
 * cap when nothing is taken; a take before the hold starts ends it at once. */
typedef struct {
  _Atomic int done;
} hold_arg;

static void *hold_main(void *varg) {
  hold_arg *h = varg;
  rp_work_straggle(1);
  atomic_store(&h->done, 1);
  return NULL;
}

static void test_straggler_hold(void **state) {
  (void)state;
  rp_work_range r;
  long a, b;
  /* a take from thread 0's share leaves thread 1 held; one from its own ends it */
  rp_work_set_straggler(1, RP_WORK_TEST_HOLD_S);
  hold_arg h = {0};
  pthread_t t;
  const double t0 = rp_now();
  assert_int_equal(pthread_create(&t, NULL, hold_main, &h), 0);
  rp_work_range_set(&r, 0, 8);
  assert_true(rp_work_range_back(&r, 0, &a, &b));
  kt_sleep_ms(50);
  assert_int_equal(atomic_load(&h.done), 0);
  assert_true(rp_work_range_back(&r, 1, &a, &b));
  pthread_join(t, NULL);
  assert_true(rp_now() - t0 < RP_WORK_TEST_HOLD_S / 2);
  /* taken before the hold: no wait */
  rp_work_set_straggler(1, RP_WORK_TEST_HOLD_S);
  rp_work_range_set(&r, 0, 8);
  assert_true(rp_work_range_back(&r, 1, &a, &b));
  const double t1 = rp_now();
  rp_work_straggle(1);
  assert_true(rp_now() - t1 < RP_WORK_TEST_HOLD_S / 2);
  /* nothing taken: the cap; other threads never wait */
  rp_work_set_straggler(1, 0.05);
  const double t2 = rp_now();
  rp_work_straggle(0);
  assert_true(rp_now() - t2 < 0.05);
  rp_work_straggle(1);
  assert_true(rp_now() - t2 >= 0.05);
  rp_work_set_straggler(0, 0.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_front_blocks),
      cmocka_unit_test(test_back_halves),
      cmocka_unit_test(test_concurrent_claims),
      cmocka_unit_test(test_straggler_hold),
      cmocka_unit_test(test_run_shared),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
