/* bf16 mixed precision: conversions and a blocked bf16 GEMM with fp32 accumulation.
 *
 * bf16 is the top half of an IEEE fp32 (1 sign, 8 exponent, 7 mantissa bits), held
 * here as uint16_t. Conversions to bf16 round to nearest even (RNE) or
 * stochastically; fp32 denormals become bf16 denormals (no flush), NaN stays a
 * (quiet) NaN, values that round past the largest finite bf16 become infinity.
 *
 * The GEMMs take the shapes and meaning of rp_matmul_forward/backward in
 * rp_kernels.h (row-major, weight (OC, IC), out = inp @ W^T + bias, backward
 * accumulates +=, NULL skips a gradient), with bf16 operands and fp32 results.
 *
 * Summation order (the same for every kernel, so all kernels and the _ref loops
 * give bitwise-equal results): each output starts from its initial value (bias or
 * +0 in forward, the existing gradient in backward) and walks k in pairs
 * (2p, 2p+1), p = 0, 1, ..., adding the exact product of element 2p+1 first, then
 * that of element 2p, each addition rounded to fp32 (round to nearest even); an odd
 * K gets a +0 product in place of element K. This is what the AVX512-BF16
 * instruction vdpbf16ps does (checked against hardware in tests/bf16). One
 * exception: vdpbf16ps treats denormal inputs and results as zero, so the
 * AVX512-BF16 kernel differs from the others where a product or a partial sum is
 * below 2^-126 in magnitude (never in practice for weights, activations and
 * gradients of a trained model). The AMX kernel is the other exception: its
 * tdpbf16ps sums each block of 16 pairs in its own order (even and odd products
 * in two chains), these into an accumulator that starts at +0 for every block
 * of 256 pairs and is then added to the output (gemm_bf16_amx.c), so its
 * results differ from the others' by fp32 rounding, never with the thread
 * count or the operand split; rp_matmul_bf16_*_ref_of(RP_BF16_KERNEL_AMX) is
 * that order, equal to the kernel bit for bit (tests/bf16), denormals aside.
 *
 * Kernels (rp_bf16_kernel): a portable plain-C kernel, an AVX-512F kernel that
 * widens bf16 to fp32 while packing and runs fp32 FMAs, an AVX512-BF16 kernel
 * (vdpbf16ps on packed bf16 pairs) and an AMX kernel (tdpbf16ps on 16 x 32
 * tiles, ceiling amx). AUTO picks, among those the CPU runs under the rp_isa.h
 * ceiling (RINGPIPE_ISA), the one whose measured peak multiply-add rate
 * (rp_isa_peak_gflops, probed once) is highest: vdpbf16ps does twice the work
 * of an fp32 FMA per instruction but on some CPUs (Sapphire Rapids) issues at
 * half the rate; tdpbf16ps does 8192 multiply-adds per instruction (about 12x
 * the zmm FMA's rate on Sapphire Rapids). Results do not depend on the choice
 * except for the AMX kernel's order (see summation order).
 *
 * Packed layout (what rp_bf16_wpack holds and what every call builds for its
 * other operands): GEMM C[M,Nc] += A[M,K] B[K,Nc] works on panels of B, NR = 64
 * columns wide, zero padded past Nc, each holding all K pairs in order:
 *   RP_BF16_FMT_PAIRS: uint32 [K/2 pairs, rounded up to a multiple of 16 with
 *     zero pairs][64 columns], element 2p+1 in the high half and 2p in the low
 *     half (the operand layout vdpbf16ps wants, and 16-pair AMX B tiles);
 *   RP_BF16_FMT_F32:   float  [K slots][64 columns], slot 2p holding element 2p+1
 *     and slot 2p+1 element 2p, widened to fp32 (so that a plain FMA loop adds
 *     the pair in the order above).
 * Panels follow each other for Nc = 0, 64, 128, ... A is packed the same way, MR
 * rows wide, in cache-sized blocks inside the call.
 *
 * Threads: every call splits its output rows over the pool (rp_split on MR
 * tiles); pool may be NULL (serial). Results do not depend on the thread count.
 * GEMM calls share one workspace (RP_MEM_WORKSPACE) guarded by a mutex, so
 * concurrent calls from two threads serialize instead of clobbering it. */
#ifndef RP_BF16_H
#define RP_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "rp_base.h"
#include "rp_pool.h"
#include "rp_sgemm.h" /* rp_sgemm_rows_fn */

/* ---- scalar conversions */
static inline float rp_bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
  return v.f;
}
static inline uint16_t rp_bf16_from_f32(float x) {
  union { float f; uint32_t u; } v = {.f = x};
  if ((v.u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((v.u >> 16) | 0x0040u);
  return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}

/* ---- array conversions (vectorised; split over the pool) */
void rp_bf16_from_f32_array(uint16_t *dst, const float *src, long n, rp_pool *pool);
void rp_bf16_to_f32_array(float *dst, const uint16_t *src, long n, rp_pool *pool);
/* Stochastic rounding: rounds |x| up with probability (dropped bits) / 2^16, so
 * E[result] = x. The random bits of element i are a hash of (seed, i): the
 * result depends on the seed and i only, not on the thread count or the call's
 * split; use a new seed per use (e.g. seed = base + step). n < 2^32. */
void rp_bf16_from_f32_stochastic(uint16_t *dst, const float *src, long n, uint64_t seed,
                                 rp_pool *pool);
/* The 16 random bits rp_bf16_from_f32_stochastic adds to element i. */
uint32_t rp_bf16_sr_bits(uint64_t seed, long i);

/* ---- kernel choice */
typedef enum {
  RP_BF16_KERNEL_AUTO = 0,
  RP_BF16_KERNEL_PORTABLE = 1,    /* plain C, any CPU */
  RP_BF16_KERNEL_AVX512_FMA = 2,  /* AVX-512F: bf16 widened to fp32 when packing */
  RP_BF16_KERNEL_AVX512_BF16 = 3, /* AVX512-BF16: vdpbf16ps on bf16 pairs */
  RP_BF16_KERNEL_AMX = 4,         /* AMX-BF16: tdpbf16ps on tiles (own summation order) */
  RP_BF16_KERNEL_AVX2_FMA = 5,    /* AVX2 + FMA: avx512-fma's operands and sums on ymm */
} rp_bf16_kernel;
#define RP_BF16_KERNEL_LAST RP_BF16_KERNEL_AVX2_FMA

typedef enum { RP_BF16_FMT_F32 = 0, RP_BF16_FMT_PAIRS = 1 } rp_bf16_fmt;

/* Select the kernel for GEMMs that follow. Returns RP_EINVAL (and keeps the
 * current one) if this CPU cannot run it or the rp_isa.h ceiling is below it; a
 * kernel set here yields to AUTO while a later, lower ceiling excludes it.
 * Called from the main thread between GEMMs. */
rp_status rp_bf16_set_kernel(rp_bf16_kernel k);
/* The kernel that runs now (AUTO resolved; PORTABLE while forced). */
rp_bf16_kernel rp_bf16_kernel_active(void);
const char *rp_bf16_kernel_name(rp_bf16_kernel k);
int rp_bf16_kernel_supported(rp_bf16_kernel k);   /* by this CPU, under the ceiling */
/* The code the array conversions run: "avx512" or "plain C". */
const char *rp_bf16_conversions_name(void);
/* on != 0: every conversion and GEMM uses the plain-C code, whatever was set or
 * packed (packed weights are then read by the portable kernel of their format). */
void rp_bf16_force_portable(int on);
/* Peak multiply-add rates of one thread in GFLOP/s (2 flops per multiply-add):
 * rp_isa_peak_gflops of avx512 (zmm FMA) and avx512bf16 (vdpbf16ps); 0 where
 * the CPU or the ceiling excludes them. AUTO uses them. */
void rp_bf16_peak_gflops(double *fma_f32, double *dpbf16);

/* ---- GEMMs on row-major bf16 operands (packed inside each call)
 * out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias[OC] (bias may be NULL) */
void rp_matmul_bf16_forward(float *out, const uint16_t *inp, const uint16_t *w,
                            const float *bias, int N, int IC, int OC, rp_pool *pool);
/* dinp[N,IC] += dout @ w; dweight[OC,IC] += dout^T @ inp; dbias[OC] += sum over
 * rows of dout (fp32 sum of the bf16 values, rows in order). NULL skips. */
void rp_matmul_bf16_backward(float *dinp, float *dweight, float *dbias,
                             const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                             int N, int IC, int OC, rp_pool *pool);
/* The same with dinp overwritten (=, bitwise what a memset to 0 before
 * rp_matmul_bf16_backward gives, without that pass); dweight, dbias accumulate. */
void rp_matmul_bf16_backward_set(float *dinp, float *dweight, float *dbias,
                                 const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                                 int N, int IC, int OC, rp_pool *pool);

/* The same products with the activation operand in fp32, rounded to bf16 (RNE,
 * as rp_bf16_from_f32_array) inside the call: bitwise the results of rounding
 * first and calling the functions above. The AMX kernel rounds while it packs
 * (no separate pass over the operand); the others round into workspace first.
 * backward: dout in fp32; dinp overwritten when dinp_set, else accumulated;
 * dweight accumulates; no dbias (sum the fp32 dout for it). */
void rp_matmul_bf16_forward_f32in(float *out, const float *inp, const uint16_t *w,
                                  const float *bias, int N, int IC, int OC, rp_pool *pool);
void rp_matmul_bf16_backward_f32dout(float *dinp, float *dweight, const float *dout,
                                     const uint16_t *inp, const uint16_t *w, int N, int IC,
                                     int OC, int dinp_set, rp_pool *pool);
/* The forward with an epilogue: each pool thread calls epi(epi_ctx, lo, hi, ith)
 * on the rows [lo, hi) of out it has just finished (every row exactly once),
 * while they are in its caches (the MLP's GELU, rp_matmul_bf16_forward_gelu). */
void rp_matmul_bf16_forward_f32in_epi(float *out, const float *inp, const uint16_t *w,
                                      const float *bias, int N, int IC, int OC, rp_pool *pool,
                                      rp_sgemm_rows_fn epi, void *epi_ctx);
/* The backward with both activations in fp32: dout rounded as above, inp (the
 * layer input, dweight's second operand) rounded as dweight's panels are packed,
 * no pass of its own; dbias (may be NULL) += the column sums of the fp32 dout,
 * bitwise rp_matmul_backward's. Bitwise rounding both first and calling
 * rp_matmul_bf16_backward(_set) for dinp and dweight. */
void rp_matmul_bf16_backward_f32(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const uint16_t *w, int N, int IC, int OC,
                                 int dinp_set, rp_pool *pool);

/* ---- pre-packed weights: pack once per optimizer step, use for every
 * micro-batch. The trainer keeps fp32 master weights; after each step:
 *   rp_bf16_from_f32_array(w16, w32, OC*IC, pool);   (or _stochastic)
 *   rp_bf16_wpack_update(&wp, w16, pool);
 * and its matmuls call the _packed variants. */
typedef struct {
  int IC, OC;
  rp_bf16_fmt fmt;  /* format chosen at init from the active kernel */
  void *fwd;        /* B(k=i, j=o) = w[o][i]: panels over OC, K = IC */
  void *bwd;        /* B(k=o, j=i) = w[o][i]: panels over IC, K = OC (for dinp) */
  size_t bytes;     /* of fwd + bwd */
} rp_bf16_wpack;

/* Allocates (RP_MEM_PARAMS) for the active kernel's format. */
rp_status rp_bf16_wpack_init(rp_bf16_wpack *wp, int IC, int OC);
void rp_bf16_wpack_update(rp_bf16_wpack *wp, const uint16_t *w, rp_pool *pool);
void rp_bf16_wpack_free(rp_bf16_wpack *wp);
void rp_matmul_bf16_forward_packed(float *out, const uint16_t *inp, const rp_bf16_wpack *wp,
                                   const float *bias, int N, rp_pool *pool);
void rp_matmul_bf16_backward_packed(float *dinp, float *dweight, float *dbias,
                                    const uint16_t *dout, const uint16_t *inp,
                                    const rp_bf16_wpack *wp, int N, rp_pool *pool);

/* Frees the shared GEMM workspace (it is kept between calls; grows as needed). */
void rp_bf16_workspace_release(void);

/* ---- reference loops (the oracle): the summation order above, one output at a time */
void rp_matmul_bf16_forward_ref(float *out, const uint16_t *inp, const uint16_t *w,
                                const float *bias, int N, int IC, int OC);
void rp_matmul_bf16_backward_ref(float *dinp, float *dweight, float *dbias,
                                 const uint16_t *dout, const uint16_t *inp,
                                 const uint16_t *w, int N, int IC, int OC);
/* The same in the summation order of kernel k: the AMX kernel's own (see
 * summation order; checked bitwise against the hardware in tests/bf16, without
 * its denormal flush), rp_bf16.h's for every other. */
void rp_matmul_bf16_forward_ref_of(rp_bf16_kernel k, float *out, const uint16_t *inp,
                                   const uint16_t *w, const float *bias, int N, int IC, int OC);
void rp_matmul_bf16_backward_ref_of(rp_bf16_kernel k, float *dinp, float *dweight,
                                    float *dbias, const uint16_t *dout, const uint16_t *inp,
                                    const uint16_t *w, int N, int IC, int OC);

#endif
