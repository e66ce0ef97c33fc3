/* A range of work units [lo, hi) that its owner takes from the front, a block
 * at a time, and that threads out of work take from the back, half of what is
 * left at a time: work sharing for kernels whose units give the same numbers
 * whichever thread runs them (the fp32 GEMM's row tiles, sgemm.c; flash
 * attention's heads).
 *
 * Why: a pool's tasks are static shares, so a job lasts as long as its slowest
 * thread. On a shared machine one core is often slower than the other for a
 * while (a neighbour on its sibling hyperthread, its caches or its memory
 * channel): on the 2-core Zen 4 VM the thread that finished a GEMM job first
 * waited 4-7 % of the GEMM jobs' time for the other, in either direction
 * (2-4 % with the sharing), and with a busy loop on the second core a
 * default-model step ran 1.10-1.16x faster with it (docs/design.md).
 *
 * Both ends live in one 64-bit word (lo in the low half, hi in the high), so
 * that a claim from either end is one compare-and-swap and no unit is ever
 * taken twice or lost. Units are counted in 32 bits. */
#ifndef RP_WORK_RANGE_H
#define RP_WORK_RANGE_H

#include <stdatomic.h>
#include <stdint.h>

typedef _Atomic uint64_t rp_work_range;

/* For tests: pool thread ith waits at rp_work_straggle, which a balanced
 * kernel calls as it starts its own share, until another thread has taken
 * units from its share (since this call: set it again before each job whose
 * takes a test counts), or at most `seconds` (0: nobody waits); and the
 * units thieves have taken since the process started. */
void rp_work_set_straggler(int ith, double seconds);
/* The tests' cap on a hold: long enough for the other threads to finish
 * their own shares on a loaded or emulated CPU (a hold ends at the take). */
#define RP_WORK_TEST_HOLD_S 10.0
void rp_work_straggle(int ith);
long rp_work_units_taken(void);

static inline uint64_t rp_work_range_pack(long lo, long hi) {
  return (uint64_t)(uint32_t)lo | (uint64_t)(uint32_t)hi << 32;
}

/* nthreads ranges holding rp_split's shares of n units, malloc'd (NULL when
 * out of memory): the caller frees them. */
rp_work_range *rp_work_ranges_split(long n, int nthreads);

/* Before the threads start. */
static inline void rp_work_range_set(rp_work_range *r, long lo, long hi) {
  atomic_store_explicit(r, rp_work_range_pack(lo, hi < lo ? lo : hi), memory_order_relaxed);
}

/* The owner: the next blk units from the front, [*a, *b), and in *hi the end
 * of what is left after them (where its next claim would stop, unless taken).
 * 0 when nothing is left. */
static inline int rp_work_range_front(rp_work_range *r, long blk, long *a, long *b, long *hi) {
  uint64_t cur = atomic_load_explicit(r, memory_order_acquire);
  for (;;) {
    const long lo = (long)(uint32_t)cur, h = (long)(cur >> 32);
    if (lo >= h) return 0;
    const long e = lo + blk < h ? lo + blk : h;
    if (atomic_compare_exchange_weak_explicit(r, &cur, rp_work_range_pack(e, h),
                                              memory_order_acq_rel, memory_order_acquire)) {
      *a = lo, *b = e, *hi = h;
      return 1;
    }
  }
}

/* A thief: the back half (at least one unit) of what is left of thread
 * owner's share r, [*a, *b). 0 when nothing is left. Out of line: it runs a
 * few times a job, and counts what it takes for rp_work_units_taken (and for
 * the straggler's hold). */
int rp_work_range_back(rp_work_range *r, int owner, long *a, long *b);

/* Thread ith's next units among nth ranges: blk from the front of its own,
 * else the back half of the first other range (ith + 1, ith + 2, ...) with
 * any left. Returns whose range they came from, -1 when all are empty; *hi is
 * where the thread may expect to go on from *b (its own range's end, or *b
 * after a theft), for prefetching. */
static inline int rp_work_next(rp_work_range *r, int ith, int nth, long blk, long *a, long *b,
                               long *hi) {
  if (rp_work_range_front(&r[ith], blk, a, b, hi)) return ith;
  for (int d = 1; d < nth; d++) {
    const int v = (ith + d) % nth;
    if (rp_work_range_back(&r[v], v, a, b)) {
      *hi = *b;
      return v;
    }
  }
  return -1;
}

/* An elementwise kernel's range function: elements [lo, hi) of its ctx. */
typedef void (*rp_range_fn)(void *ctx, long lo, long hi);
struct rp_pool;
/* fn over [0, n) on the pool's threads, shared: each thread takes its
 * static share unit elements at a time from the front and then the back
 * halves of the others' (so that one slow core does not hold the rest up);
 * serially on the caller without a pool, with one thread or little work.
 * For kernels whose every element is the same whichever thread computes it
 * (the optimizer's updates), so the split never changes a number. */
void rp_kern_run_shared(struct rp_pool *pool, rp_range_fn fn, void *ctx, long n, long unit);

#endif
