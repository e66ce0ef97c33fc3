/* Activation storage of one micro-batch through one chunk, and the gradient
 * scratch shared by all micro-batches. Sized up front, carved from one block. */
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "model_internal.h"
#include "ringpipe/rp_model.h"

/* A bump carver over a block; with base == NULL it only measures. Every view is
 * rounded to 64 bytes so kernels see aligned rows. */
typedef struct {
  char *base;
  size_t off;
} carver;

static void *carve(carver *c, size_t bytes) {
  void *p = c->base ? c->base + c->off : NULL;
  c->off += (bytes + 63) & ~(size_t)63;
  return p;
}
#define CARVE_F(c, n) ((float *)carve((c), (size_t)(n) * sizeof(float)))
#define CARVE_I(c, n) ((int32_t *)carve((c), (size_t)(n) * sizeof(int32_t)))

/* One layer's tensors, all of them (res3 aside): the full layer in the shared
 * recompute scratch, or its layout size when c->base is NULL. Ct = C/tp: the
 * attention and hidden features of this tensor-parallel rank (C at tp 1). */
typedef struct {
  size_t N, Nr, C, Ct;  /* rows, residual-stream rows (N/tp under sp), widths */
} dims;

static dims dims_of(const rp_chunk *m, int B, int T) {
  size_t N = (size_t)B * T;
  return (dims){N, m->sp ? N / m->tp : N, m->cfg.C, rp_tp_width(m)};
}

/* k gets what the weight-gradient pass W reads (each matmul's and LayerNorm's
 * input and the LayerNorm statistics), d what only the input-gradient pass I
 * (or a full B) reads: the QKV, the attention's saved state and the pre-GELU
 * activation. Under a split backward d is freed at I, k at W. */
static void layout_layer(carver *k, carver *d, rp_layer_acts *l, dims dm, size_t saved,
                         int with_gelu) {
  size_t N = dm.N, Nr = dm.Nr, C = dm.C, Ct = dm.Ct;
  l->ln1 = CARVE_F(k, Nr * C);
  l->ln1_mean = CARVE_F(k, Nr);
  l->ln1_rstd = CARVE_F(k, Nr);
  l->qkv = CARVE_F(d, 3 * N * Ct);
  l->atty = CARVE_F(k, N * Ct);
  if (saved) l->att_saved = CARVE_F(d, saved);
  l->res2 = CARVE_F(k, Nr * C);
  l->ln2 = CARVE_F(k, Nr * C);
  l->ln2_mean = CARVE_F(k, Nr);
  l->ln2_rstd = CARVE_F(k, Nr);
  /* without its GELU output (selective recompute) fch is what W recomputes it from */
  l->fch = CARVE_F(with_gelu ? d : k, 4 * N * Ct);
  if (with_gelu) l->fch_gelu = CARVE_F(k, 4 * N * Ct);
}


/* The shared recompute scratch: a whole layer for FULL; for SELECTIVE only what
 * it drops (the GELU output, and the attention's saved state when dropped). */
static void layout_scratch(carver *c, rp_layer_acts *l, rp_recompute mode, dims d,
                           size_t saved) {
  if (mode == RP_RECOMPUTE_FULL) {
    layout_layer(c, c, l, d, saved, 1);
    return;
  }
  if (rp_selective_drops_attention(saved, d.N, d.Ct)) l->att_saved = CARVE_F(c, saved);
  l->fch_gelu = CARVE_F(c, 4 * d.N * d.Ct);
}

/* One micro-batch's activations through chunk m, carved from k (what W reads:
 * kept until W) and d (what only I or B reads: freed at I). */
static void layout_acts(carver *k, carver *d, rp_acts *a, rp_layer_acts *lv, const rp_chunk *m,
                        const rp_attn_backend *attn, int B, int T) {
  dims dm = dims_of(m, B, T);
  size_t N = dm.N, Nr = dm.Nr, C = dm.C, Ct = dm.Ct;
  size_t saved = attn->saved_floats(attn, B, T, (int)Ct, rp_tp_heads(m));
  rp_layer_acts shared = {0};
  if (m->recompute != RP_RECOMPUTE_NONE && lv) {
    carver sc = {.base = m->rc_scratch};
    layout_scratch(&sc, &shared, m->recompute, dm, saved);
    RP_CHECK(m->rc_scratch && sc.off <= m->rc_bytes);
  }
  int full = m->recompute == RP_RECOMPUTE_FULL, sel = m->recompute == RP_RECOMPUTE_SELECTIVE;
  a->B = B;
  a->T = T;
  a->tokens = CARVE_I(k, N);  /* the embedding's weight gradient reads tokens and pos */
  a->targets = CARVE_I(d, N);
  a->pos = CARVE_I(k, N);
  a->input = CARVE_F(k, Nr * C);
  for (int i = 0; i < m->spec.num_layers; i++) {
    rp_layer_acts *l = lv ? &lv[i] : &(rp_layer_acts){0};
    if (full) {
      *l = shared;  /* everything but the output is recomputed */
    } else {
      int drop_att = sel && rp_selective_drops_attention(saved, N, Ct);
      layout_layer(k, d, l, dm, drop_att ? 0 : saved, !sel);
      if (drop_att) l->att_saved = shared.att_saved;
      if (sel) l->fch_gelu = shared.fch_gelu;
    }
    l->res3 = CARVE_F(k, Nr * C);  /* the next layer's LayerNorm input */
  }
  a->lnf = a->lnf_mean = a->lnf_rstd = a->logits = a->losses = a->xent_stats = NULL;
  if (m->spec.has_head) {
    a->lnf = CARVE_F(k, Nr * C);
    a->lnf_mean = CARVE_F(k, Nr);
    a->lnf_rstd = CARVE_F(k, Nr);
    a->logits = CARVE_F(k, N * rp_tp_vocab(m));  /* dlogits after I: the LM head's W reads them */
    a->losses = CARVE_F(d, N);
    if (m->tp > 1) a->xent_stats = CARVE_F(d, 3 * N);
  }
  a->layer = lv;
  if (lv) a->output = m->spec.num_layers ? lv[m->spec.num_layers - 1].res3 : a->input;
}

void rp_acts_split_bytes(const rp_chunk *m, const rp_attn_backend *attn, int B, int T,
                         size_t *keep, size_t *drop) {
  carver k = {0}, d = {0};
  rp_acts a;
  layout_acts(&k, &d, &a, NULL, m, attn, B, T);
  *keep = k.off;
  *drop = d.off;
}

size_t rp_acts_bytes(const rp_chunk *m, const rp_attn_backend *attn, int B, int T) {
  size_t keep, drop;
  rp_acts_split_bytes(m, attn, B, T, &keep, &drop);
  return keep + drop;
}

void rp_acts_bind_split(rp_acts *a, rp_layer_acts *layer_views, const rp_chunk *m,
                        const rp_attn_backend *attn, void *keep_mem, void *drop_mem, int B,
                        int T) {
  carver k = {.base = keep_mem}, d = {.base = drop_mem};
  memset(a, 0, sizeof *a);
  layout_acts(&k, &d, a, layer_views, m, attn, B, T);
}

void rp_acts_bind(rp_acts *a, rp_layer_acts *layer_views, const rp_chunk *m,
                  const rp_attn_backend *attn, void *mem, int B, int T) {
  size_t keep, drop;
  rp_acts_split_bytes(m, attn, B, T, &keep, &drop);
  rp_acts_bind_split(a, layer_views, m, attn, mem, (char *)mem + keep, B, T);
}

rp_status rp_grad_ws_init(rp_grad_ws *w, const rp_chunk *m, int B, int T) {
  size_t N = (size_t)B * T, C = m->cfg.C, Ct = rp_tp_width(m);
  carver c = {0};
  for (int pass = 0; pass < 2; pass++) {
    w->dres = CARVE_F(&c, N * C);
    w->dbuf = CARVE_F(&c, N * C);
    w->dln = CARVE_F(&c, N * C);
    w->dqkv = CARVE_F(&c, 3 * N * Ct);
    w->dfch = CARVE_F(&c, 4 * N * Ct);
    w->dfch_gelu = CARVE_F(&c, 4 * N * Ct);
    if (pass == 0) {
      w->mem = rp_alloc(c.off, RP_MEM_WORKSPACE);
      if (!w->mem) return RP_ENOMEM;
      c = (carver){.base = w->mem};
    }
  }
  return RP_OK;
}

void rp_grad_ws_free(rp_grad_ws *w) {
  rp_free(w->mem);
  memset(w, 0, sizeof *w);
}

static void layout_wstash(carver *c, rp_wstash *s, rp_layer_douts *lv, const rp_chunk *m, int B,
                          int T) {
  size_t NC = (size_t)B * T * m->cfg.C, NCt = (size_t)B * T * rp_tp_width(m);
  for (int i = 0; i < m->spec.num_layers; i++) {
    rp_layer_douts *d = lv ? &lv[i] : &(rp_layer_douts){0};
    d->dres3 = CARVE_F(c, NC);
    d->dfch = CARVE_F(c, 4 * NCt);
    d->dln2 = CARVE_F(c, NC);
    d->dres2 = CARVE_F(c, NC);
    d->dqkv = CARVE_F(c, 3 * NCt);
    d->dln1 = CARVE_F(c, NC);
  }
  s->layer = lv;
  s->dlnf = m->spec.has_head ? CARVE_F(c, NC) : NULL;
  s->dembed = m->spec.has_embed ? CARVE_F(c, NC) : NULL;
}

size_t rp_wstash_bytes(const rp_chunk *m, int B, int T) {
  carver c = {0};
  rp_wstash s;
  layout_wstash(&c, &s, NULL, m, B, T);
  return c.off;
}

void rp_wstash_bind(rp_wstash *s, rp_layer_douts *layer_views, const rp_chunk *m, void *mem,
                    int B, int T) {
  carver c = {.base = mem};
  layout_wstash(&c, s, layer_views, m, B, T);
}

const char *rp_recompute_name(rp_recompute mode) {
  return mode == RP_RECOMPUTE_FULL ? "full" : mode == RP_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

rp_status rp_chunk_set_recompute(rp_chunk *m, rp_recompute mode, const rp_attn_backend *attn,
                                 int B, int T) {
  rp_free(m->rc_scratch);
  m->rc_scratch = NULL;
  m->rc_bytes = 0;
  m->recompute = mode;
  if (mode == RP_RECOMPUTE_NONE) return RP_OK;
  carver c = {0};
  rp_layer_acts l;
  layout_scratch(&c, &l, mode, dims_of(m, B, T),
                 attn->saved_floats(attn, B, T, rp_tp_width(m), rp_tp_heads(m)));
  m->rc_bytes = c.off;
  m->rc_scratch = rp_alloc(c.off, RP_MEM_ACTS);
  return m->rc_scratch ? RP_OK : rp_err(RP_ENOMEM, "out of memory for the recompute scratch");
}
