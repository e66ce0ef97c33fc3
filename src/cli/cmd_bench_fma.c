/* ringpipe bench fma: the FMA probe that every "of the FMA peak" figure
 * divides by, run on all the threads at once for seconds and set beside the
 * start-up probe (one thread's best of 40 ms, times the threads); then the
 * GEMM check, one model shape's GEMM for as long, set beside the probe. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_train.h"

typedef struct {
  int threads, pin, check, gemm, rows, in, out;
  float seconds;
} fma_opts;

#define O(f) offsetof(fma_opts, f)
static const rp_opt fma_table[] = {
    {"threads", RP_OPT_INT, O(threads), "0", 0, 1024, NULL,
     "threads running the probe at once (0: as training takes, all cores)"},
    {"seconds", RP_OPT_FLOAT, O(seconds), "3", 0.01, 60, NULL,
     "how long every thread runs the probe, back to back"},
    {"pin", RP_OPT_BOOL, O(pin), "1", 0, 0, NULL, "pin each thread to a core, as training does"},
    {"gemm-check", RP_OPT_BOOL, O(check), "1", 0, 0, NULL,
     "after the probe, the GEMM check: one matmul shape's forward + backward on all the "
     "threads, back to back for --seconds"},
    {"gemm", RP_OPT_ENUM, O(gemm), "auto", 0, 0, "auto|blas|split|own",
     "the GEMM check's GEMM, as training's --gemm chooses it"},
    {"gemm-rows", RP_OPT_INT, O(rows), "1024", 1, 1 << 20, NULL,
     "the GEMM check's rows N (the default model's B x T)"},
    {"gemm-in", RP_OPT_INT, O(in), "384", 1, 65536, NULL,
     "the GEMM check's input features IC (the default model's width)"},
    {"gemm-out", RP_OPT_INT, O(out), "1536", 1, 262144, NULL,
     "the GEMM check's output features OC (the default model's MLP, 4 x its width)"},
};
#undef O

/* What the comparison means for the fractions a run prints. The bands are
 * wider than the spread of medians seen between quiet runs (a few %). */
static void print_verdict(double together, double peak) {
  const double r = together / peak;
  printf("  all threads at once, the sum of their medians: %.1f GFLOP/s, %.3f of the FMA peak\n",
         together, r);
  if (r < 0.9)
    printf("  the threads slow each other down (hyperthreads sharing a core's FMA units, a\n"
           "  power or clock limit, or a busy neighbour): fractions of the FMA peak read low\n"
           "  by about this much\n");
  else if (r > 1.1)
    printf("  the start-up probe read low (a busy moment as it ran): fractions of the FMA\n"
           "  peak read high by about this much\n");
  else
    printf("  within 10 %%: the FMA peak is what these threads reach together\n");
}

/* The GEMM check beside the probe: the register-only loop feels the cores'
 * clocks and FMA units, the GEMM also the caches and memory bandwidth that a
 * VM shares with its neighbours and that /proc/stat's steal does not count.
 * Between two runs, a ratio that falls while the probe's line holds is the
 * caches' and memory's doing. */
static void print_gemm_check(const fma_opts *o, const rp_isa_probe_stats *g, double together,
                             rp_pool *pool) {
  printf("GEMM check: %d x %d -> %d (rows x in -> out features), forward + backward, all %d "
         "thread%s, back to back for %.2f s\n  gemm %s\n", o->rows, o->in, o->out,
         rp_pool_size(pool), rp_pool_size(pool) == 1 ? "" : "s", o->seconds,
         rp_gemm_describe(pool));
  printf("      runs     best      p90   median      p10   (GFLOP/s)\n");
  /* a toy shape's rates are under 1 GFLOP/s: digits, not 0.0 */
  if (g->p10 >= 1.0)
    printf("  %8d %8.1f %8.1f %8.1f %8.1f\n", g->runs, g->best, g->p90, g->median, g->p10);
  else
    printf("  %8d %8.3g %8.3g %8.3g %8.3g\n", g->runs, g->best, g->p90, g->median, g->p10);
  if (g->runs >= RP_GEMM_CHECK_MAX_RUNS)
    printf("  (it stopped at %d repeats, before --seconds ran out)\n", RP_GEMM_CHECK_MAX_RUNS);
  printf("  the GEMM's median over the probe's sum of medians: %.3f (the probe runs from "
         "registers;\n  the GEMM also from the caches and memory: where this falls between "
         "two checks and\n  the probe's line holds, something else is using them)\n",
         together > 0 ? g->median / together : 0.0);
}

int rp_bench_fma(int argc, char **argv) {
  fma_opts o;
  int rc = rp_cli_parse(
      "bench fma",
      "ringpipe bench fma [--threads N] [--seconds S] [--isa LEVEL] [--no-gemm-check]\n"
      "                   [--gemm auto|blas|split|own] [--gemm-rows N] [--gemm-in IC] [--gemm-out OC]",
      "The FMA peak that every \"of the FMA peak\" figure divides by, checked: the\n"
      "start-up probe is one thread's best run of a register-only multiply-add loop over\n"
      "40 ms, times the threads; here every thread runs that loop at once, back to back\n"
      "for --seconds, and prints its runs' best, 90th, 50th and 10th percentile rate\n"
      "and the sum of the medians over that peak. The loop is the fp32 one a run's\n"
      "fractions use: zmm under an avx512 ceiling, else ymm (--isa avx2). Each run is\n"
      "timed in its thread's CPU time, as the start-up probe is: threads that share a\n"
      "core's units show, threads beyond the cores (taking turns) do not.\n"
      "Then (--gemm-check, on by default) the GEMM check: one matmul shape's forward and\n"
      "backward (the default model's MLP unless --gemm-rows/-in/-out say otherwise) on\n"
      "all the threads with training's GEMM, back to back for --seconds of wall\n"
      "clock, its repeats' rates and its median over the probe's sum of medians. The\n"
      "probe feels the cores' clocks and units; the GEMM also the caches and memory a\n"
      "shared machine's other tenants use, which /proc/stat's steal does not count.",
      fma_table, (int)(sizeof fma_table / sizeof fma_table[0]), &o, argc, argv);
  if (rc >= 0) return rc;
  const rp_isa level = rp_isa_fp32_fma_level();
  const int threads = o.threads > 0 ? o.threads : rp_default_threads();
  rp_pool *pool = NULL;
  rp_status s = rp_pool_create(&pool, threads, o.pin);
  if (s != RP_OK) return rp_cli_fail("bench fma", s);
  rp_isa_probe_stats *st = calloc((size_t)threads, sizeof *st);
  const double one = rp_isa_peak_gflops(level); /* measured once, before the threads run */
  if (!st)
    s = rp_err(RP_ENOMEM, "%d threads' results", threads);
  else if (level <= RP_ISA_SCALAR || one <= 0.0)
    s = rp_err(RP_EINVAL, "no SIMD FMA probe under the instruction-set ceiling %s "
               "(%s); the fractions of the FMA peak are not printed there either",
               rp_isa_name(rp_isa_active()), rp_isa_source());
  else
    s = rp_isa_probe_sustained(level, pool, o.seconds, st);
  rp_isa_probe_stats gemm = {0};
  if (s == RP_OK && o.check) s = rp_gemm_apply_choice(pool, (rp_gemm_choice)o.gemm);
  if (s == RP_OK && o.check)
    s = rp_gemm_sustained(o.rows, o.in, o.out, pool, o.seconds, &gemm);
  if (s != RP_OK) {
    free(st);
    rp_pool_destroy(pool);
    return rp_cli_fail("bench fma", s);
  }
  if (rp_mpi_world_rank() == 0) {
    const char *plural = threads == 1 ? "" : "s";
    printf("bench fma: the %s register-only FMA loop, %d thread%s at once for %.2f s\n",
           level == RP_ISA_AVX512 ? "zmm (avx512)" : "ymm (avx2)", threads, plural, o.seconds);
    printf("  start-up probe (one thread, best run of 40 ms): %.1f GFLOP/s a thread; the FMA "
           "peak: %.1f GFLOP/s for %d thread%s\n", one, one * threads, threads, plural);
    printf("  thread     runs     best      p90   median      p10   (GFLOP/s)\n");
    double together = 0;
    int capped = 0;
    for (int t = 0; t < threads; t++) {
      printf("  %6d %8d %8.1f %8.1f %8.1f %8.1f\n", t, st[t].runs, st[t].best, st[t].p90,
             st[t].median, st[t].p10);
      together += st[t].median;
      capped |= st[t].runs >= RP_ISA_PROBE_MAX_RUNS;
    }
    if (capped)
      printf("  (a thread stopped at %ld runs, before --seconds ran out)\n",
             (long)RP_ISA_PROBE_MAX_RUNS);
    print_verdict(together, one * threads);
    if (o.check) print_gemm_check(&o, &gemm, together, pool);
  }
  free(st);
  rp_pool_destroy(pool);
  return 0;
}
