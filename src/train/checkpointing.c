/* Trainer checkpoints: save, resume (bitwise continuation), and start from
 * another model's weights (a ringpipe checkpoint or an llm.c model file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_wait.h"
#include "train_internal.h"

static int config_json(char *buf, size_t cap, const rp_gpt_config *c) {
  return snprintf(buf, cap, "{\"L\":%d,\"C\":%d,\"NH\":%d,\"T\":%d,\"V\":%d,\"Vp\":%d}", c->L,
                  c->C, c->NH, c->T, c->V, c->Vp);
}

/* The whole model's chunks on world rank 0: its own, plus copies of every other
 * pipeline rank's (params and AdamW state) received over the pipeline group.
 * Only the first data-parallel / context-parallel replica takes part. */
typedef struct {
  int n;
  float **mine_m, **mine_v; /* this rank's chunks' full AdamW state */
  int nmine, mine_copied;   /* mine_m/v are workspace copies (ZeRO-1), else views */
  rp_tp_whole *whole;       /* tp > 1, tp rank 0: this rank's chunks put together */
  rp_ckpt_part *parts;
  rp_chunk *copies;       /* received chunks (n entries, unused ones zeroed) */
  float **m, **v;
} gathered;

/* Full AdamW state of this rank's chunks (collective over the replicas: under
 * ZeRO-1 each holds only its shard and the full state is gathered into
 * workspace; otherwise the optimizer's own arrays are the full state and are
 * written as they are, with no copy). */
static rp_status full_optim_state(rp_trainer *t, gathered *g) {
  g->nmine = t->nchunks;
  g->mine_m = calloc(t->nchunks, sizeof *g->mine_m);
  g->mine_v = calloc(t->nchunks, sizeof *g->mine_v);
  g->mine_copied = t->o.zero != 0;
  if (!g->mine_m || !g->mine_v) return rp_err(RP_ENOMEM, "out of memory");
  for (int c = 0; c < t->nchunks; c++) {
    if (!g->mine_copied) {
      g->mine_m[c] = rp_dp_m(t->dp, c);
      g->mine_v[c] = rp_dp_v(t->dp, c);
      continue;
    }
    size_t n = t->chunks[c].num_params;
    g->mine_m[c] = rp_alloc(n * sizeof(float), RP_MEM_WORKSPACE);
    g->mine_v[c] = rp_alloc(n * sizeof(float), RP_MEM_WORKSPACE);
    if (!g->mine_m[c] || !g->mine_v[c])
      return rp_err(RP_ENOMEM, "out of memory for the checkpoint's optimizer state");
    rp_dp_gather_optim(t->dp, c, g->mine_m[c], g->mine_v[c]);
  }
  return RP_OK;
}

static rp_status gather_chunks(rp_trainer *t, gathered *g) {
  int p = t->grid.pp, S = p * t->nchunks, me = t->grid.pp_rank;
  g->n = S;
  g->parts = calloc(S, sizeof *g->parts);
  g->copies = calloc(S, sizeof *g->copies);
  g->m = calloc(S, sizeof *g->m);
  g->v = calloc(S, sizeof *g->v);
  if (!g->parts || !g->copies || !g->m || !g->v) return rp_err(RP_ENOMEM, "out of memory");
  for (int s = 0; s < S; s++) {
    int owner = 0, c = s;
    if (p > 1) rp_schedule_owner(t->sched, s, &owner, &c);
    /* under tensor parallelism the whole copy made by rp_tp_gather_whole */
    const rp_chunk *mine = g->whole ? &g->whole[c].chunk : &t->chunks[c];
    const float *mm = g->whole ? g->whole[c].m : g->mine_m[c];
    const float *mv = g->whole ? g->whole[c].v : g->mine_v[c];
    if (owner == me && me == 0) {
      g->parts[s] = (rp_ckpt_part){mine, mm, mv};
    } else if (owner == me) {
      int n = (int)mine->num_params;
      MPI_Request r[3];
      MPI_Isend(mine->params, n, MPI_FLOAT, 0, 3 * s, t->grid.pp_comm, &r[0]);
      MPI_Isend(mm, n, MPI_FLOAT, 0, 3 * s + 1, t->grid.pp_comm, &r[1]);
      MPI_Isend(mv, n, MPI_FLOAT, 0, 3 * s + 2, t->grid.pp_comm, &r[2]);
      rp_waitall(3, r, t->grid.pp_comm, 0, "checkpoint gather: sending stage %d", s);
    } else if (me == 0) {
      rp_chunk *ch = &g->copies[s];
      RP_TRY(rp_chunk_init(ch, &t->cfg, &t->all_stages[s]));
      int n = (int)ch->num_params;
      g->m[s] = rp_alloc(n * sizeof(float), RP_MEM_WORKSPACE);
      g->v[s] = rp_alloc(n * sizeof(float), RP_MEM_WORKSPACE);
      if (!g->m[s] || !g->v[s])
        return rp_err(RP_ENOMEM, "out of memory for stage %d's checkpoint copy", s);
      MPI_Request r[3];
      MPI_Irecv(ch->params, n, MPI_FLOAT, owner, 3 * s, t->grid.pp_comm, &r[0]);
      MPI_Irecv(g->m[s], n, MPI_FLOAT, owner, 3 * s + 1, t->grid.pp_comm, &r[1]);
      MPI_Irecv(g->v[s], n, MPI_FLOAT, owner, 3 * s + 2, t->grid.pp_comm, &r[2]);
      rp_waitall(3, r, t->grid.pp_comm, owner, "checkpoint gather: receiving stage %d", s);
      g->parts[s] = (rp_ckpt_part){ch, g->m[s], g->v[s]};
    }
  }
  return RP_OK;
}

static void gathered_free(gathered *g) {
  for (int c = 0; c < g->nmine && g->mine_copied; c++) {
    rp_free(g->mine_m[c]);
    rp_free(g->mine_v[c]);
  }
  free(g->mine_m), free(g->mine_v);
  for (int c = 0; c < g->nmine && g->whole; c++) rp_tp_whole_free(&g->whole[c]);
  free(g->whole);
  for (int s = 0; s < g->n; s++) {
    if (g->copies && g->copies[s].params) rp_chunk_free(&g->copies[s]);
    if (g->m) rp_free(g->m[s]);
    if (g->v) rp_free(g->v[s]);
  }
  free(g->parts), free(g->copies), free(g->m), free(g->v);
}

static rp_status write_meta_and_save(rp_trainer *t, const char *dir, const gathered *g) {
  size_t cap = 1 << 16;
  char cfg[256], *opts = malloc(cap), loader[512];
  rp_loader_snapshot snap;
  rp_loader_state(t->train, &snap);
  config_json(cfg, sizeof cfg, &t->cfg);
  rp_status s = opts ? rp_opts_to_json(rp_train_opt_table, rp_train_opt_count, &t->o, opts, cap)
                     : rp_err(RP_ENOMEM, "out of memory for checkpoint metadata");
  if (s == RP_OK) s = rp_loader_snapshot_to_json(&snap, loader, sizeof loader);
  if (s == RP_OK) {
    rp_jw w;
    rp_jw_init(&w);
    rp_jw_obj(&w);
    rp_jw_key(&w, "step"), rp_jw_int(&w, t->step);
    rp_jw_key(&w, "config"), rp_jw_raw(&w, cfg);
    rp_jw_key(&w, "loader"), rp_jw_raw(&w, loader);
    rp_jw_key(&w, "sample_rng"), rp_jw_arr(&w);
    for (int i = 0; i < 4; i++) rp_jw_uint(&w, t->sample_rng.s[i]);
    rp_jw_arr_end(&w);
    rp_jw_key(&w, "layout"), rp_jw_obj(&w);
    rp_jw_key(&w, "dp"), rp_jw_int(&w, t->grid.dp);
    rp_jw_key(&w, "pp"), rp_jw_int(&w, t->grid.pp);
    rp_jw_key(&w, "cp"), rp_jw_int(&w, t->grid.cp);
    rp_jw_key(&w, "tp"), rp_jw_int(&w, t->grid.tp);
    rp_jw_obj_end(&w);
    rp_jw_key(&w, "options"), rp_jw_raw(&w, opts);
    rp_jw_obj_end(&w);
    const char *meta = rp_jw_text(&w, &s);
    if (meta) s = rp_ckpt_save(dir, g->parts, g->n, meta);
    rp_jw_free(&w);
  }
  free(opts);
  return s;
}

/* The first tensor of chunk c whose weights (or AdamW m or v, when given)
 * hold a NaN or an infinity: its name and which array, else NULL. */
static const char *first_nonfinite(const rp_chunk *c, const float *m, const float *v,
                                   const char **which) {
  const float *arrays[3] = {c->params, m, v};
  static const char *const names[3] = {"weights", "AdamW m", "AdamW v"};
  for (int i = 0; i < c->num_tensors; i++) {
    const rp_tensor *tn = &c->tensors[i];
    for (int k = 0; k < 3; k++) {
      if (!arrays[k]) continue;
      const float *x = arrays[k] + tn->offset;
      for (size_t j = 0; j < tn->numel; j++)
        if (!isfinite(x[j])) {
          *which = names[k];
          return tn->name;
        }
    }
  }
  return NULL;
}

/* RP_EINVAL naming the tensor when this rank's state is not finite. */
static rp_status check_finite(const rp_trainer *t, const gathered *g, const char *when) {
  for (int c = 0; c < t->nchunks; c++) {
    const char *which = NULL;
    const char *name = first_nonfinite(&t->chunks[c], g->mine_m[c], g->mine_v[c], &which);
    if (name)
      return rp_err(RP_EINVAL, "%s: the %s of '%s' hold non-finite values (NaN or infinity)",
                    when, which, name);
  }
  return RP_OK;
}

/* Tensor parallelism: each chunk's shards put together on tp rank 0 (the
 * ranks of the first replica take part). */
static rp_status gather_tp_shards(rp_trainer *t, gathered *g) {
  rp_status s = RP_OK;
  if (t->grid.tp_rank == 0) {
    g->whole = calloc(t->nchunks, sizeof *g->whole);
    if (!g->whole) s = rp_err(RP_ENOMEM, "out of memory");
  }
  for (int c = 0; c < t->nchunks; c++) {
    rp_tp_whole scratch = {0}, *w = g->whole ? &g->whole[c] : &scratch;
    rp_status sc = rp_tp_gather_whole(t, c, g->mine_m[c], g->mine_v[c], w);
    if (s == RP_OK) s = sc;
  }
  return s;
}

/* The whole model and its AdamW state gathered on world rank 0 and written
 * with meta.json: the trainer's own (meta_fields NULL) or the caller's. */
static rp_status save_gathered(rp_trainer *t, const char *dir, const char *meta_fields) {
  gathered g;
  memset(&g, 0, sizeof g);
  rp_status s = full_optim_state(t, &g);
  /* Never replace a good checkpoint with a diverged state: every rank checks
   * its own, and all agree before the gather. */
  char when[64];
  snprintf(when, sizeof when, "refusing to save step %d", t->step);
  int bad = 0;
  if (s == RP_OK) {
    s = check_finite(t, &g, when);
    bad = s != RP_OK;
  }
  rp_allreduce_watched(&bad, 1, MPI_INT, MPI_MAX, t->grid.world, "finite-state check");
  s = rp_train_agree(t, s, "agreement before the checkpoint gather", NULL);
  if (bad) t->diverged = 1;
  if (s == RP_OK && t->grid.dp_rank == 0 && t->grid.cp_rank == 0 && t->grid.tp > 1)
    s = gather_tp_shards(t, &g);
  if (s == RP_OK && t->grid.dp_rank == 0 && t->grid.cp_rank == 0 && t->grid.tp_rank == 0) {
    s = gather_chunks(t, &g);
    if (s == RP_OK && t->grid.world_rank == 0)
      s = meta_fields ? rp_ckpt_save(dir, g.parts, g.n, meta_fields)
                      : write_meta_and_save(t, dir, &g);
  }
  gathered_free(&g);
  return rp_grid_agree(t->grid.world, s);
}

rp_status rp_trainer_save(rp_trainer *t, const char *dir) { return save_gathered(t, dir, NULL); }

rp_status rp_engine_save(rp_trainer *t, const char *dir, const char *meta_fields) {
  return save_gathered(t, dir, meta_fields);
}

static rp_status check_same_shape(const rp_gpt_config *file, const rp_gpt_config *run,
                                  const char *what) {
  if (file->L != run->L || file->C != run->C || file->NH != run->NH || file->T != run->T ||
      file->V != run->V)
    return rp_err(RP_EINVAL,
                  "%s has L=%d C=%d NH=%d T=%d V=%d but this run has --layers %d --channels %d "
                  "--heads %d --seq %d --vocab %d; pass the checkpoint's shape",
                  what, file->L, file->C, file->NH, file->T, file->V, run->L, run->C, run->NH,
                  run->T, run->V);
  return RP_OK;
}

/* A checkpoint with NaN weights or AdamW state would train to NaN: refused at
 * resume (a damaged file: status 2), before any step. */
static rp_status check_resumed_finite(const rp_trainer *t, const gathered *g, const char *dir) {
  if (check_finite(t, g, "") == RP_OK) return RP_OK;
  char why[512];
  snprintf(why, sizeof why, "%s", rp_errmsg() + 2);  /* past the empty "when: " */
  return rp_err(RP_EFORMAT, "checkpoint '%s' cannot be resumed: %s; it is damaged or was saved "
                "from a diverged run: resume from an earlier checkpoint", dir, why);
}

/* Any layout resumes any checkpoint; the continuation equals the run that
 * never stopped when the global batch is the same, so a change is pointed out. */
static void note_layout_change(const rp_trainer *t, const char *meta, const char *dir) {
  int64_t dp, pp, cp, tp = 1, mb, b;
  rp_json_get_int64(meta, "layout.tp", &tp);  /* absent before tensor parallelism: 1 */
  if (rp_json_get_int64(meta, "layout.dp", &dp) != RP_OK ||
      rp_json_get_int64(meta, "layout.pp", &pp) != RP_OK ||
      rp_json_get_int64(meta, "layout.cp", &cp) != RP_OK ||
      rp_json_get_int64(meta, "options.microbatches", &mb) != RP_OK ||
      rp_json_get_int64(meta, "options.batch", &b) != RP_OK || t->grid.world_rank != 0)
    return;
  if (dp == t->grid.dp && pp == t->grid.pp && cp == t->grid.cp && tp == t->grid.tp) return;
  long was = (long)(dp * mb * b), now = (long)t->grid.dp * t->o.microbatches * t->o.batch;
  printf("resuming %s, saved under dp %d x pp %d x cp %d x tp %d, as dp %d x pp %d x cp %d x "
         "tp %d; global batch %ld sequences then, %ld now%s\n", dir, (int)dp, (int)pp, (int)cp,
         (int)tp, t->grid.dp, t->grid.pp, t->grid.cp, t->grid.tp, was, now,
         was == now ? "" : " (the continuation differs from the run that never stopped)");
}

/* Weights and the full AdamW state from dir; each replica keeps its part. */
static rp_status load_state(rp_trainer *t, const char *dir) {
  gathered g;
  memset(&g, 0, sizeof g);
  rp_status s = full_optim_state(t, &g);
  rp_ckpt_load_part parts[64];
  int n = t->nchunks < 64 ? t->nchunks : 64;
  for (int c = 0; c < n && s == RP_OK; c++)
    parts[c] = (rp_ckpt_load_part){&t->chunks[c], g.mine_m[c], g.mine_v[c]};
  if (s == RP_OK && t->grid.tp == 1) s = rp_ckpt_load(dir, parts, n);
  /* tensor parallelism: whole tensors read, this rank's slices kept */
  for (int c = 0; c < n && s == RP_OK && t->grid.tp > 1; c++)
    s = rp_tp_load_whole(t, c, dir, g.mine_m[c], g.mine_v[c]);
  if (s == RP_OK) s = check_resumed_finite(t, &g, dir);
  for (int c = 0; c < n && s == RP_OK; c++)
    rp_dp_scatter_optim(t->dp, c, g.mine_m[c], g.mine_v[c]);
  gathered_free(&g);
  return s;
}

rp_status rp_engine_load(rp_trainer *t, const char *dir) {
  RP_TRY(load_state(t, dir));
  if (t->bf16.n)
    rp_bf16_ctx_refresh(&t->bf16, t->o.bf16_stochastic, (uint64_t)t->o.seed, t->pool);
  return RP_OK;
}

rp_status rp_trainer_resume(rp_trainer *t, const char *dir) {
  char *meta = NULL;
  RP_TRY(rp_ckpt_read_meta(dir, &meta));
  rp_gpt_config fc = {0};
  rp_status s = rp_ckpt_read_config(meta, dir, &fc);
  if (s == RP_OK) s = check_same_shape(&fc, &t->cfg, dir);
  int step = 0;
  if (s == RP_OK) s = rp_ckpt_read_counter(meta, dir, "step", &step);
  rp_loader_snapshot snap;
  if (s == RP_OK) s = rp_loader_snapshot_from_json(meta, "loader", &snap);
  if (s == RP_OK) s = rp_loader_set_state(t->train, &snap);
  for (int i = 0; i < 4 && s == RP_OK; i++) {
    char key[32];
    snprintf(key, sizeof key, "sample_rng.%d", i);
    s = rp_json_get_u64(meta, key, &t->sample_rng.s[i]);
  }
  if (s == RP_OK) s = load_state(t, dir);
  if (s == RP_OK) t->step = step;
  if (s == RP_OK) note_layout_change(t, meta, dir);
  free(meta);
  return s;
}


static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

rp_status rp_init_config_into_opts(const char *path, rp_train_opts *o, int *changed,
                                   int *model_T) {
  rp_gpt_config c;
  if (rp_hf_is_folder(path)) {
    RP_TRY(rp_hf_read_config(path, &c));
  } else if (is_dir(path)) {
    char *meta = NULL;
    RP_TRY(rp_ckpt_read_meta(path, &meta));
    rp_status s = rp_ckpt_read_config(meta, path, &c);
    free(meta);
    RP_TRY(s);
  } else {
    RP_TRY(rp_llmc_read_config(path, &c));
  }
  *changed = o->layers != c.L || o->channels != c.C || o->heads != c.NH || o->vocab != c.V;
  o->layers = c.L;
  o->channels = c.C;
  o->heads = c.NH;
  o->vocab = c.V;
  *model_T = c.T;
  if (o->seq > c.T)
    return rp_err(RP_EINVAL, "--seq %d is longer than the %d positions of %s; use --seq <= %d",
                  o->seq, c.T, path, c.T);
  return RP_OK;
}

