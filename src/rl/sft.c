/* Supervised fine-tuning on prompt/answer pairs: the ordinary next-token loss
 * with the prompt masked (targets = -1), so the model learns to answer, not to
 * reproduce problems. The loss is the mean over every answer token of the
 * global batch (the stop byte included: stopping is part of the answer). */
#include <stdio.h>
#include <string.h>

#include "rl_internal.h"

rp_status rp_sft_step(rp_rl_state *s, rp_rl_report *rep) {
  const rp_rl_opts *o = &s->o;
  rp_rollout *r = &s->ro;
  double t0 = rp_now();
  int n = 0;
  for (int i = s->grid.dp_rank; i < o->batch; i += s->grid.dp, n++) {
    rp_task_example ex;
    rp_task_example_get(&s->task, (uint64_t)o->seed, RP_SPLIT_TRAIN, s->cursor + (uint64_t)i,
                        &ex);
    int plen = (int)strlen(ex.prompt), alen = (int)strlen(ex.answer);
    int32_t *tok = r->tokens + (size_t)n * r->T;
    for (int t = 0; t < plen; t++) tok[t] = (unsigned char)ex.prompt[t];
    for (int t = 0; t < alen; t++) tok[plen + t] = (unsigned char)ex.answer[t];
    r->plen[n] = plen;
    r->clen[n] = alen;
  }
  r->nseq = n;
  s->cursor += (uint64_t)o->batch;
  double tot[2] = {0, 0}; /* answer tokens, loss sum */
  for (int i = 0; i < n; i++) tot[0] += r->clen[i];
  rp_rl_allreduce(s, tot, 1);
  float dscale = tot[0] > 0 ? (float)(1.0 / tot[0]) : 0.0f;
  rp_rl_zero_grads(s, rp_rl_microbatches(s, n));
  for (int first = 0; first < n; first += s->micro) {
    int nb = RP_MIN(s->micro, n - first);
    rp_acts *a = rp_rl_bind_seqs(s, s->model, r, first, nb, 1);
    tot[1] += rp_engine_forward_backward(&s->eng, a, NULL, dscale);  /* the LM loss */
  }
  rp_rl_allreduce(s, tot + 1, 1);
  float lr = rp_rl_lr(s);
  double norm;
  RP_TRY(rp_rl_optimizer_step(s, lr, &norm));
  s->step++;
  double loss = tot[0] > 0 ? tot[1] / tot[0] : 0.0, dt = rp_now() - t0;
  snprintf(rep->json, sizeof rep->json,
           "\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6f,\"answer_tokens\":%.0f,\"seconds\":%.4f",
           loss, lr, norm, tot[0], dt);
  snprintf(rep->line, sizeof rep->line, "loss %.4f | lr %.2e | norm %.3f | %.0f ms", loss, lr,
           norm, dt * 1e3);
  return RP_OK;
}
