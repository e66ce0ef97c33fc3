/* The flash attention backend: tiled O(T)-memory attention, the model's default.
 * Saved state per layer and micro-batch is the row log-sum-exp lse[B,NH,T]; the
 * backward recomputes the probabilities from it. The backend's ctx is the run's
 * flash config (const rp_flash_config *, NULL: automatic). With a document
 * layout each query row's visible key range (document start .. itself) is
 * built per call (B*T pairs, negligible next to the attention) and the kernels
 * skip the tiles outside every document's triangle. */
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_model.h"

static size_t flash_saved(const rp_attn_backend *a, int B, int T, int C, int NH) {
  return (size_t)B * NH * T;
}

static rp_status flash_prepare(const rp_attn_backend *a, rp_attn_batch *batch, int B, int T,
                               int C, int NH, const rp_docs *docs) {
  return rp_attn_check_local(batch, a, B, T, C, NH, docs);
}

static int32_t *self_ranges(const rp_docs *d) {
  int32_t *kr = rp_scratch_alloc(sizeof(int32_t) * 2 * (size_t)d->B * d->T);
  if (kr) rp_docs_self_ranges(d, kr);
  return kr;
}

static rp_status flash_forward(const rp_attn_backend *a, const rp_attn_batch *x, float *out,
                               float *saved, const float *qkv, rp_pool *pool) {
  if (!x->docs) return rp_flash_forward(out, saved, qkv, x->B, x->T, x->C, x->NH, 1, a->ctx, pool);
  int32_t *kr = self_ranges(x->docs);
  if (!kr) return rp_err(RP_ENOMEM, "out of memory for document key ranges");
  rp_status s = rp_flash_forward_ranges(out, saved, qkv, x->B, x->T, x->C, x->NH, kr, a->ctx, pool);
  rp_scratch_free(kr);
  return s;
}

static rp_status flash_backward(const rp_attn_backend *a, const rp_attn_batch *x, float *dqkv,
                                const float *dout, const float *qkv, const float *out,
                                const float *saved, rp_pool *pool) {
  if (!x->docs)
    return rp_flash_backward(dqkv, dout, qkv, out, saved, x->B, x->T, x->C, x->NH, 1, a->ctx,
                             pool);
  int32_t *kr = self_ranges(x->docs);
  if (!kr) return rp_err(RP_ENOMEM, "out of memory for document key ranges");
  rp_status s =
      rp_flash_backward_ranges(dqkv, dout, qkv, out, saved, x->B, x->T, x->C, x->NH, kr, a->ctx,
                               pool);
  rp_scratch_free(kr);
  return s;
}

static const rp_attn_backend flash_backend = {.name = "flash",
                                              .saved_floats = flash_saved,
                                              .prepare = flash_prepare,
                                              .forward = flash_forward,
                                              .backward = flash_backward};

const rp_attn_backend *rp_attn_flash(void) { return &flash_backend; }

const rp_attn_backend *rp_attn_of_kind(rp_attn_kind kind) {
  return kind == RP_ATTN_FLASH ? rp_attn_flash() : rp_attn_reference();
}

rp_status rp_attn_flash_with(rp_attn_backend *out, const rp_flash_config *cfg) {
  RP_TRY(rp_flash_config_check(cfg));
  *out = flash_backend;
  out->ctx = (void *)cfg;  /* read only: the kernels take it as const */
  return RP_OK;
}
