/* Component profile of a training step (see rp_prof.h). */
#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_util.h"

int rp_prof_enabled;

static double prof_seconds[RP_PROF_COUNT];
static long prof_calls[RP_PROF_COUNT];
static double step_t0, step_wall;   /* open step's start; closed steps' total */
/* the hypervisor's steal count at the open step's start, and over the closed
 * steps (-1 once a step found no count) */
static double steal_t0, steal_total;
static long step_count;
/* Calls count only inside a step once rp_prof_step_end has been used (the
 * trainer's evaluation forwards between steps are not step time); a caller
 * that only ever opens steps (bench_step) counts everything. */
static int step_open, steps_closed_seen;

/* call sites of one step, in order; beyond PROF_SITES calls only totals count */
#define PROF_SITES 8192
static double site_min[PROF_SITES];
static unsigned char site_id[PROF_SITES];
static int site_next, site_count;

static const char *const prof_names[RP_PROF_COUNT] = {
    [RP_PROF_FWD_EMBED] = "fwd embedding",
    [RP_PROF_FWD_LAYERNORM] = "fwd layernorm",
    [RP_PROF_FWD_MATMUL] = "fwd matmul (sgemm)",
    [RP_PROF_FWD_ATTENTION] = "fwd attention",
    [RP_PROF_FWD_GELU] = "fwd gelu",
    [RP_PROF_FWD_RESIDUAL] = "fwd residual add",
    [RP_PROF_FWD_XENT] = "fwd cross-entropy",
    [RP_PROF_BWD_XENT] = "bwd cross-entropy",
    [RP_PROF_BWD_MATMUL] = "bwd matmul (sgemm + dbias)",
    [RP_PROF_BWD_ATTENTION] = "bwd attention",
    [RP_PROF_BWD_GELU] = "bwd gelu",
    [RP_PROF_BWD_LAYERNORM] = "bwd layernorm",
    [RP_PROF_BWD_EMBED] = "bwd embedding",
    [RP_PROF_BWD_SCRATCH] = "bwd scratch zero/copy",
    [RP_PROF_OPT_ZERO_GRADS] = "opt zero grads",
    [RP_PROF_OPT_GRAD_NORM] = "opt grad norm",
    [RP_PROF_OPT_ADAMW] = "opt adamw",
    [RP_PROF_OPT_BF16_COPY] = "opt bf16 weight copies",
    [RP_PROF_DATA] = "data loading",
    [RP_PROF_COMM] = "comm waits (dp, step all-reduces)",
};

void rp_prof_reset(void) {
  for (int i = 0; i < RP_PROF_COUNT; i++) {
    prof_seconds[i] = 0;
    prof_calls[i] = 0;
  }
  site_next = site_count = 0;
  step_wall = 0;
  step_count = 0;
  step_t0 = 0;
  steal_t0 = steal_total = 0;
  step_open = steps_closed_seen = 0;
}

void rp_prof_step_begin(void) {
  site_next = 0;
  steal_t0 = rp_steal_seconds(); /* read before the clock: not in the step's time */
  step_t0 = rp_now();
  step_open = 1;
}

void rp_prof_step_end(void) {
  if (!step_open) return;
  step_wall += rp_now() - step_t0;
  const double steal = rp_steal_seconds();
  if (steal < 0 || steal_t0 < 0 || steal_total < 0)
    steal_total = -1.0;
  else
    steal_total += steal - steal_t0;
  step_count++;
  step_open = 0;
  steps_closed_seen = 1;
}

long rp_prof_steps(void) { return step_count; }
double rp_prof_wall_seconds(void) { return step_wall; }
double rp_prof_steal_seconds(void) { return step_count > 0 ? steal_total : -1.0; }

double rp_prof_min_seconds(rp_prof_id id) {
  double s = 0;
  for (int k = 0; k < site_count; k++)
    if (site_id[k] == (unsigned char)id) s += site_min[k];
  return s;
}

void rp_prof_enable(int on) {
  rp_prof_reset();
  rp_prof_enabled = on;
}

const char *rp_prof_name(rp_prof_id id) {
  return id >= 0 && id < RP_PROF_COUNT ? prof_names[id] : "?";
}
double rp_prof_seconds(rp_prof_id id) { return id >= 0 && id < RP_PROF_COUNT ? prof_seconds[id] : 0; }
long rp_prof_calls(rp_prof_id id) { return id >= 0 && id < RP_PROF_COUNT ? prof_calls[id] : 0; }

double rp_prof_clock(void) { return rp_now(); }

void rp_prof_add(rp_prof_id id, double seconds) {
  if (id < 0 || id >= RP_PROF_COUNT || (steps_closed_seen && !step_open)) return;
  prof_seconds[id] += seconds;
  prof_calls[id]++;
  int k = site_next++;
  if (k >= PROF_SITES) return;
  if (k >= site_count || site_id[k] != (unsigned char)id) {
    /* a new site (first step), or the sequence changed: start it afresh */
    site_id[k] = (unsigned char)id;
    site_min[k] = seconds;
    if (k >= site_count) site_count = k + 1;
  } else if (seconds < site_min[k]) {
    site_min[k] = seconds;
  }
}

