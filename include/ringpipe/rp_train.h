/* The training loop: options, trainer state, one step, evaluation, sampling.
 * It wires the grid, the model chunk(s), the attention backend, gradient sync,
 * the optimizer, checkpoints and metrics. */
#ifndef RP_TRAIN_H
#define RP_TRAIN_H

#include <stdint.h>
#include <stdio.h>
#include "rp_cp.h"
#include "rp_dp.h"
#include "rp_flash.h"
#include "rp_pipeline.h"
#include "rp_schedule.h"
#include "rp_grid.h"
#include "rp_infer.h"
#include "rp_model.h"
#include "rp_options.h"
#include "rp_pool.h"
#include "rp_util.h"

/* --post-validate off|on|always-rollback, in that order. */
typedef enum { RP_POSTVAL_OFF = 0, RP_POSTVAL_ON, RP_POSTVAL_ALWAYS_ROLLBACK } rp_post_validate;

typedef struct {
  /* model */
  int layers, channels, heads, seq, vocab;
  /* batch */
  int batch, microbatches, steps;
  /* optimizer */
  float lr, min_lr, weight_decay, beta1, beta2, eps, grad_clip;
  int warmup;
  rp_lr_schedule lr_schedule;
  /* data */
  char data[RP_OPT_STRLEN];
  int file_order, seed, pack, pack_align, eot;
  /* run */
  char out[RP_OPT_STRLEN], resume[RP_OPT_STRLEN], init_from[RP_OPT_STRLEN];
  rp_attn_kind attention;
  rp_gemm_choice gemm;
  int threads, pin, log_every, eval_every, eval_batches, ckpt_every, sample_tokens;
  int measure_peak, quiet, stop_after, keep_ckpts, profile;
  int weight_cache;  /* keep the own GEMM's weight packs across a step's micro-batches */
  int tensorboard;  /* mirror metrics.jsonl into OUT/tensorboard */
  float comm_timeout;
  /* parallelism */
  int pp, cp, vpp, tp, sp, tp_overlap;
  char schedule[RP_OPT_STRLEN], pp_layers[RP_OPT_STRLEN], trace[RP_OPT_STRLEN];
  rp_opt_floats emulate;        /* tF,tB,tW in ms; n == 0: real compute */
  rp_cp_impl cp_impl;
  rp_cp_split cp_layout;
  int cp_overlap, zero, dp_overlap;
  rp_recompute recompute;
  rp_precision precision;
  int bf16_stochastic;
  rp_bf16_attn bf16_attention; /* flash products in bf16 too (rp_flash_config.bf16) */
  float bucket_mb;
  rp_post_validate post_validate;
} rp_train_opts;

extern const rp_opt rp_train_opt_table[];
extern const int rp_train_opt_count;

/* Checks option combinations that a single field's range cannot express. */
rp_status rp_train_opts_check(const rp_train_opts *o);

struct rp_loader;

typedef struct {
  rp_train_opts o;
  rp_grid grid;
  rp_gpt_config cfg;
  int nchunks;                  /* v model chunks on this rank (1 without pipelining) */
  rp_chunk *chunks;             /* chunk c is global stage c * pp + pp_rank */
  rp_dp *dp;                    /* gradient reduction, AdamW state (sharded under ZeRO-1) */
  rp_bf16_ctx bf16;             /* --precision bf16: bf16 copies of the parameters */
  rp_stage_spec *all_stages;    /* pp * vpp stage specs, by global stage index */
  rp_schedule *sched;    /* pipeline schedule (pp > 1) */
  rp_pipeline *pipe;
  MPI_Comm tie_comm;            /* first and last stage: the tied wte gradient */
  rp_costs emulate;             /* --emulate-compute, seconds; tF == 0: real compute */
  rp_cp_layout cp_layout;       /* --cp-layout, parsed once (contiguous when cp == 1) */
  struct rp_tp *tp;             /* --tp > 1: the tensor-parallel collectives */
  rp_cp_place cp_place;         /* --pack under cp: how packed rows are placed */
  rp_pool *pool;
  struct rp_sgemm_wcache *wcache; /* --weight-cache: attached to pool while weights hold */
  rp_exec exec;
  rp_acts acts;                 /* pp == 1: one micro-batch's activations */
  rp_layer_acts *layer_views;
  void *acts_mem;
  size_t acts_bytes;       /* size of acts_mem */
  rp_grad_ws ws;
  float *dlnf_extra;            /* pp == 1: a loss head's d loss / d lnf, batch x T x C */
  struct rp_loader *train, *val;
  int T_local;                  /* tokens of each sequence on this rank: seq / cp */
  int32_t *full_tokens, *full_targets;  /* microbatches x B x seq, as loaded */
  int32_t *batch_tokens, *batch_targets, *batch_pos;  /* microbatches x B x T_local */
  struct rp_docs_s *docs;       /* --pack: each micro-batch's documents (B x seq) */
  rp_attn_backend *cp_attn;     /* ring or Ulysses attention when cp > 1 */
  const rp_attn_backend *local_attn; /* the rank-local kernel (sampling) */
  rp_flash_config flash_cfg;    /* the run's flash settings (bf16 products or not) */
  int bf16_attn_pays;           /* rp_flash_bf16_pays on every rank (--bf16-attention auto) */
  int bf16_copies_fresh;        /* the last optimizer step wrote the bf16 copies itself */
  rp_attn_backend flash_attn;   /* flash bound to flash_cfg, when that is not automatic */
  int step;                     /* steps completed */
  double gemm_peak;             /* FLOP/s measured on the model's own GEMMs, 0 if skipped:
                                   the MFU denominator (see measure_gemm_peak) */
  double gemm_peak_bf16;        /* bf16: the bf16 GEMM's own (gemm_peak when it is the
                                   faster), else 0 */
  double fma_peak;              /* threads x one core's register-only FMA rate, 0 if skipped */
  const char *fma_what;         /* which probe: "zmm FMA" or "ymm FMA" */
  rp_rng sample_rng;
  char data_dir[RP_OPT_STRLEN + 16]; /* resolved data directory */
  int diverged;                 /* a non-finite loss, gradient norm or state stopped the run */
  struct rp_post_validation *pv; /* --post-validate: the state a rollback restores */
  int rollbacks;                /* steps whose speculative update was rolled back */
} rp_trainer;

typedef struct {
  double loss, grad_norm, seconds, tokens_per_s;
  double mfu;  /* fraction of the measured sgemm peak; -1 when not measured */
  float lr;
  int valid_tokens;
} rp_step_stats;

/* The compute threads a rank takes when --threads is 0: the cores this
 * process may run on, shared among the MPI ranks on this host. */
int rp_default_threads(void);
rp_status rp_trainer_init(rp_trainer *t, const rp_train_opts *o);

/* ---- the engine: what pre-training, SFT, GRPO and PPO share (engine.c).
 * rp_trainer_init builds it with pre-training's data, output directory and
 * resume; rp_engine_init builds only the engine (grid, model, pool, attention,
 * activations, gradient reduction with ZeRO-1 and overlapped buckets, AdamW,
 * bf16) for a caller that brings its own batches, loss and checkpoints (one
 * pipeline stage: --pp 1, --cp 1). Activations hold o->batch sequences of
 * o->seq positions; --init-from weights are loaded. */
rp_status rp_engine_init(rp_trainer *t, const rp_train_opts *o);

/* A loss head of the caller's choice: after the forward of a bound batch it
 * writes d loss / d logits over a->logits (zero rows for positions that add
 * nothing) and returns the loss it adds; a second head reading the final
 * LayerNorm output (PPO's value head) adds its gradient into dlnf [N, C]
 * (zeroed by the engine) and sets *use_dlnf. */
typedef struct {
  double (*dlogits)(void *ctx, rp_acts *a, float *dlnf, int *use_dlnf);
  void *ctx;
} rp_loss_head;

/* Zeroes the gradients and arms the data-parallel buckets for a step of
 * `microbatches` forward/backward calls on this rank. From here until
 * rp_engine_reduce (or rp_engine_weights_may_change) the weights must not
 * change: with --weight-cache the own GEMM reuses their packs. */
void rp_engine_begin_step(rp_trainer *t, int microbatches);
/* Ends that window early: the GEMM packs every weight again. */
void rp_engine_weights_may_change(rp_trainer *t);
/* The activation buffer bound for chunk m (the model, or a reference copy of
 * it) with B <= o->batch sequences of T <= o->seq positions; the caller fills
 * tokens, targets and positions. */
rp_acts *rp_engine_bind(rp_trainer *t, const rp_chunk *m, int B, int T);
/* Forward only (a reference model's log-probs, say); the loss sum. */
double rp_engine_forward(rp_trainer *t, const rp_chunk *m, rp_acts *a);
/* Forward and backward of the bound batch through the model: head NULL is the
 * language-model loss (its sum returned, gradients scaled by dscale), else the
 * head's loss; gradients accumulate and buckets launch as they fill. */
double rp_engine_forward_backward(rp_trainer *t, rp_acts *a, const rp_loss_head *head,
                                  float dscale);
/* Completes the reductions; *sumsq: the squared global gradient norm. */
rp_status rp_engine_reduce(rp_trainer *t, double *sumsq);
/* The clipping factor for a gradient norm (--grad-clip). */
float rp_engine_clip_scale(const rp_trainer *t, double norm);
/* AdamW at lr on the gradients times grad_scale (what this rank owns), the
 * ZeRO-1 all-gather, the bf16 copies; t->step counts optimizer steps. */
void rp_engine_apply(rp_trainer *t, float lr, float grad_scale);
/* The model and its full AdamW state (gathered under ZeRO-1) into dir, with
 * meta.json made of the caller's fields (a JSON object body, no braces); and
 * back (scattered). Collective; world rank 0 writes. */
rp_status rp_engine_save(rp_trainer *t, const char *dir, const char *meta_fields);
rp_status rp_engine_load(rp_trainer *t, const char *dir);
void rp_trainer_free(rp_trainer *t);
/* What --weight-cache does in this run ("on ...", or why it is not used);
 * NULL when it was not asked for. */
const char *rp_trainer_weight_cache_state(const rp_trainer *t);
/* A bf16 run's line on where its matmuls run (AMX tiles) or why bf16 has
 * little or no speed benefit on this CPU; nothing for an fp32 run. */
void rp_trainer_print_bf16_benefit(const rp_trainer *t);
rp_status rp_trainer_step(rp_trainer *t, rp_step_stats *st);
/* The run's GEMM (bf16's under --precision bf16) on the model's shapes with
 * hot operands, measured now as at start-up, in the idle activation buffer
 * (between steps only): FLOP/s, 0 when its operands cannot be had.
 * per_shape (may be NULL) gets RP_GPT_GEMM_SHAPES rates (rp_gpt_gemm_peak). */
double rp_trainer_gemm_rate_now(rp_trainer *t, struct rp_gemm_shape_rate *per_shape);
/* Print this rank's step profile (rp_step_profile.h) of the steps run while
 * rp_prof was enabled (--profile), with the peaks measured now. */
void rp_trainer_print_profile(rp_trainer *t);
rp_status rp_trainer_eval(rp_trainer *t, int batches, double *loss);
/* Runs the whole job: steps, logging, eval, checkpoints, final sample. */
rp_status rp_trainer_run(rp_trainer *t);
rp_status rp_trainer_save(rp_trainer *t, const char *dir);
/* Exit status for a failed run: 4 when training diverged (non-finite loss,
 * gradient norm or state; the last good checkpoint is left as it was), else
 * the bad-input/other mapping of the status. */
#define RP_EXIT_DIVERGED 4


/* Model shape of an llm.c file or a ringpipe checkpoint directory, written into
 * the options (*changed says whether it differed); *model_T gets its positions. */
rp_status rp_init_config_into_opts(const char *path, rp_train_opts *o, int *changed,
                                   int *model_T);

/* MFU for humans: "12.3%", or "n/a" when it was not measured. */
const char *rp_format_mfu(char *buf, size_t cap, double mfu);

/* Writes to f why an MFU reads above 100 %: the model's FLOPs ran faster
 * (model_flops_per_s) than the GEMM peak measured at start-up, which the
 * machine's load then held down. Nothing when they did not or the peak was not
 * measured. Returns 1 when it wrote the note. */
int rp_print_mfu_above_note(FILE *f, double model_flops_per_s, double gemm_peak);
/* Writes to f the model's FLOP/s as a fraction of the fp32 FMA probe
 * (probe_flops_per_s, the level's rate times the threads): at the mean rate
 * and, when median_flops_per_s > 0, at the median step's. Nothing without a
 * probe (scalar builds) or a rate. Returns 1 when it wrote the line. */
int rp_print_fma_fraction(FILE *f, double mean_flops_per_s, double median_flops_per_s,
                          double probe_flops_per_s, const char *probe_level, int threads);
/* The same rates over together_flops_per_s, the probe run on every thread at
 * once for seconds (the sum of their medians), with that rate's share of
 * probe_flops_per_s. Nothing without both rates. Returns 1 when it wrote the
 * line. */
int rp_print_fma_fraction_together(FILE *f, double mean_flops_per_s, double median_flops_per_s,
                                   double together_flops_per_s, double probe_flops_per_s,
                                   double seconds);

#endif
