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
/* each site's total and calls (its mean), and the GEMM product it ran (gemm
 * -1: none noted) */
static double site_sum[PROF_SITES];
static long site_n[PROF_SITES];
typedef struct {
  int pass; /* rp_prof_gemm_pass, -1 for none */
  long rows, in, out;
  double flops;
} gemm_note;
static gemm_note site_gemm[PROF_SITES];
static gemm_note pending = {.pass = -1};

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
  pending.pass = -1;
  pending.flops = 0;
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

void rp_prof_gemm_note(long rows, long in, long out, int backward, int has_dinp,
                       int has_dweight) {
  if (!rp_prof_enabled) return;
  const int products = backward ? (has_dinp != 0) + (has_dweight != 0) : 1;
  const int pass = !backward ? RP_PROF_GEMM_FORWARD
                   : has_dinp && has_dweight ? RP_PROF_GEMM_BACKWARD
                   : has_dinp ? RP_PROF_GEMM_DINP : RP_PROF_GEMM_DWEIGHT;
  if (products == 0) return; /* a bias gradient alone: no product */
  if (pending.pass < 0) {
    pending.pass = pass;
    pending.rows = rows;
    pending.in = in;
    pending.out = out;
    pending.flops = 0;
  }
  pending.flops += 2.0 * (double)rows * (double)in * (double)out * products;
}

static int is_matmul(rp_prof_id id) {
  return id == RP_PROF_FWD_MATMUL || id == RP_PROF_BWD_MATMUL;
}

static int same_product(const gemm_note *a, const gemm_note *b) {
  return a->pass == b->pass && a->rows == b->rows && a->in == b->in && a->out == b->out;
}

void rp_prof_add(rp_prof_id id, double seconds) {
  /* the notes belong to this region, whether or not it counts */
  gemm_note note = {.pass = -1};
  if (is_matmul(id) && pending.pass >= 0) note = pending;
  pending.pass = -1;
  if (id < 0 || id >= RP_PROF_COUNT || (steps_closed_seen && !step_open)) return;
  prof_seconds[id] += seconds;
  prof_calls[id]++;
  int k = site_next++;
  if (k >= PROF_SITES) return;
  if (k >= site_count || site_id[k] != (unsigned char)id || !same_product(&site_gemm[k], &note)) {
    /* a new site (first step), or the sequence changed: start it afresh */
    site_id[k] = (unsigned char)id;
    site_min[k] = seconds;
    site_sum[k] = 0;
    site_n[k] = 0;
    site_gemm[k] = note;
    if (k >= site_count) site_count = k + 1;
  } else if (seconds < site_min[k]) {
    site_min[k] = seconds;
  }
  site_sum[k] += seconds;
  site_n[k]++;
}

const char *rp_prof_gemm_pass_name(rp_prof_gemm_pass pass) {
  static const char *const names[RP_PROF_GEMM_PASSES] = {"forward", "backward", "dinp",
                                                         "dweight"};
  return pass >= 0 && pass < RP_PROF_GEMM_PASSES ? names[pass] : "?";
}

int rp_prof_gemm_rows(rp_prof_gemm_row *rows, int max) {
  int n = 0;
  for (int k = 0; k < site_count; k++) {
    const gemm_note *g = &site_gemm[k];
    if (g->pass < 0 || site_n[k] == 0) continue;
    int r = 0;
    while (r < n && !((int)rows[r].pass == g->pass && rows[r].rows == g->rows &&
                      rows[r].in == g->in && rows[r].out == g->out))
      r++;
    if (r == n) { /* a product not seen before */
      if (n == max) continue;
      rows[n++] = (rp_prof_gemm_row){.pass = (rp_prof_gemm_pass)g->pass, .rows = g->rows,
                                     .in = g->in, .out = g->out};
    }
    rows[r].sites++;
    rows[r].flops += g->flops;
    rows[r].seconds += site_sum[k] / (double)site_n[k];
    rows[r].quiet += site_min[k];
  }
  return n;
}
