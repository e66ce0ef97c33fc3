/* Mixed precision for the model's matmuls: bf16 weights and activations with
 * fp32 accumulation, fp32 master weights (the chunks' params) and fp32
 * everything else (LayerNorm statistics, softmax, loss, AdamW).
 *
 * The model calls rp_mm_* for every matmul with its rp_exec. In fp32 (x->bf16
 * NULL) they are the kernels themselves; with the run's bf16 context in the
 * exec, a weight that lies in one of its chunks is read from its bf16 copy and
 * the activations are rounded to bf16 on the way in. */
#include <string.h>

#include "model_internal.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_prof.h"

/* The bf16 copy of weight w when it lies in one of ctx's chunks, else NULL. */
static const uint16_t *bf16_weight(const rp_bf16_ctx *ctx, const float *w) {
  for (int i = 0; ctx && i < ctx->n; i++)
    if (w >= ctx->base[i] && w < ctx->base[i] + ctx->len[i]) return ctx->base16[i] + (w - ctx->base[i]);
  return NULL;
}

const uint16_t *rp_mm_bf16_weight(const rp_exec *x, const float *w) {
  return bf16_weight(x->bf16, w);
}

void rp_mm_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                   int IC, int OC, const rp_exec *x) {
  rp_prof_gemm_note(N, IC, OC, 0, 0, 0);
  const rp_bf16_ctx *ctx = x->bf16;
  const uint16_t *w16 = bf16_weight(ctx, w);
  if (!w16) {
    rp_matmul_forward(out, inp, w, bias, N, IC, OC, x->pool);
    return;
  }
  /* inp is rounded to bf16 inside (as it is packed, by the AMX and vdpbf16ps kernels) */
  rp_matmul_bf16_forward_f32in(out, inp, w16, bias, N, IC, OC, x->pool);
}

void rp_mm_forward_residual(float *out, const float *inp, const float *w, const float *bias,
                            const float *resid, int N, int IC, int OC, const rp_exec *x) {
  rp_prof_gemm_note(N, IC, OC, 0, 0, 0);
  const uint16_t *w16 = bf16_weight(x->bf16, w);
  if (!w16) {
    rp_matmul_forward_residual(out, inp, w, bias, resid, N, IC, OC, x->pool);
    return;
  }
  /* the residual is added to each thread's rows after the product; when out
   * aliases resid, the product goes to scratch first */
  float *prod = out == resid ? x->bf16->scratch_f : out;
  RP_CHECK(out != resid || (size_t)N * OC <= x->bf16->scratch_floats);
  rp_matmul_bf16_forward_residual(out, prod, inp, w16, bias, resid, N, IC, OC, x->pool);
}

/* The bf16 backward of a weight in the context (w16): dinp accumulates, or is
 * overwritten when dinp_set (no memset pass: the GEMM starts from +0). */
static void bf16_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const uint16_t *w16, int N, int IC, int OC, int dinp_set,
                          const rp_exec *x) {
  /* dout and inp are rounded to bf16 inside the GEMM (as they are packed); the
   * bias gradient is the plain fp32 column sum of the fp32 output gradient */
  rp_matmul_bf16_backward_f32(dinp, dw, db, dout, inp, w16, N, IC, OC, dinp_set, x->pool);
}

void rp_mm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                    const float *w, int N, int IC, int OC, const rp_exec *x) {
  rp_prof_gemm_note(N, IC, OC, 1, dinp != NULL, dw != NULL);
  const uint16_t *w16 = bf16_weight(x->bf16, w);
  if (!w16) rp_matmul_backward(dinp, dw, db, dout, inp, w, N, IC, OC, x->pool);
  else bf16_backward(dinp, dw, db, dout, inp, w16, N, IC, OC, 0, x);
}

void rp_mm_backward_set(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int N, int IC, int OC, const rp_exec *x) {
  rp_prof_gemm_note(N, IC, OC, 1, dinp != NULL, dw != NULL);
  const uint16_t *w16 = bf16_weight(x->bf16, w);
  if (!w16) rp_matmul_backward_set(dinp, dw, db, dout, inp, w, N, IC, OC, x->pool);
  else bf16_backward(dinp, dw, db, dout, inp, w16, N, IC, OC, 1, x);
}

rp_status rp_bf16_ctx_init(rp_bf16_ctx *c, rp_chunk *const *chunks, int n, int B, int T) {
  memset(c, 0, sizeof *c);
  if (n > RP_BF16_MAX_CHUNKS)
    return rp_err(RP_EINVAL, "bf16 precision supports at most %d chunks per rank",
                  RP_BF16_MAX_CHUNKS);
  size_t rows = (size_t)B * T, widest = 0;
  for (int i = 0; i < n; i++) {
    const rp_chunk *m = chunks[i];
    size_t wmax = 4 * (size_t)m->cfg.C > (size_t)m->cfg.Vp ? 4 * (size_t)m->cfg.C : (size_t)m->cfg.Vp;
    if (wmax > widest) widest = wmax;
    c->base[i] = m->params;
    c->len[i] = m->num_params;
    c->base16[i] = rp_alloc(m->num_params * sizeof(uint16_t), RP_MEM_PARAMS);
    if (!c->base16[i]) return RP_ENOMEM;
  }
  c->n = n;
  c->scratch_floats = rows * widest;
  c->scratch_f = rp_alloc(c->scratch_floats * sizeof(float), RP_MEM_WORKSPACE);
  if (!c->scratch_f) return RP_ENOMEM;
  return RP_OK;
}

void rp_bf16_ctx_refresh(rp_bf16_ctx *c, int stochastic, uint64_t seed, rp_pool *pool) {
  for (int i = 0; i < c->n; i++) {
    if (stochastic)
      rp_bf16_from_f32_stochastic(c->base16[i], c->base[i], (long)c->len[i], seed + i, pool);
    else
      rp_bf16_from_f32_array(c->base16[i], c->base[i], (long)c->len[i], pool);
  }
}

void rp_bf16_ctx_free(rp_bf16_ctx *c) {
  for (int i = 0; i < c->n; i++) rp_free(c->base16[i]);
  rp_free(c->scratch_f);
  memset(c, 0, sizeof *c);
}
