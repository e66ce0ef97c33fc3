/* Incremental decoding with a per-layer K/V cache.
 *
 * A prompt is run once through the ordinary forward (rp_chunk_forward on one
 * sequence) and its keys and values, read from each layer's qkv activations,
 * are copied into the G slots of its group. Each decoding step then takes one
 * new token per active slot: the matmuls run over the n active rows together,
 * and attention is one query row per (slot, head) against that slot's cached
 * keys, written here with an online softmax so no score buffer is needed.
 * Per step the cost is O(n (params + L len C)) instead of a full forward's
 * O(n len params). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_rl.h"
#include "rl_internal.h"

rp_status rp_kv_init(rp_kv_cache *c, const rp_chunk *m, const rp_attn_backend *attn, int S,
                     int Tmax) {
  memset(c, 0, sizeof *c);
  if (!m->spec.has_embed || !m->spec.has_head || m->spec.first_layer != 0 ||
      m->spec.num_layers != m->cfg.L)
    return rp_err(RP_EINVAL, "the KV cache decodes with the whole model on one rank; pass a "
                  "chunk with all layers, embeddings and head");
  if (S < 1 || Tmax < 1 || Tmax > m->cfg.T)
    return rp_err(RP_EINVAL, "KV cache of %d slots x %d positions: need slots >= 1 and "
                  "1 <= positions <= the model's %d", S, Tmax, m->cfg.T);
  c->m = m;
  c->S = S;
  c->Tmax = Tmax;
  c->attn = attn;
  size_t C = (size_t)m->cfg.C, L = (size_t)m->cfg.L, kv = L * S * Tmax * C;
  size_t rows = (size_t)S;
  c->k = rp_alloc(kv * sizeof(float), RP_MEM_ACTS);
  c->v = rp_alloc(kv * sizeof(float), RP_MEM_ACTS);
  c->x = rp_alloc(rows * C * sizeof(float), RP_MEM_WORKSPACE);
  c->ln = rp_alloc(rows * C * sizeof(float), RP_MEM_WORKSPACE);
  c->qkv = rp_alloc(rows * 3 * C * sizeof(float), RP_MEM_WORKSPACE);
  c->atty = rp_alloc(rows * C * sizeof(float), RP_MEM_WORKSPACE);
  c->fch = rp_alloc(rows * 4 * C * sizeof(float), RP_MEM_WORKSPACE);
  c->fch_gelu = rp_alloc(rows * 4 * C * sizeof(float), RP_MEM_WORKSPACE);
  c->lnf = rp_alloc(rows * C * sizeof(float), RP_MEM_WORKSPACE);
  c->mean = rp_alloc(rows * sizeof(float), RP_MEM_WORKSPACE);
  c->rstd = rp_alloc(rows * sizeof(float), RP_MEM_WORKSPACE);
  c->logits = rp_alloc(rows * m->cfg.Vp * sizeof(float), RP_MEM_WORKSPACE);
  c->tok = rp_alloc(rows * sizeof(int32_t), RP_MEM_WORKSPACE);
  c->pos = rp_alloc(rows * sizeof(int32_t), RP_MEM_WORKSPACE);
  c->len = calloc(rows, sizeof(int));
  c->lv = calloc(L ? L : 1, sizeof *c->lv);
  c->acts_mem = rp_alloc(rp_acts_bytes(m, attn, 1, Tmax), RP_MEM_ACTS);
  if (!c->k || !c->v || !c->x || !c->ln || !c->qkv || !c->atty || !c->fch || !c->fch_gelu ||
      !c->lnf || !c->mean || !c->rstd || !c->logits || !c->tok || !c->pos || !c->len || !c->lv ||
      !c->acts_mem) {
    rp_kv_free(c);
    return rp_err(RP_ENOMEM, "out of memory for a KV cache of %d slots x %d positions", S, Tmax);
  }
  return RP_OK;
}

void rp_kv_free(rp_kv_cache *c) {
  float *bufs[] = {c->k, c->v, c->x, c->ln, c->qkv, c->atty, c->fch, c->fch_gelu, c->lnf,
                   c->mean, c->rstd, c->logits};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) rp_free(bufs[i]);
  rp_free(c->tok);
  rp_free(c->pos);
  rp_free(c->acts_mem);
  free(c->len);
  free(c->lv);
  memset(c, 0, sizeof *c);
}

static float *kv_at(const rp_kv_cache *c, float *base, int layer, int slot, int pos) {
  size_t C = (size_t)c->m->cfg.C;
  return base + (((size_t)layer * c->S + slot) * c->Tmax + pos) * C;
}

const float *rp_kv_prefill(rp_kv_cache *c, int s0, int count, const int32_t *tokens, int n,
                           const rp_exec *x) {
  const rp_chunk *m = c->m;
  RP_CHECK(n >= 1 && n <= c->Tmax && s0 >= 0 && count >= 1 && s0 + count <= c->S);
  int C = m->cfg.C;
  rp_acts a;
  rp_acts_bind(&a, c->lv, m, c->attn, c->acts_mem, 1, n);
  for (int t = 0; t < n; t++) {
    a.tokens[t] = tokens[t];
    a.targets[t] = -1;
    a.pos[t] = t;
  }
  rp_chunk_forward(m, &a, NULL, x);
  for (int l = 0; l < m->cfg.L; l++) {
    const float *qkv = a.layer[l].qkv;
    for (int s = s0; s < s0 + count; s++)
      for (int t = 0; t < n; t++) {
        memcpy(kv_at(c, c->k, l, s, t), qkv + (size_t)t * 3 * C + C, (size_t)C * sizeof(float));
        memcpy(kv_at(c, c->v, l, s, t), qkv + (size_t)t * 3 * C + 2 * C,
               (size_t)C * sizeof(float));
      }
  }
  for (int s = s0; s < s0 + count; s++) c->len[s] = n;
  return a.logits + (size_t)(n - 1) * m->cfg.Vp;
}

typedef struct {
  const rp_kv_cache *c;
  const int *slots;
  const int32_t *pos;
  int layer, n;
} step_attn_ctx;

/* One query row per (active row i, head h) against keys 0..pos[i] of its slot
 * (the new token's own key included), online softmax. */
static void step_attn_task(void *vctx, int ith, int nth) {
  const step_attn_ctx *sc = vctx;
  const rp_kv_cache *c = sc->c;
  const int C = c->m->cfg.C, NH = c->m->cfg.NH, HS = C / NH;
  const float scale = 1.0f / sqrtf((float)HS);
  long lo, hi;
  rp_split((long)sc->n * NH, ith, nth, &lo, &hi);
  for (long ih = lo; ih < hi; ih++) {
    int i = (int)(ih / NH), h = (int)(ih % NH), slot = sc->slots[i];
    const float *q = c->qkv + (size_t)i * 3 * C + (size_t)h * HS;
    float *o = c->atty + (size_t)i * C + (size_t)h * HS;
    for (int d = 0; d < HS; d++) o[d] = 0.0f;
    float mx = -INFINITY, sum = 0.0f;
    for (int t = 0; t <= sc->pos[i]; t++) {
      const float *k = kv_at(c, c->k, sc->layer, slot, t) + (size_t)h * HS;
      const float *v = kv_at(c, c->v, sc->layer, slot, t) + (size_t)h * HS;
      float s = 0.0f;
      for (int d = 0; d < HS; d++) s += q[d] * k[d];
      s *= scale;
      if (s > mx) {
        float corr = expf(mx - s); /* 0 on the first key, when mx is -inf */
        sum *= corr;
        for (int d = 0; d < HS; d++) o[d] *= corr;
        mx = s;
      }
      float p = expf(s - mx);
      sum += p;
      for (int d = 0; d < HS; d++) o[d] += p * v[d];
    }
    float inv = 1.0f / sum;
    for (int d = 0; d < HS; d++) o[d] *= inv;
  }
}

const float *rp_kv_step(rp_kv_cache *c, const int *slots, const int32_t *tok, int n,
                        const rp_exec *x) {
  const rp_chunk *m = c->m;
  const int C = m->cfg.C, Vp = m->cfg.Vp;
  const long nC = (long)n * C;
  rp_pool *pool = x->pool;
  RP_CHECK(n >= 1 && n <= c->S);
  for (int i = 0; i < n; i++) {
    RP_CHECK(c->len[slots[i]] < c->Tmax);
    c->tok[i] = tok[i];
    c->pos[i] = c->len[slots[i]];
  }
  rp_embed_forward(c->x, c->tok, c->pos, m->p.wte, m->p.wpe, n, C, pool);
  for (int l = 0; l < m->cfg.L; l++) {
    const rp_layer_params *p = &m->p.layer[l];
    rp_layernorm_forward(c->ln, c->mean, c->rstd, c->x, p->ln1w, p->ln1b, n, C, pool);
    rp_matmul_forward(c->qkv, c->ln, p->qkvw, p->qkvb, n, C, 3 * C, pool);
    for (int i = 0; i < n; i++) {
      const float *row = c->qkv + (size_t)i * 3 * C;
      memcpy(kv_at(c, c->k, l, slots[i], c->pos[i]), row + C, (size_t)C * sizeof(float));
      memcpy(kv_at(c, c->v, l, slots[i], c->pos[i]), row + 2 * C, (size_t)C * sizeof(float));
    }
    step_attn_ctx sc = {.c = c, .slots = slots, .pos = c->pos, .layer = l, .n = n};
    if (pool && rp_pool_size(pool) > 1 && n * m->cfg.NH > 1)
      rp_pool_run(pool, step_attn_task, &sc);
    else
      step_attn_task(&sc, 0, 1);
    /* c->ln is free once qkv exists: it takes each branch's projection. */
    rp_matmul_forward(c->ln, c->atty, p->attprojw, p->attprojb, n, C, C, pool);
    rp_add_inplace(c->x, c->ln, nC, pool);
    rp_layernorm_forward(c->ln, c->mean, c->rstd, c->x, p->ln2w, p->ln2b, n, C, pool);
    rp_matmul_forward(c->fch, c->ln, p->fcw, p->fcb, n, C, 4 * C, pool);
    rp_gelu_forward(c->fch_gelu, c->fch, 4 * nC, pool);
    rp_matmul_forward(c->ln, c->fch_gelu, p->fcprojw, p->fcprojb, n, 4 * C, C, pool);
    rp_add_inplace(c->x, c->ln, nC, pool);
  }
  rp_layernorm_forward(c->lnf, c->mean, c->rstd, c->x, m->p.lnfw, m->p.lnfb, n, C, pool);
  rp_matmul_forward(c->logits, c->lnf, m->p.wte, NULL, n, C, Vp, pool);
  for (int i = 0; i < n; i++) c->len[slots[i]]++;
  return c->logits;
}
