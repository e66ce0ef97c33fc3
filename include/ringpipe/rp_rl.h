/* Post-training: supervised fine-tuning and reinforcement learning with
 * verifiable rewards (GRPO, PPO) on the CPU.
 *
 * Pieces, each usable on its own:
 *   tasks      problems generated from a seed (addition, reversal, sorting,
 *              countdown), byte tokens, train / held-out split, reward in C;
 *   sampling   G completions per prompt through the model's KV cache;
 *   losses     log-probs, group advantages, the clipped policy objective with
 *              k3 KL, GAE and the clipped value loss, all as gradients w.r.t.
 *              logits (dlogits) that the model's backward then consumes;
 *   runs       `ringpipe sft`, `ringpipe grpo`, `ringpipe ppo` (rp_*_run).
 *
 * Shapes: S cache slots (sequences being decoded), Tmax positions per slot,
 * G completions per prompt, V vocab (Vp padded), C channels. Token positions:
 * a sequence is prompt (plen tokens) followed by its completion (clen tokens);
 * completion token j (position plen + j) is predicted by the logits row of
 * position plen + j - 1, and every per-token array below is indexed by that
 * logits row. */
#ifndef RP_RL_H
#define RP_RL_H

#include <stdint.h>
#include "rp_infer.h"
#include "rp_kernels.h"
#include "rp_model.h"
#include "rp_options.h"
#include "rp_pool.h"
#include "rp_util.h"

/* ====================================================================== tasks */

typedef enum {
  RP_TASK_ADD = 0,      /* "123+456=" -> "579\n"; size = digits per operand */
  RP_TASK_REVERSE = 1,  /* "rev:abcde=" -> "edcba\n"; size = letters */
  RP_TASK_SORT = 2,     /* "sort:31415=" -> "11345\n"; size = digits */
  RP_TASK_COUNTDOWN = 3 /* "cd:75:3,7,25,50=" -> "50+25\n"; size = numbers given */
} rp_task_kind;

#define RP_TASK_MAXLEN 64          /* prompt or answer bytes, with the NUL */
#define RP_TASK_STOP '\n'          /* every answer ends with it: the stop token */
#define RP_TASK_HELDOUT_MOD 8      /* one problem in 8 (by hash of its prompt) is held out */

typedef struct {
  rp_task_kind kind;
  int size;
  float format_bonus;   /* reward of a well-formed but wrong answer (0.1 by default) */
} rp_task;

typedef enum { RP_SPLIT_TRAIN = 0, RP_SPLIT_HELDOUT = 1 } rp_task_split;

typedef struct {
  char prompt[RP_TASK_MAXLEN];   /* ends with '=' */
  char answer[RP_TASK_MAXLEN];   /* a reference answer, ends with RP_TASK_STOP */
} rp_task_example;

/* name: add | reverse | sort | countdown; size in the range the message names. */
rp_status rp_task_init(rp_task *t, const char *name, int size);
rp_status rp_task_init_kind(rp_task *t, rp_task_kind kind, int size);
const char *rp_task_name(rp_task_kind k);
/* Example `index` of a split, a pure function of (task, seed, split, index).
 * The split of a problem is decided by a hash of its prompt alone, so train
 * and held-out never share a problem whatever the seeds. */
void rp_task_example_get(const rp_task *t, uint64_t seed, rp_task_split split, uint64_t index,
                         rp_task_example *ex);
/* Which split a prompt belongs to. */
rp_task_split rp_task_split_of(const char *prompt);
/* Reward of `completion` (len bytes, the stop byte included if it was
 * generated) for `prompt`: 1 if correct, t->format_bonus if well formed but
 * wrong, 0 otherwise. Verifiable from the prompt text alone. */
float rp_task_reward(const rp_task *t, const char *prompt, const char *completion, int len);
/* Longest prompt and reference answer (with the stop byte) the task makes. */
int rp_task_max_prompt(const rp_task *t);
int rp_task_max_answer(const rp_task *t);

/* ========================================================= sampling groups */

/* The KV cache, rp_sample_params and rp_sample_token are the model's
 * inference engine (rp_infer.h). */

/* G completions for each of np prompts; completion i*G+g draws from its own
 * stream seeded by seeds[i*G+g], so results do not depend on how prompts are
 * batched or split over ranks. out [np*G, max_new] tokens, out_len [np*G]
 * (stop token included when generated); out_logp (may be NULL) [np*G, max_new]
 * gets each sampled token's log-prob under softmax(logits / temperature)
 * (the policy the RL losses use; 0 when greedy). Needs np*G <= S and each
 * prompt plus max_new within Tmax (longer completions are cut at Tmax). */
rp_status rp_sample_groups(rp_kv_cache *c, const rp_exec *x, const int32_t *const *prompts,
                           const int *plen, int np, int G, const rp_sample_params *sp,
                           const uint64_t *seeds, int32_t *out, int *out_len, float *out_logp);

/* =================================================================== losses */

/* log softmax(z / temperature)[target] over the first V columns of a row. */
float rp_logprob_row(const float *logits, int V, int target, float temperature);
/* Turns a logits row into dlogits in place: g * d logp(target) / d z, i.e.
 * g * (onehot(target) - softmax(z / temperature)) / temperature; padded
 * columns V..Vp get 0. */
void rp_dlogits_from_dlogp(float *row, int V, int Vp, int target, float temperature, float g);

/* k3 estimator of KL(policy || reference) at one sampled token:
 * exp(ref - logp) - (ref - logp) - 1; always >= 0, exactly 0 when equal. */
double rp_kl_k3(double logp, double ref_logp);

typedef struct {
  float clip_low, clip_high;   /* ratio kept in [1 - clip_low, 1 + clip_high] */
  float beta;                  /* k3 KL coefficient (0: no reference) */
} rp_pg_params;

typedef struct {
  double loss;    /* token loss: pg + beta * k3 */
  double dlogp;   /* d loss / d logp */
  double ratio, kl;
  int clipped;    /* the clipped branch was taken (no gradient from pg) */
} rp_pg_token;

/* Clipped policy-gradient loss of one token with advantage adv:
 *   pg = -min(r A, clip(r, 1-low, 1+high) A),  r = exp(logp - old_logp)
 * plus beta * k3(logp, ref_logp) when beta > 0. */
void rp_pg_token_loss(double logp, double old_logp, double ref_logp, double adv,
                      const rp_pg_params *p, rp_pg_token *out);

/* Group-relative advantages of G rewards: (r - mean) / (std + eps) with the
 * sample std (G-1 denominator), or r - mean when scale_std is 0 (Dr. GRPO).
 * Returns the group std (0 for a group whose rewards are all equal). */
double rp_group_advantages(const float *r, int G, int scale_std, float eps, float *adv);

typedef enum {
  RP_AGG_TOKEN_MEAN = 0,            /* every token of the batch weighs the same */
  RP_AGG_SEQ_MEAN_TOKEN_MEAN = 1,   /* mean over tokens of a sequence, then over sequences */
  RP_AGG_SEQ_MEAN_TOKEN_SUM_NORM = 2 /* token sum / max_new, mean over sequences (Dr. GRPO) */
} rp_loss_agg;
rp_status rp_loss_agg_parse(const char *name, rp_loss_agg *out);
/* Weight of each token of a sequence with clen tokens in a batch of nseq
 * sequences and ntok tokens (global counts), max_new the generation budget. */
double rp_loss_agg_weight(rp_loss_agg agg, int clen, long nseq, long ntok, int max_new);

/* GAE over one sequence of n tokens (terminal after the last):
 *   delta_t = r_t + gamma V_{t+1} - V_t, A_t = delta_t + gamma lambda A_{t+1},
 * returns R_t = A_t + V_t. */
void rp_gae(const float *rewards, const float *values, int n, float gamma, float lambda,
            float *adv, float *ret);
/* Clipped value loss 0.5 max((v - R)^2, (v_clip - R)^2) with
 * v_clip = v_old + clip(v - v_old, -clip, clip); *dv gets d loss / d v and
 * *clipped whether the clipped term was the larger. */
double rp_value_loss(float v, float v_old, float ret, float clip, double *dv, int *clipped);

/* ============================================================ runs (CLI) */

typedef struct {
  /* model (taken from --init-from when given) */
  int layers, channels, heads, seq;
  /* task */
  rp_task_kind task;
  int task_size;
  float format_bonus;
  int eval_n, eval_every;
  /* optimizer */
  float lr, min_lr, weight_decay, beta1, beta2, eps, grad_clip;
  int warmup;
  rp_lr_schedule lr_schedule;
  /* data parallel (the training engine's) */
  int zero, dp_overlap;
  float bucket_mb;
  /* run */
  int steps, seed, threads, pin, log_every, ckpt_every, quiet;
  int tensorboard;  /* mirror metrics.jsonl into OUT/tensorboard */
  char out[RP_OPT_STRLEN], resume[RP_OPT_STRLEN], init_from[RP_OPT_STRLEN];
  rp_attn_kind attention;
  rp_precision precision;
  int bf16_stochastic;
  rp_bf16_attn bf16_attention; /* flash products in bf16 too (rp_flash_config.bf16) */
  /* sft */
  int batch;
  /* rollouts */
  int prompts, group, max_new, top_k, micro;
  float temperature, top_p;
  /* grpo */
  int mu, scale_std, dynamic_sampling, ds_rounds;
  float clip_low, clip_high, beta, adv_eps;
  rp_loss_agg loss_agg;
  /* ppo */
  float kl_coef, gamma, lam, vf_coef, vf_clip, vf_lr_mult;
  int whiten;
} rp_rl_opts;

extern const rp_opt rp_sft_opt_table[];
extern const int rp_sft_opt_count;
extern const rp_opt rp_grpo_opt_table[];
extern const int rp_grpo_opt_count;
extern const rp_opt rp_ppo_opt_table[];
extern const int rp_ppo_opt_count;

typedef enum { RP_RL_SFT = 0, RP_RL_GRPO = 1, RP_RL_PPO = 2 } rp_rl_algo;
const char *rp_rl_algo_name(rp_rl_algo algo);   /* "sft", "grpo", "ppo" */
/* The options table of a job and its length. */
const rp_opt *rp_rl_opt_table(rp_rl_algo algo, int *count);

/* Runs a whole job (MPI must be initialised; dp = world size). Writes
 * OUT/metrics.jsonl and checkpoints to OUT/ckpt. Every rank returns the same
 * status. */
rp_status rp_rl_run(rp_rl_algo algo, const rp_rl_opts *o);

#endif
