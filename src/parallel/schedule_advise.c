/* The schedule advisor: every generator x chunks per rank x micro-batch count
 * for one pipeline, ranked by the simulator's step time under a per-rank
 * activation-memory limit, with the reason each loser loses.
 *
 * The global batch stays what it was measured at (m_ref micro-batches of
 * `batch` sequences); m micro-batches then hold m_ref*batch/m sequences each,
 * and the model scales per-action time and activation size by that factor
 * (linear in the rows: small micro-batches run matmuls less efficiently than
 * this assumes, which measured costs at the candidate size would show). The
 * message latency `comm` is kept as it is. Memory is the buffer arena's
 * (rp_schedule_plan_arena: what the executor allocates) with act/v, the part
 * drop/v of it freed at I, wstash/v and msg per buffer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "ringpipe/rp_schedule.h"

/* Peak planned buffer memory (MiB) over ranks -- the arena each rank would
 * allocate (rp_schedule_plan_arena), every chunk holding 1/v of the share --
 * and the most messages a rank sends, at `scale` times the measured
 * micro-batch. */
static rp_status plan_memory(const rp_schedule *s, const rp_advise_in *in, double scale,
                             double *mib, int *sends) {
  *mib = 0;
  *sends = 0;
  double to_bytes = scale * 1048576.0 / s->v;
  size_t keep = (size_t)((in->act_mib - in->drop_mib) * to_bytes);
  size_t drop = (size_t)(in->drop_mib * to_bytes), wst = (size_t)(in->wstash_mib * to_bytes);
  size_t *sz = malloc(3 * (size_t)s->v * sizeof *sz);
  if (!sz) return rp_err(RP_ENOMEM, "out of memory");
  for (int c = 0; c < s->v; c++) sz[c] = keep, sz[s->v + c] = drop, sz[2 * s->v + c] = wst;
  rp_buf_sizes bs = {sz, sz + s->v, sz + 2 * s->v, (size_t)(in->msg_mib * scale * 1048576.0)};
  rp_status st = RP_OK;
  for (int r = 0; r < s->p && st == RP_OK; r++) {
    rp_arena_plan ap;
    if ((st = rp_schedule_plan_arena(s, r, &bs, &ap)) != RP_OK) break;
    *mib = RP_MAX(*mib, ap.arena_bytes / 1048576.0);
    rp_arena_plan_free(&ap);
    int n = 0;
    for (int i = 0; i < s->n[r]; i++)
      n += s->acts[r][i].op == RP_OP_SEND_F || s->acts[r][i].op == RP_OP_SEND_B;
    *sends = RP_MAX(*sends, n);
  }
  free(sz);
  return st;
}

static rp_status simulate_at(const rp_schedule *s, rp_costs c, double *makespan, double *bubble) {
  rp_sim *sim;
  RP_TRY(rp_schedule_simulate(s, &c, &sim));
  *makespan = sim->makespan;
  if (bubble) *bubble = sim->bubble_ideal;
  rp_sim_free(sim);
  return RP_OK;
}

/* Builds, simulates and sizes one candidate; a refusal or an over-limit plan
 * is kept with its reason. */
static void evaluate(const rp_advise_in *in, const char *name, int v, int m, rp_advice *a) {
  memset(a, 0, sizeof *a);
  snprintf(a->schedule, sizeof a->schedule, "%s", name);
  a->v = v;
  a->m = m;
  rp_schedule *s = NULL;
  double scale = (double)in->m_ref / m;
  rp_costs c = {in->costs.tF * scale, in->costs.tB * scale, in->costs.tW * scale, in->costs.comm};
  rp_costs c0 = c;
  c0.comm = 0;
  rp_status st = RP_OK;
  if (in->layers > 0 && in->p * v > in->layers)
    st = rp_err(RP_EINVAL, "--pp %d x --vpp %d = %d stages need at least that many layers "
                "(--layers %d)", in->p, v, in->p * v, in->layers);
  if (st == RP_OK) st = rp_schedule_make(name, in->p, v, m, &s);
  if (st == RP_OK) st = simulate_at(s, c, &a->step, &a->bubble);
  if (st == RP_OK) st = simulate_at(s, c0, &a->step_nocomm, NULL);
  if (st == RP_OK) st = plan_memory(s, in, scale, &a->mem_mib, &a->sends);
  rp_schedule_free(s);
  if (st != RP_OK) {
    snprintf(a->why, sizeof a->why, "refused: %s", rp_errmsg());
    return;
  }
  if (in->limit_mib > 0 && a->mem_mib > in->limit_mib) {
    snprintf(a->why, sizeof a->why, "memory: needs %.3g MiB per rank, over the %.3g MiB limit",
             a->mem_mib, in->limit_mib);
    return;
  }
  a->ok = 1;
}

static int by_rank(const void *x, const void *y) {
  const rp_advice *a = x, *b = y;
  int ra = a->ok ? 0 : a->step > 0 ? 1 : 2, rb = b->ok ? 0 : b->step > 0 ? 1 : 2;
  if (ra != rb) return ra - rb;
  if (a->step != b->step) return a->step < b->step ? -1 : 1;
  return a->mem_mib < b->mem_mib ? -1 : a->mem_mib > b->mem_mib;
}

/* Why a feasible candidate is slower than the best one: the bubble it leaves
 * (at comm = 0 every candidate does the same work) and what latency adds. */
static void explain(rp_advice *a, const rp_advice *best) {
  if (a == best) {
    snprintf(a->why, sizeof a->why, "best: bubble %.1f%%, %.3g MiB", 100 * a->bubble, a->mem_mib);
    return;
  }
  double slower = a->step / best->step - 1, comm = a->step - a->step_nocomm;
  double comm_best = best->step - best->step_nocomm;
  size_t len = (size_t)snprintf(a->why, sizeof a->why, "%+.1f%% step time: ", 100 * slower);
  if (a->step_nocomm > best->step_nocomm * (1 + 1e-9))
    len += (size_t)snprintf(a->why + len, sizeof a->why - len, "bubble %.1f%% vs %.1f%%",
                            100 * a->bubble, 100 * best->bubble);
  else
    len += (size_t)snprintf(a->why + len, sizeof a->why - len, "same bubble (%.1f%%)",
                            100 * a->bubble);
  if (comm > comm_best * (1 + 1e-9) + 1e-12 && len < sizeof a->why)
    len += (size_t)snprintf(a->why + len, sizeof a->why - len,
                            "; communication: %d messages per rank, latency adds %.3g vs %.3g",
                            a->sends, comm, comm_best);
  if (a->step == best->step && a->mem_mib > best->mem_mib && len < sizeof a->why)
    snprintf(a->why + len, sizeof a->why - len, "; more memory (%.3g vs %.3g MiB)", a->mem_mib,
             best->mem_mib);
}

rp_status rp_schedule_advise(const rp_advise_in *in_arg, rp_advice **out, int *count) {
  const rp_advise_in *in = in_arg;
  *out = NULL;
  *count = 0;
  if (in->p < 2)
    return rp_err(RP_EINVAL, "--pp %d: the advisor compares pipeline schedules, which need "
                  "--pp >= 2", in->p);
  if (in->m_ref < 1 || in->batch < 1)
    return rp_err(RP_EINVAL, "the measured micro-batches (%d) and sequences per micro-batch (%d) "
                  "must be >= 1", in->m_ref, in->batch);
  if (!(in->act_mib >= 0) || !(in->wstash_mib >= 0) || !(in->msg_mib >= 0) ||
      !(in->drop_mib >= 0 && in->drop_mib <= in->act_mib))
    return rp_err(RP_EINVAL, "activation sizes must be >= 0 MiB (and the part freed at I at "
                  "most the activations)");
  rp_advise_in lim = *in;
  if (in->limit_like[0]) { /* the memory that schedule plans at the measured m */
    rp_advice base;
    int v = rp_schedule_generator_chunks(in->limit_like);
    lim.limit_mib = 0;
    evaluate(&lim, in->limit_like, v > 0 ? v : 2, in->m_ref, &base);
    if (!base.ok)
      return rp_err(RP_EINVAL, "--memory-like %s at m=%d: %s", in->limit_like, in->m_ref,
                    base.why);
    lim.limit_mib = base.mem_mib * (1 + 1e-9);
  }
  in = &lim;
  int global = in->m_ref * in->batch, max_m = in->max_m > 0 ? in->max_m : 64;
  char list[256], *save = NULL;
  snprintf(list, sizeof list, "%s", rp_schedule_names);
  int cap = 0, n = 0;
  for (char *q = list; *q; q++) cap += *q == '|';
  cap = (cap + 1) * 2 * max_m;  /* at most two v per schedule */
  rp_advice *a = calloc((size_t)cap, sizeof *a);
  if (!a) return rp_err(RP_ENOMEM, "out of memory for the advice");
  for (char *name = strtok_r(list, "|", &save); name; name = strtok_r(NULL, "|", &save)) {
    int vk = rp_schedule_generator_chunks(name);
    if (!strcmp(name, "naive")) continue;  /* gradient accumulation, never a contender */
    for (int vi = 0; vi < (vk == 0 ? 2 : 1); vi++) {
      int v = vk == 0 ? 2 + 2 * vi : vk;  /* interleaved at v = 2 and 4 */
      for (int m = 1; m <= max_m && m <= global && n < cap; m++)
        if (global % m == 0) evaluate(in, name, v, m, &a[n++]);
    }
  }
  qsort(a, (size_t)n, sizeof *a, by_rank);
  for (int k = 0; k < n && a[0].ok; k++)
    if (a[k].ok) explain(&a[k], &a[0]);
  *out = a;
  *count = n;
  return RP_OK;
}
