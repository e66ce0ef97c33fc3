/* Checkpoints under tensor parallelism: files always hold the whole tensors
 * with their GPT-2 names, whatever the layout. Saving gathers each tp rank's
 * shards (weights and AdamW m, v) onto tp rank 0, which puts them together
 * into a whole (tp = 1) copy of its chunk; loading reads the whole tensors
 * into such a copy and each rank keeps its slice. */
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_checkpoint.h"
#include "train_internal.h"

void rp_tp_whole_free(rp_tp_whole *w) {
  if (w->chunk.params) rp_chunk_free(&w->chunk);
  rp_free(w->m);
  rp_free(w->v);
  memset(w, 0, sizeof *w);
}

/* A whole copy of chunk c (params, and m, v when with_optim). */
static rp_status whole_init(const rp_trainer *t, int c, int with_optim, rp_tp_whole *w) {
  memset(w, 0, sizeof *w);
  RP_TRY(rp_chunk_init(&w->chunk, &t->cfg, &t->chunks[c].spec));
  if (!with_optim) return RP_OK;
  size_t n = w->chunk.num_params;
  w->m = rp_alloc(n * sizeof(float), RP_MEM_WORKSPACE);
  w->v = rp_alloc(n * sizeof(float), RP_MEM_WORKSPACE);
  if (!w->m || !w->v) {
    rp_tp_whole_free(w);
    return rp_err(RP_ENOMEM, "out of memory for a whole copy of the model's state");
  }
  return RP_OK;
}

/* One array of the chunk (params, m or v: local floats on every tp rank)
 * gathered on tp rank 0 and put together into whole (its full buffer). */
static void gather_array(const rp_trainer *t, const rp_chunk *mine, const float *local,
                         float *all, const rp_chunk *whole, float *whole_buf) {
  int n = (int)mine->num_params;
  MPI_Gather(local, n, MPI_FLOAT, all, n, MPI_FLOAT, 0, t->grid.tp_comm);
  if (t->grid.tp_rank != 0) return;
  for (int r = 0; r < t->grid.tp; r++) {
    rp_chunk view = *mine;  /* rank r's shards have the same layout, another slice */
    view.tp_rank = r;
    rp_chunk_unshard_into(&view, all + (size_t)r * n, whole, whole_buf);
  }
}

rp_status rp_tp_gather_whole(const rp_trainer *t, int c, const float *m, const float *v,
                             rp_tp_whole *w) {
  const rp_chunk *mine = &t->chunks[c];
  rp_status s = t->grid.tp_rank == 0 ? whole_init(t, c, 1, w) : RP_OK;
  float *all = NULL;
  if (s == RP_OK && t->grid.tp_rank == 0) {
    all = rp_alloc(mine->num_params * t->grid.tp * sizeof(float), RP_MEM_WORKSPACE);
    if (!all) s = rp_err(RP_ENOMEM, "out of memory for the tensor-parallel checkpoint gather");
  }
  /* every tp rank takes part in the gathers whatever tp rank 0's allocations did */
  int ok = s == RP_OK;
  MPI_Bcast(&ok, 1, MPI_INT, 0, t->grid.tp_comm);
  if (ok) {
    gather_array(t, mine, mine->params, all, &w->chunk, w->chunk.params);
    gather_array(t, mine, m, all, &w->chunk, w->m);
    gather_array(t, mine, v, all, &w->chunk, w->v);
  }
  rp_free(all);
  return ok ? RP_OK : t->grid.tp_rank == 0 ? s : rp_err(RP_ENOMEM, "tp rank 0 is out of memory");
}

rp_status rp_tp_load_whole(const rp_trainer *t, int c, const char *dir, float *m, float *v) {
  rp_tp_whole w;
  RP_TRY(whole_init(t, c, m != NULL, &w));
  rp_status s;
  if (m) {
    rp_ckpt_load_part part = {&w.chunk, w.m, w.v};
    s = rp_ckpt_load(dir, &part, 1);
  } else {
    s = rp_load_weights(&w.chunk, dir);
  }
  if (s == RP_OK) {
    rp_chunk *mine = &t->chunks[c];
    rp_chunk_shard_from(mine, mine->params, &w.chunk, w.chunk.params);
    if (m) rp_chunk_shard_from(mine, m, &w.chunk, w.m);
    if (v) rp_chunk_shard_from(mine, v, &w.chunk, w.v);
  }
  rp_tp_whole_free(&w);
  return s;
}
