/* Bookkeeping shared by the context-parallel backends: the duplicated
 * communicator, scratch growth, statistics and destruction. */
#include <stdlib.h>
#include <string.h>

#include "cp_internal.h"
#include "ringpipe/rp_arena.h"

rp_status rp_cp_common_init(rp_cp_common *c, MPI_Comm comm, rp_cp_layout layout) {
  c->magic = RP_CP_MAGIC;
  c->layout = layout;
  /* A private communicator: the ring's tags can never match a message of the
   * pipeline executor or of another backend on the same cp group. */
  if (MPI_Comm_dup(comm, &c->comm) != MPI_SUCCESS)
    return rp_err(RP_EMPI, "MPI_Comm_dup of the cp communicator failed");
  MPI_Comm_size(c->comm, &c->P);
  MPI_Comm_rank(c->comm, &c->rank);
  return RP_OK;
}

rp_status rp_cp_reserve(float **buf, size_t *cap, size_t n, int cat) {
  if (n <= *cap && *buf) return RP_OK;
  rp_free(*buf);
  *cap = 0;
  *buf = rp_alloc(sizeof(float) * (n ? n : 1), (rp_mem_cat)cat);
  if (!*buf) return RP_ENOMEM;
  *cap = n;
  return RP_OK;
}

static rp_cp_common *common_of(const rp_attn_backend *a) {
  rp_cp_common *c = a ? a->ctx : NULL;
  return c && c->magic == RP_CP_MAGIC ? c : NULL;
}

rp_status rp_cp_set_flash(rp_attn_backend *a, const rp_flash_config *cfg) {
  rp_cp_common *c = common_of(a);
  if (!c)
    return rp_err(RP_EINVAL, "attention backend '%s' is not a context-parallel backend",
                  a && a->name ? a->name : "(null)");
  RP_TRY(rp_flash_config_check(cfg));
  if (cfg) c->flash = *cfg;
  else memset(&c->flash, 0, sizeof c->flash);
  return RP_OK;
}

void rp_cp_destroy(rp_attn_backend *a) {
  rp_cp_common *c = common_of(a);
  if (!c) return;
  c->magic = 0;
  MPI_Comm_free(&c->comm);
  rp_free(c->kr);
  c->free_fn(c);
  free(a);
}

rp_status rp_cp_get_stats(const rp_attn_backend *a, rp_cp_stats *fwd, rp_cp_stats *bwd) {
  const rp_cp_common *c = common_of(a);
  if (!c)
    return rp_err(RP_EINVAL, "attention backend '%s' is not a context-parallel backend",
                  a && a->name ? a->name : "(null)");
  if (fwd) *fwd = c->st[0];
  if (bwd) *bwd = c->st[1];
  return RP_OK;
}

void rp_cp_reset_stats(rp_attn_backend *a) {
  rp_cp_common *c = common_of(a);
  if (c) memset(c->st, 0, sizeof c->st);
}

rp_status rp_cp_docs_prepare(rp_cp_common *c, const rp_docs *docs, int B, int T) {
  if (!docs) return RP_OK;
  RP_TRY(rp_docs_check(docs, B, T * c->P));
  if (docs->cp != c->P || !docs->gpos)
    return rp_err(RP_EINVAL, "the packed batch is placed over %d cp ranks, the attention runs "
                  "on %d; place it with rp_cp_docs_place first", docs->cp, c->P);
  return RP_OK;
}

int32_t *rp_cp_doc_ranges(rp_cp_common *c, int32_t **buf, size_t *cap, const rp_docs *d, int B,
                          int Tl, int peer, double *pairs) {
  if (rp_cp_reserve_i32(buf, cap, (size_t)B * Tl * 2) != RP_OK) return NULL;
  double n = 0;
  for (int b = 0; b < B; b++) {
    const int32_t *q = rp_cp_docs_rows(d, b, c->rank), *k = rp_cp_docs_rows(d, b, peer);
    int32_t *kr = *buf + (long)b * Tl * 2;
    for (int t = 0; t < Tl; t++) {
      rp_docs_key_range(d, b, q[t], k, Tl, &kr[2 * t], &kr[2 * t + 1]);
      n += kr[2 * t + 1] - kr[2 * t];
    }
  }
  *pairs = n;
  return *buf;
}

rp_status rp_cp_reserve_i32(int32_t **buf, size_t *cap, size_t n) {
  if (n <= *cap && *buf) return RP_OK;
  rp_free(*buf);
  *cap = 0;
  *buf = rp_alloc(sizeof(int32_t) * (n ? n : 1), RP_MEM_WORKSPACE);
  if (!*buf) return rp_err(RP_ENOMEM, "out of memory for %zu key ranges", n);
  *cap = n;
  return RP_OK;
}
