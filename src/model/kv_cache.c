/* The paged K/V cache (rp_infer.h): a pool of fixed-size blocks, per-slot
 * block tables, reference-counted sharing of full blocks, and the prefill
 * that fills a slot from one ordinary forward. Decoding is in decode.c. */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "ringpipe/rp_arena.h"

static int blocks_for(int positions) { return (positions + RP_KV_BLOCK - 1) / RP_KV_BLOCK; }

static rp_status check_whole_model(const rp_chunk *m) {
  if (!m->spec.has_embed || !m->spec.has_head || m->spec.first_layer != 0 ||
      m->spec.num_layers != m->cfg.L)
    return rp_err(RP_EINVAL, "the KV cache decodes with the whole model on one rank; pass a "
                  "chunk with all layers, embeddings and head");
  return RP_OK;
}

static int alloc_scratch(rp_kv_cache *c) {
  size_t C = (size_t)c->m->cfg.C, rows = (size_t)c->rows;
  float **f[] = {&c->x, &c->ln, &c->atty, &c->lnf};
  for (size_t i = 0; i < sizeof f / sizeof *f; i++)
    *f[i] = rp_alloc(rows * C * sizeof(float), RP_MEM_WORKSPACE);
  c->qkv = rp_alloc(rows * 3 * C * sizeof(float), RP_MEM_WORKSPACE);
  c->fch = rp_alloc(rows * 4 * C * sizeof(float), RP_MEM_WORKSPACE);
  c->fch_gelu = rp_alloc(rows * 4 * C * sizeof(float), RP_MEM_WORKSPACE);
  c->mean = rp_alloc(rows * sizeof(float), RP_MEM_WORKSPACE);
  c->rstd = rp_alloc(rows * sizeof(float), RP_MEM_WORKSPACE);
  c->logits = rp_alloc(rows * c->m->cfg.Vp * sizeof(float), RP_MEM_WORKSPACE);
  c->tok = rp_alloc(rows * sizeof(int32_t), RP_MEM_WORKSPACE);
  c->pos = rp_alloc(rows * sizeof(int32_t), RP_MEM_WORKSPACE);
  c->row_slot = malloc(rows * sizeof(int));
  return c->x && c->ln && c->atty && c->lnf && c->qkv && c->fch && c->fch_gelu && c->mean &&
         c->rstd && c->logits && c->tok && c->pos && c->row_slot;
}

static int alloc_blocks(rp_kv_cache *c) {
  const rp_gpt_config *g = &c->m->cfg;
  c->blocks_per_slot = blocks_for(c->Tmax);
  c->nblocks = c->S * c->blocks_per_slot;
  c->block_floats = (size_t)g->L * 2 * RP_KV_BLOCK * g->C;
  c->blocks = rp_alloc((size_t)c->nblocks * c->block_floats * sizeof(float), RP_MEM_ACTS);
  c->refs = calloc((size_t)c->nblocks, sizeof(int));
  c->free_ids = malloc((size_t)c->nblocks * sizeof(int));
  c->table = malloc((size_t)c->S * c->blocks_per_slot * sizeof(int));
  c->len = calloc((size_t)c->S, sizeof(int));
  if (!c->blocks || !c->refs || !c->free_ids || !c->table || !c->len) return 0;
  /* lowest ids on top of the stack: a fresh cache hands out 0, 1, 2, ... */
  c->nfree = c->nblocks;
  for (int i = 0; i < c->nblocks; i++) c->free_ids[i] = c->nblocks - 1 - i;
  for (int i = 0; i < c->S * c->blocks_per_slot; i++) c->table[i] = -1;
  return 1;
}

rp_status rp_kv_init(rp_kv_cache *c, const rp_chunk *m, const rp_attn_backend *attn, int S,
                     int Tmax) {
  memset(c, 0, sizeof *c);
  RP_TRY(check_whole_model(m));
  if (S < 1 || Tmax < 1 || Tmax > m->cfg.T)
    return rp_err(RP_EINVAL, "KV cache of %d slots x %d positions: need slots >= 1 and "
                  "1 <= positions <= the model's %d", S, Tmax, m->cfg.T);
  c->m = m;
  c->attn = attn;
  c->S = S;
  c->Tmax = Tmax;
  /* a decode call takes up to S rows (one per slot); extend goes in chunks of
   * up to a block */
  c->rows = S > RP_KV_BLOCK ? S : RP_KV_BLOCK;
  c->lv = calloc(m->cfg.L ? (size_t)m->cfg.L : 1, sizeof *c->lv);
  c->acts_mem = rp_alloc(rp_acts_bytes(m, attn, 1, Tmax), RP_MEM_ACTS);
  if (!alloc_blocks(c) || !alloc_scratch(c) || !c->lv || !c->acts_mem) {
    rp_kv_free(c);
    return rp_err(RP_ENOMEM, "out of memory for a KV cache of %d slots x %d positions", S, Tmax);
  }
  return RP_OK;
}

void rp_kv_free(rp_kv_cache *c) {
  float *bufs[] = {c->blocks, c->x,    c->ln,   c->qkv,  c->atty,  c->fch,
                   c->fch_gelu, c->lnf, c->mean, c->rstd, c->logits};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) rp_free(bufs[i]);
  rp_free(c->tok);
  rp_free(c->pos);
  rp_free(c->acts_mem);
  free(c->row_slot);
  free(c->refs);
  free(c->free_ids);
  free(c->table);
  free(c->len);
  free(c->lv);
  memset(c, 0, sizeof *c);
}

/* ---- blocks */

static int *slot_table(const rp_kv_cache *c, int slot) {
  return c->table + (size_t)slot * c->blocks_per_slot;
}

float *rp_kv_block_data(const rp_kv_cache *c, int id) {
  return c->blocks + (size_t)id * c->block_floats;
}

size_t rp_kv_block_bytes(const rp_kv_cache *c) { return c->block_floats * sizeof(float); }

int rp_kv_blocks_used(const rp_kv_cache *c) { return c->nblocks - c->nfree; }

int rp_kv_slot_blocks(const rp_kv_cache *c, int slot, const int **ids) {
  *ids = slot_table(c, slot);
  return blocks_for(c->len[slot]);
}

static int take_block(rp_kv_cache *c) {
  /* Cannot run dry: the pool has a block for every position of every slot. */
  int id = c->free_ids[--c->nfree];
  c->refs[id] = 1;
  return id;
}

static void drop_block(rp_kv_cache *c, int id) {
  if (--c->refs[id] == 0) c->free_ids[c->nfree++] = id;
}

void rp_kv_release(rp_kv_cache *c, int slot) {
  int *tab = slot_table(c, slot);
  for (int b = 0; b < c->blocks_per_slot && tab[b] >= 0; b++) {
    drop_block(c, tab[b]);
    tab[b] = -1;
  }
  c->len[slot] = 0;
}

float *rp_kv_row(const rp_kv_cache *c, int slot, int layer, int kv, int pos) {
  int id = slot_table(c, slot)[pos / RP_KV_BLOCK];
  size_t C = (size_t)c->m->cfg.C;
  return rp_kv_block_data(c, id) +
         (((size_t)layer * 2 + kv) * RP_KV_BLOCK + (size_t)(pos % RP_KV_BLOCK)) * C;
}

void rp_kv_reserve(rp_kv_cache *c, int slot) {
  int pos = c->len[slot];
  if (pos % RP_KV_BLOCK == 0) slot_table(c, slot)[pos / RP_KV_BLOCK] = take_block(c);
}

/* ---- loading cached blocks */

rp_status rp_kv_attach(rp_kv_cache *c, int slot, const float *const *blocks, int nblocks,
                       int len) {
  if (slot < 0 || slot >= c->S || nblocks < 1 || len > c->Tmax || len < 1 ||
      (nblocks - 1) * RP_KV_BLOCK >= len || len > nblocks * RP_KV_BLOCK)
    return rp_err(RP_EINVAL, "attach %d blocks of %d positions to slot %d: need a slot in "
                  "0..%d and %d < positions <= %d <= %d", nblocks, len, slot, c->S - 1,
                  (nblocks - 1) * RP_KV_BLOCK, nblocks * RP_KV_BLOCK, c->Tmax);
  rp_kv_release(c, slot);
  int *tab = slot_table(c, slot);
  for (int b = 0; b < nblocks; b++) {
    tab[b] = take_block(c);
    if (blocks) memcpy(rp_kv_block_data(c, tab[b]), blocks[b], rp_kv_block_bytes(c));
  }
  c->len[slot] = len;
  return RP_OK;
}

void rp_kv_attach_layer(rp_kv_cache *c, int slot, int b, int layer, const float *src) {
  size_t n = (size_t)2 * RP_KV_BLOCK * c->m->cfg.C;
  memcpy(rp_kv_block_data(c, slot_table(c, slot)[b]) + (size_t)layer * n, src, n * sizeof(float));
}

void rp_kv_set_layer_hook(rp_kv_cache *c, void (*hook)(void *ctx, int layer), void *ctx) {
  c->layer_hook = hook;
  c->layer_hook_ctx = ctx;
}

/* ---- prefill */

const float *rp_kv_prefill(rp_kv_cache *c, int s0, int count, const int32_t *tokens, int n,
                           const rp_exec *x) {
  const rp_chunk *m = c->m;
  if (n < 1 || n > c->Tmax || s0 < 0 || count < 1 || s0 + count > c->S) {
    rp_err(RP_EINVAL, "prefill of %d tokens into slots %d..%d: need 1..%d tokens and slots "
           "within 0..%d", n, s0, s0 + count - 1, c->Tmax, c->S - 1);
    return NULL;
  }
  for (int s = s0; s < s0 + count; s++) rp_kv_release(c, s);
  int C = m->cfg.C;
  rp_acts a;
  rp_acts_bind(&a, c->lv, m, c->attn, c->acts_mem, 1, n);
  for (int t = 0; t < n; t++) {
    a.tokens[t] = tokens[t];
    a.targets[t] = -1;
    a.pos[t] = t;
  }
  /* the backend checks the prompt's shape here, where a refusal is this
   * function's error (NULL), instead of inside the forward */
  if (rp_attn_prepare(x->attn, &a.attn, 1, n, C, m->cfg.NH, NULL) != RP_OK) return NULL;
  rp_chunk_forward(m, &a, NULL, x);
  /* K and V of every position into slot s0's blocks ... */
  for (int t = 0; t < n; t++) {
    rp_kv_reserve(c, s0);
    for (int l = 0; l < m->cfg.L; l++) {
      const float *qkv = a.layer[l].qkv + (size_t)t * 3 * C;
      memcpy(rp_kv_row(c, s0, l, 0, t), qkv + C, (size_t)C * sizeof(float));
      memcpy(rp_kv_row(c, s0, l, 1, t), qkv + 2 * C, (size_t)C * sizeof(float));
    }
    c->len[s0]++;
  }
  /* ... and the group's other slots share its full blocks and copy the last
   * partial one, which they will each write. */
  int nb = blocks_for(n), full = n / RP_KV_BLOCK;
  const int *src = slot_table(c, s0);
  for (int s = s0 + 1; s < s0 + count; s++) {
    int *dst = slot_table(c, s);
    for (int b = 0; b < full; b++) {
      dst[b] = src[b];
      c->refs[src[b]]++;
    }
    if (nb > full) {
      dst[full] = take_block(c);
      memcpy(rp_kv_block_data(c, dst[full]), rp_kv_block_data(c, src[full]),
             rp_kv_block_bytes(c));
    }
    c->len[s] = n;
  }
  return a.logits + (size_t)(n - 1) * m->cfg.Vp;
}
