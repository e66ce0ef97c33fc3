/* The flash attention micro-kernel's own GEMM rate, the ceiling its tiles can
 * reach (the bench's "fraction of the kernel peak"). */
#include "flash_attention_internal.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_util.h"

/* The flash GEMM micro-kernel's peak: every pool thread multiplies its own
 * 192 x 256 by 256 x 192 tiles (L2-resident, like the attention tiles). */
typedef struct {
  const rp_flash_ops *ops;
  float *buf;
  long per;
  int reps;
} kpeak_ctx;

static void kpeak_task(void *v, int ith, int nth) {
  kpeak_ctx *c = v;
  float *a = c->buf + ith * c->per, *b = a + 192 * 256, *o = b + 256 * 192;
  for (int r = 0; r < c->reps; r++) c->ops->gemm(192, 192, 256, a, 256, 1, b, 192, o, 192, 0);
}

double rp_flash_kernel_peak(const rp_flash_config *cfg, rp_pool *pool) {
  int n = rp_pool_size(pool);
  kpeak_ctx c = {rp_flash_ops_active(cfg), NULL, 192 * 256 * 2 + 192 * 192, 40};
  c.buf = rp_alloc(sizeof(float) * (size_t)(c.per * n), RP_MEM_WORKSPACE);
  if (!c.buf) return 0.0;
  for (long i = 0; i < c.per * n; i++) c.buf[i] = 0.001f * (float)(i % 1000);
  double best = 1e30;
  for (int rep = 0; rep < 6; rep++) {
    double t0 = rp_now();
    rp_pool_run(pool, kpeak_task, &c);
    double dt = rp_now() - t0;
    if (rep > 0 && dt < best) best = dt;
  }
  rp_free(c.buf);
  return 2.0 * 192 * 192 * 256 * (double)c.reps * n / best;
}
