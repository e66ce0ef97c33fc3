/* bench_flash_cpu: flash attention forward and backward on ONE thread, timed by
 * the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), best of the
 * repetitions.
 * On a machine shared with other jobs, wall time measures the neighbours as
 * much as the kernel; CPU time only counts while this thread runs, so two
 * builds compared alternately with this tool give steady ratios (about 5 %
 * spread on the shared 2-core test box, against 2x for wall-clock runs).
 * FLOPs as in `ringpipe bench attention` (fwd 4*HS, bwd 10*HS per visible pair
 * and head); the FMA fraction is over the register-only FMA probe of the flash
 * path's level (rp_isa_peak_gflops), which can itself be low under load.
 *
 * usage: bench_flash_cpu T causal(0|1) [reps 5] [bq 0] [bk 0] [heads 6] [head-size 64]
 * RINGPIPE_ISA=avx2|scalar lowers the instruction-set ceiling as everywhere. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_util.h"

static double cpu_seconds(void) {
  struct timespec t;
  /* the thread's, not the process's: OpenBLAS's server threads spin on
   * sched_yield for a while after the library loads, and the process clock
   * counted that spinning (a third of the samples in a run at T = 256) */
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int arg(int argc, char **argv, int i, int dflt) { return argc > i ? atoi(argv[i]) : dflt; }

int main(int argc, char **argv) {
  const int T = arg(argc, argv, 1, 0), causal = arg(argc, argv, 2, 1), reps = arg(argc, argv, 3, 5);
  rp_flash_config cfg = {.bq = arg(argc, argv, 4, 0), .bk = arg(argc, argv, 5, 0)};
  const int B = 1, NH = arg(argc, argv, 6, 6), HS = arg(argc, argv, 7, 64), C = NH * HS;
  const char *isa = getenv("RINGPIPE_ISA");
  rp_isa lvl;
  if (T < 1 || reps < 1 || NH < 1 || HS < 1 || HS > 256 || rp_flash_config_check(&cfg) != RP_OK ||
      (isa && (rp_isa_parse(isa, "RINGPIPE_ISA", &lvl) != RP_OK || rp_isa_set(lvl) != RP_OK))) {
    const char *why = rp_errmsg();
    fprintf(stderr, "usage: bench_flash_cpu T causal(0|1) [reps] [bq] [bk] [heads] [head-size]: "
                    "%s\n", why && *why ? why : "need T, reps, heads >= 1 and 1 <= head-size <= 256");
    return 2;
  }
  const long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C;
  /* rp_alloc, as training and `ringpipe bench attention` allocate: huge pages
   * from 2 MiB. With malloc's 4 KiB pages every row of the model's qkv layout
   * (3C floats apart) was a page of its own, a TLB cost no training run pays
   * (one thread, alternating pairs: f+b 0.98-1.01 of the malloc build's time at
   * T = 1024 causal, 0.94-0.99 at T = 2048 non-causal). */
  float *qkv = rp_alloc(sizeof(float) * (size_t)nqkv, RP_MEM_ACTS);
  float *dqkv = rp_alloc(sizeof(float) * (size_t)nqkv, RP_MEM_ACTS); /* zeroed */
  float *out = rp_alloc(sizeof(float) * (size_t)nout, RP_MEM_ACTS);
  float *dout = rp_alloc(sizeof(float) * (size_t)nout, RP_MEM_ACTS);
  float *lse = rp_alloc(sizeof(float) * (size_t)(B * NH * T), RP_MEM_ACTS);
  rp_pool *pool = NULL;
  if (!qkv || !dqkv || !out || !dout || !lse || rp_pool_create(&pool, 1, 0) != RP_OK) return 1;
  rp_rng r;
  rp_rng_seed(&r, (uint64_t)T);
  for (long i = 0; i < nqkv; i++) qkv[i] = 2.0f * rp_rng_uniform(&r) - 1.0f;
  for (long i = 0; i < nout; i++) dout[i] = 2.0f * rp_rng_uniform(&r) - 1.0f;
  double bf = 1e30, bb = 1e30;
  for (int i = 0; i < reps; i++) {
    double t0 = cpu_seconds();
    if (rp_flash_forward(out, lse, qkv, B, T, C, NH, causal, &cfg, pool) != RP_OK) return 1;
    double t1 = cpu_seconds();
    if (rp_flash_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, causal, &cfg, pool) != RP_OK)
      return 1;
    double t2 = cpu_seconds();
    if (t1 - t0 < bf) bf = t1 - t0;
    if (t2 - t1 < bb) bb = t2 - t1;
  }
  rp_flash_isa fi = rp_flash_isa_active(&cfg);
  rp_isa pl = fi == RP_FLASH_ISA_AVX512 ? RP_ISA_AVX512
              : fi == RP_FLASH_ISA_AVX2 ? RP_ISA_AVX2 : RP_ISA_SCALAR;
  const double peak = rp_isa_peak_gflops(pl) * 1e9;
  const double pairs = causal ? 0.5 * T * (T + 1.0) : (double)T * T;
  const double ff = 4.0 * HS * pairs * B * NH, fb = 10.0 * HS * pairs * B * NH;
  printf("T=%d causal=%d NH=%d HS=%d isa=%s FMA peak %.1f GFLOP/s: fwd %.2f ms, bwd %.2f ms, "
         "f+b %.2f ms = %.1f GFLOP/s = %.3f of the FMA peak\n",
         T, causal, NH, HS, rp_flash_isa_name(fi), peak / 1e9, bf * 1e3, bb * 1e3, (bf + bb) * 1e3,
         (ff + fb) / (bf + bb) / 1e9, peak > 0 ? (ff + fb) / (bf + bb) / peak : 0.0);
  rp_pool_destroy(pool);
  rp_free(qkv), rp_free(dqkv), rp_free(out), rp_free(dout), rp_free(lse);
  return 0;
}
