/* Job state of sft / grpo / ppo: set-up, tear-down, the optimizer step with
 * data-parallel gradient sync, held-out evaluation, and the forward of a range
 * of rollout sequences. Checkpoints live in rl_ckpt.c. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_train.h"
#include "rl_internal.h"

/* Held-out problems are the first eval_n of the held-out split under this
 * fixed seed, so every job (SFT, GRPO, PPO, any --seed) is scored on the same
 * problems. */
#define RL_EVAL_SEED 0x5eed5eedULL
#define RL_EVAL_SLOTS 64

static int default_threads(void) {
  cpu_set_t allowed;
  int ncpu = 1;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) ncpu = CPU_COUNT(&allowed);
  const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int local = ls ? atoi(ls) : 1;
  if (local < 1) local = 1;
  return ncpu / local > 0 ? ncpu / local : 1;
}

static rp_status make_dirs(const char *path) {
  char tmp[RP_OPT_STRLEN];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(tmp, 0755);
    *p = '/';
  }
  struct stat st;
  if (mkdir(tmp, 0755) != 0 && (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)))
    return rp_err(RP_EIO, "cannot create output directory '%s'; pass a writable --out", path);
  return RP_OK;
}

rp_status rp_rollout_init(rp_rollout *r, int cap, int T) {
  memset(r, 0, sizeof *r);
  r->cap = cap;
  r->T = T;
  size_t n = (size_t)cap, nt = n * T;
  r->tokens = rp_alloc(nt * sizeof(int32_t), RP_MEM_DATA);
  r->plen = rp_alloc(n * sizeof(int), RP_MEM_DATA);
  r->clen = rp_alloc(n * sizeof(int), RP_MEM_DATA);
  r->reward = rp_alloc(n * sizeof(float), RP_MEM_DATA);
  r->seq_adv = rp_alloc(n * sizeof(float), RP_MEM_DATA);
  r->seq_w = rp_alloc(n * sizeof(float), RP_MEM_DATA);
  float **pt[] = {&r->old_logp, &r->ref_logp, &r->adv, &r->ret, &r->value, &r->samp_logp};
  int ok = r->tokens && r->plen && r->clen && r->reward && r->seq_adv && r->seq_w;
  for (size_t i = 0; i < sizeof pt / sizeof *pt; i++) {
    *pt[i] = rp_alloc(nt * sizeof(float), RP_MEM_DATA);
    ok = ok && *pt[i];
  }
  if (!ok) {
    rp_rollout_free(r);
    return rp_err(RP_ENOMEM, "out of memory for a rollout buffer of %d sequences", cap);
  }
  return RP_OK;
}

void rp_rollout_free(rp_rollout *r) {
  void *p[] = {r->tokens, r->plen, r->clen, r->reward, r->seq_adv, r->seq_w, r->old_logp,
               r->ref_logp, r->adv, r->ret, r->value, r->samp_logp};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++) rp_free(p[i]);
  memset(r, 0, sizeof *r);
}

static rp_status check_opts(rp_rl_algo algo, const rp_rl_opts *o) {
  if (o->channels % o->heads != 0)
    return rp_err(RP_EINVAL, "--heads %d does not divide --channels %d; choose heads that "
                  "divide channels", o->heads, o->channels);
  if (strcmp(o->lr_schedule, "cosine") == 0 && o->min_lr > o->lr)
    return rp_err(RP_EINVAL, "--min-lr %g is above --lr %g; use min-lr <= lr", o->min_lr, o->lr);
  if (algo != RP_RL_SFT && o->ds_rounds > 1 && !o->dynamic_sampling)
    return rp_err(RP_EINVAL, "--ds-rounds %d needs --dynamic-sampling", o->ds_rounds);
  return RP_OK;
}

/* Model shape: from --init-from's file when given, else the options. */
static rp_status setup_model(rp_rl_state *s) {
  const rp_rl_opts *o = &s->o;
  rp_gpt_config c = {.L = o->layers, .C = o->channels, .NH = o->heads, .T = o->seq, .V = 256};
  if (o->init_from[0]) {
    rp_train_opts to = {.layers = o->layers, .channels = o->channels, .heads = o->heads,
                        .vocab = 256, .seq = o->seq};
    int changed = 0, model_T = o->seq;
    RP_TRY(rp_init_config_into_opts(o->init_from, &to, &changed, &model_T));
    c = (rp_gpt_config){.L = to.layers, .C = to.channels, .NH = to.heads, .T = model_T,
                        .V = to.vocab};
    s->o.layers = c.L, s->o.channels = c.C, s->o.heads = c.NH;
  }
  if (c.V < 256)
    return rp_err(RP_EINVAL, "the model's vocabulary is %d tokens; tasks use bytes (256)", c.V);
  c.Vp = rp_pad_vocab(c.V);
  RP_TRY(rp_gpt_config_validate(&c));
  s->cfg = c;
  int need = rp_task_max_prompt(&s->task) + rp_task_max_answer(&s->task);
  if (need > o->seq)
    return rp_err(RP_EINVAL, "task %s size %d needs %d positions (prompt + answer) but --seq is "
                  "%d; raise --seq (and the model's positions) or lower --task-size",
                  o->task, o->task_size, need, o->seq);
  if (o->max_new < rp_task_max_answer(&s->task))
    rp_warn("--max-new %d is shorter than the longest answer of task %s (%d tokens)", o->max_new,
            o->task, rp_task_max_answer(&s->task));
  rp_stage_spec spec = {.first_layer = 0, .num_layers = c.L, .has_embed = 1, .has_head = 1};
  RP_TRY(rp_chunk_init(&s->model, &c, &spec));
  rp_chunk_init_weights(&s->model, (uint64_t)o->seed);
  if (o->init_from[0]) RP_TRY(rp_load_weights(&s->model, o->init_from));
  /* The reference is the starting policy, also after a resume. */
  s->has_ref = (s->algo == RP_RL_GRPO && o->beta > 0) || (s->algo == RP_RL_PPO && o->kl_coef > 0);
  if (s->has_ref) {
    RP_TRY(rp_chunk_init(&s->ref, &c, &spec));
    memcpy(s->ref.params, s->model.params, s->model.num_params * sizeof(float));
  }
  size_t bytes = s->model.num_params * sizeof(float);
  s->adam_m = rp_alloc(bytes, RP_MEM_OPTIM);
  s->adam_v = rp_alloc(bytes, RP_MEM_OPTIM);
  if (!s->adam_m || !s->adam_v) return rp_err(RP_ENOMEM, "out of memory for AdamW state");
  s->has_vh = s->algo == RP_RL_PPO;
  if (s->has_vh) RP_TRY(rp_value_head_init(&s->vh, c.C));
  return RP_OK;
}

static rp_status setup_compute(rp_rl_state *s) {
  const rp_rl_opts *o = &s->o;
  int threads = o->threads > 0 ? o->threads : default_threads();
  RP_TRY(rp_pool_create(&s->pool, threads, o->pin));
  s->exec.pool = s->pool;
  s->exec.attn = strcmp(o->attention, "flash") == 0 ? rp_attn_flash() : rp_attn_reference();
  int T = o->seq;
  s->micro = o->micro;
  s->lv = calloc((size_t)s->cfg.L, sizeof *s->lv);
  s->acts_mem = rp_alloc(rp_acts_bytes(&s->model, s->exec.attn, s->micro, T), RP_MEM_ACTS);
  if (!s->lv || !s->acts_mem) return rp_err(RP_ENOMEM, "out of memory for activations");
  RP_TRY(rp_grad_ws_init(&s->ws, &s->model, s->micro, T));
  int dp = s->grid.dp;
  int per_rank = s->algo == RP_RL_SFT ? 0 : RP_CEIL_DIV(o->prompts, dp) * o->group;
  RP_TRY(rp_kv_init(&s->kv, &s->model, s->exec.attn, RP_MAX(per_rank, RL_EVAL_SLOTS), T));
  int rounds = s->algo == RP_RL_GRPO && o->dynamic_sampling ? o->ds_rounds : 1;
  int cap = s->algo == RP_RL_SFT ? RP_CEIL_DIV(o->batch, dp) : per_rank * rounds;
  RP_TRY(rp_rollout_init(&s->ro, cap, T));
  if (s->has_vh) {
    s->dvalue = rp_alloc((size_t)s->micro * T * sizeof(float), RP_MEM_WORKSPACE);
    s->dlnf = rp_alloc((size_t)s->micro * T * s->cfg.C * sizeof(float), RP_MEM_WORKSPACE);
    if (!s->dvalue || !s->dlnf) return rp_err(RP_ENOMEM, "out of memory for PPO scratch");
  }
  return RP_OK;
}

rp_status rp_rl_state_init(rp_rl_state *s, rp_rl_algo algo, const rp_rl_opts *o) {
  memset(s, 0, sizeof *s);
  s->algo = algo;
  s->o = *o;
  rp_status st = check_opts(algo, o);
  if (st == RP_OK) st = rp_task_init(&s->task, o->task, o->task_size);
  if (st == RP_OK) s->task.format_bonus = o->format_bonus;
  if (st == RP_OK && algo != RP_RL_SFT) st = rp_loss_agg_parse(o->loss_agg, &s->agg);
  if (st == RP_OK) st = rp_grid_init(&s->grid, 1, 1);
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, st));
  /* the model (and --init-from's file) first: a refused run writes nothing */
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, setup_model(s)));
  st = s->grid.world_rank == 0 ? make_dirs(o->out) : RP_OK;
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, st));
  if (o->resume[0]) RP_TRY(rp_grid_agree(MPI_COMM_WORLD, rp_rl_resume(s, o->resume)));
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, setup_compute(s)));
  if (s->grid.world_rank == 0) {
    char path[RP_OPT_STRLEN + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", o->out);
    s->metrics = fopen(path, o->resume[0] ? "a" : "w");
    st = s->metrics ? RP_OK : rp_err(RP_EIO, "cannot write %s; pass a writable --out", path);
  }
  return rp_grid_agree(MPI_COMM_WORLD, st);
}

void rp_rl_state_free(rp_rl_state *s) {
  if (s->metrics) fclose(s->metrics);
  rp_free(s->dvalue);
  rp_free(s->dlnf);
  rp_rollout_free(&s->ro);
  rp_kv_free(&s->kv);
  rp_grad_ws_free(&s->ws);
  rp_free(s->acts_mem);
  free(s->lv);
  if (s->has_vh) rp_value_head_free(&s->vh);
  rp_free(s->adam_m);
  rp_free(s->adam_v);
  if (s->has_ref) rp_chunk_free(&s->ref);
  if (s->model.params) rp_chunk_free(&s->model);
  if (s->pool) rp_pool_destroy(s->pool);
  if (s->grid.world_size) rp_grid_free(&s->grid);
  memset(s, 0, sizeof *s);
}

void rp_rl_allreduce(rp_rl_state *s, double *v, int n) {
  if (s->grid.dp > 1) MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, s->grid.dp_comm);
}

float rp_rl_lr(const rp_rl_state *s) {
  const rp_rl_opts *o = &s->o;
  /* constant: lr after the (optional) linear warmup. RL starts with fresh
   * AdamW moments, whose first steps are large and sign-like: warm up. */
  float end = strcmp(o->lr_schedule, "constant") == 0 ? o->lr : o->min_lr;
  return rp_lr_cosine(s->step, o->warmup, o->steps, o->lr, end);
}

void rp_rl_zero_grads(rp_rl_state *s) {
  rp_chunk_zero_grads(&s->model);
  if (s->has_vh) memset(s->vh.g, 0, (size_t)(s->vh.C + 1) * sizeof(float));
}

double rp_rl_optimizer_step(rp_rl_state *s, float lr) {
  rp_chunk *m = &s->model;
  const rp_rl_opts *o = &s->o;
  int nvh = s->has_vh ? s->vh.C + 1 : 0;
  if (s->grid.dp > 1) {
    /* Losses are normalised by global counts, so the sum over ranks is the
     * gradient of the global objective. */
    MPI_Allreduce(MPI_IN_PLACE, m->grads, (int)m->num_params, MPI_FLOAT, MPI_SUM,
                  s->grid.dp_comm);
    if (nvh) MPI_Allreduce(MPI_IN_PLACE, s->vh.g, nvh, MPI_FLOAT, MPI_SUM, s->grid.dp_comm);
  }
  double ss = rp_sumsq(m->grads, (long)m->num_params, s->pool);
  if (nvh) ss += rp_sumsq(s->vh.g, nvh, NULL);
  double norm = sqrt(ss);
  float scale = 1.0f;
  if (o->grad_clip > 0 && norm > o->grad_clip) scale = (float)(o->grad_clip / norm);
  if (scale != 1.0f) {
    rp_scale(m->grads, scale, (long)m->num_params, s->pool);
    if (nvh) rp_scale(s->vh.g, scale, nvh, NULL);
  }
  rp_adamw_hparams h = {.lr = lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = 1e-8f,
                        .weight_decay = o->weight_decay};
  int t = s->opt_steps + 1;
  for (int i = 0; i < m->num_tensors; i++) {
    const rp_tensor *ts = &m->tensors[i];
    rp_adamw_update(m->params + ts->offset, m->grads + ts->offset, s->adam_m + ts->offset,
                    s->adam_v + ts->offset, (long)ts->numel, &h,
                    ts->decay ? o->weight_decay : 0.0f, t, s->pool);
  }
  if (nvh) {
    rp_adamw_hparams hv = h;
    hv.lr = lr * o->vf_lr_mult;
    rp_adamw_update(s->vh.p, s->vh.g, s->vh.m, s->vh.v, nvh, &hv, 0.0f, t, NULL);
  }
  s->opt_steps++;
  return norm;
}

double rp_rl_forward_seqs(rp_rl_state *s, const rp_chunk *m, const rp_rollout *r, int first,
                          int n, int sft_targets) {
  RP_CHECK(n >= 1 && n <= s->micro);
  int T = 1;
  for (int i = first; i < first + n; i++) T = RP_MAX(T, r->plen[i] + r->clen[i] - 1);
  rp_acts *a = &s->acts;
  rp_acts_bind(a, s->lv, m, s->exec.attn, s->acts_mem, n, T);
  for (int b = 0; b < n; b++) {
    const int32_t *tok = r->tokens + (size_t)(first + b) * r->T;
    int plen = r->plen[first + b], len = plen + r->clen[first + b];
    for (int t = 0; t < T; t++) {
      int i = b * T + t;
      a->tokens[i] = t < len ? tok[t] : 0;
      a->targets[i] = sft_targets && t + 1 >= plen && t + 1 < len ? tok[t + 1] : -1;
      a->pos[i] = t;
    }
  }
  return rp_chunk_forward(m, a, NULL, &s->exec);
}

/* Data parallelism keeps every replica's parameters identical (same reduced
 * gradients, same AdamW step); checked bitwise at each evaluation. */
static rp_status check_params_in_sync(rp_rl_state *s) {
  if (s->grid.dp == 1) return RP_OK;
  const uint32_t *w = (const uint32_t *)s->model.params;
  unsigned long long h = 0xcbf29ce484222325ULL, lo, hi;
  for (size_t i = 0; i < s->model.num_params; i++) h = (h ^ w[i]) * 0x100000001b3ULL;
  if (s->has_vh)
    for (int i = 0; i <= s->vh.C; i++) h = (h ^ ((const uint32_t *)s->vh.p)[i]) * 0x100000001b3ULL;
  MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, s->grid.dp_comm);
  MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, s->grid.dp_comm);
  if (lo != hi)
    return rp_err(RP_EINTERNAL, "parameters differ between data-parallel ranks at step %d",
                  s->step);
  return RP_OK;
}

rp_status rp_rl_eval(rp_rl_state *s, double *acc, double *mean_reward) {
  RP_TRY(check_params_in_sync(s));
  const rp_rl_opts *o = &s->o;
  int dp = s->grid.dp, rank = s->grid.dp_rank, S = s->kv.S;
  int max_new = RP_MIN(o->max_new, o->seq - 1);
  rp_sample_params sp = {.temperature = 0, .top_k = 0, .top_p = 1, .max_new = max_new,
                         .stop = RP_TASK_STOP};
  rp_task_example *ex = malloc((size_t)S * sizeof *ex);
  int32_t *ptok = malloc((size_t)S * RP_TASK_MAXLEN * sizeof *ptok);
  const int32_t **pp = malloc((size_t)S * sizeof *pp);
  int *plen = malloc((size_t)S * sizeof *plen), *olen = malloc((size_t)S * sizeof *olen);
  int32_t *out = malloc((size_t)S * max_new * sizeof *out);
  uint64_t *seeds = calloc((size_t)S, sizeof *seeds);
  char *text = malloc((size_t)max_new + 1);
  double tot[3] = {0, 0, 0}; /* correct, reward, count */
  rp_status st = RP_OK;
  if (!ex || !ptok || !pp || !plen || !olen || !out || !seeds || !text)
    st = rp_err(RP_ENOMEM, "out of memory for evaluation");
  for (int i0 = rank; st == RP_OK && i0 < o->eval_n; i0 += S * dp) {
    int n = 0;
    for (int i = i0; i < o->eval_n && n < S; i += dp, n++) {
      rp_task_example_get(&s->task, RL_EVAL_SEED, RP_SPLIT_HELDOUT, (uint64_t)i, &ex[n]);
      plen[n] = (int)strlen(ex[n].prompt);
      for (int t = 0; t < plen[n]; t++)
        ptok[(size_t)n * RP_TASK_MAXLEN + t] = (unsigned char)ex[n].prompt[t];
      pp[n] = ptok + (size_t)n * RP_TASK_MAXLEN;
    }
    st = rp_sample_groups(&s->kv, &s->exec, pp, plen, n, 1, &sp, seeds, out, olen, NULL);
    for (int j = 0; st == RP_OK && j < n; j++) {
      for (int t = 0; t < olen[j]; t++) text[t] = (char)out[(size_t)j * max_new + t];
      float r = rp_task_reward(&s->task, ex[j].prompt, text, olen[j]);
      tot[0] += r == 1.0f;
      tot[1] += r;
      tot[2] += 1;
    }
  }
  free(ex), free(ptok), free(pp), free(plen), free(olen), free(out), free(seeds), free(text);
  RP_TRY(rp_grid_agree(s->grid.dp_comm, st));
  rp_rl_allreduce(s, tot, 3);
  *acc = tot[2] > 0 ? tot[0] / tot[2] : 0.0;
  *mean_reward = tot[2] > 0 ? tot[1] / tot[2] : 0.0;
  return RP_OK;
}
