/* GPT configuration checks and the FLOP count used for MFU. */
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"

int rp_pad_vocab(int V) { return (V + 63) / 64 * 64; }

rp_status rp_gpt_config_validate(const rp_gpt_config *c) {
  if (c->L < 1 || c->L > 1024)
    return rp_err(RP_EINVAL, "--layers %d is out of range; use 1..1024", c->L);
  if (c->C < 8 || c->C > 16384)
    return rp_err(RP_EINVAL, "--channels %d is out of range; use 8..16384", c->C);
  if (c->NH < 1 || c->C % c->NH != 0)
    return rp_err(RP_EINVAL,
                  "--heads %d does not divide --channels %d; pick heads that divide "
                  "channels (e.g. --heads %d)",
                  c->NH, c->C, c->C % 6 == 0 ? 6 : (c->C % 4 == 0 ? 4 : 1));
  if (c->T < 1 || c->T > 1 << 20)
    return rp_err(RP_EINVAL, "--seq %d is out of range; use 1..1048576", c->T);
  if (c->V < 2 || c->V > 1 << 24)
    return rp_err(RP_EINVAL, "vocabulary size %d is out of range; use 2..16777216", c->V);
  if (c->Vp < c->V)
    return rp_err(RP_EINVAL, "padded vocabulary %d is smaller than vocabulary %d", c->Vp, c->V);
  return RP_OK;
}

rp_status rp_gpt_config_check_tp(const rp_gpt_config *c, int tp) {
  if (tp < 1) return rp_err(RP_EINVAL, "--tp %d is out of range; use 1 or more", tp);
  if (c->NH % tp != 0)
    return rp_err(RP_EINVAL, "--tp %d does not divide --heads %d: tensor parallelism splits "
                  "the heads evenly; use a --tp that divides %d", tp, c->NH, c->NH);
  if (c->Vp % tp != 0)
    return rp_err(RP_EINVAL, "--tp %d does not divide the padded vocabulary %d (--vocab %d "
                  "rounded up to a multiple of 64): the LM head splits its rows evenly; use "
                  "a --tp that divides %d", tp, c->Vp, c->V, c->Vp);
  return RP_OK;
}

size_t rp_gpt_num_params(const rp_gpt_config *c) {
  size_t C = c->C;
  size_t per_layer = 12 * C * C + 13 * C;  /* 2 LN (4C) + qkv (3CC+3C) + proj (CC+C) + fc (4CC+4C) + fcproj (4CC+C) */
  return (size_t)c->V * C + (size_t)c->T * C + c->L * per_layer + 2 * C;
}

double rp_gpt_flops_per_token(const rp_gpt_config *c, int T) {
  /* 6 FLOPs per matmul parameter per token (2 forward, 4 backward) plus the
   * attention scores and weighted sum, 12 L T C, counted without the causal
   * halving as in the PaLM / nanoGPT MFU convention; wpe is a lookup, not a matmul. */
  double n_matmul = (double)rp_gpt_num_params(c) - (double)c->T * c->C;
  return 6.0 * n_matmul + 12.0 * c->L * (double)T * c->C;
}

double rp_gpt_gemm_peak(const rp_gpt_config *cfg, int B, int T, int bf16, rp_pool *pool,
                        void *scratch, size_t scratch_bytes,
                        struct rp_gemm_shape_rate *per_shape) {
  long C = cfg->C;
  /* (in, out) of every matmul of a layer and of the LM head */
  const long shapes[RP_GPT_GEMM_SHAPES][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C},
                                              {C, cfg->Vp}};
  const long N = (long)B * T;
  return bf16 ? rp_gemm_peak_bf16(shapes, RP_GPT_GEMM_SHAPES, N, pool, scratch, scratch_bytes,
                                  per_shape)
              : rp_gemm_peak(shapes, RP_GPT_GEMM_SHAPES, N, pool, scratch, scratch_bytes,
                             per_shape);
}
