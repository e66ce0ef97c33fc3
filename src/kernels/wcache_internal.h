/* The packed-weight cache of rp_sgemm.h (sgemm_wcache.c), private to the GEMMs
 * that keep their weight packs in it: the own fp32 GEMM (sgemm.c) and the bf16
 * GEMM (gemm_bf16.c). */
#ifndef RP_WCACHE_INTERNAL_H
#define RP_WCACHE_INTERNAL_H

#include <stddef.h>

/* One weight's pack. w is the weight's address (fp32 for the own GEMM, its
 * bf16 copy for the bf16 GEMM); layout says which B it is and for which GEMM;
 * kernel is that GEMM's kernel id (a pack's layout depends on it); valid: buf
 * holds the pack. */
enum {
  RP_WPACK_FORWARD = 0,      /* own GEMM: the forward's B */
  RP_WPACK_DINP = 1,         /* own GEMM: dinp's B */
  RP_WPACK_BF16_FORWARD = 2, /* bf16 GEMM: the forward's B */
  RP_WPACK_BF16_DINP = 3     /* bf16 GEMM: dinp's B */
};
typedef struct {
  const void *w;
  int layout, K, cols, kernel;
  void *buf;
  int valid;
} rp_sgemm_wentry;

/* The entry for this weight, layout and shape (made on first use, its buffer
 * of bytes allocated), counted as a hit when valid; NULL when there is no
 * cache, the pack is over the cache's size limit, or memory is short (the
 * caller then packs into its workspace as without a cache). */
struct rp_sgemm_wcache;
rp_sgemm_wentry *rp_sgemm_wcache_entry(struct rp_sgemm_wcache *c, const void *w, int layout,
                                       int K, int cols, int kernel, size_t bytes);

#endif
