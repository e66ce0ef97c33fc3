/* Forward pass of a chunk: embeddings, a range of transformer layers, head + loss.
 *
 * Each layer (pre-LN GPT-2 block), with N = B*T rows:
 *   ln1  = LN(x)                         [N,C]
 *   qkv  = ln1 @ Wqkv^T + bqkv           [N,3C]
 *   atty = causal_attention(qkv)         [N,C]
 *   res2 = x + atty @ Wproj^T + bproj    [N,C]
 *   ln2  = LN(res2)                      [N,C]
 *   fch  = ln2 @ Wfc^T + bfc             [N,4C]
 *   res3 = res2 + GELU(fch) @ Wfcp^T + bfcp   [N,C]  (the layer output)
 * The projections add the residual inside the GEMM (rp_matmul_forward_residual),
 * so no projection outputs are stored and the residual costs no pass of its own.
 * Every kernel call is timed into the step profile when it is on (rp_prof.h). */
#include "model_internal.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_prof.h"

const float *rp_layer_input(const rp_acts *a, int i) {
  return i == 0 ? a->input : a->layer[i - 1].res3;
}

void rp_chunk_embed_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x) {
  RP_CHECK(m->spec.has_embed);
  if (m->sp) {
    RP_PROF(RP_PROF_FWD_EMBED, rp_sp_embed_forward(m, a, x));
    return;
  }
  if (m->tp > 1) {
    RP_PROF(RP_PROF_FWD_EMBED, rp_tp_embed_forward(m, a, x));
    return;
  }
  RP_PROF(RP_PROF_FWD_EMBED, rp_embed_forward(a->input, a->tokens, a->pos, m->p.wte, m->p.wpe,
                                              a->B * a->T, m->cfg.C, x->pool));
}

/* The micro-batch's attention problem, prepared once (on first use when the
 * caller did not): this rank's heads (NH/tp of width C/tp) and documents. */
const rp_attn_batch *rp_acts_attn_batch(const rp_chunk *m, rp_acts *a, const rp_exec *x) {
  if (!rp_attn_batch_ready(&a->attn, x->attn, a->B, a->T, a->docs) &&
      rp_attn_prepare(x->attn, &a->attn, a->B, a->T, rp_tp_width(m), rp_tp_heads(m), a->docs) !=
          RP_OK)
    rp_fatal("attention '%s' cannot run a %d x %d batch: %s", x->attn->name, a->B, a->T,
             rp_errmsg());
  return &a->attn;
}

/* The backend checked the batch in prepare: a failure now (out of memory, a
 * peer gone) cannot be agreed on mid-layer, so it is fatal. */
void rp_attn_run_forward(const rp_exec *x, const rp_attn_batch *ab, rp_layer_acts *l) {
  rp_status s;
  RP_PROF(RP_PROF_FWD_ATTENTION,
          s = x->attn->forward(x->attn, ab, l->atty, l->att_saved, l->qkv, x->pool));
  if (s != RP_OK) rp_fatal("attention '%s' forward failed: %s", x->attn->name, rp_errmsg());
}

void rp_attn_run_backward(const rp_exec *x, const rp_attn_batch *ab, float *dqkv,
                          const float *dout, const rp_layer_acts *l) {
  rp_status s;
  RP_PROF(RP_PROF_BWD_ATTENTION, s = x->attn->backward(x->attn, ab, dqkv, dout, l->qkv, l->atty,
                                                       l->att_saved, x->pool));
  if (s != RP_OK) rp_fatal("attention '%s' backward failed: %s", x->attn->name, rp_errmsg());
}

/* Under tensor parallelism (m->tp > 1) c_attn and c_fc produce this rank's
 * Ct = C/tp attention and 4 Ct hidden features, attention runs on its NH/tp
 * heads, and the c_proj outputs are summed over tp (g) before bias and
 * residual. At tp = 1, Ct = C and the calls are the one-rank kernels. */
static void layer_forward(const rp_chunk *m, const rp_layer_params *p, rp_layer_acts *l,
                          const float *in, const rp_attn_batch *ab, const rp_exec *x) {
  if (m->sp) {
    rp_sp_layer_forward(m, p, l, in, ab, x);
    return;
  }
  int N = ab->B * ab->T, C = m->cfg.C, Ct = rp_tp_width(m);
  rp_pool *pool = x->pool;
  RP_PROF(RP_PROF_FWD_LAYERNORM, rp_layernorm_forward(l->ln1, l->ln1_mean, l->ln1_rstd, in,
                                                      p->ln1w, p->ln1b, N, C, pool));
  RP_PROF(RP_PROF_FWD_MATMUL, rp_mm_forward(l->qkv, l->ln1, p->qkvw, p->qkvb, N, C, 3 * Ct, x));
  rp_attn_run_forward(x, ab, l);
  RP_PROF(RP_PROF_FWD_MATMUL, rp_tp_row_parallel_forward(m, l->res2, l->atty, p->attprojw,
                                                         p->attprojb, in, N, Ct, C, x));
  RP_PROF(RP_PROF_FWD_LAYERNORM, rp_layernorm_forward(l->ln2, l->ln2_mean, l->ln2_rstd,
                                                      l->res2, p->ln2w, p->ln2b, N, C, pool));
  rp_mm_forward_gelu(l->fch, l->fch_gelu, l->ln2, p->fcw, p->fcb, N, C, 4 * Ct, x);
  RP_PROF(RP_PROF_FWD_MATMUL, rp_tp_row_parallel_forward(m, l->res3, l->fch_gelu, p->fcprojw,
                                                         p->fcprojb, l->res2, N, 4 * Ct, C, x));
}

/* Backward of layer i is about to read its tensors: rebuild what the chunk's
 * recompute mode did not keep, with the same kernels on the same inputs. */
void rp_layer_recompute(const rp_chunk *m, rp_acts *a, int i, const rp_exec *x) {
  rp_layer_acts *l = &a->layer[i];
  int N = a->B * a->T, Ct = rp_tp_width(m), NHt = rp_tp_heads(m);
  if (m->recompute == RP_RECOMPUTE_FULL) {
    layer_forward(m, &m->p.layer[i], l, rp_layer_input(a, i), rp_acts_attn_batch(m, a, x), x);
  } else if (m->recompute == RP_RECOMPUTE_SELECTIVE) {
    size_t saved = x->attn->saved_floats(x->attn, a->B, a->T, Ct, NHt);
    if (rp_selective_drops_attention(saved, (size_t)N, (size_t)Ct))
      rp_attn_run_forward(x, rp_acts_attn_batch(m, a, x), l);
    RP_PROF(RP_PROF_FWD_GELU, rp_gelu_forward(l->fch_gelu, l->fch, 4L * N * Ct, x->pool));
  }
}

void rp_layer_recompute_for_weights(const rp_chunk *m, rp_acts *a, int i, const rp_exec *x) {
  rp_layer_acts *l = &a->layer[i];
  long n = 4L * a->B * a->T * rp_tp_width(m);
  if (m->recompute == RP_RECOMPUTE_FULL)
    layer_forward(m, &m->p.layer[i], l, rp_layer_input(a, i), rp_acts_attn_batch(m, a, x), x);
  else if (m->recompute == RP_RECOMPUTE_SELECTIVE)
    RP_PROF(RP_PROF_FWD_GELU, rp_gelu_forward(l->fch_gelu, l->fch, n, x->pool));
}

void rp_chunk_layers_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x) {
  const rp_attn_batch *ab = rp_acts_attn_batch(m, a, x);
  for (int i = 0; i < m->spec.num_layers; i++)
    layer_forward(m, &m->p.layer[i], &a->layer[i], rp_layer_input(a, i), ab, x);
}

/* The final LayerNorm and the LM head: a->logits, without the loss. */
static void head_logits(const rp_chunk *m, rp_acts *a, const rp_exec *x) {
  int N = a->B * a->T, C = m->cfg.C;
  if (m->sp) {
    rp_sp_head_logits(m, a, x);
  } else {
    RP_PROF(RP_PROF_FWD_LAYERNORM, rp_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd,
                                                        a->output, m->p.lnfw, m->p.lnfb, N, C,
                                                        x->pool));
    RP_PROF(RP_PROF_FWD_MATMUL, rp_mm_forward(a->logits, a->lnf, m->p.wte, NULL, N, C,
                                              rp_tp_vocab(m), x));
  }
}

double rp_chunk_loss_sum(const rp_acts *a, int *valid) {
  double sum = 0;
  int nvalid = 0;
  for (int i = 0; i < a->B * a->T; i++) {
    if (a->targets[i] < 0) continue;
    sum += a->losses[i];
    nvalid++;
  }
  if (valid) *valid = nvalid;
  return sum;
}

double rp_chunk_head_forward(const rp_chunk *m, rp_acts *a, int *valid, const rp_exec *x) {
  RP_CHECK(m->spec.has_head);
  int N = a->B * a->T;
  head_logits(m, a, x);
  if (m->tp > 1)  /* vocabulary-parallel: this rank's Vp/tp columns of every row */
    RP_PROF(RP_PROF_FWD_XENT, rp_tp_xent_forward(m, a, x));
  else
    RP_PROF(RP_PROF_FWD_XENT, rp_xent_forward(a->losses, a->logits, a->targets, N, m->cfg.V,
                                              m->cfg.Vp, x->pool));
  return rp_chunk_loss_sum(a, valid);
}

int rp_chunk_loss_in_backward(const rp_chunk *m) {
  return m->spec.has_head && m->tp == 1 && !m->sp;
}

void rp_chunk_forward_logits(const rp_chunk *m, rp_acts *a, const rp_exec *x) {
  RP_CHECK(rp_chunk_loss_in_backward(m));
  if (m->spec.has_embed) rp_chunk_embed_forward(m, a, x);
  rp_chunk_layers_forward(m, a, x);
  head_logits(m, a, x);
}

double rp_chunk_forward(const rp_chunk *m, rp_acts *a, int *valid, const rp_exec *x) {
  if (m->spec.has_embed) rp_chunk_embed_forward(m, a, x);
  rp_chunk_layers_forward(m, a, x);
  if (valid) *valid = 0;
  return m->spec.has_head ? rp_chunk_head_forward(m, a, valid, x) : 0.0;
}
