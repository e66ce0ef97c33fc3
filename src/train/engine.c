/* The engine's step API: one object (rp_trainer) under pre-training, SFT, GRPO
 * and PPO. A step is
 *
 *   rp_engine_begin_step            zero gradients, arm the data-parallel buckets
 *   rp_engine_bind + forward_backward, once per micro-batch, with a loss head
 *                                   of the caller's choice (the LM loss, a
 *                                   policy-gradient or value loss)
 *   rp_engine_reduce                finish the bucketed reductions (all-reduce
 *                                   or ZeRO-1 reduce-scatter): the global norm
 *   rp_engine_apply                 clip, AdamW on what this rank owns (ZeRO-1:
 *                                   its shard, then the all-gather), bf16 copies
 *
 * Pre-training's rp_trainer_step (step.c) is these calls around the pipeline
 * executor or the local micro-batch loop; src/rl calls them around rollouts. */
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_sgemm.h"
#include "ringpipe/rp_train.h"
#include "ringpipe/rp_wait.h"
#include "train_internal.h"

/* The weights hold still from here until the step's reduction: the own GEMM
 * may keep their packs (rp_sgemm.h), invalidated first because the last
 * update, a rollback or a load may have changed any weight. */
static void weights_hold(rp_trainer *t) {
  if (!t->wcache) return;
  rp_sgemm_wcache_invalidate(t->wcache);
  rp_pool_set_wcache(t->pool, t->wcache);
}

void rp_engine_weights_may_change(rp_trainer *t) { rp_pool_set_wcache(t->pool, NULL); }

void rp_engine_begin_step(rp_trainer *t, int microbatches) {
  weights_hold(t);
  for (int c = 0; c < t->nchunks; c++)
    RP_PROF(RP_PROF_OPT_ZERO_GRADS,
            rp_zero_cold(t->chunks[c].grads, (long)t->chunks[c].num_params, t->pool));
  rp_dp_set_microbatches(t->dp, microbatches);
  rp_dp_begin_step(t->dp);
}

rp_acts *rp_engine_bind(rp_trainer *t, const rp_chunk *m, int B, int T) {
  RP_CHECK(t->grid.pp == 1 && B >= 1 && B <= t->o.batch && T >= 1 && T <= t->T_local);
  rp_acts_bind(&t->acts, t->layer_views, m, t->exec.attn, t->acts_mem, B, T);
  return &t->acts;
}

double rp_engine_forward(rp_trainer *t, const rp_chunk *m, rp_acts *a) {
  return rp_chunk_forward(m, a, NULL, &t->exec);
}

double rp_engine_forward_backward(rp_trainer *t, rp_acts *a, const rp_loss_head *head,
                                  float dscale) {
  rp_chunk *m = &t->chunks[0];
  if (!head && rp_chunk_loss_in_backward(m)) {
    /* the cross-entropy once, in the backward: the same loss and gradients */
    rp_chunk_forward_logits(m, a, &t->exec);
    rp_chunk_backward(m, a, &t->ws, dscale, &t->exec);
    return rp_chunk_loss_sum(a, NULL);
  }
  double loss = rp_chunk_forward(m, a, NULL, &t->exec);
  if (!head) {
    rp_chunk_backward(m, a, &t->ws, dscale, &t->exec);
    return loss;
  }
  int use_dlnf = 0;
  long NC = (long)a->B * a->T * t->cfg.C;
  rp_zero(t->dlnf_extra, NC, t->pool);
  loss = head->dlogits(head->ctx, a, t->dlnf_extra, &use_dlnf);
  rp_chunk_head_backward_from_dlogits(m, a, &t->ws, use_dlnf ? t->dlnf_extra : NULL, &t->exec);
  rp_chunk_layers_backward(m, a, &t->ws, &t->exec);
  rp_chunk_embed_backward(m, a, &t->ws, &t->exec);
  return loss;
}

rp_status rp_engine_reduce(rp_trainer *t, double *sumsq) {
  rp_engine_weights_may_change(t);
  /* sums over replicas (and the tied wte between first and last stage) */
  rp_status s;
  RP_PROF(RP_PROF_COMM, s = rp_dp_finish(t->dp));
  RP_TRY(s);
  *sumsq = rp_grad_sumsq(t);
  return RP_OK;
}

void rp_engine_apply(rp_trainer *t, float lr, float grad_scale) {
  rp_engine_weights_may_change(t);
  RP_PROF(RP_PROF_OPT_ADAMW, rp_optimizer_step(t, lr, grad_scale));
  rp_engine_finish_update(t);
}

void rp_engine_finish_update(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  t->step++;
  /* the copies are fresh when the update itself wrote them (rp_dp_adamw) */
  if (t->bf16.n && !t->bf16_copies_fresh)
    RP_PROF(RP_PROF_OPT_BF16_COPY,
            rp_bf16_ctx_refresh(&t->bf16, o->bf16_stochastic,
                                (uint64_t)o->seed * 1000003u + t->step, t->pool));
  t->bf16_copies_fresh = 0;
}

float rp_engine_clip_scale(const rp_trainer *t, double norm) {
  return t->o.grad_clip > 0 && norm > t->o.grad_clip ? (float)(t->o.grad_clip / norm) : 1.0f;
}
