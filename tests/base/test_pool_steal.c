/* Pool: the caller runs the tasks that no worker has started (work stealing),
 * every task still runs exactly once, and jobs mixing stolen and worker-run
 * tasks, async launches and idle gaps long enough for the workers to fall asleep
 * keep that invariant. Every thread that runs tasks flushes denormals. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "ringpipe/rp_pool.h"

typedef struct {
  _Atomic int hits[8];
  _Atomic int by_caller; /* tasks ith > 0 that ran on the calling thread */
  pthread_t caller;
} steal_probe;

static void steal_fn(void *ctx, int ith, int nth) {
  steal_probe *p = ctx;
  atomic_fetch_add(&p->hits[ith], 1);
  if (ith > 0 && pthread_equal(pthread_self(), p->caller)) atomic_fetch_add(&p->by_caller, 1);
}

static void idle_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* A worker that has slept (idle far beyond the pool's spin) takes microseconds
 * to wake, while the caller's own task here is empty: the caller should run the
 * workers' tasks itself. Each is still run exactly once. */
static void test_caller_steals_unstarted_tasks(void **state) {
  (void)state;
  for (int n = 2; n <= 4; n++) {
    rp_pool *pool;
    assert_int_equal(rp_pool_create(&pool, n, 0), RP_OK);
    int stolen = 0;
    for (int rep = 0; rep < 20; rep++) {
      idle_ms(2);
      steal_probe pr = {.caller = pthread_self()};
      rp_pool_run(pool, steal_fn, &pr);
      for (int i = 0; i < n; i++) assert_int_equal(pr.hits[i], 1);
      for (int i = n; i < 8; i++) assert_int_equal(pr.hits[i], 0);
      stolen += pr.by_caller;
    }
    /* 20 wake-ups each racing a caller that is already done: at least one lost */
    assert_true(stolen > 0);
    rp_pool_destroy(pool);
  }
}

/* Back-to-back jobs, async launches and idle gaps interleaved: stale workers
 * (woken for a job whose task was stolen) must neither run a task twice nor
 * run a later job's task with an earlier job's arguments. */
static void test_exactly_once_under_mixing(void **state) {
  (void)state;
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 3, 0), RP_OK);
  for (int rep = 0; rep < 300; rep++) {
    if (rep % 50 == 0) idle_ms(1);
    steal_probe pr = {.caller = pthread_self()};
    if (rep % 7 == 3) {
      rp_pool_launch(pool, steal_fn, &pr);
      rp_pool_wait(pool);
      assert_int_equal(pr.hits[0], 1); /* workers only: tasks 0..1 of nth = 2 */
      assert_int_equal(pr.hits[1], 1);
      assert_int_equal(pr.hits[2], 0);
      assert_int_equal(pr.by_caller, 0);
    } else {
      rp_pool_run(pool, steal_fn, &pr);
      for (int i = 0; i < 3; i++) assert_int_equal(pr.hits[i], 1);
    }
  }
  rp_pool_destroy(pool);
}

/* A product whose exact value is a denormal: 0 under FTZ, else 2^-127. */
static void denormal_fn(void *ctx, int ith, int nth) {
  (void)nth;
  volatile float tiny = 0x1p-126f, half = 0.5f;
  ((float *)ctx)[ith] = tiny * half;
}

/* The workers and the creating thread flush denormals to zero (pool.c: a
 * denormal's microcode assists made attention 11x slower), on x86 where the
 * pool sets MXCSR; stolen tasks included, so no result depends on who ran it. */
static void test_tasks_flush_denormals(void **state) {
  (void)state;
#if defined(__x86_64__) || defined(__i386__)
  /* the test's thread as a program starts (an earlier pool set it to flush):
   * the pool must set its threads itself */
  _mm_setcsr(_mm_getcsr() & ~0x8040u);
  float before[3] = {0, 0, 0};
  denormal_fn(before, 0, 1);
  assert_true(before[0] > 0.0f);
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 3, 0), RP_OK);
  for (int rep = 0; rep < 20; rep++) {
    if (rep % 5 == 0) idle_ms(1); /* some jobs find the workers asleep */
    float out[3] = {1, 1, 1};
    rp_pool_run(pool, denormal_fn, out);
    for (int i = 0; i < 3; i++) assert_true(out[i] == 0.0f);
  }
  rp_pool_destroy(pool);
#else
  skip();
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_caller_steals_unstarted_tasks),
      cmocka_unit_test(test_exactly_once_under_mixing),
      cmocka_unit_test(test_tasks_flush_denormals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
