/* One width of simd_rows.c's GELU spans, included once per level after
 * simd_exp_body.h (expv_*_SFX) with its macros set.
 * Every line is the operation of rp_gelu_value / rp_gelu_grad / rp_kern_expf at
 * the same place in the same order (see gelu_internal.h). A span's last
 * n % W elements go through the same vector code on a zero-padded copy, not
 * through the scalar functions: in a build without FMA those round apart, and
 * an element's bits would then depend on where a thread's span ends.
 *
 * Why a pipeline: one vector's GELU is a single chain of some 25 dependent
 * operations (about 85 cycles), and the core overlaps only as many vectors as
 * its scheduler holds waiting operations for: on Zen 5 that held a loop of
 * plain iterations (or of four vectors side by side, which queue the same
 * waiting operations) to one vector per ~17 cycles, the same at 8 lanes as at
 * 16. So each span's loop runs three stages on three pairs of vectors: it
 * starts one pair (load, the exp's argument and range reduction), runs the
 * polynomial of the pair started one iteration before, and finishes the pair
 * started two before, whose operands are ready by then. The same operations
 * on each element, so the same bits. bench_gelu, cache-resident, one Zen 5
 * thread: AVX-512 forward 0.265 -> 0.216 ns an element, backward (with
 * dbias) 0.359 -> 0.269; AVX2 0.492 -> 0.429 and 0.694 -> 0.503. */

/* u = sqrt(2/pi) (x + 0.044715 x^3), as the scalar code forms it */
TGT static inline VT CAT(gelu_u_, SFX)(VT v) {
  return V_MUL(V_SET1(GELU_K), V_FMA(V_MUL(V_MUL(V_SET1(GELU_A), v), v), v, v));
}

/* One vector in flight: x, then the exp of -2u's reduced argument, its
 * shifted integer part and (after the second stage) its polynomial. */
typedef struct {
  VT v, r, shifted, p;
} CAT(gelu_vec_, SFX);
#define GV CAT(gelu_vec_, SFX)

/* stage 1: load, e^{-2u}'s range reduction (-2u is exactly -(2u)) */
TGT static inline void CAT(gelu_start_, SFX)(GV *g, const float *x) {
  g->v = V_LOAD(x);
  CAT(expv_reduce_, SFX)(V_MUL(CAT(gelu_u_, SFX)(g->v), V_SET1(-2.0f)), &g->r, &g->shifted);
}

/* stage 2 */
TGT static inline void CAT(gelu_poly_, SFX)(GV *g) { g->p = CAT(expv_poly_, SFX)(g->r); }

/* stage 3's common part: e = e^{-2u} */
TGT static inline VT CAT(gelu_e_, SFX)(const GV *g) {
  return CAT(expv_finish_, SFX)(g->r, g->p, g->shifted);
}

/* x sigmoid(2u) = x / (1 + e^{-2u}) */
TGT static inline VT CAT(gelu_value_, SFX)(const GV *g) {
  return V_MUL(g->v, V_DIV(V_SET1(1.0f), V_ADD(V_SET1(1.0f), CAT(gelu_e_, SFX)(g))));
}

/* gelu'(x) from e = e^{-2u} and s = sigmoid(2u) */
TGT static inline VT CAT(gelu_grad_, SFX)(const GV *g) {
  VT e = CAT(gelu_e_, SFX)(g);
  VT s = V_DIV(V_SET1(1.0f), V_ADD(V_SET1(1.0f), e));
  const float k2 = 2.0f * GELU_K, a3 = 3.0f * GELU_A; /* folded in float, as there */
  VT lhs = V_MUL(V_MUL(V_MUL(V_SET1(k2), g->v), s), V_MUL(e, s));
  return V_FMA(lhs, V_FMA(V_SET1(a3), V_MUL(g->v, g->v), V_SET1(1.0f)), s);
}

/* The pipeline over the full vectors of x[0, n), finishing vector i (at
 * element i) with FINISH(g, i); sets i to the elements done. The first two
 * pairs are started before the loop and the last two finished after it. */
#define GELU_PIPELINE(x, n, i, FINISH)                                   \
  do {                                                                   \
    i = 0;                                                               \
    if ((n) < 4 * W) break;                                              \
    GV a0, a1, b0, b1, c0, c1;                                           \
    CAT(gelu_start_, SFX)(&b0, (x));                                     \
    CAT(gelu_start_, SFX)(&b1, (x) + W);                                 \
    CAT(gelu_poly_, SFX)(&b0);                                           \
    CAT(gelu_poly_, SFX)(&b1);                                           \
    CAT(gelu_start_, SFX)(&a0, (x) + 2 * W);                             \
    CAT(gelu_start_, SFX)(&a1, (x) + 3 * W);                             \
    for (; i + 6 * W <= (n); i += 2 * W) {                               \
      c0 = b0, c1 = b1, b0 = a0, b1 = a1;                                \
      CAT(gelu_poly_, SFX)(&b0);                                         \
      CAT(gelu_poly_, SFX)(&b1);                                         \
      CAT(gelu_start_, SFX)(&a0, (x) + i + 4 * W);                       \
      CAT(gelu_start_, SFX)(&a1, (x) + i + 5 * W);                       \
      FINISH(&c0, i);                                                    \
      FINISH(&c1, i + W);                                                \
    }                                                                    \
    FINISH(&b0, i);                                                      \
    FINISH(&b1, i + W);                                                  \
    CAT(gelu_poly_, SFX)(&a0);                                           \
    CAT(gelu_poly_, SFX)(&a1);                                           \
    FINISH(&a0, i + 2 * W);                                              \
    FINISH(&a1, i + 3 * W);                                              \
    i += 4 * W;                                                          \
  } while (0)

TGT static void CAT(gelu_forward_, SFX)(float *restrict y, const float *restrict x, long n) {
  long i;
#define FWD_FINISH(g, at) V_STORE(y + (at), CAT(gelu_value_, SFX)(g))
  GELU_PIPELINE(x, n, i, FWD_FINISH);
  for (; i + W <= n; i += W) { /* the full vectors the pairs leave (at most three), unpipelined */
    GV g;
    CAT(gelu_start_, SFX)(&g, x + i);
    CAT(gelu_poly_, SFX)(&g);
    FWD_FINISH(&g, i);
  }
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
#define BWD_FINISH(g, at)                                                \
  do {                                                                   \
    VT gr = V_MUL(CAT(gelu_grad_, SFX)(g), V_LOAD(dy + (at)));           \
    V_STORE(dx + (at), set ? gr : V_ADD(V_LOAD(dx + (at)), gr));         \
    if (db) V_STORE(db + (at), V_ADD(V_LOAD(db + (at)), gr));            \
  } while (0)
  GELU_PIPELINE(x, n, i, BWD_FINISH);
  for (; i + W <= n; i += W) {
    GV g;
    CAT(gelu_start_, SFX)(&g, x + i);
    CAT(gelu_poly_, SFX)(&g);
    BWD_FINISH(&g, i);
  }
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

#undef GELU_PIPELINE
#undef GV
