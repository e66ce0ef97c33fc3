/* Documents packed into the rows of a batch (variable-length sequences).
 *
 * A row of T tokens holds documents back to back; row b's document d covers
 * positions [cu(b)[d], cu(b)[d+1]) with cu(b)[0] = 0 and cu(b)[ndocs[b]] = T
 * (the cu_seqlens convention). A padding tail is a document of its own whose
 * targets are -1: attention never crosses a document boundary, so padding is
 * invisible to the real documents. Within a document attention is causal.
 *
 * The layout always describes the WHOLE row (before context-parallel sharding):
 * a cp backend maps its local rows to global positions itself. */
#ifndef RP_DOCS_H
#define RP_DOCS_H

#include <stdint.h>
#include "rp_base.h"

typedef struct rp_docs_s {
  int B, T;
  int *ndocs;     /* [B] documents in each row (>= 1) */
  int32_t *cu;    /* [B][T+1]: row b's cumulative lengths start at cu + b*(T+1) */
  /* context-parallel placement (rp_cp_docs_place in rp_cp.h), 0 / NULL when
   * none: rank r holds rows gpos[(b*cp + r)*(T/cp) + t], t < T/cp, of row b,
   * ascending global positions */
  int cp;
  int32_t *gpos;
} rp_docs;

rp_status rp_docs_init(rp_docs *d, int B, int T);   /* every row one document of T */
void rp_docs_free(rp_docs *d);
static inline const int32_t *rp_docs_row(const rp_docs *d, int b) {
  return d->cu + (long)b * (d->T + 1);
}
/* Row b from n lengths (each >= 1, summing to T). RP_EINVAL names the bad one. */
rp_status rp_docs_set_row(rp_docs *d, int b, const int32_t *lens, int n);
/* Checks every row (lengths >= 1, cu ascending from 0 to T), RP_EINVAL naming
 * the row and document, and that the layout is B x T. */
rp_status rp_docs_check(const rp_docs *d, int B, int T);
/* Start of the document holding position p of row b (binary search). */
int rp_docs_start(const rp_docs *d, int b, int p);
/* pos[B*T]: position ids restarting at 0 for each document. */
void rp_docs_positions(const rp_docs *d, int32_t *pos);
/* Visible key range of every query of self attention over whole rows:
 * kr[(b*T + t)*2 + 0..1] = [document start, t + 1). */
void rp_docs_self_ranges(const rp_docs *d, int32_t *kr);
/* Keys sorted by global position kpos[0..nk) (one row), query at global
 * position qp of row b: the index range [lo, hi) of the keys it sees (same
 * document, kpos <= qp); lo == hi when none. */
void rp_docs_key_range(const rp_docs *d, int b, int qp, const int32_t *kpos, int nk, int32_t *lo,
                       int32_t *hi);
/* Causal (query, key) pairs inside documents: sum over docs of L(L+1)/2. */
double rp_docs_pairs(const rp_docs *d);

/* A multimodal-like length mix for experiments: each document is "long" (an
 * image+text sample) with probability long_frac, its length uniform in
 * [long_min, long_max], else short, log-uniform in [short_min, short_max]; a
 * row's last document is cut to end the row. Seeded: the same seed gives the
 * same rows everywhere. */
typedef struct {
  int short_min, short_max, long_min, long_max;
  double long_frac;
} rp_docs_mix;
/* The default: a few 4096..8192 among many 64..512 (3% of documents). */
rp_docs_mix rp_docs_mix_default(void);
rp_status rp_docs_fill_mix(rp_docs *d, const rp_docs_mix *mix, uint64_t seed);

#endif
