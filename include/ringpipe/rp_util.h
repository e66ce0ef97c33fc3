/* Timers and a deterministic RNG (xoshiro-like, splittable by seed). */
#ifndef RP_UTIL_H
#define RP_UTIL_H

#include <stdint.h>

double rp_now(void);               /* seconds, monotonic clock */

typedef struct { uint64_t s[4]; } rp_rng;

void rp_rng_seed(rp_rng *r, uint64_t seed);
uint64_t rp_rng_u64(rp_rng *r);
uint32_t rp_rng_below(rp_rng *r, uint32_t n);  /* uniform in [0, n) */
float rp_rng_uniform(rp_rng *r);               /* [0, 1) */
float rp_rng_normal(rp_rng *r);                /* standard normal (Box-Muller) */

#endif
