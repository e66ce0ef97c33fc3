/* The logits of a prompt through a model directory (checkpoint, Hugging Face
 * folder or llm.c file), for the Hugging Face tests and hf_logits. */
#ifndef HF_UTIL_H
#define HF_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_train.h"

/* [T, V] logits (malloc'd, V columns: the padded ones dropped), or NULL with
 * rp_errmsg() set; *cfg gets the model's config. */
static inline float *hf_prompt_logits(const char *dir, const int32_t *ids, int T,
                                      rp_gpt_config *cfg) {
  rp_train_opts o;
  int changed, modelT;
  if (rp_opts_defaults(rp_train_opt_table, rp_train_opt_count, &o) != RP_OK) return NULL;
  o.seq = 1;
  if (rp_init_config_into_opts(dir, &o, &changed, &modelT) != RP_OK) return NULL;
  *cfg = (rp_gpt_config){.L = o.layers, .C = o.channels, .NH = o.heads, .T = modelT,
                         .V = o.vocab, .Vp = rp_pad_vocab(o.vocab)};
  rp_chunk m;
  if (rp_chunk_init(&m, cfg, &(rp_stage_spec){0, cfg->L, 1, 1}) != RP_OK) return NULL;
  float *out = NULL;
  if (rp_load_weights(&m, dir) == RP_OK) {
    const rp_attn_backend *attn = rp_attn_reference();
    void *mem = rp_alloc(rp_acts_bytes(&m, attn, 1, T), RP_MEM_ACTS);
    rp_layer_acts *lv = calloc((size_t)cfg->L, sizeof *lv);
    rp_acts a;
    rp_acts_bind(&a, lv, &m, attn, mem, 1, T);
    for (int t = 0; t < T; t++) {
      a.tokens[t] = ids[t];
      a.targets[t] = -1;  /* logits only */
      a.pos[t] = t;
    }
    rp_exec x = {.pool = NULL, .attn = attn};
    rp_chunk_forward(&m, &a, NULL, &x);
    out = malloc((size_t)T * cfg->V * sizeof *out);
    for (int t = 0; out && t < T; t++)
      memcpy(out + (size_t)t * cfg->V, a.logits + (size_t)t * cfg->Vp, cfg->V * sizeof *out);
    free(lv);
    rp_free(mem);
  }
  rp_chunk_free(&m);
  return out;
}

#endif
