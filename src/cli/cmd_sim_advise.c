/* ringpipe sim --advise: which pipeline schedule to use for given per-action
 * costs and a memory limit (rp_schedule_advise ranks them), from --costs or a
 * previous run's metrics.jsonl (its last "pipeline" line: measured costs and
 * activation, W stash and message sizes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_schedule.h"

/* The last line of a metrics file holding a pipeline report (malloc'ed). */
rp_status rp_sim_last_pipeline_line(const char *path, char **line) {
  *line = NULL;
  FILE *f = fopen(path, "r");
  if (!f) return rp_err(RP_EIO, "--from %s: cannot open it; pass a run's OUT/metrics.jsonl", path);
  char *buf = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&buf, &cap, f)) > 0)
    if (strstr(buf, "{\"pipeline\":")) {
      free(*line);
      *line = strdup(buf);
    }
  free(buf);
  fclose(f);
  if (!*line)
    return rp_err(RP_EFORMAT, "--from %s: no \"pipeline\" line; it is written by a run with "
                  "--pp >= 2 (use --costs instead)", path);
  return RP_OK;
}

static rp_status number(const char *json, const char *path, const char *key, double *v) {
  char full[64];
  snprintf(full, sizeof full, "pipeline.%s", key);
  if (rp_json_get_number(json, full, v) != RP_OK)
    return rp_err(RP_EFORMAT, "--from %s: the pipeline line has no number \"%s\" (written "
                  "by an older ringpipe? rerun, or use --costs)", path, key);
  return RP_OK;
}

/* Costs and sizes measured by a run; *note says what had to be assumed. */
static rp_status read_metrics(const char *path, rp_advise_in *in, char *note, size_t ncap) {
  char *line;
  RP_TRY(rp_sim_last_pipeline_line(path, &line));
  double tF, tB, tW, m, batch, act, wst, msg;
  rp_status st = RP_OK;
  if (st == RP_OK) st = number(line, path, "tF_ms", &tF);
  if (st == RP_OK) st = number(line, path, "tB_ms", &tB);
  if (st == RP_OK) st = number(line, path, "tW_ms", &tW);
  if (st == RP_OK) st = number(line, path, "m", &m);
  if (st == RP_OK) st = number(line, path, "batch", &batch);
  if (st == RP_OK) st = number(line, path, "act_mib_per_mb", &act);
  if (st == RP_OK) st = number(line, path, "wstash_mib_per_mb", &wst);
  if (st == RP_OK) st = number(line, path, "msg_mib", &msg);
  double keep = -1;
  if (rp_json_get_number(line, "pipeline.act_keep_mib_per_mb", &keep) != RP_OK) keep = -1;
  free(line);
  RP_TRY(st);
  note[0] = '\0';
  size_t len = 0;
  if (!(tW > 0 && tW < tB)) { /* a run without I/W measures no W of its own */
    tW = tB / 2;
    len += (size_t)snprintf(note + len, ncap - len, "tW not measured (no split backward): "
                            "taken as tB/2; ");
  }
  if (!(wst > 0) && in->wstash_mib < 0 && len < ncap)
    snprintf(note + len, ncap - len, "W stash not measured: taken as the activation size "
             "(pass --wstash-mib); ");
  in->costs = (rp_costs){tF, tB, tW, in->costs.comm};
  in->m_ref = (int)m;
  in->batch = (int)batch;
  /* the part W reads (newer runs write it): the rest is freed at I */
  if (in->act_mib < 0 && in->drop_mib < 0 && keep >= 0 && keep <= act) in->drop_mib = act - keep;
  if (in->act_mib < 0) in->act_mib = act;
  if (in->wstash_mib < 0) in->wstash_mib = wst > 0 ? wst : act;
  if (in->msg_mib < 0) in->msg_mib = msg;
  return RP_OK;
}

static void print_row(int rank, const rp_advice *a) {
  if (a->step > 0 && rank == 0) { /* simulated, but over the memory limit */
    printf("%4s  %-11s %2d %4d %11.4g %7.1f%% %10.3g %6d  %s\n", "", a->schedule, a->v, a->m,
           a->step, 100 * a->bubble, a->mem_mib, a->sends, a->why);
    return;
  }
  if (a->step > 0 && rank > 0)
    printf("%4d  %-11s %2d %4d %11.4g %7.1f%% %10.3g %6d  %s\n", rank, a->schedule, a->v, a->m,
           a->step, 100 * a->bubble, a->mem_mib, a->sends, a->why);
  else
    printf("%4s  %-11s %2d %4d %11s %8s %10s %6s  %s\n", "", a->schedule, a->v, a->m, "-", "-",
           "-", "-", a->why);
}

int rp_sim_advise(const rp_sim_advise_args *o) {
  rp_advise_in in = {.costs = o->costs, .p = o->pp, .m_ref = o->microbatches,
                     .batch = o->batch, .act_mib = o->act_mib, .wstash_mib = o->wstash_mib,
                     .msg_mib = o->msg_mib, .limit_mib = o->memory_limit, .max_m = o->max_m,
                     .layers = o->layers, .drop_mib = -1};
  snprintf(in.limit_like, sizeof in.limit_like, "%s", o->memory_like ? o->memory_like : "");
  char note[400] = "";
  rp_status st = RP_OK;
  if (o->from[0]) st = read_metrics(o->from, &in, note, sizeof note);
  if (st == RP_OK && (o->memory_limit > 0 || in.limit_like[0]) && in.act_mib < 0)
    st = rp_err(RP_EINVAL, "--memory-limit needs the activation size: pass --act-mib (one "
                "micro-batch, one rank's whole share) or --from a run's metrics.jsonl");
  if (in.act_mib < 0) in.act_mib = 0;
  if (o->act_keep_mib >= 0) in.drop_mib = RP_MAX(in.act_mib - o->act_keep_mib, 0);
  if (in.drop_mib < 0) in.drop_mib = 0;  /* unknown: all of it kept until W */
  if (in.wstash_mib < 0) in.wstash_mib = in.act_mib / 2;
  if (in.msg_mib < 0) in.msg_mib = 0;
  rp_advice *a = NULL;
  int n = 0;
  if (st == RP_OK) st = rp_schedule_advise(&in, &a, &n);
  if (st != RP_OK) {
    fprintf(stderr, "ringpipe sim: error: %s\n", rp_errmsg());
    return st == RP_EINVAL || st == RP_EIO || st == RP_EFORMAT ? 2 : 1; /* as cmd_sim.c */
  }
  printf("advice for p=%d: global batch %d micro-batches x %d sequences; per measured "
         "micro-batch tF=%g tB=%g tW=%g comm=%g%s%s\n", in.p, in.m_ref, in.batch, in.costs.tF,
         in.costs.tB, in.costs.tW, in.costs.comm, o->from[0] ? " from " : "", o->from);
  char limit[64] = "none";
  if (in.limit_mib > 0) snprintf(limit, sizeof limit, "%g MiB", in.limit_mib);
  if (in.limit_like[0]) snprintf(limit, sizeof limit, "what %s plans at m=%d", in.limit_like, in.m_ref);
  printf("memory per rank (activations %g of which %g freed at I, W stash %g, message %g MiB "
         "per micro-batch and rank share; the buffer arena each rank plans): limit %s\n",
         in.act_mib, in.drop_mib, in.wstash_mib, in.msg_mib, limit);
  if (note[0]) printf("note: %s\n", note);
  printf("(step time at m micro-batches of %d/m sequences each; costs and sizes scale with "
         "the rows)\n", in.m_ref * in.batch);
  printf("%4s  %-11s %2s %4s %11s %8s %10s %6s  %s\n", "rank", "schedule", "v", "m", "step",
         "bubble", "mem MiB", "sends", "why not first");
  /* the feasible ones by step time (--top of them), then why the rest cannot */
  int feasible = 0, top = o->top > 0 ? o->top : n;
  while (feasible < n && a[feasible].ok) feasible++;
  for (int k = 0; k < feasible && k < top; k++) print_row(k + 1, &a[k]);
  if (feasible > top) printf("  ... %d more that fit (--top 0 lists all)\n", feasible - top);
  if (feasible < n) printf("  not possible:\n");
  int left = o->top > 0 ? 12 : n;
  for (int k = feasible; k < n && k - feasible < left; k++) print_row(0, &a[k]);
  if (n - feasible > left) printf("  ... %d more not possible (--top 0 lists all)\n", n - feasible - left);
  if (n > 0 && a[0].ok)
    printf("choice: --schedule %s --vpp %d --microbatches %d\n", a[0].schedule, a[0].v, a[0].m);
  else
    printf("choice: none fits the memory limit; raise --memory-limit or add pipeline ranks\n");
  free(a);
  return 0;
}
