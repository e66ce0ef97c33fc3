/* Timers, sorting timings and a deterministic RNG (xoshiro-like, splittable by seed). */
#ifndef RP_UTIL_H
#define RP_UTIL_H

#include <stdint.h>
#include <stdio.h>

double rp_now(void);               /* seconds, monotonic clock */
/* CPU time the hypervisor gave to other guests while this machine's CPUs
 * had work (/proc/stat's steal column, summed over all its CPUs), in seconds
 * since boot; -1 where there is no such figure (not Linux, or an old kernel).
 * The difference over a run says how much of it a shared VM lost to its
 * neighbours. rp_steal_seconds_from parses the text of /proc/stat with hz
 * ticks a second (its first line: "cpu" user nice system idle iowait irq
 * softirq steal ...). */
double rp_steal_seconds(void);
double rp_steal_seconds_from(const char *proc_stat, long hz);
/* "  hypervisor steal over WHAT: S s of this machine's N CPUs x WALL s (P %; ...)"
 * to f, the share of the machine's CPU time over wall seconds that `stolen`
 * seconds are; nothing when stolen < 0 (no count) or wall <= 0. */
void rp_print_steal(FILE *f, const char *what, double stolen, double wall);
/* v[0..n) in ascending order (qsort; for medians and percentiles of timings) */
void rp_sort_doubles(double *v, long n);
/* Ranks of this job on this node (local_ranks.c): the MPI library's count once
 * the grid has set it, else the launcher's variables (Open MPI, Slurm), else 1. */
int rp_local_ranks(void);
int rp_local_ranks_from_env(void);
void rp_set_local_ranks(int n);

typedef struct { uint64_t s[4]; } rp_rng;

void rp_rng_seed(rp_rng *r, uint64_t seed);
uint64_t rp_rng_u64(rp_rng *r);
uint32_t rp_rng_below(rp_rng *r, uint32_t n);  /* uniform in [0, n) */
float rp_rng_uniform(rp_rng *r);               /* [0, 1) */
float rp_rng_normal(rp_rng *r);                /* standard normal (Box-Muller) */

#endif
