/* Options of `ringpipe sft`, `ringpipe grpo` and `ringpipe ppo`: one table
 * each (flags, config keys, --help). The rows they share with `train` (model,
 * AdamW, data parallelism, compute) are the training engine's own rows from
 * rp_opt_rows.h; defaults that differ between the jobs (learning rate, loss
 * aggregation, group size) are written per table. */
#include <stddef.h>

#include "ringpipe/rp_opt_rows.h"
#include "ringpipe/rp_rl.h"

#define O(f) offsetof(rp_rl_opts, f)
#define E(f) RP_OPT_ENUM_FIELD(rp_rl_opts, f)  /* ENUM rows: an int-sized enum */


/* task and run rows of every RL job; the model, AdamW, data-parallel, compute
 * and run rows are the training engine's own (rp_opt_rows.h) */
#define RL_COMMON_ROWS(OUT, LAYERS, CHANNELS, HEADS, SEQ)                                       \
  RP_ROWS_MODEL(rp_rl_opts, LAYERS, CHANNELS, HEADS, SEQ),                                     \
  RP_ROWS_DATA_PARALLEL(rp_rl_opts),                                                           \
  RP_ROWS_COMPUTE(rp_rl_opts, "naive"),                                                        \
  RP_ROWS_RUN(rp_rl_opts),                                                                     \
  {"task", RP_OPT_ENUM, E(task), "add", 0, 0, "add|reverse|sort|countdown",                  \
   "task with a verifiable reward: add (a+b=), reverse, sort (digits), countdown"},            \
  {"task-size", RP_OPT_INT, O(task_size), "3", 1, 24, NULL,                                    \
   "difficulty: digits (add, sort), letters (reverse), numbers given (countdown)"},            \
  {"format-bonus", RP_OPT_FLOAT, O(format_bonus), "0.1", 0, 1, NULL,                           \
   "reward of a well-formed but wrong answer (a correct one gets 1)"},                         \
  {"eval-n", RP_OPT_INT, O(eval_n), "500", 0, 1000000, NULL,                                   \
   "held-out problems for exact-match accuracy (greedy decoding)"},                            \
  {"eval-every", RP_OPT_INT, O(eval_every), "20", 0, 100000000, NULL,                          \
   "held-out accuracy every N steps (0: only at start and end)"},                              \
  {"max-new", RP_OPT_INT, O(max_new), "8", 1, 4096, NULL, "tokens generated per answer at most"}, \
  {"steps", RP_OPT_INT, O(steps), "200", 0, 100000000, NULL, "optimizer steps (RL: rollout batches)"}, \
  {"seed", RP_OPT_INT, O(seed), "1337", 0, 2147483647, NULL,                                   \
   "seed for initialisation, problems and sampling"},                                          \
  {"ckpt-every", RP_OPT_INT, O(ckpt_every), "0", 0, 100000000, NULL,                           \
   "save a checkpoint every N steps into OUT/ckpt (0: only at the end)"},                      \
  {"tensorboard", RP_OPT_BOOL, O(tensorboard), "1", 0, 0, NULL,                                 \
   "write TensorBoard event files of every metric into OUT/tensorboard"},                       \
  {"out", RP_OPT_STR, O(out), OUT, 0, 0, NULL,                                                 \
   "output directory: metrics.jsonl and ckpt/ (created if missing)"},                          \
  {"resume", RP_OPT_STR, O(resume), "", 0, 0, NULL,                                            \
   "checkpoint directory of this job to continue from (same options)"}

/* RL's constant schedule keeps the warmup: fresh AdamW moments make the first
 * steps large and sign-like */
#define RL_LRS_HELP "after the warmup: cosine decay to min-lr, or constant"

/* rows of the rollout-based jobs */
#define RL_ROLLOUT_ROWS                                                                         \
  {"temperature", RP_OPT_FLOAT, O(temperature), "1.0", 0.01, 100, NULL,                        \
   "sampling temperature of rollouts (log-probs use the same)"},                               \
  {"top-k", RP_OPT_INT, O(top_k), "0", 0, 16777216, NULL, "rollouts sample among the k likeliest (0: all)"}, \
  {"top-p", RP_OPT_FLOAT, O(top_p), "1.0", 0.01, 1, NULL, "nucleus sampling mass (1: all)"},   \
  {"micro", RP_OPT_INT, O(micro), "64", 1, 65536, NULL,                                        \
   "sequences per forward/backward micro-batch"},                                              \
  {"mu", RP_OPT_INT, O(mu), "1", 1, 1000, NULL,                                                \
   "optimisation passes per rollout batch (old log-probs kept from the first)"},               \
  {"clip-low", RP_OPT_FLOAT, O(clip_low), "0.2", 0, 1, NULL, "ratio lower clip: 1 - clip-low"}, \
  {"clip-high", RP_OPT_FLOAT, O(clip_high), "0.2", 0, 100, NULL,                               \
   "ratio upper clip: 1 + clip-high (clip-higher: make it larger than clip-low)"}

const rp_opt rp_sft_opt_table[] = {
    RL_COMMON_ROWS("runs/sft", "2", "128", "4", "32"),
    RP_ROWS_ADAMW(rp_rl_opts, "1e-3", "1e-4", "20", "cosine", RL_LRS_HELP, "0.1"),
    {"batch", RP_OPT_INT, O(batch), "64", 1, 1000000, NULL,
     "problems per step (global, split over data-parallel ranks)"},
    {"micro", RP_OPT_INT, O(micro), "64", 1, 65536, NULL,
     "sequences per forward/backward micro-batch"},
};
const int rp_sft_opt_count = sizeof rp_sft_opt_table / sizeof rp_sft_opt_table[0];

const rp_opt rp_grpo_opt_table[] = {
    RL_COMMON_ROWS("runs/grpo", "2", "128", "4", "32"),
    RP_ROWS_ADAMW(rp_rl_opts, "1e-4", "0", "10", "constant", RL_LRS_HELP, "0.0"),
    RL_ROLLOUT_ROWS,
    {"prompts", RP_OPT_INT, O(prompts), "16", 1, 1000000, NULL,
     "prompts per rollout batch (global, split over data-parallel ranks)"},
    {"group", RP_OPT_INT, O(group), "8", 2, 1024, NULL, "completions per prompt (G)"},
    {"beta", RP_OPT_FLOAT, O(beta), "0.0", 0, 100, NULL,
     "k3 KL penalty to the starting policy (0: no reference model, no reference pass)"},
    {"scale-std", RP_OPT_BOOL, O(scale_std), "1", 0, 0, NULL,
     "divide group advantages by the group std (--no-scale-std: Dr. GRPO)"},
    {"adv-eps", RP_OPT_FLOAT, O(adv_eps), "1e-4", 0, 1, NULL, "eps in (r - mean) / (std + eps)"},
    {"loss-agg", RP_OPT_ENUM, E(loss_agg), "seq-mean-token-mean", 0, 0,
     "token-mean|seq-mean-token-mean|seq-mean-token-sum-norm",
     "how token losses are averaged: over all tokens, per sequence then over sequences, or "
     "per-sequence sums / max-new (Dr. GRPO)"},
    {"dynamic-sampling", RP_OPT_BOOL, O(dynamic_sampling), "0", 0, 0, NULL,
     "drop groups whose rewards are all equal (no signal) from the loss"},
    {"ds-rounds", RP_OPT_INT, O(ds_rounds), "1", 1, 100, NULL,
     "with dynamic sampling: rollout rounds at most to refill the batch with informative groups"},
};
const int rp_grpo_opt_count = sizeof rp_grpo_opt_table / sizeof rp_grpo_opt_table[0];

const rp_opt rp_ppo_opt_table[] = {
    RL_COMMON_ROWS("runs/ppo", "2", "128", "4", "32"),
    RP_ROWS_ADAMW(rp_rl_opts, "1e-4", "0", "10", "constant", RL_LRS_HELP, "0.0"),
    RL_ROLLOUT_ROWS,
    {"prompts", RP_OPT_INT, O(prompts), "64", 1, 1000000, NULL,
     "prompts per rollout batch (global, split over data-parallel ranks)"},
    {"group", RP_OPT_INT, O(group), "2", 1, 1024, NULL, "completions per prompt"},
    {"loss-agg", RP_OPT_ENUM, E(loss_agg), "token-mean", 0, 0,
     "token-mean|seq-mean-token-mean|seq-mean-token-sum-norm", "how token losses are averaged"},
    {"kl-coef", RP_OPT_FLOAT, O(kl_coef), "0.02", 0, 100, NULL,
     "per-token KL penalty to the starting policy inside the reward (0: no reference pass)"},
    {"gamma", RP_OPT_FLOAT, O(gamma), "1.0", 0, 1, NULL, "GAE discount"},
    {"lam", RP_OPT_FLOAT, O(lam), "0.95", 0, 1, NULL, "GAE lambda"},
    {"vf-coef", RP_OPT_FLOAT, O(vf_coef), "0.5", 0, 100, NULL, "value loss coefficient"},
    {"vf-clip", RP_OPT_FLOAT, O(vf_clip), "0.2", 0, 100, NULL,
     "value clip around the rollout's values (0: unclipped)"},
    {"vf-lr-mult", RP_OPT_FLOAT, O(vf_lr_mult), "10", 0, 10000, NULL,
     "the value head's learning rate is lr times this (it starts from zero)"},
    {"whiten", RP_OPT_BOOL, O(whiten), "1", 0, 0, NULL,
     "normalise advantages to mean 0, std 1 over the batch"},
};
const int rp_ppo_opt_count = sizeof rp_ppo_opt_table / sizeof rp_ppo_opt_table[0];

const char *rp_rl_algo_name(rp_rl_algo algo) {
  return algo == RP_RL_SFT ? "sft" : algo == RP_RL_GRPO ? "grpo" : "ppo";
}

const rp_opt *rp_rl_opt_table(rp_rl_algo algo, int *count) {
  switch (algo) {
    case RP_RL_SFT: *count = rp_sft_opt_count; return rp_sft_opt_table;
    case RP_RL_GRPO: *count = rp_grpo_opt_count; return rp_grpo_opt_table;
    case RP_RL_PPO: *count = rp_ppo_opt_count; return rp_ppo_opt_table;
  }
  *count = 0;
  return NULL;
}
