/* The elementwise rows built on rp_kern_expf, in AVX-512 and AVX2 intrinsics:
 * per width, simd_exp_body.h (the exp), gelu_simd_body.h (the GELU spans) and
 * xent_simd_body.h (the cross-entropies' softmax rows). They are called when
 * the rp_isa.h ceiling allows their level, whatever -march the build has.
 *
 * Why not leave it to the compiler: gcc vectorizes gelu.c's loops, but it
 * turns rp_kern_expf's two clamps into three compares, mask logic and blends
 * per vector (it keeps the C NaN semantics by hand), about a third of the
 * forward's instructions; max/min with the constant first have exactly those
 * semantics in one instruction each. Cache-resident, one Zen 5 thread: forward
 * 0.43 -> 0.28 ns per element. And a build for the baseline x86-64 (SSE2, no
 * FMA: a distribution's package) does not vectorize the cross-entropy's exp
 * loops at all ("control flow in loop"): at the 124M shape's vocabulary its
 * backward took 368 ms a step instead of 42. The arithmetic is otherwise the C
 * code's, op for op, so the results are its bits where the build has FMA
 * (test_gelu_isa, test_xent_isa). */
#include <string.h>

#include "gelu_internal.h"
#include "xent_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

/* ---- AVX-512F: 16 lanes */
#define VT __m512
#define W 16
#define TGT __attribute__((target("avx512f,avx2,fma")))
#define SFX 512
#define V_SET1 _mm512_set1_ps
#define V_LOAD _mm512_loadu_ps
#define V_STORE _mm512_storeu_ps
#define V_ADD _mm512_add_ps
#define V_SUB _mm512_sub_ps
#define V_MUL _mm512_mul_ps
#define V_DIV _mm512_div_ps
#define V_FMA _mm512_fmadd_ps
#define V_MAX _mm512_max_ps
#define V_MIN _mm512_min_ps
#define V_POW2N(s) \
  _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_castps_si512(s), _mm512_set1_epi32(127)), 23))
#include "simd_exp_body.h"
#include "gelu_simd_body.h"
#include "xent_simd_body.h"
#undef VT
#undef W
#undef TGT
#undef SFX
#undef V_SET1
#undef V_LOAD
#undef V_STORE
#undef V_ADD
#undef V_SUB
#undef V_MUL
#undef V_DIV
#undef V_FMA
#undef V_MAX
#undef V_MIN
#undef V_POW2N

/* ---- AVX2 + FMA: 8 lanes */
#define VT __m256
#define W 8
#define TGT __attribute__((target("avx2,fma")))
#define SFX 256
#define V_SET1 _mm256_set1_ps
#define V_LOAD _mm256_loadu_ps
#define V_STORE _mm256_storeu_ps
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MUL _mm256_mul_ps
#define V_DIV _mm256_div_ps
#define V_FMA _mm256_fmadd_ps
#define V_MAX _mm256_max_ps
#define V_MIN _mm256_min_ps
#define V_POW2N(s) \
  _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(s), _mm256_set1_epi32(127)), 23))
#include "simd_exp_body.h"
#include "gelu_simd_body.h"
#include "xent_simd_body.h"

const rp_gelu_ops rp_gelu_ops_avx512 = {gelu_forward_512, gelu_backward_512};
const rp_gelu_ops rp_gelu_ops_avx2 = {gelu_forward_256, gelu_backward_256};
const rp_xent_ops rp_xent_ops_avx512 = {xent_sum_exp_512, xent_softmax_512};
const rp_xent_ops rp_xent_ops_avx2 = {xent_sum_exp_256, xent_softmax_256};
#else
const rp_gelu_ops rp_gelu_ops_avx512 = {0};
const rp_gelu_ops rp_gelu_ops_avx2 = {0};
const rp_xent_ops rp_xent_ops_avx512 = {0};
const rp_xent_ops rp_xent_ops_avx2 = {0};
#endif
