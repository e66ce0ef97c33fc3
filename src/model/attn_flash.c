/* The flash attention backend: tiled O(T)-memory attention, the model's default.
 * Saved state per layer and micro-batch is the row log-sum-exp lse[B,NH,T]; the
 * backward recomputes the probabilities from it. The backend's ctx is the run's
 * flash config (const rp_flash_config *, NULL: automatic). */
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_model.h"

static size_t flash_saved(const rp_attn_backend *a, int B, int T, int C, int NH) {
  return (size_t)B * NH * T;
}

/* The backend interface has no status: a failure here is a shape the model
 * already validated or an allocation failure, so it is fatal. */
static void flash_forward(const rp_attn_backend *a, float *out, float *saved, const float *qkv,
                          int B, int T, int C, int NH, rp_pool *pool) {
  if (rp_flash_forward(out, saved, qkv, B, T, C, NH, 1, a->ctx, pool) != RP_OK)
    rp_fatal("flash attention forward failed: %s", rp_errmsg());
}

static void flash_backward(const rp_attn_backend *a, float *dqkv, const float *dout,
                           const float *qkv, const float *out, const float *saved, int B,
                           int T, int C, int NH, rp_pool *pool) {
  if (rp_flash_backward(dqkv, dout, qkv, out, saved, B, T, C, NH, 1, a->ctx, pool) != RP_OK)
    rp_fatal("flash attention backward failed: %s", rp_errmsg());
}

static const rp_attn_backend flash_backend = {.name = "flash",
                                              .saved_floats = flash_saved,
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
