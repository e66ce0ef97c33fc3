/* Pipeline schedules as data: generators, lowering, CSV, validator, simulator.
 *
 * A schedule is, for each of the p pipeline ranks, an ordered list of actions
 * {op, chunk, mb}. `chunk` is the model chunk local to the rank (0..v-1) and `mb`
 * the micro-batch (0..m-1). Rank r's chunk c is global virtual stage c*p + r
 * (Megatron's interleaved mapping; v = 1 gives stage = rank), so activations flow
 * rank r -> r+1 and from rank p-1 chunk c to rank 0 chunk c+1; gradients flow
 * back the same way.
 *
 * Ops: F forward, B full backward, I backward for the input only, W backward for
 * the weights only (B = I + W), and the communication that lowering inserts:
 * SEND_F / RECV_F (activations) and SEND_B / RECV_B (input gradients). For a
 * SEND the chunk is the producer's local chunk, for a RECV the consumer's.
 *
 * Text form (CSV, one row per rank, '#' starts a comment line): `0F3` is chunk 0,
 * F, micro-batch 3; `1I2`, `0W2`, `0SEND_F1`, `1RECV_B0`. Import also accepts
 * rows written with global stage indices instead of local chunks (torch's
 * pipelining writes those) and converts them.
 *
 * How an executor uses this (see pipeline.c): build with rp_schedule_make, walk
 * s->acts[rank][0..n[rank]-1]; RECV posts a non-blocking receive (peer and tag
 * from rp_schedule_peer / rp_schedule_tag), the compute that consumes it waits on
 * it; SEND posts a non-blocking send of what the preceding compute produced.
 * rp_schedule_plan_slots says which activation slot, W stash and receive buffer
 * each action uses, and rp_schedule_plan_arena where their bytes are in one
 * block per rank, so buffers are sized from the schedule's liveness. */
#ifndef RP_SCHEDULE_H
#define RP_SCHEDULE_H

#include <stdio.h>
#include "rp_base.h"

typedef enum {
  RP_OP_F = 0,
  RP_OP_B,
  RP_OP_I,
  RP_OP_W,
  RP_OP_SEND_F,
  RP_OP_RECV_F,
  RP_OP_SEND_B,
  RP_OP_RECV_B,
  RP_OP_COUNT
} rp_op;

typedef struct {
  int op;    /* rp_op */
  int chunk; /* local model chunk, 0..v-1 */
  int mb;    /* micro-batch, 0..m-1 */
} rp_action;

/* Which global stage a rank's local chunk is. LOOP (Megatron's interleaving,
 * any v): chunk c of rank r is stage c*p + r, so data loops rank 0 -> p-1 and
 * back to rank 0 for the next chunk. V (v = 2; ZB-V, DualPipeV): chunk 0 of
 * rank r is stage r and chunk 1 is stage 2p-1-r, so data goes down the ranks
 * and comes back up, and rank 0 holds both the first stage and the last. */
typedef enum { RP_MAP_LOOP = 0, RP_MAP_V = 1 } rp_stage_map;
int rp_stage_of(int map, int p, int rank, int chunk);
void rp_stage_owner(int map, int p, int stage, int *rank, int *chunk);
const char *rp_stage_map_name(int map); /* "loop", "v" */

typedef struct {
  int p, v, m;       /* ranks, chunks per rank, micro-batches */
  int map;           /* rp_stage_map: which stage chunk c of rank r is */
  char name[32];     /* generator name ("1f1b", ...) or "csv" */
  int lowered;       /* 1 when SEND/RECV are in the lists (what an executor runs) */
  int *n;            /* n[r]: actions of rank r */
  rp_action **acts;  /* acts[r][i], i < n[r], in execution order */
  int *cap;          /* allocated length of acts[r] (internal) */
} rp_schedule;

/* A position in a schedule, for error reports: rank and action index, index -1
 * when the problem is not one action (e.g. a missing F). */
typedef struct {
  int rank, index;
} rp_sched_pos;

/* ---- actions (schedule.c) ---- */
const char *rp_op_name(int op); /* "F", "SEND_F", ...; "?" when out of range */
int rp_op_is_compute(int op);   /* F, B, I, W */
/* 1 when some rank's backward is split into I and W actions (zero bubble:
 * W runs later and still needs the layer tensors a B would have consumed). */
int rp_schedule_splits_backward(const rp_schedule *s);
/* The same known of a generator before it builds anything: 1 or 0, and -1 for
 * a name that is no generator (a CSV file: build it and ask the schedule). */
int rp_schedule_generator_splits_backward(const char *name);
/* Chunks per rank a generator runs: 1, 2 for the V schedules, 0 for
 * interleaved (any v >= 2), -1 for a name that is no generator. */
int rp_schedule_generator_chunks(const char *name);
/* "0F3" into buf (NUL-terminated, truncated to n); returns the length. */
int rp_action_str(rp_action a, char *buf, size_t n);
/* Parses exactly `len` chars as <chunk><op><mb>; RP_EFORMAT naming the text. */
rp_status rp_action_parse(const char *text, size_t len, rp_action *out);

/* ---- schedules (schedule.c) ---- */
/* Empty action lists for p ranks; name is copied (may be NULL). */
rp_status rp_schedule_new(int p, int v, int m, const char *name, rp_schedule **out);
rp_status rp_schedule_push(rp_schedule *s, int rank, rp_action a);
void rp_schedule_free(rp_schedule *s);
int rp_schedule_stage(const rp_schedule *s, int rank, int chunk); /* by s->map */
/* The rank and local chunk holding global stage `stage`, by s->map. */
void rp_schedule_owner(const rp_schedule *s, int stage, int *rank, int *chunk);

/* Names understood by the generators, "naive|gpipe|1f1b|interleaved|zb-h1|...". */
extern const char *const rp_schedule_names;

/* Compute-only action lists (F/B/I/W) of a generator, shaped like the papers:
 *   naive        v = 1, any m: one micro-batch at a time through the whole pipe
 *                (m = 1 is classic model parallelism; m > 1 is plain gradient
 *                accumulation, no overlap).
 *   gpipe        v = 1, any m: all m forwards, then all m backwards.
 *   1f1b         v = 1, m >= p: rank r runs p-1-r warmup forwards, then alternates
 *                one forward and one backward, then p-1-r cooldown backwards.
 *   interleaved  v >= 2, m % p == 0: Megatron's interleaved 1F1B.
 *   zb-h1        v = 1, m >= p: 1F1B with B split into I and W; rank r defers its
 *                W by r micro-batches so the W fill the cooldown bubble.
 *   zb-h2        v = 1, m >= p: zero-bubble list schedule with up to 2p-1
 *                activations per rank (schedule_zb.c).
 *   zb-v         v = 2, V map, m >= p: zero-bubble list schedule over the V with
 *                up to 2p chunk-activations per rank (1F1B's memory);
 *   zb-v-half    the same with p + 2 (half of 1F1B's plus one micro-batch):
 *                the pending-activation limit is the only difference.
 *   zb-v-min     v = 2, V map, any m: the controllable-memory paper's V-Min, one
 *                micro-batch's building block repeated every 6 chunk slots
 *                (schedule_vblock.c), its warm-up re-laid; 2 floor((p+4)/3)
 *                chunks (a third).
 *   dualpipev    v = 2, V map, m >= 2p: DeepSeek's DualPipeV order (F of one
 *                chunk paired with B of the other in the steady state).
 * A violated constraint is RP_EINVAL naming it and the fix. */
rp_status rp_schedule_generate(const char *name, int p, int v, int m, rp_schedule **out);

/* Inserts SEND/RECV into a compute-only schedule (schedule_lower.c). The ranks
 * advance in lockstep rounds, one compute each per round; a compute's outputs for
 * another rank are sent right after it, and the receiver posts the RECV in the
 * first round after the SEND (so a RECV always follows its peer's SEND in lockstep
 * order and is posted as early as that allows, before computes that do not need
 * it). RP_EINVAL if the compute lists cannot make progress (deadlock), naming the
 * stuck actions; *where (may be NULL) gets one of them. */
rp_status rp_schedule_lower(const rp_schedule *in, rp_schedule **out, rp_sched_pos *where);

/* Generator name or a CSV path (ends in ".csv" or contains '/'), then lowering
 * and validation: the schedule an executor runs. For a CSV, p, v, m are taken
 * from the file; a non-zero argument must agree with it. A CSV that already has
 * SEND/RECV is used as written. */
rp_status rp_schedule_make(const char *name_or_csv, int p, int v, int m, rp_schedule **out);

/* Peer rank of a SEND/RECV action on `rank`, and a message tag that both sides
 * compute alike: unique per (direction, receiving stage, micro-batch), in
 * [0, 2*v*p*m). -1 for a compute action. */
int rp_schedule_peer(const rp_schedule *s, int rank, rp_action a);
int rp_schedule_tag(const rp_schedule *s, int rank, rp_action a);

/* The buffer plan of one rank's list: the one liveness that both the executor
 * allocates by and the simulator reports, so predicted memory is allocated
 * memory. Classes:
 *   act   activation slot: taken by F, released by B, or under a split
 *         backward by W (W still reads the layer inputs the slot holds);
 *   wst   W stash: the output gradients W needs after I, taken by I,
 *         released by W;
 *   rbuf  receive buffer: taken by RECV_F / RECV_B, released by the compute that
 *         consumes it;
 *   gbuf  gradient-send buffer: the input gradient a B or I produces for a later
 *         SEND_B of the same (chunk, mb), released by that SEND_B (a reuse
 *         then waits for the send to complete); on the V's turn (rank p-1
 *         holds stages p-1 and p) the gradient its chunk 1 hands to its own
 *         chunk 0, released by chunk 0's B or I (gin[i]: the buffer it reads).
 * Per action, the slot it takes, releases or uses (-1 when none): for F act[i]
 * (and rbuf[i] it reads when it has a RECV), for B act[i] released (and gbuf[i]
 * taken), for I wst[i] taken (and gbuf[i]), for W act[i] released and wst[i],
 * for RECV rbuf[i], for SEND_B gbuf[i]. Slots are the lowest free index, so
 * n_act etc. are the peak numbers simultaneously live. */
typedef struct {
  int n;          /* actions (= s->n[rank]) */
  int *act, *wst, *rbuf, *gbuf, *gin;
  int n_act, n_wst, n_rbuf, n_gbuf;
} rp_slot_plan;
/* The local chunk holding the stage before (dir = -1) or after (+1) chunk c
 * of `rank` when that stage is on the same rank (the V's turn), else -1. */
int rp_schedule_local_neighbour(const rp_schedule *s, int rank, int chunk, int dir);
rp_status rp_schedule_plan_slots(const rp_schedule *s, int rank, rp_slot_plan *out);
void rp_slot_plan_free(rp_slot_plan *plan);
/* Peak number of (chunk, mb) of `rank` whose F is done and B/I not yet. */
int rp_schedule_max_live(const rp_schedule *s, int rank);

/* The byte-offset arena of one rank (schedule_arena.c): every buffer the
 * executor needs is an interval [first, last] of the rank's action indices
 * with a byte size, and the planner gives each an offset in one block so that
 * two buffers live at a common action never share a byte. Buffer classes:
 *   KEEP  what W reads of one (chunk, mb)'s activations (each matmul's and
 *         LayerNorm's input, rp_acts_split_bytes' keep part): F .. W (or B);
 *   DROP  the rest of them (QKV, attention state, pre-GELU, ...): F .. I (or
 *         B; then it is folded into its KEEP, one buffer of both sizes);
 *   WST   the W stash: I .. W;
 *   RBUF  a receive buffer: RECV .. the compute that consumes it;
 *   GBUF  an input gradient waiting for its SEND_B (or, on the V's turn, for
 *         this rank's own previous stage): B/I .. SEND_B (or that B/I). The
 *         send may still read it after SEND_B: the executor waits for it
 *         before a later buffer that overlaps it is written.
 * Intervals include both ends: an action that reads one buffer and writes
 * another keeps them apart. Candidate layouts (each buffer in the tightest gap
 * its co-live buffers leave, taken in decreasing size or in start order, and
 * the per-class slot pools that sized each class by its own peak count, the
 * layout before the arena) are all built and the smallest kept, so no rank
 * needs more than the pools did. */
enum { RP_BUF_KEEP = 0, RP_BUF_DROP, RP_BUF_WST, RP_BUF_RBUF, RP_BUF_GBUF, RP_BUF_NCLASS };
const char *rp_buf_class_name(int cls); /* "keep", "drop", "wstash", "recv", "grad" */
/* Bytes per chunk (arrays of s->v) of one micro-batch and of one message; the
 * planner rounds each to 64 bytes (the arena's alignment). */
typedef struct {
  const size_t *keep, *drop, *wstash;
  size_t msg;
} rp_buf_sizes;
typedef struct {
  int cls, chunk, mb; /* class; (chunk, mb) it belongs to (-1 for none) */
  int first, last;    /* action indices, both included */
  size_t size, off;   /* bytes (64-aligned), offset in the arena */
} rp_buf;
typedef struct {
  int n;           /* actions of the rank */
  int nbuf;
  rp_buf *buf;
  /* [class][action]: offset of the buffer of that class the action takes
   * (F: KEEP and DROP; I: WST and GBUF; B: GBUF; RECV: RBUF), SIZE_MAX none.
   * A DROP folded into its KEEP is at KEEP's offset + KEEP's own size. */
  size_t *off[RP_BUF_NCLASS];
  size_t arena_bytes;  /* the block the executor allocates */
  size_t live_peak;    /* max over actions of the bytes live: no layout is smaller */
  size_t pooled_bytes; /* the per-class slot pools (the layout before the arena) */
  char method[32];     /* which candidate layout won */
} rp_arena_plan;
rp_status rp_schedule_plan_arena(const rp_schedule *s, int rank, const rp_buf_sizes *sz,
                                 rp_arena_plan *out);
void rp_arena_plan_free(rp_arena_plan *plan);

/* Largest schedule the generators, the CSV reader and the validator accept:
 * p x v x m (rank, chunk, micro-batch) cells. Their tables hold a few doubles per
 * cell and message keys are ints, so the bound keeps both small and exact. */
#define RP_SCHEDULE_MAX_CELLS (1 << 22)
/* RP_EINVAL naming p, v, m and the bound unless 1 <= p, v, m and
 * p x v x m <= RP_SCHEDULE_MAX_CELLS; checked before anything is allocated. */
rp_status rp_schedule_check_size(int p, int v, int m);

/* ---- CSV (schedule_csv.c) ---- */
/* Writes a '#' header line then one row per rank. */
rp_status rp_schedule_csv_write(const rp_schedule *s, FILE *f);
rp_status rp_schedule_csv_save(const rp_schedule *s, const char *path);
/* The same rows with global stage indices instead of local chunks (torch's
 * pipelining notation: for a V schedule rank 0's row holds stages 0 and 2p-1).
 * A local-chunk file of a V schedule carries a "# stage map: v" line. */
rp_status rp_schedule_csv_write_stages(const rp_schedule *s, FILE *f);
rp_status rp_schedule_csv_save_stages(const rp_schedule *s, const char *path);
/* The CSV text in a malloc'ed string (caller frees). */
rp_status rp_schedule_csv_format(const rp_schedule *s, char **text);
/* Parses CSV text; `src` names it in errors ("FILE:line:col: ..."). The result
 * is validated (compute-only or lowered, as written; not lowered here). */
rp_status rp_schedule_csv_parse(const char *text, const char *src, rp_schedule **out);
rp_status rp_schedule_csv_load(const char *path, rp_schedule **out);

/* ---- validator and simulator (schedule_sim.c) ---- */
/* Checks: chunk/mb in range; per (chunk, mb) of each rank exactly one F and
 * either one B or one I and one W; F before its B/I, I before W; in a lowered
 * schedule every cross-rank input has exactly one RECV before its compute,
 * every output exactly one SEND after it, and no other SEND/RECV. Then the
 * ranks are run with blocking receives (a RECV waits for the peer's SEND, sends
 * never wait; in a compute-only list a compute waits for the one producing its
 * input, also on its own rank) and a state where no rank can move is reported as
 * a deadlock naming what each stuck rank waits for. RP_EINVAL with the first
 * problem; *where (may be NULL) gets its position. */
rp_status rp_schedule_validate(const rp_schedule *s, rp_sched_pos *where);

/* Cost model. tF, tB are the forward and full backward time of one rank's whole
 * share of the model (so a chunk action takes t/v); B split is I = tB - tW and
 * W = tW. comm is the latency from a SEND to the data being usable at the
 * receiver. SEND/RECV cost the rank no time (non-blocking). */
typedef struct {
  double tF, tB, tW, comm;
} rp_costs;
#define RP_COSTS_DEFAULT ((rp_costs){1.0, 2.0, 1.0, 0.0})

/* One action's time on its rank: t0 start, t1 end (t0 == t1 for SEND/RECV). */
typedef struct {
  rp_action a;
  double t0, t1;
} rp_span;

/* A timeline, predicted by rp_schedule_simulate or measured by an executor
 * (allocate with rp_sim_new, fill spans, call rp_sim_summarize). Times in the
 * costs' unit (or seconds when measured). Only compute spans count as busy; an
 * executor may give SEND/RECV spans a length (time spent waiting) for the
 * pictures.
 *   busy[r]       sum of compute spans of rank r
 *   idle[r]       makespan - busy[r]
 *   bubble_total  sum(idle) / (p * makespan)    share of rank-time spent idle
 *   bubble_ideal  sum(idle) / sum(busy)         idle relative to the work; for
 *                 uniform stages this is (makespan - ideal) / ideal, the
 *                 quantity the papers' formulas give ((p-1)/m for 1F1B).
 *   bubble_total = x / (1 + x) with x = bubble_ideal when all ranks are equally busy.
 *   peak_act[r], peak_wst[r]  rp_slot_plan's n_act, n_wst for rank r.
 *   period        max over ranks of (rank's last compute end - its first
 *                 compute start): the step time when consecutive steps overlap
 *                 (each rank starts the next step as soon as it is done, which
 *                 a step without a pipeline-wide sync before the optimizer --
 *                 post-validation -- allows). The papers' zero bubble is here.
 *   bubble_steady (p * period - sum(busy)) / sum(busy), idle/ideal at that
 *                 period. */
typedef struct {
  int p;
  int *n;          /* spans per rank (= schedule's n[r]) */
  rp_span **spans; /* spans[r][i] for action i of rank r */
  double makespan;
  double *busy, *idle;
  double bubble_total, bubble_ideal;
  int *peak_act, *peak_wst;
  double period, bubble_steady;
} rp_sim;

rp_status rp_sim_new(const rp_schedule *s, rp_sim **out); /* spans zeroed, a copied */
void rp_sim_free(rp_sim *sim);
/* Recomputes makespan (latest end minus earliest start), busy, idle, bubbles
 * from the spans; peak_* from the schedule. */
void rp_sim_summarize(rp_sim *sim, const rp_schedule *s);

/* Validates, then runs the lists under the cost model: each rank executes its
 * actions in order, a compute starts when the rank is free and its input has
 * arrived (SEND time + comm). RP_EINVAL for bad costs (named). */
rp_status rp_schedule_simulate(const rp_schedule *s, const rp_costs *c, rp_sim **out);

/* Closed-form bubble (idle / ideal) of generator `name` under uniform stages and
 * comm = 0, with its formula as text in *text (may be NULL); NAN for names with
 * no formula (a CSV). naive p-1; gpipe, 1f1b (p-1)/m; interleaved (p-1)/(v m);
 * zb-h1 (p-1)(tF+tI-tW) / (m (tF+tI+tW)), exact while tW <= tI (see
 * schedule_sim.c for the derivation). */
double rp_schedule_bubble_formula(const char *name, int p, int v, int m,
                                  const rp_costs *c, const char **text);
/* The same with consecutive steps overlapped (rp_sim.bubble_steady): differs
 * only for zb-h2, (p-1)(tF+tI-2tW)/(m(tF+tI+tW)). */
double rp_schedule_steady_formula(const char *name, int p, int v, int m,
                                  const rp_costs *c, const char **text);
/* Closed form of the peak activation slots over the ranks (chunk-activations,
 * as rp_schedule_plan_slots counts them): gpipe m, 1f1b and zb-h1 p, zb-h2
 * 2p-1, zb-v 2p, zb-v-half p+2, zb-v-min 2 min(floor((p+4)/3), m),
 * dualpipev 2p+1;
 * -1 (text "") for a CSV. */
int rp_schedule_memory_formula(const char *name, int p, int v, int m, const char **text);

/* ---- the advisor (schedule_advise.c) ---- */
/* What a run measured (or the user gives): costs of one rank's share for one
 * micro-batch of `batch` sequences, at m_ref micro-batches per step (the
 * global batch, kept fixed), and the MiB of one micro-batch's activations,
 * W stash and message for one rank's whole share (a chunk holds 1/v). */
typedef struct {
  rp_costs costs;
  int p, m_ref, batch;
  double act_mib, wstash_mib, msg_mib;
  double drop_mib;  /* the part of act_mib only I reads, freed at I (0: none known) */
  double limit_mib; /* per rank; <= 0: no limit */
  int max_m;        /* candidates m <= max_m (0: 64) dividing m_ref * batch */
  int layers;       /* the model's layers: p x v stages need as many (0: unknown) */
  char limit_like[32]; /* non-empty: the limit is what this schedule plans at m_ref */
} rp_advise_in;

typedef struct {
  char schedule[32];
  int v, m;
  int ok;              /* built and within the memory limit */
  double step;         /* predicted step time (makespan, the costs' unit) */
  double step_nocomm;  /* the same at comm = 0 */
  double bubble;       /* idle/ideal */
  double mem_mib;      /* planned peak per rank */
  int sends;           /* most messages a rank sends per step */
  char why[400];       /* why it is not the best (or "best: ...") */
} rp_advice;

/* Every generator but naive x v (interleaved 2 and 4, V 2, else 1) x m,
 * sorted: feasible by step time, then over the limit, then refused. Caller
 * frees *out. */
rp_status rp_schedule_advise(const rp_advise_in *in, rp_advice **out, int *count);

/* ---- pictures (schedule_svg.c) ---- */
/* ASCII timeline: a time axis, then one row per rank with each compute drawn
 * over its time span as its label and blanks (F3; with v = 2 chunk 1 in lower
 * case, f3; with v > 2 the chunk first, 2F3), idle as '.'; at most `width`
 * columns (0: 160), labels cut short when boxes get narrower than them. */
void rp_sim_print_ascii(FILE *f, const rp_schedule *s, const rp_sim *sim, int width);

/* An SVG timeline in the style of the papers' figures: for each panel one row
 * per rank, a coloured box per F/B/I/W (chunk > 0 in a lighter shade) labelled
 * with its micro-batch, a time axis and a legend. Panels stack vertically on a
 * shared time scale (e.g. predicted above measured, or every schedule). */
typedef struct {
  const char *title;
  const rp_schedule *s;
  const rp_sim *sim;
} rp_svg_panel;
rp_status rp_sim_write_svg(const char *path, const rp_svg_panel *panels, int npanels);

#endif
