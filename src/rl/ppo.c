/* PPO for comparison with GRPO (InstructGPT-style, per token): a value head
 * on the final hidden state, rewards per completion token of
 *   -kl_coef (logp_old - logp_ref)     (+ the task reward on the last token),
 * GAE advantages and returns, optionally whitened over the batch, then mu
 * passes of the clipped policy objective plus vf_coef times the clipped value
 * loss. Old log-probs and values come from a forward before any update; it
 * runs the same micro-batches as the first pass, so that pass sees ratio 1. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rl_internal.h"

/* Old log-probs, values, and reference log-probs of every completion token. */
static void prepass(rp_rl_state *s) {
  rp_rollout *r = &s->ro;
  const int C = s->cfg.C;
  for (int first = 0; first < r->nseq; first += s->micro) {
    int nb = RP_MIN(s->micro, r->nseq - first);
    rp_rl_forward_seqs(s, s->model, r, first, nb, 0);
    rp_rl_gather_logp(s, r, first, nb, r->old_logp);
    int T = s->acts->T;
    for (int b = 0; b < nb; b++) {
      int q = first + b;
      for (int j = 0; j < r->clen[q]; j++) {
        int t = r->plen[q] - 1 + j;
        rp_value_head_forward(&s->vh, s->acts->lnf + ((size_t)b * T + t) * C, 1,
                              r->value + (size_t)q * r->T + t);
      }
    }
    if (s->has_ref) {
      rp_rl_forward_seqs(s, &s->ref, r, first, nb, 0);
      rp_rl_gather_logp(s, r, first, nb, r->ref_logp);
    }
  }
}

rp_status rp_ppo_step(rp_rl_state *s, rp_rl_report *rep) {
  const rp_rl_opts *o = &s->o;
  rp_rollout *r = &s->ro;
  const int RT = r->T;
  double t0 = rp_now();
  int added;
  r->nseq = 0;
  RP_TRY(rp_rl_rollout(s, s->cursor, o->prompts, o->group, &added));
  s->cursor += (uint64_t)o->prompts;
  double t_roll = rp_now() - t0;
  prepass(s);
  double gap[2];
  rp_rl_logp_gap(r, gap);
  rp_rl_allreduce(s, gap, 2);

  /* st: reward sum, sum of squares, sequences, completion tokens, kl sum,
   * advantage sum, sum of squares, value sum */
  double st[8] = {0};
  float rew[4096];
  for (int q = 0; q < r->nseq; q++) {
    int n = r->clen[q];
    size_t k0 = (size_t)q * RT + r->plen[q] - 1;
    RP_CHECK(n <= 4096);
    for (int j = 0; j < n; j++) {
      double kl = s->has_ref ? r->old_logp[k0 + j] - r->ref_logp[k0 + j] : 0.0;
      rew[j] = (float)(-o->kl_coef * kl);
      if (s->has_ref) st[4] += rp_kl_k3(r->old_logp[k0 + j], r->ref_logp[k0 + j]);
      st[7] += r->value[k0 + j];
    }
    rew[n - 1] += r->reward[q];
    rp_gae(rew, r->value + k0, n, o->gamma, o->lam, r->adv + k0, r->ret + k0);
    for (int j = 0; j < n; j++) {
      st[5] += r->adv[k0 + j];
      st[6] += (double)r->adv[k0 + j] * r->adv[k0 + j];
    }
    st[0] += r->reward[q];
    st[1] += (double)r->reward[q] * r->reward[q];
    st[2] += 1;
    st[3] += n;
  }
  rp_rl_allreduce(s, st, 8);
  if (o->whiten && st[3] > 1) {
    double mean = st[5] / st[3], var = st[6] / st[3] - mean * mean;
    double inv = 1.0 / (sqrt(fmax(var, 0.0)) + 1e-8);
    for (int q = 0; q < r->nseq; q++) {
      size_t k0 = (size_t)q * RT + r->plen[q] - 1;
      for (int j = 0; j < r->clen[q]; j++) r->adv[k0 + j] = (float)((r->adv[k0 + j] - mean) * inv);
    }
  }
  for (int q = 0; q < r->nseq; q++)
    r->seq_w[q] = (float)rp_loss_agg_weight(s->agg, r->clen[q], (long)st[2], (long)st[3],
                                            o->max_new);

  rp_pg_params pg = {.clip_low = o->clip_low, .clip_high = o->clip_high, .beta = 0.0f};
  float lr = rp_rl_lr(s);
  double norm = 0, first_pass[8] = {0}, all[3] = {0}, last[2] = {0};
  for (int pass = 0; pass < o->mu && st[2] > 0; pass++) {
    rp_pass_stats ps = {0};
    rp_rl_zero_grads(s, rp_rl_microbatches(s, r->nseq));
    rp_rl_policy_pass(s, 0, &pg, &ps);
    RP_TRY(rp_rl_optimizer_step(s, lr, &norm));
    if (pass == 0) {
      double v[8] = {ps.pg_loss, ps.v_loss, ps.tokens, ps.ratio, 0, 0, 0, 0};
      memcpy(first_pass, v, sizeof v);
    }
    all[0] += ps.tokens;
    all[1] += ps.clipped;
    all[2] += ps.v_clipped;
    last[0] = ps.kl_old;
    last[1] = ps.tokens;
  }
  s->step++;
  rp_rl_allreduce(s, first_pass, 8);
  rp_rl_allreduce(s, all, 3);
  rp_rl_allreduce(s, last, 2);
  double n = st[2] > 0 ? st[2] : 1, mean = st[0] / n;
  double rstd = sqrt(fmax(0.0, st[1] / n - mean * mean));
  double ntok = st[3] > 0 ? st[3] : 1, len = st[3] / n;
  double clipf = all[0] > 0 ? all[1] / all[0] : 0, vclipf = all[0] > 0 ? all[2] / all[0] : 0;
  double kl = st[4] / ntok, kl_old = last[1] > 0 ? last[0] / last[1] : 0;
  double ratio = first_pass[2] > 0 ? first_pass[3] / first_pass[2] : 0;
  double dt = rp_now() - t0;
  snprintf(rep->json, sizeof rep->json,
           "\"reward_mean\":%.6f,\"reward_std\":%.6f,\"resp_len\":%.4f,\"pg_loss\":%.6g,"
           "\"value_loss\":%.6g,\"value_mean\":%.6g,\"clip_frac\":%.6f,\"vf_clip_frac\":%.6f,"
           "\"ratio_first\":%.9f,\"kl_ref\":%.6g,\"kl_old\":%.6g,\"grad_norm\":%.6f,"
           "\"lr\":%.6g,\"sampler_logp_gap\":%.3g,\"seconds\":%.4f,\"rollout_seconds\":%.4f",
           mean, rstd, len, first_pass[0], first_pass[1], st[7] / ntok, clipf, vclipf, ratio, kl,
           kl_old, norm, lr, gap[1] > 0 ? gap[0] / gap[1] : 0.0, dt, t_roll);
  snprintf(rep->line, sizeof rep->line,
           "reward %.3f +- %.3f | clip %.3f | vloss %.4f | kl %.2e | len %.2f | norm %.3f | "
           "%.0f ms",
           mean, rstd, clipf, first_pass[1], kl, len, norm, dt * 1e3);
  return RP_OK;
}
