/* Head backward from dlogits the caller computed itself. Training's head
 * backward derives dlogits from cross-entropy; reinforcement learning has its
 * own per-token objective (clipped policy gradient, KL), so it writes
 * d loss / d logits into a->logits and continues from there. The rest is the
 * same math as the head in backward.c: the tied LM head's matmul backward into
 * wte's gradient and dlnf, then the final LayerNorm backward into w->dres. */
#include <string.h>

#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_rl.h"

void rp_rl_head_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, const float *dlnf_extra,
                         const rp_exec *x) {
  RP_CHECK(m->spec.has_head);
  int N = a->B * a->T, C = m->cfg.C;
  long NC = (long)N * C;
  /* w->dln is free at this point (the layers' backward reuses it later). */
  float *dlnf = w->dln;
  if (dlnf_extra)
    memcpy(dlnf, dlnf_extra, (size_t)NC * sizeof(float));
  else
    memset(dlnf, 0, (size_t)NC * sizeof(float));
  rp_matmul_backward(dlnf, m->g.wte, NULL, a->logits, a->lnf, m->p.wte, N, C, m->cfg.Vp,
                     x->pool);
  memset(w->dres, 0, (size_t)NC * sizeof(float));
  rp_layernorm_backward(w->dres, m->g.lnfw, m->g.lnfb, dlnf, a->output, m->p.lnfw,
                        a->lnf_mean, a->lnf_rstd, N, C, x->pool);
}

void rp_chunk_head_backward_from_dlogits(rp_chunk *m, rp_acts *a, rp_grad_ws *w,
                                         const rp_exec *x) {
  rp_rl_head_backward(m, a, w, NULL, x);
}
