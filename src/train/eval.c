/* Validation loss: forward only. Under pipelining the stages pass activations
 * along with blocking sends, one global stage after another. */
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_train.h"
#include "train_internal.h"

/* Forward of one batch through every stage; loss sum on the last stage's rank. */
static rp_status pipeline_forward(rp_trainer *t, rp_acts *a, rp_layer_acts *lv, void *mem,
                                  double *sum, int *valid) {
  int p = t->grid.pp, S = p * t->nchunks, N = t->o.batch * t->T_local;
  size_t nc = (size_t)N * t->cfg.C / (t->o.sp ? t->grid.tp : 1);  /* sp: N/tp rows */
  for (int g = 0; g < S; g++) {
    int owner = 0, chunk = g, prev = -1, next = -1, c;
    if (p > 1) {
      rp_schedule_owner(t->sched, g, &owner, &chunk);
      if (g > 0) rp_schedule_owner(t->sched, g - 1, &prev, &c);
      if (g < S - 1) rp_schedule_owner(t->sched, g + 1, &next, &c);
    }
    if (owner != t->grid.pp_rank) continue;
    rp_chunk *m = &t->chunks[chunk];
    /* the previous stage ran here (the V's turn): its output, still in mem,
     * moves to this chunk's input before anything else is written */
    const float *local_out = g > 0 && prev == owner ? a->output : NULL;
    rp_acts_bind(a, lv, m, t->exec.attn, mem, t->o.batch, t->T_local);
    if (local_out) memmove(a->input, local_out, nc * sizeof(float));
    else if (g > 0)
      MPI_Recv(a->input, (int)nc, MPI_FLOAT, prev, g, t->grid.pp_comm, MPI_STATUS_IGNORE);
    memcpy(a->tokens, t->batch_tokens, N * sizeof(int32_t));
    memcpy(a->targets, t->batch_targets, N * sizeof(int32_t));
    memcpy(a->pos, t->batch_pos, N * sizeof(int32_t));
    a->docs = t->o.pack ? &t->docs[0] : NULL;
    int v = 0;
    *sum += rp_chunk_forward(m, a, &v, &t->exec);
    *valid += v;
    if (g < S - 1 && next != owner)
      MPI_Send(a->output, (int)nc, MPI_FLOAT, next, g + 1, t->grid.pp_comm);
  }
  return RP_OK;
}

/* The validation set is the first `batches` windows of the val stream, whatever
 * the layout: the loader hands window g to data-parallel rank g % dp, so rank r
 * evaluates the windows g < batches with g % dp == r and the sums over ranks
 * cover exactly the windows one rank would (the same number, up to the order of
 * a double sum). */
static int my_val_windows(const rp_trainer *t, int batches) {
  int dp = t->grid.dp, r = t->grid.dp_rank;
  return batches > r ? (batches - r + dp - 1) / dp : 0;
}

rp_status rp_trainer_eval(rp_trainer *t, int batches, double *loss) {
  rp_loader_reset(t->val);
  int mine = my_val_windows(t, batches);
  size_t bytes = 0;
  int maxl = 1;
  for (int c = 0; c < t->nchunks; c++) {
    size_t b = rp_acts_bytes(&t->chunks[c], t->exec.attn, t->o.batch, t->T_local);
    if (b > bytes) bytes = b;
    if (t->chunks[c].spec.num_layers > maxl) maxl = t->chunks[c].spec.num_layers;
  }
  /* pp == 1 reuses the training activations; the pipeline borrows a buffer. */
  void *mem = t->grid.pp > 1 ? rp_alloc(bytes, RP_MEM_ACTS) : t->acts_mem;
  rp_layer_acts *lv = t->grid.pp > 1 ? calloc(maxl, sizeof *lv) : t->layer_views;
  if (!mem || !lv) return rp_err(RP_ENOMEM, "out of memory for evaluation");
  double sum = 0;
  long count = 0;
  rp_status s = RP_OK;
  rp_acts a;
  for (int b = 0; b < mine && s == RP_OK; b++) {
    s = rp_trainer_load_batch(t, t->val, 0);
    int valid = 0;
    if (s == RP_OK) s = pipeline_forward(t, &a, lv, mem, &sum, &valid);
    count += valid;
  }
  if (t->grid.pp > 1) {
    rp_free(mem);
    free(lv);
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, t->grid.pp_comm);
    MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_LONG, MPI_SUM, t->grid.pp_comm);
  }
  if (t->grid.dp * t->grid.cp > 1) {
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, t->grid.dpcp_comm);
    MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_LONG, MPI_SUM, t->grid.dpcp_comm);
  }
  *loss = count ? sum / count : 0.0;
  return s;
}
