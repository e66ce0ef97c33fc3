/* Timers, sorting timings and a deterministic RNG (xoshiro-like, splittable by seed). */
#ifndef RP_UTIL_H
#define RP_UTIL_H

#include <stdint.h>

double rp_now(void);               /* seconds, monotonic clock */
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
