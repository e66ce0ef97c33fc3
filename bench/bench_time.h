/* Timing helpers shared by the single-thread benchmarks: the calling
 * thread's CPU time (steady on a shared machine, where wall time is not) and
 * a qsort comparator for medians. */
#ifndef RP_BENCH_TIME_H
#define RP_BENCH_TIME_H

#include <time.h>

static inline double bench_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#endif
