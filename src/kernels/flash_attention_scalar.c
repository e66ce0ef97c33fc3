/* Portable C inner loops of flash attention: the fallback on CPUs without AVX2
 * and the plain version the vector ones are tested against. */
#include <math.h>
#include <string.h>

#include "flash_attention_internal.h"

static void gemm_c(int M, int N, int K, const float *a, long rsa, long csa, const float *b,
                   long ldb, float *c, long ldc, int acc) {
  for (int i = 0; i < M; i++) {
    float *restrict ci = c + (long)i * ldc;
    if (!acc) memset(ci, 0, sizeof(float) * (size_t)N);
    for (int k = 0; k < K; k++) {
      const float aik = a[(long)i * rsa + (long)k * csa];
      const float *restrict bk = b + (long)k * ldb;
      for (int j = 0; j < N; j++) ci[j] += aik * bk[j];
    }
  }
}

static float rowmax_c(const float *x, int n) {
  float m = x[0];
  for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

static float expsum_c(float *x, int n, float scale, float m) {
  float s = 0.0f;
  for (int i = 0; i < n; i++) {
    x[i] = expf(scale * x[i] - m);
    s += x[i];
  }
  return s;
}

static void dsoft_c(float *ds, const float *p, int n, float d, float scale) {
  for (int i = 0; i < n; i++) ds[i] = scale * p[i] * (ds[i] - d);
}

static float dot_c(const float *x, const float *y, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += x[i] * y[i];
  return s;
}

static void scal_c(float *x, int n, float a) {
  for (int i = 0; i < n; i++) x[i] *= a;
}

const rp_flash_ops rp_flash_ops_scalar = {gemm_c, rowmax_c, expsum_c, dsoft_c,
                                          dot_c,  scal_c,   rp_flash_pack_t};
