/* Shared by src/rl's own files only: the job state of sft/grpo/ppo, the value
 * head, rollouts, and helpers. */
#ifndef RP_RL_INTERNAL_H
#define RP_RL_INTERNAL_H

#include <stdio.h>

#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_rl.h"
#include "ringpipe/rp_train.h"

uint64_t rp_rl_mix(uint64_t x);

/* countdown.c */
int rp_countdown_max_prompt(int n);
int rp_countdown_max_answer(int n);
void rp_countdown_draw(int n, rp_rng *r, rp_task_example *ex);
void rp_countdown_check(const char *prompt, const char *c, int n, int *form, int *ok);

/* ---- value head (PPO): v = lnf . w + b per position; params p = [w (C), b],
 * grads g, AdamW state m, v. Starts at zero so the first values are 0. */
typedef struct {
  int C;
  float *p, *g, *m, *v;
} rp_value_head;
rp_status rp_value_head_init(rp_value_head *h, int C);
void rp_value_head_free(rp_value_head *h);
/* out[N] = lnf[N, C] . w + b */
void rp_value_head_forward(const rp_value_head *h, const float *lnf, int N, float *out);
/* g += d loss / d params from dv[N]; dlnf[N, C] = dv * w (written). */
void rp_value_head_backward(rp_value_head *h, const float *lnf, const float *dv, int N,
                            float *dlnf);

/* ---- a rollout batch on this rank: nseq sequences of prompt + completion,
 * per-token arrays indexed [seq * T + logits row] (see rp_rl.h). */
typedef struct {
  int cap, nseq, T, G;
  int32_t *tokens;           /* cap x T */
  int *plen, *clen;          /* cap */
  float *reward;             /* cap: task reward */
  float *seq_adv;            /* cap: GRPO advantage of the sequence */
  float *old_logp, *ref_logp, *adv, *ret, *value; /* cap x T per token */
  float *samp_logp;          /* cap x T: the sampler's log-prob of each completion token */
  float *seq_w;              /* cap: loss weight of each token of the sequence (aggregation) */
} rp_rollout;
rp_status rp_rollout_init(rp_rollout *r, int cap, int T);
void rp_rollout_free(rp_rollout *r);

/* ---- job state: the job's own parts around the shared training engine
 * (rp_trainer: grid, pool, model, activations, gradient reduction with ZeRO-1
 * and overlapped buckets, AdamW, bf16). grid, model, pool, exec and micro
 * are views of the engine's. */
typedef struct {
  rp_rl_algo algo;
  rp_rl_opts o;
  rp_trainer eng;
  rp_grid grid;              /* = eng.grid (read-only copy) */
  rp_task task;
  rp_gpt_config cfg;
  rp_chunk *model;           /* = &eng.chunks[0] */
  rp_chunk ref;
  int has_ref;
  rp_value_head vh;
  int has_vh;
  rp_pool *pool;             /* = eng.pool */
  rp_exec exec;              /* = eng.exec */
  rp_acts *acts;             /* the engine's activations, as last bound */
  int micro;                 /* rows of the activation buffer (= eng.o.batch) */
  rp_kv_cache kv;
  rp_rollout ro;
  rp_loss_agg agg;
  int step, opt_steps;       /* rollout/SFT steps done; optimizer steps done */
  uint64_t cursor;           /* next global problem index of the train stream */
  FILE *metrics;             /* rank 0 */
  struct rp_tb_mirror *tb;   /* rank 0, --tensorboard */
  float *dvalue;             /* PPO scratch: micro x T */
} rp_rl_state;

rp_status rp_rl_state_init(rp_rl_state *s, rp_rl_algo algo, const rp_rl_opts *o);
void rp_rl_state_free(rp_rl_state *s);
rp_status rp_rl_save(rp_rl_state *s, const char *dir);
/* Restores weights, AdamW state, value head and counters (rl_ckpt.c). */
rp_status rp_rl_resume(rp_rl_state *s, const char *dir);
/* Held-out exact-match accuracy (and mean reward) by greedy decoding of the
 * first eval_n held-out problems, split over dp ranks. */
rp_status rp_rl_eval(rp_rl_state *s, double *acc, double *mean_reward);
/* The engine's gradient reduction (buckets, ZeRO-1), clipping and AdamW over
 * the model, and the value head's beside it; *norm: the gradient norm before
 * clipping. */
rp_status rp_rl_optimizer_step(rp_rl_state *s, float lr, double *norm);
float rp_rl_lr(const rp_rl_state *s);
/* Zero gradients and arm the engine for `microbatches` forward/backward calls
 * on this rank (rp_rl_microbatches of its sequences). */
void rp_rl_zero_grads(rp_rl_state *s, int microbatches);
int rp_rl_microbatches(const rp_rl_state *s, int nseq);

/* Binds the engine's activations for sequences [first, first+n) of the
 * rollout (T = the longest input among them; shorter ones padded) through
 * chunk `m` and fills tokens, targets and positions: targets are the answer
 * tokens when sft_targets (prompt and padding masked), else all masked. */
rp_acts *rp_rl_bind_seqs(rp_rl_state *s, const rp_chunk *m, const rp_rollout *r, int first,
                         int n, int sft_targets);
/* The same, then the forward through `m`; returns the summed loss over targets. */
double rp_rl_forward_seqs(rp_rl_state *s, const rp_chunk *m, const rp_rollout *r, int first,
                          int n, int sft_targets);

/* Step bodies (one rollout batch or one SFT batch); fill a JSON fragment of
 * metrics "\"key\":value,..." and a short human line. */
typedef struct {
  char json[1024];
  char line[512];
} rp_rl_report;
rp_status rp_sft_step(rp_rl_state *s, rp_rl_report *rep);
rp_status rp_grpo_step(rp_rl_state *s, rp_rl_report *rep);
rp_status rp_ppo_step(rp_rl_state *s, rp_rl_report *rep);

/* Samples G completions for each of the np train problems first..first+np-1
 * (this rank's share: problem first+i with i % dp == dp_rank), appends them
 * to s->ro from position ro.nseq (group by group) and scores them; *added
 * gets the number of sequences appended. */
rp_status rp_rl_rollout(rp_rl_state *s, uint64_t first, int np, int G, int *added);
/* Per-token log-probs of the completions of sequences [first, first+n) from
 * the logits in s->acts (after rp_rl_forward_seqs), into dst (a per-token
 * array of the rollout). */
void rp_rl_gather_logp(rp_rl_state *s, const rp_rollout *r, int first, int n, float *dst);

/* One optimisation pass over this rank's rollout (pg_pass.c): per micro-batch
 * forward, per-token clipped objective (+ k3 KL with pg->beta, + clipped value
 * loss with the value head) weighted by seq_w, dlogits, backward; gradients
 * accumulate. record_old stores this pass's log-probs as the old ones (GRPO's
 * first pass). Sums over this rank's tokens go to ps. */
typedef struct {
  double pg_loss, v_loss, tokens, clipped, v_clipped, kl, kl_old, ratio;
} rp_pass_stats;
void rp_rl_policy_pass(rp_rl_state *s, int record_old, const rp_pg_params *pg,
                       rp_pass_stats *ps);

/* Sum of |old_logp - samp_logp| over this rank's completion tokens (the
 * trainer's and the sampler's view of the same policy) into gap[0], token
 * count into gap[1]. */
void rp_rl_logp_gap(const rp_rollout *r, double *gap);

/* Sums of doubles over the data-parallel group (in place). */
void rp_rl_allreduce(rp_rl_state *s, double *v, int n);

#endif
