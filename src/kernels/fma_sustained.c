/* The FMA probe on every thread at once, for as long as a caller asks
 * (rp_isa.h, rp_isa_probe_sustained): the check behind every "of the FMA
 * peak" figure. The start-up probe is one thread's best run over 40 ms while
 * the other threads idle, times the threads; that is the machine's limit only
 * if the threads reach it together and for longer than a moment. Each thread
 * here runs the same register-only loop back to back and keeps every run's
 * rate, so that the spread (a neighbour's busy spell, a clock that drops
 * under sustained load) shows beside the median. */

#include <stdlib.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"

/* 2 MiB of records a thread: at 0.15-0.3 ms a run (the ymm and zmm loops on
 * a 4 GHz core), 40-80 s of runs; a longer request stops there (rp_isa.h). */
#define MAX_RUNS RP_ISA_PROBE_MAX_RUNS

/* the rate at fraction q of the sorted runs (nearest rank) */
static double rank_at(const double *sorted, int n, double q) {
  return sorted[(int)(q * (n - 1) + 0.5)];
}

void rp_isa_probe_summarize(double *rates, int n, rp_isa_probe_stats *st) {
  *st = (rp_isa_probe_stats){.runs = n};
  if (n <= 0) return;
  rp_sort_doubles(rates, n);
  st->best = rates[n - 1];
  st->p90 = rank_at(rates, n, 0.9);
  st->median = rank_at(rates, n, 0.5);
  st->p10 = rank_at(rates, n, 0.1);
}

typedef struct {
  rp_isa level;
  double seconds;
  double *rates;  /* [nth][MAX_RUNS] */
  int *nruns;     /* [nth] */
} sustained_ctx;

/* Every thread starts its clock on entry: they run together, within the
 * pool's wake-up of each other. */
static void run_thread(void *vctx, int ith, int nth) {
  (void)nth;
  sustained_ctx *c = vctx;
  double *mine = c->rates + (long)ith * MAX_RUNS;
  const double start = rp_now();
  int n = 0;
  while (n < MAX_RUNS && (n == 0 || rp_now() - start < c->seconds))
    mine[n++] = rp_isa_probe_once(c->level);
  c->nruns[ith] = n;
}

rp_status rp_isa_probe_sustained(rp_isa level, rp_pool *pool, double seconds,
                                 rp_isa_probe_stats *per_thread) {
  if (level <= RP_ISA_SCALAR || level >= RP_ISA_LEVELS)
    return rp_err(RP_EINVAL, "no SIMD FMA probe at level %s (the instruction-set ceiling is %s)",
                  rp_isa_name(level), rp_isa_name(rp_isa_active()));
  if (!rp_isa_allows(level))
    return rp_err(RP_EINVAL, "no FMA probe at level %s: %s", rp_isa_name(level),
                  rp_isa_why_not(level));
  if (!(seconds > 0.0))
    return rp_err(RP_EINVAL, "probe seconds %g: must be positive", seconds);
  const int nth = rp_pool_size(pool);
  sustained_ctx c = {.level = level, .seconds = seconds,
                     .rates = rp_alloc((size_t)nth * MAX_RUNS * sizeof(double), RP_MEM_WORKSPACE),
                     .nruns = rp_alloc((size_t)nth * sizeof(int), RP_MEM_WORKSPACE)};
  if (!c.rates || !c.nruns) {
    rp_free(c.rates);
    rp_free(c.nruns);
    return rp_err(RP_ENOMEM, "FMA probe: %d threads' run records", nth);
  }
  rp_pool_run(pool, run_thread, &c);
  for (int t = 0; t < nth; t++)
    rp_isa_probe_summarize(c.rates + (long)t * MAX_RUNS, c.nruns[t], &per_thread[t]);
  rp_free(c.rates);
  rp_free(c.nruns);
  return RP_OK;
}

double rp_isa_probe_together(rp_isa level, rp_pool *pool, double seconds) {
  const int n = rp_pool_size(pool);
  rp_isa_probe_stats *st = calloc((size_t)n, sizeof *st);
  double sum = 0;
  if (st && rp_isa_probe_sustained(level, pool, seconds, st) == RP_OK)
    for (int i = 0; i < n; i++) sum += st[i].median;
  free(st);
  return sum;
}
