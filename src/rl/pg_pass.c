/* The optimisation pass shared by GRPO and PPO. For each micro-batch of
 * rollout sequences: forward, then turn every logits row into the gradient of
 * the aggregated loss w.r.t. that row (rows that predict no completion token
 * get 0), then the model's backward from those dlogits. The objective per
 * completion token k of sequence q is
 *   seq_w[q] * (clipped pg(logp_k, old_k, adv_k) + beta k3(logp_k, ref_k)
 *               + vf_coef * clipped value loss (PPO))
 * with seq_w the loss aggregation's weight (global counts), so summing the
 * gradients over ranks gives the gradient of the global objective. */
#include <string.h>

#include "rl_internal.h"

void rp_rl_policy_pass(rp_rl_state *s, int record_old, const rp_pg_params *pg,
                       rp_pass_stats *ps) {
  rp_rollout *r = &s->ro;
  const int V = s->cfg.V, Vp = s->cfg.Vp, C = s->cfg.C, RT = r->T;
  const float tau = s->o.temperature;
  for (int first = 0; first < r->nseq; first += s->micro) {
    int nb = RP_MIN(s->micro, r->nseq - first);
    rp_rl_forward_seqs(s, &s->model, r, first, nb, 0);
    rp_acts *a = &s->acts;
    const int T = a->T, N = nb * T;
    if (s->has_vh) memset(s->dvalue, 0, (size_t)N * sizeof(float));
    for (int b = 0; b < nb; b++) {
      int q = first + b, lo = r->plen[q] - 1, hi = lo + r->clen[q];
      const int32_t *tok = r->tokens + (size_t)q * RT;
      double w = r->seq_w[q];
      for (int t = 0; t < T; t++) {
        int row = b * T + t;
        float *z = a->logits + (size_t)row * Vp;
        if (t < lo || t >= hi) {
          memset(z, 0, (size_t)Vp * sizeof(float));
          continue;
        }
        size_t k = (size_t)q * RT + t;
        int target = tok[t + 1];
        float logp = rp_logprob_row(z, V, target, tau);
        if (record_old) r->old_logp[k] = logp;
        rp_pg_token tk;
        rp_pg_token_loss(logp, r->old_logp[k], r->ref_logp[k], r->adv[k], pg, &tk);
        ps->pg_loss += w * tk.loss;
        ps->tokens += 1;
        ps->clipped += tk.clipped;
        ps->kl += tk.kl;
        ps->kl_old += rp_kl_k3(logp, r->old_logp[k]);
        ps->ratio += tk.ratio;
        if (s->has_vh) {
          float v;
          double dv;
          int vclip;
          rp_value_head_forward(&s->vh, a->lnf + (size_t)row * C, 1, &v);
          double vl = rp_value_loss(v, r->value[k], r->ret[k], s->o.vf_clip, &dv, &vclip);
          ps->v_loss += w * vl;
          ps->v_clipped += vclip;
          s->dvalue[row] = (float)(w * s->o.vf_coef * dv);
        }
        rp_dlogits_from_dlogp(z, V, Vp, target, tau, (float)(w * tk.dlogp));
      }
    }
    if (s->has_vh) rp_value_head_backward(&s->vh, a->lnf, s->dvalue, N, s->dlnf);
    rp_chunk_head_backward_from_dlogits(&s->model, a, &s->ws, s->has_vh ? s->dlnf : NULL,
                                        &s->exec);
    rp_chunk_layers_backward(&s->model, a, &s->ws, &s->exec);
    rp_chunk_embed_backward(&s->model, a, &s->ws, &s->exec);
  }
}
