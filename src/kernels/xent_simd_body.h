/* One width of simd_rows.c's cross-entropy rows, included once per level after
 * simd_exp_body.h (expv_SFX) with its macros set. The arithmetic and its order
 * are those of rp_kern_sum_exp_shifted and rp_kern_softmax_scaled (kern_util.h):
 * the sum in 16 lanes (lane j takes the elements i = j mod 16), the lanes
 * added in order, then the last n % 16 elements one by one; each exp is
 * rp_kern_expf's. The last elements' exps come from the same vector code on a
 * zero-padded copy, not the scalar function, which rounds apart in a build
 * without FMA. */

/* exp(x[k] - shift) of the m < 16 elements from x on, into e[0, m) */
TGT static void CAT(exp_tail_, SFX)(float *restrict e, const float *restrict x, float shift,
                                    long m) {
  float xb[16] = {0}, eb[16];
  memcpy(xb, x, sizeof(float) * (size_t)m);
  for (int j = 0; j < 16; j += W)
    V_STORE(eb + j, CAT(expv_, SFX)(V_SUB(V_LOAD(xb + j), V_SET1(shift))));
  memcpy(e, eb, sizeof(float) * (size_t)m);
}

TGT static float CAT(xent_sum_exp_, SFX)(const float *restrict x, float shift, long n) {
  const VT vs = V_SET1(shift);
  VT a0 = V_SET1(0.0f), a1 = a0; /* lanes 0..W-1 and (W = 8) 8..15 */
  long i;
  /* whole blocks of 16 through the pipeline (EXPV_SPANS), each vector added
   * to its lanes' sum in order: with W = 8 the odd vectors are lanes 8..15 */
#define SUM_FINISH(e, at)                           \
  do {                                              \
    if (W < 16 && ((at) / W) % 2) a1 = V_ADD(a1, e); \
    else a0 = V_ADD(a0, e);                         \
  } while (0)
  EXPV_SPANS(n - n % 16, i, V_SUB(V_LOAD(x + at), vs), SUM_FINISH);
#undef SUM_FINISH
  float lanes[32], e[16];
  V_STORE(lanes, a0);
  V_STORE(lanes + W, a1); /* W = 16: lanes 16..31, never read */
  float s = 0.0f;
  for (int j = 0; j < 16; j++) s += lanes[j];
  if (i < n) {
    CAT(exp_tail_, SFX)(e, x + i, shift, n - i);
    for (long k = 0; k < n - i; k++) s += e[k];
  }
  return s;
}

/* d = exp(x - shift) * dscale; d may be x */
TGT static void CAT(xent_softmax_, SFX)(float *d, const float *x, float shift, float dscale,
                                        long n) {
  const VT vs = V_SET1(shift), vd = V_SET1(dscale);
  long i;
  /* each x read before its d is written, so d may be x */
#define SOFTMAX_FINISH(e, at) V_STORE(d + (at), V_MUL(e, vd))
  EXPV_SPANS(n, i, V_SUB(V_LOAD(x + at), vs), SOFTMAX_FINISH);
#undef SOFTMAX_FINISH
  if (i < n) {
    float e[16];
    CAT(exp_tail_, SFX)(e, x + i, shift, n - i);
    for (long k = 0; k < n - i; k++) d[i + k] = e[k] * dscale;
  }
}
