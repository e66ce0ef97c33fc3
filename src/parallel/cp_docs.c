/* Context-parallel placement of packed rows (rp_cp.h, "packed rows"): which
 * global rows of each packed row every rank holds, for the whole-row layouts,
 * the per-document zigzag and the cost-balanced assignment, and the sharding
 * and work accounting that follow from a placement. */
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_cp.h"

void rp_cp_split_resolve(rp_cp_split split, rp_cp_layout *base, rp_cp_place *place) {
  switch (split) {
    case RP_CP_SPLIT_DOC_ZIGZAG: *base = RP_CP_ZIGZAG, *place = RP_CP_PLACE_DOC_ZIGZAG; return;
    case RP_CP_SPLIT_BALANCED: *base = RP_CP_CONTIGUOUS, *place = RP_CP_PLACE_BALANCED; return;
    case RP_CP_SPLIT_CONTIGUOUS: *base = RP_CP_CONTIGUOUS, *place = RP_CP_PLACE_ROW; return;
    case RP_CP_SPLIT_ZIGZAG: break;
  }
  *base = RP_CP_ZIGZAG, *place = RP_CP_PLACE_ROW;
}

const char *rp_cp_place_name(rp_cp_place place) {
  switch (place) {
    case RP_CP_PLACE_ROW: return "row";
    case RP_CP_PLACE_DOC_ZIGZAG: return "doc-zigzag";
    case RP_CP_PLACE_BALANCED: return "balanced";
  }
  return "?";
}

static void place_row(rp_docs *d, rp_cp_layout base, int P) {
  const int Tl = d->T / P;
  for (int b = 0; b < d->B; b++)
    for (int r = 0; r < P; r++) {
      rp_cp_pieces pc;
      rp_cp_pieces_of(&pc, base, d->T, P, r);  /* checked by the caller */
      int32_t *g = (int32_t *)rp_cp_docs_rows(d, b, r);
      for (int t = 0; t < Tl; t++) g[t] = (int32_t)rp_cp_global_pos(&pc, t);
    }
}

static rp_status place_doc_zigzag(rp_docs *d, int P) {
  for (int b = 0; b < d->B; b++) {
    const int32_t *cu = rp_docs_row(d, b);
    for (int i = 0; i < d->ndocs[b]; i++)
      if ((cu[i + 1] - cu[i]) % (2 * P) != 0)
        return rp_err(RP_EINVAL, "--cp-layout doc-zigzag cannot place document %d of row %d: "
                      "its length %d is not a multiple of 2 x --cp = %d; pack with "
                      "--pack-align %d (pads each document) or use --cp-layout balanced", i, b,
                      cu[i + 1] - cu[i], 2 * P, 2 * P);
    for (int r = 0; r < P; r++) {
      int32_t *g = (int32_t *)rp_cp_docs_rows(d, b, r);
      int n = 0;
      for (int i = 0; i < d->ndocs[b]; i++) {
        const int c = (cu[i + 1] - cu[i]) / (2 * P);
        for (int t = 0; t < c; t++) g[n++] = cu[i] + r * c + t;
        for (int t = 0; t < c; t++) g[n++] = cu[i] + (2 * P - 1 - r) * c + t;
      }
    }
  }
  return RP_OK;
}

/* Block rows for BALANCED: the largest divisor of T/P that gives every rank at
 * least 16 blocks (or 1 when T/P < 16). */
static int balanced_block(int Tl) {
  int bs = Tl / 16 > 0 ? Tl / 16 : 1;
  while (Tl % bs != 0) bs--;
  return bs;
}

typedef struct {
  double cost;
  int block;
} block_cost;

static int by_cost_desc(const void *a, const void *b) {
  const block_cost *x = a, *y = b;
  if (x->cost != y->cost) return x->cost < y->cost ? 1 : -1;
  return x->block - y->block;   /* a total order: every rank sorts alike */
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static rp_status place_balanced(rp_docs *d, int P) {
  const int Tl = d->T / P, bs = balanced_block(Tl), nb = d->T / bs, per = nb / P;
  block_cost *bc = malloc(sizeof *bc * (size_t)nb);
  double *load = malloc(sizeof *load * (size_t)P);
  int *count = malloc(sizeof *count * (size_t)P);
  if (!bc || !load || !count) {
    free(bc), free(load), free(count);
    return rp_err(RP_ENOMEM, "out of memory placing %d blocks", nb);
  }
  for (int b = 0; b < d->B; b++) {
    for (int k = 0; k < nb; k++) {
      double c = 0;
      for (int t = k * bs; t < (k + 1) * bs; t++) c += t - rp_docs_start(d, b, t) + 1;
      bc[k] = (block_cost){c, k};
    }
    qsort(bc, (size_t)nb, sizeof *bc, by_cost_desc);
    for (int r = 0; r < P; r++) load[r] = 0, count[r] = 0;
    for (int k = 0; k < nb; k++) {
      int best = -1;
      for (int r = 0; r < P; r++)
        if (count[r] < per && (best < 0 || load[r] < load[best])) best = r;
      int32_t *g = (int32_t *)rp_cp_docs_rows(d, b, best) + (long)count[best] * bs;
      for (int t = 0; t < bs; t++) g[t] = bc[k].block * bs + t;
      load[best] += bc[k].cost;
      count[best]++;
    }
    for (int r = 0; r < P; r++)   /* local rows in global order */
      qsort((int32_t *)rp_cp_docs_rows(d, b, r), (size_t)Tl, sizeof(int32_t), cmp_i32);
  }
  free(bc), free(load), free(count);
  return RP_OK;
}

rp_status rp_cp_docs_place(rp_docs *d, rp_cp_layout base, rp_cp_place place, int P) {
  RP_TRY(rp_cp_check(base, d->T, P));
  rp_free(d->gpos);
  d->gpos = rp_alloc(sizeof(int32_t) * (size_t)d->B * d->T, RP_MEM_DATA);
  d->cp = 0;
  if (!d->gpos) return rp_err(RP_ENOMEM, "out of memory placing a %d x %d batch", d->B, d->T);
  d->cp = P;
  rp_status s = RP_OK;
  if (place == RP_CP_PLACE_ROW) place_row(d, base, P);
  else if (place == RP_CP_PLACE_DOC_ZIGZAG) s = place_doc_zigzag(d, P);
  else if (place == RP_CP_PLACE_BALANCED) s = place_balanced(d, P);
  else s = rp_err(RP_EINVAL, "cp placement %d unknown", (int)place);
  if (s != RP_OK) {
    rp_free(d->gpos);
    d->gpos = NULL;
    d->cp = 0;
  }
  return s;
}

void rp_cp_docs_shard(void *local, const void *full, size_t row_bytes, const rp_docs *d, int r) {
  const int Tl = d->T / d->cp;
  for (int b = 0; b < d->B; b++) {
    const int32_t *g = rp_cp_docs_rows(d, b, r);
    for (int t = 0; t < Tl; t++)
      memcpy((char *)local + ((size_t)b * Tl + t) * row_bytes,
             (const char *)full + ((size_t)b * d->T + g[t]) * row_bytes, row_bytes);
  }
}

void rp_cp_docs_positions(int32_t *pos, const rp_docs *d, int r) {
  const int Tl = d->T / d->cp;
  for (int b = 0; b < d->B; b++) {
    const int32_t *g = rp_cp_docs_rows(d, b, r);
    for (int t = 0; t < Tl; t++) pos[(long)b * Tl + t] = g[t] - rp_docs_start(d, b, g[t]);
  }
}

double rp_cp_docs_work(const rp_docs *d, int r) {
  const int Tl = d->T / d->cp;
  double n = 0;
  for (int b = 0; b < d->B; b++) {
    const int32_t *g = rp_cp_docs_rows(d, b, r);
    for (int t = 0; t < Tl; t++) n += g[t] - rp_docs_start(d, b, g[t]) + 1;
  }
  return n;
}
