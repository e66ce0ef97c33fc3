/* Sampling by full recomputation: simple and exact, used for the short sample at
 * the end of training. (Incremental decoding with a KV cache lives in src/rl.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_train.h"

static int pick_token(const float *logits, int V, float temperature, int top_k, rp_rng *rng,
                      float *probs) {
  if (temperature <= 0) {
    int best = 0;
    for (int i = 1; i < V; i++)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  float kth = -INFINITY;
  if (top_k > 0 && top_k < V) {
    /* the k-th largest logit by partial selection on a copy */
    memcpy(probs, logits, V * sizeof(float));
    for (int k = 0; k < top_k; k++) {
      int best = k;
      for (int i = k + 1; i < V; i++)
        if (probs[i] > probs[best]) best = i;
      float tmp = probs[k];
      probs[k] = probs[best];
      probs[best] = tmp;
    }
    kth = probs[top_k - 1];
  }
  float mx = -INFINITY;
  for (int i = 0; i < V; i++) mx = fmaxf(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < V; i++) {
    probs[i] = logits[i] < kth ? 0.0f : expf((logits[i] - mx) / temperature);
    sum += probs[i];
  }
  double u = rp_rng_uniform(rng) * sum, acc = 0;
  for (int i = 0; i < V; i++) {
    acc += probs[i];
    if (u < acc) return i;
  }
  return V - 1;
}

rp_status rp_generate(const rp_chunk *m, const rp_exec *x, const int32_t *prompt, int n_prompt,
                      int32_t *out, int n_new, float temperature, int top_k, rp_rng *rng) {
  int T = m->cfg.T, V = m->cfg.V;
  if (!m->spec.has_embed || !m->spec.has_head)
    return rp_err(RP_EINVAL, "sampling needs the whole model on one rank");
  if (n_prompt < 1) return rp_err(RP_EINVAL, "sampling needs a prompt of at least one token");
  int total = n_prompt + n_new;
  int32_t *ctx = malloc(total * sizeof *ctx);
  float *probs = malloc(V * sizeof *probs);
  rp_layer_acts *lv = calloc(m->spec.num_layers ? m->spec.num_layers : 1, sizeof *lv);
  /* Activations for one sequence of the longest window; shorter windows reuse
   * the same storage with a smaller T. */
  void *mem = rp_alloc(rp_acts_bytes(m, x->attn, 1, T), RP_MEM_ACTS);
  if (!ctx || !probs || !lv || !mem) {
    free(ctx);
    free(probs);
    free(lv);
    rp_free(mem);
    return rp_err(RP_ENOMEM, "out of memory for sampling");
  }
  memcpy(ctx, prompt, n_prompt * sizeof *ctx);
  for (int n = n_prompt; n < total; n++) {
    int start = n > T ? n - T : 0, len = n - start;
    rp_acts a;
    rp_acts_bind(&a, lv, m, x->attn, mem, 1, len);
    for (int i = 0; i < len; i++) {
      a.tokens[i] = ctx[start + i];
      a.targets[i] = -1;
      a.pos[i] = i;
    }
    rp_chunk_forward(m, &a, NULL, x);
    ctx[n] = pick_token(a.logits + (size_t)(len - 1) * m->cfg.Vp, V, temperature, top_k, rng,
                        probs);
  }
  memcpy(out, ctx + n_prompt, n_new * sizeof *out);
  free(ctx);
  free(probs);
  free(lv);
  rp_free(mem);
  return RP_OK;
}
