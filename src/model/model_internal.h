/* Shared by the model's own files only. */
#ifndef RP_MODEL_INTERNAL_H
#define RP_MODEL_INTERNAL_H

#include <stddef.h>

#include "ringpipe/rp_model.h"

/* Input of layer i of a chunk: the chunk input, or the previous layer's output. */
const float *rp_layer_input(const rp_acts *a, int i);

/* Selective recomputation drops the attention's saved state only when it is
 * at least as big as the attention output (the O(T^2) probabilities, not a
 * log-sum-exp per row). */
static inline int rp_selective_drops_attention(size_t saved, size_t N, size_t C) {
  return saved >= N * C;
}
/* The model's matmuls on x's pool, fp32 or bf16 by x's precision context
 * (x->bf16: NULL is fp32; a weight outside its chunks stays fp32). */
void rp_mm_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                   int IC, int OC, const rp_exec *x);
void rp_mm_forward_residual(float *out, const float *inp, const float *w, const float *bias,
                            const float *resid, int N, int IC, int OC, const rp_exec *x);
void rp_mm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                    const float *w, int N, int IC, int OC, const rp_exec *x);
void rp_mm_backward_set(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int N, int IC, int OC, const rp_exec *x);
/* The bf16 copy of weight w in x's precision context, or NULL (fp32 run, or w
 * outside its chunks). */
const uint16_t *rp_mm_bf16_weight(const rp_exec *x, const float *w);
/* The MLP's fc matmul with its GELU fused in (mlp_fused.c): pre = inp @ w^T +
 * bias, post = gelu(pre), bitwise the two calls it replaces; timed into the
 * step profile by itself (GEMM and GELU apart). */
void rp_mm_forward_gelu(float *pre, float *post, const float *inp, const float *w,
                        const float *bias, int N, int IC, int OC, const rp_exec *x);
/* Its backward through c_proj (dout: c_proj's output gradient, post: its
 * input gelu(pre)): dpost = dout @ w, dpre = gelu'(pre) * dpost, both written,
 * and dw, db (c_proj's) and dbias_pre (c_fc's bias) accumulated (each may be
 * NULL); bitwise rp_mm_backward_set + rp_gelu_backward_set_dbias, timed the
 * same way. */
void rp_mm_backward_gelu(float *dpre, float *dpost, float *dbias_pre, float *dw, float *db,
                         const float *dout, const float *post, const float *pre, const float *w,
                         int N, int IC, int OC, const rp_exec *x);
/* The micro-batch's attention batch, prepared here on first use (fatal if the
 * backend refuses: callers with documents prepare it themselves and check). */
const rp_attn_batch *rp_acts_attn_batch(const rp_chunk *m, rp_acts *a, const rp_exec *x);
/* The backend's forward / backward of one layer (fatal on a failure: it cannot
 * be agreed on mid-layer once prepare accepted the batch). */
void rp_attn_run_forward(const rp_exec *x, const rp_attn_batch *ab, rp_layer_acts *l);
void rp_attn_run_backward(const rp_exec *x, const rp_attn_batch *ab, float *dqkv,
                          const float *dout, const rp_layer_acts *l);
void rp_layer_recompute(const rp_chunk *m, rp_acts *a, int i, const rp_exec *x);
/* What W (rp_chunk_backward_weight) reads of layer i that recomputation
 * dropped, into the shared scratch again: the whole layer under FULL, the GELU
 * output (from fch, which a split backward then keeps until W) under
 * SELECTIVE; nothing without recomputation. */
void rp_layer_recompute_for_weights(const rp_chunk *m, rp_acts *a, int i, const rp_exec *x);

/* Tensor parallelism (tp.c): this rank's widths, the f/g operators, the
 * vocabulary-parallel embedding and cross-entropy. */
static inline int rp_tp_width(const rp_chunk *m) { return m->cfg.C / m->tp; }   /* C/tp */
static inline int rp_tp_heads(const rp_chunk *m) { return m->cfg.NH / m->tp; }  /* NH/tp */
static inline int rp_tp_vocab(const rp_chunk *m) { return m->cfg.Vp / m->tp; } /* Vp/tp */
void rp_tp_all_reduce(const rp_chunk *m, const rp_exec *x, float *buf, long n, rp_tp_op op);
void rp_tp_row_parallel_forward(const rp_chunk *m, float *out, const float *inp, const float *w,
                                const float *bias, const float *resid, int N, int IC, int OC,
                                const rp_exec *x);
void rp_tp_embed_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x);
/* out[N, C]: this rank's share of the embedding (its tokens' wte rows, wpe on
 * rank 0, zeros elsewhere); the sum over tp is the embedding. */
void rp_tp_embed_partial(const rp_chunk *m, const rp_acts *a, float *out);
void rp_tp_embed_backward(rp_chunk *m, const float *dres, const rp_acts *a);
void rp_tp_xent_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x);
void rp_tp_xent_backward(const rp_chunk *m, rp_acts *a, float dscale, const rp_exec *x);
/* Sequence parallelism (sp.c): the same pieces on N/tp-row shards. */
void rp_sp_layer_forward(const rp_chunk *m, const rp_layer_params *p, rp_layer_acts *l,
                         const float *in, const rp_attn_batch *ab, const rp_exec *x);
void rp_sp_layer_backward(const rp_chunk *m, const rp_layer_params *p, rp_layer_params *g,
                          const rp_layer_acts *l, const float *in, rp_grad_ws *w,
                          const rp_attn_batch *ab, const rp_exec *x);
void rp_sp_embed_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x);
void rp_sp_embed_backward(rp_chunk *m, const float *dres, const rp_acts *a, const rp_exec *x);
void rp_sp_head_logits(const rp_chunk *m, rp_acts *a, const rp_exec *x);
void rp_sp_head_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, const rp_exec *x);

/* K/V cache internals shared by kv_cache.c and decode.c (rp_infer.h). */
#include "ringpipe/rp_infer.h"
/* Where position pos of slot keeps layer's key (kv 0) or value (kv 1). */
float *rp_kv_row(const rp_kv_cache *c, int slot, int layer, int kv, int pos);
/* Makes room for position len[slot]: a fresh block when the last one is full. */
void rp_kv_reserve(rp_kv_cache *c, int slot);

#endif
