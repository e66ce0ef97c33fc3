/* FlashAttention entry points: configuration (block sizes from the L2 size,
 * instruction set chosen at run time), the whole-attention wrappers over the
 * model's qkv layout, the ring helpers (row dot, merge) and the job plumbing
 * that runs the tile loops of flash_attention_fwd.c / _bwd.c on the pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flash_attention_internal.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_isa.h"

/* Every setting comes from the caller's config (NULL: all automatic); this file
 * keeps no settings of its own, only the cached L2 size the CPU reports. */
static const rp_flash_config k_auto;   /* all zero: everything automatic */

static const rp_flash_config *cfg_or_auto(const rp_flash_config *cfg) {
  return cfg ? cfg : &k_auto;
}

/* ---- instruction set: the best path at or below the process's ceiling (rp_isa.h) */

static rp_isa level_of(rp_flash_isa isa) {
  switch (isa) {
    case RP_FLASH_ISA_AVX2: return RP_ISA_AVX2;
    case RP_FLASH_ISA_AVX512: return RP_ISA_AVX512;
    default: return RP_ISA_SCALAR;
  }
}

int rp_flash_isa_supported(rp_flash_isa isa) {
  if (isa < RP_FLASH_ISA_AUTO || isa > RP_FLASH_ISA_AVX512) return 0;
  return rp_isa_allows(level_of(isa));
}

/* A configured ISA counts only while the ceiling allows it: lowering the ceiling
 * later (a test looping over levels) must not leave a path above it running. */
rp_flash_isa rp_flash_isa_active(const rp_flash_config *cfg) {
  cfg = cfg_or_auto(cfg);
  if (cfg->isa != RP_FLASH_ISA_AUTO && rp_flash_isa_supported(cfg->isa)) return cfg->isa;
  if (rp_flash_isa_supported(RP_FLASH_ISA_AVX512)) return RP_FLASH_ISA_AVX512;
  if (rp_flash_isa_supported(RP_FLASH_ISA_AVX2)) return RP_FLASH_ISA_AVX2;
  return RP_FLASH_ISA_SCALAR;
}

const char *rp_flash_isa_name(rp_flash_isa isa) {
  switch (isa) {
    case RP_FLASH_ISA_AUTO: return "auto";
    case RP_FLASH_ISA_SCALAR: return "scalar";
    case RP_FLASH_ISA_AVX2: return "avx2";
    case RP_FLASH_ISA_AVX512: return "avx512";
  }
  return "?";
}

const rp_flash_ops *rp_flash_ops_active(const rp_flash_config *cfg) {
  switch (rp_flash_isa_active(cfg)) {
    case RP_FLASH_ISA_AVX512: return &rp_flash_ops_avx512;
    case RP_FLASH_ISA_AVX2: return &rp_flash_ops_avx2;
    default: return &rp_flash_ops_scalar;
  }
}

const rp_flash_bf16_ops *rp_flash_bf16_ops_active(const rp_flash_config *cfg) {
  if (!cfg || !cfg->bf16 || rp_flash_isa_active(cfg) != RP_FLASH_ISA_AVX512) return NULL;
  return rp_isa_allows(RP_ISA_AVX512BF16) && rp_flash_bf16_avx512.gemm ? &rp_flash_bf16_avx512
                                                                       : NULL;
}

int rp_flash_bf16_active(const rp_flash_config *cfg) { return rp_flash_bf16_ops_active(cfg) != NULL; }

/* Measured (2 threads, default model's T = 256, bf16 run): on Zen 5 the bf16
 * products made attention faster; on the Sapphire Rapids VM, whose vdpbf16ps
 * probe reads 109 GFLOP/s a thread against the zmm FMA's 216, attention took
 * 38-39 ms a step against 29 ms in fp32. Two products per lane pay only where
 * the instruction issues as fast as an FMA; 1.5x leaves room for the packing. */
#define BF16_PAYS_MIN_RATIO 1.5

int rp_flash_bf16_pays(void) {
  const rp_flash_config want = {.bf16 = 1};
  if (!rp_flash_bf16_active(&want)) return 0;
  const double fma = rp_isa_peak_gflops(RP_ISA_AVX512);
  return fma > 0.0 && rp_isa_peak_gflops(RP_ISA_AVX512BF16) >= BF16_PAYS_MIN_RATIO * fma;
}

/* ---- cache size and block sizes */

long rp_flash_l2_bytes(const rp_flash_config *cfg) {
  return cfg && cfg->l2_bytes > 0 ? cfg->l2_bytes : rp_isa_l2_bytes();
}

/* Block sizes from the L2 size. A worker's backward working set
 * (flash_attention_bwd.c): two bq x bk score tiles (P, dS), five bk x HS ones
 * (K^T, V^T, packed K, and the dK and dV output rows the products add to)
 * and three bq x HS ones (packed Q, dO, the dQ tile); take the largest bk
 * whose set fits in half the L2 (the other half holds streamed rows), with
 * bq = bk / 2. Measured on Sapphire Rapids (2 MiB
 * L2, HS 64, one thread, T = 2048 causal, fwd+bwd, after the operand packing
 * and diagonal strips): 96 x 192 and 48 x 192 88-93 ms, 96 x 96 90-91,
 * 128 x 128 96-100, 128 x 256 97-98, 64 x 128 100-103, 64 x 256 98-103.
 * Multiples of 6 and 64 fit the AVX-512 micro-kernel's row and column blocks. */
static void auto_blocks(const rp_flash_config *cfg, int HS, int *bq, int *bk) {
  static const int cand[] = {192, 128, 96, 64, 48, 32, 16};
  long budget = rp_flash_l2_bytes(cfg) / 2;
  for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
    long k = cand[i], q = k / 2;
    if (4 * (2 * q * k + (long)HS * (5 * k + 3 * q)) <= budget || k == 16) {
      *bq = (int)q;
      *bk = (int)k;
      return;
    }
  }
}

void rp_flash_block_sizes(const rp_flash_config *cfg, int HS, int Tq, int Tk, int *bq,
                          int *bk) {
  cfg = cfg_or_auto(cfg);
  int aq, ak;
  auto_blocks(cfg, HS, &aq, &ak);
  int q = cfg->bq > 0 ? cfg->bq : aq;
  int k = cfg->bk > 0 ? cfg->bk : ak;
  /* a short sequence needs no block bigger than itself */
  *bq = Tq > 0 && Tq < q ? Tq : q;
  *bk = Tk > 0 && Tk < k ? Tk : k;
}

rp_status rp_flash_config_check(const rp_flash_config *cfg) {
  if (!cfg) return RP_OK;
  if (cfg->bq < 0 || cfg->bq > 1024 || cfg->bk < 0 || cfg->bk > 1024)
    return rp_err(RP_EINVAL, "flash block sizes bq=%d bk=%d out of range; use 0 (auto) or 1..1024",
                  cfg->bq, cfg->bk);
  if (cfg->isa < RP_FLASH_ISA_AUTO || cfg->isa > RP_FLASH_ISA_AVX512)
    return rp_err(RP_EINVAL, "flash ISA %d unknown; use auto, scalar, avx2 or avx512",
                  (int)cfg->isa);
  if (!rp_flash_isa_supported(cfg->isa))
    return rp_err(RP_EINVAL, "flash ISA '%s' cannot run here (%s); use auto",
                  rp_flash_isa_name(cfg->isa), rp_isa_why_not(level_of(cfg->isa)));
  if (cfg->split < RP_FLASH_SPLIT_AUTO || cfg->split > RP_FLASH_SPLIT_KEYBLOCK)
    return rp_err(RP_EINVAL, "flash split %d unknown; use auto, head or keyblock", cfg->split);
  if (cfg->bf16 != 0 && cfg->bf16 != 1)
    return rp_err(RP_EINVAL, "flash bf16 %d unknown; use 0 (fp32 products) or 1", cfg->bf16);
  if (cfg->l2_bytes < 0)
    return rp_err(RP_EINVAL, "flash l2_bytes %ld is negative; use 0 (query the CPU)", cfg->l2_bytes);
  return RP_OK;
}

rp_status rp_flash_check_problem(const rp_flash_problem *pr) {
  if (pr->B < 1 || pr->NH < 1 || pr->HS < 1 || pr->HS > 256 || pr->Tq < 0 || pr->Tk < 0)
    return rp_err(RP_EINVAL,
                  "flash attention shape B=%d NH=%d HS=%d Tq=%d Tk=%d is invalid; need "
                  "B, NH >= 1, 1 <= HS <= 256, T >= 0",
                  pr->B, pr->NH, pr->HS, pr->Tq, pr->Tk);
  if (pr->vis < RP_FLASH_VIS_ALL || pr->vis > RP_FLASH_VIS_RANGE)
    return rp_err(RP_EINVAL, "flash visibility %d unknown; use all, causal, none or range",
                  pr->vis);
  if (pr->vis == RP_FLASH_VIS_RANGE && (!pr->krange || pr->krange_bs < 2L * pr->Tq))
    return rp_err(RP_EINVAL, "flash range visibility needs key ranges with a batch stride >= "
                  "2*Tq = %ld (got %p, %ld)", 2L * pr->Tq, (const void *)pr->krange,
                  pr->krange_bs);
  if (pr->scale < 0.0f || !isfinite(pr->scale))
    return rp_err(RP_EINVAL, "flash scale %g must be finite and > 0 (0 = 1/sqrt(HS))",
                  (double)pr->scale);
  long width = (long)pr->NH * pr->HS;
  if (!pr->q.p || pr->q.ld < width || (pr->Tk > 0 && (!pr->k.p || !pr->v.p ||
                                                       pr->k.ld < width || pr->v.ld < width)))
    return rp_err(RP_EINVAL,
                  "flash q/k/v views need non-NULL data and row strides >= NH*HS = %ld "
                  "(got %ld, %ld, %ld)",
                  width, pr->q.ld, pr->k.ld, pr->v.ld);
  return RP_OK;
}

void rp_flash_make_plan(rp_flash_plan *pl, const rp_flash_problem *pr) {
  rp_flash_block_sizes(pr->cfg, pr->HS, pr->Tq, pr->Tk, &pl->bq, &pl->bk);
  pl->nqb = RP_CEIL_DIV(pr->Tq, pl->bq);
  pl->nkb = RP_CEIL_DIV(pr->Tk, pl->bk);
  pl->scale = pr->scale > 0.0f ? pr->scale : 1.0f / sqrtf((float)pr->HS);
  pl->split = cfg_or_auto(pr->cfg)->split;
  pl->ops = rp_flash_ops_active(pr->cfg);
  pl->bf16 = rp_flash_bf16_ops_active(pr->cfg);
}

void rp_flash_pack_t(float *dst, long ldd, const float *src, long ld, int n, int HS) {
  /* 8-row strips so that each destination row is written 8 floats at a time */
  int r = 0;
  for (; r + 8 <= n; r += 8)
    for (int d = 0; d < HS; d++) {
      float *o = dst + d * ldd + r;
      for (int u = 0; u < 8; u++) o[u] = src[(long)(r + u) * ld + d];
    }
  for (; r < n; r++)
    for (int d = 0; d < HS; d++) dst[d * ldd + r] = src[(long)r * ld + d];
}

/* Rows of a head are short (HS = 64: 256 bytes): a libc memcpy per row was 5 %
 * of the samples of a T = 256 forward+backward under perf. 16-float pieces of
 * constant size are inlined as vector moves instead (that attention: 0.99 of
 * the time, 10 paired runs). */
void rp_flash_pack_rows(float *dst, const float *src, long ld, int n, int HS) {
  const int whole = HS & ~15;
  for (int r = 0; r < n; r++) {
    float *o = dst + (long)r * HS;
    const float *x = src + (long)r * ld;
    for (int d = 0; d < whole; d += 16) memcpy(o + d, x + d, 16 * sizeof(float));
    if (whole < HS) memcpy(o + whole, x + whole, sizeof(float) * (size_t)(HS - whole));
  }
}

/* ---- jobs */

static int job_threads(rp_pool *pool, int async) {
  int n = rp_pool_size(pool);
  return async && n > 1 ? n - 1 : n;
}

static rp_status job_start(rp_flash_job **out, void *ctx, rp_pool_fn fn,
                           rp_status (*fin)(void *, rp_pool *), rp_pool *pool) {
  rp_flash_job *j = calloc(1, sizeof *j);
  if (!j) {
    fin(ctx, pool);
    return rp_err(RP_ENOMEM, "out of memory for a flash attention job");
  }
  j->pool = pool;
  j->ctx = ctx;
  j->finish = fin;
  if (ctx) rp_pool_launch(pool, fn, ctx);
  *out = j;
  return RP_OK;
}

int rp_flash_job_done(const rp_flash_job *job) { return !job->ctx || rp_pool_poll(job->pool); }

rp_status rp_flash_job_finish(rp_flash_job *job) {
  if (!job) return RP_OK;
  if (job->ctx) rp_pool_wait(job->pool);
  rp_status s = job->finish(job->ctx, job->pool);
  free(job);
  return s;
}

rp_status rp_flash_block_forward(const rp_flash_problem *pr, rp_flash_view o,
                                 rp_flash_view lse, rp_pool *pool) {
  void *ctx = NULL;
  RP_TRY(rp_flash_fwd_prepare(&ctx, pr, o, lse, job_threads(pool, 0)));
  if (ctx) rp_pool_run(pool, rp_flash_fwd_run, ctx);
  return rp_flash_fwd_finish(ctx, pool);
}

rp_status rp_flash_block_forward_launch(rp_flash_job **job, const rp_flash_problem *pr,
                                        rp_flash_view o, rp_flash_view lse, rp_pool *pool) {
  void *ctx = NULL;
  *job = NULL;
  RP_TRY(rp_flash_fwd_prepare(&ctx, pr, o, lse, job_threads(pool, 1)));
  return job_start(job, ctx, rp_flash_fwd_run, rp_flash_fwd_finish, pool);
}

rp_status rp_flash_block_backward(const rp_flash_problem *pr, rp_flash_view dout,
                                  rp_flash_view lse, rp_flash_view dsum, rp_flash_view dq,
                                  rp_flash_view dk, rp_flash_view dv, rp_pool *pool) {
  void *ctx = NULL;
  RP_TRY(rp_flash_bwd_prepare(&ctx, pr, dout, lse, dsum, dq, dk, dv, job_threads(pool, 0)));
  if (ctx) rp_pool_run(pool, rp_flash_bwd_run, ctx);
  return rp_flash_bwd_finish(ctx, pool);
}

rp_status rp_flash_block_backward_launch(rp_flash_job **job, const rp_flash_problem *pr,
                                         rp_flash_view dout, rp_flash_view lse,
                                         rp_flash_view dsum, rp_flash_view dq,
                                         rp_flash_view dk, rp_flash_view dv, rp_pool *pool) {
  void *ctx = NULL;
  *job = NULL;
  RP_TRY(rp_flash_bwd_prepare(&ctx, pr, dout, lse, dsum, dq, dk, dv, job_threads(pool, 1)));
  return job_start(job, ctx, rp_flash_bwd_run, rp_flash_bwd_finish, pool);
}

/* ---- row dot and merge: memory-bound passes over [B, NH, T] rows */

typedef struct {
  rp_flash_view a, b;     /* rows: (dout, o) for rowdot, (o, o_b) for merge */
  rp_flash_view sa, sb;   /* stats: dsum for rowdot, (lse, lse_b) for merge */
  int B, NH, T, HS;
  const rp_flash_ops *ops;
} rows_ctx;

/* Small jobs run on the caller: a pool wake-up costs more than they do. */
static void run_rows(rp_pool *pool, rp_pool_fn fn, rows_ctx *c) {
  if ((long)c->B * c->NH * c->T * c->HS < 32768)
    fn(c, 0, 1);
  else
    rp_pool_run(pool, fn, c);
}

static void rowdot_task(void *vc, int ith, int nth) {
  rows_ctx *c = vc;
  long n = (long)c->NH * c->T, lo, hi;
  rp_split(c->B * n, ith, nth, &lo, &hi);
  for (long r = lo; r < hi; r++) {
    long b = r / n, h = (r % n) / c->T, t = r % c->T;
    const float *x = rp_flash_row(c->a, b, t, h, c->HS);
    const float *y = rp_flash_row(c->b, b, t, h, c->HS);
    *rp_flash_stat(c->sa, b, h, t) = c->ops->dot(x, y, c->HS);
  }
}

rp_status rp_flash_rowdot(rp_flash_view dsum, rp_flash_view dout, rp_flash_view o, int B,
                          int NH, int T, int HS, const rp_flash_config *cfg, rp_pool *pool) {
  if (B < 1 || NH < 1 || T < 0 || HS < 1)
    return rp_err(RP_EINVAL, "flash rowdot shape B=%d NH=%d T=%d HS=%d is invalid", B, NH, T, HS);
  rows_ctx c = {.a = dout, .b = o, .sa = dsum, .B = B, .NH = NH, .T = T, .HS = HS,
                .ops = rp_flash_ops_active(cfg)};
  run_rows(pool, rowdot_task, &c);
  return RP_OK;
}

static void merge_task(void *vc, int ith, int nth) {
  rows_ctx *c = vc;
  long n = (long)c->NH * c->T, lo, hi;
  rp_split(c->B * n, ith, nth, &lo, &hi);
  for (long r = lo; r < hi; r++) {
    long b = r / n, h = (r % n) / c->T, t = r % c->T;
    float *la = rp_flash_stat(c->sa, b, h, t);
    float lb = *rp_flash_stat(c->sb, b, h, t);
    if (lb == -INFINITY) continue;               /* b saw no key: a unchanged */
    float *oa = rp_flash_row(c->a, b, t, h, c->HS);
    const float *ob = rp_flash_row(c->b, b, t, h, c->HS);
    if (*la == -INFINITY) {                      /* a saw no key: take b */
      memcpy(oa, ob, sizeof(float) * (size_t)c->HS);
      *la = lb;
      continue;
    }
    float mx = *la > lb ? *la : lb, mn = *la > lb ? lb : *la;
    float l = mx + log1pf(expf(mn - mx));
    float wa = expf(*la - l), wb = expf(lb - l);
    for (int d = 0; d < c->HS; d++) oa[d] = wa * oa[d] + wb * ob[d];
    *la = l;
  }
}

rp_status rp_flash_merge(rp_flash_view o, rp_flash_view lse, rp_flash_view o_b,
                         rp_flash_view lse_b, int B, int NH, int T, int HS,
                         const rp_flash_config *cfg, rp_pool *pool) {
  if (B < 1 || NH < 1 || T < 0 || HS < 1)
    return rp_err(RP_EINVAL, "flash merge shape B=%d NH=%d T=%d HS=%d is invalid", B, NH, T, HS);
  rows_ctx c = {.a = o, .b = o_b, .sa = lse, .sb = lse_b, .B = B, .NH = NH, .T = T, .HS = HS,
                .ops = rp_flash_ops_active(cfg)};
  run_rows(pool, merge_task, &c);
  return RP_OK;
}

/* ---- whole attention over qkv[B,T,3C] */

static rp_status qkv_problem(rp_flash_problem *pr, const float *qkv, int B, int T, int C,
                             int NH, int causal, const int32_t *kr, const rp_flash_config *cfg) {
  if (NH < 1 || C < 1 || C % NH != 0)
    return rp_err(RP_EINVAL, "heads %d must divide channels %d for flash attention", NH, C);
  long C3 = 3L * C, bs = (long)T * C3;
  memset(pr, 0, sizeof *pr);
  pr->B = B;
  pr->NH = NH;
  pr->HS = C / NH;
  pr->Tq = pr->Tk = T;
  pr->vis = kr ? RP_FLASH_VIS_RANGE : causal ? RP_FLASH_VIS_CAUSAL : RP_FLASH_VIS_ALL;
  pr->krange = kr;
  pr->krange_bs = 2L * T;
  pr->q = rp_flash_view_of(qkv, C3, bs);
  pr->k = rp_flash_view_of(qkv + C, C3, bs);
  pr->v = rp_flash_view_of(qkv + 2L * C, C3, bs);
  pr->cfg = cfg;
  return RP_OK;
}

static rp_status forward_qkv(float *out, float *lse, const float *qkv, int B, int T, int C,
                             int NH, int causal, const int32_t *kr, const rp_flash_config *cfg,
                             rp_pool *pool) {
  rp_flash_problem pr;
  RP_TRY(qkv_problem(&pr, qkv, B, T, C, NH, causal, kr, cfg));
  return rp_flash_block_forward(&pr, rp_flash_view_of(out, C, (long)T * C),
                                rp_flash_view_of(lse, T, (long)NH * T), pool);
}

static rp_status backward_qkv(float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int T, int C, int NH,
                              int causal, const int32_t *kr, const rp_flash_config *cfg,
                              rp_pool *pool) {
  rp_flash_problem pr;
  RP_TRY(qkv_problem(&pr, qkv, B, T, C, NH, causal, kr, cfg));
  float *dsum = rp_scratch_alloc(sizeof(float) * (size_t)B * NH * (T > 0 ? T : 1));
  if (!dsum) return RP_ENOMEM;
  rp_flash_view dsv = rp_flash_view_of(dsum, T, (long)NH * T);
  rp_flash_view dov = rp_flash_view_of(dout, C, (long)T * C);
  rp_flash_view ov = rp_flash_view_of((float *)out, C, (long)T * C);
  long C3 = 3L * C, bs = (long)T * C3;
  void *ctx = NULL;
  rp_status s = rp_flash_bwd_prepare(&ctx, &pr, dov, rp_flash_view_of(lse, T, (long)NH * T), dsv,
                                     rp_flash_view_of(dqkv, C3, bs),
                                     rp_flash_view_of(dqkv + C, C3, bs),
                                     rp_flash_view_of(dqkv + 2L * C, C3, bs), job_threads(pool, 0));
  /* D = rowsum(dO O): by each head task as it starts, else a pass first */
  if (s == RP_OK && ctx && !rp_flash_bwd_take_dsum(ctx, ov))
    s = rp_flash_rowdot(dsv, dov, ov, B, NH, T, C / NH, cfg, pool);
  if (s == RP_OK && ctx) rp_pool_run(pool, rp_flash_bwd_run, ctx);
  rp_status fs = rp_flash_bwd_finish(ctx, pool);
  rp_scratch_free(dsum);
  return s != RP_OK ? s : fs;
}

rp_status rp_flash_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                           int NH, int causal, const rp_flash_config *cfg, rp_pool *pool) {
  return forward_qkv(out, lse, qkv, B, T, C, NH, causal, NULL, cfg, pool);
}

rp_status rp_flash_backward(float *dqkv, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int C,
                            int NH, int causal, const rp_flash_config *cfg, rp_pool *pool) {
  return backward_qkv(dqkv, dout, qkv, out, lse, B, T, C, NH, causal, NULL, cfg, pool);
}

rp_status rp_flash_forward_ranges(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH, const int32_t *kr, const rp_flash_config *cfg,
                                  rp_pool *pool) {
  if (!kr) return rp_err(RP_EINVAL, "document-masked flash forward needs key ranges");
  return forward_qkv(out, lse, qkv, B, T, C, NH, 1, kr, cfg, pool);
}

rp_status rp_flash_backward_ranges(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int C,
                                   int NH, const int32_t *kr, const rp_flash_config *cfg,
                                   rp_pool *pool) {
  if (!kr) return rp_err(RP_EINVAL, "document-masked flash backward needs key ranges");
  return backward_qkv(dqkv, dout, qkv, out, lse, B, T, C, NH, 1, kr, cfg, pool);
}
