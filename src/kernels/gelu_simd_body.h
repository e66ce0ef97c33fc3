/* One width of simd_rows.c's GELU spans, included once per level after
 * simd_exp_body.h (expv_*_SFX) with its macros set.
 * Every line is the operation of rp_gelu_value / rp_gelu_grad / rp_kern_expf at
 * the same place in the same order (see gelu_internal.h). A span's last
 * n % W elements go through the same vector code on a zero-padded copy, not
 * through the scalar functions: in a build without FMA those round apart, and
 * an element's bits would then depend on where a thread's span ends. The
 * full vectors run through EXPV_SPANS's pipeline (simd_exp_body.h says why). */

/* u = sqrt(2/pi) (x + 0.044715 x^3), as the scalar code forms it */
TGT static inline VT CAT(gelu_u_, SFX)(VT v) {
  return V_MUL(V_SET1(GELU_K), V_FMA(V_MUL(V_MUL(V_SET1(GELU_A), v), v), v, v));
}

/* the exp's argument: -2u, exactly -(2u) */
#define GELU_ARG(x, at) V_MUL(CAT(gelu_u_, SFX)(V_LOAD((x) + (at))), V_SET1(-2.0f))

/* x sigmoid(2u) = x / (1 + e^{-2u}) */
TGT static inline VT CAT(gelu_value_, SFX)(VT v, VT e) {
  return V_MUL(v, V_DIV(V_SET1(1.0f), V_ADD(V_SET1(1.0f), e)));
}

/* gelu'(x) from e = e^{-2u} and s = sigmoid(2u) */
TGT static inline VT CAT(gelu_grad_, SFX)(VT v, VT e) {
  VT s = V_DIV(V_SET1(1.0f), V_ADD(V_SET1(1.0f), e));
  const float k2 = 2.0f * GELU_K, a3 = 3.0f * GELU_A; /* folded in float, as there */
  VT lhs = V_MUL(V_MUL(V_MUL(V_SET1(k2), v), s), V_MUL(e, s));
  return V_FMA(lhs, V_FMA(V_SET1(a3), V_MUL(v, v), V_SET1(1.0f)), s);
}

TGT static void CAT(gelu_forward_, SFX)(float *restrict y, const float *restrict x, long n) {
  long i;
#define FWD_FINISH(e, at) V_STORE(y + (at), CAT(gelu_value_, SFX)(V_LOAD(x + (at)), e))
  EXPV_SPANS(n, i, GELU_ARG(x, at), FWD_FINISH);
#undef FWD_FINISH
  if (i < n) { /* the tail through the same vector code, zero padded */
    float xb[W] = {0}, yb[W];
    memcpy(xb, x + i, sizeof(float) * (size_t)(n - i));
    CAT(gelu_forward_, SFX)(yb, xb, W);
    memcpy(y + i, yb, sizeof(float) * (size_t)(n - i));
  }
}

TGT static void CAT(gelu_backward_, SFX)(float *restrict dx, float *restrict db,
                                         const float *restrict x, const float *restrict dy,
                                         long n, int set) {
  long i;
#define BWD_FINISH(e, at)                                                          \
  do {                                                                             \
    VT gr = V_MUL(CAT(gelu_grad_, SFX)(V_LOAD(x + (at)), e), V_LOAD(dy + (at)));   \
    V_STORE(dx + (at), set ? gr : V_ADD(V_LOAD(dx + (at)), gr));                   \
    if (db) V_STORE(db + (at), V_ADD(V_LOAD(db + (at)), gr));                      \
  } while (0)
  EXPV_SPANS(n, i, GELU_ARG(x, at), BWD_FINISH);
#undef BWD_FINISH
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

#undef GELU_ARG
