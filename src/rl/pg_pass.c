/* The optimisation pass shared by GRPO and PPO: a loss head for the training
 * engine. For each micro-batch of rollout sequences the engine runs the
 * forward, the head turns every logits row into the gradient of the
 * aggregated loss w.r.t. that row (rows that predict no completion token get
 * 0), and the engine runs the model's backward from those dlogits (with the
 * grads-ready hook, so data-parallel buckets overlap it). The objective per
 * completion token k of sequence q is
 *   seq_w[q] * (clipped pg(logp_k, old_k, adv_k) + beta k3(logp_k, ref_k)
 *               + vf_coef * clipped value loss (PPO))
 * with seq_w the loss aggregation's weight (global counts), so summing the
 * gradients over ranks gives the gradient of the global objective. */
#include <string.h>

#include "rl_internal.h"

/* The loss head of one micro-batch: sequences first..first+nb of the rollout. */
typedef struct {
  rp_rl_state *s;
  int first, nb, record_old;
  const rp_pg_params *pg;
  rp_pass_stats *ps;
} pg_head;

/* Every logits row becomes d loss / d logits of its completion token (rows
 * that predict none get 0); PPO's value loss adds d loss / d lnf. */
static double pg_dlogits(void *vctx, rp_acts *a, float *dlnf, int *use_dlnf) {
  pg_head *h = vctx;
  rp_rl_state *s = h->s;
  rp_rollout *r = &s->ro;
  rp_pass_stats *ps = h->ps;
  const int V = s->cfg.V, Vp = s->cfg.Vp, C = s->cfg.C, RT = r->T, T = a->T, N = h->nb * T;
  const float tau = s->o.temperature;
  double before = ps->pg_loss + ps->v_loss;
  if (s->has_vh) memset(s->dvalue, 0, (size_t)N * sizeof(float));
  for (int b = 0; b < h->nb; b++) {
    int q = h->first + b, lo = r->plen[q] - 1, hi = lo + r->clen[q];
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
      if (h->record_old) r->old_logp[k] = logp;
      rp_pg_token tk;
      rp_pg_token_loss(logp, r->old_logp[k], r->ref_logp[k], r->adv[k], h->pg, &tk);
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
  if (s->has_vh) {
    rp_value_head_backward(&s->vh, a->lnf, s->dvalue, N, dlnf);
    *use_dlnf = 1;
  }
  return ps->pg_loss + ps->v_loss - before;
}

void rp_rl_policy_pass(rp_rl_state *s, int record_old, const rp_pg_params *pg,
                       rp_pass_stats *ps) {
  rp_rollout *r = &s->ro;
  for (int first = 0; first < r->nseq; first += s->micro) {
    int nb = RP_MIN(s->micro, r->nseq - first);
    rp_acts *a = rp_rl_bind_seqs(s, s->model, r, first, nb, 0);
    pg_head h = {.s = s, .first = first, .nb = nb, .record_old = record_old, .pg = pg, .ps = ps};
    rp_loss_head head = {.dlogits = pg_dlogits, .ctx = &h};
    rp_engine_forward_backward(&s->eng, a, &head, 0.0f);
  }
}
