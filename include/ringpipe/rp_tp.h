/* Tensor parallelism over MPI: the rp_tp_ops table (rp_model.h) for the ranks
 * of one tp group (grid.tp_comm: tp innermost in the rank order, so they
 * share a node first). Every collective is the non-blocking MPI call plus a
 * watched wait (rp_wait), made by the main thread while the pool is idle; its
 * bytes and the seconds spent waiting are counted for the step reports. */
#ifndef RP_TP_H
#define RP_TP_H

#include <mpi.h>

#include "rp_model.h"

typedef struct rp_tp rp_tp;

/* overlap: provide the ring steps (rp_tp_ops.ring_*) from which sequence
 * parallelism builds all-gathers and reduce-scatters overlapped with the
 * GEMMs (--tp-overlap). */
rp_status rp_tp_create(rp_tp **out, MPI_Comm tp_comm, int overlap);
void rp_tp_destroy(rp_tp *t);
/* The table to put in rp_exec.tp (owned by t). */
const rp_tp_ops *rp_tp_ops_of(const rp_tp *t);

typedef struct {
  long calls;
  double bytes;      /* bytes each rank sends in the ring form of the collectives:
                      * 2 (t-1)/t x 4n per all-reduce of n floats, (t-1) x 4n per
                      * all-gather / reduce-scatter of n floats per rank */
  double wait_s;     /* seconds spent in the collectives' calls: the exposed TP
                      * communication (an overlapped ring step's transfer runs
                      * while the caller computes, outside these calls) */
} rp_tp_stats;
/* Counting restarts at rp_tp_begin_step; rp_tp_end_step keeps the step's
 * counts for rp_tp_last_step (evaluation and saving after it do not count). */
void rp_tp_begin_step(rp_tp *t);
void rp_tp_end_step(rp_tp *t);
rp_tp_stats rp_tp_last_step(const rp_tp *t);

#endif
