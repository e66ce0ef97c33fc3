/* Parameter layout of a chunk: one buffer, named views, the tensor list with
 * GPT-2 names, and seed-stable initialisation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_util.h"

enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB, NLT };

static const char *layer_tensor_names[NLT] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};

/* Shape (rows, cols) of per-layer tensor k in ringpipe's (out, in) orientation. */
static void layer_tensor_shape(int k, int C, int *r, int *c) {
  static const int rows_mult[NLT] = {1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1};
  static const int cols_mult[NLT] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 0};
  *r = rows_mult[k] * C;
  *c = cols_mult[k] * C;  /* 0: a vector */
}

typedef struct {
  rp_chunk *m;
  size_t off;
  int cap;
} layout_builder;

/* How tensor k of a layer is split over tp ranks (Megatron: c_attn, c_fc
 * column-parallel = rows of the (out, in) weight and their biases; c_proj
 * row-parallel = columns of the weight, bias replicated). */
static void layer_tensor_split(int k, int *split, int *blocks) {
  *blocks = k == QKVW || k == QKVB ? 3 : 1;
  *split = k == QKVW || k == QKVB || k == FCW || k == FCB ? RP_TP_ROWS
           : k == PROJW || k == FCPW                      ? RP_TP_COLS
                                                          : RP_TP_REPLICATED;
}

static void add_tensor(layout_builder *b, const char *name, int r, int c, int decay,
                       int hf_t, int layer, int is_wte, int split, int blocks) {
  rp_chunk *m = b->m;
  if (m->num_tensors == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 32;
    m->tensors = realloc(m->tensors, b->cap * sizeof *m->tensors);
    RP_CHECK(m->tensors);
  }
  rp_tensor *t = &m->tensors[m->num_tensors++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = c ? 2 : 1;
  t->full_shape[0] = r;
  t->full_shape[1] = c;
  t->tp_split = split;
  t->tp_blocks = blocks;
  if (split == RP_TP_ROWS) r /= m->tp;
  if (split == RP_TP_COLS) c /= m->tp;
  t->shape[0] = r;
  t->shape[1] = c;
  t->numel = (size_t)r * (c ? c : 1);
  t->offset = b->off;
  t->decay = decay;
  t->hf_transpose = hf_t;
  t->layer = layer;
  t->is_wte = is_wte;
  b->off += t->numel;
}

static void build_tensor_list(rp_chunk *m) {
  const rp_gpt_config *cfg = &m->cfg;
  layout_builder b = {.m = m};
  if (m->spec.has_embed || m->spec.has_head)
    add_tensor(&b, "wte.weight", cfg->Vp, cfg->C, 0, 0, -1, 1, RP_TP_ROWS, 1);
  if (m->spec.has_embed) add_tensor(&b, "wpe.weight", cfg->T, cfg->C, 0, 0, -1, 0, 0, 1);
  for (int i = 0; i < m->spec.num_layers; i++) {
    int l = m->spec.first_layer + i;
    for (int k = 0; k < NLT; k++) {
      char name[48];
      int r, c, split, blocks;
      snprintf(name, sizeof name, "h.%d.%s", l, layer_tensor_names[k]);
      layer_tensor_shape(k, cfg->C, &r, &c);
      layer_tensor_split(k, &split, &blocks);
      add_tensor(&b, name, r, c, c != 0, c != 0, l, 0, split, blocks);
    }
  }
  if (m->spec.has_head) {
    add_tensor(&b, "ln_f.weight", cfg->C, 0, 0, 0, -1, 0, 0, 1);
    add_tensor(&b, "ln_f.bias", cfg->C, 0, 0, 0, -1, 0, 0, 1);
  }
  m->num_params = b.off;
}

static void bind_views(rp_param_views *v, const rp_chunk *m, float *base) {
  int ti = 0;
  const rp_tensor *t = m->tensors;
  v->wte = v->wpe = v->lnfw = v->lnfb = NULL;
  if (m->spec.has_embed || m->spec.has_head) v->wte = base + t[ti++].offset;
  if (m->spec.has_embed) v->wpe = base + t[ti++].offset;
  for (int i = 0; i < m->spec.num_layers; i++) {
    float **f = (float **)&v->layer[i];  /* rp_layer_params is NLT float pointers in order */
    for (int k = 0; k < NLT; k++) f[k] = base + t[ti++].offset;
  }
  if (m->spec.has_head) {
    v->lnfw = base + t[ti++].offset;
    v->lnfb = base + t[ti++].offset;
  }
}

rp_status rp_chunk_init(rp_chunk *m, const rp_gpt_config *cfg, const rp_stage_spec *spec) {
  return rp_chunk_init_tp(m, cfg, spec, 1, 0);
}

rp_status rp_chunk_init_tp(rp_chunk *m, const rp_gpt_config *cfg, const rp_stage_spec *spec,
                           int tp, int tp_rank) {
  memset(m, 0, sizeof *m);
  RP_TRY(rp_gpt_config_validate(cfg));
  RP_TRY(rp_gpt_config_check_tp(cfg, tp));
  if (tp_rank < 0 || tp_rank >= tp)
    return rp_err(RP_EINVAL, "tensor-parallel rank %d outside 0..%d", tp_rank, tp - 1);
  if (spec->first_layer < 0 || spec->num_layers < 0 ||
      spec->first_layer + spec->num_layers > cfg->L)
    return rp_err(RP_EINVAL, "stage layers [%d, %d) fall outside the model's %d layers",
                  spec->first_layer, spec->first_layer + spec->num_layers, cfg->L);
  _Static_assert(sizeof(rp_layer_params) == NLT * sizeof(float *), "layer view layout");
  m->cfg = *cfg;
  m->spec = *spec;
  m->tp = tp;
  m->tp_rank = tp_rank;
  build_tensor_list(m);
  int nl = spec->num_layers > 0 ? spec->num_layers : 1;
  m->p.layer = calloc(nl, sizeof(rp_layer_params));
  m->g.layer = calloc(nl, sizeof(rp_layer_params));
  m->params = rp_alloc(m->num_params * sizeof(float), RP_MEM_PARAMS);
  m->grads = rp_alloc(m->num_params * sizeof(float), RP_MEM_GRADS);
  if (!m->params || !m->grads || !m->p.layer || !m->g.layer) {
    size_t n = m->num_params;  /* rp_chunk_free zeroes *m */
    rp_chunk_free(m);
    return rp_err(RP_ENOMEM, "out of memory for %zu parameters (%.1f GiB with their gradients; "
                  "L=%d C=%d V=%d): choose a smaller model", n, 8.0 * n / (1 << 30), cfg->L,
                  cfg->C, cfg->V);
  }
  bind_views(&m->p, m, m->params);
  bind_views(&m->g, m, m->grads);
  return RP_OK;
}

void rp_chunk_free(rp_chunk *m) {
  rp_free(m->rc_scratch);
  rp_free(m->sp_scratch);
  rp_free(m->params);
  rp_free(m->grads);
  free(m->p.layer);
  free(m->g.layer);
  free(m->tensors);
  memset(m, 0, sizeof *m);
}

/* Global id of a tensor, the same whatever chunk holds it. */
static uint64_t global_tensor_id(const rp_tensor *t, int k_in_layer) {
  if (t->is_wte) return 0;
  if (t->layer < 0) return strcmp(t->name, "wpe.weight") == 0 ? 1 : (strstr(t->name, "bias") ? 3 : 2);
  return 4 + (uint64_t)t->layer * NLT + k_in_layer;
}

/* Copies tensor t's slice of this tp rank between the whole tensor (full,
 * full_shape) and the rank's shard (local, shape): to_local 1 slices, 0 puts
 * the shard back in its place. */
static void copy_slice(const rp_tensor *t, int tp, int rank, float *local, float *full,
                       int to_local) {
  size_t R = t->full_shape[0], Cc = t->full_shape[1] ? t->full_shape[1] : 1;
  size_t rows = R, cols = Cc, r0 = 0, c0 = 0, blocks = 1, brows = R;
  if (t->tp_split == RP_TP_ROWS) {
    blocks = t->tp_blocks;
    brows = R / blocks;
    rows = brows / tp;
    r0 = rank * rows;
  } else if (t->tp_split == RP_TP_COLS) {
    cols = Cc / tp;
    c0 = rank * cols;
  }
  for (size_t b = 0; b < blocks; b++)
    for (size_t i = 0; i < rows; i++) {
      float *l = local + (b * rows + i) * cols;
      float *f = full + (b * brows + r0 + i) * Cc + c0;
      if (to_local) memcpy(l, f, cols * sizeof *l);
      else memcpy(f, l, cols * sizeof *l);
    }
}

void rp_chunk_shard_from(const rp_chunk *local, float *local_buf, const rp_chunk *full,
                         const float *full_buf) {
  RP_CHECK(full->tp == 1 && full->num_tensors == local->num_tensors);
  for (int i = 0; i < local->num_tensors; i++)
    copy_slice(&local->tensors[i], local->tp, local->tp_rank, local_buf + local->tensors[i].offset,
               (float *)full_buf + full->tensors[i].offset, 1);
}

void rp_chunk_unshard_into(const rp_chunk *local, const float *local_buf, const rp_chunk *full,
                           float *full_buf) {
  RP_CHECK(full->tp == 1 && full->num_tensors == local->num_tensors);
  for (int i = 0; i < local->num_tensors; i++)
    copy_slice(&local->tensors[i], local->tp, local->tp_rank,
               (float *)local_buf + local->tensors[i].offset, full_buf + full->tensors[i].offset, 0);
}

/* The whole tensor t's initial values into w (full_shape): every tp rank draws
 * the same stream and keeps its slice, so a shard is a slice of the one-rank
 * model's tensor. */
static void init_full_tensor(const rp_chunk *m, const rp_tensor *t, float *w, uint64_t seed) {
  const rp_gpt_config *cfg = &m->cfg;
  float resid_std = 0.02f / sqrtf(2.0f * cfg->L);
  int k = 0;
  if (t->layer >= 0)
    for (k = 0; k < NLT; k++)
      if (strstr(t->name, layer_tensor_names[k])) break;
  rp_rng rng;
  rp_rng_seed(&rng, seed * 1000003ull + global_tensor_id(t, k));
  size_t n = (size_t)t->full_shape[0] * (t->full_shape[1] ? t->full_shape[1] : 1);
  if (t->is_wte) n = (size_t)cfg->V * cfg->C;  /* padded rows stay 0 */
  if (strstr(t->name, "ln_") ) {
    float v = strstr(t->name, "weight") ? 1.0f : 0.0f;
    for (size_t j = 0; j < n; j++) w[j] = v;
  } else if (t->ndim == 1) {
    memset(w, 0, n * sizeof *w);
  } else {
    float std = (k == PROJW || k == FCPW) && t->layer >= 0 ? resid_std : 0.02f;
    for (size_t j = 0; j < n; j++) w[j] = std * rp_rng_normal(&rng);
  }
}

void rp_chunk_init_weights(rp_chunk *m, uint64_t seed) {
  for (int i = 0; i < m->num_tensors; i++) {
    const rp_tensor *t = &m->tensors[i];
    float *w = m->params + t->offset;
    if (m->tp == 1 || t->tp_split == RP_TP_REPLICATED) {
      init_full_tensor(m, t, w, seed);
      continue;
    }
    size_t n = (size_t)t->full_shape[0] * (t->full_shape[1] ? t->full_shape[1] : 1);
    float *full = calloc(n, sizeof *full);  /* padded wte rows stay 0 */
    RP_CHECK(full);
    init_full_tensor(m, t, full, seed);
    copy_slice(t, m->tp, m->tp_rank, w, full, 1);
    free(full);
  }
}

void rp_chunk_zero_grads(rp_chunk *m) { memset(m->grads, 0, m->num_params * sizeof(float)); }

const rp_tensor *rp_chunk_find(const rp_chunk *m, const char *name) {
  for (int i = 0; i < m->num_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}
