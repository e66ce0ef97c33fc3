/* bench_bf16: bf16 GEMM (fp32 accumulation) against the fp32 GEMM, same process,
 * same threads, same shapes.
 *
 * Shapes: the GEMMs of GPT L=6, C=384, T=256, B=4 (N = B*T = 1024 rows): qkv
 * 384->1152, attproj 384->384, fc 384->1536, fcproj 1536->384, plus a square
 * 1024^3. For each: forward (2*N*IC*OC flops) and forward+backward (dinp, dweight,
 * dbias: 3 * 2*N*IC*OC flops), in GFLOP/s, for
 *   fp32       rp_matmul_forward/backward in the trainer's default gemm mode
 *              (auto: the own AVX-512 GEMM, else OpenBLAS split across the
 *              pool). Not OpenBLAS's own threads: they spin for ~0.1 s after
 *              each call, and with them the forward-only table showed the bf16
 *              kernels at half their 2-thread rate (the next variants ran
 *              beside the spinning threads)
 *   <kernel>   rp_matmul_bf16_* with each bf16 kernel this CPU runs, weights
 *              packed inside every call
 *   packed     the auto kernel with weights pre-packed (rp_bf16_wpack), as the
 *              trainer would run it
 * and the ratio best bf16 / fp32. Every variant runs once per round, in an order
 * that rotates per round, so load from other processes hits all alike; the best
 * round counts. The peak multiply-add rates of each SIMD level (register-only
 * loops: ymm FMA, zmm FMA, vdpbf16ps, tdpbf16ps) are printed first: they bound what each
 * kernel can reach. A level the CPU or RINGPIPE_ISA excludes is n/a, with why;
 * so are the kernels that need it.
 *
 * OpenBLAS picks its kernels by CPU; print OPENBLAS_CORETYPE so that the run
 * says which it was (this program never sets it).
 *
 * clock: wall (default) or cpu, the process's CPU time. On a shared, loaded
 * machine wall time counts the time other processes run; with one thread CPU time
 * does not, and gives steadier ratios. With more threads CPU time also counts
 * threads that spin while waiting (OpenBLAS's, the pool's), so use wall there.
 *
 * usage: bench_bf16 [threads=2] [rounds=7] [pin=0] [clock=wall|cpu] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"

typedef struct {
  const char *name;
  int N, IC, OC;
} shape;

enum { NSHAPES = 5, MAXV = 6 };
static const shape shapes[NSHAPES] = {{"qkv", 1024, 384, 1152},
                                      {"attproj", 1024, 384, 384},
                                      {"fc", 1024, 384, 1536},
                                      {"fcproj", 1024, 1536, 384},
                                      {"square", 1024, 1024, 1024}};

typedef struct {
  float *inp, *w, *b, *out, *dout, *dinp, *dw, *db;
  uint16_t *inp16, *w16, *dout16;
} bufs;

static void *take(size_t bytes) {
  void *p = rp_alloc(bytes, RP_MEM_WORKSPACE);
  if (!p) {
    fprintf(stderr, "bench_bf16: %s\n", rp_errmsg());
    exit(1);
  }
  return p;
}

static float *take_floats(long n, rp_rng *r) {
  float *p = take(sizeof(float) * (size_t)n);
  for (long i = 0; i < n; i++) p[i] = rp_rng_uniform(r) - 0.5f;
  return p;
}

static int g_cpu_clock = 0;

static double now(void) {
  if (!g_cpu_clock) return rp_now();
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef enum { V_SGEMM, V_KERNEL, V_PACKED } vkind;
typedef struct {
  const char *name;
  vkind kind;
  rp_bf16_kernel kernel;
} variant;

/* One forward (fwd_only) or forward+backward of variant v; returns seconds. */
static double run(const variant *v, const shape *s, bufs *m, rp_bf16_wpack *wp,
                  rp_pool *pool, int fwd_only) {
  const int N = s->N, IC = s->IC, OC = s->OC;
  double t0 = now();
  if (v->kind == V_SGEMM) {
    rp_matmul_forward(m->out, m->inp, m->w, m->b, N, IC, OC, pool);
    if (!fwd_only)
      rp_matmul_backward(m->dinp, m->dw, m->db, m->dout, m->inp, m->w, N, IC, OC, pool);
  } else if (v->kind == V_KERNEL) {
    if (rp_bf16_set_kernel(v->kernel) != RP_OK) {
      fprintf(stderr, "bench_bf16: %s\n", rp_errmsg());
      exit(1);
    }
    t0 = now();
    rp_matmul_bf16_forward(m->out, m->inp16, m->w16, m->b, N, IC, OC, pool);
    if (!fwd_only)
      rp_matmul_bf16_backward(m->dinp, m->dw, m->db, m->dout16, m->inp16, m->w16, N, IC, OC,
                              pool);
  } else {
    rp_matmul_bf16_forward_packed(m->out, m->inp16, wp, m->b, N, pool);
    if (!fwd_only)
      rp_matmul_bf16_backward_packed(m->dinp, m->dw, m->db, m->dout16, m->inp16, wp, N, pool);
  }
  return now() - t0;
}

/* The multiply-add peak of every SIMD level, measured where the CPU and the
 * RINGPIPE_ISA ceiling allow it and n/a (with why) where not: they bound what
 * each kernel can reach. */
static void print_peaks(void) {
  static const char *const what[RP_ISA_LEVELS] = {"", "fp32 FMA ymm (avx2)",
                                                  "fp32 FMA zmm (avx512)",
                                                  "vdpbf16ps zmm (avx512bf16)",
                                                  "tdpbf16ps tiles (amx)"};
  printf("peak multiply-add rate, one thread (register-only loops):\n");
  for (int l = RP_ISA_AVX2; l < RP_ISA_LEVELS; l++) {
    double g = rp_isa_peak_gflops((rp_isa)l);
    if (g > 0.0)
      printf("  %-28s %8.1f GFLOP/s\n", what[l], g);
    else
      printf("  %-28s      n/a (%s)\n", what[l], rp_isa_why_not((rp_isa)l));
  }
}

/* Which code each bf16 column measures, and the kernels that cannot run. */
static void print_kernels(rp_bf16_kernel autok) {
  printf("bf16 kernels (ceiling %s from %s): portable = plain C compiled for %s; avx2-fma, "
         "avx512-fma = ymm, zmm FMA on widened operands; avx512-bf16 = vdpbf16ps; amx-bf16 = "
         "tdpbf16ps tiles\n",
         rp_isa_name(rp_isa_active()), rp_isa_source(), rp_isa_build_target());
  if (!rp_bf16_kernel_supported(RP_BF16_KERNEL_AVX2_FMA))
    printf("  avx2-fma: n/a (%s)\n", rp_isa_why_not(RP_ISA_AVX2));
  if (!rp_bf16_kernel_supported(RP_BF16_KERNEL_AVX512_FMA))
    printf("  avx512-fma: n/a (%s)\n", rp_isa_why_not(RP_ISA_AVX512));
  if (!rp_bf16_kernel_supported(RP_BF16_KERNEL_AVX512_BF16))
    printf("  avx512-bf16: n/a (%s)\n", rp_isa_why_not(RP_ISA_AVX512BF16));
  if (!rp_bf16_kernel_supported(RP_BF16_KERNEL_AMX))
    printf("  amx-bf16: n/a (%s)\n", rp_isa_why_not(RP_ISA_AMX));
  printf("  auto kernel (what training uses, and the 'packed' column): %s; conversions: %s\n",
         rp_bf16_kernel_name(autok), rp_bf16_conversions_name());
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  int rounds = argc > 2 ? atoi(argv[2]) : 7;
  int pin = argc > 3 ? atoi(argv[3]) : 0;
  const char *clk = argc > 4 ? argv[4] : "wall";
  g_cpu_clock = strcmp(clk, "cpu") == 0;
  if (threads < 1 || rounds < 1 || (!g_cpu_clock && strcmp(clk, "wall") != 0)) {
    fprintf(stderr, "usage: bench_bf16 [threads>=1] [rounds>=1] [pin=0|1] [wall|cpu]\n");
    return 2;
  }
  rp_pool *pool = NULL;
  if (rp_pool_create(&pool, threads, pin) != RP_OK) {
    fprintf(stderr, "bench_bf16: %s\n", rp_errmsg());
    return 1;
  }
  if (rp_isa_init() != RP_OK) {
    fprintf(stderr, "bench_bf16: %s\n", rp_errmsg());
    return 2;
  }

  rp_bf16_kernel autok = rp_bf16_kernel_active();

  variant vs[MAXV];
  int nv = 0;
  vs[nv++] = (variant){"fp32", V_SGEMM, RP_BF16_KERNEL_AUTO};
  const rp_bf16_kernel ks[5] = {RP_BF16_KERNEL_AVX2_FMA, RP_BF16_KERNEL_AVX512_FMA,
                                RP_BF16_KERNEL_AVX512_BF16, RP_BF16_KERNEL_AMX,
                                RP_BF16_KERNEL_PORTABLE};
  for (int k = 0; k < 5; k++)
    if (rp_bf16_kernel_supported(ks[k]))
      vs[nv++] = (variant){rp_bf16_kernel_name(ks[k]), V_KERNEL, ks[k]};
  vs[nv++] = (variant){"packed", V_PACKED, RP_BF16_KERNEL_AUTO};

  rp_rng rng;
  rp_rng_seed(&rng, 1);
  long maxin = 1536, maxout = 1536, maxn = 1024;
  bufs m = {take_floats(maxn * maxin, &rng), take_floats(maxin * maxout, &rng),
            take_floats(maxout, &rng), take_floats(maxn * maxout, &rng),
            take_floats(maxn * maxout, &rng), take_floats(maxn * maxin, &rng),
            take_floats(maxin * maxout, &rng), take_floats(maxout, &rng),
            take(2 * (size_t)(maxn * maxin)), take(2 * (size_t)(maxin * maxout)),
            take(2 * (size_t)(maxn * maxout))};
  rp_bf16_from_f32_array(m.inp16, m.inp, maxn * maxin, pool);
  rp_bf16_from_f32_array(m.w16, m.w, maxin * maxout, pool);
  rp_bf16_from_f32_array(m.dout16, m.dout, maxn * maxout, pool);

  const char *ct = getenv("OPENBLAS_CORETYPE");
  printf("bench_bf16: %d threads (pin=%d), best of %d rounds, %s clock, "
         "OPENBLAS_CORETYPE=%s\n", threads, pin, rounds, g_cpu_clock ? "process CPU" : "wall",
         ct ? ct : "(unset)");
  printf("fp32 column: gemm mode %s\n", rp_gemm_describe(pool));
  print_peaks();
  print_kernels(autok);

  for (int fwd_only = 1; fwd_only >= 0; fwd_only--) {
    printf("\n%s, GFLOP/s (%s flops)\n", fwd_only ? "forward" : "forward + backward",
           fwd_only ? "2*N*IC*OC" : "3 * 2*N*IC*OC");
    printf("%-8s %5s %5s %5s", "shape", "N", "IC", "OC");
    for (int v = 0; v < nv; v++) printf(" %11s", vs[v].name);
    printf(" %12s\n", "best/fp32");
    for (int si = 0; si < NSHAPES; si++) {
      const shape *s = &shapes[si];
      rp_bf16_set_kernel(RP_BF16_KERNEL_AUTO);
      rp_bf16_wpack wp;
      if (rp_bf16_wpack_init(&wp, s->IC, s->OC) != RP_OK) {
        fprintf(stderr, "bench_bf16: %s\n", rp_errmsg());
        return 1;
      }
      rp_bf16_wpack_update(&wp, m.w16, pool);
      double best[MAXV];
      for (int v = 0; v < nv; v++) {
        best[v] = 1e30;
        run(&vs[v], s, &m, &wp, pool, fwd_only); /* warm up */
      }
      for (int r = 0; r < rounds; r++)
        for (int q = 0; q < nv; q++) {
          int v = (q + r) % nv;
          if (vs[v].kind == V_PACKED) rp_bf16_set_kernel(RP_BF16_KERNEL_AUTO);
          double t = run(&vs[v], s, &m, &wp, pool, fwd_only);
          if (t < best[v]) best[v] = t;
        }
      rp_bf16_wpack_free(&wp);
      double fl = (fwd_only ? 1.0 : 3.0) * 2.0 * s->N * s->IC * s->OC, bbest = 1e30;
      printf("%-8s %5d %5d %5d", s->name, s->N, s->IC, s->OC);
      for (int v = 0; v < nv; v++) {
        printf(" %11.1f", fl / best[v] * 1e-9);
        if (v > 0 && best[v] < bbest) bbest = best[v];
      }
      printf(" %11.2fx\n", best[0] / bbest);
    }
  }
  rp_bf16_set_kernel(RP_BF16_KERNEL_AUTO);

  rp_free(m.inp), rp_free(m.w), rp_free(m.b), rp_free(m.out), rp_free(m.dout);
  rp_free(m.dinp), rp_free(m.dw), rp_free(m.db);
  rp_free(m.inp16), rp_free(m.w16), rp_free(m.dout16);
  rp_bf16_workspace_release();
  rp_pool_destroy(pool);
  return 0;
}
