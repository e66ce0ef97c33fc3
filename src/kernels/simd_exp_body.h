/* One width of simd_rows.c's exp, included once per level with these set:
 *   VT (vector type), W (lanes), TGT (target attribute), SFX (name suffix),
 *   CAT (token pasting), V_SET1 V_LOAD V_STORE V_ADD V_SUB V_MUL V_DIV V_FMA
 *   V_MAX V_MIN, V_POW2N(shifted) (2^n from the low bits of the shifted
 *   float, as rp_kern_expf builds it).
 * The GELU spans (gelu_simd_body.h) and the cross-entropy rows
 * (xent_simd_body.h) call it. */

/* rp_kern_expf on W lanes, in three parts so that a loop can run them on
 * different vectors at once (gelu_simd_body.h): the range reduction (r and
 * `shifted`, whose low bits are n), the polynomial's Horner steps, and the
 * rest. max(c, x) is `c > x ? c : x`, which is the C clamp `x < c ? c : x`
 * for every x, NaN included (as min for the top). */
TGT static inline void CAT(expv_reduce_, SFX)(VT x, VT *r, VT *shifted) {
  x = V_MAX(V_SET1(-87.3f), x);
  x = V_MIN(V_SET1(87.0f), x);
  *shifted = V_FMA(x, V_SET1(1.44269504088896341f), V_SET1(12582912.0f));
  VT n = V_SUB(*shifted, V_SET1(12582912.0f));
  *r = V_FMA(n, V_SET1(-0.693359375f), x);
  *r = V_FMA(n, V_SET1(2.12194440e-4f), *r);
}

TGT static inline VT CAT(expv_poly_, SFX)(VT r) {
  VT p = V_SET1(1.9875691500e-4f);
  p = V_FMA(p, r, V_SET1(1.3981999507e-3f));
  p = V_FMA(p, r, V_SET1(8.3334519073e-3f));
  p = V_FMA(p, r, V_SET1(4.1665795894e-2f));
  p = V_FMA(p, r, V_SET1(1.6666665459e-1f));
  return V_FMA(p, r, V_SET1(5.0000001201e-1f));
}

TGT static inline VT CAT(expv_finish_, SFX)(VT r, VT p, VT shifted) {
  p = V_ADD(V_FMA(V_MUL(p, r), r, r), V_SET1(1.0f));
  return V_MUL(p, V_POW2N(shifted));
}

TGT static inline VT CAT(expv_, SFX)(VT x) {
  VT r, shifted;
  CAT(expv_reduce_, SFX)(x, &r, &shifted);
  return CAT(expv_finish_, SFX)(r, CAT(expv_poly_, SFX)(r), shifted);
}
