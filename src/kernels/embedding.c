/* Token + position embedding. Shapes: tok, pos [N]; wte [V,C]; wpe [maxT,C];
 * out/dout [N,C]. Forward splits rows. Backward is a scatter-add where rows of
 * dwte collide whenever two positions hold the same token, so it splits channels
 * instead: each thread owns columns [lo,hi) of every dwte/dwpe row and walks the
 * N rows in order, which is race-free and the same for any thread count. */
#include "kern_util.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  float *out, *dwte, *dwpe;
  const float *wte, *wpe, *dout;
  const int32_t *tok, *pos;
  int N, C;
} emb_ctx;

static void emb_fwd_task(void *vctx, int ith, int nth) {
  const emb_ctx *c = vctx;
  const long C = c->C;
  long lo, hi;
  rp_split(c->N, ith, nth, &lo, &hi);
  for (long n = lo; n < hi; n++) {
    float *restrict o = c->out + n * C;
    const float *restrict te = c->wte + (long)c->tok[n] * C;
    const float *restrict pe = c->wpe + (long)c->pos[n] * C;
    for (long k = 0; k < C; k++) o[k] = te[k] + pe[k];
  }
}

void rp_embed_forward(float *out, const int32_t *tok, const int32_t *pos, const float *wte,
                      const float *wpe, int N, int C, rp_pool *pool) {
  emb_ctx c = {.out = out, .tok = tok, .pos = pos, .wte = wte, .wpe = wpe, .N = N, .C = C};
  rp_kern_run(pool, emb_fwd_task, &c, (long)N * C);
}

static void emb_bwd_task(void *vctx, int ith, int nth) {
  const emb_ctx *c = vctx;
  const long C = c->C;
  long lo, hi;
  rp_kern_split_cols(C, ith, nth, &lo, &hi);
  for (long n = 0; n < c->N; n++) {
    const float *restrict dy = c->dout + n * C;
    if (c->dwte) {
      float *restrict g = c->dwte + (long)c->tok[n] * C;
      for (long k = lo; k < hi; k++) g[k] += dy[k];
    }
    if (c->dwpe) {
      float *restrict g = c->dwpe + (long)c->pos[n] * C;
      for (long k = lo; k < hi; k++) g[k] += dy[k];
    }
  }
}

void rp_embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                       const int32_t *pos, int N, int C, rp_pool *pool) {
  if (!dwte && !dwpe) return;
  emb_ctx c = {.dwte = dwte, .dwpe = dwpe, .dout = dout, .tok = tok, .pos = pos, .N = N,
               .C = C};
  rp_kern_run(pool, emb_bwd_task, &c, (long)N * C);
}
