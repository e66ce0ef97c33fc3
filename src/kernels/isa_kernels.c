/* The kernels' side of rp_isa.h: the multiply-add peak of each SIMD level
 * (register-only loops; the bf16 GEMM's AUTO choice and the benchmarks use
 * them) and the line that says which path each kernel family takes.
 *
 * Probes: independent register chains, no memory traffic, enough of them to
 * cover the FMA latency on two ports (12 ymm of the 16 AVX2 registers, 24 zmm of
 * the 32 AVX-512 ones; 4 of the 8 AMX tiles). The operands go through an empty asm each round so that
 * the compiler cannot fold the loop. Timed in thread CPU time, so that being
 * descheduled on a shared machine does not count; the levels measured together
 * alternate and the best run of each counts, so that a busy sibling
 * hyperthread slows all alike. The runs go on for at least PROBE_MIN_SECONDS
 * (at least PROBE_RUNS of them): a run is under a millisecond, and on a shared
 * VM a neighbour on the core's other hyperthread can halve the FMA rate for
 * longer than five runs last; a low peak would overstate every fraction of it
 * ringpipe prints. A level is probed only while the ceiling allows it, and
 * measured once. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "gelu_internal.h"
#include "xent_internal.h"
#include "gemm_bf16_internal.h"
#include "sgemm_internal.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_sgemm.h"
#include "ringpipe/rp_util.h"

#define PROBE_ITERS 100000L
#define PROBE_RUNS 5
#define PROBE_MAX_RUNS 400
#define PROBE_MIN_SECONDS 0.04

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double gflops(double flops_per_iter, double seconds) {
  return seconds > 0 ? PROBE_ITERS * flops_per_iter / seconds * 1e-9 : 0.0;
}

__attribute__((target("avx2,fma"))) static double probe_avx2(void) {
  __m256 acc[12];
  for (int i = 0; i < 12; i++) acc[i] = _mm256_setzero_ps();
  __m256 x = _mm256_set1_ps(1e-8f), y = _mm256_set1_ps(0.5f);
  double t0 = cpu_now();
  for (long it = 0; it < PROBE_ITERS; it++) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(x, y, acc[i]);
    __asm__ volatile("" : "+x"(x), "+x"(y));
  }
  double t = cpu_now() - t0;
  __m256 s = acc[0];
  for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, s);
  volatile float sink = lanes[0];
  (void)sink;
  return gflops(12.0 * 16.0, t); /* 8 lanes x 2 flops per FMA */
}

/* The zmm probes differ only in the operand type and the multiply-add. */
#define T512 __attribute__((target("avx512f")))
#define T512BF __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))
#define ZMM_PROBE(NAME, TARGET, XTYPE, XINIT, YINIT, STEP, FLOPS_PER_OP)              \
  TARGET static double NAME(void) {                                                 \
    __m512 acc[24];                                                                 \
    for (int i = 0; i < 24; i++) acc[i] = _mm512_setzero_ps();                      \
    XTYPE x = XINIT, y = YINIT;                                                     \
    double t0 = cpu_now();                                                          \
    for (long it = 0; it < PROBE_ITERS; it++) {                                     \
      _Pragma("GCC unroll 24") for (int i = 0; i < 24; i++) acc[i] = STEP(acc[i], x, y); \
      __asm__ volatile("" : "+v"(x), "+v"(y));                                      \
    }                                                                               \
    double t = cpu_now() - t0;                                                      \
    __m512 s = acc[0];                                                              \
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);                      \
    volatile float sink = _mm512_reduce_add_ps(s);                                  \
    (void)sink;                                                                     \
    return gflops(24.0 * (FLOPS_PER_OP), t);                                        \
  }

T512 static inline __m512 fma_step(__m512 a, __m512 x, __m512 y) {
  return _mm512_fmadd_ps(x, y, a);
}
T512BF static inline __m512 dp_step(__m512 a, __m512i x, __m512i y) {
  return _mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)y);
}
/* 16 lanes x 2 flops per FMA; 16 lanes x 2 products x 2 flops per vdpbf16ps */
ZMM_PROBE(probe_avx512, T512, __m512, _mm512_set1_ps(1e-8f), _mm512_set1_ps(0.5f), fma_step, 32.0)
ZMM_PROBE(probe_dpbf16, T512BF, __m512i, _mm512_set1_epi16(0x3280), _mm512_set1_epi16(0x3f00),
          dp_step, 64.0)

/* tdpbf16ps: 4 accumulator tiles on 4 loaded operand tiles (gemm_bf16_amx.c,
 * the only file built with the AMX flags). Each step is 4 x 16384 flops, so
 * fewer steps give a run as long as the zmm probes'. */
#define AMX_PROBE_ITERS (PROBE_ITERS / 16)
static double probe_amx(void) {
  double t0 = cpu_now();
  double flops = rp_bf16_amx_probe_flops(AMX_PROBE_ITERS);
  double t = cpu_now() - t0;
  return t > 0 ? flops / t * 1e-9 : 0.0;
}

static double probe(rp_isa level) {
  switch (level) {
    case RP_ISA_AVX2: return probe_avx2();
    case RP_ISA_AVX512: return probe_avx512();
    case RP_ISA_AVX512BF16: return probe_dpbf16();
    case RP_ISA_AMX: return probe_amx();
    default: return 0.0;
  }
}
#else
static double probe(rp_isa level) { return 0.0; }
#endif

static pthread_mutex_t g_probe_mu = PTHREAD_MUTEX_INITIALIZER;
static double g_peak[RP_ISA_LEVELS];
static int g_probed[RP_ISA_LEVELS];

/* Every allowed, not yet measured level, alternating. */
static void probe_pending(void) {
  int todo[RP_ISA_LEVELS] = {0};
  for (int l = RP_ISA_AVX2; l < RP_ISA_LEVELS; l++)
    todo[l] = !g_probed[l] && rp_isa_allows((rp_isa)l);
  const double start = rp_now();
  for (int r = 0; r < PROBE_MAX_RUNS && (r < PROBE_RUNS || rp_now() - start < PROBE_MIN_SECONDS);
       r++)
    for (int l = RP_ISA_AVX2; l < RP_ISA_LEVELS; l++) {
      if (!todo[l]) continue;
      double g = probe((rp_isa)l);
      if (g > g_peak[l]) g_peak[l] = g;
    }
  for (int l = 0; l < RP_ISA_LEVELS; l++) g_probed[l] |= todo[l];
}

rp_isa rp_isa_fp32_fma_level(void) {
  return rp_isa_allows(RP_ISA_AVX512) ? RP_ISA_AVX512
         : rp_isa_allows(RP_ISA_AVX2) ? RP_ISA_AVX2 : RP_ISA_SCALAR;
}

double rp_isa_probe_once(rp_isa level) {
  if (level <= RP_ISA_SCALAR || level >= RP_ISA_LEVELS || !rp_isa_allows(level)) return 0.0;
  return probe(level);
}

double rp_isa_peak_gflops(rp_isa level) {
  if (level <= RP_ISA_SCALAR || level >= RP_ISA_LEVELS || !rp_isa_allows(level)) return 0.0;
  pthread_mutex_lock(&g_probe_mu);
  if (!g_probed[level]) probe_pending();
  double g = g_peak[level];
  pthread_mutex_unlock(&g_probe_mu);
  return g;
}

/* ---- the summary line */

void rp_isa_kernel_summary(char *buf, size_t n) {
  rp_isa cpu = rp_isa_cpu(), act = rp_isa_active();
  const rp_flash_config bf16_flash = {.bf16 = 1};
  char blocks[64] = ""; /* the own AVX-512 GEMM's k blocks, which set its bits */
  if (rp_sgemm_kernel_best() == RP_SGEMM_AVX512)
    snprintf(blocks, sizeof blocks, " (k blocks of %d%s)", rp_sgemm_kernel_kc(RP_SGEMM_AVX512),
             rp_sgemm_a_inplace(RP_ISA_AVX512) ? ", A read in place" : "");
  else if (rp_sgemm_kernel_best() == RP_SGEMM_AVX2 && rp_sgemm_a_inplace(RP_ISA_AVX2))
    snprintf(blocks, sizeof blocks, " (A read in place)");
  snprintf(buf, n,
           "cpu %s, ceiling %s (%s): own fp32 GEMM kernel %s%s, flash attention %s%s, bf16 GEMM %s, "
           "bf16 conversions %s, GELU %s, cross-entropy rows %s; "
           "other kernels are plain C compiled for %s",
           rp_isa_name(cpu), rp_isa_name(act), rp_isa_source(),
           /* which GEMM runs is the pool's gemm mode (rp_gemm_describe) */
           rp_sgemm_kernel_best() == RP_SGEMM_AVX512 ? "avx512"
           : rp_sgemm_kernel_best() == RP_SGEMM_AVX2 ? "avx2"
                                                     : "none (OpenBLAS only)",
           blocks,
           rp_flash_isa_name(rp_flash_isa_active(NULL)),
           !rp_flash_bf16_active(&bf16_flash) ? ""
           : rp_flash_bf16_pays()            ? " (bf16 runs: vdpbf16ps products)"
                                             : " (bf16 runs: fp32 products; vdpbf16ps products with "
                                               "--bf16-attention on, slower here)",
           rp_bf16_kernel_name(rp_bf16_kernel_active()),
           rp_bf16_conversions_name(), rp_gelu_ops_name(), rp_xent_ops_name(),
           rp_isa_build_target());
}
