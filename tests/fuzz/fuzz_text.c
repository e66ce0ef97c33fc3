/* Fuzz targets for the text formats: JSON (checkpoint meta.json), config
 * files (and the same text as command-line flags), schedule CSV. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_targets.h"
#include "fuzz_util.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_rl.h"
#include "ringpipe/rp_schedule.h"
#include "ringpipe/rp_train.h"

/* Walks every member of a validated value, depth first, with the iterator. */
static void walk(const char *v, int depth) {
  rp_json_iter it;
  if (depth > 200 || rp_json_iter_begin(&it, v) != RP_OK) return;
  char key[256];
  const char *m;
  size_t ml;
  while (rp_json_iter_next(&it, key, sizeof key, &m, &ml) == 1) walk(m, depth + 1);
}

/* Whether `path` is present in the (validated) text t. */
static int has(const char *t, const char *path) {
  const char *v;
  size_t n;
  return rp_json_find(t, path, &v, &n) == RP_OK;
}

/* What resuming reads from a meta.json: config, counters, loader position,
 * saved options; the path getters also run on text that failed validation.
 * Accepted: valid JSON whose config, step and loader (where present) read. */
int rp_fuzz_json(const uint8_t *data, size_t size) {
  char *t = rp_fuzz_text(data, size);
  if (!t) return 0;
  int ok = rp_json_validate_n((const char *)data, size) == RP_OK;
  double d;
  int64_t i64;
  rp_json_get_number(t, "config.L", &d);
  rp_json_get_int64(t, "loader.B", &i64);
  FILE *sink = fopen("/dev/null", "w");  /* the metrics writer's nan/inf filter */
  if (sink) {
    rp_json_fputs(sink, t);
    fclose(sink);
  }
  if (ok) {
    walk(t, 0);
    rp_gpt_config c;
    rp_loader_snapshot snap;
    int step;
    char fmt[64];
    uint64_t u;
    int b;
    if (has(t, "config")) ok &= rp_ckpt_read_config(t, "fuzz", &c) == RP_OK;
    if (has(t, "step")) ok &= rp_ckpt_read_counter(t, "fuzz", "step", &step) == RP_OK;
    if (has(t, "loader")) ok &= rp_loader_snapshot_from_json(t, "loader", &snap) == RP_OK;
    rp_json_get_string(t, "format", fmt, sizeof fmt);
    rp_json_get_u64(t, "sample_rng.0", &u);
    rp_json_get_bool(t, "options.quiet", &b);
    const char *opts;
    size_t ol;
    if (rp_json_find(t, "options", &opts, &ol) == RP_OK) {
      char *o = rp_fuzz_text((const uint8_t *)opts, ol);
      rp_train_opts to;
      if (o && rp_opts_defaults(rp_train_opt_table, rp_train_opt_count, &to) == RP_OK)
        rp_opts_from_json(rp_train_opt_table, rp_train_opt_count, &to, o);
      free(o);
    }
  }
  free(t);
  return ok;
}

/* Splits text into at most 64 arguments at newlines (the flag form). */
static int split_args(char *t, char **argv) {
  int n = 0;
  for (char *p = t; *p && n < 64;) {
    argv[n++] = p;
    char *nl = strchr(p, '\n');
    if (!nl) break;
    *nl = '\0';
    p = nl + 1;
  }
  return n;
}

/* The text as a --config file of `train`, then its checks and stage split;
 * as a config file of `grpo`; and its lines as command-line flags. Accepted:
 * the file loads and passes train's option checks and stage assignment. */
int rp_fuzz_config(const uint8_t *data, size_t size) {
  rp_fuzz_file mf;
  if (rp_fuzz_file_open(&mf, data, size)) return 0;
  rp_train_opts o;
  int ok = rp_opts_defaults(rp_train_opt_table, rp_train_opt_count, &o) == RP_OK &&
           rp_opts_load_config(rp_train_opt_table, rp_train_opt_count, &o, mf.path) == RP_OK;
  if (ok) ok = rp_train_opts_check(&o) == RP_OK;
  if (ok && o.pp * o.vpp <= 64) {
    rp_stage_spec stages[64];
    ok = rp_assign_stages(o.layers, o.pp * o.vpp, o.pp_layers, stages) == RP_OK;
  }
  int n;
  const rp_opt *grpo = rp_rl_opt_table(RP_RL_GRPO, &n);
  rp_rl_opts r;
  if (rp_opts_defaults(grpo, n, &r) == RP_OK) rp_opts_load_config(grpo, n, &r, mf.path);
  rp_fuzz_file_close(&mf);
  char *t = rp_fuzz_text(data, size), *argv[64];
  if (t && !memchr(data, '\0', size)) {
    int argc = split_args(t, argv), help;
    char *pos[4];
    int npos = 4;
    rp_opts_parse(rp_train_opt_table, rp_train_opt_count, &o, argc, argv, &help, pos, &npos);
  }
  free(t);
  return ok;
}

/* Parsing validates; then lowering (compute-only lists), the validator again
 * and the simulator, and the slot plans an executor would size buffers by. */
int rp_fuzz_schedule(const uint8_t *data, size_t size) {
  char *t = rp_fuzz_text(data, size);
  if (!t) return 0;
  rp_schedule *s = NULL, *low = NULL;
  int ok = !memchr(data, '\0', size) && rp_schedule_csv_parse(t, "fuzz.csv", &s) == RP_OK;
  free(t);
  if (!ok) return 0;
  if (!s->lowered && s->p > 1 && rp_schedule_lower(s, &low, NULL) == RP_OK)
    ok = rp_schedule_validate(low, NULL) == RP_OK;
  const rp_schedule *run = low ? low : s;
  rp_sim *sim = NULL;
  rp_costs c = {1, 2, 1, 0.25};
  if (rp_schedule_simulate(run, &c, &sim) == RP_OK) rp_sim_free(sim);
  for (int r = 0; r < run->p; r++) {
    rp_slot_plan plan;
    if (rp_schedule_plan_slots(run, r, &plan) == RP_OK) rp_slot_plan_free(&plan);
  }
  rp_schedule_free(low);
  rp_schedule_free(s);
  return ok;
}

const rp_fuzz_target rp_fuzz_targets[] = {
    {"shard", rp_fuzz_shard},   {"safetensors", rp_fuzz_safetensors}, {"json", rp_fuzz_json},
    {"config", rp_fuzz_config}, {"schedule", rp_fuzz_schedule}, {"bpe", rp_fuzz_bpe},
    {"hf_config", rp_fuzz_hf_config}, {"doc_index", rp_fuzz_doc_index},
};
const int rp_fuzz_ntargets = sizeof rp_fuzz_targets / sizeof rp_fuzz_targets[0];
