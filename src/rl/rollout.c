/* Rollouts: problems from the train stream, G sampled completions each
 * through the KV cache, rewards from the task's checker. Every completion's
 * sampling stream is seeded by (run seed, problem index, g), so a rollout is
 * the same whatever the number of ranks and after a resume. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rl_internal.h"

rp_status rp_rl_rollout(rp_rl_state *s, uint64_t first, int np, int G, int *added) {
  const rp_rl_opts *o = &s->o;
  rp_rollout *r = &s->ro;
  int dp = s->grid.dp, nl = 0;
  for (int i = s->grid.dp_rank; i < np; i += dp) nl++;
  *added = 0;
  if (nl == 0) return RP_OK;
  if (r->nseq + nl * G > r->cap)
    return rp_err(RP_EINTERNAL, "rollout buffer of %d sequences is full", r->cap);
  int max_new = o->max_new, n = nl * G;
  rp_task_example *ex = malloc((size_t)nl * sizeof *ex);
  int32_t *ptok = malloc((size_t)nl * RP_TASK_MAXLEN * sizeof *ptok);
  const int32_t **pp = malloc((size_t)nl * sizeof *pp);
  int *plen = malloc((size_t)nl * sizeof *plen), *olen = malloc((size_t)n * sizeof *olen);
  int32_t *out = malloc((size_t)n * max_new * sizeof *out);
  float *lp = malloc((size_t)n * max_new * sizeof *lp);
  uint64_t *seeds = malloc((size_t)n * sizeof *seeds);
  char *text = malloc((size_t)max_new + 1);
  rp_status st = RP_OK;
  if (!ex || !ptok || !pp || !plen || !olen || !out || !lp || !seeds || !text)
    st = rp_err(RP_ENOMEM, "out of memory for a rollout of %d sequences", n);
  uint64_t base = rp_rl_mix((uint64_t)o->seed ^ 0x726f6c6c6f7574ULL); /* "rollout" */
  for (int i = s->grid.dp_rank, p = 0; st == RP_OK && i < np; i += dp, p++) {
    uint64_t idx = first + (uint64_t)i;
    rp_task_example_get(&s->task, (uint64_t)o->seed, RP_SPLIT_TRAIN, idx, &ex[p]);
    plen[p] = (int)strlen(ex[p].prompt);
    for (int t = 0; t < plen[p]; t++)
      ptok[(size_t)p * RP_TASK_MAXLEN + t] = (unsigned char)ex[p].prompt[t];
    pp[p] = ptok + (size_t)p * RP_TASK_MAXLEN;
    for (int g = 0; g < G; g++) seeds[p * G + g] = rp_rl_mix(base ^ rp_rl_mix(idx * 1031 + g));
  }
  rp_sample_params sp = {.temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p,
                         .max_new = max_new, .stop = RP_TASK_STOP};
  if (st == RP_OK) st = rp_sample_groups(&s->kv, &s->exec, pp, plen, nl, G, &sp, seeds, out, olen, lp);
  for (int j = 0; st == RP_OK && j < n; j++) {
    int p = j / G, q = r->nseq + j;
    int32_t *tok = r->tokens + (size_t)q * r->T;
    memcpy(tok, pp[p], (size_t)plen[p] * sizeof *tok);
    memcpy(tok + plen[p], out + (size_t)j * max_new, (size_t)olen[j] * sizeof *tok);
    memcpy(r->samp_logp + (size_t)q * r->T + plen[p] - 1, lp + (size_t)j * max_new,
           (size_t)olen[j] * sizeof *lp);
    r->plen[q] = plen[p];
    r->clen[q] = olen[j];
    for (int t = 0; t < olen[j]; t++) text[t] = (char)out[(size_t)j * max_new + t];
    r->reward[q] = rp_task_reward(&s->task, ex[p].prompt, text, olen[j]);
  }
  if (st == RP_OK) {
    r->nseq += n;
    *added = n;
  }
  free(ex), free(ptok), free(pp), free(plen), free(olen), free(out), free(lp), free(seeds);
  free(text);
  return st;
}

void rp_rl_gather_logp(rp_rl_state *s, const rp_rollout *r, int first, int n, float *dst) {
  const rp_acts *a = s->acts;
  int T = a->T, V = s->cfg.V, Vp = s->cfg.Vp;
  for (int b = 0; b < n; b++) {
    int q = first + b, plen = r->plen[q];
    const int32_t *tok = r->tokens + (size_t)q * r->T;
    for (int j = 0; j < r->clen[q]; j++) {
      int row = plen - 1 + j;
      dst[(size_t)q * r->T + row] = rp_logprob_row(a->logits + ((size_t)b * T + row) * Vp, V,
                                                   tok[plen + j], s->o.temperature);
    }
  }
}

void rp_rl_logp_gap(const rp_rollout *r, double *gap) {
  gap[0] = gap[1] = 0;
  for (int q = 0; q < r->nseq; q++) {
    size_t k0 = (size_t)q * r->T + r->plen[q] - 1;
    for (int j = 0; j < r->clen[q]; j++) {
      gap[0] += fabs((double)r->old_logp[k0 + j] - r->samp_logp[k0 + j]);
      gap[1] += 1;
    }
  }
}
