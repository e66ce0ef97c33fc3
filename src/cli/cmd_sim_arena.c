/* ringpipe sim: bytes per rank. The arena plan (rp_schedule_plan_arena) is
 * the one the executor allocates by; given a run's metrics.jsonl it uses the
 * per-chunk sizes that run's executor planned with, so the MiB printed here
 * are the MiB that run allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_json.h"

/* sizes[r][3 c + k] (KEEP, DROP, W stash of chunk c) and the message bytes
 * from a run's pipeline line; its pp and vpp must be the schedule's. */
static rp_status sizes_from_run(const rp_schedule *s, const char *path, size_t *sizes,
                                size_t *msg) {
  char *line, key[96];
  RP_TRY(rp_sim_last_pipeline_line(path, &line));
  int64_t pp = 0, vpp = 0;
  uint64_t x = 0;
  rp_status st = RP_OK;
  if (rp_json_get_int64(line, "pipeline.pp", &pp) != RP_OK ||
      rp_json_get_int64(line, "pipeline.vpp", &vpp) != RP_OK ||
      rp_json_get_u64(line, "pipeline.msg_bytes", &x) != RP_OK)
    st = rp_err(RP_EFORMAT, "--from %s: the pipeline line has no buffer sizes (written by an "
                "older ringpipe? rerun it, or pass --act-mib)", path);
  else if (pp != s->p || vpp != s->v)
    st = rp_err(RP_EINVAL, "--from %s ran --pp %lld --vpp %lld: its buffer sizes fit only a "
                "schedule of that shape, not p=%d v=%d", path, (long long)pp, (long long)vpp,
                s->p, s->v);
  *msg = (size_t)x;
  for (int r = 0; r < s->p && st == RP_OK; r++)
    for (int k = 0; k < 3 * s->v && st == RP_OK; k++) {
      snprintf(key, sizeof key, "pipeline.buf_bytes.%d.%d", r, k);
      if (rp_json_get_u64(line, key, &x) != RP_OK)
        st = rp_err(RP_EFORMAT, "--from %s: no %s in its pipeline line", path, key);
      sizes[3 * s->v * r + k] = (size_t)x;
    }
  free(line);
  return st;
}

/* The same sizes on every rank from one micro-batch's MiB of a rank's share. */
static void sizes_from_mib(const rp_schedule *s, const rp_sim_sizes *z, size_t *sizes,
                           size_t *msg) {
  double mib = 1048576.0, v = s->v;
  double keep = z->keep_mib >= 0 ? z->keep_mib : z->act_mib;
  double wst = z->wstash_mib >= 0 ? z->wstash_mib : z->act_mib / 2;
  for (int r = 0; r < s->p; r++)
    for (int c = 0; c < s->v; c++) {
      size_t *x = &sizes[3 * s->v * r + 3 * c];
      x[0] = (size_t)(keep / v * mib);
      x[1] = (size_t)((z->act_mib - keep) / v * mib);
      x[2] = (size_t)(wst / v * mib);
    }
  *msg = (size_t)((z->msg_mib > 0 ? z->msg_mib : 0) * mib);
}

/* One rank's arena plan from its slice of the sizes. */
static rp_status plan_rank(const rp_schedule *s, int r, const size_t *sz, size_t msg,
                           rp_arena_plan *ap) {
  size_t keep[64], drop[64], wst[64];
  for (int c = 0; c < s->v; c++) {
    keep[c] = sz[3 * c];
    drop[c] = sz[3 * c + 1];
    wst[c] = sz[3 * c + 2];
  }
  rp_buf_sizes bs = {keep, drop, wst, msg};
  return rp_schedule_plan_arena(s, r, &bs, ap);
}

static void print_rank(int r, const rp_arena_plan *ap) {
  double mib = 1048576.0;
  printf("%-6d %14.3f %14zu %14.3f %16.3f %9.1f%%  %s\n", r, ap->arena_bytes / mib,
         ap->arena_bytes, ap->live_peak / mib, ap->pooled_bytes / mib,
         ap->pooled_bytes ? 100.0 * (1.0 - (double)ap->arena_bytes / ap->pooled_bytes) : 0.0,
         ap->method);
}

/* The sizes of every rank (malloc'ed [p][3 v]) from --from or the MiB. */
static rp_status sizes_of(const rp_schedule *s, const rp_sim_sizes *z, size_t **sizes,
                          size_t *msg) {
  *sizes = NULL;
  *msg = 0;
  if (s->v > 64) return rp_err(RP_EINVAL, "--vpp %d: the memory plan takes up to 64 chunks", s->v);
  size_t *x = calloc((size_t)s->p * 3 * s->v, sizeof *x);
  if (!x) return rp_err(RP_ENOMEM, "out of memory");
  rp_status st = RP_OK;
  if (z->from[0])
    st = sizes_from_run(s, z->from, x, msg);
  else
    sizes_from_mib(s, z, x, msg);
  if (st != RP_OK) free(x);
  else *sizes = x;
  return st;
}

/* Plans every rank; `each` (may be NULL) sees each plan; *peak the largest arena. */
static rp_status plan_ranks(const rp_schedule *s, const rp_sim_sizes *z,
                            void (*each)(int, const rp_arena_plan *), size_t *peak) {
  size_t *sizes, msg;
  RP_TRY(sizes_of(s, z, &sizes, &msg));
  rp_status st = RP_OK;
  *peak = 0;
  for (int r = 0; r < s->p && st == RP_OK; r++) {
    rp_arena_plan ap;
    if ((st = plan_rank(s, r, sizes + 3 * s->v * r, msg, &ap)) != RP_OK) break;
    if (each) each(r, &ap);
    *peak = RP_MAX(*peak, ap.arena_bytes);
    rp_arena_plan_free(&ap);
  }
  free(sizes);
  return st;
}

rp_status rp_sim_print_arena(const rp_schedule *s, const rp_sim_sizes *z) {
  if (!z->from[0] && z->act_mib < 0) return RP_OK;
  size_t *sizes, msg, peak;
  RP_TRY(sizes_of(s, z, &sizes, &msg)); /* a bad --from fails before the heading */
  free(sizes);
  printf("buffer arena per rank (MiB; %s):\n", z->from[0] ? z->from : "from the --act-mib sizes");
  printf("%-6s %14s %14s %14s %16s %10s  %s\n", "rank", "arena planned", "(bytes)",
         "lower bound", "per-class pools", "saved", "layout");
  return plan_ranks(s, z, print_rank, &peak);
}

double rp_sim_arena_peak_mib(const rp_schedule *s, const rp_sim_sizes *z) {
  size_t peak;
  if (!z->from[0] && z->act_mib < 0) return -1;
  return plan_ranks(s, z, NULL, &peak) == RP_OK ? peak / 1048576.0 : -1;
}
