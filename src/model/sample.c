/* Token sampling (greedy, temperature, top-k, top-p) and text generation:
 * through the KV cache (rp_generate, O(len) per token) and by recomputing the
 * whole context for every token (rp_generate_recompute, the reference). Both
 * pick with the same rp_sample_token, one rng draw per sampled token, so with
 * the same seed they choose the same tokens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_infer.h"

/* Descending probability, ties by index: a total order, so the kept set of
 * top-k / top-p is deterministic. */
static int by_prob_desc(const void *a, const void *b, void *ctx) {
  const float *p = ctx;
  int i = *(const int *)a, j = *(const int *)b;
  if (p[i] != p[j]) return p[i] > p[j] ? -1 : 1;
  return (i > j) - (i < j);
}

static int argmax(const float *logits, int V) {
  int best = 0;
  for (int i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  return best;
}

/* probs[] outside the top-k / top-p set to 0; returns the kept mass. */
static double keep_top(float *probs, int *idx, int V, double sum, const rp_sample_params *sp) {
  int limit_k = sp->top_k > 0 && sp->top_k < V;
  int limit_p = sp->top_p > 0.0f && sp->top_p < 1.0f;
  if (!limit_k && !limit_p) return sum;
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
  double kept = 0;
  for (int r = 0; r < V; r++) {
    if (r >= keep)
      probs[idx[r]] = 0.0f;
    else
      kept += probs[idx[r]];
  }
  return kept;
}

int rp_sample_token(const float *logits, int V, const rp_sample_params *sp, rp_rng *rng,
                    float *probs, int *idx) {
  if (sp->temperature <= 0.0f) return argmax(logits, V);
  float mx = -INFINITY;
  for (int i = 0; i < V; i++) mx = fmaxf(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < V; i++) {
    probs[i] = expf((logits[i] - mx) / sp->temperature);
    sum += probs[i];
  }
  sum = keep_top(probs, idx, V, sum, sp);
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

/* ---- generation */

typedef struct {
  int32_t *ctx;  /* prompt + generated so far */
  float *probs;
  int *idx;
} gen_scratch;

static rp_status gen_scratch_init(gen_scratch *g, const rp_chunk *m, int total) {
  g->ctx = malloc((size_t)total * sizeof *g->ctx);
  g->probs = malloc((size_t)m->cfg.V * sizeof *g->probs);
  g->idx = malloc((size_t)m->cfg.V * sizeof *g->idx);
  if (g->ctx && g->probs && g->idx) return RP_OK;
  free(g->ctx), free(g->probs), free(g->idx);
  return rp_err(RP_ENOMEM, "out of memory for sampling %d tokens", total);
}

static void gen_scratch_free(gen_scratch *g) {
  free(g->ctx);
  free(g->probs);
  free(g->idx);
}

static rp_status check_generate(const rp_chunk *m, int n_prompt, int n_new) {
  if (!m->spec.has_embed || !m->spec.has_head)
    return rp_err(RP_EINVAL, "sampling needs the whole model on one rank");
  if (n_prompt < 1) return rp_err(RP_EINVAL, "sampling needs a prompt of at least one token");
  if (n_new < 0) return rp_err(RP_EINVAL, "cannot sample %d tokens", n_new);
  return RP_OK;
}

rp_status rp_generate(const rp_chunk *m, const rp_exec *x, const int32_t *prompt, int n_prompt,
                      int32_t *out, int n_new, const rp_sample_params *sp, rp_rng *rng) {
  RP_TRY(check_generate(m, n_prompt, n_new));
  const int T = m->cfg.T, V = m->cfg.V, total = n_prompt + n_new;
  gen_scratch g;
  RP_TRY(gen_scratch_init(&g, m, total));
  rp_kv_cache c;
  rp_status s = rp_kv_init(&c, m, x->attn, 1, T);
  if (s != RP_OK) {
    gen_scratch_free(&g);
    return s;
  }
  memcpy(g.ctx, prompt, (size_t)n_prompt * sizeof *g.ctx);
  /* A prompt longer than the model's positions keeps its last T tokens. */
  int start = n_prompt > T ? n_prompt - T : 0;
  const float *logits = rp_kv_prefill(&c, 0, 1, g.ctx + start, n_prompt - start, x);
  for (int n = n_prompt; n < total && logits; n++) {
    g.ctx[n] = rp_sample_token(logits, V, sp, rng, g.probs, g.idx);
    if (n + 1 == total) break;
    if (c.len[0] == T) {
      /* Out of positions: keep the last T/2 tokens, prefill them again. */
      int keep = T / 2 > 0 ? T / 2 : 1;
      logits = rp_kv_prefill(&c, 0, 1, g.ctx + n + 1 - keep, keep, x);
    } else {
      int slot = 0;
      logits = rp_kv_step(&c, &slot, &g.ctx[n], 1, x);
    }
  }
  if (!logits) s = RP_EINVAL;  /* rp_errmsg() says what */
  if (s == RP_OK) memcpy(out, g.ctx + n_prompt, (size_t)n_new * sizeof *out);
  rp_kv_free(&c);
  gen_scratch_free(&g);
  return s;
}

rp_status rp_generate_recompute(const rp_chunk *m, const rp_exec *x, const int32_t *prompt,
                                int n_prompt, int32_t *out, int n_new,
                                const rp_sample_params *sp, rp_rng *rng) {
  RP_TRY(check_generate(m, n_prompt, n_new));
  const int T = m->cfg.T, V = m->cfg.V, total = n_prompt + n_new;
  gen_scratch g;
  RP_TRY(gen_scratch_init(&g, m, total));
  rp_layer_acts *lv = calloc(m->spec.num_layers ? (size_t)m->spec.num_layers : 1, sizeof *lv);
  /* Activations for one sequence of the longest window; shorter windows reuse
   * the same storage with a smaller T. */
  void *mem = rp_alloc(rp_acts_bytes(m, x->attn, 1, T), RP_MEM_ACTS);
  if (!lv || !mem) {
    free(lv);
    rp_free(mem);
    gen_scratch_free(&g);
    return rp_err(RP_ENOMEM, "out of memory for sampling");
  }
  memcpy(g.ctx, prompt, (size_t)n_prompt * sizeof *g.ctx);
  for (int n = n_prompt; n < total; n++) {
    int start = n > T ? n - T : 0, len = n - start;
    rp_acts a;
    rp_acts_bind(&a, lv, m, x->attn, mem, 1, len);
    for (int i = 0; i < len; i++) {
      a.tokens[i] = g.ctx[start + i];
      a.targets[i] = -1;
      a.pos[i] = i;
    }
    rp_chunk_forward(m, &a, NULL, x);
    g.ctx[n] = rp_sample_token(a.logits + (size_t)(len - 1) * m->cfg.Vp, V, sp, rng, g.probs,
                               g.idx);
  }
  memcpy(out, g.ctx + n_prompt, (size_t)n_new * sizeof *out);
  free(lv);
  rp_free(mem);
  gen_scratch_free(&g);
  return RP_OK;
}
