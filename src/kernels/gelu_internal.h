/* GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3),
 * evaluated as x * sigmoid(2u), the same function: 0.5 (1 + tanh u) = sigmoid(2u).
 * This form has no 1 + tanh cancellation for negative x (where 1 + tanhf loses
 * all relative precision). The per-element code lives here so that the plain-C
 * loops (gelu.c, the reference) and the SIMD ones (simd_rows.c, which use it
 * for their tails) are the same arithmetic: the SIMD spans repeat these
 * operations in the same order, so every level gives the same bits where the
 * build has FMA (test_gelu_isa holds them to it). */
#ifndef RP_GELU_INTERNAL_H
#define RP_GELU_INTERNAL_H

#include "kern_util.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

static inline float rp_gelu_value(float v) {
  float u = GELU_K * RP_FMAF(GELU_A * v * v, v, v);
  return v * rp_kern_sigmoidf(2.0f * u);
}

/* d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3*0.044715 x^2);
 * with s = sigmoid(2u): 0.5 (1 + tanh u) = s and 0.5 (1 - tanh^2 u) = 2 s (1 - s),
 * and 1 - s = e^{-2u} s avoids cancellation for large u. */
static inline float rp_gelu_grad(float v) {
  float u = GELU_K * RP_FMAF(GELU_A * v * v, v, v);
  float e = rp_kern_expf(-2.0f * u);
  float s = 1.0f / (1.0f + e);
  return RP_FMAF(2.0f * GELU_K * v * s * (e * s), RP_FMAF(3.0f * GELU_A, v * v, 1.0f), s);
}

/* The spans, one table per instruction-set level:
 *   forward:  y[0:n) = gelu(x[0:n))
 *   backward: g = gelu'(x) * dy; dx = g (set) or dx += g (!set); db[i] += g
 *             when db is not NULL (a bias gradient over these columns) */
typedef struct {
  void (*forward)(float *y, const float *x, long n);
  void (*backward)(float *dx, float *db, const float *x, const float *dy, long n, int set);
} rp_gelu_ops;

extern const rp_gelu_ops rp_gelu_ops_c;      /* gelu.c: the reference */
extern const rp_gelu_ops rp_gelu_ops_avx2;   /* simd_rows.c; {0} off x86-64 */
extern const rp_gelu_ops rp_gelu_ops_avx512;
/* the table the ceiling in force allows (rp_isa.h) */
const rp_gelu_ops *rp_gelu_ops_active(void);
/* its level's name: "avx512", "avx2" or "c" */
const char *rp_gelu_ops_name(void);

#endif
