/* bf16 inner loops of flash attention (rp_flash_config.bf16): the five products
 * take bf16 operands and add two products per lane and instruction
 * (vdpbf16ps), accumulating in fp32; the softmax, the statistics and every
 * output stay fp32. Compiled for AVX512-BF16 through target attributes and
 * called only when the rp_isa.h ceiling allows avx512bf16 (flash_attention.c).
 *
 * Operands are bf16 pairs along the inner dimension k, one uint32_t per pair
 * (element 2p in the low half, as vdpbf16ps reads them), so every layout is
 * the fp32 one with k halved:
 *   A(i, p) = a[i*rsa + p*csa]     a row-major A is "rows" (rsa = pairs per
 *                                  row, csa = 1); a transposed one (P^T, dS^T)
 *                                  is "pair rows" of the untransposed rows;
 *   B(p, n) = b[p*ldb + n]         columns contiguous, as the fp32 kernel's B.
 * The three packers below make them from fp32 rows with vcvtne2ps2bf16: round
 * to nearest even, NaN made quiet, and denormal inputs to signed zero (the
 * instruction's fixed rule, which no MXCSR setting changes; every CPU that runs
 * this path has it, so the bits do not depend on the CPU). It is one
 * instruction per 32 floats where the bf16 GEMM's integer rounding
 * (gemm_bf16_rne512.h, which keeps denormals) takes about ten per 16. On Zen 5
 * a 24 x 64 strip of P or dS packs in 71 ns instead of 190 (the 24 x 64 x 64
 * product it feeds takes 500), a 64-key K^T block in 0.56 us instead of 1.14;
 * with the integer rounding the bf16 attention was slower than fp32's. Pairs past the
 * last element of an odd k hold +0 on the side that the packer controls, so an
 * odd inner dimension adds 0 * (a finite operand). */
#include "flash_attention_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#include "gemm_bf16_rne512.h"

#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

/* The register blocks of the fp32 AVX-512 kernel (flash_attention_avx512.c):
 * MR rows x NV vectors of 16 columns in named accumulators, B vectors loaded,
 * A pairs broadcast; NV*MR <= 24. */
#include "flash_block512.h"

#define BLOAD(i, v) \
  const __m512bh b##v = (__m512bh)_mm512_maskz_loadu_epi32(mk##v, bk + 16 * (v));
#define DP(i, v) \
  c##i##_##v = _mm512_dpbf16_ps(c##i##_##v, (__m512bh)_mm512_set1_epi32((int)ak[(i) * rsa]), b##v);

/* C[MR, 16*NV] (= or +=) A[MR, 2 K] B[2 K, 16*NV]: K steps of bf16 pairs */
BLOCK_KERNEL(b6x4, TBF, uint32_t, 6, 4, DP)
BLOCK_KERNEL(b8x3, TBF, uint32_t, 8, 3, DP)
BLOCK_KERNEL(b12x2, TBF, uint32_t, 12, 2, DP)
BLOCK_KERNEL(b12x1, TBF, uint32_t, 12, 1, DP)

typedef void (*kern_fn)(int, const uint32_t *, long, long, const uint32_t *, long, float *,
                        long, int, __mmask16);
static const kern_fn kern_tab[5] = {0, b12x1, b12x2, b8x3, b6x4};
static const int kern_mr[5] = {0, 12, 12, 8, 6};

#define KCHUNK 128 /* pairs of a ragged block's padded A panel per kernel call */

/* A ragged last row block: rows copied into a zero-padded MR-row panel, C
 * through a padded tile. The fp32 kernels run such blocks as 8/4/2/1-row
 * register blocks instead; the bf16 ones have not been changed (no machine at
 * hand where the bf16 products run by default: rp_flash_bf16_pays). */
TBF static void ragged_rows(kern_fn kf, int MR, int mr, int nn, int KP, const uint32_t *a,
                            long rsa, long csa, const uint32_t *b, long ldb, float *c, long ldc,
                            int acc, __mmask16 ml) {
  uint32_t apad[12 * KCHUNK];
  float cpad[12 * 64];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < nn; j++) cpad[i * 64 + j] = acc && i < mr ? c[(long)i * ldc + j] : 0.0f;
  for (int p0 = 0; p0 < KP; p0 += KCHUNK) {
    const int pp = KP - p0 < KCHUNK ? KP - p0 : KCHUNK;
    for (int p = 0; p < pp; p++)
      for (int i = 0; i < MR; i++)
        apad[p * MR + i] = i < mr ? a[(long)i * rsa + (long)(p0 + p) * csa] : 0u;
    kf(pp, apad, 1, MR, b + (long)p0 * ldb, ldb, cpad, 64, 1, ml);
  }
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nn; j++) c[(long)i * ldc + j] = cpad[i * 64 + j];
}

/* Column panels of 64 outer, row blocks inner (the 2KP x 64 panel of B stays in
 * L1: 24 KiB at k = 192, the fp32 kernel's chunk in half the bytes). */
TBF static void gemm_bf16(int M, int N, int KP, const uint32_t *a, long rsa, long csa,
                          const uint32_t *b, long ldb, float *c, long ldc, int acc) {
  for (int j = 0; j < N; j += 64) {
    const int nn = N - j < 64 ? N - j : 64, nv = (nn + 15) / 16, rem = nn - 16 * (nv - 1);
    const __mmask16 ml = (__mmask16)(rem == 16 ? 0xFFFF : (1u << rem) - 1);
    const kern_fn kf = kern_tab[nv];
    const int MR = kern_mr[nv];
    int i = 0;
    for (; i + MR <= M; i += MR)
      kf(KP, a + (long)i * rsa, rsa, csa, b + j, ldb, c + (long)i * ldc + j, ldc, acc, ml);
    if (i < M)
      ragged_rows(kf, MR, M - i, nn, KP, a + (long)i * rsa, rsa, csa, b + j, ldb,
                  c + (long)i * ldc + j, ldc, acc, ml);
  }
}

/* bf16 of 32 floats from two masked loads (lanes outside a mask read +0):
 * element i of lo in word i, of hi in word 16 + i. */
TBF static inline __m512i cvt32(const float *lo, __mmask16 mlo, const float *hi, __mmask16 mhi) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mhi, hi),
                                      _mm512_maskz_loadu_ps(mlo, lo));
}

static inline __mmask32 first_n32(int n) {
  return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1u);
}

/* rows: dst[r*ldd + p] = (src[r][2p], src[r][2p+1]) for p < ceil(K/2), r < n:
 * a row's bf16 in memory order, 32 per conversion. */
TBF static void pack_rows16(uint32_t *dst, long ldd, const float *src, long ld, int n, int K) {
  const int K2 = (K + 1) & ~1;
  for (int r = 0; r < n; r++) {
    uint16_t *o = (uint16_t *)(dst + (long)r * ldd);
    const float *x = src + (long)r * ld;
    for (int e = 0; e < K2; e += 32)  /* lanes past K load +0: the odd pad */
      _mm512_mask_storeu_epi16(o + e, first_n32(K2 - e),
                               cvt32(x + e, rp_rne512_first_n(K - e), x + e + 16,
                                     rp_rne512_first_n(K - e - 16)));
  }
}

/* pair rows: dst[p*ldd + w] = (src[2p][w], src[2p+1][w]) for p < np, w < W;
 * rows at or past n are +0 (an odd last row pairs with zero). One conversion
 * takes 16 columns of both rows; vpermw interleaves them into pairs. */
TBF static void pack_pair_rows16(uint32_t *dst, long ldd, const float *src, long ld, int n,
                                 int W, int np) {
  const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                         24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17,
                                         1, 16, 0);
  for (int p = 0; p < np; p++) {
    const float *lo = src + 2L * p * ld, *hi = lo + ld;
    const int has_lo = 2 * p < n, has_hi = 2 * p + 1 < n;
    for (int e = 0; e < W; e += 16) {
      const __mmask16 m = rp_rne512_first_n(W - e);
      const __m512i v = cvt32(lo + e, has_lo ? m : 0, hi + e, has_hi ? m : 0);
      _mm512_mask_storeu_epi32(dst + (long)p * ldd + e, m, _mm512_permutexvar_epi16(inter, v));
    }
  }
}

/* transposed pairs: dst[p*ldd + r] = (src[r][2p], src[r][2p+1]) for r < n,
 * p < ceil(HS/2): K^T and V^T as B of S = Q K^T and dP = dO V^T. Sixteen rows
 * at a time go to a row-major buffer of pairs, which the fp32 transpose moves
 * out as 32-bit words (its shuffles keep every bit). */
TBF static void pack_t16(uint32_t *dst, long ldd, const float *src, long ld, int n, int HS) {
  const int hp = (HS + 1) / 2;
  uint32_t rows[16 * 128];  /* HS <= 256 */
  for (int r0 = 0; r0 < n; r0 += 16) {
    const int nr = n - r0 < 16 ? n - r0 : 16;
    pack_rows16(rows, hp, src + (long)r0 * ld, ld, nr, HS);
    rp_flash_pack_t_avx2((float *)(dst + r0), ldd, (const float *)rows, hp, nr, hp);
  }
}

const rp_flash_bf16_ops rp_flash_bf16_avx512 = {gemm_bf16, pack_rows16, pack_pair_rows16,
                                                pack_t16};

#else
/* Not an x86-64 GNU compiler: no bf16 path (rp_flash_bf16_active is 0). */
const rp_flash_bf16_ops rp_flash_bf16_avx512 = {0};
#endif
