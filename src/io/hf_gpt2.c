/* Hugging Face GPT-2 folders, both ways.
 *
 * Out: every checkpoint directory gets a config.json that
 * GPT2LMHeadModel.from_pretrained(dir) reads as it is (model.safetensors already
 * holds GPT-2's names and shapes).
 * In: a plain Hugging Face GPT-2 folder (config.json + model.safetensors, as
 * save_pretrained writes it or as the hub ships it) is a model for --init-from,
 * sample and eval. Only what ringpipe computes exactly is accepted: GPT-2 with
 * tanh GELU, LayerNorm eps 1e-5, 4C MLP, tied LM head; anything else is refused
 * with the reason, never loaded into a model that would compute something else. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_fs.h"
#include "ringpipe/rp_checkpoint.h"

#define HF_CONFIG "config.json"
#define HF_MODEL "model.safetensors"
#define HF_META "meta.json"

static int file_in(const char *dir, const char *name) {
  char path[RP_IO_PATH + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return rp_io_exists(path);
}

int rp_hf_is_folder(const char *dir) {
  return rp_io_is_dir(dir) && !file_in(dir, HF_META) && file_in(dir, HF_CONFIG);
}

/* config.json as GPT2Config.to_json_string writes it, for our config. */
static rp_status build_config(const rp_gpt_config *c, rp_jw *w) {
  rp_jw_init(w);
  rp_jw_obj(w);
  rp_jw_key(w, "architectures"), rp_jw_arr(w), rp_jw_str(w, "GPT2LMHeadModel"), rp_jw_arr_end(w);
  rp_jw_key(w, "model_type"), rp_jw_str(w, "gpt2");
  rp_jw_key(w, "vocab_size"), rp_jw_int(w, c->V);
  rp_jw_key(w, "n_positions"), rp_jw_int(w, c->T);
  rp_jw_key(w, "n_ctx"), rp_jw_int(w, c->T);
  rp_jw_key(w, "n_embd"), rp_jw_int(w, c->C);
  rp_jw_key(w, "n_layer"), rp_jw_int(w, c->L);
  rp_jw_key(w, "n_head"), rp_jw_int(w, c->NH);
  rp_jw_key(w, "n_inner"), rp_jw_null(w);  /* 4 * n_embd */
  rp_jw_key(w, "activation_function"), rp_jw_str(w, "gelu_new");  /* tanh approximation */
  rp_jw_key(w, "layer_norm_epsilon"), rp_jw_num(w, 1e-5, 6);
  /* training here uses no dropout; inference in transformers must not either */
  rp_jw_key(w, "resid_pdrop"), rp_jw_num(w, 0, 1);
  rp_jw_key(w, "embd_pdrop"), rp_jw_num(w, 0, 1);
  rp_jw_key(w, "attn_pdrop"), rp_jw_num(w, 0, 1);
  rp_jw_key(w, "initializer_range"), rp_jw_num(w, 0.02, 6);
  rp_jw_key(w, "scale_attn_weights"), rp_jw_bool(w, 1);
  rp_jw_key(w, "scale_attn_by_inverse_layer_idx"), rp_jw_bool(w, 0);
  rp_jw_key(w, "reorder_and_upcast_attn"), rp_jw_bool(w, 0);
  rp_jw_key(w, "tie_word_embeddings"), rp_jw_bool(w, 1);
  rp_jw_key(w, "use_cache"), rp_jw_bool(w, 1);
  /* GPT2Config's defaults (50256) only fit GPT-2's own vocabulary */
  rp_jw_key(w, "bos_token_id"), c->V == 50257 ? rp_jw_int(w, 50256) : rp_jw_null(w);
  rp_jw_key(w, "eos_token_id"), c->V == 50257 ? rp_jw_int(w, 50256) : rp_jw_null(w);
  rp_jw_key(w, "torch_dtype"), rp_jw_str(w, "float32");
  rp_jw_obj_end(w);
  return RP_OK;
}

rp_status rp_hf_config_write(const char *dir, const rp_gpt_config *c) {
  rp_jw w;
  build_config(c, &w);
  rp_status s = RP_OK;
  const char *text = rp_jw_text(&w, &s);
  char path[RP_IO_PATH + 64];
  snprintf(path, sizeof path, "%s/" HF_CONFIG, dir);
  rp_io_afile f;
  if (text) s = rp_io_afile_open(&f, path);
  if (text && s == RP_OK) {
    s = rp_io_afile_write(&f, text, strlen(text));
    if (s == RP_OK) s = rp_io_afile_write(&f, "\n", 1);
    if (s == RP_OK)
      s = rp_io_afile_commit(&f);
    else
      rp_io_afile_abort(&f);
  }
  rp_jw_free(&w);
  return s;
}

/* ---- reading a folder's config.json */

/* An optional key: absent is fine (transformers' default applies); present with
 * another type is a corrupt file. */
static int has_key(const char *json, const char *key) {
  const char *v;
  size_t n;
  return rp_json_find(json, key, &v, &n) == RP_OK;
}

static int is_null(const char *json, const char *key) {
  const char *v;
  size_t n;
  return rp_json_find(json, key, &v, &n) == RP_OK && n == 4 && !strncmp(v, "null", 4);
}

/* A required dimension, in [1, INT32_MAX]. */
static rp_status get_dim(const char *json, const char *path, const char *key, const char *alt,
                         int *out) {
  const char *k = has_key(json, key) || !alt ? key : alt;
  int64_t v;
  if (rp_json_get_int_in(json, k, 1, INT32_MAX, &v) != RP_OK) {
    char why[300];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    return rp_err(RP_EFORMAT, "'%s' has no valid \"%s\" (%s); a GPT-2 config.json gives "
                  "n_layer, n_embd, n_head, n_positions and vocab_size", path, key, why);
  }
  *out = (int)v;
  return RP_OK;
}

/* Refuses what ringpipe would compute differently from transformers. */
static rp_status check_supported(const char *json, const char *path, int C) {
  char s[64];
  if (rp_json_get_string(json, "model_type", s, sizeof s) != RP_OK)
    return rp_err(RP_EFORMAT, "'%s' has no \"model_type\"; is it a Hugging Face config.json?",
                  path);
  if (strcmp(s, "gpt2"))
    return rp_err(RP_EINVAL, "'%s' is a \"%s\" model; ringpipe loads GPT-2 (model_type \"gpt2\") "
                  "only: use a GPT-2 checkpoint", path, s);
  if (has_key(json, "activation_function")) {
    if (rp_json_get_string(json, "activation_function", s, sizeof s) != RP_OK ||
        (strcmp(s, "gelu_new") && strcmp(s, "gelu_pytorch_tanh")))
      return rp_err(RP_EINVAL, "'%s' uses activation_function \"%s\"; ringpipe computes GELU's "
                    "tanh approximation (\"gelu_new\") only", path, s);
  }
  int tied = 1, flag = 0;
  if (has_key(json, "tie_word_embeddings") &&
      (rp_json_get_bool(json, "tie_word_embeddings", &tied) != RP_OK || !tied))
    return rp_err(RP_EINVAL, "'%s' has tie_word_embeddings false: an untied LM head; ringpipe's "
                  "head is the token embedding (tied), so this model cannot be loaded", path);
  static const char *const off_flags[] = {"scale_attn_by_inverse_layer_idx", "add_cross_attention"};
  for (int i = 0; i < 2; i++)
    if (has_key(json, off_flags[i]) && rp_json_get_bool(json, off_flags[i], &flag) == RP_OK && flag)
      return rp_err(RP_EINVAL, "'%s' sets %s; ringpipe's GPT-2 has no such option: use a plain "
                    "GPT-2 model", path, off_flags[i]);
  if (has_key(json, "scale_attn_weights") &&
      rp_json_get_bool(json, "scale_attn_weights", &flag) == RP_OK && !flag)
    return rp_err(RP_EINVAL, "'%s' sets scale_attn_weights false; ringpipe scales attention by "
                  "1/sqrt(head size) as GPT-2 does", path);
  double eps = 1e-5;
  if (has_key(json, "layer_norm_epsilon") &&
      (rp_json_get_number(json, "layer_norm_epsilon", &eps) != RP_OK || fabs(eps - 1e-5) > 1e-12))
    return rp_err(RP_EINVAL, "'%s' has layer_norm_epsilon %g; ringpipe's LayerNorm uses 1e-5",
                  path, eps);
  int64_t inner = 4 * (int64_t)C;
  if (has_key(json, "n_inner") && !is_null(json, "n_inner") &&
      (rp_json_get_int64(json, "n_inner", &inner) != RP_OK || inner != 4 * (int64_t)C))
    return rp_err(RP_EINVAL, "'%s' has n_inner %lld; ringpipe's MLP is 4 x n_embd = %lld wide",
                  path, (long long)inner, 4 * (long long)C);
  return RP_OK;
}

rp_status rp_hf_read_config(const char *dir, rp_gpt_config *c) {
  char path[RP_IO_PATH + 64];
  snprintf(path, sizeof path, "%s/" HF_CONFIG, dir);
  char *json;
  RP_TRY(rp_io_read_text(path, &json, NULL));
  rp_status s = rp_json_validate(json);
  if (s != RP_OK) {
    char why[300];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    s = rp_err(RP_EFORMAT, "'%s' is not valid JSON (%s)", path, why);
  }
  *c = (rp_gpt_config){0};
  if (s == RP_OK) s = get_dim(json, path, "n_layer", NULL, &c->L);
  if (s == RP_OK) s = get_dim(json, path, "n_embd", NULL, &c->C);
  if (s == RP_OK) s = get_dim(json, path, "n_head", NULL, &c->NH);
  if (s == RP_OK) s = get_dim(json, path, "n_positions", "n_ctx", &c->T);
  if (s == RP_OK) s = get_dim(json, path, "vocab_size", NULL, &c->V);
  if (s == RP_OK) s = check_supported(json, path, c->C);
  free(json);
  RP_TRY(s);
  c->Vp = rp_pad_vocab(c->V);  /* ringpipe's own padding: the folder knows nothing of it */
  if (rp_gpt_config_validate(c) != RP_OK) {
    char why[300];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    return rp_err(RP_EINVAL, "'%s' describes a model ringpipe cannot build (L=%d C=%d NH=%d T=%d "
                  "V=%d: %s)", path, c->L, c->C, c->NH, c->T, c->V, why);
  }
  if (!file_in(dir, HF_MODEL))
    return rp_err(RP_EINVAL, "'%s' has a config.json but no %s%s; save the model with "
                  "save_pretrained(dir, safe_serialization=True) or convert it to one "
                  "safetensors file", dir, HF_MODEL,
                  file_in(dir, "model.safetensors.index.json") ? " (it is sharded)"
                  : file_in(dir, "pytorch_model.bin") ? " (only pytorch_model.bin)" : "");
  return RP_OK;
}

/* ---- loading a folder's weights */

/* An lm_head.weight in the file must be the token embedding itself (tied). */
static rp_status check_head_tied(const char *dir, const rp_chunk *m) {
  char path[RP_IO_PATH + 64];
  snprintf(path, sizeof path, "%s/" HF_MODEL, dir);
  rp_st_file f;
  RP_TRY(rp_st_open(&f, path));
  const rp_st_entry *e = rp_st_find(&f, "lm_head.weight");
  rp_status s = RP_OK;
  size_t n = (size_t)m->cfg.V * (size_t)m->cfg.C;
  if (e && (e->ndim != 2 || e->shape[0] != m->cfg.V || e->shape[1] != m->cfg.C))
    s = rp_err(RP_EINVAL, "'%s': lm_head.weight is not [%d, %d] like wte; this is not a tied "
               "GPT-2 head", path, m->cfg.V, m->cfg.C);
  float *head = e && s == RP_OK ? malloc(n * sizeof *head) : NULL;
  if (e && s == RP_OK && !head) s = rp_err(RP_ENOMEM, "out of memory");
  if (head) s = rp_st_read_f32(&f, e, 0, head, n);
  if (head && s == RP_OK && memcmp(head, m->p.wte, n * sizeof *head))
    s = rp_err(RP_EINVAL, "'%s': lm_head.weight differs from the token embedding: the head is "
               "untied, and ringpipe's head is the embedding (tied); this model cannot be loaded",
               path);
  free(head);
  rp_st_close(&f);
  return s;
}

rp_status rp_hf_load(const char *dir, rp_chunk *m) {
  rp_gpt_config fc;
  RP_TRY(rp_hf_read_config(dir, &fc));
  const rp_gpt_config *cc = &m->cfg;
  if (fc.L != cc->L || fc.C != cc->C || fc.NH != cc->NH || fc.T != cc->T || fc.V != cc->V)
    return rp_err(RP_EINVAL, "'%s' holds a model with L=%d C=%d NH=%d T=%d V=%d but this run "
                  "asks for L=%d C=%d NH=%d T=%d V=%d; use the folder's config", dir, fc.L, fc.C,
                  fc.NH, fc.T, fc.V, cc->L, cc->C, cc->NH, cc->T, cc->V);
  rp_ckpt_load_part part = {.chunk = m};
  RP_TRY(rp_ckpt_load_weights(dir, &part, 1));
  return m->spec.has_embed || m->spec.has_head ? check_head_tied(dir, m) : RP_OK;
}
