/* ringpipe's own fp32 GEMM (src/kernels/sgemm.c): the matmuls of rp_kernels.h
 * with register-blocked micro-kernels instead of OpenBLAS's sgemm.
 *
 * Why a GEMM of our own: in the pool-split mode every pool thread called a
 * single-threaded sgemm on its slice of rows, and each such call packed the
 * whole shared operand (the weight, or the activations of dweight) for itself.
 * Here the shared operand is packed once per call, by all threads together,
 * and each thread then runs its rows over the one pack; the bias enters as the
 * tiles' start values (no pass over out), and an epilogue (the MLP's GELU) can
 * run on each thread's rows as soon as they are done.
 *
 * Shapes and meaning are rp_matmul_forward/backward's: inp[N,IC],
 * weight[OC,IC], bias[OC], out[N,OC]. Each output element is one running sum
 * over k in blocks fixed by K alone, so results do not depend on the thread
 * count or on how rows are split among ranks; they differ from OpenBLAS's in
 * the last bits (another summation order). rp_matmul_*_ref is the oracle. */
#ifndef RP_SGEMM_H
#define RP_SGEMM_H

#include <stddef.h>

#include "ringpipe/rp_base.h"
#include "ringpipe/rp_pool.h"

typedef enum {
  RP_SGEMM_PORTABLE = 0, /* plain C micro-kernel, any CPU (the driver's test double) */
  RP_SGEMM_AVX2 = 1,     /* 6 x 16 ymm tiles */
  RP_SGEMM_AVX512 = 2,   /* 12 x 32 zmm tiles */
} rp_sgemm_kernel;
#define RP_SGEMM_KERNELS 3

const char *rp_sgemm_kernel_name(rp_sgemm_kernel k);
/* The most k per block kernel k runs with on this machine (its k blocks set
 * the summation order), 0 for an unknown kernel. */
int rp_sgemm_kernel_kc(rp_sgemm_kernel k);
/* 1 when the rp_isa.h ceiling allows k */
int rp_sgemm_kernel_supported(rp_sgemm_kernel k);
/* The kernel rp_matmul_* would run in RP_GEMM_OWN mode: the best the ceiling
 * allows, or -1 when there is none better than OpenBLAS (below avx2). */
int rp_sgemm_kernel_best(void);

/* out = inp @ weight^T + bias (bias may be NULL), plus resid when given
 * (resid may alias out). */
void rp_sgemm_forward(rp_sgemm_kernel k, float *out, const float *inp, const float *weight,
                      const float *bias, const float *resid, int N, int IC, int OC,
                      rp_pool *pool);
/* The block epilogue: epi(epi_ctx, m0, m1, j0, j1, ith) on rows [m0, m1) x
 * columns [j0, j1) of C that pool thread ith has just finished. */
typedef void (*rp_sgemm_block_fn)(void *epi_ctx, long m0, long m1, long j0, long j1, int ith);
/* A rows epilogue (the bf16 GEMM's): rows [lo, hi), all columns. */
typedef void (*rp_sgemm_rows_fn)(void *epi_ctx, long lo, long hi, int ith);
/* rp_sgemm_forward (no resid), and then each pool thread calls epi on the
 * blocks of out it has just finished: every element in exactly one call, by
 * the thread that computed it, a block of rows at a time while it is still in
 * cache where the blocking allows, else the thread's whole part at its end.
 * The threads split rows or columns (whichever moves fewer bytes), so a
 * block may span only some columns. */
void rp_sgemm_forward_epi(rp_sgemm_kernel k, float *out, const float *inp, const float *weight,
                          const float *bias, int N, int IC, int OC, rp_pool *pool,
                          rp_sgemm_block_fn epi, void *epi_ctx);
/* dinp (+)= dout @ weight (written when dinp_set, else accumulated),
 * dweight += dout^T @ inp, dbias += column sums of dout; any may be NULL. */
void rp_sgemm_backward(rp_sgemm_kernel k, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight, int N, int IC,
                       int OC, int dinp_set, rp_pool *pool);
/* dinp's epilogue, for per-column sums in row order (a bias gradient) beside
 * elementwise work: `both` on a block of dinp its thread has just finished,
 * while it is in cache; `any` (the elementwise part alone) on a block a
 * thread finished for another; `ordered` (the in-order part alone) on such
 * blocks afterwards, by the thread whose columns they are. Each column's
 * blocks reach `both` and `ordered` in row order, by one thread. */
typedef struct {
  rp_sgemm_block_fn both, any, ordered;
  void *ctx;
} rp_sgemm_epi;
/* rp_sgemm_backward with that epilogue on dinp: its threads split dinp's
 * columns (all rows each), and a thread out of work takes row blocks of
 * another's columns; so the ordered sums do not depend on the thread count
 * or on who took what. dinp must be given. */
void rp_sgemm_backward_epi(rp_sgemm_kernel k, float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *weight, int N,
                           int IC, int OC, int dinp_set, rp_pool *pool, const rp_sgemm_epi *epi);

/* ---- packed weights kept across calls
 *
 * Every call packs the weight it multiplies (the forward in one layout, dinp
 * in another). A step with several micro-batches (gradient accumulation, a
 * pipeline's, recompute) multiplies the same unchanged weights once per
 * micro-batch, and packing them was a tenth of a step at micro-batches of 256
 * rows. A run that knows its weights stay put for a while (from the start of
 * a step's forward passes to the end of its backward passes) creates a cache,
 * attaches it to its pool (rp_pool_set_wcache) for that window and
 * invalidates it before the next; while attached, rp_sgemm_forward and
 * rp_sgemm_backward keep each weight's pack, keyed by its address, layout and
 * shape, and reuse it: bitwise the same results, the packing done once per
 * window. The bf16 GEMM (rp_bf16.h) keeps its weight packs in the same cache,
 * keyed by the bf16 copy's address. A weight whose pack is over max_entry_bytes
 * (an LM head) is not kept. Changing a weight while the cache is attached and valid makes the
 * GEMM use its stale pack: detach or invalidate first. */
typedef struct rp_sgemm_wcache rp_sgemm_wcache;
rp_status rp_sgemm_wcache_create(rp_sgemm_wcache **out, size_t max_entry_bytes);
void rp_sgemm_wcache_invalidate(rp_sgemm_wcache *c); /* every pack stale; memory kept */
void rp_sgemm_wcache_free(rp_sgemm_wcache *c);
typedef struct {
  long hits, packs;  /* calls that reused a pack, calls that packed into the cache */
  int entries;       /* weights (x layouts) with a pack */
  size_t bytes;      /* held by the packs (RP_MEM_WORKSPACE) */
} rp_sgemm_wcache_stats;
rp_sgemm_wcache_stats rp_sgemm_wcache_get_stats(const rp_sgemm_wcache *c);

/* Frees the packing workspace (kept between calls; grows as needed). */
void rp_sgemm_workspace_release(void);

#endif
