/* Serving metrics (rp_serve.h): per-turn records, their summary (JCT, TTFT,
 * TPOT, hit rate, storage-NIC balance), JSONL and a Chrome trace. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_serve.h"
#include "ringpipe/rp_util.h"

const rp_serve_rung rp_serve_ladder[RP_SERVE_RUNGS] = {
    {"basic", RP_MODE_BASIC, 0, RP_SCHED_ROUND_ROBIN},
    {"+layerwise", RP_MODE_BASIC, 1, RP_SCHED_ROUND_ROBIN},
    {"+dualpath", RP_MODE_DUALPATH, 1, RP_SCHED_ROUND_ROBIN},
    {"+scheduler=DualPath", RP_MODE_DUALPATH, 1, RP_SCHED_PAPER},
    {"oracle", RP_MODE_ORACLE, 1, RP_SCHED_PAPER},
};

const char *rp_serve_mode_name(rp_serve_mode m) {
  return m == RP_MODE_BASIC ? "basic" : m == RP_MODE_DUALPATH ? "dualpath" : "oracle";
}

void rp_serve_summarize(const rp_turn_record *r, long n, int nnodes, const double *snic_bytes,
                        const double *snic_busy, double net_bytes, rp_serve_summary *out) {
  memset(out, 0, sizeof *out);
  out->nnodes = nnodes;
  out->net_bytes = net_bytes;
  double *ttft = malloc((size_t)(n > 0 ? n : 1) * sizeof *ttft);
  double hit = 0, prompt = 0, tpot = 0;
  long ntpot = 0;
  for (long i = 0; i < n; i++) {
    out->jct = fmax(out->jct, r[i].t_done);
    ttft[i] = r[i].t_first - r[i].t_arrive;
    out->ttft_mean += ttft[i] / (double)n;
    hit += (double)r[i].hit;
    prompt += (double)r[i].prompt;
    if (r[i].gen > 1) {
      tpot += (r[i].t_done - r[i].t_decode) / (double)(r[i].gen - 1);
      ntpot++;
    }
  }
  if (n > 0 && ttft) {
    rp_sort_doubles(ttft, n);
    out->ttft_p99 = ttft[(long)ceil(0.99 * (double)(n - 1))];
  }
  free(ttft);
  out->tpot_mean = ntpot ? tpot / (double)ntpot : 0;
  out->hit_rate = prompt > 0 ? hit / prompt : 0;
  out->snic_bytes = calloc((size_t)nnodes, sizeof(double));
  out->snic_busy = calloc((size_t)nnodes, sizeof(double));
  double mx = 0, sum = 0;
  for (int k = 0; k < nnodes && out->snic_bytes; k++) {
    out->snic_bytes[k] = snic_bytes[k];
    out->snic_busy[k] = snic_busy[k];
    mx = fmax(mx, snic_bytes[k]);
    sum += snic_bytes[k];
    out->snic_util_mean += out->jct > 0 ? snic_busy[k] / out->jct / nnodes : 0;
  }
  out->snic_max_over_avg = sum > 0 ? mx / (sum / nnodes) : 0;
}

void rp_serve_summary_free(rp_serve_summary *s) {
  free(s->snic_bytes);
  free(s->snic_busy);
  s->snic_bytes = s->snic_busy = NULL;
}

static const char *side_name(rp_read_side s) {
  return s == RP_READ_PE ? "pe" : s == RP_READ_DE ? "de" : "none";
}

rp_status rp_serve_write_jsonl(const char *path, const rp_turn_record *r, long n) {
  FILE *f = fopen(path, "w");
  if (!f) return rp_err(RP_EIO, "cannot write %s: %s", path, strerror(errno));
  for (long i = 0; i < n; i++)
    fprintf(f, "{\"agent\":%d,\"turn\":%d,\"pe\":%d,\"de\":%d,\"read\":\"%s\",\"prompt\":%ld,"
            "\"hit\":%ld,\"gen\":%ld,\"arrive\":%.6f,\"first\":%.6f,\"decode\":%.6f,\"done\":%.6f}\n",
            r[i].agent, r[i].turn, r[i].pe, r[i].de, side_name(r[i].side), r[i].prompt,
            r[i].hit, r[i].gen, r[i].t_arrive, r[i].t_first, r[i].t_decode, r[i].t_done);
  return fclose(f) == 0 ? RP_OK : rp_err(RP_EIO, "cannot write %s", path);
}

void rp_serve_print_summary(FILE *f, const char *label, const rp_serve_summary *s) {
  fprintf(f, "%-22s JCT %9.3f s  TTFT %8.4f s (p99 %8.4f)  TPOT %8.5f s  hit %5.1f%%  "
          "SNIC max/avg %5.2f  util %5.1f%%\n",
          label, s->jct, s->ttft_mean, s->ttft_p99, s->tpot_mean, 100 * s->hit_rate,
          s->snic_max_over_avg, 100 * s->snic_util_mean);
}

/* ---- Chrome trace */

rp_status rp_ctrace_open(rp_ctrace *t, const char *path) {
  t->f = fopen(path, "w");
  t->first = 1;
  if (!t->f) return rp_err(RP_EIO, "cannot write the timeline %s: %s", path, strerror(errno));
  fputs("{\"traceEvents\":[\n", t->f);
  return RP_OK;
}

void rp_ctrace_event(rp_ctrace *t, const char *name, int pid, int tid, double t0, double t1) {
  if (!t || !t->f) return;
  fprintf(t->f, "%s{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
          t->first ? "" : ",\n", name, pid, tid, t0 * 1e6, (t1 - t0) * 1e6);
  t->first = 0;
}

void rp_ctrace_close(rp_ctrace *t) {
  if (!t->f) return;
  fputs("\n]}\n", t->f);
  fclose(t->f);
  t->f = NULL;
}
