/* Pipeline executor: runs one rank's action list of a schedule over MPI.
 *
 * The main thread walks the list: RECV posts MPI_Irecv into a receive buffer,
 * the compute that consumes it waits just before it needs the data; SEND posts
 * MPI_Isend of what the preceding compute produced, completed before that
 * buffer is reused. Tags come from the schedule (direction, stage,
 * micro-batch), so interleaved chunks never mix messages. Activations are
 * taken by F and released by B; under a split backward the part only I reads
 * is released by I and the part W reads (the layer inputs) by W. Every buffer
 * is a view into one arena per rank at the offset the schedule's liveness
 * plans for it (rp_schedule_plan_arena); a gradient send still reading bytes
 * that a later buffer takes is completed first.
 *
 * Emulated compute (emulate != NULL): F/B/I/W sleep for their share of the given
 * per-rank times instead of computing; communication is real. This gives true
 * timelines for schedule experiments with more ranks than cores. */
#ifndef RP_PIPELINE_H
#define RP_PIPELINE_H

#include <mpi.h>
#include <stdint.h>
#include "rp_docs.h"
#include "rp_model.h"
#include "rp_schedule.h"

typedef struct rp_pipeline rp_pipeline;

typedef struct {
  const rp_schedule *sched;   /* lowered */
  MPI_Comm comm;              /* the pipeline group; rank in it = schedule rank */
  rp_chunk **chunks;          /* this rank's v chunks, chunk c = stage c*p + rank */
  const rp_exec *exec;
  int B, T;                   /* micro-batch shape */
  const rp_costs *emulate;    /* NULL: real compute; else sleep tF/v, tB/v, tW/v seconds */
} rp_pipeline_cfg;

rp_status rp_pipeline_create(rp_pipeline **out, const rp_pipeline_cfg *cfg);
void rp_pipeline_destroy(rp_pipeline *p);

/* One pass of the schedule over m micro-batches. tokens, targets, pos are
 * [m][B*T] (only the first stage reads tokens/pos, only the last reads targets).
 * Gradients accumulate into the chunks' grads (the caller zeroes them).
 * *loss_sum gets the sum of valid-token losses on the rank holding the head, 0
 * elsewhere. */
rp_status rp_pipeline_run(rp_pipeline *p, const int32_t *tokens, const int32_t *targets,
                          const int32_t *pos, float dscale, double *loss_sum);
/* Packed micro-batches: docs[m] (each B x T_global, placed under cp), read by
 * the following runs; NULL for unpacked rows. */
void rp_pipeline_set_docs(rp_pipeline *p, const rp_docs *docs);

/* Measurements of the last run on this rank. Spans are seconds from the run's
 * start (after a barrier on comm); waits are the time blocked on receives or on
 * send completion inside each action. */
typedef struct {
  int n;
  rp_span *spans;          /* one per action of this rank */
  double *wait;            /* seconds blocked in MPI inside action i */
  double total_wait;
  int peak_live_acts;      /* micro-batches in flight at once (measured) */
  size_t act_slot_bytes;   /* bytes of one activation slot */
  int act_slots;           /* slots allocated (rp_schedule_plan_slots: the simulator's plan) */
  size_t wstash_bytes;     /* W stashes (zero-bubble: output grads kept from I to W) */
  int wstash_slots, recv_bufs, grad_bufs;  /* the plan's other classes, as allocated */
  size_t comm_buf_bytes;   /* receive + gradient-send buffers */
  /* All of those live in one arena planned by rp_schedule_plan_arena (the
   * simulator's plan): */
  size_t arena_bytes;        /* planned */
  size_t arena_alloc_bytes;  /* what the allocator accounted when it was allocated */
  size_t arena_live_peak;    /* the plan's lower bound: bytes live at its busiest action */
  size_t arena_pooled_bytes; /* what per-class slot pools would take */
  size_t measured_live_peak; /* most bytes bound to live buffers at once in the last run */
  const size_t *chunk_keep, *chunk_drop, *chunk_wstash; /* [v] buffer sizes the plan used */
  size_t msg_bytes;
  const char *arena_method;  /* which candidate layout the planner kept */
} rp_pipeline_stats;
const rp_pipeline_stats *rp_pipeline_last(const rp_pipeline *p);
const rp_pipeline_cfg *rp_pipeline_config(const rp_pipeline *p);

/* Gathers every rank's spans of the last run into a timeline on rank 0 of comm
 * (others get *out = NULL). Collective over comm. */
rp_status rp_pipeline_gather_timeline(rp_pipeline *p, rp_sim **out);
/* Chrome trace JSON (chrome://tracing, Perfetto): one track per rank, a span per
 * action and per wait. Collective; rank 0 writes. */
rp_status rp_pipeline_write_trace(rp_pipeline *p, const char *path);

#endif
