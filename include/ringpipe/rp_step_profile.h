/* The step profile: where a training step's time goes (GEMM, attention,
 * LayerNorm, GELU, cross-entropy, embeddings, optimizer, copies, data, comm
 * waits, idle) and what fraction of the machine's peak each part reaches.
 *
 * Times come from the component profiler (rp_prof.h); the work of each part is
 * counted from the model's shapes (rp_step_work_of): FLOPs for the GEMMs and
 * attention, compared with the FMA peak (the register-only probe of the widest
 * fp32 SIMD level under the ceiling, times the threads), and the minimum bytes
 * each memory-bound pass must move, compared with the measured stream rate of
 * the pool's threads over a buffer the size of the largest activation. */
#ifndef RP_STEP_PROFILE_H
#define RP_STEP_PROFILE_H

#include <stdio.h>

#include "rp_kernels.h"
#include "rp_model.h"
#include "rp_pool.h"
#include "rp_prof.h"

typedef enum {
  RP_PART_GEMM = 0,
  RP_PART_ATTENTION,
  RP_PART_LAYERNORM,
  RP_PART_GELU,
  RP_PART_XENT,
  RP_PART_EMBED,
  RP_PART_OPTIMIZER,
  RP_PART_COPIES,
  RP_PART_DATA,
  RP_PART_COMM,
  RP_PART_IDLE,      /* the step's wall time no timed region covers */
  RP_PART_COUNT
} rp_step_part;

/* a GEMM product's name in the profile, by its in and out features */
#define RP_STEP_GEMM_NAMES 8
typedef struct {
  long in, out;
  char name[48]; /* "qkv", or names joined where two products share a shape */
} rp_step_gemm_name;

typedef struct {
  double flops[RP_PART_COUNT];  /* per step; 0: not compute-bound */
  double bytes[RP_PART_COUNT];  /* per step; 0: not counted */
  int bf16_copies;              /* the optimizer's part includes the bf16 weight copies */
  int loss_in_backward;         /* set before adding chunks: the head's cross-entropy runs
                                   once, in the backward (rp_chunk_forward_logits) */
  double opt_footprint;         /* bytes the optimizer's arrays span: parameters,
                                   gradients and both moments */
  rp_step_gemm_name gemm_names[RP_STEP_GEMM_NAMES]; /* the chunks' products (qkv, ...) */
  int ngemm_names;
} rp_step_work;

/* Adds to *w (zero it first) the work of one chunk over `microbatches`
 * micro-batches of B sequences of T tokens (this rank's shard), whose
 * attention covers `pairs` visible (query, key) pairs per sequence and head. */
void rp_step_work_add_chunk(rp_step_work *w, const rp_chunk *m, int B, int T, double pairs,
                            int microbatches);
/* The optimizer's share: zero, norm and AdamW over `params` floats. */
void rp_step_work_add_optimizer(rp_step_work *w, long params);
/* --precision bf16: the bf16 copies of `params` weights, written by AdamW's own
 * pass (in_update: 2 bytes each) or refreshed after it (read and written, 6),
 * counted in the optimizer's part. */
void rp_step_work_add_bf16_copies(rp_step_work *w, long params, int in_update);

typedef struct {
  double fma_flops;      /* FLOP/s, all pool threads; 0 when not measured */
  const char *fma_level; /* the SIMD level the probe used */
  double stream_bytes;   /* bytes/s, all pool threads */
  long stream_size;      /* buffer bytes the stream rate was measured at */
  /* the same over buffers of the optimizer's footprint (its parameters,
   * gradients and moments, where they outgrow the caches the activation-sized
   * buffers stay in), that the optimizer's part is held to; 0: not measured,
   * stream_bytes then */
  double stream_opt_bytes;
  long stream_opt_size;
  double gemm_flops;     /* FLOP/s of the GEMM on the model's shapes with hot operands,
                            all pool threads, that the bound line uses; 0 unknown */
  double gemm_start, gemm_after; /* the trainer's measurements of it at start-up and
                                    after the profiled steps; 0 where not made */
  /* the products alone on hot operands (the measurement after the steps), each
   * shape's forward and backward apart, over gemm_alone_rows rows */
  rp_gemm_shape_rate gemm_alone[RP_GPT_GEMM_SHAPES];
  int ngemm_alone;
  long gemm_alone_rows;
} rp_step_peaks;

/* Measures both peaks with the pool's threads (a fraction of a second). */
void rp_step_peaks_measure(rp_step_peaks *pk, long stream_size, rp_pool *pool);
/* The optimizer's stream rate (stream_opt_bytes) over two buffers of half its
 * footprint (w->opt_footprint, from rp_step_work_add_optimizer), each at most
 * RP_STEP_OPT_STREAM_MAX: past the last-level cache every size reads about
 * the same rate. */
#define RP_STEP_OPT_STREAM_MAX (256L << 20)
void rp_step_peaks_measure_optimizer(rp_step_peaks *pk, const rp_step_work *w, rp_pool *pool);
/* The stream rate part p is held to: the optimizer's own where measured. */
double rp_step_stream_of(const rp_step_peaks *pk, rp_step_part p);
/* The FMA peak alone (rp_step_peaks_measure's fma_flops and fma_level): the
 * fp32 FMA probe's rate times the pool's threads, 0 without a SIMD probe. */
double rp_step_fma_peak(rp_pool *pool, const char **level);

/* Per-step seconds of each part over the profiler's closed steps: the mean
 * (part) and each call site at its fastest over the steps (quiet; -1 for idle,
 * which has no call site), the mean wall time of a step and the sum of the
 * quiet times. */
typedef struct {
  long steps;
  double part[RP_PART_COUNT], quiet[RP_PART_COUNT];
  double wall, timed_quiet;
  double steal; /* s the hypervisor gave other guests over all the steps, -1 unknown */
} rp_step_times;

/* Reads the profiler's totals into *st; 0 when no step was profiled. */
int rp_step_times_read(rp_step_times *st);
/* 1 when the table and the figure show part p: it took time or has work
 * counted (idle always) */
int rp_step_part_shown(rp_step_part p, const rp_step_times *st, const rp_step_work *w);
/* The part's name in the table and the figure */
const char *rp_step_part_name(rp_step_part p, const rp_step_work *w);

/* The step's bound: its seconds with the GEMMs at gemm_flops (or their
 * quiet time, if faster) and every other timed part at its quiet time, the
 * idle time left out; -1 when there is no GEMM work, no rate or no quiet
 * time to build it from. */
double rp_step_bound_seconds(const rp_step_times *st, const rp_step_work *w, double gemm_flops);

/* Prints the table from the profiler's totals over its closed steps. */
void rp_step_profile_print(FILE *f, const rp_step_work *w, const rp_step_peaks *pk);
/* Names the chunk's GEMM products in w (step_profile_gemm.c; also called by
 * rp_step_work_add_chunk) by their tensor-parallel shard's shapes. */
void rp_step_work_name_gemms(rp_step_work *w, const rp_chunk *m);
/* The step's GEMM products apart (rp_prof_gemm_rows), one row per product and
 * pass: its time a step, mean and quiet, and its fraction of the FMA peak
 * beside the same product's alone (pk->gemm_alone). Nothing without one. */
void rp_step_profile_print_gemms(FILE *f, const rp_step_work *w, const rp_step_peaks *pk);
/* the most product rows the table and the figure show */
#define RP_STEP_GEMM_ROWS 64
/* The product's name by its in and out features ("" when w names none). */
const char *rp_step_gemm_product_name(const rp_step_work *w, long in, long out);
/* The same product alone (FLOP/s), 0 where it was not measured: a pass that is
 * a forward or a whole backward, over the rows the measurement used. */
double rp_step_gemm_alone_rate(const rp_step_peaks *pk, const rp_prof_gemm_row *r);

/* The figure of the same: one bar per part, its length the part's share of
 * the step, filled dark over the time its work would take at the peak it is
 * held to (FLOPs at the FMA peak, bytes at the stream rate), so the light rest
 * is what the part loses to the machine's limit. Written to path through a
 * temporary file (a failed write leaves no half figure); title heads it. */
rp_status rp_step_profile_write_svg(const char *path, const char *title, const rp_step_times *st,
                                    const rp_step_work *w, const rp_step_peaks *pk);

#endif
