/* The reference attention backend: O(T^2) probabilities saved for backward. */
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"

static size_t ref_saved(const rp_attn_backend *a, int B, int T, int C, int NH) {
  return (size_t)B * NH * T * T;
}

static void ref_forward(const rp_attn_backend *a, float *out, float *saved, const float *qkv,
                        int B, int T, int C, int NH, rp_pool *pool) {
  rp_attention_ref_forward(out, saved, NULL, qkv, B, T, C, NH, 1, pool);
}

static void ref_backward(const rp_attn_backend *a, float *dqkv, const float *dout,
                         const float *qkv, const float *out, const float *saved, int B, int T,
                         int C, int NH, rp_pool *pool) {
  rp_attention_ref_backward(dqkv, dout, qkv, saved, B, T, C, NH, pool);
}

static const rp_attn_backend ref_backend = {
    .name = "naive", .saved_floats = ref_saved, .forward = ref_forward, .backward = ref_backward};

const rp_attn_backend *rp_attn_reference(void) { return &ref_backend; }
