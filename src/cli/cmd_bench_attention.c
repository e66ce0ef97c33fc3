/* `ringpipe bench attention`: flash vs naive attention, measured in one run.
 *
 * For each T (doubling from --tmin to --tmax) and causal/non-causal it times the
 * forward and forward+backward of both attentions on the same inputs and pool,
 * and prints ratios: naive time / flash time, attention FLOP/s as a fraction of
 * the OpenBLAS sgemm peak measured at the start of the same process, and the
 * peak attention memory of each (bytes rp_alloc'd for saved state + workspace
 * above what both share: qkv, out, dout, dqkv). Naive is skipped where its
 * [B,NH,T,T] probabilities would exceed --naive-max-gib.
 *
 * FLOPs count the matmuls the algorithm executes per visible (query, key) pair
 * and head: forward 4*HS (QK^T, PV), backward 10*HS (recomputed QK^T, dV, dP,
 * dQ, dK), i.e. the FlashAttention convention bwd = 2.5 fwd. Causal counts
 * T(T+1)/2 pairs. Because OpenBLAS may run a generic kernel on a CPU it does not
 * recognise, the table also gives the fraction of the flash micro-kernel's own
 * GEMM peak (the same instruction set, all pool threads), and of the FMA peak:
 * the register-only multiply-add probe of the flash path's SIMD level
 * (rp_isa_peak_gflops) times the threads, the machine's ceiling. After the
 * table the same probe runs on all threads at once for 1 s, and the best and
 * lowest f+b fractions are given over that rate too: one busy core may clock
 * higher than all of them together.
 *
 * --cold 1 reads an eviction buffer (COLD_EVICT_BYTES) before every timed call,
 * untimed, so that each call finds its operands out of the caches as a
 * training step's attention finds the qkv rows the GEMM before it wrote: the
 * warm repeats otherwise measure the kernels on data the previous repeat left
 * in L2. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_util.h"

typedef struct {
  int threads, tmin, tmax, B, NH, HS, bq, bk, bf16, cold;
  int causal_mask; /* bit 0: non-causal, bit 1: causal */
  double naive_max_gib, min_seconds;
  rp_flash_config flash;   /* this run's flash settings (bq, bk; the rest automatic) */
} bench_opts;

static int usage(const char *bad) {
  fprintf(stderr,
          "ringpipe bench attention: unknown or bad option '%s'\n"
          "options: --threads N  --tmin T  --tmax T  --batch B  --heads NH  --head-size HS\n"
          "         --causal both|yes|no  --bq N  --bk N  --bf16 0|1  --naive-max-gib G\n"
          "         --min-seconds S  --cold 0|1\n",
          bad);
  return 2;
}

static int parse(bench_opts *o, int argc, char **argv) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  *o = (bench_opts){.threads = ncpu > 0 ? (int)ncpu : 1, .tmin = 256, .tmax = 8192, .B = 1,
                    .NH = 6, .HS = 64, .causal_mask = 3, .naive_max_gib = 2.0,
                    .min_seconds = 0.3};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "attention") == 0) continue;  /* when called as `bench attention` */
    if (!v) return usage(a);
    char *end = NULL;
    double x = strtod(v, &end);
    int num = end && *end == '\0';
    if (strcmp(a, "--causal") == 0) {
      o->causal_mask = strcmp(v, "both") == 0 ? 3 : strcmp(v, "yes") == 0 ? 2
                       : strcmp(v, "no") == 0 ? 1 : 0;
      if (!o->causal_mask) return usage(v);
    } else if (!num) {
      return usage(v);
    } else if (strcmp(a, "--threads") == 0) o->threads = (int)x;
    else if (strcmp(a, "--tmin") == 0) o->tmin = (int)x;
    else if (strcmp(a, "--tmax") == 0) o->tmax = (int)x;
    else if (strcmp(a, "--batch") == 0) o->B = (int)x;
    else if (strcmp(a, "--heads") == 0) o->NH = (int)x;
    else if (strcmp(a, "--head-size") == 0) o->HS = (int)x;
    else if (strcmp(a, "--bq") == 0) o->bq = (int)x;
    else if (strcmp(a, "--bk") == 0) o->bk = (int)x;
    else if (strcmp(a, "--bf16") == 0) o->bf16 = (int)x;
    else if (strcmp(a, "--cold") == 0) o->cold = (int)x;
    else if (strcmp(a, "--naive-max-gib") == 0) o->naive_max_gib = x;
    else if (strcmp(a, "--min-seconds") == 0) o->min_seconds = x;
    else return usage(a);
    i++;
  }
  if (o->threads < 1 || o->tmin < 1 || o->tmax < o->tmin || o->B < 1 || o->NH < 1 ||
      o->HS < 1 || o->HS > 256 || (o->cold != 0 && o->cold != 1)) {
    fprintf(stderr,
            "ringpipe bench attention: got --threads %d --tmin %d --tmax %d --batch %d --heads %d "
            "--head-size %d --cold %d; need threads, tmin, batch, heads >= 1, tmax >= tmin, "
            "1 <= head-size <= 256 and cold 0 or 1\n",
            o->threads, o->tmin, o->tmax, o->B, o->NH, o->HS, o->cold);
    return 2;
  }
  return 0;
}

/* sgemm peak of this process with `threads` OpenBLAS threads: best of a few
 * 1024^3 products (large enough for full speed, short enough to repeat). */
static double sgemm_peak(int threads) {
  const int n = 1024;
  float *a = rp_alloc(sizeof(float) * (size_t)n * n, RP_MEM_WORKSPACE);
  float *b = rp_alloc(sizeof(float) * (size_t)n * n, RP_MEM_WORKSPACE);
  float *c = rp_alloc(sizeof(float) * (size_t)n * n, RP_MEM_WORKSPACE);
  if (!a || !b || !c) return 0.0;
  rp_rng r;
  rp_rng_seed(&r, 3);
  for (long i = 0; i < (long)n * n; i++) a[i] = rp_rng_uniform(&r), b[i] = rp_rng_uniform(&r);
  rp_blas_set_threads(threads);
  double best = 1e30;
  for (int rep = 0; rep < 4; rep++) {
    double t0 = rp_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double dt = rp_now() - t0;
    if (rep > 0 && dt < best) best = dt;  /* rep 0 warms up */
  }
  rp_free(a), rp_free(b), rp_free(c);
  return 2.0 * n * (double)n * n / best;
}


/* --cold's eviction read: well past any L2 and the L3 share a core sees on
 * the machines here, so that what a call reads comes from memory */
#define COLD_EVICT_BYTES (64L << 20)

typedef struct {
  int B, T, C, NH, causal;
  float *qkv, *dout, *out, *dqkv, *saved;
  rp_pool *pool;
  const rp_flash_config *flash;
  const float *evict; /* --cold: COLD_EVICT_BYTES read before every timed call; NULL: warm */
} run_ctx;

/* One float per cache line of the eviction buffer, summed so that no load is
 * optimised away. */
static void evict_caches(const run_ctx *c) {
  if (!c->evict) return;
  volatile float sink = 0.0f;
  float s = 0.0f;
  for (long i = 0; i < COLD_EVICT_BYTES / (long)sizeof(float); i += 16) s += c->evict[i];
  sink = s;
  (void)sink;
}

static void flash_fwd(run_ctx *c) {
  if (rp_flash_forward(c->out, c->saved, c->qkv, c->B, c->T, c->C, c->NH, c->causal, c->flash,
                       c->pool))
    rp_fatal("bench: flash forward failed: %s", rp_errmsg());
}
static void flash_bwd(run_ctx *c) {
  if (rp_flash_backward(c->dqkv, c->dout, c->qkv, c->out, c->saved, c->B, c->T, c->C, c->NH,
                        c->causal, c->flash, c->pool))
    rp_fatal("bench: flash backward failed: %s", rp_errmsg());
}
static void naive_fwd(run_ctx *c) {
  rp_attention_ref_forward(c->out, c->saved, NULL, c->qkv, c->B, c->T, c->C, c->NH, c->causal,
                           c->pool);
}
static void naive_bwd(run_ctx *c) {
  rp_attention_ref_backward(c->dqkv, c->dout, c->qkv, c->saved, c->B, c->T, c->C, c->NH, c->pool);
}

typedef void (*step_fn)(run_ctx *);

/* Best time of fwd alone and of fwd+bwd, repeated until min_seconds is spent
 * (the cold runs' eviction reads count towards it, not towards the times); a
 * run slower than 20 x min_seconds (naive at large T) is measured once. */
static void time_pair(run_ctx *c, step_fn fwd, step_fn bwd, double min_s, double *tf, double *tfb) {
  *tf = *tfb = 1e30;
  double spent = 0.0;
  for (int rep = 0; rep < 2 || spent < min_s; rep++) {
    const double start = rp_now();
    evict_caches(c);
    double t0 = rp_now();
    fwd(c);
    const double f = rp_now() - t0;
    evict_caches(c);
    t0 = rp_now();
    bwd(c);
    const double fb = f + (rp_now() - t0);
    if (f < *tf) *tf = f;
    if (fb < *tfb) *tfb = fb;
    spent += rp_now() - start;
    if (spent > 20 * min_s) break;
  }
}

static size_t mem_current_total(void) {
  size_t s = 0;
  for (int k = 0; k < RP_MEM_NCAT; k++) s += rp_mem_current((rp_mem_cat)k);
  return s;
}

typedef struct {
  int T, causal;
  double ft, ftb, nt, ntb, ffwd, ffb, mem_f, mem_n;
} bench_row;

/* The machine may be shared: peaks are re-measured before every T and the best
 * seen is used for all rows (a lower peak would flatter the fractions). */
static void update_peaks(const rp_flash_config *flash, rp_pool *pool, int threads, double *peak,
                         double *kpeak) {
  double p = sgemm_peak(threads);
  rp_blas_set_threads(1);
  double k = rp_flash_kernel_peak(flash, pool);
  if (p > *peak) *peak = p;
  if (k > *kpeak) *kpeak = k;
}

/* The FMA probe's level for the flash path's; scalar (no probe) for scalar. */
static rp_isa fma_level(const bench_opts *o) {
  rp_flash_isa fi = rp_flash_isa_active(&o->flash);
  return fi == RP_FLASH_ISA_AVX512 ? RP_ISA_AVX512
         : fi == RP_FLASH_ISA_AVX2 ? RP_ISA_AVX2 : RP_ISA_SCALAR;
}

/* FLOP/s of the FMA probe at the flash path's level, all threads; 0 for scalar. */
static double fma_peak(const bench_opts *o) {
  return rp_isa_peak_gflops(fma_level(o)) * 1e9 * o->threads;
}

/* The same probe on every pool thread at once for 1 s (`bench fma`'s
 * figure): the sum of their medians in FLOP/s, 0 where it cannot run (no
 * probe at the scalar level). Where
 * one busy core clocks higher than all of them (the Emerald Rapids VM), the
 * fma column's denominator is more than the threads reach together. */
#define TOGETHER_SECONDS 1.0
static double fma_together(const bench_opts *o, rp_pool *pool) {
  return rp_isa_probe_together(fma_level(o), pool, TOGETHER_SECONDS) * 1e9;
}

static void print_table(const bench_opts *o, const bench_row *rows, int nrows, double peak,
                        double kpeak, double together, double max_diff) {
  int bq, bk;
  const double fpeak = fma_peak(o);
  rp_flash_block_sizes(&o->flash, o->HS, o->tmax, o->tmax, &bq, &bk);
  printf("attention benchmark: B=%d NH=%d HS=%d threads=%d isa=%s blocks %dx%d (L2 %ld KiB)\n",
         o->B, o->NH, o->HS, o->threads, rp_flash_isa_name(rp_flash_isa_active(&o->flash)), bq,
         bk,
         rp_flash_l2_bytes(&o->flash) / 1024);
  char held[96] = ""; /* RINGPIPE_ISA cannot hold OpenBLAS: say so rather than compare silently */
  if (rp_blas_above_ceiling())
    snprintf(held, sizeof held, " (its kernels run %s, above the ceiling: the sgemm fractions "
             "compare with them)", rp_isa_name(rp_blas_core_isa()));
  printf("sgemm peak (OpenBLAS core %s, %d threads, 1024^3, best seen): %.1f GFLOP/s%s\n",
         openblas_get_corename(), o->threads, peak / 1e9, held);
  printf("flash micro-kernel GEMM peak (%s, %d threads, best seen): %.1f GFLOP/s\n",
         rp_flash_isa_name(rp_flash_isa_active(&o->flash)), o->threads, kpeak / 1e9);
  printf("FMA peak (register-only probe at that level x %d threads): %.1f GFLOP/s\n",
         o->threads, fpeak / 1e9);
  printf("caches: %s\n", o->cold ? "cold (--cold 1: a 64 MiB read before every timed call, "
                                    "as a training step's attention finds its rows)"
                                  : "warm (each repeat finds what the one before left; "
                                    "--cold 1 evicts them)");
  if (o->bf16)
    printf("products: %s\n", rp_flash_bf16_active(&o->flash)
                                 ? "bf16 (vdpbf16ps; fractions stay against the fp32 peaks)"
                                 : "fp32 (--bf16 1 needs AVX512-BF16 under the ISA ceiling)");
  printf("spd = naive time / flash time; sgemm f / fb = flash FLOP/s (fwd / fwd+bwd) over the "
         "sgemm peak, naive fb likewise;\nkern fb = flash fwd+bwd FLOP/s over the micro-kernel "
         "peak, fma fb over the FMA peak;\nFLOPs: fwd 4*HS, bwd 10*HS per visible (query, key) pair "
         "and head;\nmem = peak "
         "bytes rp_alloc'd by the attention (saved state + workspace) during fwd+bwd\n\n");
  printf("%6s %6s | %9s %9s | %9s %9s | %6s %6s | %7s %7s %7s | %6s | %6s | %9s %9s\n",
         "T", "causal", "flash fwd", "flash f+b", "naive fwd", "naive f+b", "spd f", "spd fb",
         "sgemm f", "sgemm fb", "naive fb", "kern fb", "fma fb", "mem flash", "mem naive");
  printf("%6s %6s | %9s %9s | %9s %9s | %6s %6s | %7s %7s %7s | %6s | %6s | %9s %9s\n", "",
         "", "ms", "ms", "ms", "ms", "x", "x", "", "", "", "", "", "MiB", "MiB");
  double spd1024 = -1, spd4096 = -1, best_frac = 0, best_kfrac = 0, best_ffrac = 0, mem_prev = 0;
  double low_ffrac = -1; /* the FMA target holds at every T, so its lowest row too */
  const bench_row *low_row = NULL;
  int mem_linear = 1;
  for (int i = 0; i < nrows; i++) {
    const bench_row *r = &rows[i];
    double ff = r->ffwd / r->ft / peak, fb = r->ffb / r->ftb / peak, kf = r->ffb / r->ftb / kpeak;
    double fm = fpeak > 0 ? r->ffb / r->ftb / fpeak : 0.0;
    best_frac = fmax(best_frac, fb);
    best_kfrac = fmax(best_kfrac, kf);
    best_ffrac = fmax(best_ffrac, fm);
    if (low_ffrac < 0 || fm < low_ffrac) {
      low_ffrac = fm;
      low_row = r;
    }
    if (r->nt > 0) {
      printf("%6d %6s | %9.2f %9.2f | %9.1f %9.1f | %6.2f %6.2f | %7.3f %7.3f %7.3f | %6.3f | "
             "%6.3f | %9.2f %9.1f\n",
             r->T, r->causal ? "yes" : "no", 1e3 * r->ft, 1e3 * r->ftb, 1e3 * r->nt,
             1e3 * r->ntb, r->nt / r->ft, r->ntb / r->ftb, ff, fb, r->ffb / r->ntb / peak, kf,
             fm, r->mem_f, r->mem_n);
      if (r->causal && r->T == 1024) spd1024 = r->ntb / r->ftb;
      if (r->causal && r->T == 4096) spd4096 = r->ntb / r->ftb;
    } else {
      printf("%6d %6s | %9.2f %9.2f | %9s %9s | %6s %6s | %7.3f %7.3f %7s | %6.3f | %6.3f | "
             "%9.2f %9s\n",
             r->T, r->causal ? "yes" : "no", 1e3 * r->ft, 1e3 * r->ftb, "-", "-", "-", "-", ff,
             fb, "-", kf, fm, r->mem_f, "skipped");
    }
    /* memory linear in T: doubling T may at most double it (plus slack) */
    if (r->causal) {
      if (mem_prev > 0 && r->mem_f > 2.2 * mem_prev) mem_linear = 0;
      mem_prev = r->mem_f;
    }
  }
  char s1[32] = "n/a", s2[32] = "n/a";
  if (spd1024 > 0) snprintf(s1, sizeof s1, "%.2fx", spd1024);
  if (spd4096 > 0) snprintf(s2, sizeof s2, "%.2fx", spd4096);
  printf("\nnaive skipped where B*NH*T^2*4 bytes > %.1f GiB (--naive-max-gib)\n", o->naive_max_gib);
  printf("max |out flash - out naive| over the runs: %.3g\n", max_diff);
  char low[64] = "n/a";
  if (low_row)
    snprintf(low, sizeof low, "%.3f at T=%d%s", low_ffrac, low_row->T,
             low_row->causal ? " causal" : "");
  printf("targets: f+b speedup causal T=1024 %s (>= 2), T=4096 %s (>= 4); best f+b fraction "
         "of sgemm peak %.3f (>= 0.4), of micro-kernel peak %.3f, of FMA peak %.3f (lowest "
         "%s; >= 0.7 at every T); flash memory linear in T: %s\n",
         s1, s2, best_frac, best_kfrac, best_ffrac, low, mem_linear ? "yes" : "no");
  if (together > 0 && fpeak > 0)
    printf("FMA probe on all %d threads at once (%.0f s after the runs, the sum of their "
           "medians): %.1f GFLOP/s, %.3f of the FMA peak; f+b over it: best %.3f, lowest %.3f\n",
           o->threads, TOGETHER_SECONDS, together / 1e9, together / fpeak,
           best_ffrac * fpeak / together, low_ffrac * fpeak / together);
}

static void bench_one(const bench_opts *o, rp_pool *pool, const float *evict, int T, int causal,
                      bench_row *row, double *max_diff) {
  const int B = o->B, NH = o->NH, C = NH * o->HS;
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C;
  run_ctx c = {B, T, C, NH, causal, NULL, NULL, NULL, NULL, NULL, pool, &o->flash, evict};
  c.qkv = rp_alloc(sizeof(float) * (size_t)nqkv, RP_MEM_ACTS);
  c.dqkv = rp_alloc(sizeof(float) * (size_t)nqkv, RP_MEM_ACTS);
  c.dout = rp_alloc(sizeof(float) * (size_t)nout, RP_MEM_ACTS);
  c.out = rp_alloc(sizeof(float) * (size_t)nout, RP_MEM_ACTS);
  float *out_flash = rp_alloc(sizeof(float) * (size_t)nout, RP_MEM_WORKSPACE);
  if (!c.qkv || !c.dqkv || !c.dout || !c.out || !out_flash)
    rp_fatal("bench: out of memory at T=%d", T);
  rp_rng r;
  rp_rng_seed(&r, (uint64_t)T);
  for (long i = 0; i < nqkv; i++) c.qkv[i] = 2.0f * rp_rng_uniform(&r) - 1.0f;
  for (long i = 0; i < nout; i++) c.dout[i] = 2.0f * rp_rng_uniform(&r) - 1.0f;
  const double pairs = causal ? 0.5 * T * (T + 1.0) : (double)T * T;
  *row = (bench_row){.T = T, .causal = causal, .nt = -1, .ntb = -1, .mem_n = -1,
                     .ffwd = 4.0 * o->HS * pairs * B * NH, .ffb = 14.0 * o->HS * pairs * B * NH};

  /* flash */
  rp_mem_reset_peaks();
  size_t base = mem_current_total();
  c.saved = rp_alloc(sizeof(float) * (size_t)B * NH * T, RP_MEM_ACTS);
  time_pair(&c, flash_fwd, flash_bwd, o->min_seconds, &row->ft, &row->ftb);
  row->mem_f = (double)(rp_mem_peak_total() - base) / 1048576.0;
  rp_free(c.saved);
  memcpy(out_flash, c.out, sizeof(float) * (size_t)nout);

  /* naive, if its probabilities fit */
  double natt = (double)B * NH * T * T * sizeof(float);
  if (natt <= o->naive_max_gib * 1073741824.0) {
    rp_mem_reset_peaks();
    base = mem_current_total();
    c.saved = rp_alloc((size_t)natt, RP_MEM_ACTS);
    if (c.saved) {
      time_pair(&c, naive_fwd, naive_bwd, o->min_seconds, &row->nt, &row->ntb);
      row->mem_n = (double)(rp_mem_peak_total() - base) / 1048576.0;
      rp_free(c.saved);
      for (long i = 0; i < nout; i++)
        *max_diff = fmax(*max_diff, fabs((double)c.out[i] - out_flash[i]));
    }
  }
  rp_free(c.qkv), rp_free(c.dqkv), rp_free(c.dout), rp_free(c.out), rp_free(out_flash);
}

int rp_bench_attention(int argc, char **argv) {
  bench_opts o;
  int rc = parse(&o, argc, argv);
  if (rc) return rc;
  o.flash = (rp_flash_config){.bq = o.bq, .bk = o.bk, .bf16 = o.bf16};
  if (rp_flash_config_check(&o.flash) != RP_OK) {
    fprintf(stderr, "ringpipe bench attention: %s\n", rp_errmsg());
    return 2;
  }
  rp_pool *pool = NULL;
  if (rp_pool_create(&pool, o.threads, 1) != RP_OK) {
    fprintf(stderr, "ringpipe bench attention: %s\n", rp_errmsg());
    return 2;
  }
  float *evict = NULL;
  if (o.cold) {
    evict = rp_alloc((size_t)COLD_EVICT_BYTES, RP_MEM_WORKSPACE);
    if (!evict) rp_fatal("bench attention: out of memory for --cold's %ld MiB eviction buffer",
                         COLD_EVICT_BYTES >> 20);
    memset(evict, 0, (size_t)COLD_EVICT_BYTES); /* its pages exist before any timing */
  }
  bench_row rows[64];
  int nrows = 0;
  double peak = 0, kpeak = 0, max_diff = 0;
  for (int T = o.tmin; T <= o.tmax && nrows < 62; T *= 2) {
    update_peaks(&o.flash, pool, o.threads, &peak, &kpeak);
    for (int causal = 1; causal >= 0; causal--) {
      if (!((o.causal_mask >> causal) & 1)) continue;
      bench_one(&o, pool, evict, T, causal, &rows[nrows], &max_diff);
      fprintf(stderr, "  T=%d causal=%d: flash f+b %.1f ms, naive f+b %.1f ms\n", T, causal,
              1e3 * rows[nrows].ftb, 1e3 * rows[nrows].ntb);
      nrows++;
    }
  }
  update_peaks(&o.flash, pool, o.threads, &peak, &kpeak);
  print_table(&o, rows, nrows, peak, kpeak, fma_together(&o, pool), max_diff);
  rp_free(evict);
  rp_pool_destroy(pool);
  return 0;
}
