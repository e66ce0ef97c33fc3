/* Residual add, in-place accumulate and zero fill, elementwise over n values. The
 * residual backward needs no kernel of its own: da += dout and db += dout are two
 * rp_add_inplace calls (or none, when the gradient is the caller's own buffer). */
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <stdint.h>

#include "fused_internal.h"
#include "kern_util.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  float *out;
  const float *a, *b;
  long n;
  int streams; /* zero_task: with streaming stores */
} res_ctx;

/* out may be a or b itself (elementwise, so that is well defined): no restrict */
void rp_residual_forward_span(float *out, const float *a, const float *b, long n) {
  for (long i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void res_fwd_task(void *vctx, int ith, int nth) {
  const res_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  if (hi > lo) rp_residual_forward_span(c->out + lo, c->a + lo, c->b + lo, hi - lo);
}

void rp_residual_forward(float *out, const float *a, const float *b, long n, rp_pool *pool) {
  res_ctx c = {.out = out, .a = a, .b = b, .n = n};
  rp_kern_run(pool, res_fwd_task, &c, n);
}

static void add_task(void *vctx, int ith, int nth) {
  const res_ctx *c = vctx;
  long lo, hi;
  rp_split(c->n, ith, nth, &lo, &hi);
  float *restrict acc = c->out;
  const float *restrict x = c->a;
  for (long i = lo; i < hi; i++) acc[i] += x[i];
}

void rp_add_inplace(float *acc, const float *x, long n, rp_pool *pool) {
  res_ctx c = {.out = acc, .a = x, .n = n};
  rp_kern_run(pool, add_task, &c, n);
}

/* Buffers from this size on are cleared with streaming (non-temporal) stores:
 * they are bigger than any cache share of the two cores, so ordinary stores
 * would read every line from memory before writing it back (and glibc's memset
 * turns to streaming stores only above a fraction of the L3 size the machine
 * reports, which a VM may report as hundreds of MiB). The 124M shape's 473 MiB
 * of gradients (Sapphire Rapids VM, 2 threads, 2 alternating pairs of `bench
 * train --profile`): "opt zero grads" 25.0-25.1 -> 10.9-11.8 ms a step, the
 * backward's GEMMs that add to them no slower. Smaller buffers keep memset:
 * the backward's scratch is cleared just before its products add to it, and
 * finds its zeros in cache. (The gradients, cleared long before their first
 * use, take rp_zero_cold.) */
#define ZERO_STREAM_MIN_BYTES ((size_t)64 << 20)

/* rp_zero_cold's zeros are first read only after a pass over more data than
 * the caches hold, so the lines memset leaves in cache are gone by then
 * anyway: from a few L2s' worth, streaming stores. A step's gradients are
 * cleared as it starts and first added to in its backward, with the forward's
 * activations in between. The default model's 41 MiB of gradients (Zen 4 VM,
 * 32 MiB L3, 2 threads, 3 alternating pairs of `train --profile --steps 20`):
 * "opt zero grads" quiet 1.17-1.32 -> 0.52-0.58 ms a step, the backward's
 * GEMMs that add to them 209.2-209.4 ms quiet against 207.3-213.4 (no slower). */
#define ZERO_COLD_STREAM_MIN_BYTES ((size_t)4 << 20)

static int streams_from(long n, size_t min_bytes) {
#if defined(__SSE2__)
  return (size_t)n * sizeof(float) >= min_bytes;
#else
  (void)n, (void)min_bytes;
  return 0;
#endif
}

int rp_zero_streams(long n) { return streams_from(n, ZERO_STREAM_MIN_BYTES); }
int rp_zero_cold_streams(long n) { return streams_from(n, ZERO_COLD_STREAM_MIN_BYTES); }

static void zero_stream(float *x, long n) {
#if defined(__SSE2__)
  long i = 0;
  for (; i < n && ((uintptr_t)(x + i) & 15); i++) x[i] = 0.0f;
  const __m128 z = _mm_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    _mm_stream_ps(x + i, z);
    _mm_stream_ps(x + i + 4, z);
    _mm_stream_ps(x + i + 8, z);
    _mm_stream_ps(x + i + 12, z);
  }
  for (; i < n; i++) x[i] = 0.0f;
  _mm_sfence(); /* the stores are visible before the pool's barrier releases the caller */
#else
  memset(x, 0, sizeof(float) * (size_t)n);
#endif
}

static void zero_task(void *vctx, int ith, int nth) {
  const res_ctx *c = vctx;
  long lo, hi;
  rp_kern_split_cols(c->n, ith, nth, &lo, &hi); /* cache-line boundaries */
  if (hi <= lo) return;
  if (c->streams)
    zero_stream(c->out + lo, hi - lo);
  else
    memset(c->out + lo, 0, sizeof(float) * (size_t)(hi - lo));
}

/* On the pool rather than the caller alone: the workers would otherwise spin
 * idle (or fall asleep) while the caller clears a gradient buffer. */
void rp_zero(float *x, long n, rp_pool *pool) {
  res_ctx c = {.out = x, .n = n, .streams = rp_zero_streams(n)};
  rp_kern_run(pool, zero_task, &c, n);
}

void rp_zero_cold(float *x, long n, rp_pool *pool) {
  res_ctx c = {.out = x, .n = n, .streams = rp_zero_cold_streams(n)};
  rp_kern_run(pool, zero_task, &c, n);
}
