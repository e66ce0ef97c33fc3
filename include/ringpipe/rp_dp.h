/* Data parallelism: bucketed, non-blocking gradient reduction over the replicas
 * of a pipeline stage, and ZeRO-1 (optimizer state sharded over them).
 *
 * The model reports "these parameters' gradients are final for this
 * micro-batch" per unit (the head, each layer, the embeddings) through
 * rp_exec's grads_ready hook; a bucket (consecutive units in backward order,
 * about bucket_floats long) is reduced as soon as every unit in it has been
 * reported once per micro-batch of the step, so reductions of late layers run
 * while earlier layers' backward computes. The main thread keeps them moving
 * with MPI_Test (rp_dp_progress) between kernels.
 *
 * Plain data parallel: MPI_Iallreduce of each bucket; every replica then runs the
 * same AdamW step. ZeRO-1: MPI_Ireduce_scatter of each bucket so that replica k
 * owns the reduced gradients of the k-th part of every range; AdamW updates only
 * that part (its m and v are the only optimizer state the replica keeps), and
 * MPI_Iallgatherv brings everyone the updated parameters.
 *
 * Replicas are the ranks of one pipeline stage across data and context
 * parallelism (grid.dpcp_comm): they hold identical parameters. */
#ifndef RP_DP_H
#define RP_DP_H

#include <mpi.h>
#include "rp_kernels.h"
#include "rp_model.h"

typedef struct rp_dp rp_dp;

typedef struct {
  MPI_Comm comm;          /* the replicas (dp x cp ranks of this stage) */
  MPI_Comm tie_comm;      /* first + last pipeline stage (tied wte), or MPI_COMM_NULL */
  rp_chunk **chunks;      /* this rank's chunks */
  int nchunks;
  int microbatches;       /* reports per unit per step */
  size_t bucket_floats;   /* target bucket size */
  int zero;               /* 1: ZeRO-1 */
  int overlap;            /* 0: reduce everything after backward (the baseline) */
  rp_pool *pool;
  int skip_replicated;    /* tensor parallelism, tp rank > 0: the gradient norm counts the
                           * tensors every tp rank holds (RP_TP_REPLICATED) on rank 0 only */
} rp_dp_cfg;

rp_status rp_dp_create(rp_dp **out, const rp_dp_cfg *cfg);
void rp_dp_destroy(rp_dp *d);


void rp_dp_begin_step(rp_dp *d);
/* Reports per unit from the next step on (a job whose number of micro-batches
 * varies from step to step, as RL's rollouts do; ranks may differ). */
void rp_dp_set_microbatches(rp_dp *d, int microbatches);
/* unit: a layer index within the chunk, RP_UNIT_HEAD or RP_UNIT_EMBED (rp_model.h). */
void rp_dp_grads_ready(rp_dp *d, const rp_chunk *m, int unit);
void rp_dp_progress(rp_dp *d);
/* Completes every reduction (launching what the hooks did not). Afterwards the
 * gradients are summed over replicas (plain) or each replica's owned parts are
 * (ZeRO-1), and the tied wte gradient is summed between first and last stage. */
rp_status rp_dp_finish(rp_dp *d);

/* Sum of squares of the gradients this rank is responsible for (all of them,
 * or the owned parts under ZeRO-1; the last stage's copy of a tied wte is not
 * counted), NOT yet reduced over ranks. */
double rp_dp_local_sumsq(rp_dp *d, int count_wte);
/* AdamW on what this rank owns (grads scaled by grad_scale first), then (ZeRO-1)
 * all-gather of the updated parameters. t is the 1-based step. Returns 1 when
 * it has also written the bf16 copies of every parameter (below), else 0. */
int rp_dp_adamw(rp_dp *d, const rp_adamw_hparams *h, float grad_scale, int t);
/* --precision bf16 with round-to-nearest copies: copies16[c] is chunk c's
 * parameters in bf16 (same offsets), which rp_dp_adamw then writes in the
 * update's own pass, bitwise rp_bf16_from_f32_array of the updated weights.
 * Ignored under ZeRO-1, where most of the parameters arrive by the all-gather
 * after the update. NULL: no copies. */
rp_status rp_dp_set_bf16_copies(rp_dp *d, uint16_t *const *copies16);
/* 1 when rp_dp_adamw writes the bf16 copies (set above, and not ZeRO-1) */
int rp_dp_writes_bf16_copies(const rp_dp *d);

/* Optimizer state: this rank's m and v, chunk c, owned floats only, in the
 * order of rp_dp_owned_ranges. Under plain dp they are the whole chunk. */
float *rp_dp_m(rp_dp *d, int c);
size_t rp_dp_owned(const rp_dp *d, int c); /* floats of chunk c's m (and v) */
float *rp_dp_v(rp_dp *d, int c);
size_t rp_dp_optim_floats(const rp_dp *d);  /* m + v floats held by this rank */
/* Gathers the full m and v of chunk c into m_full/v_full (num_params each) on
 * every replica (collective), or scatters them back from full arrays. */
void rp_dp_gather_optim(rp_dp *d, int c, float *m_full, float *v_full);
void rp_dp_scatter_optim(rp_dp *d, int c, const float *m_full, const float *v_full);

typedef struct {
  double reduce_s;        /* wall time from the first launch to completion */
  double exposed_s;       /* time rp_dp_finish waited */
  int buckets;
} rp_dp_stats;
rp_dp_stats rp_dp_last_stats(const rp_dp *d);

#endif
