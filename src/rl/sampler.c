/* Sampling G completions per prompt through the KV cache: temperature, top-k,
 * top-p, a token budget and a stop token; each completion draws from its own
 * seeded stream so results do not depend on batching or on the rank layout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_rl.h"
#include "rl_internal.h"

/* Descending probability, ties by index: a total order, so the kept set of
 * top-k / top-p is deterministic. */
static int by_prob_desc(const void *a, const void *b, void *ctx) {
  const float *p = ctx;
  int i = *(const int *)a, j = *(const int *)b;
  if (p[i] != p[j]) return p[i] > p[j] ? -1 : 1;
  return (i > j) - (i < j);
}

int rp_sample_token(const float *logits, int V, const rp_sample_params *sp, rp_rng *rng,
                    float *probs, int *idx) {
  if (sp->temperature <= 0.0f) {
    int best = 0;
    for (int i = 1; i < V; i++)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  float mx = -INFINITY;
  for (int i = 0; i < V; i++) mx = fmaxf(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < V; i++) {
    probs[i] = expf((logits[i] - mx) / sp->temperature);
    sum += probs[i];
  }
  int limit_k = sp->top_k > 0 && sp->top_k < V;
  int limit_p = sp->top_p > 0.0f && sp->top_p < 1.0f;
  if (limit_k || limit_p) {
    for (int i = 0; i < V; i++) idx[i] = i;
    qsort_r(idx, (size_t)V, sizeof *idx, by_prob_desc, probs);
    int keep = limit_k ? sp->top_k : V;
    if (limit_p) {
      /* smallest prefix whose mass reaches top_p (of the whole distribution) */
      double acc = 0;
      int k = 0;
      while (k < keep) {
        acc += probs[idx[k++]];
        if (acc >= sp->top_p * sum) break;
      }
      keep = k;
    }
    sum = 0;
    for (int r = 0; r < V; r++) {
      if (r >= keep)
        probs[idx[r]] = 0.0f;
      else
        sum += probs[idx[r]];
    }
  }
  double u = rp_rng_uniform(rng) * sum, acc = 0;
  int last = 0;
  for (int i = 0; i < V; i++) {
    if (probs[i] <= 0.0f) continue;
    acc += probs[i];
    last = i;
    if (u < acc) return i;
  }
  return last; /* u landed on the rounding slack at the top */
}

static float policy_logp(const float *logits, int V, int tok, const rp_sample_params *sp) {
  return sp->temperature > 0 ? rp_logprob_row(logits, V, tok, sp->temperature) : 0.0f;
}

rp_status rp_sample_groups(rp_kv_cache *c, const rp_exec *x, const int32_t *const *prompts,
                           const int *plen, int np, int G, const rp_sample_params *sp,
                           const uint64_t *seeds, int32_t *out, int *out_len, float *out_logp) {
  int n = np * G, V = c->m->cfg.V, Vp = c->m->cfg.Vp;
  if (n > c->S)
    return rp_err(RP_EINVAL, "%d prompts x %d completions need %d cache slots but the cache "
                  "has %d; make the cache larger", np, G, n, c->S);
  if (sp->max_new < 1) return rp_err(RP_EINVAL, "max new tokens %d must be >= 1", sp->max_new);
  for (int i = 0; i < np; i++)
    if (plen[i] < 1 || plen[i] >= c->Tmax)
      return rp_err(RP_EINVAL, "prompt %d has %d tokens; it needs 1..%d to leave room for an "
                    "answer in the model's %d positions", i, plen[i], c->Tmax - 1, c->Tmax);
  rp_rng *rng = malloc((size_t)n * sizeof *rng);
  int *budget = malloc((size_t)n * sizeof *budget), *active = malloc((size_t)n * sizeof *active);
  int32_t *next = malloc((size_t)n * sizeof *next);
  float *probs = malloc((size_t)V * sizeof *probs);
  int *idx = malloc((size_t)V * sizeof *idx);
  if (!rng || !budget || !active || !next || !probs || !idx) {
    free(rng), free(budget), free(active), free(next), free(probs), free(idx);
    return rp_err(RP_ENOMEM, "out of memory for sampling %d completions", n);
  }
  int nact = 0;
  for (int i = 0; i < np; i++) {
    const float *logits = rp_kv_prefill(c, i * G, G, prompts[i], plen[i], x);
    for (int g = 0; g < G; g++) {
      int s = i * G + g;
      rp_rng_seed(&rng[s], seeds[s]);
      budget[s] = RP_MIN(sp->max_new, c->Tmax - plen[i]);
      int tok = rp_sample_token(logits, V, sp, &rng[s], probs, idx);
      out[(size_t)s * sp->max_new] = tok;
      if (out_logp) out_logp[(size_t)s * sp->max_new] = policy_logp(logits, V, tok, sp);
      out_len[s] = 1;
      if (tok != sp->stop && out_len[s] < budget[s]) active[nact++] = s;
    }
  }
  while (nact > 0) {
    for (int a = 0; a < nact; a++) {
      int s = active[a];
      next[a] = out[(size_t)s * sp->max_new + out_len[s] - 1];
    }
    const float *logits = rp_kv_step(c, active, next, nact, x);
    int still = 0;
    for (int a = 0; a < nact; a++) {
      int s = active[a];
      int tok = rp_sample_token(logits + (size_t)a * Vp, V, sp, &rng[s], probs, idx);
      if (out_logp)
        out_logp[(size_t)s * sp->max_new + out_len[s]] =
            policy_logp(logits + (size_t)a * Vp, V, tok, sp);
      out[(size_t)s * sp->max_new + out_len[s]++] = tok;
      if (tok != sp->stop && out_len[s] < budget[s]) active[still++] = s;
    }
    nact = still;
  }
  free(rng), free(budget), free(active), free(next), free(probs), free(idx);
  return RP_OK;
}
