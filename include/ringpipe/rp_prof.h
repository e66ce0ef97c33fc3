/* Wall-clock profile of one training step by component, for benchmarks.
 *
 * Off by default: then each timed region costs one well-predicted branch. When on,
 * regions are timed on the thread that drives the pool (the rank's main thread),
 * so a region's time includes the pool dispatch and the wait for the slowest
 * worker: what the step actually pays. Not for concurrent use from several
 * threads. */
#ifndef RP_PROF_H
#define RP_PROF_H

typedef enum {
  RP_PROF_FWD_EMBED = 0,
  RP_PROF_FWD_LAYERNORM,
  RP_PROF_FWD_MATMUL,       /* every linear layer, the LM head included */
  RP_PROF_FWD_ATTENTION,
  RP_PROF_FWD_GELU,
  RP_PROF_FWD_RESIDUAL,
  RP_PROF_FWD_XENT,
  RP_PROF_BWD_XENT,
  RP_PROF_BWD_MATMUL,       /* dinp + dweight + dbias */
  RP_PROF_BWD_ATTENTION,
  RP_PROF_BWD_GELU,
  RP_PROF_BWD_LAYERNORM,
  RP_PROF_BWD_EMBED,
  RP_PROF_BWD_SCRATCH,      /* zeroing and copying gradient scratch */
  RP_PROF_OPT_ZERO_GRADS,
  RP_PROF_OPT_GRAD_NORM,
  RP_PROF_OPT_ADAMW,
  RP_PROF_OPT_BF16_COPY,     /* the bf16 weight copies refreshed after the update */
  RP_PROF_DATA,             /* loading the step's batches */
  RP_PROF_COMM,             /* waiting on gradient reductions and step all-reduces */
  RP_PROF_COUNT
} rp_prof_id;

extern int rp_prof_enabled;

void rp_prof_enable(int on);       /* also resets the totals */
void rp_prof_reset(void);
const char *rp_prof_name(rp_prof_id id);
double rp_prof_seconds(rp_prof_id id);
long rp_prof_calls(rp_prof_id id);

/* Per call site minima. A step makes the same sequence of timed calls every
 * time; rp_prof_step_begin() restarts the sequence, and each call's time is
 * kept as the minimum over steps for its position in the sequence. On a shared
 * machine a call that other processes preempted is thereby replaced by an
 * undisturbed run of the same call, so the sum of the minima estimates the
 * step on a quiet machine. */
void rp_prof_step_begin(void);
double rp_prof_min_seconds(rp_prof_id id);  /* sum over this component's sites */
/* rp_prof_step_end() closes the step rp_prof_step_begin opened: its wall time
 * is added to the total, so that wall minus the components is what no timed
 * region covers (idle: waits on other ranks, untimed glue). Once a step has
 * been closed, calls between steps (evaluation) no longer count. */
void rp_prof_step_end(void);
long rp_prof_steps(void);
double rp_prof_wall_seconds(void);
/* CPU time the hypervisor gave other guests during the closed steps (summed
 * over the machine's CPUs, rp_steal_seconds); -1 without a count or a step */
double rp_prof_steal_seconds(void);

/* The GEMM products of a step, one row per (component, shape, pass). The
 * model's matmul entry points (rp_mm_*) note each product they run with
 * rp_prof_gemm_note while profiling; the next timed matmul region
 * (RP_PROF_FWD_MATMUL or RP_PROF_BWD_MATMUL) takes the notes made since the
 * last timed region as its product, so a region and its FLOPs are counted
 * together. A region whose notes name two shapes or passes is kept under the
 * first with the FLOPs of all. */
typedef enum {
  RP_PROF_GEMM_FORWARD = 0,
  RP_PROF_GEMM_BACKWARD, /* dinp and dweight */
  RP_PROF_GEMM_DINP,     /* dinp alone (the weight gradient taken elsewhere) */
  RP_PROF_GEMM_DWEIGHT,  /* dweight alone */
  RP_PROF_GEMM_PASSES
} rp_prof_gemm_pass;
/* One product of `rows` rows, in -> out features; has_dinp and has_dweight
 * name a backward's outputs (both 0: a forward). No-op unless profiling. */
void rp_prof_gemm_note(long rows, long in, long out, int backward, int has_dinp,
                       int has_dweight);
typedef struct {
  rp_prof_gemm_pass pass;
  long rows, in, out;
  int sites;      /* timed regions of this product in a step */
  double flops;   /* per step */
  double seconds; /* per step: the sum of the sites' means */
  double quiet;   /* per step: the sum of the sites' fastest calls */
} rp_prof_gemm_row;
/* Fills up to max rows, in the order the step first ran them, and returns
 * how many it filled (products past max are left out). */
int rp_prof_gemm_rows(rp_prof_gemm_row *rows, int max);
const char *rp_prof_gemm_pass_name(rp_prof_gemm_pass pass);

double rp_prof_clock(void);        /* rp_now() */
void rp_prof_add(rp_prof_id id, double seconds);

/* RP_PROF(id, statement): time one statement into component id when enabled. */
#define RP_PROF(id, stmt)                          \
  do {                                             \
    if (rp_prof_enabled) {                         \
      double rp_prof_t0_ = rp_prof_clock();        \
      stmt;                                        \
      rp_prof_add((id), rp_prof_clock() - rp_prof_t0_); \
    } else {                                       \
      stmt;                                        \
    }                                              \
  } while (0)

#endif
