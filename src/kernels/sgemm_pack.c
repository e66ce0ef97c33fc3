/* The fp32 GEMM's operands (sgemm.c): packing a source's rows into the
 * micro-kernels' panels (through the kernel descriptor's vector packs where it
 * has them), and packing B panels with all the pool's threads before a job. */
#include <string.h>

#include "kern_util.h"
#include "ringpipe/rp_base.h"
#include "sgemm_internal.h"

/* Rows [r0, r0 + w) (zero past s->rows) by k [k0, k0 + kc) into out[kc][w],
 * with kd's transposing pack when it has one. */
static void pack_panel(const rp_sgemm_kdesc *kd, const sg_src *s, int r0, int w, long k0,
                       long kc, float *restrict out) {
  const int have = RP_MIN(w, s->rows - r0);
  if (s->kcontig && kd->pack_t) { /* all the rows: it prefetches the next panel's */
    kd->pack_t(s->p + (long)r0 * s->ld + k0, s->ld, RP_MAX(0, s->rows - r0), w, kc, out);
    return;
  }
  if (!s->kcontig && kd->pack_n) {
    kd->pack_n(s->p + k0 * s->ld + r0, s->ld, have, w, kc, out);
    return;
  }
  if (!s->kcontig) {
    for (long k = 0; k < kc; k++) {
      const float *src = s->p + (k0 + k) * s->ld + r0;
      float *dst = out + k * w;
      memcpy(dst, src, sizeof(float) * (size_t)have);
      for (int r = have; r < w; r++) dst[r] = 0.0f;
    }
    return;
  }
  for (int r = 0; r < w; r++) {
    if (r < have) {
      const float *src = s->p + (long)(r0 + r) * s->ld + k0;
      for (long k = 0; k < kc; k++) out[k * w + r] = src[k];
    } else {
      for (long k = 0; k < kc; k++) out[k * w + r] = 0.0f;
    }
  }
}

/* np panels from row r0 on, panel p into out + p * kc * w: an r-contiguous
 * source in one row-by-row sweep where kd has the block pack, else panel by
 * panel */
void rp_sgemm_pack_panels(const rp_sgemm_kdesc *kd, const sg_src *s, int r0, int np, int w,
                          long k0, long kc, float *restrict out) {
  if (!s->kcontig && kd->pack_nblock) {
    kd->pack_nblock(s->p + k0 * s->ld + r0, s->ld, RP_MAX(0, s->rows - r0), w, np, kc, out);
    return;
  }
  for (int p = 0; p < np; p++) pack_panel(kd, s, r0 + p * w, w, k0, kc, out + p * kc * w);
}

static void bpack_task(void *vctx, int ith, int nth) {
  const bpack_ctx *c = vctx;
  long n0 = c->njobs > 0 ? npanels(c->job[0].cols, c->job[0].width) : 0;
  long total = n0 + (c->njobs > 1 ? npanels(c->job[1].cols, c->job[1].width) : 0), lo, hi;
  rp_split(total, ith, nth, &lo, &hi);
  for (long q = lo; q < hi;) { /* this thread's panels of each job, in one sweep each */
    const int ji = q < n0 ? 0 : 1;
    const bpack_job *j = &c->job[ji];
    const long jr = ji ? q - n0 : q, end = ji ? hi - n0 : RP_MIN(hi, n0), K = j->src.K;
    rp_sgemm_pack_panels(c->kd, &j->src, (int)(jr * j->width), (int)(end - jr), j->width, 0, K,
                j->out + jr * K * j->width);
    q += end - jr;
  }
}

void rp_sgemm_bpack_run(bpack_ctx *c, rp_pool *pool) {
  long work = 0;
  for (int i = 0; i < c->njobs; i++) work += (long)c->job[i].cols * c->job[i].src.K;
  if (work > 0) rp_kern_run(pool, bpack_task, c, work);
}
