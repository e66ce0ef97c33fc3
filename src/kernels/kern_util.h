/* Private helpers shared by the kernel files: pool dispatch, column splits and
 * small math routines written so that gcc -O3 -march=native vectorizes them
 * without -ffast-math (fixed-width accumulator arrays instead of in-order
 * reductions, an exp built from a polynomial instead of a libm call).
 *
 * Every routine here is deterministic for a given input: none depends on the
 * thread count, which is what lets layout-invariance tests compare bitwise. */
#ifndef RP_KERN_UTIL_H
#define RP_KERN_UTIL_H

#include <stdint.h>
#include <string.h>

#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_pool.h"

/* The level whose table an elementwise kernel family (GELU, the softmax rows)
 * runs: avx512 or avx2 where the ceiling allows it and that table was built
 * (off x86-64 they are empty), else scalar, the plain-C reference; and the
 * name the instruction-set line gives it. */
static inline rp_isa rp_kern_table_level(int built512, int built256) {
  if (built512 && rp_isa_allows(RP_ISA_AVX512)) return RP_ISA_AVX512;
  if (built256 && rp_isa_allows(RP_ISA_AVX2)) return RP_ISA_AVX2;
  return RP_ISA_SCALAR;
}
/* The table of that level among a family's three (avx512, avx2, plain C). */
static inline const void *rp_kern_table_pick(rp_isa level, const void *t512, const void *t256,
                                             const void *tc) {
  return level == RP_ISA_AVX512 ? t512 : level == RP_ISA_AVX2 ? t256 : tc;
}
static inline const char *rp_kern_table_name(rp_isa level) {
  return level == RP_ISA_AVX512 ? "avx512" : level == RP_ISA_AVX2 ? "avx2" : "c";
}

/* Below this many elements of work a pool dispatch costs more than it saves. */
#define RP_KERN_MIN_PAR 4096L

/* Run fn over the pool, or serially on the caller when there is no pool, one
 * thread, or too little work. Kernels are written so that their results do not
 * depend on nth, so this choice never changes a number. */
static inline void rp_kern_run(rp_pool *pool, rp_pool_fn fn, void *ctx, long work) {
  if (pool == NULL || rp_pool_size(pool) <= 1 || work < RP_KERN_MIN_PAR)
    fn(ctx, 0, 1);
  else
    rp_pool_run(pool, fn, ctx);
}

/* Split [0, n) columns into nth ranges whose boundaries fall on 16-float (one
 * cache line) multiples, so threads writing neighbouring columns of a shared
 * accumulator row do not false-share. */
static inline void rp_kern_split_cols(long n, int ith, int nth, long *lo, long *hi) {
  long blocks = (n + 15) / 16, blo, bhi;
  rp_split(blocks, ith, nth, &blo, &bhi);
  *lo = blo * 16 < n ? blo * 16 : n;
  *hi = bhi * 16 < n ? bhi * 16 : n;
}

#define RP_KERN_LANES 16

/* gcc -march=native on AVX-512 CPUs still prefers 256-bit vectors; the
 * compute-bound elementwise loops (GELU's exp and divide) run 1.35x faster at
 * 512 bits (measured on Sapphire Rapids, one thread, cache-resident). Only the
 * vector width changes, never the operations, so results are bitwise those of
 * the 256-bit build. Elsewhere (AVX2 CPUs, other compilers) it is nothing. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define RP_KERN_WIDE __attribute__((target("prefer-vector-width=512")))
#else
#define RP_KERN_WIDE
#endif

/* a*b + c in one rounding where the target has FMA (gcc's -std=c11 never fuses
 * a*b + c by itself): about 1.4x faster for the polynomial-heavy elementwise
 * kernels and no less accurate. Results never depend on the thread count; they
 * may differ in the last bit between builds with and without FMA. */
#ifdef __FMA__
#define RP_FMAF(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define RP_FMAF(a, b, c) ((a) * (b) + (c))
#endif

/* Sixteen accumulator lanes in RP_V16_PARTS vectors of the target's own width
 * (one zmm, two ymm, four xmm), lane j in part j / RP_VN_LANES: the partial-sum
 * loops keep 16 independent sums per pass and add them in lane order, so every
 * target computes the same operations lane for lane and gets the same bits.
 * Not one 64-byte GNU vector everywhere: where the target has no 64-byte
 * register GCC 12 keeps such a vector on the stack and sends every add through
 * a store and a reload (x86-64-v3 build, RINGPIPE_ISA=avx2: LayerNorm's
 * forward and backward 9.97 ms a step against 4.80 for the same code built with
 * 64-byte registers, default model). Not a float[16] either: GCC 12 kept that
 * array in memory or took it apart with shuffles inside bigger loops
 * (LayerNorm's backward spent ~1500 cycles on a 384-float row). Accumulators
 * go to helpers by pointer and only the inline load returns a vector, of the
 * build's own width: a wider vector argument's ABI changes with the target
 * (-Wpsabi). */
#if defined(__AVX512F__)
#define RP_V16_PARTS 1
#elif defined(__AVX__)
#define RP_V16_PARTS 2
#else
#define RP_V16_PARTS 4
#endif
#define RP_VN_LANES (RP_KERN_LANES / RP_V16_PARTS)
typedef float rp_vn __attribute__((vector_size(RP_VN_LANES * sizeof(float))));
typedef int32_t rp_vni __attribute__((vector_size(RP_VN_LANES * sizeof(int32_t))));
/* every part p of a 16-lane accumulator (a constant trip count GCC unrolls, so
 * the parts stay in registers) */
#define RP_V16_EACH(p) for (int p = 0; p < RP_V16_PARTS; p++)

/* part p of the 16 floats at x */
static inline rp_vn rp_vn_load(const float *x, int p) {
  rp_vn v;
  memcpy(&v, x + p * RP_VN_LANES, sizeof v);
  return v;
}

/* lane 0 + lane 1 + ... + lane 15 of a 16-lane accumulator, in that order */
static inline float rp_v16_sum(const rp_vn acc[RP_V16_PARTS]) {
  float s = 0.0f;
  RP_V16_EACH(p)
  for (int j = 0; j < RP_VN_LANES; j++) s += acc[p][j];
  return s;
}

/* sum of x[0..n) with 16 independent partial sums (vectorizes; fixed order). */
static inline float rp_kern_sum(const float *restrict x, long n) {
  rp_vn acc[RP_V16_PARTS] = {0};
  long i = 0;
  for (; i + RP_KERN_LANES <= n; i += RP_KERN_LANES) RP_V16_EACH(p) acc[p] += rp_vn_load(x + i, p);
  float s = rp_v16_sum(acc);
  for (; i < n; i++) s += x[i];
  return s;
}

/* dot product of x and y over n, same accumulation scheme as rp_kern_sum. */
static inline float rp_kern_dot(const float *restrict x, const float *restrict y, long n) {
  rp_vn acc[RP_V16_PARTS] = {0};
  long i = 0;
  for (; i + RP_KERN_LANES <= n; i += RP_KERN_LANES)
    RP_V16_EACH(p) acc[p] += rp_vn_load(x + i, p) * rp_vn_load(y + i, p);
  float s = rp_v16_sum(acc);
  for (; i < n; i++) s += x[i] * y[i];
  return s;
}

/* max of x[0..n), n >= 1. Each lane keeps x > acc ? x : acc (a NaN never
 * replaces a lane; a NaN in x[0] stays), selected through the comparison's
 * lane mask: GCC 12 left the float[16] form of this loop scalar (vmaxss), a
 * third of the cross-entropy backward's time at a 50257-token vocabulary. */
static inline float rp_kern_max(const float *restrict x, long n) {
  float first[RP_VN_LANES];
  for (int j = 0; j < RP_VN_LANES; j++) first[j] = x[0];
  rp_vn acc[RP_V16_PARTS];
  RP_V16_EACH(p) acc[p] = rp_vn_load(first, 0);
  long i = 0;
  for (; i + RP_KERN_LANES <= n; i += RP_KERN_LANES)
    RP_V16_EACH(p) {
      const rp_vn xv = rp_vn_load(x + i, p);
      const rp_vni take = xv > acc[p];
      acc[p] = (rp_vn)(((rp_vni)xv & take) | ((rp_vni)acc[p] & ~take));
    }
  float m = acc[0][0];
  RP_V16_EACH(p) for (int j = 0; j < RP_VN_LANES; j++) m = acc[p][j] > m ? acc[p][j] : m;
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

/* exp(x) for float, about 1 ulp on the reduced range (Cephes polynomial).
 * Inputs are clamped to [-87.3, 87]: outside, the result saturates at ~1e-38 or
 * ~6e37, which keeps the result and 1/(1 + result) normal floats (denormals are
 * slow) and which no softmax or sigmoid here can tell apart from the true value.
 * NaN in gives NaN out; +-0 and denormals give exactly 1.
 * Plain arithmetic so that loops calling it vectorize; libm's expf does not
 * without -ffast-math. */
static inline float rp_kern_expf(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 87.0f ? 87.0f : x;
  /* round to nearest by the 1.5*2^23 trick: floorf does not vectorize without
   * -fno-trapping-math, and any integer near x*log2(e) keeps r small enough */
  float shifted = RP_FMAF(x, 1.44269504088896341f, 12582912.0f);
  float n = shifted - 12582912.0f;
  /* ln 2 split in two so that n*ln2 is subtracted without rounding error */
  float r = RP_FMAF(n, -0.693359375f, x);
  r = RP_FMAF(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = RP_FMAF(p, r, 1.3981999507e-3f);
  p = RP_FMAF(p, r, 8.3334519073e-3f);
  p = RP_FMAF(p, r, 4.1665795894e-2f);
  p = RP_FMAF(p, r, 1.6666665459e-1f);
  p = RP_FMAF(p, r, 5.0000001201e-1f);
  p = RP_FMAF(p * r, r, r) + 1.0f;
  /* 2^n built from the low mantissa bits of `shifted` (1.5*2^23 + n, exact), in
   * unsigned arithmetic: the exponent field is (n + 127) mod 2^9, in [1, 253]
   * for every clamped x. A NaN x has arbitrary bits there; converting it to an
   * int or shifting a negative value would be undefined, this just gives some
   * scale, and p (NaN) carries the NaN to the result. */
  uint32_t sbits;
  memcpy(&sbits, &shifted, sizeof sbits);
  uint32_t bits = (sbits + 127u) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/* logistic 1/(1+e^{-x}); no cancellation at either tail. */
/* sum of exp(x[i] - shift) over n values with 16 partial sums (vectorizes;
 * fixed order): the softmax denominators of the cross-entropies. */
static inline float rp_kern_sum_exp_shifted(const float *restrict x, float shift, long n) {
  float acc[RP_KERN_LANES] = {0};
  long i = 0;
  for (; i + RP_KERN_LANES <= n; i += RP_KERN_LANES)
    for (int j = 0; j < RP_KERN_LANES; j++) acc[j] += rp_kern_expf(x[i + j] - shift);
  float s = 0.0f;
  for (int j = 0; j < RP_KERN_LANES; j++) s += acc[j];
  for (; i < n; i++) s += rp_kern_expf(x[i] - shift);
  return s;
}

/* d[i] = exp(x[i] - shift) * dscale over n values (the cross-entropies'
 * scaled softmax), for distinct buffers... */
static inline void rp_kern_softmax_scaled(float *restrict d, const float *restrict x,
                                          float shift, float dscale, long n) {
  for (long i = 0; i < n; i++) d[i] = rp_kern_expf(x[i] - shift) * dscale;
}

/* ...and in place (dlogits over the logits): one restrict pointer, so that the
 * loop still vectorizes instead of failing gcc's runtime overlap check and
 * running scalar */
static inline void rp_kern_softmax_scaled_inplace(float *restrict d, float shift, float dscale,
                                                  long n) {
  for (long i = 0; i < n; i++) d[i] = rp_kern_expf(d[i] - shift) * dscale;
}

static inline float rp_kern_sigmoidf(float x) { return 1.0f / (1.0f + rp_kern_expf(-x)); }

#endif
