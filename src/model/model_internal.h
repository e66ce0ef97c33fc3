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
/* The micro-batch's attention batch, prepared here on first use (fatal if the
 * backend refuses: callers with documents prepare it themselves and check). */
const rp_attn_batch *rp_acts_attn_batch(const rp_chunk *m, rp_acts *a, const rp_exec *x);
void rp_attn_run_backward(const rp_exec *x, const rp_attn_batch *ab, float *dqkv,
                          const float *dout, const rp_layer_acts *l);
void rp_layer_recompute(const rp_chunk *m, rp_acts *a, int i, const rp_exec *x);

/* K/V cache internals shared by kv_cache.c and decode.c (rp_infer.h). */
#include "ringpipe/rp_infer.h"
/* Where position pos of slot keeps layer's key (kv 0) or value (kv 1). */
float *rp_kv_row(const rp_kv_cache *c, int slot, int layer, int kv, int pos);
/* Makes room for position len[slot]: a fresh block when the last one is full. */
void rp_kv_reserve(rp_kv_cache *c, int slot);

#endif
