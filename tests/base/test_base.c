/* Base: pool runs every (ith, nth) exactly once, async launch, allocation
 * accounting, huge-page advice, ranks per node, error messages, rng determinism,
 * the hypervisor's steal count read from /proc/stat. */
#include <setjmp.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"

typedef struct {
  _Atomic int hits[8];
  _Atomic int nth_seen;
} pool_probe;

static void probe_fn(void *ctx, int ith, int nth) {
  pool_probe *p = ctx;
  atomic_fetch_add(&p->hits[ith], 1);
  atomic_store(&p->nth_seen, nth);
}

static void test_pool_runs_each_thread_once(void **state) {
  for (int n = 1; n <= 4; n++) {
    rp_pool *pool;
    assert_int_equal(rp_pool_create(&pool, n, 0), RP_OK);
    for (int rep = 0; rep < 200; rep++) {
      pool_probe pr = {0};
      rp_pool_run(pool, probe_fn, &pr);
      for (int i = 0; i < n; i++) assert_int_equal(pr.hits[i], 1);
      for (int i = n; i < 8; i++) assert_int_equal(pr.hits[i], 0);
      assert_int_equal(pr.nth_seen, n);
    }
    rp_pool_destroy(pool);
  }
}

static void test_pool_async_leaves_caller_free(void **state) {
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 3, 0), RP_OK);
  pool_probe pr = {0};
  rp_pool_launch(pool, probe_fn, &pr);
  while (!rp_pool_poll(pool)) {
  }
  rp_pool_wait(pool);
  assert_int_equal(pr.hits[0], 1);
  assert_int_equal(pr.hits[1], 1);
  assert_int_equal(pr.hits[2], 0);
  assert_int_equal(pr.nth_seen, 2);
  rp_pool_destroy(pool);
}

static void test_split_covers_range(void **state) {
  for (int nth = 1; nth < 7; nth++) {
    long next = 0;
    for (int i = 0; i < nth; i++) {
      long lo, hi;
      rp_split(23, i, nth, &lo, &hi);
      assert_int_equal(lo, next);
      next = hi;
    }
    assert_int_equal(next, 23);
  }
}

static void test_alloc_accounting(void **state) {
  size_t before = rp_mem_current(RP_MEM_ACTS);
  float *a = rp_alloc(1000 * sizeof(float), RP_MEM_ACTS);
  float *b = rp_alloc(1 << 20, RP_MEM_ACTS);
  assert_non_null(a);
  assert_true(((uintptr_t)a & 63) == 0 && ((uintptr_t)b & 63) == 0);
  for (int i = 0; i < 1000; i++) assert_true(a[i] == 0.0f);
  assert_int_equal(rp_mem_current(RP_MEM_ACTS), before + 4000 + (1 << 20));
  rp_free(b);
  assert_int_equal(rp_mem_current(RP_MEM_ACTS), before + 4000);
  assert_true(rp_mem_peak(RP_MEM_ACTS) >= before + 4000 + (1 << 20));
  rp_free(a);
}

/* The VmFlags line of the mapping that holds p in /proc/self/smaps, or "" */
static void vma_flags(const void *p, char *out, size_t n) {
  out[0] = 0;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return;
  char line[512];
  int inside = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) /* a mapping's first line */
      inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(out, n, "%s", line + 8);
      break;
    }
  }
  fclose(f);
}

/* 1 when this process's madvise(MADV_HUGEPAGE) shows as the "hg" VMA flag:
 * a control mapping advised directly. QEMU's user-mode emulator (under which
 * bench/emulated_cpus.sh runs this test) accepts the advice and drops it. */
static int madvise_shows_in_smaps(void) {
#ifndef MADV_HUGEPAGE
  return 0;
#else
  const size_t len = 4u << 20;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  char flags[512];
  flags[0] = 0;
  if (madvise(p, len, MADV_HUGEPAGE) == 0) vma_flags(p, flags, sizeof flags);
  munmap(p, len);
  return strstr(flags, " hg") != NULL;
#endif
}

/* A block of 2 MiB or more asks for transparent huge pages (the "hg" VMA
 * flag, set by madvise whatever the system then grants); a small one does
 * not. Skipped where the kernel has no THP or no smaps, or where the advice
 * given directly does not show there either. */
static void test_alloc_asks_huge_pages(void **state) {
  (void)state;
  char flags[512];
  float *big = rp_alloc(8u << 20, RP_MEM_ACTS);
  assert_non_null(big);
  vma_flags(big, flags, sizeof flags);
  if (!flags[0] || access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0 ||
      !madvise_shows_in_smaps()) {
    rp_free(big);
    skip();
  }
  assert_non_null(strstr(flags, " hg"));
  for (size_t i = 0; i < (8u << 20) / sizeof(float); i += 1024) assert_true(big[i] == 0.0f);
  rp_free(big);
}

/* Scratch blocks: zero-filled and accounted while held, kept after free for
 * the next request that fits (the same block back, zeroed again), not counted
 * while kept; a request bigger than every kept block gets a new one. */
static void test_scratch_reuse(void **state) {
  (void)state;
  rp_scratch_release();
  size_t before = rp_mem_current(RP_MEM_WORKSPACE);
  float *a = rp_scratch_alloc(300000 * sizeof(float));
  assert_non_null(a);
  assert_true(((uintptr_t)a & 63) == 0);
  assert_int_equal(rp_mem_current(RP_MEM_WORKSPACE), before + 1200000);
  for (int i = 0; i < 300000; i++) a[i] = 1.0f;
  rp_scratch_free(a);
  assert_int_equal(rp_mem_current(RP_MEM_WORKSPACE), before);
  float *b = rp_scratch_alloc(200000 * sizeof(float));
  assert_ptr_equal(a, b);
  assert_int_equal(rp_mem_current(RP_MEM_WORKSPACE), before + 800000);
  for (int i = 0; i < 200000; i++) assert_true(b[i] == 0.0f);
  float *c = rp_scratch_alloc(400000 * sizeof(float)); /* b is held: a new block */
  assert_non_null(c);
  assert_true(c != b);
  rp_scratch_free(b);
  rp_scratch_free(c);
  assert_int_equal(rp_mem_current(RP_MEM_WORKSPACE), before);
  float *d = rp_scratch_alloc(350000 * sizeof(float)); /* only c fits */
  assert_ptr_equal(d, c);
  rp_scratch_free(d);
  rp_scratch_release();
  assert_int_equal(rp_mem_current(RP_MEM_WORKSPACE), before);
}

/* Ranks per node: the grid's MPI count when set, else Open MPI's or Slurm's
 * variables ("2(x3),1": nodes 0-2 run 2 tasks, node 3 runs 1). */
static void test_local_ranks(void **state) {
  (void)state;
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("SLURM_NTASKS_PER_NODE");
  setenv("SLURM_TASKS_PER_NODE", "2(x3),1", 1);
  setenv("SLURM_NODEID", "3", 1);
  assert_int_equal(rp_local_ranks_from_env(), 1);
  setenv("SLURM_NODEID", "1", 1);
  assert_int_equal(rp_local_ranks_from_env(), 2);
  setenv("SLURM_NTASKS_PER_NODE", "4", 1);
  assert_int_equal(rp_local_ranks_from_env(), 4);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
  assert_int_equal(rp_local_ranks_from_env(), 3);
  rp_set_local_ranks(5);
  assert_int_equal(rp_local_ranks(), 5);
  rp_set_local_ranks(0);
  assert_int_equal(rp_local_ranks(), 3);
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("SLURM_NTASKS_PER_NODE");
  unsetenv("SLURM_TASKS_PER_NODE");
  unsetenv("SLURM_NODEID");
  assert_int_equal(rp_local_ranks(), 1);
}

static void test_errors_carry_message(void **state) {
  rp_status s = rp_err(RP_EINVAL, "--heads %d does not divide --channels %d", 5, 384);
  assert_int_equal(s, RP_EINVAL);
  assert_string_equal(rp_errmsg(), "--heads 5 does not divide --channels 384");
}

static void test_rng_deterministic(void **state) {
  rp_rng a, b;
  rp_rng_seed(&a, 42);
  rp_rng_seed(&b, 42);
  double sum = 0, sq = 0;
  for (int i = 0; i < 100000; i++) {
    assert_true(rp_rng_u64(&a) == rp_rng_u64(&b));
    float z = rp_rng_normal(&a);
    rp_rng_normal(&b);
    sum += z;
    sq += z * z;
  }
  assert_true(fabs(sum / 100000) < 0.02);
  assert_true(fabs(sq / 100000 - 1.0) < 0.02);
}

/* The steal column is the eighth number of /proc/stat's "cpu" line (proc(5)),
 * in ticks; a line without it, another line first, or no hz give -1. */
static void test_steal_parse(void **state) {
  (void)state;
  const char *stat = "cpu  1817008 611 285413 1358307 6067 0 1745 4986 0 0\n"
                     "cpu0 908504 305 142706 679153 3033 0 872 2493 0 0\n";
  assert_true(fabs(rp_steal_seconds_from(stat, 100) - 49.86) < 1e-9);
  assert_true(fabs(rp_steal_seconds_from("cpu 1 2 3 4 5 6 7 8\n", 1000) - 0.008) < 1e-12);
  assert_true(rp_steal_seconds_from("cpu  1 2 3 4 5 6 7\n", 100) < 0);  /* no steal column */
  assert_true(rp_steal_seconds_from("cpu0 1 2 3 4 5 6 7 8\n", 100) < 0); /* not the total */
  assert_true(rp_steal_seconds_from("intr 1 2 3 4 5 6 7 8\n", 100) < 0);
  assert_true(rp_steal_seconds_from(stat, 0) < 0);
  assert_true(rp_steal_seconds_from(NULL, 100) < 0);
  /* the line: the stolen seconds over the machine's CPU time in the wall time */
  char line[256] = {0}, want[256];
  FILE *f = tmpfile();
  assert_non_null(f);
  rp_print_steal(f, "the 4 steps", -1.0, 10.0); /* no count: nothing */
  rp_print_steal(f, "the 4 steps", 0.5, 0.0);   /* no time: nothing */
  rp_print_steal(f, "the 4 steps", 0.5, 10.0);
  rewind(f);
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  snprintf(want, sizeof want, "  hypervisor steal over the 4 steps: 0.50 s of this machine's %ld "
           "CPUs x 10.000 s (%.1f %%; ", ncpu, 5.0 / (double)ncpu);
  assert_memory_equal(line, want, strlen(want));
  /* this machine's own: a count that never runs backwards, or none at all */
  const double a = rp_steal_seconds(), b = rp_steal_seconds();
  if (access("/proc/stat", R_OK) == 0) {
    assert_true(a >= 0);
    assert_true(b >= a);
  } else {
    assert_true(a < 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool_runs_each_thread_once),
      cmocka_unit_test(test_pool_async_leaves_caller_free),
      cmocka_unit_test(test_split_covers_range),
      cmocka_unit_test(test_alloc_accounting),
      cmocka_unit_test(test_alloc_asks_huge_pages),
      cmocka_unit_test(test_scratch_reuse),
      cmocka_unit_test(test_local_ranks),
      cmocka_unit_test(test_errors_carry_message),
      cmocka_unit_test(test_rng_deterministic),
      cmocka_unit_test(test_steal_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
