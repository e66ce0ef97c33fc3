/* The packed-weight cache (rp_sgemm.h) of the own GEMM and the bf16 GEMM: one
 * packed copy per weight and layout, found by the weight's address and shape,
 * valid until the owner invalidates the cache. The buffers are kept across
 * invalidations (the same weights come back every step) and accounted as
 * workspace. */
#include <stdlib.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_sgemm.h"
#include "sgemm_internal.h"

struct rp_sgemm_wcache {
  rp_sgemm_wentry *e;
  int n, cap;
  size_t max_entry_bytes, bytes;
  long hits, packs;
};

rp_status rp_sgemm_wcache_create(rp_sgemm_wcache **out, size_t max_entry_bytes) {
  *out = calloc(1, sizeof **out);
  if (!*out) return rp_err(RP_ENOMEM, "out of memory for the packed-weight cache");
  (*out)->max_entry_bytes = max_entry_bytes;
  return RP_OK;
}

void rp_sgemm_wcache_invalidate(rp_sgemm_wcache *c) {
  for (int i = 0; c && i < c->n; i++) c->e[i].valid = 0;
}

void rp_sgemm_wcache_free(rp_sgemm_wcache *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) rp_free(c->e[i].buf);
  free(c->e);
  free(c);
}

rp_sgemm_wcache_stats rp_sgemm_wcache_get_stats(const rp_sgemm_wcache *c) {
  rp_sgemm_wcache_stats s = {0};
  if (c) s = (rp_sgemm_wcache_stats){c->hits, c->packs, c->n, c->bytes};
  return s;
}

static int same_key(const rp_sgemm_wentry *e, const rp_sgemm_wentry *k) {
  return e->w == k->w && e->layout == k->layout && e->K == k->K && e->cols == k->cols &&
         e->kernel == k->kernel;
}

rp_sgemm_wentry *rp_sgemm_wcache_entry(rp_sgemm_wcache *c, const void *w, int layout, int K,
                                       int cols, int kernel, size_t bytes) {
  if (!c || bytes > c->max_entry_bytes) return NULL;
  const rp_sgemm_wentry key = {.w = w, .layout = layout, .K = K, .cols = cols, .kernel = kernel};
  for (int i = 0; i < c->n; i++)
    if (same_key(&c->e[i], &key)) {
      if (c->e[i].valid) c->hits++;
      else c->packs++;
      return &c->e[i];
    }
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 32;
    rp_sgemm_wentry *e = realloc(c->e, sizeof *e * (size_t)cap);
    if (!e) return NULL; /* no cache for this weight: the call packs as without one */
    c->e = e;
    c->cap = cap;
  }
  void *buf = rp_alloc(bytes, RP_MEM_WORKSPACE);
  if (!buf) return NULL;
  rp_sgemm_wentry *e = &c->e[c->n++];
  *e = key;
  e->buf = buf;
  c->bytes += bytes;
  c->packs++;
  return e;
}
