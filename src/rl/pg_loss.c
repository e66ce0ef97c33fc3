/* Policy-gradient math as gradients w.r.t. logits.
 *
 * The model's own head backward derives dlogits from cross-entropy; RL
 * objectives are per-token functions of the sampled token's log-probability,
 * so by the chain rule
 *   d loss / d z = (d loss / d logp) * (onehot(target) - softmax(z / tau)) / tau
 * and every objective below only has to provide the scalar d loss / d logp.
 * Scalars are computed in double: they are few and the ratio exp(logp - old)
 * must be exactly 1 on the first pass. */
#include <math.h>
#include <string.h>

#include "ringpipe/rp_rl.h"

static double row_lse(const float *z, int V, double inv_tau) {
  double mx = -INFINITY;
  for (int i = 0; i < V; i++) mx = fmax(mx, z[i] * inv_tau);
  double sum = 0;
  for (int i = 0; i < V; i++) sum += exp(z[i] * inv_tau - mx);
  return mx + log(sum);
}

float rp_logprob_row(const float *logits, int V, int target, float temperature) {
  double inv_tau = 1.0 / temperature;
  return (float)(logits[target] * inv_tau - row_lse(logits, V, inv_tau));
}

void rp_dlogits_from_dlogp(float *row, int V, int Vp, int target, float temperature, float g) {
  double inv_tau = 1.0 / temperature, lse = row_lse(row, V, inv_tau);
  double s = (double)g * inv_tau;
  for (int i = 0; i < V; i++) row[i] = (float)(-s * exp(row[i] * inv_tau - lse));
  row[target] += (float)s;
  for (int i = V; i < Vp; i++) row[i] = 0.0f;
}

double rp_kl_k3(double logp, double ref_logp) {
  /* e^x - x - 1 >= 0; expm1 keeps it accurate near 0, where a plain exp would
   * cancel, and the clamp absorbs the last rounding. */
  double d = ref_logp - logp, k = expm1(d) - d;
  return k > 0 ? k : 0.0;
}

void rp_pg_token_loss(double logp, double old_logp, double ref_logp, double adv,
                      const rp_pg_params *p, rp_pg_token *out) {
  double r = exp(logp - old_logp);
  double rc = fmin(fmax(r, 1.0 - p->clip_low), 1.0 + p->clip_high);
  double un = r * adv, cl = rc * adv;
  memset(out, 0, sizeof *out);
  out->ratio = r;
  if (un <= cl) {
    out->loss = -un;
    out->dlogp = -adv * r; /* d(r A)/d logp = r A */
  } else {
    out->loss = -cl;       /* clipped: constant in logp */
    out->clipped = 1;
  }
  if (p->beta > 0) {
    out->kl = rp_kl_k3(logp, ref_logp);
    out->loss += p->beta * out->kl;
    out->dlogp += p->beta * (1.0 - exp(ref_logp - logp));
  }
}

double rp_group_advantages(const float *r, int G, int scale_std, float eps, float *adv) {
  double mean = 0;
  int equal = 1;
  for (int g = 0; g < G; g++) {
    mean += r[g];
    equal &= r[g] == r[0];
  }
  mean /= G;
  if (equal || G < 2) {
    /* all the same: no signal, and exactly 0 rather than rounding noise */
    for (int g = 0; g < G; g++) adv[g] = 0.0f;
    return 0.0;
  }
  double var = 0;
  for (int g = 0; g < G; g++) var += (r[g] - mean) * (r[g] - mean);
  double std = sqrt(var / (G - 1));
  double div = scale_std ? std + eps : 1.0;
  for (int g = 0; g < G; g++) adv[g] = (float)((r[g] - mean) / div);
  return std;
}

rp_status rp_loss_agg_parse(const char *name, rp_loss_agg *out) {
  static const char *const names[] = {"token-mean", "seq-mean-token-mean",
                                      "seq-mean-token-sum-norm"};
  for (int i = 0; i < 3; i++)
    if (strcmp(name, names[i]) == 0) {
      *out = (rp_loss_agg)i;
      return RP_OK;
    }
  return rp_err(RP_EINVAL, "--loss-agg '%s' is unknown; use token-mean, seq-mean-token-mean "
                "or seq-mean-token-sum-norm", name);
}

double rp_loss_agg_weight(rp_loss_agg agg, int clen, long nseq, long ntok, int max_new) {
  switch (agg) {
    case RP_AGG_TOKEN_MEAN: return ntok > 0 ? 1.0 / (double)ntok : 0.0;
    case RP_AGG_SEQ_MEAN_TOKEN_MEAN:
      return nseq > 0 && clen > 0 ? 1.0 / ((double)nseq * clen) : 0.0;
    case RP_AGG_SEQ_MEAN_TOKEN_SUM_NORM:
      return nseq > 0 ? 1.0 / ((double)nseq * max_new) : 0.0;
  }
  return 0.0;
}

void rp_gae(const float *rewards, const float *values, int n, float gamma, float lambda,
            float *adv, float *ret) {
  double next_v = 0, next_a = 0;
  for (int t = n - 1; t >= 0; t--) {
    double delta = rewards[t] + gamma * next_v - values[t];
    next_a = delta + (double)gamma * lambda * next_a;
    adv[t] = (float)next_a;
    ret[t] = (float)(next_a + values[t]);
    next_v = values[t];
  }
}

double rp_value_loss(float v, float v_old, float ret, float clip, double *dv, int *clipped) {
  double e1 = (double)v - ret;
  if (clip <= 0) {
    *dv = e1;
    *clipped = 0;
    return 0.5 * e1 * e1;
  }
  double dlt = (double)v - v_old, vc = v_old + fmin(fmax(dlt, -clip), clip);
  double e2 = vc - ret;
  if (e1 * e1 >= e2 * e2) {
    *dv = e1;
    *clipped = 0;
    return 0.5 * e1 * e1;
  }
  /* the clipped prediction is constant in v outside the band */
  *dv = fabs(dlt) < clip ? e2 : 0.0;
  *clipped = 1;
  return 0.5 * e2 * e2;
}
