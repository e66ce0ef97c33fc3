/* Context-parallel layouts: which global rows each rank of the cp ring holds
 * (zigzag or contiguous), position ids, and moving [outer, T, row] arrays between
 * the full sequence and a rank's shard. */
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_cp.h"

const char *rp_cp_layout_name(rp_cp_layout layout) {
  switch (layout) {
    case RP_CP_ZIGZAG: return "zigzag";
    case RP_CP_CONTIGUOUS: return "contiguous";
  }
  return "?";
}

rp_status rp_cp_layout_parse(const char *name, rp_cp_layout *out) {
  if (name && strcmp(name, "zigzag") == 0) {
    *out = RP_CP_ZIGZAG;
    return RP_OK;
  }
  if (name && strcmp(name, "contiguous") == 0) {
    *out = RP_CP_CONTIGUOUS;
    return RP_OK;
  }
  return rp_err(RP_EINVAL, "--cp-layout '%s' is unknown; use zigzag or contiguous",
                name ? name : "(null)");
}

rp_status rp_cp_check(rp_cp_layout layout, int T, int P) {
  if (P < 1) return rp_err(RP_EINVAL, "context-parallel size %d must be >= 1", P);
  if (T < 1) return rp_err(RP_EINVAL, "sequence length %d must be >= 1", T);
  if (layout == RP_CP_ZIGZAG) {
    if (T % (2 * P) != 0)
      return rp_err(RP_EINVAL,
                    "--seq %d is not divisible by 2 x --cp = %d, which the zigzag layout "
                    "needs (2P chunks); use a multiple of %d such as %d, or --cp-layout "
                    "contiguous",
                    T, 2 * P, 2 * P, RP_MAX(1, T / (2 * P)) * 2 * P);
    return RP_OK;
  }
  if (layout == RP_CP_CONTIGUOUS) {
    if (T % P != 0)
      return rp_err(RP_EINVAL,
                    "--seq %d is not divisible by --cp %d, which the contiguous layout "
                    "needs; use a multiple of %d such as %d",
                    T, P, P, RP_MAX(1, T / P) * P);
    return RP_OK;
  }
  return rp_err(RP_EINVAL, "cp layout %d is unknown; use zigzag or contiguous", (int)layout);
}

rp_status rp_cp_pieces_of(rp_cp_pieces *pc, rp_cp_layout layout, int T, int P, int r) {
  RP_TRY(rp_cp_check(layout, T, P));
  if (r < 0 || r >= P) return rp_err(RP_EINVAL, "cp rank %d is outside 0..%d", r, P - 1);
  memset(pc, 0, sizeof *pc);
  if (layout == RP_CP_ZIGZAG) {
    int c = T / (2 * P);
    pc->n = 2;
    pc->len = c;
    pc->local0[0] = 0;
    pc->global0[0] = r * c;
    pc->local0[1] = c;
    pc->global0[1] = (2 * P - 1 - r) * c;
  } else {
    pc->n = 1;
    pc->len = T / P;
    pc->global0[0] = r * (T / P);
  }
  return RP_OK;
}

long rp_cp_global_pos(const rp_cp_pieces *pc, int t) {
  int i = pc->n == 2 && t >= pc->len ? 1 : 0;
  return (long)pc->global0[i] + (t - pc->local0[i]);
}

rp_status rp_cp_positions(int32_t *pos, int B, rp_cp_layout layout, int T, int P, int r) {
  rp_cp_pieces pc;
  RP_TRY(rp_cp_pieces_of(&pc, layout, T, P, r));
  int Tl = T / P;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tl; t++) pos[(long)b * Tl + t] = (int32_t)rp_cp_global_pos(&pc, t);
  return RP_OK;
}

/* Copies piece by piece: each piece is len consecutive rows on both sides. */
static rp_status move_rows(void *local, const void *full, size_t row_bytes, int outer,
                           rp_cp_layout layout, int T, int P, int r, int to_local) {
  rp_cp_pieces pc;
  RP_TRY(rp_cp_pieces_of(&pc, layout, T, P, r));
  if (outer < 0) return rp_err(RP_EINVAL, "outer count %d must be >= 0", outer);
  const size_t Tl = (size_t)(T / P), piece = (size_t)pc.len * row_bytes;
  for (size_t o = 0; o < (size_t)outer; o++)
    for (int i = 0; i < pc.n; i++) {
      char *l = (char *)local + (o * Tl + (size_t)pc.local0[i]) * row_bytes;
      char *f = (char *)full + (o * (size_t)T + (size_t)pc.global0[i]) * row_bytes;
      if (to_local)
        memcpy(l, f, piece);
      else
        memcpy(f, l, piece);
    }
  return RP_OK;
}

rp_status rp_cp_shard_rows(void *local, const void *full, size_t row_bytes, int outer,
                           rp_cp_layout layout, int T, int P, int r) {
  return move_rows(local, (void *)full, row_bytes, outer, layout, T, P, r, 1);
}

rp_status rp_cp_unshard_rows(void *full, const void *local, size_t row_bytes, int outer,
                             rp_cp_layout layout, int T, int P, int r) {
  return move_rows((void *)local, full, row_bytes, outer, layout, T, P, r, 0);
}

rp_status rp_cp_shard_tokens(int32_t *local, const int32_t *full, int B, rp_cp_layout layout,
                             int T, int P, int r) {
  return rp_cp_shard_rows(local, full, sizeof(int32_t), B, layout, T, P, r);
}

rp_status rp_cp_gather_rows(void *full, const void *local, size_t row_bytes, int outer,
                            rp_cp_layout layout, int T, MPI_Comm cp_comm) {
  int P = 1, rank = 0;
  MPI_Comm_size(cp_comm, &P);
  MPI_Comm_rank(cp_comm, &rank);
  RP_TRY(rp_cp_check(layout, T, P));
  size_t shard = (size_t)outer * (size_t)(T / P) * row_bytes;
  if (shard > (size_t)INT32_MAX)
    return rp_err(RP_EINVAL, "cp gather of %zu bytes per rank exceeds MPI's int count; "
                  "gather fewer rows at a time", shard);
  char *all = rp_alloc(shard * (size_t)P + 1, RP_MEM_COMM);
  if (!all) return RP_ENOMEM;
  int rc = MPI_Allgather(local, (int)shard, MPI_BYTE, all, (int)shard, MPI_BYTE, cp_comm);
  rp_status s = rc == MPI_SUCCESS ? RP_OK : rp_err(RP_EMPI, "MPI_Allgather of cp shards failed");
  for (int q = 0; q < P && s == RP_OK; q++)
    s = rp_cp_unshard_rows(full, all + (size_t)q * shard, row_bytes, outer, layout, T, P, q);
  rp_free(all);
  return s;
}

/* Query at global position p sees p+1 keys: sum over the rank's pieces. */
double rp_cp_visible_pairs(rp_cp_layout layout, int T, int P, int r) {
  rp_cp_pieces pc;
  if (rp_cp_pieces_of(&pc, layout, T, P, r) != RP_OK) return 0.0;
  double n = 0.0;
  for (int i = 0; i < pc.n; i++) {
    double a = pc.global0[i] + 1.0, b = pc.global0[i] + (double)pc.len;
    n += (a + b) * pc.len / 2.0;
  }
  return n;
}
