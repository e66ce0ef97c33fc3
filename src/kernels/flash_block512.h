/* The register-block spelling shared by the fp32 (flash_attention_avx512.c) and
 * bf16 (flash_attention_bf16.c) AVX-512 flash kernels: an MR x (16*NV) block of C
 * lives in named zmm accumulators c<i>_<v>. ROWS_n(RV, OP) applies OP to every
 * (row i, vector v) of an n-row block, RV_NV(OP, i) to the vectors of row i. The
 * including file defines its BLOAD and multiply-add for its element type and
 * provides mk0..mk3 (the last vector is masked to the block's width).
 *
 * Accumulators must be named variables, not an array: GCC 12 keeps an array of
 * __m512 in memory and stores it back on every k, which halves the speed. */
#ifndef RP_FLASH_BLOCK512_H
#define RP_FLASH_BLOCK512_H

#define DECL(i, v) __m512 c##i##_##v;
#define ZERO(i, v) c##i##_##v = _mm512_setzero_ps();
/* C's lines go through cp and lc, copies of c and ldc that GCC cannot see
 * through (RP_OPAQUE, an empty asm): otherwise it computes all MR x NV
 * addresses before the k loop, for the loads and the stores alike, spills them
 * to the stack and reloads one before each store (k6x4: some 60 instructions
 * of set-up a call). Measured one thread, bench_flash_cpu, 6 alternating pairs:
 * T = 1024 non-causal 40.55 -> 39.8 ms, T = 2048 causal 84.4 -> 83.0 ms
 * (medians); the AVX2 kernel's same change measured nothing and is not made. */
#define LOAD(i, v) c##i##_##v = _mm512_maskz_loadu_ps(mk##v, cp + (i) * lc + 16 * (v));
#define PREFETCH_C(i, v) _mm_prefetch((const char *)(cp + (i) * lc + 16 * (v)), _MM_HINT_T0);
#define ADD_C(i, v) \
  c##i##_##v = _mm512_add_ps(c##i##_##v, _mm512_maskz_loadu_ps(mk##v, cp + (i) * lc + 16 * (v)));
#define STORE(i, v) _mm512_mask_storeu_ps(cp + (i) * lc + 16 * (v), mk##v, c##i##_##v);
#define RP_OPAQUE(p) __asm__ volatile("" : "+r"(p))
#define RV_1(OP, i) OP(i, 0)
#define RV_2(OP, i) OP(i, 0) OP(i, 1)
#define RV_3(OP, i) OP(i, 0) OP(i, 1) OP(i, 2)
#define RV_4(OP, i) OP(i, 0) OP(i, 1) OP(i, 2) OP(i, 3)
#define ROWS_1(RV, OP) RV(OP, 0)
#define ROWS_2(RV, OP) RV(OP, 0) RV(OP, 1)
#define ROWS_4(RV, OP) ROWS_2(RV, OP) RV(OP, 2) RV(OP, 3)
#define ROWS_6(RV, OP) ROWS_4(RV, OP) RV(OP, 4) RV(OP, 5)
#define ROWS_8(RV, OP) ROWS_6(RV, OP) RV(OP, 6) RV(OP, 7)
#define ROWS_12(RV, OP) ROWS_8(RV, OP) RV(OP, 8) RV(OP, 9) RV(OP, 10) RV(OP, 11)

/* the masks of a block whose last of NV vectors holds the ragged columns (ml) */
#define BLOCK_MASKS(NV, WHOLE)                                                            \
  const __mmask16 full = 0xFFFF, last = WHOLE ? full : ml;                                \
  const __mmask16 mk0 = NV == 1 ? last : full, mk1 = NV == 2 ? last : full;               \
  const __mmask16 mk2 = NV == 3 ? last : full, mk3 = last;                                \
  (void)mk0, (void)mk1, (void)mk2, (void)mk3, (void)ml;

/* NAME: C[MR, 16*NV] (= or +=) A[MR, K] B[K, 16*NV] over K steps of element type T
 * (a float, or a uint32_t pair of bf16); the k loop keeps A's broadcast element at
 * ak and B's row at bk for the file's BLOAD and MADD; unrolled twice because the
 * pointer increments and the branch are scalar uops that compete for the FMA
 * ports. acc (flash_attention_internal.h): RP_FLASH_ADD loads C into the
 * accumulators first; RP_FLASH_ADD_COLD prefetches C, starts from 0 and adds C
 * after the loop. Loaded first, each accumulator's chain of multiply-adds
 * waited on its C line: the backward's gradient rows come from L2 or memory
 * at a key block's first tile, and behind a product 24 deep that wait is a
 * large part of the block. The backward's accumulations add last: default
 * model, 4 alternating pairs of step profiles, quiet backward attention
 * 15.44-15.72 -> 14.26-14.95 ms a step (one thread, bench_flash_cpu, T = 256
 * causal with 24 heads: 3.83-4.06 -> 3.64-3.90 ms). The forward's O += P V,
 * its O rows in L1, measured 3 % slower adding last and loads them first. */
#define BLOCK_KERNEL(NAME, ATTR, T, MR, NV, MADD) BLOCK_KERNEL_W(NAME, ATTR, T, MR, NV, MADD, 0)
/* WHOLE = 1: every column of the block exists (ml is ignored), so no load or
 * store is masked */
#define BLOCK_KERNEL_W(NAME, ATTR, T, MR, NV, MADD, WHOLE)                                \
  ATTR static void NAME(int K, const T *a, long rsa, long csa, const T *b, long ldb,      \
                        float *c, long ldc, int acc, __mmask16 ml) {                     \
    BLOCK_MASKS(NV, WHOLE)                                                                \
    ROWS_##MR(RV_##NV, DECL)                                                              \
    if (acc == RP_FLASH_ADD) {                                                            \
      float *cp = c; long lc = ldc; RP_OPAQUE(cp); RP_OPAQUE(lc);                          \
      ROWS_##MR(RV_##NV, LOAD)                                                            \
    } else {                                                                              \
      if (acc == RP_FLASH_ADD_COLD) {                                                     \
        float *cp = c; long lc = ldc; RP_OPAQUE(cp); RP_OPAQUE(lc);                        \
        ROWS_##MR(RV_##NV, PREFETCH_C)                                                    \
      }                                                                                   \
      ROWS_##MR(RV_##NV, ZERO)                                                            \
    }                                                                                     \
    _Pragma("GCC unroll 2") for (int k = 0; k < K; k++) {                                 \
      const T *ak = a + (long)k * csa, *bk = b + (long)k * ldb;                           \
      RV_##NV(BLOAD, 0)                                                                   \
      ROWS_##MR(RV_##NV, MADD)                                                            \
    }                                                                                     \
    float *cp = c; long lc = ldc; RP_OPAQUE(cp); RP_OPAQUE(lc);                            \
    if (acc == RP_FLASH_ADD_COLD) {                                                       \
      ROWS_##MR(RV_##NV, ADD_C)                                                           \
    }                                                                                     \
    ROWS_##MR(RV_##NV, STORE)                                                             \
  }

#endif
