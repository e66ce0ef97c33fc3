/* AVX2 + FMA inner loops of flash attention (target attributes; called only
 * after __builtin_cpu_supports says avx2 and fma). Same structure as the AVX-512
 * file with 8-lane vectors and 16 registers: micro-kernel blocks of up to 6 x 16
 * (12 accumulators), masked loads/stores for ragged column edges. */
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

TAVX2 AI void ukr(const int mr, const int nv, __m256i mlast, int K, const float *a,
                  long rsa, long csa, const float *b, long ldb, float *c, long ldc,
                  int acc) {
  __m256 cr[12];
  for (int i = 0; i < mr; i++)
    for (int v = 0; v < nv; v++) {
      const float *cp = c + i * ldc + 8 * v;
      cr[i * nv + v] = !acc ? _mm256_setzero_ps()
                            : (v == nv - 1 ? _mm256_maskload_ps(cp, mlast) : _mm256_loadu_ps(cp));
    }
  for (int k = 0; k < K; k++) {
    const float *bk = b + (long)k * ldb;
    const float *ak = a + (long)k * csa;
    __m256 bv[2];
    for (int v = 0; v < nv; v++)
      bv[v] = v == nv - 1 ? _mm256_maskload_ps(bk + 8 * v, mlast) : _mm256_loadu_ps(bk + 8 * v);
    for (int i = 0; i < mr; i++) {
      __m256 av = _mm256_broadcast_ss(ak + i * rsa);
      for (int v = 0; v < nv; v++) cr[i * nv + v] = _mm256_fmadd_ps(av, bv[v], cr[i * nv + v]);
    }
  }
  for (int i = 0; i < mr; i++)
    for (int v = 0; v < nv; v++) {
      float *cp = c + i * ldc + 8 * v;
      if (v == nv - 1)
        _mm256_maskstore_ps(cp, mlast, cr[i * nv + v]);
      else
        _mm256_storeu_ps(cp, cr[i * nv + v]);
    }
}

typedef void (*ukr_fn)(__m256i, int, const float *, long, long, const float *, long, float *,
                       long, int);

#define UKR(MR, NV)                                                                     \
  TAVX2 static void ukr_##MR##_##NV(__m256i m, int K, const float *a, long rsa,        \
                                    long csa, const float *b, long ldb, float *c,        \
                                    long ldc, int acc) {                                 \
    ukr(MR, NV, m, K, a, rsa, csa, b, ldb, c, ldc, acc);                                 \
  }
UKR(1, 2) UKR(2, 2) UKR(3, 2) UKR(4, 2) UKR(5, 2) UKR(6, 2)
UKR(1, 1) UKR(2, 1) UKR(3, 1) UKR(4, 1) UKR(5, 1) UKR(6, 1)

static const ukr_fn ukr_tab[3][7] = {
    {0},
    {0, ukr_1_1, ukr_2_1, ukr_3_1, ukr_4_1, ukr_5_1, ukr_6_1},
    {0, ukr_1_2, ukr_2_2, ukr_3_2, ukr_4_2, ukr_5_2, ukr_6_2},
};

TAVX2 static void gemm256(int M, int N, int K, const float *a, long rsa, long csa,
                          const float *b, long ldb, float *c, long ldc, int acc) {
  for (int j = 0; j < N; j += 16) {
    int nn = N - j < 16 ? N - j : 16;
    int nv = (nn + 7) / 8;
    __m256i mlast = lane_mask(nn - 8 * (nv - 1));
    for (int i = 0; i < M; i += 6) {
      int mr = M - i < 6 ? M - i : 6;
      ukr_tab[nv][mr](mlast, K, a + (long)i * rsa, rsa, csa, b + j, ldb,
                      c + (long)i * ldc + j, ldc, acc);
    }
  }
}

/* exp on 8 lanes, Cephes polynomial; 2^n built in the exponent bits, so inputs
 * are clamped to [-87.3, 88.3] where 2^n stays a normal float. */
TAVX2 AI __m256 exp256(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
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
  const __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(-mx);
  __m256 s0 = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    __m256i mk = lane_mask(n - i);
    __m256 e = exp256(_mm256_fmadd_ps(_mm256_maskload_ps(x + i, mk), vs, vm));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(mk));  /* tail lanes add nothing */
    _mm256_maskstore_ps(x + i, mk, e);
    s0 = _mm256_add_ps(s0, e);
  }
  return hsum(s0);
}

TAVX2 static void dsoft256(float *ds, const float *p, int n, float d, float scale) {
  const __m256 vd = _mm256_set1_ps(d), vs = _mm256_set1_ps(scale);
  for (int i = 0; i < n; i += 8) {
    __m256i mk = lane_mask(n - i);
    __m256 dp = _mm256_maskload_ps(ds + i, mk), pv = _mm256_maskload_ps(p + i, mk);
    _mm256_maskstore_ps(ds + i, mk, _mm256_mul_ps(_mm256_mul_ps(pv, vs), _mm256_sub_ps(dp, vd)));
  }
}

TAVX2 static float dot256(const float *x, const float *y, int n) {
  __m256 s = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    __m256i mk = lane_mask(n - i);
    s = _mm256_fmadd_ps(_mm256_maskload_ps(x + i, mk), _mm256_maskload_ps(y + i, mk), s);
  }
  return hsum(s);
}

TAVX2 static void scal256(float *x, int n, float a) {
  const __m256 va = _mm256_set1_ps(a);
  for (int i = 0; i < n; i += 8) {
    __m256i mk = lane_mask(n - i);
    _mm256_maskstore_ps(x + i, mk, _mm256_mul_ps(_mm256_maskload_ps(x + i, mk), va));
  }
}

const rp_flash_ops rp_flash_ops_avx2 = {gemm256, rowmax256, expsum256,
                                        dsoft256, dot256,    scal256};

#else
#include "flash_attention_internal.h"
const rp_flash_ops rp_flash_ops_avx2 = {0};
#endif
