/* The training options table: flags, config keys and --help in one place. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_train.h"

#define O(f) offsetof(rp_train_opts, f)

const rp_opt rp_train_opt_table[] = {
    /* model */
    {"layers", RP_OPT_INT, O(layers), "6", 1, 1024, NULL, "transformer layers (L)"},
    {"channels", RP_OPT_INT, O(channels), "384", 8, 16384, NULL, "model width (C)"},
    {"heads", RP_OPT_INT, O(heads), "6", 1, 1024, NULL, "attention heads (NH); must divide channels"},
    {"seq", RP_OPT_INT, O(seq), "256", 1, 1048576, NULL, "sequence length (T)"},
    {"vocab", RP_OPT_INT, O(vocab), "256", 2, 16777216, NULL,
     "vocabulary size (256 for the byte-level tokenizer; padded to a multiple of 64 inside)"},
    /* batch */
    {"batch", RP_OPT_INT, O(batch), "4", 1, 65536, NULL, "sequences per micro-batch (B)"},
    {"microbatches", RP_OPT_INT, O(microbatches), "1", 1, 65536, NULL,
     "micro-batches per step (gradient accumulation; pipeline micro-batches m)"},
    {"steps", RP_OPT_INT, O(steps), "100", 0, 100000000, NULL, "optimizer steps to run"},
    /* optimizer */
    {"lr", RP_OPT_FLOAT, O(lr), "1e-3", 0, 10, NULL, "peak learning rate"},
    {"min-lr", RP_OPT_FLOAT, O(min_lr), "1e-4", 0, 10, NULL, "final learning rate of the cosine schedule"},
    {"warmup", RP_OPT_INT, O(warmup), "20", 0, 100000000, NULL, "linear warmup steps"},
    {"lr-schedule", RP_OPT_CHOICE, O(lr_schedule), "cosine", 0, 0, "cosine|constant",
     "cosine (warmup then decay to min-lr) or constant (lr every step, no warmup)"},
    {"weight-decay", RP_OPT_FLOAT, O(weight_decay), "0.1", 0, 10, NULL,
     "AdamW decoupled weight decay, applied to matrices only"},
    {"beta1", RP_OPT_FLOAT, O(beta1), "0.9", 0, 0.999999, NULL, "AdamW beta1"},
    {"beta2", RP_OPT_FLOAT, O(beta2), "0.95", 0, 0.999999, NULL, "AdamW beta2"},
    {"eps", RP_OPT_FLOAT, O(eps), "1e-8", 0, 1, NULL, "AdamW epsilon"},
    {"grad-clip", RP_OPT_FLOAT, O(grad_clip), "1.0", 0, 1e30, NULL,
     "clip the global gradient norm to this value (0: no clipping)"},
    /* data */
    {"data", RP_OPT_STR, O(data), "builtin", 0, 0, NULL,
     "directory with *train*.bin / *val*.bin token shards (llm.c format), or 'builtin' "
     "for the embedded Shakespeare excerpt"},
    {"file-order", RP_OPT_BOOL, O(file_order), "0", 0, 0, NULL,
     "read batches in plain file order like llm.c (batch i = tokens i*B*T..) instead of shuffled"},
    {"seed", RP_OPT_INT, O(seed), "1337", 0, 2147483647, NULL, "seed for initialisation, data order and sampling"},
    /* run */
    {"out", RP_OPT_STR, O(out), "runs/default", 0, 0, NULL,
     "output directory: metrics.jsonl, checkpoints (created if missing)"},
    {"resume", RP_OPT_STR, O(resume), "", 0, 0, NULL,
     "checkpoint directory to resume from (continues bitwise identically), or 'auto': the "
     "newest complete checkpoint in --out (a fresh start when there is none)"},
    {"init-from", RP_OPT_STR, O(init_from), "", 0, 0, NULL,
     "start from weights: an llm.c model .bin or a ringpipe checkpoint directory"},
    {"attention", RP_OPT_CHOICE, O(attention), "flash", 0, 0, "naive|flash",
     "attention kernel: naive (O(T^2) reference) or flash (tiled)"},
    {"gemm", RP_OPT_CHOICE, O(gemm), "auto", 0, 0, "auto|blas|split",
     "how GEMMs use the threads: blas (OpenBLAS threads), split (pool threads each run "
     "single-threaded sgemm on a slice), auto (the measured faster default)"},
    {"threads", RP_OPT_INT, O(threads), "0", 0, 1024, NULL,
     "compute threads per rank (0: the cores this process may use, divided among local ranks)"},
    {"pin", RP_OPT_BOOL, O(pin), "1", 0, 0, NULL, "pin pool threads to cores when they fit"},
    {"log-every", RP_OPT_INT, O(log_every), "1", 1, 1000000, NULL, "print a line every N steps"},
    {"eval-every", RP_OPT_INT, O(eval_every), "25", 0, 100000000, NULL,
     "validation loss every N steps (0: only at the end)"},
    {"eval-batches", RP_OPT_INT, O(eval_batches), "8", 1, 1000000, NULL,
     "validation windows of --batch sequences: the same windows in every layout"},
    {"ckpt-every", RP_OPT_INT, O(ckpt_every), "0", 0, 100000000, NULL,
     "save a checkpoint every N steps into OUT/ckpt (OUT/ckpt-NNNNNN with --keep-ckpts; 0: "
     "only at the end)"},
    {"keep-ckpts", RP_OPT_INT, O(keep_ckpts), "0", 0, 1000000, NULL,
     "keep the last K checkpoints as OUT/ckpt-NNNNNN (step-numbered) with OUT/ckpt a "
     "symlink to the newest; 0: one checkpoint, OUT/ckpt, replaced at each save"},
    {"sample-tokens", RP_OPT_INT, O(sample_tokens), "120", 0, 100000, NULL,
     "tokens to sample at the end of training (0: none)"},
    {"stop-after", RP_OPT_INT, O(stop_after), "0", 0, 100000000, NULL,
     "stop after this many steps in this run (checkpoint, then exit; resume later with "
     "--resume OUT/ckpt); 0: run to --steps"},
    {"measure-peak", RP_OPT_BOOL, O(measure_peak), "1", 0, 0, NULL,
     "time the model's GEMM shapes at start-up to report MFU"},
    {"quiet", RP_OPT_BOOL, O(quiet), "0", 0, 0, NULL, "print only the summary"},
    /* parallelism */
    {"pp", RP_OPT_INT, O(pp), "1", 1, 4096, NULL, "pipeline-parallel stages"},
    {"cp", RP_OPT_INT, O(cp), "1", 1, 4096, NULL, "context-parallel ranks"},
    {"tp", RP_OPT_INT, O(tp), "1", 1, 4096, NULL,
     "tensor-parallel ranks (Megatron: heads, MLP features and the vocabulary split over "
     "them; must divide --heads and the padded vocabulary)"},
    {"sp", RP_OPT_BOOL, O(sp), "0", 0, 0, NULL,
     "sequence parallelism on top of --tp (Megatron): LayerNorms, residual adds and the "
     "embedding output on 1/tp of each micro-batch's rows, all-gather before and "
     "reduce-scatter after the tensor-parallel blocks; needs --seq / --cp divisible by --tp"},
    {"tp-overlap", RP_OPT_BOOL, O(tp_overlap), "1", 0, 0, NULL,
     "with --sp: the all-gathers before the forward's column-parallel and the backward's "
     "row-parallel GEMMs and the reduce-scatter after the forward's row-parallel GEMMs run "
     "as rings whose next block travels while the GEMM works on the block at hand (off: "
     "the blocking collectives; the baseline for the exposed-communication report)"},
    {"precision", RP_OPT_CHOICE, O(precision), "fp32", 0, 0, "fp32|bf16",
     "matmul precision: bf16 weights and activations with fp32 accumulation (fp32 master "
     "weights, AdamW state, LayerNorm, softmax and loss), or fp32 throughout"},
    {"bf16-stochastic", RP_OPT_BOOL, O(bf16_stochastic), "0", 0, 0, NULL,
     "round the bf16 weight copies stochastically instead of to nearest"},
    {"recompute", RP_OPT_CHOICE, O(recompute), "none", 0, 0, "none|selective|full",
     "activation recomputation: selective recomputes the GELU output and O(T^2) attention "
     "probabilities in backward, full keeps only each layer's output and recomputes the "
     "layer (gradients are bitwise unchanged)"},
    {"zero", RP_OPT_INT, O(zero), "0", 0, 1, NULL,
     "ZeRO stage: 1 shards AdamW state over the data-parallel replicas (reduce-scatter "
     "gradients, all-gather parameters); 0 keeps it replicated"},
    {"bucket-mb", RP_OPT_FLOAT, O(bucket_mb), "4", 0.001, 4096, NULL,
     "gradient bucket size in MiB for the data-parallel reduction"},
    {"dp-overlap", RP_OPT_BOOL, O(dp_overlap), "1", 0, 0, NULL,
     "launch each bucket's reduction as soon as its layers finish backward (off: all "
     "after backward, to measure what overlap hides)"},
    {"cp-impl", RP_OPT_CHOICE, O(cp_impl), "ring", 0, 0, "ring|ulysses",
     "context-parallel attention: ring (K/V blocks around the ring) or ulysses (all-to-all "
     "to head shards; needs heads divisible by --cp)"},
    {"cp-layout", RP_OPT_CHOICE, O(cp_layout), "zigzag", 0, 0, "zigzag|contiguous",
     "how a sequence is split over --cp ranks: zigzag (rank r holds chunks r and 2P-1-r of "
     "2P: balanced causal work) or contiguous (shows the imbalance)"},
    {"cp-overlap", RP_OPT_BOOL, O(cp_overlap), "1", 0, 0, NULL,
     "ring attention: post the next K/V transfer before computing the current block"},
    {"schedule", RP_OPT_STR, O(schedule), "1f1b", 0, 0, NULL,
     "pipeline schedule: naive|gpipe|1f1b|interleaved|zb-h1, or a schedule CSV file"},
    {"vpp", RP_OPT_INT, O(vpp), "1", 1, 64, NULL,
     "model chunks per pipeline rank (virtual stages; 2+ with --schedule interleaved)"},
    {"pp-layers", RP_OPT_STR, O(pp_layers), "", 0, 0, NULL,
     "layers per stage, e.g. 3,3,2 (pp x vpp numbers summing to --layers; default: even split)"},
    {"emulate-compute", RP_OPT_STR, O(emulate), "", 0, 0, NULL,
     "tF,tB,tW in milliseconds: pipeline actions sleep this long (per rank's share) instead "
     "of computing, communication stays real; for schedule experiments with more ranks than "
     "cores (losses are then meaningless)"},
    {"comm-timeout", RP_OPT_FLOAT, O(comm_timeout), "600", 0, 1e9, NULL,
     "seconds a rank may wait on another rank in a step before the job is aborted with a "
     "message naming the action, the peer and the step (exit status 3); 0: wait forever"},
    {"trace", RP_OPT_STR, O(trace), "", 0, 0, NULL,
     "write a Chrome trace JSON of the last step's pipeline timeline to this file"},
};
const int rp_train_opt_count = sizeof rp_train_opt_table / sizeof rp_train_opt_table[0];

rp_status rp_train_opts_check(const rp_train_opts *o) {
  if (o->channels % o->heads != 0)
    return rp_err(RP_EINVAL, "--heads %d does not divide --channels %d; choose heads that "
                  "divide channels", o->heads, o->channels);
  if (o->pp > o->layers)
    return rp_err(RP_EINVAL, "--pp %d stages need at least %d layers (--layers %d)", o->pp,
                  o->pp, o->layers);
  if (o->min_lr > o->lr && strcmp(o->lr_schedule, "cosine") == 0)
    return rp_err(RP_EINVAL, "--min-lr %g is above --lr %g; use a min-lr <= lr", o->min_lr,
                  o->lr);
  if (o->pp * o->vpp > o->layers)
    return rp_err(RP_EINVAL, "--pp %d x --vpp %d = %d stages need at least that many layers "
                  "(--layers %d)", o->pp, o->vpp, o->pp * o->vpp, o->layers);
  if (o->pp == 1 && o->vpp > 1)
    return rp_err(RP_EINVAL, "--vpp %d needs pipeline parallelism (--pp 2 or more)", o->vpp);
  if (o->tp > 1) {
    rp_gpt_config c = {.L = o->layers, .C = o->channels, .NH = o->heads, .T = o->seq,
                       .V = o->vocab, .Vp = rp_pad_vocab(o->vocab)};
    RP_TRY(rp_gpt_config_check_tp(&c, o->tp));
    if (o->cp > 1 && strcmp(o->cp_impl, "ulysses") == 0 && (o->heads / o->tp) % o->cp != 0)
      return rp_err(RP_EINVAL, "--cp-impl ulysses splits each tensor-parallel rank's %d heads "
                    "(--heads %d / --tp %d) over --cp %d, which does not divide them; use "
                    "--cp-impl ring", o->heads / o->tp, o->heads, o->tp, o->cp);
  }
  if (o->sp && o->tp < 2)
    return rp_err(RP_EINVAL, "--sp shards what tensor parallelism replicates: it needs --tp 2 "
                  "or more (got --tp %d)", o->tp);
  if (o->sp && (o->seq / o->cp) % o->tp != 0)
    return rp_err(RP_EINVAL, "--sp splits each rank's %d positions (--seq %d / --cp %d) over "
                  "--tp %d, which does not divide them; use a --seq that is a multiple of %d",
                  o->seq / o->cp, o->seq, o->cp, o->tp, o->cp * o->tp);
  if (o->emulate[0]) {
    double f, b, w;
    if (sscanf(o->emulate, "%lf,%lf,%lf", &f, &b, &w) != 3 || f <= 0 || b <= 0 || w < 0 || w >= b)
      return rp_err(RP_EINVAL, "--emulate-compute '%s' must be tF,tB,tW in ms with tF, tB > 0 "
                    "and 0 <= tW < tB (e.g. 10,20,10)", o->emulate);
    if (o->pp < 2)
      return rp_err(RP_EINVAL, "--emulate-compute needs pipeline parallelism (--pp 2 or more)");
  }
  return RP_OK;
}
