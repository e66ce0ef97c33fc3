/* ringpipe bench gemm | attention | train | fma */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_step_profile.h"
#include "ringpipe/rp_train.h"
#include "ringpipe/rp_util.h"

/* The per-step rates beside the run's mean: on a shared machine one slow
 * step (another tenant, a page-cache flush) moves the mean, and the median
 * with the spread says whether two runs really differ. */
static double print_step_spread(double *rates, int n) {
  if (n < 2) return -1.0;
  rp_sort_doubles(rates, n);
  double median = n % 2 ? rates[n / 2] : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
  printf("  per step: median %.0f tokens/s, slowest %.0f, fastest %.0f\n", median, rates[0],
         rates[n - 1]);
  return median;
}

/* fp32 runs only: a bf16 step's products run on the bf16 dot, whose rate the
 * fp32 probe does not bound. One rank alone also runs the probe on all its
 * threads at once after the steps (1 s): with several ranks the others'
 * threads would share the cores, or not, as they finish. */
static void print_fma_fraction(const rp_trainer *t, double flops_per_token, double mean_tok_s,
                               double median_tok_s) {
  if (t->bf16.n) return;
  const char *level;
  const double probe = rp_step_fma_peak(t->pool, &level);
  const double mean = flops_per_token * mean_tok_s,
               median = median_tok_s > 0 ? flops_per_token * median_tok_s : -1.0;
  if (!rp_print_fma_fraction(stdout, mean, median, probe, level, rp_pool_size(t->pool))) return;
  if (t->grid.world_size == 1) {
    const double seconds = 1.0;
    const double together = rp_isa_probe_together(rp_isa_fp32_fma_level(), t->pool, seconds);
    rp_print_fma_fraction_together(stdout, mean, median, together * 1e9, probe, seconds);
  }
}

/* A short real training run: tokens/s, MFU and peak memory by category. */
static int bench_train(int argc, char **argv) {
  rp_train_opts o;
  int rc = rp_cli_parse("bench train", "ringpipe bench train [train options]",
                        "Train for a few steps and report throughput (the mean, and the median,\n"
                        "slowest and fastest step; the first two of more than two are warm-up), MFU, the\n"
                        "model's FLOP/s over the FMA probe (fp32; one rank alone also over the probe\n"
                        "run on all its threads at once for 1 s after the steps), memory and, where\n"
                        "/proc/stat has it, the CPU time the hypervisor gave other guests over the\n"
                        "measured steps.",
                        rp_train_opt_table, rp_train_opt_count, &o, argc, argv);
  if (rc >= 0) return rc;
  rp_trainer t;
  rp_status s = rp_trainer_init(&t, &o);
  if (s != RP_OK) {
    rc = rp_cli_fail("bench", s);
    rp_trainer_free(&t);
    return rc;
  }
  int warm = o.steps > 2 ? 2 : 0;
  double tok = 0, secs = 0;
  double *rates = calloc((size_t)o.steps, sizeof *rates); /* per measured step */
  int nrates = 0;
  double steal0 = -1.0, wall0 = 0.0;
  for (int i = 0; i < o.steps && s == RP_OK; i++) {
    rp_step_stats st;
    if (o.profile && i == warm) rp_prof_enable(1); /* --profile times the measured steps */
    if (i == warm) steal0 = rp_steal_seconds(), wall0 = rp_now();
    s = rp_trainer_step(&t, &st);
    if (i < warm) continue;
    tok += st.tokens_per_s * st.seconds;
    secs += st.seconds;
    if (rates) rates[nrates++] = st.tokens_per_s;
  }
  const double stolen = steal0 >= 0 ? rp_steal_seconds() - steal0 : -1.0,
               steps_wall = rp_now() - wall0;
  if (s != RP_OK) {
    rc = rp_cli_fail("bench", s);
    free(rates);
    rp_trainer_free(&t);
    return rc;
  }
  if (t.grid.world_rank == 0) {
    char mem[512];
    rp_mem_report(mem, sizeof mem);
    printf("bench train: L=%d C=%d NH=%d T=%d B=%d, %d threads, attention %s, gemm %s\n",
           o.layers, o.channels, o.heads, o.seq, o.batch, rp_pool_size(t.pool), t.exec.attn->name,
           rp_gemm_describe(t.pool));
    char isa[512];
    rp_isa_kernel_summary(isa, sizeof isa);
    printf("  instruction sets: %s\n", isa);
    rp_trainer_print_bf16_benefit(&t);
    const char *wcache = rp_trainer_weight_cache_state(&t);
    if (wcache) printf("  weight cache: %s\n", wcache);
    printf("  steps measured: %d (after %d warm-up)\n", o.steps - warm, warm);
    printf("  tokens/s: %.0f\n", tok / secs);
    const double median = print_step_spread(rates, nrates);
    /* on a shared VM the steps it fell in read slow, whatever the code did */
    if (nrates > 0) rp_print_steal(stdout, "the measured steps", stolen, steps_wall);
    /* tokens count every data-parallel replica's; the peaks are one rank's:
     * the rates below are per rank, as the step's MFU is (step.c) */
    const double flops_per_token = rp_gpt_flops_per_token(&t.cfg, o.seq) / t.grid.world_size;
    double rate = flops_per_token * tok / secs;
    char mfu[16];
    if (t.gemm_peak > 0 && t.bf16.n && t.gemm_peak_bf16 < t.gemm_peak)
      printf("  bf16 GEMM peak on the model's shapes: %.1f GFLOP/s, below the sgemm's %.1f "
             "(the MFU denominator)\n", t.gemm_peak_bf16 / 1e9, t.gemm_peak / 1e9);
    else if (t.gemm_peak > 0)
      printf("  %s peak on the model's shapes: %.1f GFLOP/s\n",
             t.bf16.n ? "bf16 GEMM" : "sgemm", t.gemm_peak / 1e9);
    else
      printf("  sgemm peak on the model's shapes: not measured (--measure-peak=0)\n");
    printf("  model FLOP/s%s: %.1f GFLOP/s  ->  MFU %s\n",
           t.grid.world_size > 1 ? " (per rank)" : "", rate / 1e9,
           rp_format_mfu(mfu, sizeof mfu, t.gemm_peak > 0 ? rate / t.gemm_peak : -1));
    rp_print_mfu_above_note(stdout, rate, t.gemm_peak);
    print_fma_fraction(&t, flops_per_token, tok / secs, median);
    printf("  peak memory: %s\n", mem);
  }
  if (o.profile && t.grid.world_rank == 0) rp_trainer_print_profile(&t);
  free(rates);
  rp_trainer_free(&t);
  return 0;
}

int rp_cmd_bench(int argc, char **argv) {
  const char *what = argc > 0 ? argv[0] : "";
  if (strcmp(what, "gemm") == 0) return rp_bench_gemm(argc - 1, argv + 1);
  if (strcmp(what, "attention") == 0) {
    for (int i = 1; i < argc; i++)
      if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
        printf("usage: ringpipe bench attention [--tmin 256] [--tmax 8192] [--causal both|yes|no]\n"
               "         [--threads N] [--batch 1] [--heads 6] [--head-size 64] [--bq N] [--bk N]\n"
               "         [--bf16 0] [--naive-max-gib 2] [--min-seconds S] [--cold 0]\n"
               "         [--isa LEVEL]\n"
               "Flash vs naive attention for T from tmin to tmax (doubling): forward and\n"
               "forward+backward time ratios, attention FLOP/s as a fraction of the sgemm\n"
               "peak measured in the same run, of the flash micro-kernel's GEMM peak and of\n"
               "the FMA peak (the register-only probe x threads; after the table also over\n"
               "that probe run on all threads at once for 1 s), and peak attention memory\n"
               "of each.\n"
               "--isa (or RINGPIPE_ISA) caps the flash kernel: scalar|avx2|avx512|avx512bf16.\n"
               "--bf16 1: the flash products in bf16 (vdpbf16ps), as a --precision bf16\n"
               "training run uses them, where AVX512-BF16 is allowed; else fp32.\n"
               "--cold 1: a 64 MiB read before every timed call, so that each finds its\n"
               "operands out of the caches as in a training step (default 0: warm repeats).\n");
        return 0;
      }
    return rp_bench_attention(argc, argv);  /* it skips argv[0], "attention" */
  }
  if (strcmp(what, "train") == 0) return bench_train(argc - 1, argv + 1);
  if (strcmp(what, "fma") == 0) return rp_bench_fma(argc - 1, argv + 1);
  if (rp_mpi_world_rank() == 0)
    fprintf(stderr, "usage: ringpipe bench gemm|attention|train|fma [options]\n"
                    "  gemm       GEMM FLOP/s on the model's shapes, every GEMM mode\n"
                    "  attention  flash vs naive attention: time, FLOP/s, memory\n"
                    "  train      a short training run: tokens/s, MFU, memory\n"
                    "  fma        the FMA peak's probe on all threads at once, for seconds\n");
  return strcmp(what, "--help") == 0 ? 0 : 2;
}
