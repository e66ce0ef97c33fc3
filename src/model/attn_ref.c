/* The reference attention backend: O(T^2) probabilities saved for backward.
 * Document masks become an explicit [B,T,T] visibility mask, so the oracle
 * shares no masking code with the flash kernels it checks. */
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"

static size_t ref_saved(const rp_attn_backend *a, int B, int T, int C, int NH) {
  return (size_t)B * NH * T * T;
}

static rp_status ref_prepare(const rp_attn_backend *a, rp_attn_batch *batch, int B, int T,
                             int C, int NH, const rp_docs *docs) {
  return rp_attn_check_local(batch, a, B, T, C, NH, docs);
}

/* mask[b,t,t2] = 1 iff t2 <= t and both are in the same document of row b */
static uint8_t *doc_mask(const rp_docs *d) {
  const long T = d->T;
  uint8_t *mask = rp_alloc((size_t)d->B * T * T, RP_MEM_WORKSPACE);
  if (!mask) return NULL;
  for (long b = 0; b < d->B; b++)
    for (long t = 0; t < T; t++) {
      long s = rp_docs_start(d, (int)b, (int)t);
      for (long t2 = 0; t2 < T; t2++) mask[(b * T + t) * T + t2] = t2 >= s && t2 <= t;
    }
  return mask;
}

static rp_status ref_forward(const rp_attn_backend *a, const rp_attn_batch *x, float *out,
                             float *saved, const float *qkv, rp_pool *pool) {
  if (!x->docs) {
    rp_attention_ref_forward(out, saved, NULL, qkv, x->B, x->T, x->C, x->NH, 1, pool);
    return RP_OK;
  }
  uint8_t *mask = doc_mask(x->docs);
  if (!mask) return rp_err(RP_ENOMEM, "out of memory for a %d x %d^2 attention mask", x->B, x->T);
  rp_attention_ref_forward_masked(out, saved, NULL, qkv, x->B, x->T, x->C, x->NH, mask, pool);
  rp_free(mask);
  return RP_OK;
}

static rp_status ref_backward(const rp_attn_backend *a, const rp_attn_batch *x, float *dqkv,
                              const float *dout, const float *qkv, const float *out,
                              const float *saved, rp_pool *pool) {
  /* the saved probabilities are 0 wherever the mask was */
  rp_attention_ref_backward(dqkv, dout, qkv, saved, x->B, x->T, x->C, x->NH, pool);
  return RP_OK;
}

static const rp_attn_backend ref_backend = {.name = "naive",
                                            .saved_floats = ref_saved,
                                            .prepare = ref_prepare,
                                            .forward = ref_forward,
                                            .backward = ref_backward};

const rp_attn_backend *rp_attn_reference(void) { return &ref_backend; }
