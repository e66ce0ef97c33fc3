/* Private to the flash_attention*.c files: the per-ISA inner loops and the job
 * contexts shared by the forward and backward tile loops. */
#ifndef RP_FLASH_INTERNAL_H
#define RP_FLASH_INTERNAL_H

#include <stdatomic.h>

#include "ringpipe/rp_flash.h"

/* The vectorised inner loops, one table per instruction set.
 * gemm: C[M,N] = (acc ? C : 0) + A B with A(i,k) = a[i*rsa + k*csa] (any strides,
 * so A may be a transposed tile) and B(k,n) = b[k*ldb + n] (rows contiguous);
 * acc is one of RP_FLASH_SET, RP_FLASH_ADD, RP_FLASH_ADD_COLD below. */
enum {
  RP_FLASH_SET = 0,     /* C = A B */
  RP_FLASH_ADD = 1,     /* C += A B, C loaded before the products (it is in L1) */
  /* C += A B with C prefetched and added after them: the backward's dK, dV and
   * dQ rows, which a tile finds in L2 or memory (a key block's first tile) or
   * adds to after a short product (inner dimension 24); the SIMD blocks start
   * from 0 and add C last (so C + sum, not C + a0 b0 + a1 b1 + ...) */
  RP_FLASH_ADD_COLD = 2
};
typedef struct {
  void (*gemm)(int M, int N, int K, const float *a, long rsa, long csa, const float *b,
               long ldb, float *c, long ldc, int acc);
  float (*rowmax)(const float *x, int n);                   /* n >= 1 */
  /* x = exp(scale*x - m) in place; returns the sum (the row's l contribution) */
  float (*expsum)(float *x, int n, float scale, float m);
  /* ds = scale * p * (ds - d) in place: softmax backward of one row */
  void (*dsoft)(float *ds, const float *p, int n, float d, float scale);
  float (*dot)(const float *x, const float *y, int n);
  void (*scal)(float *x, int n, float a);
  /* dst[d*ldd + r] = src[r*ld + d] for r < n, d < HS (see rp_flash_pack_t) */
  void (*pack_t)(float *dst, long ldd, const float *src, long ld, int n, int HS);
} rp_flash_ops;

extern const rp_flash_ops rp_flash_ops_scalar;
extern const rp_flash_ops rp_flash_ops_avx2;
extern const rp_flash_ops rp_flash_ops_avx512;
const rp_flash_ops *rp_flash_ops_active(const rp_flash_config *cfg);

/* The bf16 products (flash_attention_bf16.c; layouts described there): k runs
 * in pairs, one uint32_t each.
 * gemm: C[M,N] = (acc ? C : 0) + A B over KP pairs, A(i,p) = a[i*rsa + p*csa],
 *       B(p,n) = b[p*ldb + n];
 * rows: dst[r*ldd + p] = pair(src[r][2p], src[r][2p+1]), r < n, p < ceil(K/2);
 * pair_rows: dst[p*ldd + w] = pair(src[2p][w], src[2p+1][w]), p < np, w < W,
 *       rows >= n as +0;
 * pack_t: dst[p*ldd + r] = pair(src[r][2p], src[r][2p+1]), r < n, p < ceil(HS/2). */
typedef struct {
  void (*gemm)(int M, int N, int KP, const uint32_t *a, long rsa, long csa, const uint32_t *b,
               long ldb, float *c, long ldc, int acc);
  void (*rows)(uint32_t *dst, long ldd, const float *src, long ld, int n, int K);
  void (*pair_rows)(uint32_t *dst, long ldd, const float *src, long ld, int n, int W, int np);
  void (*pack_t)(uint32_t *dst, long ldd, const float *src, long ld, int n, int HS);
} rp_flash_bf16_ops;
extern const rp_flash_bf16_ops rp_flash_bf16_avx512;
/* The bf16 table when cfg asks for bf16 and it can run (the AVX-512 flash path
 * under an avx512bf16 ceiling), else NULL: the fp32 products. */
const rp_flash_bf16_ops *rp_flash_bf16_ops_active(const rp_flash_config *cfg);

/* 2^f for f in [0, 1) as sum c[i] f^(5-i), evaluated by Horner (highest power
 * first). Degree 5, fitted for the least relative error over [0, 1) (iterated
 * reweighted least squares): 7.5e-8 in exact arithmetic, 1.6e-7 (1.3 ulp)
 * evaluated in fp32; test_flash_ops bounds the whole exp. One FMA fewer than
 * the degree-6 Cephes polynomial on [-1/2, 1/2] it replaces, and f = t -
 * floor(t) lets the exponent step take t itself (see exp2_512). */
static const float rp_flash_exp2_poly[6] = {1.877576309e-03f, 8.989341447e-03f,
                                            5.582631641e-02f, 2.401536179e-01f,
                                            6.931530730e-01f, 9.999999251e-01f};
#define RP_FLASH_EXP2_DEGREE 5

/* Resolved settings for one call. */
typedef struct {
  int bq, bk, nqb, nkb;
  float scale;
  rp_flash_split split;
  const rp_flash_ops *ops;
  const rp_flash_bf16_ops *bf16; /* NULL: fp32 products */
} rp_flash_plan;

/* bf16 pairs of n elements */
static inline int rp_flash_pairs(int n) { return (n + 1) / 2; }

rp_status rp_flash_check_problem(const rp_flash_problem *pr);
void rp_flash_make_plan(rp_flash_plan *pl, const rp_flash_problem *pr);

/* Number of keys of tile row i (query index) that are visible, for a tile whose
 * first key index is j0 and which holds nk keys. */
static inline int rp_flash_visible(const rp_flash_problem *pr, long i, long j0, int nk) {
  if (pr->vis == RP_FLASH_VIS_ALL) return nk;
  long n = pr->q_pos0 + i - pr->k_pos0 - j0 + 1;
  return n <= 0 ? 0 : (n >= nk ? nk : (int)n);
}

/* A tile that straddles the causal diagonal runs its GEMMs in strips of
 * RP_FLASH_STRIP rows, each over only the keys its last row sees: with whole
 * tiles a quarter of the work at T = 1024 (96 x 192 tiles) multiplied masked
 * zeros. A multiple of every micro-kernel's row block (6, 8, 12). An unmasked
 * tile is one strip. */
#define RP_FLASH_STRIP 24
/* even: a bf16 strip's first row starts a pair row of Q and dO */
_Static_assert(RP_FLASH_STRIP % 2 == 0, "bf16 pair rows need even strips");
/* Rows per strip of an unmasked forward tile (see fwd_tile_rows): small enough
 * that the strip's scores stay in L1, a multiple of every row block. */
#define RP_FLASH_FWD_STRIP 24
static inline int rp_flash_strip_rows(int full, int nq, int r0) {
  return full ? nq : (nq - r0 < RP_FLASH_STRIP ? nq - r0 : RP_FLASH_STRIP);
}
/* keys the strip of rows [r0, r0 + hh) of a tile at (i0, j0) multiplies: all
 * of them for document ranges (each row's span is masked afterwards) */
static inline int rp_flash_strip_keys(const rp_flash_problem *pr, int full, long i0, int r0,
                                      int hh, long j0, int nk) {
  if (full || pr->vis == RP_FLASH_VIS_RANGE) return nk;
  return rp_flash_visible(pr, i0 + r0 + hh - 1, j0, nk);
}

/* Keys [0, rp_flash_last_key+1) are the only ones any query of rows [i0, i1) can
 * see; returns the index of the last visible key (may be < 0 or >= Tk). */
static inline long rp_flash_last_key(const rp_flash_problem *pr, long i1) {
  if (pr->vis == RP_FLASH_VIS_ALL || pr->vis == RP_FLASH_VIS_RANGE) return (long)pr->Tk - 1;
  return pr->q_pos0 + i1 - 1 - pr->k_pos0;
}

/* 1 when each of nthreads workers should take its own contiguous, equal share
 * of the B*NH heads instead of taking tasks from a shared counter: short heads
 * (K and V within a quarter of the L2) whose every head is the same work (no
 * document ranges) and split evenly. Where the GEMM before it splits rows
 * the same way (attproj's dinp, the attention output's gradient) a thread's
 * heads are the rows it has just written, read from its own L2 rather than
 * the other core's. Default model (T = 256, B 4, 6 heads, 2 threads), 3
 * alternating pairs of step profiles' quiet times: forward 9.90-10.18 ->
 * 9.04-9.18 ms a step, backward 19.45-20.31 -> 18.37-19.01. The qkv forward
 * has since split its columns (sgemm.c), so each thread wrote part of every
 * head's rows; the forward measured no slower for it (7.33-7.56 against
 * 7.60-7.90 ms, 3 pairs). Long
 * heads stream from L3 or memory whoever takes them, and a shared counter
 * rebalances when a worker is preempted. */
static inline int rp_flash_own_heads(const rp_flash_problem *pr, int nthreads, long l2_bytes) {
  const long BNH = (long)pr->B * pr->NH, head_kv = 2L * pr->Tk * pr->HS * (long)sizeof(float);
  return nthreads > 1 && BNH % nthreads == 0 && pr->vis != RP_FLASH_VIS_RANGE &&
         head_kv <= l2_bytes / 4;
}

/* Row pointer helpers for rows views and stat views. */
static inline float *rp_flash_row(rp_flash_view v, long b, long t, long h, int HS) {
  return v.p + b * v.bs + t * v.ld + h * HS;
}
static inline float *rp_flash_stat(rp_flash_view v, long b, long h, long t) {
  return v.p + b * v.bs + h * v.ld + t;
}

/* Transposes rows [0, n) x cols [0, HS) of src (row stride ld) into dst[HS][ldd]. */
void rp_flash_pack_t(float *dst, long ldd, const float *src, long ld, int n, int HS);
/* The same by 8 x 8 register transposes (AVX2; the AVX-512 table uses it too) */
void rp_flash_pack_t_avx2(float *dst, long ldd, const float *src, long ld, int n, int HS);
/* Copies rows [0, n) x cols [0, HS) of src (row stride ld) into dst[n][HS]: the
 * model's rows of one head lie 3C floats apart, a stride that aliases in L1. */
void rp_flash_pack_rows(float *dst, const float *src, long ld, int n, int HS);

/* ---- jobs: prepare a context, run fn(ctx, ith, nth) on the pool, finish. */
struct rp_flash_job {
  rp_pool *pool;
  void *ctx;                                      /* NULL: nothing was launched */
  rp_status (*finish)(void *ctx, rp_pool *pool);  /* reduce + free; NULL ctx allowed */
};

/* Build a forward / backward context (allocations included). *ctx = NULL when
 * there is nothing to do beyond what prepare already wrote. */
rp_status rp_flash_fwd_prepare(void **ctx, const rp_flash_problem *pr, rp_flash_view o,
                               rp_flash_view lse, int nthreads);
void rp_flash_fwd_run(void *ctx, int ith, int nth);
rp_status rp_flash_fwd_finish(void *ctx, rp_pool *pool);

rp_status rp_flash_bwd_prepare(void **ctx, const rp_flash_problem *pr, rp_flash_view dout,
                               rp_flash_view lse, rp_flash_view dsum, rp_flash_view dq,
                               rp_flash_view dk, rp_flash_view dv, int nthreads);
void rp_flash_bwd_run(void *ctx, int ith, int nth);
rp_status rp_flash_bwd_finish(void *ctx, rp_pool *pool);
/* Asks a prepared backward to compute D = rowsum(dO O) into its dsum view
 * itself, each head task for its own rows just before it packs them, from the
 * output rows o (the values rp_flash_rowdot would write, to the bit). 1 when
 * it will (short heads, each thread its own share); 0 when the caller must
 * run rp_flash_rowdot first (long heads, or split by key blocks, where
 * several tasks read a head's D). */
int rp_flash_bwd_take_dsum(void *ctx, rp_flash_view o);

#endif
