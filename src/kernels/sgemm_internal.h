/* Private to the fp32 GEMM files (sgemm.c and its micro-kernels).
 *
 * A micro-kernel computes one MR x NR tile of C over kc steps of k:
 *   C[0:mr, 0:nr] (ldc) = (init + A_panel * B_panel) + Cin
 * where A_panel is float [kc][MR] (MR rows), B_panel float [kc][NR] (NR
 * columns), both packed by sgemm.c with zeros past the matrix edges; init is
 * an NR-float row (a bias) added to every row, or NULL for +0; Cin, an addend
 * with C's stride, is C itself (accumulating over k blocks), a residual, or
 * NULL. The products are one running sum over k in order (one rounding per
 * multiply-add), then Cin is added: a tile's position never changes a result,
 * so neither can the thread count. Only mr rows and nr columns of C and Cin
 * are touched. */
#ifndef RP_SGEMM_INTERNAL_H
#define RP_SGEMM_INTERNAL_H

#include "ringpipe/rp_base.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_sgemm.h"

typedef void (*rp_sgemm_ukr)(long kc, const float *a, const float *b, float *c, long ldc,
                             int mr, int nr, const float *init, const float *cin);
/* The same with A unpacked: MR full rows, row r's element k at a[r * lda + k]
 * (a k-contiguous source read in place). */
typedef void (*rp_sgemm_ukr_da)(long kc, const float *a, long lda, const float *b, float *c,
                                long ldc, int nr, const float *init, const float *cin);
/* packs w panel columns (rows r < have of the source, zeros up to w) by kc
 * steps of k into out[kc][w]; the source is k-contiguous (pack_t: X(r, k) =
 * src[r * ld + k]) or r-contiguous (pack_n: X(r, k) = src[k * ld + r]).
 * pack_t takes have = all the source's rows from src on, which may exceed w:
 * those past w (the next panel's) are only prefetched. */
typedef void (*rp_sgemm_pack_fn)(const float *src, long ld, int have, int w, long kc,
                                 float *out);

/* np such panels side by side (source columns [0, np * w), the first have of
 * them real), panel p into out + p * kc * w: r-contiguous sources only */
typedef void (*rp_sgemm_packblk_fn)(const float *src, long ld, int have, int w, int np, long kc,
                                    float *out);

typedef struct {
  const char *name;
  rp_isa isa; /* the rp_isa.h level it needs */
  int mr;     /* rows of a tile (A panel width) */
  int nr;     /* columns of a tile (B panel width) */
  int kc;     /* most k per block (C tiles are reloaded once per block) */
  int mc;     /* rows per packed A block (multiple of mr) */
  rp_sgemm_ukr ukr;
  rp_sgemm_ukr_da ukr_da; /* or NULL: A is always packed */
  /* vector packs, or NULL for sgemm.c's plain loops */
  rp_sgemm_pack_fn pack_t, pack_n;
  rp_sgemm_packblk_fn pack_nblock; /* or NULL: pack_n (or the plain loop) per panel */
} rp_sgemm_kdesc;

/* sgemm_avx512.c: 12 x 32 (24 zmm accumulators) */
#define RP_SGEMM_MR_AVX512 12
#define RP_SGEMM_NR_AVX512 32
void rp_sgemm_ukr_avx512(long kc, const float *a, const float *b, float *c, long ldc, int mr,
                         int nr, const float *init, const float *cin);
void rp_sgemm_ukr_avx512_da(long kc, const float *a, long lda, const float *b, float *c,
                            long ldc, int nr, const float *init, const float *cin);
/* sgemm_avx2.c: 6 x 16 (12 ymm accumulators) */
#define RP_SGEMM_MR_AVX2 6
#define RP_SGEMM_NR_AVX2 16
void rp_sgemm_ukr_avx2(long kc, const float *a, const float *b, float *c, long ldc, int mr,
                       int nr, const float *init, const float *cin);
void rp_sgemm_ukr_avx2_da(long kc, const float *a, long lda, const float *b, float *c,
                          long ldc, int nr, const float *init, const float *cin);

/* sgemm_avx2.c: the packs of the avx2 and avx512 kernels (w <= 64) */
void rp_sgemm_pack_t_avx2(const float *src, long ld, int have, int w, long kc, float *out);
void rp_sgemm_pack_n_avx2(const float *src, long ld, int have, int w, long kc, float *out);
void rp_sgemm_pack_nblock_avx2(const float *src, long ld, int have, int w, int np, long kc,
                               float *out);

extern const rp_sgemm_kdesc rp_sgemm_kd_avx512, rp_sgemm_kd_avx512_deep, rp_sgemm_kd_avx2,
    rp_sgemm_kd_portable;
/* 1 when the AVX-512 kernel takes the deep blocks (kc = 384) on a core with
 * these caches, 0 for the 192 x 192 ones. Pure, so that every case can be
 * tested on any machine. */
int rp_sgemm_deep_blocks_rule(long l1d_bytes, long l2_bytes);
/* The AVX-512 kernel's blocks: 1 deep, 0 the 192 x 192 ones, -1 the rule on
 * this machine's caches, so that tests can run both anywhere. */
void rp_sgemm_force_blocks(int deep);

/* 1 when the kernels' direct-A variants read a k-contiguous A in place on a
 * core like this one (a 48 KiB L1d, and an AMD core or the AVX-512 kernel),
 * 0 when A is packed: the same bits either way. Pure, for the tests. */
int rp_sgemm_a_inplace_rule(int amd, int avx512_kernel, long l1d_bytes);
/* The rule on this machine for the kernel of that rp_isa.h level, or what
 * rp_sgemm_force_a_inplace set (1, 0; -1: the rule again), so that tests run
 * both paths anywhere. */
int rp_sgemm_a_inplace(rp_isa kernel_isa);
void rp_sgemm_force_a_inplace(int on);

/* ---- operands (sgemm_pack.c) */

/* X(r, k) = kcontig ? p[r*ld + k] : p[k*ld + r], r < rows, k < K */
typedef struct {
  const float *p;
  long ld;
  int kcontig, rows, K;
} sg_src;

static inline long npanels(long cols, int nr) { return (cols + nr - 1) / nr; }
/* rows of a source packed whole into width-wide panels of all K */
static inline size_t panels_bytes(long rows, long K, int width) {
  return (size_t)(npanels(rows, width) * K * width) * sizeof(float);
}

/* np panels from row r0 on, panel p into out + p * kc * w (rows past s->rows
 * are zeros): an r-contiguous source in one row-by-row sweep where kd has the
 * block pack, else panel by panel */
void rp_sgemm_pack_panels(const rp_sgemm_kdesc *kd, const sg_src *s, int r0, int np, int w,
                          long k0, long kc, float *restrict out);

/* Packing B panels in parallel (one or two matrices per job) */
typedef struct {
  sg_src src;
  int cols;  /* panel rows of the source to pack (B: columns, A: rows) */
  int width; /* panel width: the kernel's nr for B, mr for A */
  float *out;
} bpack_job;

typedef struct {
  const rp_sgemm_kdesc *kd;
  bpack_job job[2];
  int njobs;
} bpack_ctx;

struct rp_pool;
void rp_sgemm_bpack_run(bpack_ctx *c, struct rp_pool *pool);

/* ---- the driver: one product's loops and a job's threads (sgemm_driver.c) */

/* Panels per B block packed on the fly (dweight's B): 24 x 32 columns x kc =
 * 192 is 576 KiB (kc = 384: 1.2 MiB of a 2 MiB L2; avx2: 24 x 16 x 256, 384
 * KiB), in L2 beside the A block; 24
 * rather than 16 so that at C = 384 each of two threads packs its 768 columns
 * of fcproj's B as one block and so packs A (dout) once, not twice (measured:
 * packing was 11% of a step, bench_step under perf). */
#define NC_PANELS 24

/* C[M, Nc] (+)= A[M, K] B[K, Nc] */
typedef struct {
  float *c;
  long ldc;
  int M, Nc, K;
  sg_src a;
  const float *apack; /* ceil(M / mr) panels of K x mr packed before the job, or NULL: A
                         packed block by block from a by each thread */
  const float *bpack; /* npanels(Nc) panels of K x nr, packed before the job; or NULL: */
  sg_src b;           /* B(k, j) = X(j, k), packed block by block by each thread */
  const float *init;  /* Nc floats (a bias) added to every row, or NULL */
  const float *resid; /* M x Nc with C's stride added to the product, or NULL */
  int load_c;         /* C accumulates (+=) */
  int a_inplace;      /* set by rp_sgemm_job_run: rp_sgemm_a_inplace(kd->isa) */
  int split_cols; /* threads take column panels (all rows) instead of row tiles */
  rp_sgemm_block_fn epi; /* or NULL: called on each thread's finished parts of C */
  rp_sgemm_block_fn epi_any, epi_order; /* NULL (epi is elementwise), or epi without the part
                         that must see each column's rows in order, and that part alone
                         (rp_sgemm_epi) */
  void *epi_ctx;
  int balance; /* threads share its work as they go (sgemm_driver.c says how); none with an
                  epi where B is packed on the fly by rows */
} gemm_prob;

/* A job: up to two products, then the bias sums */
typedef struct {
  const rp_sgemm_kdesc *kd;
  gemm_prob prob[2];
  int nprob;
  char *bufs; /* per thread buf_stride bytes: an A block, then a B block (rp_sgemm_thread_bytes) */
  size_t buf_stride;
  float *dbias; /* dbias[OC] += column sums of dout (or NULL) */
  const float *dout;
  int N, OC;
  /* set by rp_sgemm_job_run: how each product's threads share its work */
  struct gemm_share *share[2];
  int share_nth;
} gemm_ctx;

static inline size_t rp_sgemm_align64(size_t b) { return (b + 63) & ~(size_t)63; }
/* Per thread: an A block, and a B block when a product packs B on the fly. */
static inline size_t rp_sgemm_thread_bytes(const rp_sgemm_kdesc *kd, int with_b) {
  return rp_sgemm_align64((size_t)kd->mc * (size_t)kd->kc * sizeof(float)) +
         (with_b ? rp_sgemm_align64((size_t)NC_PANELS * (size_t)kd->nr * (size_t)kd->kc *
                                    sizeof(float))
                 : 0);
}

/* Runs the job on the pool (or the caller), work its size for rp_kern_run. */
void rp_sgemm_job_run(gemm_ctx *c, struct rp_pool *pool, long work);
/* Frees the driver's work-sharing state (rp_sgemm_workspace_release). */
void rp_sgemm_driver_ws_free(void);

#include "wcache_internal.h" /* the packed-weight cache, shared with the bf16 GEMM */

#endif
