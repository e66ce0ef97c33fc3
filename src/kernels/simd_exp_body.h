/* One width of simd_rows.c's exp, included once per level with these set:
 *   VT (vector type), W (lanes), TGT (target attribute), SFX (name suffix),
 *   CAT (token pasting), V_SET1 V_LOAD V_STORE V_ADD V_SUB V_MUL V_DIV V_FMA
 *   V_MAX V_MIN, V_POW2N(shifted) (2^n from the low bits of the shifted
 *   float, as rp_kern_expf builds it).
 * The GELU spans (gelu_simd_body.h) and the cross-entropy rows
 * (xent_simd_body.h) call it. */

/* rp_kern_expf on W lanes, in three parts so that a loop can run them on
 * different vectors at once (EXPV_SPANS below): the range reduction (r and
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

/* ---- the exp over many vectors, as a software pipeline
 *
 * One vector's exp, with whatever forms its argument and uses its result, is
 * one chain of dependent operations (GELU's: some 25, about 85 cycles), and
 * the core overlaps only as many vectors as its scheduler holds waiting
 * operations for: on Zen 5 a plain loop of GELU ran one vector per ~17
 * cycles, the same at 8 lanes as at 16 (nor did four vectors side by side
 * help: they queue the same waiting operations). EXPV_SPANS runs three stages
 * on three pairs of vectors instead: it starts one pair (the argument and the
 * range reduction), runs the polynomial of the pair started one iteration
 * before and finishes the pair started two before, whose operands are ready
 * by then. The same operations on each element, so the same bits.
 * bench_gelu, cache-resident, one Zen 5 thread: AVX-512 forward 0.265 ->
 * 0.216 ns an element, backward (with dbias) 0.359 -> 0.269; AVX2 0.492 ->
 * 0.429 and 0.694 -> 0.503. */
typedef struct {
  VT r, shifted, p;
} CAT(expv_flight_, SFX);

/* For the full vectors of [0, n) in order of their first element `at`:
 * FINISH(e, at) with e = exp(ARG(at)); pairs through the pipeline from four
 * vectors on, the rest (at most three) one by one. Leaves i at the first
 * element not done (n - n % W). ARG and FINISH are expressions in `at`. */
#define EXPV_SPANS(n, i, ARG, FINISH)                                          \
  do {                                                                         \
    CAT(expv_flight_, SFX) a0_, a1_, b0_, b1_, c0_, c1_;                       \
    long at;                                                                   \
    i = 0;                                                                     \
    if ((n) >= 4 * W) {                                                        \
      EXPV_START_(b0_, 0, ARG);                                                \
      EXPV_START_(b1_, W, ARG);                                                \
      b0_.p = CAT(expv_poly_, SFX)(b0_.r);                                     \
      b1_.p = CAT(expv_poly_, SFX)(b1_.r);                                     \
      EXPV_START_(a0_, 2 * W, ARG);                                            \
      EXPV_START_(a1_, 3 * W, ARG);                                            \
      for (; i + 6 * W <= (n); i += 2 * W) {                                   \
        c0_ = b0_, c1_ = b1_, b0_ = a0_, b1_ = a1_;                            \
        b0_.p = CAT(expv_poly_, SFX)(b0_.r);                                   \
        b1_.p = CAT(expv_poly_, SFX)(b1_.r);                                   \
        EXPV_START_(a0_, i + 4 * W, ARG);                                      \
        EXPV_START_(a1_, i + 5 * W, ARG);                                      \
        EXPV_FINISH_(c0_, i, FINISH);                                          \
        EXPV_FINISH_(c1_, i + W, FINISH);                                      \
      }                                                                        \
      EXPV_FINISH_(b0_, i, FINISH);                                            \
      EXPV_FINISH_(b1_, i + W, FINISH);                                        \
      a0_.p = CAT(expv_poly_, SFX)(a0_.r);                                     \
      a1_.p = CAT(expv_poly_, SFX)(a1_.r);                                     \
      EXPV_FINISH_(a0_, i + 2 * W, FINISH);                                    \
      EXPV_FINISH_(a1_, i + 3 * W, FINISH);                                    \
      i += 4 * W;                                                              \
    }                                                                          \
    for (; i + W <= (n); i += W) {                                             \
      EXPV_START_(c0_, i, ARG);                                                \
      c0_.p = CAT(expv_poly_, SFX)(c0_.r);                                     \
      EXPV_FINISH_(c0_, i, FINISH);                                            \
    }                                                                          \
  } while (0)
#define EXPV_START_(f, where, ARG)                                             \
  do {                                                                         \
    at = (where);                                                              \
    CAT(expv_reduce_, SFX)(ARG, &(f).r, &(f).shifted);                         \
  } while (0)
#define EXPV_FINISH_(f, where, FINISH)                                         \
  do {                                                                         \
    at = (where);                                                              \
    const VT e_ = CAT(expv_finish_, SFX)((f).r, (f).p, (f).shifted);           \
    FINISH(e_, at);                                                            \
  } while (0)
