/* AVX-512F inner loops of flash attention, compiled for AVX-512 through target
 * attributes (whatever -march the build uses) and only called when the rp_isa.h
 * ceiling allows avx512.
 *
 * The gemm is a register-blocked micro-kernel: an MR x (16*NV) block of C stays
 * in zmm registers while k runs over the whole inner dimension, B rows are loaded
 * as vectors and A elements are broadcast. NV*MR <= 24 accumulators leaves room
 * for the B vectors in the 32 registers; MR grows as NV shrinks so that a narrow
 * head (HS = 16, 32) still has enough independent FMA chains to hide latency.
 * The k loop is unrolled twice: the pointer increments and the loop branch
 * are scalar uops that the scheduler may put on the two vector FMA ports
 * (3 per 24 FMAs); halving them measured 3-5 % on the attention shapes in
 * isolation (Sapphire Rapids, thread CPU time, 15 tries). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>

#include "flash_attention_internal.h"

#define T512 __attribute__((target("avx512f,avx2,fma")))
#define AI static inline __attribute__((always_inline))

#include "flash_block512.h"

#define BLOAD(i, v) const __m512 b##v = _mm512_maskz_loadu_ps(mk##v, bk + 16 * (v));
#define FMA(i, v) c##i##_##v = _mm512_fmadd_ps(_mm512_set1_ps(ak[(i) * rsa]), b##v, c##i##_##v);

/* C[MR, 16*NV] (= or +=) A[MR, K] B[K, 16*NV]; the last vector column is masked */
BLOCK_KERNEL(k6x4, T512, float, 6, 4, FMA)
BLOCK_KERNEL(k8x3, T512, float, 8, 3, FMA)
BLOCK_KERNEL(k12x2, T512, float, 12, 2, FMA)
BLOCK_KERNEL(k12x1, T512, float, 12, 1, FMA)
/* The same for blocks whose every column exists (nearly all: HS = 64, keys in
 * 192-blocks), no load or store masked. A masked zmm load costs more than a
 * plain one here: a copy of k6x4's loop on L1 data ran 2-4 % faster with its
 * fourth B load plain; the flash forward+backward at T = 2048 without the mask,
 * one thread, 8 alternating pairs: 0.977 of the time (6 of 8 faster; the same
 * bits). */
BLOCK_KERNEL_W(k6x4w, T512, float, 6, 4, FMA, 1)
BLOCK_KERNEL_W(k8x3w, T512, float, 8, 3, FMA, 1)
BLOCK_KERNEL_W(k12x2w, T512, float, 12, 2, FMA, 1)
BLOCK_KERNEL_W(k12x1w, T512, float, 12, 1, FMA, 1)

typedef void (*kern_fn)(int, const float *, long, long, const float *, long, float *, long,
                        int, __mmask16);
static const kern_fn kern_tab[5] = {0, k12x1, k12x2, k8x3, k6x4};
static const kern_fn kern_tab_whole[5] = {0, k12x1w, k12x2w, k8x3w, k6x4w};
static const int kern_mr[5] = {0, 12, 12, 8, 6};

/* A ragged last row block (fewer rows than the kernel's MR) runs as blocks of
 * 8, 4, 2 and 1 rows of the same width: each C element is the same sum in the
 * same k order as in a full block, so the same bits. These replaced a copy of
 * the rows into a zero-padded MR-row panel (element by element, redone for
 * every column panel) and a padded C tile: 2.4 % of the samples at T = 256
 * (24 heads, one thread), where the last query block (64 rows), the 64-key
 * last key block and every diagonal strip's visible keys leave ragged rows. */
BLOCK_KERNEL(k8x2, T512, float, 8, 2, FMA)
BLOCK_KERNEL(k8x1, T512, float, 8, 1, FMA)
BLOCK_KERNEL(k4x4, T512, float, 4, 4, FMA)
BLOCK_KERNEL(k4x3, T512, float, 4, 3, FMA)
BLOCK_KERNEL(k4x2, T512, float, 4, 2, FMA)
BLOCK_KERNEL(k4x1, T512, float, 4, 1, FMA)
BLOCK_KERNEL(k2x4, T512, float, 2, 4, FMA)
BLOCK_KERNEL(k2x3, T512, float, 2, 3, FMA)
BLOCK_KERNEL(k2x2, T512, float, 2, 2, FMA)
BLOCK_KERNEL(k2x1, T512, float, 2, 1, FMA)
BLOCK_KERNEL(k1x4, T512, float, 1, 4, FMA)
BLOCK_KERNEL(k1x3, T512, float, 1, 3, FMA)
BLOCK_KERNEL(k1x2, T512, float, 1, 2, FMA)
BLOCK_KERNEL(k1x1, T512, float, 1, 1, FMA)

/* [block][nv]: the kernels of 8, 4, 2 and 1 rows (none of 8 x 4: 32
 * accumulators) */
static const int small_mr[4] = {8, 4, 2, 1};
static const kern_fn small_tab[4][5] = {{0, k8x1, k8x2, k8x3, 0},
                                        {0, k4x1, k4x2, k4x3, k4x4},
                                        {0, k2x1, k2x2, k2x3, k2x4},
                                        {0, k1x1, k1x2, k1x3, k1x4}};

T512 static void ragged_rows(int nv, int mr, int K, const float *a, long rsa, long csa,
                             const float *b, long ldb, float *c, long ldc, int acc,
                             __mmask16 ml) {
  for (int s = 0; s < 4; s++)
    for (const int r = small_mr[s]; mr >= r && small_tab[s][nv]; mr -= r) {
      small_tab[s][nv](K, a, rsa, csa, b, ldb, c, ldc, acc, ml);
      a += (long)r * rsa;
      c += (long)r * ldc;
    }
}

/* Inner dimensions longer than this run in chunks (C accumulating between
 * them): the K x 64 panel of B that every row block re-reads must stay in L1
 * with the A rows and C block; 96 rows are 24 KiB of a 48 KiB L1, while the
 * 192-key panels of P V and dS K (48 KiB) streamed from L2. Measured on
 * Sapphire Rapids, T = 2048, non-causal: forward 4 %, backward 2 % faster;
 * chunks of 64 were no better. */
#define KCHUNK_B 96

T512 static void gemm512_panels(int M, int N, int K, const float *a, long rsa, long csa,
                                const float *b, long ldb, float *c, long ldc, int acc);

T512 static void gemm512(int M, int N, int K, const float *a, long rsa, long csa,
                         const float *b, long ldb, float *c, long ldc, int acc) {
  /* equal chunks: 192 -> 2 x 96, 100 -> 2 x 50, never a sliver */
  const int nch = (K + KCHUNK_B - 1) / KCHUNK_B, ch = nch > 0 ? (K + nch - 1) / nch : K;
  if (nch <= 1) {
    gemm512_panels(M, N, K, a, rsa, csa, b, ldb, c, ldc, acc);
    return;
  }
  for (int k0 = 0; k0 < K; k0 += ch) {
    const int kk = K - k0 < ch ? K - k0 : ch;
    /* a later chunk finds C where the one before stored it */
    gemm512_panels(M, N, kk, a + (long)k0 * csa, rsa, csa, b + (long)k0 * ldb, ldb, c, ldc,
                   k0 > 0 ? RP_FLASH_ADD : acc);
  }
}

T512 static void gemm512_panels(int M, int N, int K, const float *a, long rsa, long csa,
                                const float *b, long ldb, float *c, long ldc, int acc) {
  /* column panels of 64 outer: the K x 64 panel of B stays in L1 while all row
   * blocks of A stream past it */
  for (int j = 0; j < N; j += 64) {
    int nn = N - j < 64 ? N - j : 64;
    int nv = (nn + 15) / 16;
    int rem = nn - 16 * (nv - 1);
    __mmask16 ml = (__mmask16)(rem == 16 ? 0xFFFF : (1u << rem) - 1);
    const kern_fn kf = rem == 16 ? kern_tab_whole[nv] : kern_tab[nv];
    const int MR = kern_mr[nv];
    int i = 0;
    for (; i + MR <= M; i += MR)
      kf(K, a + (long)i * rsa, rsa, csa, b + j, ldb, c + (long)i * ldc + j, ldc, acc, ml);
    if (i < M)
      ragged_rows(nv, M - i, K, a + (long)i * rsa, rsa, csa, b + j, ldb, c + (long)i * ldc + j,
                  ldc, acc, ml);
  }
}

/* 2^t on 16 lanes: t = n + f with n = floor(t), f in [0, 1) in one vreduceps,
 * 2^f by the degree-5 polynomial (rp_flash_exp2_poly), and scalef(p, t)
 * multiplies by 2^floor(t) = 2^n itself, so n is never formed: 9 vector ops
 * and the clamp, against 13 with a rounded n (roundscale is 2 uops). The
 * softmax calls it on t = log2(e) (scale s - m), one FMA from the score. t is
 * clamped at -150, where 2^t is 0 in fp32, so that -inf cannot make f a NaN. */
#define T512DQ __attribute__((target("avx512f,avx512dq,avx2,fma")))
T512DQ AI __m512 exp2_512(__m512 t) {
  t = _mm512_max_ps(t, _mm512_set1_ps(-150.0f));
  __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(rp_flash_exp2_poly[0]);
  for (int i = 1; i <= RP_FLASH_EXP2_DEGREE; i++)
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(rp_flash_exp2_poly[i]));
  return _mm512_scalef_ps(p, t);
}

static inline __mmask16 tail_mask(int rem) { return (__mmask16)((1u << rem) - 1); }

T512 static float rowmax512(const float *x, int n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
  if (i < n) m = _mm512_mask_max_ps(m, tail_mask(n - i), m, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  return _mm512_reduce_max_ps(m);
}

T512DQ static float expsum512(float *x, int n, float scale, float mx) {
  const float log2e = 1.44269504088896341f;
  const __m512 vs = _mm512_set1_ps(scale * log2e), vm = _mm512_set1_ps(-mx * log2e);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 e0 = exp2_512(_mm512_fmadd_ps(_mm512_loadu_ps(x + i), vs, vm));
    __m512 e1 = exp2_512(_mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), vs, vm));
    _mm512_storeu_ps(x + i, e0);
    _mm512_storeu_ps(x + i + 16, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  for (; i < n; i += 16) {
    __mmask16 mk = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
    __m512 e = exp2_512(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x + i), vs, vm));
    _mm512_mask_storeu_ps(x + i, mk, e);
    s0 = _mm512_mask_add_ps(s0, mk, s0, e);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

T512 static void dsoft512(float *ds, const float *p, int n, float d, float scale) {
  const __m512 vd = _mm512_set1_ps(d), vs = _mm512_set1_ps(scale);
  for (int i = 0; i < n; i += 16) {
    __mmask16 mk = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
    __m512 dp = _mm512_maskz_loadu_ps(mk, ds + i);
    __m512 pv = _mm512_maskz_loadu_ps(mk, p + i);
    __m512 r = _mm512_mul_ps(_mm512_mul_ps(pv, vs), _mm512_sub_ps(dp, vd));
    _mm512_mask_storeu_ps(ds + i, mk, r);
  }
}

T512 static float dot512(const float *x, const float *y, int n) {
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    __mmask16 mk = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
    s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x + i), _mm512_maskz_loadu_ps(mk, y + i), s);
  }
  return _mm512_reduce_add_ps(s);
}

T512 static void scal512(float *x, int n, float a) {
  const __m512 va = _mm512_set1_ps(a);
  for (int i = 0; i < n; i += 16) {
    __mmask16 mk = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), va));
  }
}

const rp_flash_ops rp_flash_ops_avx512 = {gemm512, rowmax512, expsum512,           dsoft512,
                                          dot512,  scal512,   rp_flash_pack_t_avx2};

#else
#include "flash_attention_internal.h"
/* Not an x86-64 GNU compiler: the table points at the portable loops and
 * rp_flash_isa_supported reports AVX-512 as unavailable. */
const rp_flash_ops rp_flash_ops_avx512 = {0};
#endif
