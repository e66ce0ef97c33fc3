/* Reference multi-head attention (llm.c style), O(T^2) memory: the oracle that
 * flash, ring and Ulysses attention are tested against. Clarity over speed.
 *
 * Shapes: qkv [B,T,3C] with q at channel offset 0, k at C, v at 2C, head h at
 * h*HS inside each; out [B,T,C]; att [B,NH,T,T] softmax probabilities (entries
 * above the diagonal are 0 when causal); lse [B,NH,T]. Scores are scaled by
 * 1/sqrt(HS). Work is split over (b,h) pairs: each pair reads and writes only its
 * own head's columns, so threads never touch the same output element. */
#include <math.h>
#include <stdlib.h>

#include "kern_util.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  float *out, *att, *lse, *dqkv;
  const float *qkv, *catt, *dout;
  const uint8_t *mask;    /* [B,T,T] explicit visibility, or NULL (causal flag) */
  int B, T, C, NH, causal;
} attn_ctx;

/* Whether key t2 is visible to query t of batch entry b. */
static int ref_visible(const attn_ctx *c, long b, long t, long t2) {
  if (c->mask) return c->mask[(b * c->T + t) * c->T + t2] != 0;
  return !c->causal || t2 <= t;
}

static void attn_fwd_task(void *vctx, int ith, int nth) {
  const attn_ctx *c = vctx;
  const long T = c->T, C = c->C, C3 = 3L * c->C, NH = c->NH, HS = C / NH;
  const float scale = 1.0f / sqrtf((float)HS);
  long lo, hi;
  rp_split((long)c->B * NH, ith, nth, &lo, &hi);
  for (long bh = lo; bh < hi; bh++) {
    long b = bh / NH, h = bh % NH;
    const float *base = c->qkv + b * T * C3;
    for (long t = 0; t < T; t++) {
      const float *q = base + t * C3 + h * HS;
      float *a = c->att + (bh * T + t) * T;
      /* keys visible to query t: a prefix when causal, any set under a mask */
      long tend = c->mask ? T : c->causal ? t + 1 : T;
      float maxv = -INFINITY;
      for (long t2 = 0; t2 < tend; t2++) {
        const float *k = base + t2 * C3 + C + h * HS;
        a[t2] = ref_visible(c, b, t, t2) ? rp_kern_dot(q, k, HS) * scale : -INFINITY;
        if (a[t2] > maxv) maxv = a[t2];
      }
      float sum = 0.0f;
      for (long t2 = 0; t2 < tend; t2++) {
        a[t2] = a[t2] == -INFINITY ? 0.0f : expf(a[t2] - maxv);
        sum += a[t2];
      }
      float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  /* a row that sees nothing stays 0 */
      for (long t2 = 0; t2 < tend; t2++) a[t2] *= inv;
      for (long t2 = tend; t2 < T; t2++) a[t2] = 0.0f;
      if (c->lse) c->lse[bh * T + t] = sum > 0.0f ? maxv + logf(sum) : -INFINITY;

      float *o = c->out + (b * T + t) * C + h * HS;
      for (long i = 0; i < HS; i++) o[i] = 0.0f;
      for (long t2 = 0; t2 < tend; t2++) {
        const float *v = base + t2 * C3 + 2 * C + h * HS;
        for (long i = 0; i < HS; i++) o[i] += a[t2] * v[i];
      }
    }
  }
}

void rp_attention_ref_forward(float *out, float *att, float *lse, const float *qkv, int B,
                              int T, int C, int NH, int causal, rp_pool *pool) {
  RP_CHECK(NH > 0 && C % NH == 0);
  attn_ctx c = {.out = out, .att = att, .lse = lse, .qkv = qkv, .B = B, .T = T, .C = C,
                .NH = NH, .causal = causal};
  rp_kern_run(pool, attn_fwd_task, &c, (long)B * NH * T * T);
}

void rp_attention_ref_forward_masked(float *out, float *att, float *lse, const float *qkv,
                                     int B, int T, int C, int NH, const uint8_t *mask,
                                     rp_pool *pool) {
  RP_CHECK(NH > 0 && C % NH == 0 && mask != NULL);
  attn_ctx c = {.out = out, .att = att, .lse = lse, .qkv = qkv, .mask = mask, .B = B, .T = T,
                .C = C, .NH = NH, .causal = 0};
  rp_kern_run(pool, attn_fwd_task, &c, (long)B * NH * T * T);
}

/* Per query row t with P = att[t,:] and dP[t2] = dout[t] . v[t2]:
 *   dS = P * (dP - sum_t2 P dP)         (softmax backward)
 *   dq[t] += scale dS k, dk[t2] += scale dS[t2] q[t], dv[t2] += P[t2] dout[t].
 * Causality is implied by att's zeros; zero entries are skipped. */
static void attn_bwd_task(void *vctx, int ith, int nth) {
  const attn_ctx *c = vctx;
  const long T = c->T, C = c->C, C3 = 3L * c->C, NH = c->NH, HS = C / NH;
  const float scale = 1.0f / sqrtf((float)HS);
  long lo, hi;
  rp_split((long)c->B * NH, ith, nth, &lo, &hi);
  if (hi <= lo) return;
  float *dp = malloc(sizeof(float) * (size_t)T); /* T floats of scratch per thread */
  RP_CHECK(dp != NULL);
  for (long bh = lo; bh < hi; bh++) {
    long b = bh / NH, h = bh % NH;
    const float *base = c->qkv + b * T * C3;
    float *dbase = c->dqkv + b * T * C3;
    for (long t = 0; t < T; t++) {
      const float *a = c->catt + (bh * T + t) * T;
      const float *dy = c->dout + (b * T + t) * C + h * HS;
      const float *q = base + t * C3 + h * HS;
      float *dq = dbase + t * C3 + h * HS;
      float pdp = 0.0f;
      for (long t2 = 0; t2 < T; t2++) {
        const float *v = base + t2 * C3 + 2 * C + h * HS;
        dp[t2] = a[t2] != 0.0f ? rp_kern_dot(dy, v, HS) : 0.0f;
        pdp += a[t2] * dp[t2];
      }
      for (long t2 = 0; t2 < T; t2++) {
        if (a[t2] == 0.0f) continue;
        const float *k = base + t2 * C3 + C + h * HS;
        float *dk = dbase + t2 * C3 + C + h * HS;
        float *dv = dbase + t2 * C3 + 2 * C + h * HS;
        float ds = a[t2] * (dp[t2] - pdp) * scale;
        for (long i = 0; i < HS; i++) {
          dq[i] += ds * k[i];
          dk[i] += ds * q[i];
          dv[i] += a[t2] * dy[i];
        }
      }
    }
  }
  free(dp);
}

void rp_attention_ref_backward(float *dqkv, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH, rp_pool *pool) {
  RP_CHECK(NH > 0 && C % NH == 0);
  attn_ctx c = {.dqkv = dqkv, .dout = dout, .qkv = qkv, .catt = att, .B = B, .T = T, .C = C,
                .NH = NH};
  rp_kern_run(pool, attn_bwd_task, &c, (long)B * NH * T * T);
}
