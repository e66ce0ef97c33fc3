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

static void add_tensor(layout_builder *b, const char *name, int r, int c, int decay,
                       int hf_t, int layer, int is_wte) {
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
    add_tensor(&b, "wte.weight", cfg->Vp, cfg->C, 0, 0, -1, 1);
  if (m->spec.has_embed) add_tensor(&b, "wpe.weight", cfg->T, cfg->C, 0, 0, -1, 0);
  for (int i = 0; i < m->spec.num_layers; i++) {
    int l = m->spec.first_layer + i;
    for (int k = 0; k < NLT; k++) {
      char name[48];
      int r, c;
      snprintf(name, sizeof name, "h.%d.%s", l, layer_tensor_names[k]);
      layer_tensor_shape(k, cfg->C, &r, &c);
      add_tensor(&b, name, r, c, c != 0, c != 0, l, 0);
    }
  }
  if (m->spec.has_head) {
    add_tensor(&b, "ln_f.weight", cfg->C, 0, 0, 0, -1, 0);
    add_tensor(&b, "ln_f.bias", cfg->C, 0, 0, 0, -1, 0);
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
  memset(m, 0, sizeof *m);
  RP_TRY(rp_gpt_config_validate(cfg));
  if (spec->first_layer < 0 || spec->num_layers < 0 ||
      spec->first_layer + spec->num_layers > cfg->L)
    return rp_err(RP_EINVAL, "stage layers [%d, %d) fall outside the model's %d layers",
                  spec->first_layer, spec->first_layer + spec->num_layers, cfg->L);
  _Static_assert(sizeof(rp_layer_params) == NLT * sizeof(float *), "layer view layout");
  m->cfg = *cfg;
  m->spec = *spec;
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

void rp_chunk_init_weights(rp_chunk *m, uint64_t seed) {
  const rp_gpt_config *cfg = &m->cfg;
  float resid_std = 0.02f / sqrtf(2.0f * cfg->L);
  for (int i = 0; i < m->num_tensors; i++) {
    const rp_tensor *t = &m->tensors[i];
    float *w = m->params + t->offset;
    int k = 0;
    if (t->layer >= 0)
      for (k = 0; k < NLT; k++)
        if (strstr(t->name, layer_tensor_names[k])) break;
    rp_rng rng;
    rp_rng_seed(&rng, seed * 1000003ull + global_tensor_id(t, k));
    size_t n = t->numel;
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
}

void rp_chunk_zero_grads(rp_chunk *m) { memset(m->grads, 0, m->num_params * sizeof(float)); }

const rp_tensor *rp_chunk_find(const rp_chunk *m, const char *name) {
  for (int i = 0; i < m->num_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}
