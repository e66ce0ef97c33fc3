/* Thread pool: pinned pthread workers running (ith, nth) kernels, ggml-style.
 *
 * A pool of nth threads is the caller plus nth-1 workers. rp_pool_run runs
 * fn(ctx, ith, nth) once for every ith in [0, nth) and returns when all are done:
 * the caller runs ith 0, worker i runs ith i, except that the caller also runs
 * any task its worker has not started by then (asleep or preempted), so fn must
 * not depend on which thread runs it, only on (ith, nth). Workers spin briefly
 * for the next job and then sleep on a condition variable, so that they never
 * compete with OpenBLAS's threads for the cores while a GEMM runs.
 *
 * rp_pool_launch/rp_pool_poll/rp_pool_wait run a job on the workers only
 * (nth-1 of them; the job sees nth = workers) while the caller stays free,
 * e.g. to drive MPI progress between tiles. With one thread, launch runs the
 * job synchronously on the caller.
 *
 * rp_pool_create sets the calling thread, and each worker sets itself, to
 * flush denormals to zero (x86 MXCSR FTZ and DAZ; see pool.c for why). */
#ifndef RP_POOL_H
#define RP_POOL_H

#include "rp_base.h"

typedef void (*rp_pool_fn)(void *ctx, int ith, int nth);
typedef struct rp_pool rp_pool;

/* pin: bind thread i to the i-th CPU of this process's allowed set (libnuma /
 * sched_setaffinity); skipped if fewer CPUs than threads are allowed. */
rp_status rp_pool_create(rp_pool **out, int nthreads, int pin);
void rp_pool_destroy(rp_pool *p);
int rp_pool_size(const rp_pool *p);
/* The GEMM mode of the runs on this pool (rp_gemm_mode of rp_kernels.h; -1:
 * the kernels' default): a per-run setting, kept by the pool the run owns. */
void rp_pool_set_gemm_mode(rp_pool *p, int mode);
int rp_pool_gemm_mode(const rp_pool *p);
/* The packed-weight cache the own GEMM may use for this pool's runs
 * (rp_sgemm.h), or NULL: set by a run only while its weights do not change. */
struct rp_sgemm_wcache;
void rp_pool_set_wcache(rp_pool *p, struct rp_sgemm_wcache *c);
struct rp_sgemm_wcache *rp_pool_wcache(const rp_pool *p);

void rp_pool_run(rp_pool *p, rp_pool_fn fn, void *ctx);

/* Asynchronous variant: returns at once; the caller is not a worker. */
void rp_pool_launch(rp_pool *p, rp_pool_fn fn, void *ctx);
int rp_pool_poll(rp_pool *p);      /* 1 when the launched job has finished */
void rp_pool_wait(rp_pool *p);

/* Split [0, n) into nth near-equal contiguous ranges; range of thread ith. */
static inline void rp_split(long n, int ith, int nth, long *lo, long *hi) {
  long q = n / nth, r = n % nth;
  *lo = ith * q + (ith < r ? ith : r);
  *hi = *lo + q + (ith < r ? 1 : 0);
}

/* Runs fn(ctx) on the calling thread with its CPU affinity widened, for the
 * call, to the CPUs the process was given (as read before any pool pinned a
 * thread), then restores it. Threads that fn starts inherit the wide set:
 * OpenBLAS (re)starts its threads lazily from whichever thread asks first (and
 * MPI_Init's fork makes it stop and restart them), so started from the pinned
 * caller they would all share the caller's core. */
void rp_with_process_cpus(void (*fn)(void *ctx), void *ctx);

/* A process-wide default pool used by kernels when passed NULL (1 thread). */
rp_pool *rp_pool_serial(void);

#endif
