/* The cross-entropies' softmax rows (crossentropy.c, crossentropy_vp.c), one
 * table per instruction-set level: the plain-C reference here (kern_util.h's
 * loops) and the AVX-512 and AVX2 ones of simd_rows.c, which repeat its
 * operations in its order and so give its bits where the build has FMA
 * (test_xent_isa holds them to it).
 *   sum_exp: sum of exp(x[i] - shift) over n values, 16 lanes then the tail
 *   softmax: d[i] = exp(x[i] - shift) * dscale; d may be x (in place) */
#ifndef RP_XENT_INTERNAL_H
#define RP_XENT_INTERNAL_H

typedef struct {
  float (*sum_exp)(const float *x, float shift, long n);
  void (*softmax)(float *d, const float *x, float shift, float dscale, long n);
} rp_xent_ops;

extern const rp_xent_ops rp_xent_ops_c;      /* crossentropy.c: the reference */
extern const rp_xent_ops rp_xent_ops_avx2;   /* simd_rows.c; {0} off x86-64 */
extern const rp_xent_ops rp_xent_ops_avx512;
/* the table the ceiling in force allows (rp_isa.h) */
const rp_xent_ops *rp_xent_ops_active(void);
/* its level's name: "avx512", "avx2" or "c" */
const char *rp_xent_ops_name(void);

#endif
