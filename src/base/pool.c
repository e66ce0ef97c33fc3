/* Thread pool of pinned workers that spin briefly, then sleep.
 *
 * Why spin-then-sleep: kernels between GEMMs are short (tens of microseconds), so
 * a worker that slept after each job would pay a futex wake-up per kernel; but a
 * worker that spins forever steals the core from OpenBLAS's own threads while an
 * sgemm runs. A short, time-bounded spin gets both.
 *
 * Why the caller steals: rp_pool_run is fork-join, so a job lasts as long as its
 * slowest task, and a task whose worker is asleep (waking takes tens of
 * microseconds) or preempted by another process (milliseconds on a loaded
 * machine) would hold up the whole job. After its own task the caller therefore
 * runs every task that no worker has started yet. A task is claimed by whoever
 * swaps the job's generation into its slot first, so each runs exactly once;
 * a task's result depends only on (ith, nth), never on the thread running it, so
 * stealing changes no number.
 *
 * Why denormals are flushed: see flush_denormals. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* Measured (bench/bench_step, 2 threads, GPT L=6 C=384): in pool-split GEMM mode
 * the step time does not depend on the spin within noise from 5 us to 5 ms,
 * since the caller steals the tasks of sleeping workers; in blas mode a worker
 * spinning through an sgemm competes with OpenBLAS's threads and 500 us cost 8%
 * per step. 50 us covers the gaps between back-to-back kernels. */
#define SPIN_SECONDS 50e-6

typedef struct {
  rp_pool *pool;
  int index;  /* 1..n-1 */
  int cpu;    /* core to pin to, -1 for none */
} worker_arg;

struct rp_pool {
  int n;
  pthread_t *threads;
  worker_arg *args;
  _Atomic unsigned long *claimed; /* per task: generation of the last job that claimed it */
  pthread_mutex_t mu;
  pthread_cond_t cv_start, cv_done;
  _Atomic unsigned long gen;   /* bumped once per job */
  _Atomic int pending;         /* workers still running the current job */
  _Atomic int stop;
  rp_pool_fn fn;
  void *ctx;
  int async;                   /* job runs on workers only (caller free) */
  int pinned_caller;           /* the creating thread was pinned: unpin on destroy */
  int gemm_mode;               /* how this pool's runs use it for GEMMs (kernels' enum), -1 unset */
  struct rp_sgemm_wcache *wcache; /* packed weights the own GEMM may reuse, or NULL */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* The cpu id of the slot-th CPU this process may use, or -1. */
static int nth_allowed_cpu(const cpu_set_t *allowed, int slot) {
  int k = -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, allowed) && ++k == slot) return c;
  return -1;
}

/* The cores the process was given, read before any pool pinned anything, so
 * that a second pool (or a worker born of a pinned caller) still sees them. */
static cpu_set_t process_cpus;
static pthread_once_t process_cpus_once = PTHREAD_ONCE_INIT;
static int process_cpus_ok;

static void read_process_cpus(void) {
  process_cpus_ok = sched_getaffinity(0, sizeof process_cpus, &process_cpus) == 0;
}

/* Pin the calling thread to one core, or (cpu < 0) give it all the process's. */
static void pin_self(int cpu) {
  if (!process_cpus_ok) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  if (cpu >= 0)
    CPU_SET(cpu, &one);
  else
    one = process_cpus;
  pthread_setaffinity_np(pthread_self(), sizeof one, &one);
}

/* Pinning is only safe when this process's threads fit the cores it may use and
 * no sibling rank on the node shares them (mpirun --bind-to none gives every
 * rank all cores: then the OS places threads better than a fixed map would). */
static int pinning_allowed(int nthreads) {
  pthread_once(&process_cpus_once, read_process_cpus);
  if (!process_cpus_ok) return 0;
  const cpu_set_t allowed = process_cpus;
  return rp_local_ranks() <= 1 && nthreads <= CPU_COUNT(&allowed);
}

/* 1 if the calling thread now owns task i of job g (the first to claim it). */
static int claim(rp_pool *p, int i, unsigned long g) {
  /* Only forward: a worker that read an old generation and was descheduled must
   * not claim a slot a newer job already took (it would run the new job's task
   * with stale arguments and miscount `pending`). */
  unsigned long cur = atomic_load_explicit(&p->claimed[i], memory_order_acquire);
  while (cur < g)
    if (atomic_compare_exchange_weak_explicit(&p->claimed[i], &cur, g, memory_order_acq_rel,
                                              memory_order_acquire))
      return 1;
  return 0;
}

static void finish_one(rp_pool *p) {
  if (atomic_fetch_sub(&p->pending, 1) == 1) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
  }
}

/* Every thread that runs the pool's tasks computes with denormals flushed to
 * zero (MXCSR FTZ and DAZ). A softmax probability exp(s - m) below 2^-126
 * (a score 87 below its row's maximum, which sharpened attention and a
 * trained LM head's logits reach) is a denormal, and on Intel cores every
 * multiply-add that writes or reads one takes a microcode assist:
 * bench/bench_denormals (a default-model attention layer, fwd + bwd, one
 * thread, 37 % of its probabilities denormal) ran 26x slower unflushed on
 * Sapphire Rapids (166 against 6.2 ms). A flushed value is below
 * 2^-126 and so below fp32's resolution of any sum it joins beside a normal
 * term (a softmax row's maximum term is 1). Flushing in the creating thread
 * too keeps a task's result independent of which thread runs it. */
static void flush_denormals(void) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) and DAZ (bit 6) */
#endif
}

static void *worker_main(void *arg) {
  worker_arg *wa = arg;
  rp_pool *p = wa->pool;
  unsigned long seen = 0;
  pin_self(wa->cpu);
  flush_denormals();
  for (;;) {
    double t0 = rp_now();
    while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
           !atomic_load(&p->stop)) {
      cpu_relax();
      if (rp_now() - t0 > SPIN_SECONDS) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
          pthread_cond_wait(&p->cv_start, &p->mu);
        pthread_mutex_unlock(&p->mu);
      }
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = atomic_load_explicit(&p->gen, memory_order_acquire);
    /* claim before reading fn/ctx: a stolen task's job may be over, and the
     * next one being set up */
    if (!claim(p, wa->index, seen)) continue;
    if (p->async)
      p->fn(p->ctx, wa->index - 1, p->n - 1);
    else
      p->fn(p->ctx, wa->index, p->n);
    finish_one(p);
  }
}

rp_status rp_pool_create(rp_pool **out, int nthreads, int pin) {
  if (nthreads < 1 || nthreads > 1024)
    return rp_err(RP_EINVAL, "--threads %d is out of range; use 1..1024", nthreads);
  flush_denormals();
  rp_pool *p = calloc(1, sizeof *p);
  if (p) p->gemm_mode = -1;
  if (!p) return rp_err(RP_ENOMEM, "out of memory creating the thread pool");
  p->n = nthreads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_start, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  /* Read the allowed set once, before any thread (the caller included) is
   * pinned: a pinned caller would otherwise hand its single core to all. */
  pthread_once(&process_cpus_once, read_process_cpus);
  int do_pin = pin && pinning_allowed(nthreads);
  const cpu_set_t allowed = process_cpus;
  p->pinned_caller = do_pin;
  p->threads = calloc(nthreads, sizeof *p->threads);
  p->args = calloc(nthreads, sizeof *p->args);
  p->claimed = calloc(nthreads, sizeof *p->claimed);
  if (!p->threads || !p->args || !p->claimed) {
    p->n = 1;
    rp_pool_destroy(p);
    return rp_err(RP_ENOMEM, "out of memory creating the thread pool");
  }
  for (int i = 1; i < nthreads; i++) {
    p->args[i].pool = p;
    p->args[i].index = i;
    p->args[i].cpu = do_pin ? nth_allowed_cpu(&allowed, i) : -1;
    if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) {
      p->n = i;
      rp_pool_destroy(p);
      return rp_err(RP_ENOMEM, "could not start worker thread %d of %d", i, nthreads);
    }
  }
  if (do_pin) pin_self(nth_allowed_cpu(&allowed, 0));
  *out = p;
  return RP_OK;
}

void rp_pool_destroy(rp_pool *p) {
  if (!p || p == rp_pool_serial()) return;
  if (p->pinned_caller) pin_self(-1);
  atomic_store(&p->stop, 1);
  pthread_mutex_lock(&p->mu);
  pthread_cond_broadcast(&p->cv_start);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv_start);
  pthread_cond_destroy(&p->cv_done);
  free(p->threads);
  free(p->args);
  free(p->claimed);
  free(p);
}

int rp_pool_size(const rp_pool *p) { return p ? p->n : 1; }

void rp_pool_set_gemm_mode(rp_pool *p, int mode) {
  if (p) p->gemm_mode = mode;
}

int rp_pool_gemm_mode(const rp_pool *p) { return p ? p->gemm_mode : -1; }

void rp_pool_set_wcache(rp_pool *p, struct rp_sgemm_wcache *c) {
  if (p) p->wcache = c;
}

struct rp_sgemm_wcache *rp_pool_wcache(const rp_pool *p) { return p ? p->wcache : NULL; }

static void start_job(rp_pool *p, rp_pool_fn fn, void *ctx, int async) {
  p->fn = fn;
  p->ctx = ctx;
  p->async = async;
  atomic_store(&p->pending, p->n - 1);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  pthread_mutex_lock(&p->mu);
  pthread_cond_broadcast(&p->cv_start);
  pthread_mutex_unlock(&p->mu);
}

void rp_pool_wait(rp_pool *p) {
  if (!p || p->n == 1) return;
  double t0 = rp_now();
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
    cpu_relax();
    if (rp_now() - t0 > SPIN_SECONDS) {
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

void rp_pool_run(rp_pool *p, rp_pool_fn fn, void *ctx) {
  if (!p || p->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  start_job(p, fn, ctx, 0);
  unsigned long g = atomic_load_explicit(&p->gen, memory_order_relaxed);
  fn(ctx, 0, p->n);
  for (int i = 1; i < p->n; i++)
    if (claim(p, i, g)) {
      fn(ctx, i, p->n);
      atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
  rp_pool_wait(p);
}

void rp_pool_launch(rp_pool *p, rp_pool_fn fn, void *ctx) {
  if (!p || p->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  start_job(p, fn, ctx, 1);
}

int rp_pool_poll(rp_pool *p) {
  return !p || p->n == 1 || atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}

void rp_with_process_cpus(void (*fn)(void *ctx), void *ctx) {
  pthread_once(&process_cpus_once, read_process_cpus);
  cpu_set_t mine;
  int restore = process_cpus_ok &&
                pthread_getaffinity_np(pthread_self(), sizeof mine, &mine) == 0 &&
                !CPU_EQUAL(&mine, &process_cpus) &&
                pthread_setaffinity_np(pthread_self(), sizeof process_cpus, &process_cpus) == 0;
  fn(ctx);
  if (restore) pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
}

static rp_pool serial_pool = {.n = 1};
rp_pool *rp_pool_serial(void) { return &serial_pool; }
