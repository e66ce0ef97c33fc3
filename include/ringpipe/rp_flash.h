/* FlashAttention on the CPU: tiled forward and backward with the online softmax,
 * O(T) memory, run as (ith, nth) tiles on the rank's thread pool.
 *
 * Shapes (see rp_kernels.h): B batch, NH heads, HS head size (1..256, tuned for
 * 16..128), Tq query rows, Tk key rows.
 *
 * Whole attention (the model's layout): qkv[B,T,3C] with q at columns [0,C), k at
 * [C,2C), v at [2C,3C) and head h at columns h*HS..(h+1)*HS of each; out[B,T,C];
 * lse[B,NH,T] the row log-sum-exp L = m + log(l) of the scaled scores.
 *
 * Block attention (the ring's inner loop): queries, keys and values are separate
 * row views (rp_flash_view), so a rank can attend its own queries to K/V blocks
 * received from a peer. A received block is best sent as one contiguous
 * kv[B,Tk,2C] buffer: k = {kv, 2C, Tk*2C}, v = {kv + C, 2C, Tk*2C}; its gradient
 * dkv[B,Tk,2C] uses the same views. A zigzag chunk of the local qkv[B,T,3C]
 * starting at row r0 is q = {qkv + r0*3C, 3C, T*3C} (batch stride stays T*3C).
 *
 * Ring attention recipe (forward): for each K/V block, rp_flash_block_forward
 * gives a partial (O_b, L_b) with the visibility of that block (all, causal by
 * global positions, none), and rp_flash_merge folds it into the running (O, L).
 * Backward: D = rowsum(dO * O) once (rp_flash_rowdot) on the FINAL O, then per
 * K/V block rp_flash_block_backward with the FINAL global L and D accumulates
 * dQ locally and dK/dV into the block's gradient buffer to be sent home.
 *
 * Every gradient output ACCUMULATES (+=), like all kernels here; a NULL gradient
 * view pointer skips that gradient. O, L and D outputs are written. */
#ifndef RP_FLASH_H
#define RP_FLASH_H

#include "rp_base.h"
#include "rp_pool.h"

/* Row view of a [B, T, *] tensor: element (b, t, h, d) is at
 * p[b*bs + t*ld + h*HS + d]. Statistics (L, D) are [B, NH, T] views with the
 * roles of t and h swapped: element (b, h, t) is at p[b*bs + h*ld + t].
 * Kernels never write through a view that is documented as an input (the
 * pointer is non-const only so that one type serves both). */
typedef struct {
  float *p;
  long ld;   /* floats between rows (rows view) or between heads (stat view) */
  long bs;   /* floats between batch entries */
} rp_flash_view;

static inline rp_flash_view rp_flash_view_of(const float *p, long ld, long bs) {
  rp_flash_view v = {(float *)p, ld, bs};
  return v;
}

/* ---- configuration: per run, owned by the caller. Every entry point takes a
 * `const rp_flash_config *` (in rp_flash_problem for the block entry points);
 * NULL or an all-zero config means everything automatic (the best ISA under the
 * rp_isa.h ceiling, block sizes from the L2 size). Nothing is process-wide, so
 * two runs in one process may use different settings. */
typedef enum {
  RP_FLASH_ISA_AUTO = 0,   /* best path at or below the rp_isa.h ceiling */
  RP_FLASH_ISA_SCALAR,     /* portable C */
  RP_FLASH_ISA_AVX2,       /* AVX2 + FMA */
  RP_FLASH_ISA_AVX512      /* AVX-512F */
} rp_flash_isa;

typedef enum {
  RP_FLASH_SPLIT_AUTO = 0, /* by head when B*NH spreads evenly over the threads */
  RP_FLASH_SPLIT_HEAD,     /* backward task = (b, h): owns dQ, dK, dV of the head */
  RP_FLASH_SPLIT_KEYBLOCK  /* backward task = (b, h, key block): owns its dK, dV
                              rows; dQ goes to per-thread partials, summed after */
} rp_flash_split;

typedef struct {
  int bq, bk;          /* query / key block rows; 0 = derived from the L2 size */
  rp_flash_isa isa;
  rp_flash_split split;
  long l2_bytes;       /* 0 = sysconf(_SC_LEVEL2_CACHE_SIZE), else /sys, else 1 MiB */
  /* 1: the five products round their operands to bf16 and run on vdpbf16ps
   * (fp32 accumulation, softmax and outputs), where the AVX-512 path runs
   * under an avx512bf16 ceiling; elsewhere fp32 (rp_flash_bf16_active says
   * which). A bf16 training run sets it. */
  int bf16;
} rp_flash_config;

/* Validates a config (blocks 0 or 1..1024, ISA allowed by the rp_isa.h ceiling);
 * NULL is valid. Call it where the config is built: the kernels re-check only
 * what can change later (a lowered ceiling makes a configured ISA yield). */
rp_status rp_flash_config_check(const rp_flash_config *cfg);
/* Block sizes that a problem with head size HS and Tq/Tk rows will use. */
void rp_flash_block_sizes(const rp_flash_config *cfg, int HS, int Tq, int Tk, int *bq, int *bk);
int rp_flash_isa_supported(rp_flash_isa isa);  /* by the CPU and under the ceiling */
/* What AUTO resolves to, or the configured one while the ceiling allows it. */
rp_flash_isa rp_flash_isa_active(const rp_flash_config *cfg);
const char *rp_flash_isa_name(rp_flash_isa isa);
/* 1 when cfg asks for bf16 products and they can run (see rp_flash_config.bf16). */
int rp_flash_bf16_active(const rp_flash_config *cfg);
/* 1 when bf16 products can run and are worth it: vdpbf16ps's measured
 * multiply-add rate (rp_isa_peak_gflops) is at least 1.5x the zmm FMA's.
 * Elsewhere they do the fp32 work's multiply-adds no faster, plus rounding
 * and packing. */
int rp_flash_bf16_pays(void);
long rp_flash_l2_bytes(const rp_flash_config *cfg);  /* the L2 size in use */

/* Which keys a block of queries sees. Positions are global sequence positions,
 * so causal masking is correct for any placement of the two ranges. */
typedef enum {
  RP_FLASH_VIS_ALL = 0,    /* every key visible: no mask ("full" block of the ring) */
  RP_FLASH_VIS_CAUSAL = 1, /* key j visible to query i iff k_pos0 + j <= q_pos0 + i;
                              fully masked tiles are skipped, only the diagonal is masked */
  RP_FLASH_VIS_NONE = 2,   /* nothing visible: O_b = 0, L_b = -inf (lets a ring caller
                              treat every block alike; merge ignores it) */
  RP_FLASH_VIS_RANGE = 3   /* document masks: query row i of batch entry b sees the key
                              rows [lo, hi) given by krange (below); tiles no row sees
                              are skipped, only boundary tiles are masked per element */
} rp_flash_vis;

/* One attention problem: queries q (Tq rows) against keys k and values v (Tk rows). */
typedef struct {
  int B, NH, HS;
  int Tq, Tk;
  long q_pos0, k_pos0;    /* global position of query row 0 and key row 0 (CAUSAL) */
  rp_flash_vis vis;
  float scale;            /* score scale; 0 means 1/sqrt(HS) */
  rp_flash_view q, k, v;  /* inputs, rows views */
  const rp_flash_config *cfg;  /* the run's settings; NULL = automatic */
  /* RANGE only: krange[b*krange_bs + 2*i + 0/1] = [lo, hi) key rows of query row i
   * (0 <= lo, hi <= Tk; lo >= hi: none) */
  const int32_t *krange;
  long krange_bs;
} rp_flash_problem;

/* ---- whole attention over the model's qkv layout (self attention, causal or not) */
rp_status rp_flash_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                           int NH, int causal, const rp_flash_config *cfg, rp_pool *pool);
/* dqkv[B,T,3C] += gradient, given dout[B,T,C], the forward's out and lse. */
rp_status rp_flash_backward(float *dqkv, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int C,
                            int NH, int causal, const rp_flash_config *cfg, rp_pool *pool);

/* Document-masked self attention over qkv[B,T,3C]: query t of row b sees keys
 * [kr[(b*T+t)*2], kr[(b*T+t)*2+1]) (rp_docs_self_ranges builds them from
 * cu_seqlens: causal within each document, nothing across). */
rp_status rp_flash_forward_ranges(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH, const int32_t *kr, const rp_flash_config *cfg,
                                  rp_pool *pool);
rp_status rp_flash_backward_ranges(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int C,
                                   int NH, const int32_t *kr, const rp_flash_config *cfg,
                                   rp_pool *pool);

/* ---- block entry points (ring attention).
 * Forward writes the partial o[B,Tq,NH*HS] (rows view) and lse[B,NH,Tq] (stat
 * view) of attending q to this block's keys only. Rows that see no key get O = 0
 * and L = -inf. */
rp_status rp_flash_block_forward(const rp_flash_problem *pr, rp_flash_view o,
                                 rp_flash_view lse, rp_pool *pool);
/* Backward of one block given the FINAL (merged) lse and D = rowsum(dO * O_final)
 * of the query rows: dq (rows view, Tq rows) += ..., dk, dv (rows views, Tk rows)
 * += .... Summing it over any split of the keys gives the whole backward. */
rp_status rp_flash_block_backward(const rp_flash_problem *pr, rp_flash_view dout,
                                  rp_flash_view lse, rp_flash_view dsum, rp_flash_view dq,
                                  rp_flash_view dk, rp_flash_view dv, rp_pool *pool);
/* dsum[b,h,t] = sum_d dout[b,t,h,d] * o[b,t,h,d] (stat view written). */
rp_status rp_flash_rowdot(rp_flash_view dsum, rp_flash_view dout, rp_flash_view o, int B,
                          int NH, int T, int HS, const rp_flash_config *cfg, rp_pool *pool);
/* Fold a partial (o_b, lse_b) into the running (o, lse), in place and stably:
 * L = max + log1p(exp(min - max)), O = exp(L_a - L) O_a + exp(L_b - L) O_b. A side
 * with L = -inf contributes nothing and its O is never read; both -inf leaves
 * (o, lse) unchanged, so start the running pair as (0, -inf) and rows that never
 * see a key end as O = 0, L = -inf. */
rp_status rp_flash_merge(rp_flash_view o, rp_flash_view lse, rp_flash_view o_b,
                         rp_flash_view lse_b, int B, int NH, int T, int HS,
                         const rp_flash_config *cfg, rp_pool *pool);

/* ---- asynchronous variants: the job runs on the pool's workers only (nth-1 of
 * them; with a 1-thread pool it runs at once on the caller), so the caller's
 * thread stays free to progress MPI between polls. Views must stay valid until
 * rp_flash_job_finish, which waits, completes (dQ reduction) and frees the job. */
typedef struct rp_flash_job rp_flash_job;
rp_status rp_flash_block_forward_launch(rp_flash_job **job, const rp_flash_problem *pr,
                                        rp_flash_view o, rp_flash_view lse, rp_pool *pool);
rp_status rp_flash_block_backward_launch(rp_flash_job **job, const rp_flash_problem *pr,
                                         rp_flash_view dout, rp_flash_view lse,
                                         rp_flash_view dsum, rp_flash_view dq,
                                         rp_flash_view dk, rp_flash_view dv, rp_pool *pool);
int rp_flash_job_done(const rp_flash_job *job);     /* 1 when the workers are done */
rp_status rp_flash_job_finish(rp_flash_job *job);

/* ---- the model's attention backend (causal; saved state = lse, B*NH*T floats).
 * rp_attn_flash(): automatic settings. rp_attn_flash_with fills a backend the
 * caller owns that runs with *cfg (checked; cfg must outlive the backend). */
struct rp_attn_backend;
const struct rp_attn_backend *rp_attn_flash(void);
rp_status rp_attn_flash_with(struct rp_attn_backend *out, const rp_flash_config *cfg);

/* FLOP/s of the active ISA's flash GEMM micro-kernel on L2-resident 192 x 256
 * x 192 tiles, every pool thread at once (flash_peak.c). */
double rp_flash_kernel_peak(const rp_flash_config *cfg, rp_pool *pool);
/* `ringpipe bench attention`: flash vs naive table (src/cli/cmd_bench_attention.c). */
int rp_bench_attention(int argc, char **argv);

#endif
