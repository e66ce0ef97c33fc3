/* Option rows every job that trains a model shares: `train`, `sft`, `grpo`
 * and `ppo` build their tables from these, so a flag means the same thing,
 * with the same range and help, in every job. Each macro takes the options
 * struct T (which has fields of these names) and the defaults that differ
 * between jobs. */
#ifndef RP_OPT_ROWS_H
#define RP_OPT_ROWS_H

#include <stddef.h>
#include "rp_options.h"

/* model shape */
#define RP_ROWS_MODEL(T, LAYERS, CHANNELS, HEADS, SEQ)                                    \
  {"layers", RP_OPT_INT, offsetof(T, layers), LAYERS, 1, 1024, NULL,                      \
   "transformer layers (L; taken from --init-from when given)"},                          \
  {"channels", RP_OPT_INT, offsetof(T, channels), CHANNELS, 8, 16384, NULL,               \
   "model width (C)"},                                                                    \
  {"heads", RP_OPT_INT, offsetof(T, heads), HEADS, 1, 1024, NULL,                          \
   "attention heads (NH); must divide channels"},                                         \
  {"seq", RP_OPT_INT, offsetof(T, seq), SEQ, 1, 1048576, NULL,                            \
   "sequence length (T): the model's positions"}

/* AdamW and its learning-rate schedule (LRS_HELP: what "constant" means in this job) */
#define RP_ROWS_ADAMW(T, LR, MIN_LR, WARMUP, LRS, LRS_HELP, WD)                           \
  {"lr", RP_OPT_FLOAT, offsetof(T, lr), LR, 0, 10, NULL, "peak learning rate"},           \
  {"min-lr", RP_OPT_FLOAT, offsetof(T, min_lr), MIN_LR, 0, 10, NULL,                      \
   "final learning rate of the cosine schedule"},                                         \
  {"warmup", RP_OPT_INT, offsetof(T, warmup), WARMUP, 0, 100000000, NULL,                 \
   "linear warmup steps"},                                                                \
  {"lr-schedule", RP_OPT_ENUM, RP_OPT_ENUM_FIELD(T, lr_schedule), LRS, 0, 0, "cosine|constant",  \
   LRS_HELP},                                                                             \
  {"weight-decay", RP_OPT_FLOAT, offsetof(T, weight_decay), WD, 0, 10, NULL,              \
   "AdamW decoupled weight decay, applied to matrices only"},                             \
  {"beta1", RP_OPT_FLOAT, offsetof(T, beta1), "0.9", 0, 0.999999, NULL, "AdamW beta1"},   \
  {"beta2", RP_OPT_FLOAT, offsetof(T, beta2), "0.95", 0, 0.999999, NULL, "AdamW beta2"},  \
  {"eps", RP_OPT_FLOAT, offsetof(T, eps), "1e-8", 0, 1, NULL, "AdamW epsilon"},           \
  {"grad-clip", RP_OPT_FLOAT, offsetof(T, grad_clip), "1.0", 0, 1e30, NULL,               \
   "clip the global gradient norm to this value (0: no clipping)"}

/* data-parallel gradient reduction and optimizer state */
#define RP_ROWS_DATA_PARALLEL(T)                                                          \
  {"zero", RP_OPT_INT, offsetof(T, zero), "0", 0, 1, NULL,                                \
   "ZeRO stage: 1 shards AdamW state over the data-parallel replicas (reduce-scatter "    \
   "gradients, all-gather parameters); 0 keeps it replicated"},                           \
  {"bucket-mb", RP_OPT_FLOAT, offsetof(T, bucket_mb), "4", 0.001, 4096, NULL,             \
   "gradient bucket size in MiB for the data-parallel reduction"},                        \
  {"dp-overlap", RP_OPT_BOOL, offsetof(T, dp_overlap), "1", 0, 0, NULL,                   \
   "launch each bucket's reduction as soon as its layers finish backward (off: all "      \
   "after backward, to measure what overlap hides)"}

/* compute: kernels, precision, threads */
#define RP_ROWS_COMPUTE(T, ATTENTION)                                                     \
  {"attention", RP_OPT_ENUM, RP_OPT_ENUM_FIELD(T, attention), ATTENTION, 0, 0, "naive|flash",    \
   "attention kernel: naive (O(T^2) reference) or flash (tiled)"},                        \
  {"precision", RP_OPT_ENUM, RP_OPT_ENUM_FIELD(T, precision), "fp32", 0, 0, "fp32|bf16",         \
   "matmul precision: bf16 weights and activations with fp32 accumulation (fp32 master "  \
   "weights, AdamW state, LayerNorm, softmax and loss), or fp32 throughout"},             \
  {"bf16-stochastic", RP_OPT_BOOL, offsetof(T, bf16_stochastic), "0", 0, 0, NULL,         \
   "round the bf16 weight copies stochastically instead of to nearest"},                  \
  {"bf16-attention", RP_OPT_ENUM, RP_OPT_ENUM_FIELD(T, bf16_attention), "auto", 0, 0,      \
   "auto|on|off",                                                                         \
   "with --precision bf16 and flash attention: its QK^T, PV and backward products in "    \
   "bf16 too (vdpbf16ps, fp32 softmax) where AVX512-BF16 runs: auto where vdpbf16ps "     \
   "measures at least 1.5x the zmm FMA's multiply-add rate (not on Sapphire Rapids, "     \
   "where it is half and bf16 attention 1.3x slower), on wherever it runs, off: fp32"},   \
  {"threads", RP_OPT_INT, offsetof(T, threads), "0", 0, 1024, NULL,                       \
   "compute threads per rank (0: the cores this process may use, divided among local "    \
   "ranks)"},                                                                             \
  {"pin", RP_OPT_BOOL, offsetof(T, pin), "1", 0, 0, NULL,                                 \
   "pin pool threads to cores when they fit"}

/* where the weights come from and how much is printed */
#define RP_ROWS_RUN(T)                                                                    \
  {"init-from", RP_OPT_STR, offsetof(T, init_from), "", 0, 0, NULL,                       \
   "start from weights: an llm.c model .bin, a ringpipe checkpoint directory or a "       \
   "Hugging Face GPT-2 folder (config.json + model.safetensors)"},                        \
  {"log-every", RP_OPT_INT, offsetof(T, log_every), "1", 1, 1000000, NULL,                \
   "print a line every N steps"},                                                         \
  {"quiet", RP_OPT_BOOL, offsetof(T, quiet), "0", 0, 0, NULL,                             \
   "print only the summary (and evaluations)"}

#endif
