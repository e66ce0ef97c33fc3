/* Optimizer post-validation (Qi et al. 2024, "Zero Bubble Pipeline
 * Parallelism", section 4): the step no longer waits for the global gradient
 * norm (clipping) and the global loss (the NaN/Inf check) before it updates.
 * Every rank copies what the update changes -- its parameters and its part of
 * the AdamW state --, updates as if no clipping were needed (scale 1), and
 * only then learns the global values: when clipping applies or something is
 * not finite (the same decision on every rank: the values are global sums),
 * it restores the copy and takes the synchronous path's step. The accepted
 * step ran the same update with the same scale 1.0f, and the rolled-back one
 * is the synchronous step itself, so results are bitwise those of
 * --post-validate off. */
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_train.h"
#include "train_internal.h"

struct rp_post_validation {
  int n;
  float **params, **m, **v;
};

void rp_post_validation_free(rp_trainer *t) {
  struct rp_post_validation *pv = t->pv;
  if (!pv) return;
  for (int c = 0; c < pv->n; c++) {
    if (pv->params) rp_free(pv->params[c]);
    if (pv->m) rp_free(pv->m[c]);
    if (pv->v) rp_free(pv->v[c]);
  }
  free(pv->params), free(pv->m), free(pv->v);
  free(pv);
  t->pv = NULL;
}

static rp_status allocate(rp_trainer *t) {
  struct rp_post_validation *pv = calloc(1, sizeof *pv);
  if (!pv) return rp_err(RP_ENOMEM, "out of memory for --post-validate");
  t->pv = pv;
  pv->n = t->nchunks;
  pv->params = calloc((size_t)pv->n, sizeof *pv->params);
  pv->m = calloc((size_t)pv->n, sizeof *pv->m);
  pv->v = calloc((size_t)pv->n, sizeof *pv->v);
  if (!pv->params || !pv->m || !pv->v) return rp_err(RP_ENOMEM, "out of memory for --post-validate");
  for (int c = 0; c < pv->n; c++) {
    size_t np = t->chunks[c].num_params, no = rp_dp_owned(t->dp, c);
    pv->params[c] = rp_alloc(np * sizeof(float), RP_MEM_WORKSPACE);
    pv->m[c] = rp_alloc((no ? no : 1) * sizeof(float), RP_MEM_WORKSPACE);
    pv->v[c] = rp_alloc((no ? no : 1) * sizeof(float), RP_MEM_WORKSPACE);
    if (!pv->params[c] || !pv->m[c] || !pv->v[c])
      return rp_err(RP_ENOMEM, "out of memory for --post-validate's copy of the parameters and "
                    "optimizer state; run without it");
  }
  return RP_OK;
}

/* Copies (to = 0) or restores (to = 1) what an optimizer step changes. */
static void copy_state(rp_trainer *t, int restore) {
  struct rp_post_validation *pv = t->pv;
  for (int c = 0; c < pv->n; c++) {
    size_t np = t->chunks[c].num_params * sizeof(float);
    size_t no = rp_dp_owned(t->dp, c) * sizeof(float);
    float *p = t->chunks[c].params, *m = rp_dp_m(t->dp, c), *v = rp_dp_v(t->dp, c);
    memcpy(restore ? p : pv->params[c], restore ? pv->params[c] : p, np);
    memcpy(restore ? m : pv->m[c], restore ? pv->m[c] : m, no);
    memcpy(restore ? v : pv->v[c], restore ? pv->v[c] : v, no);
  }
  /* restored weights: the speculative step's bf16 copies are stale again */
  if (restore) t->bf16_copies_fresh = 0;
}

rp_status rp_post_validation_speculate(rp_trainer *t, float lr) {
  /* the copy is made once, agreed by every rank (a collective only then) */
  if (!t->pv) RP_TRY(rp_train_agree(t, allocate(t), "agreement on --post-validate's copy", NULL));
  copy_state(t, 0);
  rp_optimizer_step(t, lr, 1.0f);
  return RP_OK;
}

int rp_post_validation_check(rp_trainer *t, float lr, int finite, float scale) {
  int force = t->o.post_validate == RP_POSTVAL_ALWAYS_ROLLBACK;
  if (finite && scale == 1.0f && !force) return 0;
  copy_state(t, 1);
  t->rollbacks++;
  /* the synchronous path's step; a non-finite step takes none (the caller stops) */
  if (finite) rp_optimizer_step(t, lr, scale);
  return 1;
}
