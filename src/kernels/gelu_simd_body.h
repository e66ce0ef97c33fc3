/* One width of simd_rows.c's GELU spans, included once per level after
 * simd_exp_body.h (expv_SFX) with its macros set.
 * Every line is the operation of rp_gelu_value / rp_gelu_grad / rp_kern_expf at
 * the same place in the same order (see gelu_internal.h). A span's last
 * n % W elements go through the same vector code on a zero-padded copy, not
 * through the scalar functions: in a build without FMA those round apart, and
 * an element's bits would then depend on where a thread's span ends. */
/* u = sqrt(2/pi) (x + 0.044715 x^3), as the scalar code forms it */
TGT static inline VT CAT(gelu_u_, SFX)(VT v) {
  return V_MUL(V_SET1(GELU_K), V_FMA(V_MUL(V_MUL(V_SET1(GELU_A), v), v), v, v));
}

TGT static void CAT(gelu_forward_, SFX)(float *restrict y, const float *restrict x, long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    VT v = V_LOAD(x + i);
    /* sigmoid(2u) = 1 / (1 + e^{-2u}); -2u is exactly -(2u) */
    VT e = CAT(expv_, SFX)(V_MUL(CAT(gelu_u_, SFX)(v), V_SET1(-2.0f)));
    V_STORE(y + i, V_MUL(v, V_DIV(V_SET1(1.0f), V_ADD(V_SET1(1.0f), e))));
  }
  if (i < n) { /* the tail through the same vector code, zero padded */
    float xb[W] = {0}, yb[W];
    memcpy(xb, x + i, sizeof(float) * (size_t)(n - i));
    CAT(gelu_forward_, SFX)(yb, xb, W);
    memcpy(y + i, yb, sizeof(float) * (size_t)(n - i));
  }
}

TGT static inline VT CAT(gelu_grad_, SFX)(VT v) {
  VT e = CAT(expv_, SFX)(V_MUL(CAT(gelu_u_, SFX)(v), V_SET1(-2.0f)));
  VT s = V_DIV(V_SET1(1.0f), V_ADD(V_SET1(1.0f), e));
  const float k2 = 2.0f * GELU_K, a3 = 3.0f * GELU_A; /* folded in float, as there */
  VT lhs = V_MUL(V_MUL(V_MUL(V_SET1(k2), v), s), V_MUL(e, s));
  return V_FMA(lhs, V_FMA(V_SET1(a3), V_MUL(v, v), V_SET1(1.0f)), s);
}

TGT static void CAT(gelu_backward_, SFX)(float *restrict dx, float *restrict db,
                                         const float *restrict x, const float *restrict dy,
                                         long n, int set) {
  long i = 0;
  for (; i + W <= n; i += W) {
    VT g = V_MUL(CAT(gelu_grad_, SFX)(V_LOAD(x + i)), V_LOAD(dy + i));
    V_STORE(dx + i, set ? g : V_ADD(V_LOAD(dx + i), g));
    if (db) V_STORE(db + i, V_ADD(V_LOAD(db + i), g));
  }
  if (i < n) { /* the tail through the same vector code, zero padded */
    const size_t m = sizeof(float) * (size_t)(n - i);
    float xb[W] = {0}, dyb[W] = {0}, dxb[W] = {0}, dbb[W] = {0};
    memcpy(xb, x + i, m), memcpy(dyb, dy + i, m);
    if (!set) memcpy(dxb, dx + i, m);
    if (db) memcpy(dbb, db + i, m);
    CAT(gelu_backward_, SFX)(dxb, db ? dbb : NULL, xb, dyb, W, set);
    memcpy(dx + i, dxb, m);
    if (db) memcpy(db + i, dbb, m);
  }
}

