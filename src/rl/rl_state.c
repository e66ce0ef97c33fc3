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
#include "ringpipe/rp_tb.h"
#include "ringpipe/rp_train.h"
#include "rl_internal.h"

/* Held-out problems are the first eval_n of the held-out split under this
 * fixed seed, so every job (SFT, GRPO, PPO, any --seed) is scored on the same
 * problems. */
#define RL_EVAL_SEED 0x5eed5eedULL
#define RL_EVAL_SLOTS 64

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
  if (o->lr_schedule == RP_LR_COSINE && o->min_lr > o->lr)
    return rp_err(RP_EINVAL, "--min-lr %g is above --lr %g; use min-lr <= lr", o->min_lr, o->lr);
  if (algo != RP_RL_SFT && o->ds_rounds > 1 && !o->dynamic_sampling)
    return rp_err(RP_EINVAL, "--ds-rounds %d needs --dynamic-sampling", o->ds_rounds);
  return RP_OK;
}

/* The training engine's options: the model, AdamW, data parallelism and
 * threads of this job; a micro-batch of --micro sequences of --seq positions
 * is the activation buffer. */
static rp_status engine_opts(const rp_rl_opts *o, rp_train_opts *t) {
  RP_TRY(rp_opts_defaults(rp_train_opt_table, rp_train_opt_count, t));
  t->layers = o->layers, t->channels = o->channels, t->heads = o->heads, t->seq = o->seq;
  t->vocab = 256;
  t->batch = o->micro, t->microbatches = 1, t->steps = o->steps;
  t->lr = o->lr, t->min_lr = o->min_lr, t->weight_decay = o->weight_decay;
  t->beta1 = o->beta1, t->beta2 = o->beta2, t->eps = o->eps, t->grad_clip = o->grad_clip;
  t->warmup = o->warmup;
  t->lr_schedule = o->lr_schedule;
  t->attention = o->attention;
  t->precision = o->precision, t->bf16_stochastic = o->bf16_stochastic;
  t->bf16_attention = o->bf16_attention;
  snprintf(t->init_from, sizeof t->init_from, "%s", o->init_from);
  snprintf(t->out, sizeof t->out, "%s", o->out);
  t->seed = o->seed, t->threads = o->threads, t->pin = o->pin, t->quiet = o->quiet;
  t->zero = o->zero, t->dp_overlap = o->dp_overlap, t->bucket_mb = o->bucket_mb;
  t->measure_peak = 0;
  return RP_OK;
}

/* Model shape: from --init-from's file when given (the engine reads it), else
 * the options; the task must fit its positions. */
static rp_status check_model(rp_rl_state *s) {
  const rp_rl_opts *o = &s->o;
  rp_gpt_config c = s->eng.cfg;
  s->o.layers = c.L, s->o.channels = c.C, s->o.heads = c.NH;
  if (c.V < 256)
    return rp_err(RP_EINVAL, "the model's vocabulary is %d tokens; tasks use bytes (256)", c.V);
  s->cfg = c;
  int need = rp_task_max_prompt(&s->task) + rp_task_max_answer(&s->task);
  if (need > o->seq)
    return rp_err(RP_EINVAL, "task %s size %d needs %d positions (prompt + answer) but --seq is "
                  "%d; raise --seq (and the model's positions) or lower --task-size",
                  rp_task_name(o->task), o->task_size, need, o->seq);
  if (o->max_new < rp_task_max_answer(&s->task))
    rp_warn("--max-new %d is shorter than the longest answer of task %s (%d tokens)", o->max_new,
            rp_task_name(o->task), rp_task_max_answer(&s->task));
  return RP_OK;
}

/* The job's parts beside the engine: the reference policy, the value head. */
static rp_status setup_model(rp_rl_state *s) {
  const rp_rl_opts *o = &s->o;
  s->model = &s->eng.chunks[0];
  s->grid = s->eng.grid;
  s->pool = s->eng.pool;
  /* rollouts and evaluations decode in fp32 whatever --precision trains in:
   * their row counts (every group's sequences at once) are not the training
   * micro-batch the bf16 scratch is sized for, and the sampler's log-probs are
   * only compared (sampler_logp_gap), the loss recomputes its own */
  s->exec = s->eng.exec;
  s->exec.bf16 = NULL;
  s->micro = s->eng.o.batch;
  RP_TRY(check_model(s));
  /* The reference is the starting policy, also after a resume. */
  s->has_ref = (s->algo == RP_RL_GRPO && o->beta > 0) || (s->algo == RP_RL_PPO && o->kl_coef > 0);
  if (s->has_ref) {
    RP_TRY(rp_chunk_init(&s->ref, &s->cfg, &s->model->spec));
    memcpy(s->ref.params, s->model->params, s->model->num_params * sizeof(float));
  }
  s->has_vh = s->algo == RP_RL_PPO;
  if (s->has_vh) RP_TRY(rp_value_head_init(&s->vh, s->cfg.C));
  return RP_OK;
}

static rp_status setup_compute(rp_rl_state *s) {
  const rp_rl_opts *o = &s->o;
  int T = o->seq;
  int dp = s->grid.dp;
  int per_rank = s->algo == RP_RL_SFT ? 0 : RP_CEIL_DIV(o->prompts, dp) * o->group;
  RP_TRY(rp_kv_init(&s->kv, s->model, s->exec.attn, RP_MAX(per_rank, RL_EVAL_SLOTS), T));
  int rounds = s->algo == RP_RL_GRPO && o->dynamic_sampling ? o->ds_rounds : 1;
  int cap = s->algo == RP_RL_SFT ? RP_CEIL_DIV(o->batch, dp) : per_rank * rounds;
  RP_TRY(rp_rollout_init(&s->ro, cap, T));
  if (s->has_vh) {
    s->dvalue = rp_alloc((size_t)s->micro * T * sizeof(float), RP_MEM_WORKSPACE);
    if (!s->dvalue) return rp_err(RP_ENOMEM, "out of memory for PPO scratch");
  }
  return RP_OK;
}

rp_status rp_rl_state_init(rp_rl_state *s, rp_rl_algo algo, const rp_rl_opts *o) {
  memset(s, 0, sizeof *s);
  s->algo = algo;
  s->o = *o;
  rp_train_opts to;
  rp_status st = check_opts(algo, o);
  if (st == RP_OK) st = rp_task_init_kind(&s->task, o->task, o->task_size);
  if (st == RP_OK) s->task.format_bonus = o->format_bonus;
  s->agg = o->loss_agg;
  if (st == RP_OK) st = engine_opts(o, &to);
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, st));
  /* the model (and --init-from's file) first: a refused run writes nothing */
  RP_TRY(rp_engine_init(&s->eng, &to));
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
    if (st == RP_OK && o->tensorboard) st = rp_tb_mirror_open(&s->tb, o->out);
  }
  return rp_grid_agree(MPI_COMM_WORLD, st);
}

void rp_rl_state_free(rp_rl_state *s) {
  if (s->metrics) fclose(s->metrics);
  rp_tb_mirror_close(s->tb);
  rp_free(s->dvalue);
  rp_rollout_free(&s->ro);
  rp_kv_free(&s->kv);
  if (s->has_vh) rp_value_head_free(&s->vh);
  if (s->has_ref) rp_chunk_free(&s->ref);
  if (s->eng.grid.world_size) rp_trainer_free(&s->eng);
  memset(s, 0, sizeof *s);
}

void rp_rl_allreduce(rp_rl_state *s, double *v, int n) {
  if (s->grid.dp > 1) MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, s->grid.dp_comm);
}

float rp_rl_lr(const rp_rl_state *s) {
  const rp_rl_opts *o = &s->o;
  /* constant: lr after the (optional) linear warmup. RL starts with fresh
   * AdamW moments, whose first steps are large and sign-like: warm up. */
  float end = o->lr_schedule == RP_LR_CONSTANT ? o->lr : o->min_lr;
  return rp_lr_cosine(s->step, o->warmup, o->steps, o->lr, end);
}

void rp_rl_zero_grads(rp_rl_state *s, int microbatches) {
  rp_engine_begin_step(&s->eng, microbatches);
  if (s->has_vh) memset(s->vh.g, 0, (size_t)(s->vh.C + 1) * sizeof(float));
}

int rp_rl_microbatches(const rp_rl_state *s, int nseq) { return RP_CEIL_DIV(nseq, s->micro); }

/* The value head (PPO) is C + 1 floats beside the model: its gradient is
 * summed over the replicas here, and its AdamW step taken here, with the
 * same clipping factor as the model's. */
static double value_head_reduce(rp_rl_state *s) {
  int nvh = s->vh.C + 1;
  if (s->grid.dp > 1)
    MPI_Allreduce(MPI_IN_PLACE, s->vh.g, nvh, MPI_FLOAT, MPI_SUM, s->grid.dp_comm);
  return rp_sumsq(s->vh.g, nvh, NULL);
}

rp_status rp_rl_optimizer_step(rp_rl_state *s, float lr, double *norm_out) {
  const rp_rl_opts *o = &s->o;
  /* Losses are normalised by global counts, so the sum over ranks is the
   * gradient of the global objective. */
  double ss;
  RP_TRY(rp_engine_reduce(&s->eng, &ss));
  if (s->has_vh) ss += value_head_reduce(s);
  double norm = sqrt(ss);
  float scale = rp_engine_clip_scale(&s->eng, norm);
  s->eng.step = s->opt_steps;  /* AdamW's bias correction counts optimizer steps */
  rp_engine_apply(&s->eng, lr, scale);
  if (s->has_vh) {
    int nvh = s->vh.C + 1;
    if (scale != 1.0f) rp_scale(s->vh.g, scale, nvh, NULL);
    rp_adamw_hparams hv = {.lr = lr * o->vf_lr_mult, .beta1 = o->beta1, .beta2 = o->beta2,
                           .eps = o->eps, .weight_decay = 0.0f};
    rp_adamw_update(s->vh.p, s->vh.g, s->vh.m, s->vh.v, nvh, &hv, 0.0f, s->opt_steps + 1, NULL);
  }
  s->opt_steps++;
  *norm_out = norm;
  return RP_OK;
}

rp_acts *rp_rl_bind_seqs(rp_rl_state *s, const rp_chunk *m, const rp_rollout *r, int first,
                         int n, int sft_targets) {
  RP_CHECK(n >= 1 && n <= s->micro);
  int T = 1;
  for (int i = first; i < first + n; i++) T = RP_MAX(T, r->plen[i] + r->clen[i] - 1);
  rp_acts *a = rp_engine_bind(&s->eng, m, n, T);
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
  s->acts = a;
  return a;
}

double rp_rl_forward_seqs(rp_rl_state *s, const rp_chunk *m, const rp_rollout *r, int first,
                          int n, int sft_targets) {
  return rp_engine_forward(&s->eng, m, rp_rl_bind_seqs(s, m, r, first, n, sft_targets));
}

/* Data parallelism keeps every replica's parameters identical (same reduced
 * gradients, same AdamW step); checked bitwise at each evaluation. */
static rp_status check_params_in_sync(rp_rl_state *s) {
  if (s->grid.dp == 1) return RP_OK;
  const uint32_t *w = (const uint32_t *)s->model->params;
  unsigned long long h = 0xcbf29ce484222325ULL, lo, hi;
  for (size_t i = 0; i < s->model->num_params; i++) h = (h ^ w[i]) * 0x100000001b3ULL;
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
