/* End-of-run pipeline report: the last step's measured timeline next to the
 * simulator's prediction from the same (measured) per-action costs, in-flight
 * micro-batches and activation memory per rank, and an optional Chrome trace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_train.h"
#include "io/io_fs.h"
#include "train_internal.h"

/* Mean duration of F, B, I and W over the measured timeline, scaled to one
 * rank's whole share (the simulator's tF, tB, tW are per rank, actions take t/v). */
static rp_costs measured_costs(const rp_sim *sim, int v) {
  double sum[RP_OP_COUNT] = {0};
  int cnt[RP_OP_COUNT] = {0};
  for (int r = 0; r < sim->p; r++)
    for (int i = 0; i < sim->n[r]; i++) {
      const rp_span *s = &sim->spans[r][i];
      if (!rp_op_is_compute(s->a.op)) continue;
      sum[s->a.op] += s->t1 - s->t0;
      cnt[s->a.op]++;
    }
  double f = cnt[RP_OP_F] ? sum[RP_OP_F] / cnt[RP_OP_F] : 0;
  double w = cnt[RP_OP_W] ? sum[RP_OP_W] / cnt[RP_OP_W] : 0;
  double b = cnt[RP_OP_B] ? sum[RP_OP_B] / cnt[RP_OP_B]
                          : (cnt[RP_OP_I] ? sum[RP_OP_I] / cnt[RP_OP_I] : 0) + w;
  return (rp_costs){f * v, b * v, w * v, 0.0};
}

/* --trace was checked at start (its directory exists or can be created). */
static rp_status write_trace(rp_trainer *t) {
  char parent[RP_OPT_STRLEN];
  snprintf(parent, sizeof parent, "%s", t->o.trace);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent && t->grid.world_rank == 0) {
    *slash = '\0';
    RP_TRY(rp_io_mkdir_p(parent));
  }
  return rp_pipeline_write_trace(t->pipe, t->o.trace);
}

/* OUT/pipeline.svg: the simulated timeline above the measured one on one time
 * scale, for `ringpipe report` (a failure only warns: the run is done). */
static void write_timeline_svg(const rp_trainer *t, const rp_sim *measured, const rp_sim *pred) {
  char path[RP_OPT_STRLEN + 32];
  snprintf(path, sizeof path, "%s/pipeline.svg", t->o.out);
  rp_svg_panel panels[2] = {{"simulated from the measured action costs", t->sched, pred},
                            {"measured (last step)", t->sched, measured}};
  if (rp_sim_write_svg(path, panels, 2) != RP_OK) rp_warn("%s", rp_errmsg());
}

/* Per rank: the arena's planned, allocated, lower-bound, pooled and measured
 * live bytes, then the per-chunk KEEP, DROP and W stash sizes the plan used. */
enum { ARENA_FIGS = 5 };
typedef struct {
  double *figs;  /* [p][ARENA_FIGS] */
  double *sizes; /* [p][3 v] */
} arena_report;

static rp_status gather_arena(const rp_trainer *t, const rp_pipeline_stats *st, int root,
                              arena_report *ar) {
  int p = t->grid.pp, v = t->sched->v;
  double mine[ARENA_FIGS] = {(double)st->arena_bytes, (double)st->arena_alloc_bytes,
                             (double)st->arena_live_peak, (double)st->arena_pooled_bytes,
                             (double)st->measured_live_peak};
  double *sizes = malloc(3 * (size_t)v * sizeof *sizes);
  ar->figs = root ? calloc((size_t)p * ARENA_FIGS, sizeof(double)) : NULL;
  ar->sizes = root ? calloc((size_t)p * 3 * v, sizeof(double)) : NULL;
  if (!sizes || (root && (!ar->figs || !ar->sizes))) {
    free(sizes);
    return rp_err(RP_ENOMEM, "out of memory for the pipeline report");
  }
  for (int c = 0; c < v; c++) {
    sizes[3 * c] = (double)st->chunk_keep[c];
    sizes[3 * c + 1] = (double)st->chunk_drop[c];
    sizes[3 * c + 2] = (double)st->chunk_wstash[c];
  }
  MPI_Gather(mine, ARENA_FIGS, MPI_DOUBLE, ar->figs, ARENA_FIGS, MPI_DOUBLE, 0, t->grid.pp_comm);
  MPI_Gather(sizes, 3 * v, MPI_DOUBLE, ar->sizes, 3 * v, MPI_DOUBLE, 0, t->grid.pp_comm);
  free(sizes);
  return RP_OK;
}

static void print_arena(const rp_trainer *t, const arena_report *ar, const char *method) {
  double mib = 1048576.0;
  for (int r = 0; r < t->grid.pp; r++) {
    const double *f = &ar->figs[ARENA_FIGS * r];
    printf("  rank %d arena: planned %.3f MiB, allocated %.3f MiB, measured live peak %.3f "
           "MiB, lower bound %.3f MiB, per-class slot pools %.3f MiB\n", r, f[0] / mib,
           f[1] / mib, f[4] / mib, f[2] / mib, f[3] / mib);
  }
  printf("  (arena layout of this rank: %s)\n", method);
}

/* "arena": per rank [planned, allocated, lower bound, pooled, measured live]
 * bytes; "buf_bytes": per rank [keep, drop, wstash] per chunk; what `ringpipe
 * sim --from` plans again. */
static void write_arena_json(rp_jw *w, const rp_trainer *t, const arena_report *ar,
                             size_t msg_bytes) {
  int p = t->grid.pp, v = t->sched->v;
  rp_jw_key(w, "arena"), rp_jw_arr(w);
  for (int r = 0; r < p; r++) {
    rp_jw_arr(w);
    for (int k = 0; k < ARENA_FIGS; k++) rp_jw_fixed(w, ar->figs[ARENA_FIGS * r + k], 0);
    rp_jw_arr_end(w);
  }
  rp_jw_arr_end(w);
  rp_jw_key(w, "buf_bytes"), rp_jw_arr(w);
  for (int r = 0; r < p; r++) {
    rp_jw_arr(w);
    for (int k = 0; k < 3 * v; k++) rp_jw_fixed(w, ar->sizes[3 * v * r + k], 0);
    rp_jw_arr_end(w);
  }
  rp_jw_arr_end(w);
  rp_jw_key(w, "msg_bytes"), rp_jw_fixed(w, (double)msg_bytes, 0);
  /* the KEEP part of one micro-batch for a rank's whole share, as act_mib_per_mb */
  double keep = 0;
  for (int k = 0; k < p * v; k++) keep = RP_MAX(keep, ar->sizes[3 * k] * v / 1048576.0);
  rp_jw_key(w, "act_keep_mib_per_mb"), rp_jw_fixed(w, keep, 4);
}

/* The report's metrics.jsonl line: measured and predicted bubble, in-flight
 * micro-batches, activation MiB and the buffers allocated per rank. */
static rp_status write_pipeline_metrics(const rp_trainer *t, FILE *metrics, const rp_sim *measured,
                                        const rp_sim *pred, const rp_costs *c, const int *live,
                                        const double *mem, const int *slots,
                                        const arena_report *ar, size_t msg_bytes) {
  int p = t->grid.pp;
  rp_jw w;
  rp_jw_init(&w);
  rp_jw_obj(&w);
  rp_jw_key(&w, "pipeline"), rp_jw_obj(&w);
  rp_jw_key(&w, "emulated"), rp_jw_bool(&w, t->o.emulate.n != 0);
  rp_jw_key(&w, "schedule"), rp_jw_str(&w, t->sched->name);
  rp_jw_key(&w, "pp"), rp_jw_int(&w, p);
  rp_jw_key(&w, "vpp"), rp_jw_int(&w, t->sched->v);
  rp_jw_key(&w, "m"), rp_jw_int(&w, t->sched->m);
  rp_jw_key(&w, "bubble_total"), rp_jw_fixed(&w, measured->bubble_total, 6);
  rp_jw_key(&w, "bubble_ideal"), rp_jw_fixed(&w, measured->bubble_ideal, 6);
  rp_jw_key(&w, "predicted_bubble_total"), rp_jw_fixed(&w, pred ? pred->bubble_total : -1, 6);
  rp_jw_key(&w, "predicted_bubble_ideal"), rp_jw_fixed(&w, pred ? pred->bubble_ideal : -1, 6);
  rp_jw_key(&w, "peak_live"), rp_jw_arr(&w);
  for (int r = 0; r < p; r++) rp_jw_int(&w, live[r]);
  rp_jw_arr_end(&w);
  rp_jw_key(&w, "act_mib"), rp_jw_arr(&w); /* activation slots + W stashes */
  for (int r = 0; r < p; r++) rp_jw_fixed(&w, (mem[3 * r] + mem[3 * r + 2]) / 1048576.0, 4);
  rp_jw_arr_end(&w);
  rp_jw_key(&w, "slots"), rp_jw_arr(&w);
  for (int r = 0; r < p; r++) {
    rp_jw_arr(&w);
    for (int k = 0; k < 4; k++) rp_jw_int(&w, slots[4 * r + k]);
    rp_jw_arr_end(&w);
  }
  rp_jw_arr_end(&w);
  rp_jw_key(&w, "makespan_ms"), rp_jw_fixed(&w, measured->makespan * 1e3, 4);
  rp_jw_key(&w, "predicted_makespan_ms"), rp_jw_fixed(&w, pred ? pred->makespan * 1e3 : -1, 4);
  /* what `ringpipe sim --advise --from` reads: the costs as scalars and one
   * micro-batch's activation, W stash and message MiB for a rank's whole
   * share (the largest slot measured, times v) */
  double act = 0, wst = 0, v = t->sched->v, mib = 1048576.0;
  for (int r = 0; r < p; r++) {
    if (slots[4 * r] > 0) act = RP_MAX(act, mem[3 * r] / slots[4 * r] * v / mib);
    if (slots[4 * r + 1] > 0) wst = RP_MAX(wst, mem[3 * r + 2] / slots[4 * r + 1] * v / mib);
  }
  rp_jw_key(&w, "batch"), rp_jw_int(&w, t->o.batch);
  rp_jw_key(&w, "tF_ms"), rp_jw_fixed(&w, c->tF * 1e3, 4);
  rp_jw_key(&w, "tB_ms"), rp_jw_fixed(&w, c->tB * 1e3, 4);
  rp_jw_key(&w, "tW_ms"), rp_jw_fixed(&w, c->tW * 1e3, 4);
  rp_jw_key(&w, "act_mib_per_mb"), rp_jw_fixed(&w, act, 4);
  rp_jw_key(&w, "wstash_mib_per_mb"), rp_jw_fixed(&w, wst, 4);
  rp_jw_key(&w, "msg_mib"),
      rp_jw_fixed(&w, (double)t->o.batch * t->T_local * t->cfg.C * sizeof(float) / mib, 4);
  rp_jw_key(&w, "sends"), rp_jw_arr(&w); /* messages per rank and step: the comm volume */
  for (int r = 0; r < p; r++) {
    int n = 0;
    for (int i = 0; i < t->sched->n[r]; i++)
      n += t->sched->acts[r][i].op == RP_OP_SEND_F || t->sched->acts[r][i].op == RP_OP_SEND_B;
    rp_jw_int(&w, n);
  }
  rp_jw_arr_end(&w);
  rp_jw_key(&w, "costs_ms"), rp_jw_arr(&w);
  rp_jw_fixed(&w, c->tF * 1e3, 4), rp_jw_fixed(&w, c->tB * 1e3, 4), rp_jw_fixed(&w, c->tW * 1e3, 4);
  rp_jw_arr_end(&w);
  write_arena_json(&w, t, ar, msg_bytes);
  rp_jw_obj_end(&w);
  rp_jw_obj_end(&w);
  rp_status st = rp_jw_fputs_line(&w, metrics);
  rp_jw_free(&w);
  return st;
}

rp_status rp_pipeline_report(rp_trainer *t, FILE *metrics) {
  const rp_pipeline_stats *st = rp_pipeline_last(t->pipe);
  int p = t->grid.pp, root = t->grid.pp_rank == 0;
  int *live = root ? calloc(p, sizeof(int)) : NULL;
  double mine[3] = {(double)st->act_slots * st->act_slot_bytes, st->total_wait,
                    (double)st->wstash_bytes};
  double *mem = root ? calloc(3 * p, sizeof(double)) : NULL;
  MPI_Gather(&st->peak_live_acts, 1, MPI_INT, live, 1, MPI_INT, 0, t->grid.pp_comm);
  /* the buffers the executor allocated, per class of the shared plan */
  int my_slots[4] = {st->act_slots, st->wstash_slots, st->recv_bufs, st->grad_bufs};
  int *slots = root ? calloc(4 * (size_t)p, sizeof(int)) : NULL;
  MPI_Gather(my_slots, 4, MPI_INT, slots, 4, MPI_INT, 0, t->grid.pp_comm);
  MPI_Gather(mine, 3, MPI_DOUBLE, mem, 3, MPI_DOUBLE, 0, t->grid.pp_comm);
  arena_report ar = {0};
  RP_TRY(gather_arena(t, st, root, &ar));
  rp_sim *measured = NULL;
  RP_TRY(rp_pipeline_gather_timeline(t->pipe, &measured));
  if (t->o.trace[0]) RP_TRY(write_trace(t));
  if (!root || t->grid.world_rank != 0) {
    free(live);
    free(mem);
    free(slots);
    free(ar.figs), free(ar.sizes);
    if (measured) rp_sim_free(measured);
    return RP_OK;
  }
  rp_costs c = measured_costs(measured, t->sched->v);
  rp_sim *pred = NULL;
  rp_status s = rp_schedule_simulate(t->sched, &c, &pred);
  const char *formula_text = NULL;
  double formula = rp_schedule_bubble_formula(t->sched->name, p, t->sched->v, t->sched->m, &c,
                                              &formula_text);
  printf("pipeline (last step, schedule %s, pp %d, vpp %d, %d micro-batches, %s compute):\n",
         t->sched->name, p, t->sched->v, t->sched->m, t->o.emulate.n ? "EMULATED" : "real");
  printf("  measured costs per rank: tF %.2f ms, tB %.2f ms, tW %.2f ms\n", c.tF * 1e3,
         c.tB * 1e3, c.tW * 1e3);
  printf("  bubble (idle/total, idle/ideal): measured %.3f, %.3f | predicted %.3f, %.3f",
         measured->bubble_total, measured->bubble_ideal, s == RP_OK ? pred->bubble_total : -1,
         s == RP_OK ? pred->bubble_ideal : -1);
  if (formula == formula) printf(" | formula %s = %.3f", formula_text, formula);
  printf("\n  makespan: measured %.2f ms, predicted %.2f ms\n", measured->makespan * 1e3,
         s == RP_OK ? pred->makespan * 1e3 : -1);
  for (int r = 0; r < p; r++)
    printf("  rank %d: peak in-flight micro-batches %d, activation slots %.2f MiB, W stash "
           "%.2f MiB, MPI wait %.2f ms; buffers: %d activation slots, %d W stashes, %d "
           "receive, %d gradient-send\n", r, live[r], mem[3 * r] / 1048576.0,
           mem[3 * r + 2] / 1048576.0, mem[3 * r + 1] * 1e3, slots[4 * r], slots[4 * r + 1],
           slots[4 * r + 2], slots[4 * r + 3]);
  print_arena(t, &ar, st->arena_method);
  if (t->o.trace[0]) printf("  Chrome trace written to %s\n", t->o.trace);
  if (s == RP_OK) write_timeline_svg(t, measured, pred);
  if (metrics) s = write_pipeline_metrics(t, metrics, measured, s == RP_OK ? pred : NULL, &c,
                                        live, mem, slots, &ar, st->msg_bytes);
  free(ar.figs), free(ar.sizes);
  free(live);
  free(mem);
  free(slots);
  rp_sim_free(measured);
  if (pred) rp_sim_free(pred);
  return metrics ? s : RP_OK;
}
