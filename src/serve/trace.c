/* Traces (rp_serve.h): synthetic agent trajectories with the statistics of the
 * DualPath paper's Table 2, and Mooncake-format JSONL replay. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_json.h"
#include "ringpipe/rp_serve.h"
#include "ringpipe/rp_util.h"

/* Table 2 of arXiv 2602.21548: mean turns, appended and generated tokens per
 * turn of the three agentic data sets, named by their context limit. */
static const rp_trace_stats table2[] = {
    {"32k", 32768, 60, 608, 148},
    {"48k", 49152, 106, 474, 172},
    {"64k", 65536, 157, 429, 176},
};

const rp_trace_stats *rp_trace_table2(const char *name) {
  for (size_t i = 0; i < sizeof table2 / sizeof *table2; i++)
    if (strcmp(name, table2[i].name) == 0) return &table2[i];
  return NULL;
}

/* Uniform in [0.5, 1.5] x mean, at least 1. */
static int around(rp_rng *r, double mean) {
  int v = (int)(mean * (0.5 + rp_rng_uniform(r)) + 0.5);
  return v < 1 ? 1 : v;
}

rp_status rp_trace_synth(rp_trace *t, const rp_trace_stats *st, int n, double scale,
                         int max_turns, uint64_t seed) {
  memset(t, 0, sizeof *t);
  if (n < 1 || scale < 1)
    return rp_err(RP_EINVAL, "synthetic trace of %d agents at scale %g: need >= 1 agent and "
                  "scale >= 1", n, scale);
  t->max_context = (long)(st->max_context / scale);
  t->nagents = n;
  t->agents = calloc((size_t)n, sizeof *t->agents);
  if (!t->agents) return rp_err(RP_ENOMEM, "out of memory for a trace of %d agents", n);
  rp_rng r;
  rp_rng_seed(&r, seed);
  for (int a = 0; a < n; a++) {
    rp_agent *ag = &t->agents[a];
    int want = around(&r, st->turns);
    if (max_turns > 0 && want > max_turns) want = max_turns;
    ag->turns = calloc((size_t)want, sizeof *ag->turns);
    if (!ag->turns) return rp_err(RP_ENOMEM, "out of memory for a trace");
    ag->seed = rp_rng_u64(&r);
    long ctx = 0;
    for (int k = 0; k < want; k++) {
      rp_turn *tu = &ag->turns[k];
      tu->append = around(&r, st->append / scale);
      tu->gen = around(&r, st->gen / scale);
      tu->arrive = -1;
      tu->hit = -1;
      if (ctx + tu->append + tu->gen > t->max_context) break;
      tu->prompt = ctx + tu->append;
      ctx = tu->prompt + tu->gen;
      ag->nturns++;
    }
    if (ag->nturns == 0)
      return rp_err(RP_EINVAL, "scale %g leaves a context of %ld tokens, too short for one turn",
                    scale, t->max_context);
  }
  return RP_OK;
}

void rp_trace_poisson(rp_trace *t, double rate, uint64_t seed) {
  rp_rng r;
  rp_rng_seed(&r, seed);
  double at = 0;
  for (int a = 0; a < t->nagents; a++) {
    if (t->agents[a].nturns) t->agents[a].turns[0].arrive = at;
    at += -log(1.0 - (double)rp_rng_uniform(&r)) / rate;
  }
}

void rp_trace_free(rp_trace *t) {
  for (int a = 0; a < t->nagents; a++) {
    for (int k = 0; t->agents[a].turns && k < t->agents[a].nturns; k++)
      free(t->agents[a].turns[k].hash_ids);
    free(t->agents[a].turns);
  }
  free(t->agents);
  memset(t, 0, sizeof *t);
}

long rp_trace_total_turns(const rp_trace *t) {
  long n = 0;
  for (int a = 0; a < t->nagents; a++) n += t->agents[a].nturns;
  return n;
}

/* ---- Mooncake JSONL */

typedef struct {
  uint64_t *ids;
  size_t cap, n;
} id_set;

static int set_has(const id_set *s, uint64_t v) {
  if (!s->cap) return 0;
  for (size_t i = (v * 0x9e3779b97f4a7c15ULL) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (s->ids[i] == v + 1) return 1;
    if (!s->ids[i]) return 0;
  }
}

static int set_add(id_set *s, uint64_t v) {
  if ((s->n + 1) * 2 > s->cap) {
    id_set g = {calloc(s->cap ? s->cap * 2 : 1024, sizeof(uint64_t)), s->cap ? s->cap * 2 : 1024, 0};
    if (!g.ids) return 0;
    for (size_t i = 0; i < s->cap; i++)
      if (s->ids[i]) set_add(&g, s->ids[i] - 1);
    free(s->ids);
    *s = g;
  }
  if (set_has(s, v)) return 1;
  size_t i = (v * 0x9e3779b97f4a7c15ULL) & (s->cap - 1);
  while (s->ids[i]) i = (i + 1) & (s->cap - 1);
  s->ids[i] = v + 1;
  s->n++;
  return 1;
}

/* One request line into turn tu: hit = leading hash ids seen before. */
static rp_status parse_request(const char *line, long lineno, const char *path, id_set *seen,
                               int block_tokens, double scale, rp_turn *tu) {
  double ts, in, out;
  const char *ids;
  size_t len;
  if (rp_json_validate(line) != RP_OK || rp_json_get_number(line, "timestamp", &ts) != RP_OK ||
      rp_json_get_number(line, "input_length", &in) != RP_OK ||
      rp_json_get_number(line, "output_length", &out) != RP_OK ||
      rp_json_find(line, "hash_ids", &ids, &len) != RP_OK || in < 1 || out < 0)
    return rp_err(RP_EFORMAT, "%s:%ld: not a Mooncake request (need timestamp, input_length >= 1, "
                  "output_length, hash_ids)", path, lineno);
  rp_json_iter it;
  const char *v;
  size_t vlen;
  char key[8];
  int leading = 1;
  long hit_blocks = 0;
  if (rp_json_iter_begin(&it, ids) != RP_OK)
    return rp_err(RP_EFORMAT, "%s:%ld: hash_ids is not an array", path, lineno);
  int bt = (int)(block_tokens / scale) > 0 ? (int)(block_tokens / scale) : 1;
  while (rp_json_iter_next(&it, key, sizeof key, &v, &vlen) == 1) {
    uint64_t id = strtoull(v, NULL, 10);
    if (leading && set_has(seen, id)) hit_blocks++;
    else leading = 0;
    uint64_t *g = realloc(tu->hash_ids, (size_t)(tu->nhash + 1) * sizeof *g);
    if (!set_add(seen, id) || !g) return rp_err(RP_ENOMEM, "out of memory reading %s", path);
    tu->hash_ids = g;
    tu->hash_ids[tu->nhash++] = id;
  }
  long n = (long)(in / scale) > 0 ? (long)(in / scale) : 1;
  tu->arrive = ts / 1000.0;
  tu->prompt = n;
  tu->append = (int)n;
  tu->gen = (int)(out / scale) > 0 ? (int)(out / scale) : 1;
  tu->hash_tokens = bt;
  tu->hit = hit_blocks * bt < n ? hit_blocks * bt : n - 1;
  return RP_OK;
}

rp_status rp_trace_mooncake(rp_trace *t, const char *path, int block_tokens, double scale) {
  memset(t, 0, sizeof *t);
  if (scale < 1 || block_tokens < 1)
    return rp_err(RP_EINVAL, "Mooncake trace at scale %g, %d tokens per block: need both >= 1",
                  scale, block_tokens);
  FILE *f = fopen(path, "r");
  if (!f) return rp_err(RP_EIO, "cannot open the trace %s: %s", path, strerror(errno));
  id_set seen = {0};
  char *line = NULL;
  size_t cap = 0;
  long lineno = 0, n = 0;
  rp_status st = RP_OK;
  while (st == RP_OK && getline(&line, &cap, f) > 0) {
    lineno++;
    if (strspn(line, " \t\r\n") == strlen(line)) continue;
    rp_agent *grown = realloc(t->agents, (size_t)(n + 1) * sizeof *grown);
    if (!grown) { st = rp_err(RP_ENOMEM, "out of memory reading %s", path); break; }
    t->agents = grown;
    rp_agent *ag = &t->agents[n];
    memset(ag, 0, sizeof *ag);
    ag->turns = calloc(1, sizeof *ag->turns);
    t->nagents = (int)++n;
    if (!ag->turns) { st = rp_err(RP_ENOMEM, "out of memory reading %s", path); break; }
    ag->nturns = 1;
    ag->seed = (uint64_t)lineno;
    st = parse_request(line, lineno, path, &seen, block_tokens, scale, ag->turns);
    if (ag->turns->prompt + ag->turns->gen > t->max_context)
      t->max_context = ag->turns->prompt + ag->turns->gen;
  }
  free(line);
  free(seen.ids);
  fclose(f);
  if (st == RP_OK && n == 0) st = rp_err(RP_EFORMAT, "%s holds no requests", path);
  if (st != RP_OK) rp_trace_free(t);
  return st;
}
