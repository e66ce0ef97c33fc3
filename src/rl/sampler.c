/* Sampling G completions per prompt through the model's KV cache
 * (rp_infer.h): temperature, top-k, top-p, a token budget and a stop token; each completion draws from its own
 * seeded stream so results do not depend on batching or on the rank layout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_rl.h"
#include "rl_internal.h"

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
    if (!logits) {
      free(rng), free(budget), free(active), free(next), free(probs), free(idx);
      return RP_EINVAL;
    }
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
    if (!logits) {
      free(rng), free(budget), free(active), free(next), free(probs), free(idx);
      return RP_EINVAL;
    }
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
