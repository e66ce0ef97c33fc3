/* ringpipe sim: run a pipeline schedule through the cost model and show its
 * timeline, bubble (next to the closed form) and memory; --all compares every
 * schedule for one (p, m). No MPI: this is arithmetic on action lists. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_options.h"
#include "ringpipe/rp_schedule.h"

typedef struct {
  char schedule[RP_OPT_STRLEN], costs[RP_OPT_STRLEN], svg[RP_OPT_STRLEN], csv[RP_OPT_STRLEN];
  char csv_stages[RP_OPT_STRLEN], from[RP_OPT_STRLEN], memory_like[RP_OPT_STRLEN];
  int pp, microbatches, vpp, all, width, timeline, advise, batch, max_m, top, layers;
  float memory_limit, act_mib, act_keep_mib, wstash_mib, msg_mib;
} sim_opts;

#define O(f) offsetof(sim_opts, f)
static const rp_opt sim_table[] = {
    {"schedule", RP_OPT_STR, O(schedule), "1f1b", 0, 0, NULL,
     "naive | gpipe | 1f1b | interleaved | zb-h1 | zb-h2 | zb-v | zb-v-half | zb-v-min | "
     "dualpipev, or a schedule .csv (one row per rank)"},
    {"pp", RP_OPT_INT, O(pp), "0", 0, 4096, NULL,
     "pipeline ranks p (0: 4, or the CSV's row count)"},
    {"microbatches", RP_OPT_INT, O(microbatches), "0", 0, 1000000, NULL,
     "micro-batches m per step (0: 8, or the CSV's)"},
    {"vpp", RP_OPT_INT, O(vpp), "0", 0, 64, NULL,
     "model chunks per rank v (0: 2 for interleaved and the V schedules, 1 otherwise)"},
    {"costs", RP_OPT_STR, O(costs), "1,2,1,0", 0, 0, NULL,
     "tF,tB[,tW[,comm]]: forward and full backward time of one rank's share of the model, "
     "the weight-gradient part of tB (I = tB - tW; default tB/2) and the transfer latency "
     "(default 0); a chunk action takes t/v"},
    {"svg", RP_OPT_STR, O(svg), "", 0, 0, NULL,
     "write an SVG timeline (with --all: every schedule but naive, on one time axis)"},
    {"csv", RP_OPT_STR, O(csv), "", 0, 0, NULL,
     "write the lowered schedule (with SEND/RECV, what an executor runs) as CSV"},
    {"csv-stages", RP_OPT_STR, O(csv_stages), "", 0, 0, NULL,
     "write it with global stage indices instead of local chunks (torch's notation)"},
    {"all", RP_OPT_BOOL, O(all), "0", 0, 0, NULL, "compare every schedule side by side for this (p, m)"},
    {"width", RP_OPT_INT, O(width), "160", 20, 100000, NULL, "columns of the ASCII timeline"},
    {"advise", RP_OPT_BOOL, O(advise), "0", 0, 0, NULL,
     "rank every schedule x vpp x micro-batch count by predicted step time under "
     "--memory-limit, and say why each loser loses"},
    {"memory-limit", RP_OPT_FLOAT, O(memory_limit), "0", 0, 1e9, NULL,
     "--advise: activation memory per rank in MiB (slots, W stashes, message buffers); 0 none"},
    {"memory-like", RP_OPT_STR, O(memory_like), "", 0, 0, NULL,
     "--advise: the limit is the memory this schedule plans (e.g. 1f1b) at --microbatches"},
    {"from", RP_OPT_STR, O(from), "", 0, 0, NULL,
     "a run's metrics.jsonl: its last pipeline line gives costs and sizes (--advise), or the "
     "buffer sizes each rank's arena is planned from (one schedule of the run's --pp, --vpp)"},
    {"act-mib", RP_OPT_FLOAT, O(act_mib), "-1", -1, 1e9, NULL,
     "activations of one micro-batch for one rank's whole share (MiB): --advise sizes, and "
     "one schedule's arena per rank"},
    {"act-keep-mib", RP_OPT_FLOAT, O(act_keep_mib), "-1", -1, 1e9, NULL,
     "the part of --act-mib the weight-gradient pass W reads (kept from I to W; default all)"},
    {"wstash-mib", RP_OPT_FLOAT, O(wstash_mib), "-1", -1, 1e9, NULL,
     "--advise: W stash of one micro-batch, one rank's share (MiB; default half of --act-mib)"},
    {"msg-mib", RP_OPT_FLOAT, O(msg_mib), "-1", -1, 1e9, NULL,
     "--advise: one activation or gradient message (MiB; default 0)"},
    {"batch", RP_OPT_INT, O(batch), "1", 1, 1000000, NULL,
     "--advise: sequences per measured micro-batch (global batch = --microbatches x this)"},
    {"max-m", RP_OPT_INT, O(max_m), "64", 1, 4096, NULL, "--advise: largest micro-batch count tried"},
    {"top", RP_OPT_INT, O(top), "15", 0, 100000, NULL, "--advise: rows shown (0: all)"},
    {"layers", RP_OPT_INT, O(layers), "0", 0, 100000, NULL,
     "--advise: the model's layers (p x v stages need as many; 0: not checked)"},
    {"timeline", RP_OPT_BOOL, O(timeline), "1", 0, 0, NULL, "print the ASCII timeline(s)"},
};
#undef O
static const int sim_nopts = sizeof sim_table / sizeof sim_table[0];

static int fail(rp_status s) {
  fprintf(stderr, "ringpipe sim: error: %s\n", rp_errmsg()[0] ? rp_errmsg() : rp_status_name(s));
  return (s == RP_EINVAL || s == RP_EIO || s == RP_EFORMAT) ? 2 : 1;
}

static rp_status parse_costs(const char *text, rp_costs *c) {
  double x[4];
  int n = 0;
  const char *p = text;
  while (n < 4) {
    char *end;
    x[n] = strtod(p, &end);
    if (end == p) break;
    n++;
    p = end;
    while (*p == ' ') p++;
    if (*p != ',') break;
    p++;
  }
  while (*p == ' ') p++;
  if (n < 2 || *p != '\0')
    return rp_err(RP_EINVAL, "--costs '%s': write tF,tB[,tW[,comm]] as numbers, e.g. 1,2,1,0",
                  text);
  *c = (rp_costs){x[0], x[1], n > 2 ? x[2] : x[1] / 2, n > 3 ? x[3] : 0};
  return RP_OK;
}

/* A schedule and its simulated timeline; `why` holds the reason when it could
 * not be built (a violated constraint), for the --all table. */
typedef struct {
  const char *name;
  rp_schedule *s;
  rp_sim *sim;
  char why[400];
  char title[160];
} run;

static rp_status run_one(run *R, const char *name, int p, int v, int m, const rp_costs *c) {
  R->name = name;
  rp_status st = rp_schedule_make(name, p, v, m, &R->s);
  if (st == RP_OK) st = rp_schedule_simulate(R->s, c, &R->sim);
  if (st != RP_OK) {
    snprintf(R->why, sizeof R->why, "%s", rp_errmsg());
    return st;
  }
  snprintf(R->title, sizeof R->title, "%s  p=%d v=%d m=%d  (tF=%g tB=%g tW=%g comm=%g)",
           R->s->name, R->s->p, R->s->v, R->s->m, c->tF, c->tB, c->tW, c->comm);
  return RP_OK;
}

static void run_free(run *R) {
  rp_sim_free(R->sim);
  rp_schedule_free(R->s);
}

static void print_defs(void) {
  printf("bubble: idle/total = sum(idle) / (p * makespan), the share of rank-time spent idle;\n"
         "        idle/ideal = sum(idle) / sum(busy), the papers' measure ((p-1)/m for 1F1B);\n"
         "        the formula assumes equal stages and comm = 0.\n");
}

static void print_ranks(const run *R) {
  rp_slot_plan plan;
  /* the last four columns are the buffer plan the executor allocates */
  printf("%-6s %10s %10s %11s %15s %9s %10s %10s %10s\n", "rank", "busy", "idle", "idle/total",
         "acts in flight", "W stash", "recv bufs", "act slots", "grad bufs");
  for (int r = 0; r < R->s->p; r++) {
    int nrbuf = -1, nact = -1, ngbuf = -1;
    if (rp_schedule_plan_slots(R->s, r, &plan) == RP_OK) {
      nrbuf = plan.n_rbuf, nact = plan.n_act, ngbuf = plan.n_gbuf;
      rp_slot_plan_free(&plan);
    }
    printf("%-6d %10.4g %10.4g %10.1f%% %15d %9d %10d %10d %10d\n", r, R->sim->busy[r],
           R->sim->idle[r], 100 * R->sim->idle[r] / R->sim->makespan, R->sim->peak_act[r],
           R->sim->peak_wst[r], nrbuf, nact, ngbuf);
  }
}

/* Activation slots per rank from the buffer plan (what the executor
 * allocates); returns the peak over ranks. */
static int planned_slots(const rp_schedule *s, int *per_rank) {
  int peak = 0;
  for (int r = 0; r < s->p; r++) {
    rp_slot_plan plan;
    per_rank[r] = -1;
    if (rp_schedule_plan_slots(s, r, &plan) != RP_OK) continue;
    per_rank[r] = plan.n_act;
    peak = RP_MAX(peak, plan.n_act);
    rp_slot_plan_free(&plan);
  }
  return peak;
}

/* The planned peak activation slots beside their closed form. */
static void print_memory(const run *R) {
  const char *text = "";
  int f = rp_schedule_memory_formula(R->s->name, R->s->p, R->s->v, R->s->m, &text);
  int *slots = malloc((size_t)R->s->p * sizeof *slots);
  int peak = slots ? planned_slots(R->s, slots) : -1;
  free(slots);
  printf("activation slots (peak over ranks, %s): planned %d", R->s->v > 1 ? "chunks" : "micro-batches",
         peak);
  if (f >= 0) printf(", formula %d: %s", f, text);
  printf("\n");
}

static void print_bubble(const run *R, const rp_costs *c) {
  const char *text = "";
  double f = rp_schedule_bubble_formula(R->s->name, R->s->p, R->s->v, R->s->m, c, &text);
  double ideal = 0;
  for (int r = 0; r < R->s->p; r++) ideal = RP_MAX(ideal, R->sim->busy[r]);
  printf("makespan %.4g (ideal %.4g: one rank's work with no bubble)\n", R->sim->makespan, ideal);
  printf("%-10s %11s %11s\n", "bubble", "idle/total", "idle/ideal");
  printf("%-10s %10.2f%% %10.2f%%\n", "simulated", 100 * R->sim->bubble_total,
         100 * R->sim->bubble_ideal);
  if (isnan(f))
    printf("%-10s %11s %11s  (no closed form for this schedule)\n", "formula", "-", "-");
  else
    printf("%-10s %10.2f%% %10.2f%%  %s\n", "formula", 100 * f / (1 + f), 100 * f, text);
  printf("%-10s %11s %10.2f%%  (steps overlapped: period %.4g)\n", "steady", "",
         100 * R->sim->bubble_steady, R->sim->period);
  double fs = rp_schedule_steady_formula(R->s->name, R->s->p, R->s->v, R->s->m, c, &text);
  if (!isnan(fs)) printf("%-10s %11s %10.2f%%  %s\n", "formula", "", 100 * fs, text);
  print_memory(R);
}

static int cmd_single(const sim_opts *o, const rp_costs *c) {
  run R = {0};
  int p = o->pp, m = o->microbatches, v = o->vpp;
  size_t len = strlen(o->schedule);
  int is_csv = strchr(o->schedule, '/') || (len > 4 && !strcmp(o->schedule + len - 4, ".csv"));
  if (!is_csv) {
    if (!p) p = 4;
    if (!m) m = 8;
    if (!v) v = rp_schedule_generator_chunks(o->schedule) == 1 ? 1 : 2;
  }
  rp_status st = run_one(&R, o->schedule, p, v, m, c);
  if (st != RP_OK) {
    run_free(&R);
    return fail(st);
  }
  printf("schedule %s\n", R.title);
  if (o->timeline) rp_sim_print_ascii(stdout, R.s, R.sim, o->width);
  print_ranks(&R);
  if (R.s->v > 1)
    printf("(with v = %d, an activation in flight is one chunk's: 1/%d of a rank's layers)\n",
           R.s->v, R.s->v);
  print_bubble(&R, c);
  rp_sim_sizes z = {o->from, o->act_mib, o->act_keep_mib, o->wstash_mib, o->msg_mib};
  if ((st = rp_sim_print_arena(R.s, &z)) != RP_OK) {
    run_free(&R);
    return fail(st);
  }
  print_defs();
  if (o->csv[0] && (st = rp_schedule_csv_save(R.s, o->csv)) == RP_OK)
    printf("wrote %s (%s)\n", o->csv, R.s->lowered ? "with SEND/RECV" : "single rank");
  if (st == RP_OK && o->csv_stages[0] &&
      (st = rp_schedule_csv_save_stages(R.s, o->csv_stages)) == RP_OK)
    printf("wrote %s (global stage indices)\n", o->csv_stages);
  if (st == RP_OK && o->svg[0]) {
    rp_svg_panel panel = {R.title, R.s, R.sim};
    if ((st = rp_sim_write_svg(o->svg, &panel, 1)) == RP_OK) printf("wrote %s\n", o->svg);
  }
  run_free(&R);
  return st == RP_OK ? 0 : fail(st);
}

enum { RP_MAX_SIM_RANKS = 64 }; /* --all lists per-rank slots up to this many ranks */

static void join_ints(char *buf, size_t n, const int *x, int count) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < count && len < n; i++)
    len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? " " : "", x[i]);
}

static int cmd_all(const sim_opts *o, const rp_costs *c) {
  static const char *names[] = {"naive", "gpipe",     "1f1b",     "interleaved", "zb-h1",
                                "zb-h2", "zb-v",      "zb-v-half", "zb-v-min",   "dualpipev"};
  enum { NS = 10 };
  int p = o->pp ? o->pp : 4, m = o->microbatches ? o->microbatches : 8;
  int vi = o->vpp > 1 ? o->vpp : 2;
  if (o->csv[0] || o->csv_stages[0])
    return fail(rp_err(RP_EINVAL, "--csv writes one schedule; drop --all or --csv"));
  run R[NS];
  memset(R, 0, sizeof R);
  for (int k = 0; k < NS; k++) {
    int v = rp_schedule_generator_chunks(names[k]);
    if (v == 0) v = vi;
    if (run_one(&R[k], names[k], p, v, m, c) == RP_OK && o->timeline) {
      printf("\n%s\n", R[k].title);
      rp_sim_print_ascii(stdout, R[k].s, R[k].sim, o->width);
    }
  }
  printf("\np=%d m=%d, costs tF=%g tB=%g tW=%g comm=%g (one rank's share; chunk actions take t/v)\n",
         p, m, c->tF, c->tB, c->tW, c->comm);
  printf("%-12s %2s %9s | %-22s | %-22s %-38s | %-8s | %-16s %s\n", "", "", "", "simulated",
         "closed form", "", "steady", "per rank:", "");
  /* with sizes (--act-mib, or --from a run of this --pp) a last column: the
   * largest rank's buffer arena */
  rp_sim_sizes z = {o->from, o->act_mib, o->act_keep_mib, o->wstash_mib, o->msg_mib};
  int sized = o->from[0] || o->act_mib >= 0;
  printf("%-12s %2s %9s | %10s %11s | %10s %11s %-38s | %8s | %-16s %s%s\n", "schedule", "v",
         "makespan", "idle/total", "idle/ideal", "idle/total", "idle/ideal", "  formula",
         "sim", "act slots", sized ? "acts in flight   " : "acts in flight",
         sized ? "| arena MiB (largest rank)" : "");
  double ref = NAN;
  for (int k = 0; k < NS; k++)
    if (R[k].sim && !strcmp(names[k], "1f1b")) ref = R[k].sim->bubble_ideal;
  rp_svg_panel panels[NS];
  int np = 0;
  for (int k = 0; k < NS; k++) {
    if (!R[k].sim) {
      printf("%-12s  n/a: %s\n", names[k], R[k].why);
      continue;
    }
    const rp_schedule *s = R[k].s;
    const rp_sim *sim = R[k].sim;
    const char *text = "";
    double f = rp_schedule_bubble_formula(names[k], s->p, s->v, s->m, c, &text);
    char acts[256], slots_txt[256];
    int slots[RP_MAX_SIM_RANKS];
    join_ints(acts, sizeof acts, sim->peak_act, s->p);
    if (s->p <= RP_MAX_SIM_RANKS) {
      planned_slots(s, slots);
      join_ints(slots_txt, sizeof slots_txt, slots, s->p);
      const char *mtext = "";
      int mf = rp_schedule_memory_formula(names[k], s->p, s->v, s->m, &mtext);
      size_t len = strlen(slots_txt);
      if (mf >= 0) /* the closed form beside the plan */
        snprintf(slots_txt + len, sizeof slots_txt - len, " [%d]", mf);
    } else {
      snprintf(slots_txt, sizeof slots_txt, "(see --schedule)");
    }
    char ftot[16] = "-", fid[16] = "-";
    if (!isnan(f)) {
      snprintf(ftot, sizeof ftot, "%.2f%%", 100 * f / (1 + f));
      snprintf(fid, sizeof fid, "%.2f%%", 100 * f);
    }
    printf("%-12s %2d %9.4g | %9.2f%% %10.2f%% | %10s %11s   %-36s | %7.2f%% | %-16s %s",
           names[k], s->v, sim->makespan, 100 * sim->bubble_total, 100 * sim->bubble_ideal,
           ftot, fid, isnan(f) ? "(none)" : text, 100 * sim->bubble_steady,
           slots_txt, acts);
    double arena = sized ? rp_sim_arena_peak_mib(s, &z) : -1;
    int pad = RP_MAX(0, 16 - (int)strlen(acts));
    if (sized && arena >= 0) printf("%*s | %.3f", pad, "", arena);
    if (sized && arena < 0) printf("%*s | -", pad, "");
    printf("\n");
    /* naive's timeline is p times longer than the rest and would squash them
     * on the shared time axis; `--schedule naive --svg` draws it alone. */
    if (strcmp(names[k], "naive") != 0) panels[np++] = (rp_svg_panel){R[k].title, s, sim};
  }
  if (!isnan(ref) && ref > 0) {
    printf("bubble relative to 1f1b (idle/ideal):");
    for (int k = 0; k < NS; k++)
      if (R[k].sim) printf("  %s %.2f", names[k], R[k].sim->bubble_ideal / ref);
    printf("\n");
  }
  print_defs();
  printf("act slots: the buffer plan's activations per rank, [n] the memory closed form (its\n"
         "        peak over ranks); a bubble formula starting with '~' is approximate.\n");
  rp_status st = RP_OK;
  if (o->svg[0] && np > 0 && (st = rp_sim_write_svg(o->svg, panels, np)) == RP_OK)
    printf("wrote %s\n", o->svg);
  for (int k = 0; k < NS; k++) run_free(&R[k]);
  return st == RP_OK ? 0 : fail(st);
}

int rp_cmd_sim(int argc, char **argv) {
  sim_opts o;
  int help = 0;
  rp_status st = rp_opts_parse(sim_table, sim_nopts, &o, argc, argv, &help, NULL, NULL);
  if (help) {
    rp_opts_help(stdout,
                 "ringpipe sim --schedule naive|gpipe|1f1b|interleaved|zb-h1|FILE.csv --pp P "
                 "--microbatches M [--vpp V] [--costs tF,tB,tW,comm] [--svg FILE] [--csv FILE] "
                 "[--all] | --advise --pp P --memory-limit MiB [--costs ... | --from metrics.jsonl]",
                 "Simulate a pipeline schedule: ASCII timeline, bubble next to its closed form, "
                 "activations in flight per rank.",
                 sim_table, sim_nopts);
    return 0;
  }
  if (st != RP_OK) {
    int code = fail(st);
    fprintf(stderr, "run 'ringpipe sim --help' for the options\n");
    return code;
  }
  rp_costs c;
  if ((st = parse_costs(o.costs, &c)) != RP_OK) return fail(st);
  if (o.advise) {
    rp_sim_advise_args a = {.costs = c, .pp = o.pp ? o.pp : 4,
                            .microbatches = o.microbatches ? o.microbatches : 8,
                            .batch = o.batch, .max_m = o.max_m, .top = o.top,
                            .memory_limit = o.memory_limit, .act_mib = o.act_mib,
                            .act_keep_mib = o.act_keep_mib,
                            .wstash_mib = o.wstash_mib, .msg_mib = o.msg_mib, .from = o.from,
                            .layers = o.layers, .memory_like = o.memory_like};
    return rp_sim_advise(&a);
  }
  return o.all ? cmd_all(&o, &c) : cmd_single(&o, &c);
}
