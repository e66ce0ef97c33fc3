/* The work ranges' thief side and test hooks (work_range.h): a thread held
 * back at the start of its share, and the units thieves have taken; and
 * rp_kern_run_shared, elementwise kernels over shared ranges. */
#include <stdlib.h>
#include <time.h>

#include "kern_util.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"
#include "work_range.h"

static _Atomic int g_straggler = -1;
static _Atomic long g_straggler_us;
static _Atomic long g_taken;
static _Atomic long g_taken_from_straggler; /* takes from the straggler's shares */
static _Atomic long g_taken_at_set;         /* ... when it was set */

void rp_work_set_straggler(int ith, double seconds) {
  atomic_store(&g_straggler, -1);
  atomic_store(&g_straggler_us, (long)(seconds * 1e6));
  atomic_store(&g_taken_at_set, atomic_load(&g_taken_from_straggler));
  atomic_store(&g_straggler, seconds > 0 ? ith : -1);
}

/* The hold ends when another thread has taken from the straggler's share,
 * not after a fixed time: a fixed 20 ms let a busy machine's (or an emulated
 * CPU's) other threads still be on their own shares when it ended, nothing
 * was taken, and the tests that count the takes failed. Counted from the
 * set rather than from the hold's start, so that it ends at once where the
 * others took the share before the straggler got to it. */
void rp_work_straggle(int ith) {
  if (atomic_load_explicit(&g_straggler, memory_order_relaxed) != ith) return;
  const long at_set = atomic_load(&g_taken_at_set);
  const double until = rp_now() + (double)atomic_load(&g_straggler_us) * 1e-6;
  const struct timespec nap = {0, 100000}; /* 0.1 ms */
  while (atomic_load(&g_taken_from_straggler) == at_set && rp_now() < until)
    nanosleep(&nap, NULL);
}

long rp_work_units_taken(void) { return atomic_load(&g_taken); }

int rp_work_range_back(rp_work_range *r, int owner, long *a, long *b) {
  uint64_t cur = atomic_load_explicit(r, memory_order_acquire);
  for (;;) {
    const long lo = (long)(uint32_t)cur, h = (long)(cur >> 32);
    if (lo >= h) return 0;
    const long s = h - (h - lo + 1) / 2;
    if (atomic_compare_exchange_weak_explicit(r, &cur, rp_work_range_pack(lo, s),
                                              memory_order_acq_rel, memory_order_acquire)) {
      *a = s, *b = h;
      atomic_fetch_add_explicit(&g_taken, h - s, memory_order_relaxed);
      if (owner >= 0 && owner == atomic_load_explicit(&g_straggler, memory_order_relaxed))
        atomic_fetch_add_explicit(&g_taken_from_straggler, 1, memory_order_relaxed);
      return 1;
    }
  }
}

/* r[t] = rp_split's share t of n units, for each of nthreads */
static void ranges_fill(rp_work_range *r, long n, int nthreads) {
  for (int t = 0; t < nthreads; t++) {
    long lo, hi;
    rp_split(n, t, nthreads, &lo, &hi);
    rp_work_range_set(&r[t], lo, hi);
  }
}

rp_work_range *rp_work_ranges_split(long n, int nthreads) {
  rp_work_range *r = malloc(sizeof(rp_work_range) * (size_t)nthreads);
  if (r) ranges_fill(r, n, nthreads);
  return r;
}

typedef struct {
  rp_range_fn fn;
  void *ctx;
  long n, unit;
  rp_work_range *ranges;
} shared_job;

static void shared_task(void *vctx, int ith, int nth) {
  const shared_job *j = vctx;
  rp_work_straggle(ith);
  long a, b, hi;
  while (rp_work_next(j->ranges, ith, nth, 1, &a, &b, &hi) >= 0)
    j->fn(j->ctx, a * j->unit, b * j->unit < j->n ? b * j->unit : j->n);
}

void rp_kern_run_shared(rp_pool *pool, rp_range_fn fn, void *ctx, long n, long unit) {
  const int nth = pool ? rp_pool_size(pool) : 1;
  if (n <= 0) return;
  if (nth <= 1 || n < RP_KERN_MIN_PAR) {
    fn(ctx, 0, n);
    return;
  }
  enum { ON_STACK = 16 };
  rp_work_range local[ON_STACK];
  const long units = (n + unit - 1) / unit;
  rp_work_range *r = nth <= ON_STACK ? local : rp_work_ranges_split(units, nth);
  if (!r) { /* out of memory for the ranges: the caller does it all */
    fn(ctx, 0, n);
    return;
  }
  if (r == local) ranges_fill(r, units, nth);
  shared_job j = {fn, ctx, n, unit, r};
  rp_pool_run(pool, shared_task, &j);
  if (r != local) free(r);
}
