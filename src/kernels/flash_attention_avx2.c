/* AVX2 + FMA inner loops of flash attention (target attributes; called only
 * when the rp_isa.h ceiling allows avx2). Same structure as the AVX-512
 * file with 8-lane vectors and 16 registers: micro-kernel blocks of up to 6 x 16
 * (12 accumulators), masked loads/stores for ragged column edges. The k loop
 * is unrolled twice, as in the AVX-512 kernel: at the avx2 ceiling
 * (RINGPIPE_ISA=avx2, Sapphire Rapids, bench_flash_cpu one thread, 5 pairs)
 * forward+backward took 0.971 of the time at T = 2048 non-causal and 0.970 at
 * T = 1024 causal. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>

#include "flash_attention_internal.h"

#define TAVX2 __attribute__((target("avx2,fma")))
#define AI static inline __attribute__((always_inline))

/* lanes [0, rem) set, for maskload/maskstore */
TAVX2 AI __m256i lane_mask(int rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Named accumulators (see the AVX-512 file for why not an array). */
#define DECL(i, v) __m256 c##i##_##v;
#define ZERO(i, v) c##i##_##v = _mm256_setzero_ps();
/* whole = 1 (the kernel's WHOLE): every column of the block exists, plain loads and stores (a
 * maskload is one more uop on the FMA ports' side of the machine on Intel and
 * AMD alike); 0: the last vector is masked. */
#define CLOAD(i, v) (whole ? _mm256_loadu_ps(c + (i) * ldc + 8 * (v)) \
                          : _mm256_maskload_ps(c + (i) * ldc + 8 * (v), mk##v))
#define LOAD(i, v) c##i##_##v = CLOAD(i, v);
#define PREFETCH_C(i, v) _mm_prefetch((const char *)(c + (i) * ldc + 8 * (v)), _MM_HINT_T0);
#define ADD_C(i, v) c##i##_##v = _mm256_add_ps(c##i##_##v, CLOAD(i, v));
#define STORE(i, v) if (whole) _mm256_storeu_ps(c + (i) * ldc + 8 * (v), c##i##_##v); \
                    else _mm256_maskstore_ps(c + (i) * ldc + 8 * (v), mk##v, c##i##_##v);
#define BLOAD(i, v) const __m256 b##v = whole ? _mm256_loadu_ps(bk + 8 * (v)) \
                                              : _mm256_maskload_ps(bk + 8 * (v), mk##v);
#define FMA(i, v) c##i##_##v = _mm256_fmadd_ps(_mm256_broadcast_ss(ak + (i) * rsa), b##v, c##i##_##v);
#define RV_1(OP, i) OP(i, 0)
#define RV_2(OP, i) OP(i, 0) OP(i, 1)
#define ROWS_1(RV, OP) RV(OP, 0)
#define ROWS_2(RV, OP) RV(OP, 0) RV(OP, 1)
#define ROWS_4(RV, OP) ROWS_2(RV, OP) RV(OP, 2) RV(OP, 3)
#define ROWS_6(RV, OP) ROWS_4(RV, OP) RV(OP, 4) RV(OP, 5)

/* C[MR, 8*NV] (= or +=) A[MR, K] B[K, 8*NV]; the last vector column is masked.
 * acc as in the AVX-512 block (flash_block512.h): RP_FLASH_ADD_COLD adds C
 * after the loop. Default model at the avx2 ceiling, 3 alternating pairs of
 * step profiles: quiet backward attention 25.63-26.38 -> 22.24-23.04 ms a
 * step (one thread, bench_flash_cpu, T = 256 causal with 24 heads: 6.97-7.71
 * -> 6.28-6.68 ms). */
#define KERNEL(NAME, MR, NV, WHOLE)                                                       \
  TAVX2 static void NAME(int K, const float *a, long rsa, long csa, const float *b,       \
                         long ldb, float *c, long ldc, int acc, __m256i ml) {             \
    const __m256i full = _mm256_set1_epi32(-1);                                           \
    const __m256i mk0 = NV == 1 ? ml : full, mk1 = ml;                                    \
    const int whole = WHOLE;                                                              \
    (void)mk1;                                                                            \
    ROWS_##MR(RV_##NV, DECL)                                                              \
    if (acc == RP_FLASH_ADD) {                                                            \
      ROWS_##MR(RV_##NV, LOAD)                                                            \
    } else {                                                                              \
      if (acc == RP_FLASH_ADD_COLD) {                                                     \
        ROWS_##MR(RV_##NV, PREFETCH_C)                                                    \
      }                                                                                   \
      ROWS_##MR(RV_##NV, ZERO)                                                            \
    }                                                                                     \
    _Pragma("GCC unroll 2") for (int k = 0; k < K; k++) {                                 \
      const float *ak = a + (long)k * csa, *bk = b + (long)k * ldb;                       \
      RV_##NV(BLOAD, 0)                                                                   \
      ROWS_##MR(RV_##NV, FMA)                                                             \
    }                                                                                     \
    if (acc == RP_FLASH_ADD_COLD) {                                                       \
      ROWS_##MR(RV_##NV, ADD_C)                                                           \
    }                                                                                     \
    ROWS_##MR(RV_##NV, STORE)                                                             \
  }

KERNEL(k6x2, 6, 2, 0)
KERNEL(k6x1, 6, 1, 0)
KERNEL(k6x2w, 6, 2, 1)
/* A ragged last row block as blocks of 4, 2 and 1 rows (the same sums in the
 * same order, so the same bits), not a copy through a zero-padded 6-row
 * panel: see the AVX-512 file. */
KERNEL(k4x2, 4, 2, 0)
KERNEL(k4x1, 4, 1, 0)
KERNEL(k2x2, 2, 2, 0)
KERNEL(k2x1, 2, 1, 0)
KERNEL(k1x2, 1, 2, 0)
KERNEL(k1x1, 1, 1, 0)

typedef void (*kern_fn)(int, const float *, long, long, const float *, long, float *, long, int,
                        __m256i);
static const int small_mr[3] = {4, 2, 1};
static const kern_fn small_tab[3][3] = {{0, k4x1, k4x2}, {0, k2x1, k2x2}, {0, k1x1, k1x2}};

TAVX2 static void ragged_rows(int nv, int mr, int K, const float *a, long rsa, long csa,
                              const float *b, long ldb, float *c, long ldc, int acc,
                              __m256i ml) {
  for (int s = 0; s < 3; s++)
    for (const int r = small_mr[s]; mr >= r; mr -= r) {
      small_tab[s][nv](K, a, rsa, csa, b, ldb, c, ldc, acc, ml);
      a += (long)r * rsa;
      c += (long)r * ldc;
    }
}

TAVX2 static void gemm256(int M, int N, int K, const float *a, long rsa, long csa,
                          const float *b, long ldb, float *c, long ldc, int acc) {
  for (int j = 0; j < N; j += 16) {
    int nn = N - j < 16 ? N - j : 16;
    int nv = (nn + 7) / 8;
    __m256i ml = lane_mask(nn - 8 * (nv - 1));
    int i = 0;
    for (; i + 6 <= M; i += 6) {
      if (nn == 16)
        k6x2w(K, a + (long)i * rsa, rsa, csa, b + j, ldb, c + (long)i * ldc + j, ldc, acc, ml);
      else if (nv == 2)
        k6x2(K, a + (long)i * rsa, rsa, csa, b + j, ldb, c + (long)i * ldc + j, ldc, acc, ml);
      else
        k6x1(K, a + (long)i * rsa, rsa, csa, b + j, ldb, c + (long)i * ldc + j, ldc, acc, ml);
    }
    if (i < M)
      ragged_rows(nv, M - i, K, a + (long)i * rsa, rsa, csa, b + j, ldb, c + (long)i * ldc + j,
                  ldc, acc, ml);
  }
}

/* 2^t on 8 lanes (see exp2_512 in the AVX-512 file for the polynomial):
 * n = floor(t) by the round-to-nearest of t - 1/2 against 1.5 * 2^23 (no
 * vroundps, 2 uops on Intel, and no float-to-int conversion: the low bits of
 * nb are n), f = t - n in [0, 1] (1 only where t is an integer and the tie
 * went down, which the polynomial covers), 2^n built in the exponent bits.
 * t is clamped at -126 where 2^n is the smallest normal float (1e-38: no sum
 * here can tell it from 0). t <= 0 in the softmax. */
TAVX2 AI __m256 exp2_256(__m256 t) {
  const __m256 magic = _mm256_set1_ps(12582912.0f); /* 1.5 * 2^23 */
  t = _mm256_max_ps(t, _mm256_set1_ps(-126.0f));
  __m256 nb = _mm256_add_ps(_mm256_sub_ps(t, _mm256_set1_ps(0.5f)), magic);
  __m256 f = _mm256_sub_ps(t, _mm256_sub_ps(nb, magic));
  __m256 p = _mm256_set1_ps(rp_flash_exp2_poly[0]);
  for (int i = 1; i <= RP_FLASH_EXP2_DEGREE; i++)
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(rp_flash_exp2_poly[i]));
  /* bits(nb) = bits(1.5 * 2^23) + n; shifting by 23 drops the constant */
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(nb), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

TAVX2 AI float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

TAVX2 static float rowmax256(const float *x, int n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

TAVX2 static float expsum256(float *x, int n, float scale, float mx) {
  const float log2e = 1.44269504088896341f;
  const __m256 vs = _mm256_set1_ps(scale * log2e), vm = _mm256_set1_ps(-mx * log2e);
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  /* plain loads where the vector is whole: a maskload costs an extra uop */
  for (; i + 16 <= n; i += 16) {
    __m256 e0 = exp2_256(_mm256_fmadd_ps(_mm256_loadu_ps(x + i), vs, vm));
    __m256 e1 = exp2_256(_mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), vs, vm));
    _mm256_storeu_ps(x + i, e0);
    _mm256_storeu_ps(x + i + 8, e1);
    s0 = _mm256_add_ps(s0, e0);
    s1 = _mm256_add_ps(s1, e1);
  }
  for (; i < n; i += 8) {
    __m256i mk = lane_mask(n - i);
    __m256 e = exp2_256(_mm256_fmadd_ps(_mm256_maskload_ps(x + i, mk), vs, vm));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(mk));  /* tail lanes add nothing */
    _mm256_maskstore_ps(x + i, mk, e);
    s0 = _mm256_add_ps(s0, e);
  }
  return hsum(_mm256_add_ps(s0, s1));
}

TAVX2 static void dsoft256(float *ds, const float *p, int n, float d, float scale) {
  const __m256 vd = _mm256_set1_ps(d), vs = _mm256_set1_ps(scale);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 dp = _mm256_loadu_ps(ds + i), pv = _mm256_loadu_ps(p + i);
    _mm256_storeu_ps(ds + i, _mm256_mul_ps(_mm256_mul_ps(pv, vs), _mm256_sub_ps(dp, vd)));
  }
  for (; i < n; i += 8) {
    __m256i mk = lane_mask(n - i);
    __m256 dp = _mm256_maskload_ps(ds + i, mk), pv = _mm256_maskload_ps(p + i, mk);
    _mm256_maskstore_ps(ds + i, mk, _mm256_mul_ps(_mm256_mul_ps(pv, vs), _mm256_sub_ps(dp, vd)));
  }
}

/* dot and scal: plain loads and stores for whole vectors, masks for the tail
 * only (the same lanes, so the same sums): every O row's rescale went through
 * vmaskmovps stores, which AMD Zen 2/3 microcode. Here (Sapphire Rapids, where
 * they are cheap) one thread under the avx2 ceiling, alternating pairs: T =
 * 256 with 24 heads 0.995 of the time (5 pairs), T = 2048 causal 0.99 (10). */
TAVX2 static float dot256(const float *x, const float *y, int n) {
  __m256 s = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8)
    s = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s);
  if (i < n) {
    __m256i mk = lane_mask(n - i);
    s = _mm256_fmadd_ps(_mm256_maskload_ps(x + i, mk), _mm256_maskload_ps(y + i, mk), s);
  }
  return hsum(s);
}

TAVX2 static void scal256(float *x, int n, float a) {
  const __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), va));
  if (i < n) {
    __m256i mk = lane_mask(n - i);
    _mm256_maskstore_ps(x + i, mk, _mm256_mul_ps(_mm256_maskload_ps(x + i, mk), va));
  }
}

/* 8 x 8 transpose in registers: rows r0..r0+7 of src become columns. The
 * scalar pack moved one float per load and store (3 % of the forward and of
 * the backward at T = 2048). */
TAVX2 static void transpose8(float *dst, long ldd, const float *src, long ld) {
  __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ld);
  __m256 r2 = _mm256_loadu_ps(src + 2 * ld), r3 = _mm256_loadu_ps(src + 3 * ld);
  __m256 r4 = _mm256_loadu_ps(src + 4 * ld), r5 = _mm256_loadu_ps(src + 5 * ld);
  __m256 r6 = _mm256_loadu_ps(src + 6 * ld), r7 = _mm256_loadu_ps(src + 7 * ld);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

TAVX2 void rp_flash_pack_t_avx2(float *dst, long ldd, const float *src, long ld, int n, int HS) {
  const int n8 = n & ~7, h8 = HS & ~7;
  for (int r = 0; r < n8; r += 8) {
    for (int d = 0; d < h8; d += 8) transpose8(dst + d * ldd + r, ldd, src + (long)r * ld + d, ld);
    for (int d = h8; d < HS; d++)
      for (int u = 0; u < 8; u++) dst[d * ldd + r + u] = src[(long)(r + u) * ld + d];
  }
  if (n8 < n) rp_flash_pack_t(dst + n8, ldd, src + (long)n8 * ld, ld, n - n8, HS);
}

const rp_flash_ops rp_flash_ops_avx2 = {gemm256, rowmax256, expsum256,           dsoft256,
                                        dot256,  scal256,   rp_flash_pack_t_avx2};

#else
#include "flash_attention_internal.h"
const rp_flash_ops rp_flash_ops_avx2 = {0};
/* never called: the AVX-512 table that names it is empty here too */
void rp_flash_pack_t_avx2(float *dst, long ldd, const float *src, long ld, int n, int HS) {
  rp_flash_pack_t(dst, ldd, src, ld, n, HS);
}
#endif
