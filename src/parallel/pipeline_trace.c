/* Measured pipeline timelines: gathered onto rank 0 as an rp_sim (so measured and
 * predicted bubbles come from the same code) and exported as Chrome trace JSON. */
#include <stdio.h>
#include <stdlib.h>

#include "ringpipe/rp_pipeline.h"

enum { FIELDS = 6 }; /* op, chunk, mb, t0, t1, wait */

/* Every rank's spans on rank 0 of the pipeline group: *all holds FIELDS doubles
 * per action, rank after rank; *counts the actions per rank. NULL elsewhere. */
static rp_status gather_spans(const rp_pipeline *p, double **all, int **counts) {
  const rp_pipeline_stats *st = rp_pipeline_last(p);
  MPI_Comm comm = rp_pipeline_config(p)->comm;
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  double *mine = malloc((size_t)(st->n + 1) * FIELDS * sizeof(double));
  int *cnt = malloc(size * sizeof(int)), *disp = malloc(size * sizeof(int));
  if (!mine || !cnt || !disp) return rp_err(RP_ENOMEM, "out of memory gathering the timeline");
  for (int i = 0; i < st->n; i++) {
    const rp_span *s = &st->spans[i];
    double *d = mine + FIELDS * i;
    d[0] = s->a.op, d[1] = s->a.chunk, d[2] = s->a.mb, d[3] = s->t0, d[4] = s->t1;
    d[5] = st->wait[i];
  }
  int n = st->n * FIELDS, total = 0;
  MPI_Gather(&n, 1, MPI_INT, cnt, 1, MPI_INT, 0, comm);
  for (int r = 0; rank == 0 && r < size; r++) disp[r] = total, total += cnt[r];
  *all = rank == 0 ? malloc((size_t)(total + 1) * sizeof(double)) : NULL;
  MPI_Gatherv(mine, n, MPI_DOUBLE, *all, cnt, disp, MPI_DOUBLE, 0, comm);
  for (int r = 0; rank == 0 && r < size; r++) cnt[r] /= FIELDS;
  free(mine);
  free(disp);
  if (rank == 0) {
    *counts = cnt;
  } else {
    free(cnt);
    *counts = NULL;
  }
  return RP_OK;
}

rp_status rp_pipeline_gather_timeline(rp_pipeline *p, rp_sim **out) {
  const rp_schedule *s = rp_pipeline_config(p)->sched;
  double *all;
  int *cnt;
  *out = NULL;
  RP_TRY(gather_spans(p, &all, &cnt));
  if (!all) return RP_OK;
  rp_sim *sim;
  rp_status st = rp_sim_new(s, &sim);
  const double *d = all;
  for (int r = 0; st == RP_OK && r < s->p; r++)
    for (int i = 0; i < cnt[r]; i++, d += FIELDS)
      if (i < sim->n[r]) sim->spans[r][i].t0 = d[3], sim->spans[r][i].t1 = d[4];
  if (st == RP_OK) {
    rp_sim_summarize(sim, s);
    *out = sim;
  }
  free(all);
  free(cnt);
  return st;
}

rp_status rp_pipeline_write_trace(rp_pipeline *p, const char *path) {
  double *all;
  int *cnt;
  RP_TRY(gather_spans(p, &all, &cnt));
  if (!all) return RP_OK;
  int ranks = rp_pipeline_config(p)->sched->p;
  FILE *f = fopen(path, "w");
  if (!f) {
    free(all);
    free(cnt);
    return rp_err(RP_EIO, "cannot write trace file %s", path);
  }
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  for (int r = 0; r < ranks; r++)
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
               "\"args\":{\"name\":\"pp rank %d\"}},\n", r, r);
  const double *d = all;
  for (int r = 0; r < ranks; r++)
    for (int i = 0; i < cnt[r]; i++, d += FIELDS) {
      rp_action a = {(int)d[0], (int)d[1], (int)d[2]};
      char name[32];
      rp_action_str(a, name, sizeof name);
      int compute = rp_op_is_compute(a.op);
      double us0 = d[3] * 1e6, dur = (d[4] - d[3]) * 1e6;
      fprintf(f, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%s\",\"ts\":%.3f,", name,
              compute ? "compute" : "comm", compute ? "X" : "i", us0);
      if (compute) fprintf(f, "\"dur\":%.3f,", dur);
      else fprintf(f, "\"s\":\"t\",");
      fprintf(f, "\"pid\":0,\"tid\":%d,\"args\":{\"wait_us\":%.3f}},\n", r, d[5] * 1e6);
      /* Waits happen where a compute blocks on its input: drawn at its start. */
      if (d[5] > 0)
        fprintf(f, "{\"name\":\"wait\",\"cat\":\"wait\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                   "\"pid\":0,\"tid\":%d},\n", us0, d[5] * 1e6, r);
    }
  fprintf(f, "{\"name\":\"end\",\"ph\":\"i\",\"s\":\"g\",\"ts\":0,\"pid\":0,\"tid\":0}\n]}\n");
  int bad = fclose(f) != 0;
  free(all);
  free(cnt);
  return bad ? rp_err(RP_EIO, "could not finish writing %s", path) : RP_OK;
}
