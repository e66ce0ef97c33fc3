/* Incremental decoding over the paged K/V cache: n rows, each a (slot,
 * position, token), go through the model together; per layer their keys and
 * values are written into the cache first, then each row attends to keys
 * 0..pos of its slot. Rows of different slots make a decode step; consecutive
 * rows of one slot make an extend (a new turn appended to a cached prefix).
 * The matmuls run over all n rows at once; attention reads the cache block by
 * block with an online softmax, so no score buffer is needed. */
#include <math.h>
#include <string.h>

#include "model_internal.h"
#include "ringpipe/rp_infer.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  const rp_kv_cache *c;
  int layer, n;
} rows_attn_ctx;

/* q . k over HS floats in 8 independent partial sums (vectorizes without
 * reassociating a single chain; the order is fixed, so results are too). */
static float dot_hs(const float *q, const float *k, int HS) {
  float acc[8] = {0};
  int d = 0;
  for (; d + 8 <= HS; d += 8)
    for (int j = 0; j < 8; j++) acc[j] += q[d + j] * k[d + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; d < HS; d++) s += q[d] * k[d];
  return s;
}

/* Row i, head h: softmax(q K^T / sqrt(HS)) V over positions 0..pos of its
 * slot, one block at a time: the block's scores, then one rescale of the
 * running output per block instead of one per key. */
static void attend_row(const rp_kv_cache *c, int layer, int i, int h) {
  const int C = c->m->cfg.C, HS = C / c->m->cfg.NH, slot = c->row_slot[i], pos = c->pos[i];
  const float scale = 1.0f / sqrtf((float)HS);
  const float *q = c->qkv + (size_t)i * 3 * C + (size_t)h * HS;
  float *o = c->atty + (size_t)i * C + (size_t)h * HS;
  float sc[RP_KV_BLOCK];
  for (int d = 0; d < HS; d++) o[d] = 0.0f;
  float mx = -INFINITY, sum = 0.0f;
  for (int t0 = 0; t0 <= pos; t0 += RP_KV_BLOCK) {
    int nt = pos - t0 + 1 < RP_KV_BLOCK ? pos - t0 + 1 : RP_KV_BLOCK;
    const float *k = rp_kv_row(c, slot, layer, 0, t0) + (size_t)h * HS;
    const float *v = rp_kv_row(c, slot, layer, 1, t0) + (size_t)h * HS;
    float bmx = -INFINITY;
    for (int j = 0; j < nt; j++) {
      sc[j] = dot_hs(q, k + (size_t)j * C, HS) * scale;
      bmx = fmaxf(bmx, sc[j]);
    }
    if (bmx > mx) {
      float corr = expf(mx - bmx); /* 0 on the first block, when mx is -inf */
      sum *= corr;
      for (int d = 0; d < HS; d++) o[d] *= corr;
      mx = bmx;
    }
    for (int j = 0; j < nt; j++) {
      float p = expf(sc[j] - mx);
      sum += p;
      const float *vj = v + (size_t)j * C;
      for (int d = 0; d < HS; d++) o[d] += p * vj[d];
    }
  }
  float inv = 1.0f / sum;
  for (int d = 0; d < HS; d++) o[d] *= inv;
}

static void rows_attn_task(void *vctx, int ith, int nth) {
  const rows_attn_ctx *ac = vctx;
  const int NH = ac->c->m->cfg.NH;
  long lo, hi;
  rp_split((long)ac->n * NH, ith, nth, &lo, &hi);
  for (long ih = lo; ih < hi; ih++) attend_row(ac->c, ac->layer, (int)(ih / NH), (int)(ih % NH));
}

/* The rows' keys and values of this layer into the cache (before any row
 * attends, so that rows of one slot see each other). */
static void store_kv(rp_kv_cache *c, int layer, int n) {
  const int C = c->m->cfg.C;
  for (int i = 0; i < n; i++) {
    const float *row = c->qkv + (size_t)i * 3 * C;
    memcpy(rp_kv_row(c, c->row_slot[i], layer, 0, c->pos[i]), row + C, (size_t)C * sizeof(float));
    memcpy(rp_kv_row(c, c->row_slot[i], layer, 1, c->pos[i]), row + 2 * C,
           (size_t)C * sizeof(float));
  }
}

/* Rows 0..n of c->tok / c->pos / c->row_slot (positions already reserved)
 * through every layer; logits [n, Vp] in c->logits. */
static const float *decode_rows(rp_kv_cache *c, int n, const rp_exec *x) {
  const rp_chunk *m = c->m;
  const int C = m->cfg.C;
  const long nC = (long)n * C;
  rp_pool *pool = x->pool;
  rp_embed_forward(c->x, c->tok, c->pos, m->p.wte, m->p.wpe, n, C, pool);
  for (int l = 0; l < m->cfg.L; l++) {
    const rp_layer_params *p = &m->p.layer[l];
    if (c->layer_hook) c->layer_hook(c->layer_hook_ctx, l);
    rp_layernorm_forward(c->ln, c->mean, c->rstd, c->x, p->ln1w, p->ln1b, n, C, pool);
    rp_mm_forward(c->qkv, c->ln, p->qkvw, p->qkvb, n, C, 3 * C, x);
    store_kv(c, l, n);
    rows_attn_ctx ac = {.c = c, .layer = l, .n = n};
    if (pool && rp_pool_size(pool) > 1 && n * m->cfg.NH > 1)
      rp_pool_run(pool, rows_attn_task, &ac);
    else
      rows_attn_task(&ac, 0, 1);
    /* c->ln is free once qkv exists: it takes each branch's projection. */
    rp_mm_forward(c->ln, c->atty, p->attprojw, p->attprojb, n, C, C, x);
    rp_add_inplace(c->x, c->ln, nC, pool);
    rp_layernorm_forward(c->ln, c->mean, c->rstd, c->x, p->ln2w, p->ln2b, n, C, pool);
    rp_mm_forward(c->fch, c->ln, p->fcw, p->fcb, n, C, 4 * C, x);
    rp_gelu_forward(c->fch_gelu, c->fch, 4 * nC, pool);
    rp_mm_forward(c->ln, c->fch_gelu, p->fcprojw, p->fcprojb, n, 4 * C, C, x);
    rp_add_inplace(c->x, c->ln, nC, pool);
  }
  rp_layernorm_forward(c->lnf, c->mean, c->rstd, c->x, m->p.lnfw, m->p.lnfb, n, C, pool);
  rp_mm_forward(c->logits, c->lnf, m->p.wte, NULL, n, C, m->cfg.Vp, x);
  return c->logits;
}

/* Row i is token tok of slot at its next position (a block reserved for it). */
static void set_row(rp_kv_cache *c, int i, int slot, int32_t tok) {
  rp_kv_reserve(c, slot);
  c->row_slot[i] = slot;
  c->tok[i] = tok;
  c->pos[i] = c->len[slot]++;
}

const float *rp_kv_step(rp_kv_cache *c, const int *slots, const int32_t *tok, int n,
                        const rp_exec *x) {
  if (n < 1 || n > c->S) {
    rp_err(RP_EINVAL, "decode step of %d rows: the cache has %d slots", n, c->S);
    return NULL;
  }
  for (int i = 0; i < n; i++)
    if (slots[i] < 0 || slots[i] >= c->S || c->len[slots[i]] >= c->Tmax) {
      rp_err(RP_EINVAL, "decode step: slot %d is out of range or full (%d positions)", slots[i],
             c->Tmax);
      return NULL;
    }
  for (int i = 0; i < n; i++) set_row(c, i, slots[i], tok[i]);
  return decode_rows(c, n, x);
}

const float *rp_kv_extend(rp_kv_cache *c, int slot, const int32_t *tokens, int n,
                          const rp_exec *x) {
  if (slot < 0 || slot >= c->S || n < 1 || c->len[slot] + n > c->Tmax) {
    rp_err(RP_EINVAL, "extend slot %d by %d tokens: the slot must exist and stay within %d "
           "positions", slot, n, c->Tmax);
    return NULL;
  }
  const float *logits = NULL;
  for (int done = 0; done < n;) {
    int rows = n - done < c->rows ? n - done : c->rows;
    for (int i = 0; i < rows; i++) set_row(c, i, slot, tokens[done + i]);
    logits = decode_rows(c, rows, x) + (size_t)(rows - 1) * c->m->cfg.Vp;
    done += rows;
  }
  return logits;
}
