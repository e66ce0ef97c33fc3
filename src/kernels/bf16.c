/* fp32 <-> bf16 array conversions (round to nearest even, stochastic) and the
 * choice of GEMM kernel.
 *
 * The conversions are integer arithmetic on the fp32 bits, written as plain loops
 * that gcc vectorizes; each loop is compiled twice, once for the build's target
 * and once for AVX-512 (chosen at run time under the rp_isa.h ceiling), with
 * identical results. The
 * AVX512-BF16 instruction vcvtneps2bf16 is not used: it flushes denormals to
 * zero, and conversions here must not depend on the CPU. */
#include <string.h>

#include "gemm_bf16_internal.h"
#include "kern_util.h"
#include "ringpipe/rp_isa.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RP_BF16_X86 1
#define T512 __attribute__((target("avx512f,avx512bw")))
#endif

/* ---- element rules (also the scalar rp_bf16_from_f32 in the header) */

#define rne_bits rp_bf16_rne_bits /* gemm_bf16_internal.h: also the AMX packer's */

/* Adding 16 uniform bits below the kept ones carries into them with probability
 * (dropped bits)/2^16: magnitude rounds up that often, down otherwise, so the
 * mean is exact for either sign. Infinity has zero low bits and never carries. */
static inline uint16_t sr_bits_round(uint32_t u, uint32_t rnd16) {
  uint32_t r = (u + rnd16) >> 16;
  uint32_t q = (u >> 16) | 0x40u;
  return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? q : r);
}

/* Chris Wellons' lowbias32: a bijective 32-bit mix with low bias. */
static inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

static inline uint32_t sr_hash(uint32_t i, uint32_t k1, uint32_t k2) {
  return mix32(mix32(i ^ k1) ^ k2) >> 16;
}

static void sr_keys(uint64_t seed, uint32_t *k1, uint32_t *k2) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull; /* splitmix64 */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  *k1 = (uint32_t)z;
  *k2 = (uint32_t)(z >> 32);
}

uint32_t rp_bf16_sr_bits(uint64_t seed, long i) {
  uint32_t k1, k2;
  sr_keys(seed, &k1, &k2);
  return sr_hash((uint32_t)i, k1, k2);
}

/* ---- loop bodies, instantiated per target */

#define FROM_F32_BODY                                                                 \
  for (long i = 0; i < n; i++) {                                                      \
    uint32_t u;                                                                       \
    memcpy(&u, src + i, 4);                                                           \
    dst[i] = rne_bits(u);                                                             \
  }
#define TO_F32_BODY                                                                   \
  for (long i = 0; i < n; i++) {                                                      \
    uint32_t u = (uint32_t)src[i] << 16;                                              \
    memcpy(dst + i, &u, 4);                                                           \
  }
#define SR_BODY                                                                       \
  for (long i = 0; i < n; i++) {                                                      \
    uint32_t u;                                                                       \
    memcpy(&u, src + i, 4);                                                           \
    dst[i] = sr_bits_round(u, sr_hash((uint32_t)(i0 + i), k1, k2));                   \
  }

static void from_f32_plain(uint16_t *restrict dst, const float *restrict src, long n) {
  FROM_F32_BODY
}
static void to_f32_plain(float *restrict dst, const uint16_t *restrict src, long n) {
  TO_F32_BODY
}
static void sr_plain(uint16_t *restrict dst, const float *restrict src, long i0, long n,
                     uint32_t k1, uint32_t k2) {
  SR_BODY
}
#ifdef RP_BF16_X86
T512 static void from_f32_512(uint16_t *restrict dst, const float *restrict src, long n) {
  FROM_F32_BODY
}
T512 static void to_f32_512(float *restrict dst, const uint16_t *restrict src, long n) {
  TO_F32_BODY
}
T512 static void sr_512(uint16_t *restrict dst, const float *restrict src, long i0, long n,
                        uint32_t k1, uint32_t k2) {
  SR_BODY
}
#endif

static int use_avx512(void) {
#ifdef RP_BF16_X86
  return !rp_bf16_is_forced_portable() && rp_isa_allows(RP_ISA_AVX512);
#else
  return 0;
#endif
}

const char *rp_bf16_conversions_name(void) { return use_avx512() ? "avx512" : "plain C"; }

typedef struct {
  uint16_t *d16;
  float *d32;
  const float *s32;
  const uint16_t *s16;
  long n;
  int op; /* 0 rne, 1 widen, 2 stochastic */
  int wide;
  uint32_t k1, k2;
} conv_ctx;

static void conv_task(void *vctx, int ith, int nth) {
  const conv_ctx *c = vctx;
  long lo, hi;
  rp_kern_split_cols(c->n, ith, nth, &lo, &hi); /* 16-element boundaries */
  long m = hi - lo;
  if (m <= 0) return;
#ifdef RP_BF16_X86
  if (c->wide) {
    if (c->op == 0) from_f32_512(c->d16 + lo, c->s32 + lo, m);
    else if (c->op == 1) to_f32_512(c->d32 + lo, c->s16 + lo, m);
    else sr_512(c->d16 + lo, c->s32 + lo, lo, m, c->k1, c->k2);
    return;
  }
#endif
  if (c->op == 0) from_f32_plain(c->d16 + lo, c->s32 + lo, m);
  else if (c->op == 1) to_f32_plain(c->d32 + lo, c->s16 + lo, m);
  else sr_plain(c->d16 + lo, c->s32 + lo, lo, m, c->k1, c->k2);
}

void rp_bf16_from_f32_array(uint16_t *dst, const float *src, long n, rp_pool *pool) {
  conv_ctx c = {.d16 = dst, .s32 = src, .n = n, .op = 0, .wide = use_avx512()};
  rp_kern_run(pool, conv_task, &c, n);
}

void rp_bf16_to_f32_array(float *dst, const uint16_t *src, long n, rp_pool *pool) {
  conv_ctx c = {.d32 = dst, .s16 = src, .n = n, .op = 1, .wide = use_avx512()};
  rp_kern_run(pool, conv_task, &c, n);
}

void rp_bf16_from_f32_stochastic(uint16_t *dst, const float *src, long n, uint64_t seed,
                                 rp_pool *pool) {
  conv_ctx c = {.d16 = dst, .s32 = src, .n = n, .op = 2, .wide = use_avx512()};
  sr_keys(seed, &c.k1, &c.k2);
  rp_kern_run(pool, conv_task, &c, n);
}

/* ---- kernel choice, under the rp_isa.h ceiling */

static rp_bf16_kernel g_kernel = RP_BF16_KERNEL_AUTO;
static int g_forced_portable = 0;

static int allows(rp_bf16_kernel k) {
  switch (k) {
  case RP_BF16_KERNEL_AVX2_FMA: return rp_isa_allows(RP_ISA_AVX2);
  case RP_BF16_KERNEL_AVX512_FMA: return rp_isa_allows(RP_ISA_AVX512);
  case RP_BF16_KERNEL_AVX512_BF16: return rp_isa_allows(RP_ISA_AVX512BF16);
  case RP_BF16_KERNEL_AMX: return rp_isa_allows(RP_ISA_AMX);
  default: return 1;
  }
}

int rp_bf16_kernel_supported(rp_bf16_kernel k) {
  return k >= RP_BF16_KERNEL_AUTO && k <= RP_BF16_KERNEL_LAST && allows(k);
}

const char *rp_bf16_kernel_name(rp_bf16_kernel k) {
  switch (k) {
  case RP_BF16_KERNEL_AUTO: return "auto";
  case RP_BF16_KERNEL_PORTABLE: return "portable";
  case RP_BF16_KERNEL_AVX512_FMA: return "avx512-fma";
  case RP_BF16_KERNEL_AVX512_BF16: return "avx512-bf16";
  case RP_BF16_KERNEL_AMX: return "amx-bf16";
  case RP_BF16_KERNEL_AVX2_FMA: return "avx2-fma";
  }
  return "?";
}

/* Among the kernels the ceiling allows, the one whose multiply-add peak is
 * higher (probed once per level); vdpbf16ps must beat the FMA loop by 10% to be
 * chosen, since its packed operands are cheaper but the measurement is noisy on
 * a shared machine. The portable kernel has no probe: any SIMD kernel beats it. */
static rp_bf16_kernel auto_kernel(void) {
  if (rp_isa_allows(RP_ISA_AMX) &&
      rp_isa_peak_gflops(RP_ISA_AMX) >= 1.1 * rp_isa_peak_gflops(RP_ISA_AVX512))
    return RP_BF16_KERNEL_AMX;
  if (rp_isa_allows(RP_ISA_AVX512BF16) &&
      rp_isa_peak_gflops(RP_ISA_AVX512BF16) >= 0.9 * rp_isa_peak_gflops(RP_ISA_AVX512))
    return RP_BF16_KERNEL_AVX512_BF16;
  if (rp_isa_allows(RP_ISA_AVX512)) return RP_BF16_KERNEL_AVX512_FMA;
  if (rp_isa_allows(RP_ISA_AVX2)) return RP_BF16_KERNEL_AVX2_FMA;
  return RP_BF16_KERNEL_PORTABLE;
}

void rp_bf16_peak_gflops(double *fma_f32, double *dpbf16) {
  if (fma_f32) *fma_f32 = rp_isa_peak_gflops(RP_ISA_AVX512);
  if (dpbf16) *dpbf16 = rp_isa_peak_gflops(RP_ISA_AVX512BF16);
}

static rp_isa kernel_level(rp_bf16_kernel k) {
  switch (k) {
  case RP_BF16_KERNEL_AVX2_FMA: return RP_ISA_AVX2;
  case RP_BF16_KERNEL_AVX512_FMA: return RP_ISA_AVX512;
  case RP_BF16_KERNEL_AVX512_BF16: return RP_ISA_AVX512BF16;
  case RP_BF16_KERNEL_AMX: return RP_ISA_AMX;
  default: return RP_ISA_SCALAR;
  }
}

rp_status rp_bf16_set_kernel(rp_bf16_kernel k) {
  if (k < RP_BF16_KERNEL_AUTO || k > RP_BF16_KERNEL_LAST)
    return rp_err(RP_EINVAL, "bf16 kernel %d is not one of auto, portable, avx512-fma, "
                             "avx512-bf16, amx-bf16, avx2-fma", (int)k);
  if (!allows(k))
    return rp_err(RP_EINVAL, "bf16 kernel %s cannot run here (%s); use auto or portable",
                  rp_bf16_kernel_name(k), rp_isa_why_not(kernel_level(k)));
  g_kernel = k;
  return RP_OK;
}

void rp_bf16_force_portable(int on) { g_forced_portable = on != 0; }
int rp_bf16_is_forced_portable(void) { return g_forced_portable; }

/* A kernel set by name counts only while the ceiling allows it (a test lowering
 * the ceiling later must not leave a kernel above it running). */
rp_bf16_kernel rp_bf16_kernel_active(void) {
  if (g_forced_portable) return RP_BF16_KERNEL_PORTABLE;
  if (g_kernel != RP_BF16_KERNEL_AUTO && allows(g_kernel)) return g_kernel;
  return auto_kernel();
}

const rp_bf16_kdesc *rp_bf16_kdesc_active(void) {
  switch (rp_bf16_kernel_active()) {
  case RP_BF16_KERNEL_AVX512_FMA: return &rp_bf16_kd_avx512_fma;
  case RP_BF16_KERNEL_AVX512_BF16: return &rp_bf16_kd_avx512_bf16;
  case RP_BF16_KERNEL_AMX: return &rp_bf16_kd_amx;
  case RP_BF16_KERNEL_AVX2_FMA: return &rp_bf16_kd_avx2_fma;
  default: return &rp_bf16_kd_portable_f32;
  }
}

const rp_bf16_kdesc *rp_bf16_kdesc_for_fmt(rp_bf16_fmt fmt) {
  const rp_bf16_kdesc *kd = rp_bf16_kdesc_active();
  if (kd->fmt == fmt) return kd;
  if (fmt == RP_BF16_FMT_PAIRS) {
    if (g_forced_portable) return &rp_bf16_kd_portable_pairs;
    if (allows(RP_BF16_KERNEL_AMX)) return &rp_bf16_kd_amx;
    return allows(RP_BF16_KERNEL_AVX512_BF16) ? &rp_bf16_kd_avx512_bf16
                                               : &rp_bf16_kd_portable_pairs;
  }
  if (g_forced_portable) return &rp_bf16_kd_portable_f32;
  if (allows(RP_BF16_KERNEL_AVX512_FMA)) return &rp_bf16_kd_avx512_fma;
  return allows(RP_BF16_KERNEL_AVX2_FMA) ? &rp_bf16_kd_avx2_fma : &rp_bf16_kd_portable_f32;
}
