/* PPO's value head: one linear map from the final LayerNorm output to a scalar
 * per position, kept in src/rl because only PPO needs it. Its gradient w.r.t.
 * the LayerNorm output joins the LM head's in the model's head backward from
 * dlogits, so the value loss shapes the shared trunk as in the usual
 * actor-critic setup. */
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "rl_internal.h"

rp_status rp_value_head_init(rp_value_head *h, int C) {
  memset(h, 0, sizeof *h);
  h->C = C;
  size_t bytes = (size_t)(C + 1) * sizeof(float);
  h->p = rp_alloc(bytes, RP_MEM_PARAMS);
  h->g = rp_alloc(bytes, RP_MEM_GRADS);
  h->m = rp_alloc(bytes, RP_MEM_OPTIM);
  h->v = rp_alloc(bytes, RP_MEM_OPTIM);
  if (!h->p || !h->g || !h->m || !h->v) {
    rp_value_head_free(h);
    return rp_err(RP_ENOMEM, "out of memory for the value head");
  }
  return RP_OK;
}

void rp_value_head_free(rp_value_head *h) {
  rp_free(h->p);
  rp_free(h->g);
  rp_free(h->m);
  rp_free(h->v);
  memset(h, 0, sizeof *h);
}

void rp_value_head_forward(const rp_value_head *h, const float *lnf, int N, float *out) {
  const int C = h->C;
  for (int i = 0; i < N; i++) {
    const float *x = lnf + (size_t)i * C;
    double s = h->p[C];
    for (int c = 0; c < C; c++) s += (double)x[c] * h->p[c];
    out[i] = (float)s;
  }
}

void rp_value_head_backward(rp_value_head *h, const float *lnf, const float *dv, int N,
                            float *dlnf) {
  const int C = h->C;
  for (int i = 0; i < N; i++) {
    const float *x = lnf + (size_t)i * C;
    float *dx = dlnf + (size_t)i * C;
    for (int c = 0; c < C; c++) {
      h->g[c] += dv[i] * x[c];
      dx[c] = dv[i] * h->p[c];
    }
    h->g[C] += dv[i];
  }
}
