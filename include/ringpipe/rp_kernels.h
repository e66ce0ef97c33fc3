/* Compute kernels: no MPI, no allocation of model state. Shapes in llm.c style:
 *   B batch, T sequence, C channels, NH heads, HS = C/NH, V vocab, Vp padded vocab,
 *   N = rows (B*T). Row-major everywhere; weights are (out, in) like llm.c.
 *
 * Gradient convention: every backward ACCUMULATES (+=) into its gradient outputs,
 * so residual branches and shared weights need no special case. A NULL gradient
 * pointer means "skip that gradient" (pipeline zero-bubble splits backward into
 * input-gradient I and weight-gradient W).
 *
 * Each optimized kernel has a plain reference (suffix _ref) beside it; tests
 * compare them. Kernels split rows/tiles over the pool with (ith, nth); pool may
 * be NULL (serial). */
#ifndef RP_KERNELS_H
#define RP_KERNELS_H

#include <stdint.h>
#include "rp_isa.h"
#include "rp_pool.h"

/* ---- matmul: out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias[OC] (bias may be NULL) */
void rp_matmul_forward(float *out, const float *inp, const float *weight,
                       const float *bias, int N, int IC, int OC, rp_pool *pool);
/* dinp[N,IC] += dout @ weight; dweight[OC,IC] += dout^T @ inp; dbias[OC] += sum rows */
void rp_matmul_backward(float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *weight,
                        int N, int IC, int OC, rp_pool *pool);
/* out[N,OC] = resid[N,OC] + inp @ weight^T + bias: the residual add fused into the
 * GEMM (sgemm adds the product into resid + bias). resid may alias out. */
void rp_matmul_forward_residual(float *out, const float *inp, const float *weight,
                                const float *bias, const float *resid, int N, int IC, int OC,
                                rp_pool *pool);
/* As rp_matmul_backward, but dinp is WRITTEN (=), not accumulated, so the caller
 * needs no memset; equal bitwise to rp_matmul_backward into a zeroed dinp.
 * dweight and dbias still accumulate. */
void rp_matmul_backward_set(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC,
                            rp_pool *pool);
void rp_matmul_forward_ref(float *out, const float *inp, const float *weight,
                           const float *bias, int N, int IC, int OC);
void rp_matmul_backward_ref(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            int N, int IC, int OC);
/* How GEMMs use the cores and which GEMM runs (decided by measurement, see
 * bench/bench_gemm and bench/bench_step --gemm ab; the default is RP_GEMM_OWN
 * where the rp_isa.h ceiling allows its avx512 kernel, else RP_GEMM_POOL_SPLIT:
 * at the avx2 level OpenBLAS measured faster than our avx2 kernel; but
 * RP_GEMM_OWN for every weight where OpenBLAS's kernels are above the ceiling
 * or below the own kernel's level, or the CPU is an AMD one with AVX-512, see
 * rp_gemm_auto_rule in src/kernels/fused_internal.h):
 * RP_GEMM_BLAS_THREADS: one sgemm call with OpenBLAS threads = pool size, pool asleep;
 * RP_GEMM_POOL_SPLIT: each pool thread calls single-threaded sgemm on its row slice;
 * RP_GEMM_OWN: ringpipe's GEMM (rp_sgemm.h): the shared operand packed once by
 *   all pool threads, then each runs its rows. Products with fewer than 16
 *   rows per thread (decoding) still take the OpenBLAS paths, and so do
 *   weights over 4 MiB when the mode was not set (auto). */
typedef enum { RP_GEMM_BLAS_THREADS = 0, RP_GEMM_POOL_SPLIT = 1, RP_GEMM_OWN = 2 } rp_gemm_mode;
/* --gemm auto|blas|split|own, in that order: auto keeps the measured default. */
typedef enum {
  RP_GEMM_CHOOSE_AUTO = 0,
  RP_GEMM_CHOOSE_BLAS,
  RP_GEMM_CHOOSE_SPLIT,
  RP_GEMM_CHOOSE_OWN
} rp_gemm_choice;
const char *rp_gemm_mode_name(rp_gemm_mode mode); /* "blas", "split", "own" */
/* The pool's mode in words, with what auto does (own only for weights up to
 * 4 MiB, OpenBLAS split above: where each measured faster) */
const char *rp_gemm_describe(const rp_pool *pool);
void rp_gemm_set_mode(rp_pool *pool, rp_gemm_mode mode);  /* the pool's runs */
/* --gemm's choice on the pool (auto leaves its measured default); RP_EINVAL,
 * with the fix, for own where the ceiling has no own kernel. */
rp_status rp_gemm_apply_choice(rp_pool *pool, rp_gemm_choice choice);
/* The path rp_matmul_forward (backward = 0) or rp_matmul_backward (1) takes for
 * N rows of an IC -> OC matmul on this pool: "own", "split" or "blas" (one
 * sgemm with OpenBLAS's threads; every product on one thread). */
const char *rp_matmul_path(rp_pool *pool, int N, int IC, int OC, int backward);
rp_gemm_mode rp_gemm_get_mode(const rp_pool *pool);
/* One shape's rates within rp_gemm_peak's repeats: its forward's and its
 * backward's (dinp and dweight) best, FLOP/s, each apart. */
typedef struct rp_gemm_shape_rate {
  long in, out;
  double fwd, bwd;
} rp_gemm_shape_rate;
/* sgemm FLOP/s of forward + backward over the (in, out) feature shapes with N
 * rows, timed with the pool's threads and the GEMM mode (gemm_peak.c): the MFU
 * denominator. scratch (may be NULL) is an idle buffer the operands are carved
 * from when it holds scratch_bytes >= what they need; otherwise they are
 * accounted workspace. 0 when they cannot be allocated. per_shape (may be
 * NULL) gets nshapes rates, in the order of shapes (0 where not measured). */
double rp_gemm_peak(const long shapes[][2], int nshapes, long N, rp_pool *pool, void *scratch,
                    size_t scratch_bytes, rp_gemm_shape_rate *per_shape);
/* FLOP/s of one IC -> OC matmul over N rows, forward (*fwd) and backward
 * (dinp and dweight, *bwd) apart, with the pool's threads and GEMM mode, best
 * of at least three repeats (a quarter second) after a warm-up; 0 and 0 when
 * its operands cannot be allocated
 * (`ringpipe bench gemm`'s per-shape table). */
void rp_gemm_shape_rates(long IC, long OC, long N, rp_pool *pool, double *fwd, double *bwd);
/* One IC -> OC matmul over N rows, forward + backward, back to back for
 * `seconds` of wall clock with the pool's threads and GEMM mode, after one
 * warm-up (gemm_peak.c): *st gets the repeats and their best, 90th, 50th and
 * 10th percentile rates in GFLOP/s (`ringpipe bench fma`'s GEMM check: the
 * caches' and memory's side of a shared machine, beside the register-only
 * probe). RP_EINVAL for a side or time that is not positive or operands of
 * over 4 GiB; RP_ENOMEM. It stops at RP_GEMM_CHECK_MAX_RUNS repeats. */
#define RP_GEMM_CHECK_MAX_RUNS 100000
rp_status rp_gemm_sustained(long N, long IC, long OC, rp_pool *pool, double seconds,
                            rp_isa_probe_stats *st);
/* The same through the bf16 GEMM the bf16 model runs (fp32 activations rounded
 * inside the call, bf16 weights, the kernel the rp_isa.h ceiling selects): the
 * MFU denominator of --precision bf16. */
double rp_gemm_peak_bf16(const long shapes[][2], int nshapes, long N, rp_pool *pool,
                         void *scratch, size_t scratch_bytes, rp_gemm_shape_rate *per_shape);
/* Bytes/s the pool's threads stream through two buffers of `bytes` each
 * (y = a x + y: two reads, one write), best of a few (mem_peak.c): the memory
 * counterpart of the FMA peak. 0 when the buffers cannot be allocated. */
double rp_stream_bandwidth(long bytes, rp_pool *pool);
/* The OpenBLAS kernel family in use, and advice when it is a slow fallback
 * (NULL when all is well). */
const char *rp_blas_core(void);
/* The instruction set of OpenBLAS's sgemm kernels (its core, fixed when the
 * library loads: avx512, avx2, or scalar for older cores), and 1 when that is
 * above the rp_isa.h ceiling: RINGPIPE_ISA cannot hold OpenBLAS (only
 * OPENBLAS_CORETYPE can), so auto then gives every weight to the own GEMM. */
rp_isa rp_blas_core_isa(void);
int rp_blas_above_ceiling(void);
/* RP_EINVAL when OpenBLAS's core needs more than the CPU has (an
 * OPENBLAS_CORETYPE=SkylakeX inherited by an AVX2-only machine, or Haswell by
 * one without AVX2): its first call would end the process with an illegal
 * instruction, so the CLI stops at start-up with this message instead.
 * rp_blas_check_cpu_rule is the decision on given values (coretype: the
 * variable's value, NULL when unset), for tests. */
rp_status rp_blas_check_cpu(void);
rp_status rp_blas_check_cpu_rule(const char *core, rp_isa core_isa, rp_isa cpu,
                                 const char *coretype);
const char *rp_blas_advice(void);
void rp_blas_set_threads(int n);   /* openblas_set_num_threads, remembered */

/* ---- embedding: out[N,C] = wte[tok[i]] + wpe[pos[i]] */
void rp_embed_forward(float *out, const int32_t *tok, const int32_t *pos,
                      const float *wte, const float *wpe, int N, int C, rp_pool *pool);
void rp_embed_backward(float *dwte, float *dwpe, const float *dout,
                       const int32_t *tok, const int32_t *pos, int N, int C,
                       rp_pool *pool);

/* ---- layernorm over C per row; saves mean[N] and rstd[N] for backward */
void rp_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C, rp_pool *pool);
void rp_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C, rp_pool *pool);

/* ---- GELU, tanh approximation (GPT-2) */
void rp_gelu_forward(float *out, const float *inp, long n, rp_pool *pool);
void rp_gelu_backward(float *dinp, const float *inp, const float *dout, long n,
                      rp_pool *pool);
/* dinp = gelu'(inp) * dout, WRITTEN (no memset needed); bitwise equal to
 * rp_gelu_backward into zeros. */
void rp_gelu_backward_set(float *dinp, const float *inp, const float *dout, long n,
                          rp_pool *pool);
/* rp_gelu_backward_set over [N,C] plus dbias[C] += the column sums of dinp
 * (dbias may be NULL): the next matmul's bias gradient in the same pass,
 * bitwise rp_matmul_backward's dbias of dinp (gelu.c). */
void rp_gelu_backward_set_dbias(float *dinp, float *dbias, const float *inp, const float *dout,
                                int N, int C, rp_pool *pool);

/* ---- the MLP's fc matmul with GELU fused in (matmul_fused.c): pre = inp @
 * weight^T + bias, post = gelu(pre), bitwise rp_matmul_forward followed by
 * rp_gelu_forward. epilogue_s (may be NULL) receives the GELU epilogue's
 * seconds on the calling thread, for the step profile. */
void rp_matmul_forward_gelu(float *pre, float *post, const float *inp, const float *weight,
                            const float *bias, int N, int IC, int OC, rp_pool *pool,
                            double *epilogue_s);
/* Its backward through the MLP's c_proj: dpost = dout @ weight (written),
 * dweight += dout^T @ post, dbias += column sums of dout, then dpre =
 * gelu'(pre) * dpost (written) and dbias_pre += the column sums of dpre (c_fc's
 * bias gradient); dweight, dbias and dbias_pre may be NULL. Bitwise
 * rp_matmul_backward_set followed by rp_gelu_backward_set_dbias; with the own
 * GEMM the GELU runs on each block of dpost as it is finished, in cache.
 * epilogue_s as above. */
void rp_matmul_backward_gelu(float *dpre, float *dpost, float *dbias_pre, float *dweight,
                             float *dbias, const float *dout, const float *post,
                             const float *pre, const float *weight, int N, int IC, int OC,
                             rp_pool *pool, double *epilogue_s);
/* The same with the bf16 GEMM of rp_bf16.h (w16: the weight in bf16; inp
 * rounded to bf16 inside): bitwise rp_matmul_bf16_forward_f32in followed by
 * rp_gelu_forward. */
void rp_matmul_bf16_forward_gelu(float *pre, float *post, const float *inp, const uint16_t *w16,
                                 const float *bias, int N, int IC, int OC, rp_pool *pool,
                                 double *epilogue_s);
/* out = inp @ w16^T + bias + resid with the bf16 GEMM, the residual added by
 * each pool thread to the rows it has just computed; prod receives the product
 * (pass out itself, or scratch when out aliases resid). Bitwise
 * rp_matmul_bf16_forward_f32in into prod followed by out = prod + resid. */
void rp_matmul_bf16_forward_residual(float *out, float *prod, const float *inp,
                                     const uint16_t *w16, const float *bias, const float *resid,
                                     int N, int IC, int OC, rp_pool *pool);

/* ---- residual: out = a + b; backward is da += dout, db += dout */
void rp_residual_forward(float *out, const float *a, const float *b, long n, rp_pool *pool);
void rp_add_inplace(float *acc, const float *x, long n, rp_pool *pool); /* acc += x */
void rp_zero(float *x, long n, rp_pool *pool);                          /* x = 0 */
/* 1 when rp_zero clears n floats with streaming stores (past the caches) */
int rp_zero_streams(long n);
/* x = 0 for zeros first read only after a pass over more data than the caches
 * hold (a step's gradients): streaming stores from a smaller size than rp_zero */
void rp_zero_cold(float *x, long n, rp_pool *pool);
int rp_zero_cold_streams(long n);

/* ---- reference causal attention, O(T^2) memory: the oracle for every other one.
 * qkv[B,T,3C] holds q,k,v per row; out[B,T,C]; att[B,NH,T,T] saved softmax probs.
 * lse[B,NH,T] (may be NULL) gets the row log-sum-exp of the scaled scores. */
void rp_attention_ref_forward(float *out, float *att, float *lse, const float *qkv,
                              int B, int T, int C, int NH, int causal, rp_pool *pool);
/* The oracle for document masks: key t2 is visible to query t of row b iff
 * mask[(b*T + t)*T + t2] != 0 (any pattern); rows that see nothing give O = 0
 * and lse = -inf. The backward is rp_attention_ref_backward (att carries the mask). */
void rp_attention_ref_forward_masked(float *out, float *att, float *lse, const float *qkv,
                                     int B, int T, int C, int NH, const uint8_t *mask,
                                     rp_pool *pool);
void rp_attention_ref_backward(float *dqkv, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH,
                               rp_pool *pool);

/* ---- fused softmax + cross-entropy over the first V of Vp logits per row.
 * A target of -1 is masked: loss 0, gradient 0. Stable (max-subtracted). */
void rp_xent_forward(float *losses, const float *logits, const int32_t *targets,
                     int N, int V, int Vp, rp_pool *pool);
/* dlogits = (softmax(logits) - onehot(target)) * dscale, written (not accumulated);
 * dlogits may alias logits. Padded columns V..Vp get 0. Also writes losses if
 * non-NULL, so one pass serves training. */
void rp_xent_backward(float *dlogits, float *losses, const float *logits,
                      const int32_t *targets, float dscale, int N, int V, int Vp,
                      rp_pool *pool);

/* ---- vocabulary-parallel cross-entropy (crossentropy_vp.c): this rank's
 * logits are columns [v0, v0 + Vl) of Vp, the first ncols of them real
 * vocabulary. The caller all-reduces between the calls: rowmax (max), then
 * sumexp and target_logit (sum); loss = log(sumexp) + rowmax - target_logit and
 * the backward's shift = rowmax + log(sumexp). Masked rows (-1) give 0 and a
 * zero gradient; dlogits may alias logits. */
void rp_xent_vp_max(float *rowmax, const float *logits, const int32_t *targets, int N, int Vl,
                    int ncols, rp_pool *pool);
void rp_xent_vp_sums(float *sumexp, float *target_logit, const float *logits,
                     const int32_t *targets, const float *rowmax, int N, int Vl, int ncols,
                     int v0, rp_pool *pool);
void rp_xent_vp_backward(float *dlogits, const float *logits, const int32_t *targets,
                         const float *shift, float dscale, int N, int Vl, int ncols, int v0,
                         rp_pool *pool);

/* ---- optimizer */
typedef struct {
  float lr, beta1, beta2, eps, weight_decay;
} rp_adamw_hparams;
/* One AdamW step over n values; t is the 1-based step for bias correction;
 * weight decay (decoupled) is applied only when decay != 0. */
void rp_adamw_update(float *param, const float *grad, float *m, float *v, long n,
                     const rp_adamw_hparams *h, float wd, int t, rp_pool *pool);
/* The same step on grad * gscale (gradient clipping) without rescaling grad in
 * memory first: bitwise equal to rp_scale(grad, gscale) + rp_adamw_update, one
 * memory pass less; grad itself is left unscaled. */
void rp_adamw_update_scaled(float *param, const float *grad, float *m, float *v, long n,
                            const rp_adamw_hparams *h, float wd, int t, float gscale,
                            rp_pool *pool);
/* The same, and param16[i] = the updated param[i] rounded to bf16 (nearest
 * even): bitwise rp_adamw_update_scaled followed by rp_bf16_from_f32_array of
 * the parameters, one read of them less (--precision bf16's weight copies). */
void rp_adamw_update_scaled_bf16(float *param, uint16_t *param16, const float *grad, float *m,
                                 float *v, long n, const rp_adamw_hparams *h, float wd, int t,
                                 float gscale, rp_pool *pool);
double rp_sumsq(const float *x, long n, rp_pool *pool);   /* sum of squares, double acc */
void rp_scale(float *x, float s, long n, rp_pool *pool);
/* lr at 0-based step: linear warmup over `warmup`, cosine from lr to min_lr until
 * total; constant lr when warmup == 0 and min_lr == lr. */
float rp_lr_cosine(int step, int warmup, int total, float lr, float min_lr);
/* --lr-schedule cosine|constant, in that order. */
typedef enum { RP_LR_COSINE = 0, RP_LR_CONSTANT = 1 } rp_lr_schedule;

#endif
