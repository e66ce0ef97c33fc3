/* Private to flash_attention_fwd.c / _bwd.c: which keys of a tile each query
 * row sees, for every visibility (all, causal, and the per-row key ranges of
 * document masks). The tile loops only ask three questions: does any row of
 * this query block see a key of this tile (else skip it), does every row see
 * every key (no mask), and which contiguous span [a, a+n) of the tile row r
 * sees. Kept apart from the tile loops so that the masking rules live in one
 * place. */
#ifndef RP_FLASH_MASK_H
#define RP_FLASH_MASK_H

#include <string.h>

#include "flash_attention_internal.h"

static inline const int32_t *rp_flash_krange(const rp_flash_problem *pr, long b, long i) {
  return pr->krange + b * pr->krange_bs + 2 * i;
}

/* Visible keys of query row i within the tile of keys [j0, j0+nk): returns the
 * count n and sets *a to the first one's offset in the tile. */
static inline int rp_flash_row_span(const rp_flash_problem *pr, long b, long i, long j0, int nk,
                                    int *a) {
  *a = 0;
  if (pr->vis != RP_FLASH_VIS_RANGE) return rp_flash_visible(pr, i, j0, nk);
  const int32_t *r = rp_flash_krange(pr, b, i);
  long lo = RP_MAX((long)r[0], j0), hi = RP_MIN((long)r[1], j0 + nk);
  if (hi <= lo) return 0;
  *a = (int)(lo - j0);
  return (int)(hi - lo);
}

/* 1 when some query row of [i0, i0+nq) sees a key of [j0, j0+nk). The causal
 * and full cases are already bounded by the loops' key and query ranges. */
static inline int rp_flash_tile_any(const rp_flash_problem *pr, long b, long i0, int nq,
                                    long j0, int nk) {
  if (pr->vis != RP_FLASH_VIS_RANGE) return 1;
  for (int r = 0; r < nq; r++) {
    const int32_t *k = rp_flash_krange(pr, b, i0 + r);
    if (k[0] < j0 + nk && k[1] > j0 && k[1] > k[0]) return 1;
  }
  return 0;
}

/* 1 when every query row of [i0, i0+nq) sees every key of [j0, j0+nk). */
static inline int rp_flash_tile_full(const rp_flash_problem *pr, long b, long i0, int nq,
                                     long j0, int nk) {
  if (pr->vis != RP_FLASH_VIS_RANGE) return rp_flash_visible(pr, i0, j0, nk) == nk;
  for (int r = 0; r < nq; r++) {
    const int32_t *k = rp_flash_krange(pr, b, i0 + r);
    if (k[0] > j0 || k[1] < j0 + nk) return 0;
  }
  return 1;
}

/* The first query row that may see key j0 (every row for document ranges). */
static inline long rp_flash_first_query(const rp_flash_problem *pr, long j0) {
  if (pr->vis == RP_FLASH_VIS_ALL || pr->vis == RP_FLASH_VIS_RANGE) return 0;
  return RP_MAX(0L, pr->k_pos0 + j0 - pr->q_pos0);
}

/* Zeroes the masked-out parts [0, a) and [a+n, nk) of a score row. */
static inline void rp_flash_zero_outside(float *s, int a, int n, int nk) {
  if (a > 0) memset(s, 0, sizeof(float) * (size_t)a);
  if (a + n < nk) memset(s + a + n, 0, sizeof(float) * (size_t)(nk - a - n));
}

#endif
