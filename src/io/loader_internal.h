/* Private to src/io/loader.c and pack.c: the loader's state. */
#ifndef RP_LOADER_INTERNAL_H
#define RP_LOADER_INTERNAL_H

#include "ringpipe/rp_data.h"

/* A packed document (or a T-token piece of a longer one): where its tokens are. */
typedef struct {
  int32_t shard;
  uint32_t len;
  uint64_t first;
} rp_pack_piece;

struct rp_loader {
  int B, T, file_order, rank, nranks, V;
  uint64_t seed;
  int nfiles;
  rp_shard *shards;
  uint64_t *win_start;     /* nfiles + 1 prefix sums of windows per shard */
  uint64_t W;              /* windows per epoch */
  size_t total_tokens;
  uint64_t next_global;    /* windows consumed by all ranks */
  uint16_t *buf;           /* B*T + 1 */
  /* packed mode (pack.c): pieces in file order, rows of T tokens over them */
  int packed, align;
  rp_pack_piece *pieces;
  uint64_t npieces, nrows;
  uint64_t *row_first;     /* nrows + 1: first piece of each row */
  uint64_t real_tokens, pad_tokens;
};

/* The window the next batch of this rank reads (file order or the epoch's
 * permutation); advances the stream. */
uint64_t rp_loader_take_window(rp_loader *l);
void rp_loader_pack_free(rp_loader *l);

#endif
