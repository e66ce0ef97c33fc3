/* Monotonic timer, the hypervisor's steal count and xoshiro256** random numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringpipe/rp_util.h"

double rp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double rp_steal_seconds_from(const char *proc_stat, long hz) {
  if (!proc_stat || hz <= 0 || strncmp(proc_stat, "cpu ", 4) != 0) return -1.0;
  unsigned long long steal; /* after user nice system idle iowait irq softirq */
  if (sscanf(proc_stat + 4, "%*llu %*llu %*llu %*llu %*llu %*llu %*llu %llu", &steal) != 1) return -1.0;
  return (double)steal / (double)hz;
}

double rp_steal_seconds(void) {
  FILE *fp = fopen("/proc/stat", "r");
  if (!fp) return -1.0;
  char line[512];
  const char *got = fgets(line, sizeof line, fp);
  fclose(fp);
  return got ? rp_steal_seconds_from(line, sysconf(_SC_CLK_TCK)) : -1.0;
}

void rp_print_steal(FILE *f, const char *what, double stolen, double wall) {
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (stolen < 0 || wall <= 0 || ncpu < 1) return;
  fprintf(f, "  hypervisor steal over %s: %.2f s of this machine's %ld CPUs x %.3f s (%.1f %%; "
          "/proc/stat: time other guests ran while its CPUs had work)\n", what, stolen, ncpu,
          wall, 100.0 * stolen / ((double)ncpu * wall));
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void rp_sort_doubles(double *v, long n) {
  if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_double);
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void rp_rng_seed(rp_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rp_rng_u64(rp_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

uint32_t rp_rng_below(rp_rng *r, uint32_t n) {
  /* Lemire's multiply-shift; the tiny bias is irrelevant for shuffling data. */
  return (uint32_t)(((rp_rng_u64(r) >> 32) * (uint64_t)n) >> 32);
}

float rp_rng_uniform(rp_rng *r) { return (rp_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float rp_rng_normal(rp_rng *r) {
  double u1 = ((rp_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  double u2 = (rp_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
