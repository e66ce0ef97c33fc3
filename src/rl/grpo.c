/* GRPO (DeepSeekMath) with the knobs later work added: Dr. GRPO's unscaled
 * advantages and length-free aggregation, DAPO's clip-higher and dynamic
 * sampling.
 *
 * One step: sample G completions for each of `prompts` problems, score them,
 * advantage of each completion = its reward against its group's (mean, std);
 * with dynamic sampling, groups whose rewards are all equal carry no signal
 * and are dropped (and more rounds may refill the batch); then mu passes over
 * the batch, one optimizer step each, with the first pass's log-probs kept as
 * the old policy's (so on that pass the ratio is exactly 1). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rl_internal.h"

static void move_seq(rp_rollout *r, int dst, int src) {
  if (dst == src) return;
  memcpy(r->tokens + (size_t)dst * r->T, r->tokens + (size_t)src * r->T,
         (size_t)r->T * sizeof *r->tokens);
  r->plen[dst] = r->plen[src];
  r->clen[dst] = r->clen[src];
  r->reward[dst] = r->reward[src];
  r->seq_adv[dst] = r->seq_adv[src];
  memcpy(r->samp_logp + (size_t)dst * r->T, r->samp_logp + (size_t)src * r->T,
         (size_t)r->T * sizeof *r->samp_logp);
}

/* Advantages of the groups appended since `start`; with `drop`, groups of
 * zero std are removed. st: reward sum, sum of squares, count, zero-std
 * groups, groups, completion tokens (first round only, the on-policy
 * picture). Returns groups kept. */
static int score_groups(rp_rl_state *s, int start, int G, int drop, double *st) {
  rp_rollout *r = &s->ro;
  int w = start, kept = 0;
  for (int g0 = start; g0 < r->nseq; g0 += G) {
    double std = rp_group_advantages(r->reward + g0, G, s->o.scale_std, s->o.adv_eps,
                                     r->seq_adv + g0);
    if (st) {
      for (int i = g0; i < g0 + G; i++) {
        st[0] += r->reward[i];
        st[1] += (double)r->reward[i] * r->reward[i];
        st[5] += r->clen[i];
      }
      st[2] += G;
      st[3] += std == 0.0;
      st[4] += 1;
    }
    if (drop && std == 0.0) continue;
    for (int i = 0; i < G; i++) move_seq(r, w + i, g0 + i);
    w += G;
    kept++;
  }
  r->nseq = w;
  return kept;
}

rp_status rp_grpo_step(rp_rl_state *s, rp_rl_report *rep) {
  const rp_rl_opts *o = &s->o;
  rp_rollout *r = &s->ro;
  const int G = o->group, P = o->prompts, RT = r->T;
  double t0 = rp_now();
  double st[6] = {0}, kept_g = 0;
  int rounds = o->dynamic_sampling ? o->ds_rounds : 1, used = 0;
  r->nseq = 0;
  for (int round = 0; round < rounds; round++) {
    int start = r->nseq, added;
    RP_TRY(rp_rl_rollout(s, s->cursor, P, G, &added));
    s->cursor += (uint64_t)P;
    used++;
    double k = score_groups(s, start, G, o->dynamic_sampling, round == 0 ? st : NULL);
    rp_rl_allreduce(s, &k, 1);
    kept_g += k;
    if (kept_g >= P) break;
  }
  rp_rl_allreduce(s, st, 6);
  double t_roll = rp_now() - t0;

  /* global counts for the aggregation weights; per-token advantages */
  double cnt[2] = {r->nseq, 0};
  for (int q = 0; q < r->nseq; q++) cnt[1] += r->clen[q];
  rp_rl_allreduce(s, cnt, 2);
  for (int q = 0; q < r->nseq; q++) {
    r->seq_w[q] = (float)rp_loss_agg_weight(s->agg, r->clen[q], (long)cnt[0], (long)cnt[1],
                                            o->max_new);
    for (int j = 0; j < r->clen[q]; j++) r->adv[(size_t)q * RT + r->plen[q] - 1 + j] = r->seq_adv[q];
  }
  if (s->has_ref)
    for (int first = 0; first < r->nseq; first += s->micro) {
      int nb = RP_MIN(s->micro, r->nseq - first);
      rp_rl_forward_seqs(s, &s->ref, r, first, nb, 0);
      rp_rl_gather_logp(s, r, first, nb, r->ref_logp);
    }

  rp_pg_params pg = {.clip_low = o->clip_low, .clip_high = o->clip_high,
                     .beta = s->has_ref ? o->beta : 0.0f};
  float lr = rp_rl_lr(s);
  double norm = 0, first_pass[8] = {0}, all[8] = {0};
  for (int pass = 0; pass < o->mu && cnt[0] > 0; pass++) {
    rp_pass_stats ps = {0};
    rp_rl_zero_grads(s, rp_rl_microbatches(s, r->nseq));
    rp_rl_policy_pass(s, pass == 0, &pg, &ps);
    RP_TRY(rp_rl_optimizer_step(s, lr, &norm));
    /* kl_old of the last pass: how far the passes moved from the rollout policy */
    double v[8] = {ps.pg_loss, ps.tokens, ps.clipped, ps.kl, ps.kl_old, ps.ratio, 0, 0};
    for (int i = 0; i < 6; i++) {
      if (pass == 0) first_pass[i] = v[i];
      all[i] += v[i];
    }
    all[6] = ps.kl_old;
    all[7] = ps.tokens;
  }
  s->step++;
  rp_rl_logp_gap(r, first_pass + 6);
  rp_rl_allreduce(s, first_pass, 8);
  rp_rl_allreduce(s, all, 8);
  double n = st[2] > 0 ? st[2] : 1, mean = st[0] / n;
  double rstd = sqrt(fmax(0.0, st[1] / n - mean * mean));
  double zfrac = st[4] > 0 ? st[3] / st[4] : 0, len = st[5] / n;
  double clipf = all[1] > 0 ? all[2] / all[1] : 0;
  double kl = first_pass[1] > 0 ? first_pass[3] / first_pass[1] : 0;
  double kl_old = all[7] > 0 ? all[6] / all[7] : 0;
  double gap = first_pass[7] > 0 ? first_pass[6] / first_pass[7] : 0;
  double dt = rp_now() - t0;
  snprintf(rep->json, sizeof rep->json,
           "\"reward_mean\":%.6f,\"reward_std\":%.6f,\"zero_std_frac\":%.4f,\"groups_kept\":%.0f,"
           "\"rounds\":%d,\"resp_len\":%.4f,\"loss\":%.6g,\"clip_frac\":%.6f,\"kl_ref\":%.6g,"
           "\"kl_old\":%.6g,\"ratio_first\":%.9f,\"grad_norm\":%.6f,\"lr\":%.6g,"
           "\"sampler_logp_gap\":%.3g,\"seconds\":%.4f,\"rollout_seconds\":%.4f",
           mean, rstd, zfrac, kept_g, used, len, first_pass[0], clipf, kl, kl_old,
           first_pass[1] > 0 ? first_pass[5] / first_pass[1] : 1.0, norm, lr, gap, dt, t_roll);
  snprintf(rep->line, sizeof rep->line,
           "reward %.3f +- %.3f | zero-std %.2f | clip %.3f | kl %.2e | len %.2f | norm %.3f | "
           "%.0f ms",
           mean, rstd, zfrac, clipf, s->has_ref ? kl : kl_old, len, norm, dt * 1e3);
  return RP_OK;
}
