/* Backward pass of a chunk, the mirror of forward.c. w->dres carries the gradient
 * of the residual stream from the head (or the next stage) down to the input.
 *
 * One code path serves three uses: full backward (weight gradients computed as
 * we go), and the zero-bubble split into I (input gradients only, the gradients
 * of each op's output kept in a stash) and W (weight gradients from the stash).
 * Each weight gradient is the same kernel call in every mode, so the split is
 * bitwise equal to the full backward.
 *
 * Input gradients that start a buffer are WRITTEN by the _set kernels instead of
 * accumulated into a zeroed buffer (bitwise the same, one memory pass less); only
 * the attention backend's dqkv and the head's dres still need a memset. Every
 * kernel call is timed into the step profile when it is on (rp_prof.h). */
#include <string.h>

#include "model_internal.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_prof.h"

static void zero(float *p, long n, rp_pool *pool) {
  RP_PROF(RP_PROF_BWD_SCRATCH, rp_zero(p, n, pool));
}

static void copy(float *dst, const float *src, long n) {
  if (dst != src) RP_PROF(RP_PROF_BWD_SCRATCH, memcpy(dst, src, (size_t)n * sizeof *dst));
}

/* Weight gradients of one layer from its output gradients d. */
static void layer_weight_grads(const rp_layer_params *p, rp_layer_params *g,
                               const rp_layer_acts *l, const float *in, const rp_layer_douts *d,
                               int N, int C, int Ct, const rp_exec *x) {
  rp_pool *pool = x->pool;
  RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward(NULL, g->fcprojw, g->fcprojb, d->dres3,
                                                 l->fch_gelu, p->fcprojw, N, 4 * Ct, C, x));
  RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward(NULL, g->fcw, g->fcb, d->dfch, l->ln2, p->fcw,
                                                 N, C, 4 * Ct, x));
  RP_PROF(RP_PROF_BWD_LAYERNORM,
          rp_layernorm_backward(NULL, g->ln2w, g->ln2b, d->dln2, l->res2, p->ln2w, l->ln2_mean,
                                l->ln2_rstd, N, C, pool));
  RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward(NULL, g->attprojw, g->attprojb, d->dres2,
                                                 l->atty, p->attprojw, N, Ct, C, x));
  RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward(NULL, g->qkvw, g->qkvb, d->dqkv, l->ln1,
                                                 p->qkvw, N, C, 3 * Ct, x));
  RP_PROF(RP_PROF_BWD_LAYERNORM,
          rp_layernorm_backward(NULL, g->ln1w, g->ln1b, d->dln1, in, p->ln1w, l->ln1_mean,
                                l->ln1_rstd, N, C, pool));
}

/* Input-gradient pass of one layer. With g == NULL (split mode) weight gradients
 * are skipped and d points into the stash, whose dres3/dres2 get copies of the
 * residual gradient; with g set, d points at the shared scratch. Under tensor
 * parallelism the column-parallel layers' input gradients (dln2, dln1) are
 * partial sums over this rank's features: the f operator's all-reduce
 * completes them before the LayerNorm (the stash keeps the reduced value). */
static void layer_input_grads(const rp_chunk *m, const rp_layer_params *p, rp_layer_params *g,
                              const rp_layer_acts *l, const float *in, rp_grad_ws *w,
                              const rp_layer_douts *d, const rp_attn_batch *ab,
                              const rp_exec *x) {
  int N = ab->B * ab->T, C = m->cfg.C, Ct = rp_tp_width(m);
  long NC = (long)N * C, NCt = (long)N * Ct;
  rp_pool *pool = x->pool;
  rp_layer_params none = {0};
  if (!g) g = &none;
  /* MLP branch: dres is d(res3); the residual passes it through to res2. */
  copy(d->dres3, w->dres, NC);
  /* c_proj's backward and the GELU's in one job; c_fc's bias gradient is
   * taken in the GELU pass that writes dfch */
  rp_mm_backward_gelu(d->dfch, w->dfch_gelu, g->fcb, g->fcprojw, g->fcprojb, w->dres,
                      l->fch_gelu, l->fch, p->fcprojw, N, 4 * Ct, C, x);
  RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward_set(d->dln2, g->fcw, NULL, d->dfch, l->ln2,
                                                     p->fcw, N, C, 4 * Ct, x));
  rp_tp_all_reduce(m, x, d->dln2, NC, RP_TP_SUM);
  RP_PROF(RP_PROF_BWD_LAYERNORM,
          rp_layernorm_backward(w->dres, g->ln2w, g->ln2b, d->dln2, l->res2, p->ln2w,
                                l->ln2_mean, l->ln2_rstd, N, C, pool));
  /* Attention branch: dres is now d(res2). */
  copy(d->dres2, w->dres, NC);
  RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward_set(w->dbuf, g->attprojw, g->attprojb,
                                                     w->dres, l->atty, p->attprojw, N, Ct, C, x));
  zero(d->dqkv, 3 * NCt, pool);  /* the backend's contract is +=, like every kernel's */
  rp_attn_run_backward(x, ab, d->dqkv, w->dbuf, l);
  RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward_set(d->dln1, g->qkvw, g->qkvb, d->dqkv,
                                                     l->ln1, p->qkvw, N, C, 3 * Ct, x));
  rp_tp_all_reduce(m, x, d->dln1, NC, RP_TP_SUM);
  RP_PROF(RP_PROF_BWD_LAYERNORM,
          rp_layernorm_backward(w->dres, g->ln1w, g->ln1b, d->dln1, in, p->ln1w, l->ln1_mean,
                                l->ln1_rstd, N, C, pool));
}

static rp_layer_douts scratch_douts(rp_grad_ws *w) {
  return (rp_layer_douts){.dres3 = w->dres, .dfch = w->dfch, .dln2 = w->dln, .dres2 = w->dres,
                          .dqkv = w->dqkv, .dln1 = w->dln};
}

/* Head: dlogits in place; with split, dlnf goes to the stash and weight
 * gradients wait for W. */
/* The head's backward from dlogits (in a->logits): the tied LM head's matmul
 * into dlnf (written) and wte's gradient, plus dlnf_extra (may be NULL: the
 * gradient w.r.t. lnf of a second head that reads it, PPO's value head), then
 * the final LayerNorm into w->dres. split: W's share is left for later. */
static void head_backward_dlogits(rp_chunk *m, rp_acts *a, rp_grad_ws *w, float *dlnf,
                                  const float *dlnf_extra, int split, const rp_exec *x) {
  int N = a->B * a->T, C = m->cfg.C;
  if (m->sp) {  /* one stage, no second head, no I/W split (the trainer checks) */
    RP_CHECK(!split && !dlnf_extra);
    rp_sp_head_backward(m, a, w, x);
    return;
  }
  RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward_set(dlnf, split ? NULL : m->g.wte, NULL,
                                                     a->logits, a->lnf, m->p.wte, N, C,
                                                     rp_tp_vocab(m), x));
  rp_tp_all_reduce(m, x, dlnf, (long)N * C, RP_TP_SUM);  /* f of the vocabulary-parallel head */
  if (dlnf_extra) rp_add_inplace(dlnf, dlnf_extra, (long)N * C, x->pool);
  zero(w->dres, (long)N * C, x->pool);
  RP_PROF(RP_PROF_BWD_LAYERNORM,
          rp_layernorm_backward(w->dres, split ? NULL : m->g.lnfw, split ? NULL : m->g.lnfb,
                                dlnf, a->output, m->p.lnfw, a->lnf_mean, a->lnf_rstd, N, C,
                                x->pool));
}

/* Language-model loss: cross-entropy's dlogits over the logits, then the rest. */
static void head_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, float *dlnf, int split,
                          float dscale, const rp_exec *x) {
  RP_CHECK(m->spec.has_head);
  int N = a->B * a->T;
  float *dlogits = a->logits;  /* logits are not needed after this point */
  if (m->tp > 1)
    RP_PROF(RP_PROF_BWD_XENT, rp_tp_xent_backward(m, a, dscale, x));
  else  /* the losses too (the forward's bits): rp_chunk_forward_logits leaves them to us */
    RP_PROF(RP_PROF_BWD_XENT, rp_xent_backward(dlogits, a->losses, a->logits, a->targets, dscale,
                                               N, m->cfg.V, m->cfg.Vp, x->pool));
  head_backward_dlogits(m, a, w, dlnf, NULL, split, x);
}

/* wte (this rank's vocabulary rows under tp) and wpe gradients from dres. */
static void embed_weight_grads(rp_chunk *m, const rp_acts *a, const float *dres,
                               const rp_exec *x) {
  if (m->sp)
    RP_PROF(RP_PROF_BWD_EMBED, rp_sp_embed_backward(m, dres, a, x));
  else if (m->tp > 1)
    RP_PROF(RP_PROF_BWD_EMBED, rp_tp_embed_backward(m, dres, a));
  else
    RP_PROF(RP_PROF_BWD_EMBED, rp_embed_backward(m->g.wte, m->g.wpe, dres, a->tokens, a->pos,
                                                 a->B * a->T, m->cfg.C, x->pool));
}

static void grads_ready(const rp_exec *x, const rp_chunk *m, int unit) {
  if (x->grads_ready) x->grads_ready(x->hook_ctx, m, unit);
}

void rp_chunk_head_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, float dscale,
                            const rp_exec *x) {
  head_backward(m, a, w, w->dln, 0, dscale, x);
  grads_ready(x, m, RP_UNIT_HEAD);
}

void rp_chunk_head_backward_from_dlogits(rp_chunk *m, rp_acts *a, rp_grad_ws *w,
                                         const float *dlnf_extra, const rp_exec *x) {
  RP_CHECK(m->spec.has_head);
  head_backward_dlogits(m, a, w, w->dln, dlnf_extra, 0, x);
  grads_ready(x, m, RP_UNIT_HEAD);
}

void rp_chunk_layers_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, const rp_exec *x) {
  rp_layer_douts d = scratch_douts(w);
  for (int i = m->spec.num_layers - 1; i >= 0; i--) {
    rp_layer_recompute(m, a, i, x);
    if (m->sp)
      rp_sp_layer_backward(m, &m->p.layer[i], &m->g.layer[i], &a->layer[i], rp_layer_input(a, i),
                           w, rp_acts_attn_batch(m, a, x), x);
    else
      layer_input_grads(m, &m->p.layer[i], &m->g.layer[i], &a->layer[i], rp_layer_input(a, i), w,
                        &d, rp_acts_attn_batch(m, a, x), x);
    grads_ready(x, m, i);
  }
}

void rp_chunk_embed_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, const rp_exec *x) {
  RP_CHECK(m->spec.has_embed);
  embed_weight_grads(m, a, w->dres, x);
  grads_ready(x, m, RP_UNIT_EMBED);
}

void rp_chunk_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, float dscale, const rp_exec *x) {
  if (m->spec.has_head) rp_chunk_head_backward(m, a, w, dscale, x);
  rp_chunk_layers_backward(m, a, w, x);
  if (m->spec.has_embed) rp_chunk_embed_backward(m, a, w, x);
}

void rp_chunk_backward_input(rp_chunk *m, rp_acts *a, rp_grad_ws *w, rp_wstash *s, float dscale,
                             const rp_exec *x) {
  RP_CHECK(!m->sp);  /* sequence parallelism runs one stage: no I/W split */
  if (m->spec.has_head) head_backward(m, a, w, s->dlnf, 1, dscale, x);
  for (int i = m->spec.num_layers - 1; i >= 0; i--) {
    rp_layer_recompute(m, a, i, x);  /* as the full backward does */
    layer_input_grads(m, &m->p.layer[i], NULL, &a->layer[i], rp_layer_input(a, i), w,
                      &s->layer[i], rp_acts_attn_batch(m, a, x), x);
  }
  if (m->spec.has_embed) copy(s->dembed, w->dres, (long)a->B * a->T * m->cfg.C);
}

void rp_chunk_backward_weight(rp_chunk *m, rp_acts *a, const rp_wstash *s,
                              const rp_exec *x) {
  int N = a->B * a->T, C = m->cfg.C;
  /* Same order as the full backward so that accumulation order matches. */
  if (m->spec.has_head) {
    RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward(NULL, m->g.wte, NULL, a->logits, a->lnf,
                                                   m->p.wte, N, C, rp_tp_vocab(m), x));
    RP_PROF(RP_PROF_BWD_LAYERNORM,
            rp_layernorm_backward(NULL, m->g.lnfw, m->g.lnfb, s->dlnf, a->output, m->p.lnfw,
                                  a->lnf_mean, a->lnf_rstd, N, C, x->pool));
    grads_ready(x, m, RP_UNIT_HEAD);
  }
  for (int i = m->spec.num_layers - 1; i >= 0; i--) {
    /* under recomputation W rebuilds what it reads (I's copy is overwritten
     * by the layers after it in the shared scratch): a second recompute */
    rp_layer_recompute_for_weights(m, a, i, x);
    layer_weight_grads(&m->p.layer[i], &m->g.layer[i], &a->layer[i], rp_layer_input(a, i),
                       &s->layer[i], N, C, rp_tp_width(m), x);
    grads_ready(x, m, i);
  }
  if (m->spec.has_embed) {
    embed_weight_grads(m, a, s->dembed, x);
    grads_ready(x, m, RP_UNIT_EMBED);
  }
}
