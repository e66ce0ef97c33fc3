/* Checkpoints of sft / grpo / ppo: the ordinary ringpipe checkpoint (model +
 * AdamW state as safetensors, meta.json last) with the job's counters in the
 * metadata, so `ringpipe sample`, `train --init-from` and `grpo --init-from`
 * all read an SFT checkpoint. PPO's value head (C + 1 floats and its AdamW
 * state) is small enough to ride in meta.json; "%.9g" round-trips floats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_json.h"
#include "rl_internal.h"

/* A float array under key: "%.9g" round-trips every float. */
static void put_floats(rp_jw *w, const char *key, const float *x, int n) {
  rp_jw_key(w, key);
  rp_jw_arr(w);
  for (int i = 0; i < n; i++) rp_jw_num(w, x[i], 9);
  rp_jw_arr_end(w);
}

static rp_status get_floats(const char *json, const char *path, float *x, int n) {
  const char *v;
  size_t vlen;
  RP_TRY(rp_json_find(json, path, &v, &vlen));
  rp_json_iter it;
  RP_TRY(rp_json_iter_begin(&it, v));
  char key[8];
  int i = 0, r;
  while ((r = rp_json_iter_next(&it, key, sizeof key, &v, &vlen)) == 1) {
    if (i >= n) break;
    x[i++] = strtof(v, NULL);
  }
  if (r < 0) return (rp_status)r;
  if (i != n)
    return rp_err(RP_EFORMAT, "checkpoint %s has %d values, expected %d (another model width?)",
                  path, i, n);
  return RP_OK;
}

/* The job's fields of meta.json (world rank 0 builds them): kind, counters,
 * config, task, options and the value head. *out is malloc'd. */
static rp_status job_meta(rp_rl_state *s, char **out) {
  int nvh = s->has_vh ? s->vh.C + 1 : 0, nopt;
  const rp_opt *tab = rp_rl_opt_table(s->algo, &nopt);
  char *opts = malloc(1 << 16);
  *out = NULL;
  rp_status st = opts ? rp_opts_to_json(tab, nopt, &s->o, opts, 1 << 16)
                      : rp_err(RP_ENOMEM, "out of memory for checkpoint metadata");
  if (st != RP_OK) {
    free(opts);
    return st;
  }
  const rp_gpt_config *c = &s->cfg;
  rp_jw w;
  rp_jw_init(&w);
  rp_jw_obj(&w);
  rp_jw_key(&w, "kind"), rp_jw_str(&w, rp_rl_algo_name(s->algo));
  rp_jw_key(&w, "step"), rp_jw_int(&w, s->step);
  rp_jw_key(&w, "opt_steps"), rp_jw_int(&w, s->opt_steps);
  rp_jw_key(&w, "cursor"), rp_jw_uint(&w, s->cursor);
  rp_jw_key(&w, "config"), rp_jw_obj(&w);
  const char *names[6] = {"L", "C", "NH", "T", "V", "Vp"};
  const int vals[6] = {c->L, c->C, c->NH, c->T, c->V, c->Vp};
  for (int i = 0; i < 6; i++) rp_jw_key(&w, names[i]), rp_jw_int(&w, vals[i]);
  rp_jw_obj_end(&w);
  rp_jw_key(&w, "task"), rp_jw_obj(&w);
  rp_jw_key(&w, "name"), rp_jw_str(&w, rp_task_name(s->task.kind));
  rp_jw_key(&w, "size"), rp_jw_int(&w, s->task.size);
  rp_jw_obj_end(&w);
  rp_jw_key(&w, "options"), rp_jw_raw(&w, opts);
  if (nvh) {
    rp_jw_key(&w, "value_head"), rp_jw_obj(&w);
    put_floats(&w, "p", s->vh.p, nvh);
    put_floats(&w, "m", s->vh.m, nvh);
    put_floats(&w, "v", s->vh.v, nvh);
    rp_jw_obj_end(&w);
  }
  rp_jw_obj_end(&w);
  const char *text = rp_jw_text(&w, &st);
  if (text) {
    *out = strdup(text);
    if (!*out) st = rp_err(RP_ENOMEM, "out of memory for checkpoint metadata");
  }
  rp_jw_free(&w);
  free(opts);
  return st;
}

/* The engine writes the model and the full AdamW state (gathered from the
 * ZeRO-1 shards when sharded); the job's fields ride in meta.json. */
rp_status rp_rl_save(rp_rl_state *s, const char *dir) {
  char *meta = NULL;
  rp_status st = s->grid.world_rank == 0 ? job_meta(s, &meta) : RP_OK;
  RP_TRY(rp_grid_agree(s->grid.world, st));
  st = rp_engine_save(&s->eng, dir, meta ? meta : "");
  free(meta);
  return st;
}

rp_status rp_rl_resume(rp_rl_state *s, const char *dir) {
  char *meta = NULL, kind[16] = "";
  RP_TRY(rp_ckpt_read_meta(dir, &meta));
  rp_status st = rp_json_get_string(meta, "kind", kind, sizeof kind);
  const char *want = rp_rl_algo_name(s->algo);
  if (st != RP_OK || strcmp(kind, want) != 0)
    st = rp_err(RP_EINVAL, "%s is not a %s checkpoint (kind '%s'); to start %s from its "
                "weights pass it as --init-from", dir, want, kind, want);
  const char *keys[6] = {"config.L", "config.C", "config.NH", "config.T", "config.V", "config.Vp"};
  const int have[6] = {s->cfg.L, s->cfg.C, s->cfg.NH, s->cfg.T, s->cfg.V, s->cfg.Vp};
  for (int i = 0; i < 6 && st == RP_OK; i++) {
    int64_t v;
    st = rp_json_get_int64(meta, keys[i], &v);
    if (st == RP_OK && v != have[i])
      st = rp_err(RP_EINVAL, "%s has %s = %lld but this run's model has %d; pass the same "
                  "model options (or --init-from) as the run that saved it", dir, keys[i],
                  (long long)v, have[i]);
  }
  int step = 0, opt_steps = 0;
  uint64_t cursor = 0;
  /* counters of a corrupt or edited file must not wrap into negative steps */
  if (st == RP_OK) st = rp_ckpt_read_counter(meta, dir, "step", &step);
  if (st == RP_OK) st = rp_ckpt_read_counter(meta, dir, "opt_steps", &opt_steps);
  if (st == RP_OK) st = rp_json_get_u64(meta, "cursor", &cursor);
  if (st == RP_OK && s->has_vh) {
    int n = s->vh.C + 1;
    st = get_floats(meta, "value_head.p", s->vh.p, n);
    if (st == RP_OK) st = get_floats(meta, "value_head.m", s->vh.m, n);
    if (st == RP_OK) st = get_floats(meta, "value_head.v", s->vh.v, n);
  }
  if (st == RP_OK) st = rp_engine_load(&s->eng, dir);
  if (st == RP_OK) {
    s->step = step;
    s->opt_steps = opt_steps;
    s->eng.step = opt_steps;
    s->cursor = cursor;
  }
  free(meta);
  return st;
}
