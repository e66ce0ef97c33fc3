/* Trainer checkpoints: save, resume (bitwise continuation), and start from
 * another model's weights (a ringpipe checkpoint or an llm.c model file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_json.h"
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
  int nmine;
  rp_ckpt_part *parts;
  rp_chunk *copies;       /* received chunks (n entries, unused ones zeroed) */
  float **m, **v;
} gathered;

/* Full AdamW state of this rank's chunks (collective over the replicas: under
 * ZeRO-1 each holds only its shard). */
static rp_status full_optim_state(rp_trainer *t, gathered *g) {
  g->nmine = t->nchunks;
  g->mine_m = calloc(t->nchunks, sizeof *g->mine_m);
  g->mine_v = calloc(t->nchunks, sizeof *g->mine_v);
  if (!g->mine_m || !g->mine_v) return rp_err(RP_ENOMEM, "out of memory");
  for (int c = 0; c < t->nchunks; c++) {
    size_t n = t->chunks[c].num_params;
    g->mine_m[c] = malloc(n * sizeof(float));
    g->mine_v[c] = malloc(n * sizeof(float));
    if (!g->mine_m[c] || !g->mine_v[c]) return rp_err(RP_ENOMEM, "out of memory");
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
    int owner = s % p, c = s / p;
    if (owner == me && me == 0) {
      g->parts[s] = (rp_ckpt_part){&t->chunks[c], g->mine_m[c], g->mine_v[c]};
    } else if (owner == me) {
      rp_chunk *ch = &t->chunks[c];
      int n = (int)ch->num_params;
      MPI_Send(ch->params, n, MPI_FLOAT, 0, 3 * s, t->grid.pp_comm);
      MPI_Send(g->mine_m[c], n, MPI_FLOAT, 0, 3 * s + 1, t->grid.pp_comm);
      MPI_Send(g->mine_v[c], n, MPI_FLOAT, 0, 3 * s + 2, t->grid.pp_comm);
    } else if (me == 0) {
      rp_chunk *ch = &g->copies[s];
      RP_TRY(rp_chunk_init(ch, &t->cfg, &t->all_stages[s]));
      int n = (int)ch->num_params;
      g->m[s] = malloc(n * sizeof(float));
      g->v[s] = malloc(n * sizeof(float));
      if (!g->m[s] || !g->v[s]) return rp_err(RP_ENOMEM, "out of memory");
      MPI_Recv(ch->params, n, MPI_FLOAT, owner, 3 * s, t->grid.pp_comm, MPI_STATUS_IGNORE);
      MPI_Recv(g->m[s], n, MPI_FLOAT, owner, 3 * s + 1, t->grid.pp_comm, MPI_STATUS_IGNORE);
      MPI_Recv(g->v[s], n, MPI_FLOAT, owner, 3 * s + 2, t->grid.pp_comm, MPI_STATUS_IGNORE);
      g->parts[s] = (rp_ckpt_part){ch, g->m[s], g->v[s]};
    }
  }
  return RP_OK;
}

static void gathered_free(gathered *g) {
  for (int c = 0; c < g->nmine; c++) free(g->mine_m[c]), free(g->mine_v[c]);
  free(g->mine_m), free(g->mine_v);
  for (int s = 0; s < g->n; s++) {
    if (g->copies && g->copies[s].params) rp_chunk_free(&g->copies[s]);
    if (g->m) free(g->m[s]);
    if (g->v) free(g->v[s]);
  }
  free(g->parts), free(g->copies), free(g->m), free(g->v);
}

static rp_status write_meta_and_save(rp_trainer *t, const char *dir, const gathered *g) {
  size_t cap = 1 << 16;
  char *meta = malloc(cap), cfg[256], *opts = malloc(cap), loader[512];
  rp_loader_snapshot snap;
  rp_loader_state(t->train, &snap);
  config_json(cfg, sizeof cfg, &t->cfg);
  rp_status s = rp_opts_to_json(rp_train_opt_table, rp_train_opt_count, &t->o, opts, cap);
  if (s == RP_OK) s = rp_loader_snapshot_to_json(&snap, loader, sizeof loader);
  if (s == RP_OK) {
    const uint64_t *r = t->sample_rng.s;
    snprintf(meta, cap,
             "\"step\":%d,\"config\":%s,\"loader\":%s,\"sample_rng\":[%llu,%llu,%llu,%llu],"
             "\"options\":%s",
             t->step, cfg, loader, (unsigned long long)r[0], (unsigned long long)r[1],
             (unsigned long long)r[2], (unsigned long long)r[3], opts);
    s = rp_ckpt_save(dir, g->parts, g->n, meta);
  }
  free(meta);
  free(opts);
  return s;
}

rp_status rp_trainer_save(rp_trainer *t, const char *dir) {
  gathered g;
  memset(&g, 0, sizeof g);
  rp_status s = full_optim_state(t, &g);
  if (s == RP_OK && t->grid.dp_rank == 0 && t->grid.cp_rank == 0) {
    s = gather_chunks(t, &g);
    if (s == RP_OK && t->grid.world_rank == 0) s = write_meta_and_save(t, dir, &g);
  }
  gathered_free(&g);
  return rp_grid_agree(t->grid.world, s);
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
  if (s == RP_OK) {
    /* full AdamW state from the file, then each replica keeps its part */
    gathered g;
    memset(&g, 0, sizeof g);
    s = full_optim_state(t, &g);
    rp_ckpt_load_part parts[64];
    int n = t->nchunks < 64 ? t->nchunks : 64;
    for (int c = 0; c < n; c++) parts[c] = (rp_ckpt_load_part){&t->chunks[c], g.mine_m[c], g.mine_v[c]};
    if (s == RP_OK) s = rp_ckpt_load(dir, parts, n);
    for (int c = 0; c < n && s == RP_OK; c++) rp_dp_scatter_optim(t->dp, c, g.mine_m[c], g.mine_v[c]);
    gathered_free(&g);
  }
  if (s == RP_OK) t->step = step;
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
  if (is_dir(path)) {
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

rp_status rp_load_weights(rp_chunk *m, const char *path) {
  if (!is_dir(path)) return rp_llmc_load(path, m);
  rp_ckpt_load_part part = {.chunk = m};
  return rp_ckpt_load(path, &part, 1);
}
