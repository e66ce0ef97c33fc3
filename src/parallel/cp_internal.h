/* Private to the context-parallel backends (ring_attention.c, ulysses.c): the
 * state every cp backend starts with, so that destroy and the statistics work
 * on either kind through the rp_attn_backend's ctx. */
#ifndef RP_CP_INTERNAL_H
#define RP_CP_INTERNAL_H

#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_docs.h"

#define RP_CP_MAGIC 0x52504350u /* "RPCP": marks a ctx as a cp backend's */

typedef struct rp_cp_common {
  unsigned magic;
  MPI_Comm comm;            /* duplicate of the caller's cp communicator */
  int P, rank;
  rp_cp_layout layout;
  rp_cp_stats st[2];        /* [0] forward, [1] backward */
  rp_flash_config flash;    /* the run's flash settings (all zero: automatic) */
  int32_t *kr;              /* packed rows: key ranges of a step [B][Tl][2] */
  size_t kr_cap;
  void (*free_fn)(struct rp_cp_common *c);  /* frees the kind's buffers and c */
} rp_cp_common;

/* Duplicates comm and fills the common part (collective over comm). */
rp_status rp_cp_common_init(rp_cp_common *c, MPI_Comm comm, rp_cp_layout layout);

/* A packed batch must be placed (rp_cp_docs_place) over this backend's P ranks
 * and be B x T*P; NULL docs is fine. */
rp_status rp_cp_docs_prepare(rp_cp_common *c, const rp_docs *docs, int B, int T);
/* Key ranges [B][Tl][2] of this rank's queries against rank peer's rows (both
 * sorted by global position; same document, key <= query), in *buf (grown to
 * fit); *pairs gets the visible pairs. NULL when out of memory. */
int32_t *rp_cp_doc_ranges(rp_cp_common *c, int32_t **buf, size_t *cap, const rp_docs *d, int B,
                          int Tl, int peer, double *pairs);
rp_status rp_cp_reserve_i32(int32_t **buf, size_t *cap, size_t n);

/* Grows *buf to at least n floats (contents not kept). */
rp_status rp_cp_reserve(float **buf, size_t *cap, size_t n, int cat);

#endif
