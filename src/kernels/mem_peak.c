/* The memory side of the step profile's "fraction of peak": how fast the pool's
 * threads can stream a buffer of a given size (read + write), measured in the
 * same process. Memory-bound passes (LayerNorm, GELU, AdamW) are compared with
 * it the way GEMMs are compared with the FMA peak. */
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_util.h"

typedef struct {
  const float *src;
  float *dst;
  long n;
} copy_ctx;

/* dst = 1.0001 * src + dst over this thread's slice: one read of each and one
 * write, like the elementwise passes it stands for (memcpy could take
 * non-temporal shortcuts no kernel here takes). */
static void triad_task(void *v, int ith, int nth) {
  copy_ctx *c = v;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  for (long i = lo; i < hi; i++) c->dst[i] = 1.0001f * c->src[i] + c->dst[i];
}

double rp_stream_bandwidth(long bytes, rp_pool *pool) {
  long n = bytes / (long)sizeof(float);
  if (n < 1024) n = 1024;
  copy_ctx c = {NULL, NULL, n};
  float *src = rp_alloc(sizeof(float) * (size_t)n, RP_MEM_WORKSPACE);
  float *dst = rp_alloc(sizeof(float) * (size_t)n, RP_MEM_WORKSPACE);
  if (!src || !dst) {
    rp_free(src);
    rp_free(dst);
    return 0.0;
  }
  for (long i = 0; i < n; i++) src[i] = (float)(i % 977), dst[i] = 0.0f;
  c.src = src, c.dst = dst;
  double best = 1e30;
  for (int rep = 0; rep < 8; rep++) {
    double t0 = rp_now();
    rp_pool_run(pool, triad_task, &c);
    double dt = rp_now() - t0;
    if (rep > 0 && dt < best) best = dt;   /* rep 0 faults the pages in */
  }
  rp_free(src);
  rp_free(dst);
  return 3.0 * sizeof(float) * (double)n / best;   /* two reads, one write */
}
