/* Options of `ringpipe sft`, `ringpipe grpo` and `ringpipe ppo`: one table
 * each (flags, config keys, --help), sharing the rows every job has. Defaults
 * that differ between the jobs (learning rate, loss aggregation, group size)
 * are written per table. */
#include <stddef.h>

#include "ringpipe/rp_rl.h"

#define O(f) offsetof(rp_rl_opts, f)

/* model, task, run: identical in every table */
#define RL_COMMON_ROWS(OUT)                                                                     \
  {"layers", RP_OPT_INT, O(layers), "2", 1, 1024, NULL,                                        \
   "transformer layers (taken from --init-from when given)"},                                  \
  {"channels", RP_OPT_INT, O(channels), "128", 8, 16384, NULL, "model width C"},                \
  {"heads", RP_OPT_INT, O(heads), "4", 1, 1024, NULL, "attention heads (must divide channels)"}, \
  {"seq", RP_OPT_INT, O(seq), "32", 4, 65536, NULL,                                            \
   "positions: prompt plus answer must fit (a new model gets this many)"},                     \
  {"task", RP_OPT_CHOICE, O(task), "add", 0, 0, "add|reverse|sort|countdown",                  \
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
  {"threads", RP_OPT_INT, O(threads), "0", 0, 1024, NULL,                                      \
   "compute threads per rank (0: the cores this process may use, divided among local ranks)"}, \
  {"pin", RP_OPT_BOOL, O(pin), "1", 0, 0, NULL, "pin pool threads to cores when they fit"},    \
  {"log-every", RP_OPT_INT, O(log_every), "1", 1, 1000000, NULL, "print a line every N steps"}, \
  {"ckpt-every", RP_OPT_INT, O(ckpt_every), "0", 0, 100000000, NULL,                           \
   "save a checkpoint every N steps into OUT/ckpt (0: only at the end)"},                      \
  {"quiet", RP_OPT_BOOL, O(quiet), "0", 0, 0, NULL, "print only evaluations and the summary"}, \
  {"tensorboard", RP_OPT_BOOL, O(tensorboard), "1", 0, 0, NULL,                                 \
   "write TensorBoard event files of every metric into OUT/tensorboard"},                       \
  {"out", RP_OPT_STR, O(out), OUT, 0, 0, NULL,                                                 \
   "output directory: metrics.jsonl and ckpt/ (created if missing)"},                          \
  {"resume", RP_OPT_STR, O(resume), "", 0, 0, NULL,                                            \
   "checkpoint directory of this job to continue from (same options)"},                        \
  {"init-from", RP_OPT_STR, O(init_from), "", 0, 0, NULL,                                      \
   "start from these weights: a ringpipe checkpoint directory or an llm.c .bin"},              \
  {"attention", RP_OPT_CHOICE, O(attention), "naive", 0, 0, "naive|flash", "attention kernel"}, \
  {"beta1", RP_OPT_FLOAT, O(beta1), "0.9", 0, 0.999999, NULL, "AdamW beta1"},                  \
  {"beta2", RP_OPT_FLOAT, O(beta2), "0.95", 0, 0.999999, NULL, "AdamW beta2"},                 \
  {"eps", RP_OPT_FLOAT, O(eps), "1e-8", 0, 1, NULL, "AdamW epsilon"},                          \
  {"zero", RP_OPT_INT, O(zero), "0", 0, 1, NULL,                                               \
   "ZeRO stage: 1 shards the AdamW state over the data-parallel ranks"},                       \
  {"bucket-mb", RP_OPT_FLOAT, O(bucket_mb), "4", 0.001, 4096, NULL,                            \
   "data-parallel gradient bucket size in MiB"},                                               \
  {"dp-overlap", RP_OPT_BOOL, O(dp_overlap), "1", 0, 0, NULL,                                  \
   "reduce each gradient bucket as soon as backward fills it (--no-dp-overlap: after)"},      \
  {"grad-clip", RP_OPT_FLOAT, O(grad_clip), "1.0", 0, 1e30, NULL,                              \
   "clip the global gradient norm to this (0: no clipping)"},                                  \
  {"lr-schedule", RP_OPT_CHOICE, O(lr_schedule), LRS, 0, 0, "cosine|constant",                 \
   "after the warmup: cosine decay to min-lr, or constant"}

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
   "ratio upper clip: 1 + clip-high (clip-higher: make it larger than clip-low)"},             \
  {"weight-decay", RP_OPT_FLOAT, O(weight_decay), "0.0", 0, 10, NULL, "AdamW decoupled weight decay (matrices)"}, \
  {"min-lr", RP_OPT_FLOAT, O(min_lr), "0", 0, 10, NULL, "final learning rate of the cosine schedule"}, \
  {"warmup", RP_OPT_INT, O(warmup), "10", 0, 100000000, NULL,                                \
   "linear warmup steps (either schedule)"}

#define LRS "cosine"
const rp_opt rp_sft_opt_table[] = {
    RL_COMMON_ROWS("runs/sft"),
    {"batch", RP_OPT_INT, O(batch), "64", 1, 1000000, NULL,
     "problems per step (global, split over data-parallel ranks)"},
    {"micro", RP_OPT_INT, O(micro), "64", 1, 65536, NULL,
     "sequences per forward/backward micro-batch"},
    {"lr", RP_OPT_FLOAT, O(lr), "1e-3", 0, 10, NULL, "peak learning rate"},
    {"min-lr", RP_OPT_FLOAT, O(min_lr), "1e-4", 0, 10, NULL,
     "final learning rate of the cosine schedule"},
    {"warmup", RP_OPT_INT, O(warmup), "20", 0, 100000000, NULL, "linear warmup steps"},
    {"weight-decay", RP_OPT_FLOAT, O(weight_decay), "0.1", 0, 10, NULL,
     "AdamW decoupled weight decay (matrices)"},
};
const int rp_sft_opt_count = sizeof rp_sft_opt_table / sizeof rp_sft_opt_table[0];
#undef LRS

#define LRS "constant"
const rp_opt rp_grpo_opt_table[] = {
    RL_COMMON_ROWS("runs/grpo"),
    RL_ROLLOUT_ROWS,
    {"lr", RP_OPT_FLOAT, O(lr), "1e-4", 0, 10, NULL, "learning rate"},
    {"prompts", RP_OPT_INT, O(prompts), "16", 1, 1000000, NULL,
     "prompts per rollout batch (global, split over data-parallel ranks)"},
    {"group", RP_OPT_INT, O(group), "8", 2, 1024, NULL, "completions per prompt (G)"},
    {"beta", RP_OPT_FLOAT, O(beta), "0.0", 0, 100, NULL,
     "k3 KL penalty to the starting policy (0: no reference model, no reference pass)"},
    {"scale-std", RP_OPT_BOOL, O(scale_std), "1", 0, 0, NULL,
     "divide group advantages by the group std (--no-scale-std: Dr. GRPO)"},
    {"adv-eps", RP_OPT_FLOAT, O(adv_eps), "1e-4", 0, 1, NULL, "eps in (r - mean) / (std + eps)"},
    {"loss-agg", RP_OPT_CHOICE, O(loss_agg), "seq-mean-token-mean", 0, 0,
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
    RL_COMMON_ROWS("runs/ppo"),
    RL_ROLLOUT_ROWS,
    {"lr", RP_OPT_FLOAT, O(lr), "1e-4", 0, 10, NULL, "learning rate (policy)"},
    {"prompts", RP_OPT_INT, O(prompts), "64", 1, 1000000, NULL,
     "prompts per rollout batch (global, split over data-parallel ranks)"},
    {"group", RP_OPT_INT, O(group), "2", 1, 1024, NULL, "completions per prompt"},
    {"loss-agg", RP_OPT_CHOICE, O(loss_agg), "token-mean", 0, 0,
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
#undef LRS

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
