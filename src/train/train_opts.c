/* The training options table: flags, config keys and --help in one place. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_opt_rows.h"
#include "ringpipe/rp_train.h"

#define O(f) offsetof(rp_train_opts, f)
#define E(f) RP_OPT_ENUM_FIELD(rp_train_opts, f)  /* ENUM rows: an int-sized enum */

const rp_opt rp_train_opt_table[] = {
    /* model */
    RP_ROWS_MODEL(rp_train_opts, "6", "384", "6", "256"),
    {"vocab", RP_OPT_INT, O(vocab), "256", 2, 16777216, NULL,
     "vocabulary size (256 for the byte-level tokenizer; padded to a multiple of 64 inside)"},
    /* batch */
    {"batch", RP_OPT_INT, O(batch), "4", 1, 65536, NULL, "sequences per micro-batch (B)"},
    {"microbatches", RP_OPT_INT, O(microbatches), "1", 1, 65536, NULL,
     "micro-batches per step (gradient accumulation; pipeline micro-batches m)"},
    {"steps", RP_OPT_INT, O(steps), "100", 0, 100000000, NULL, "optimizer steps to run"},
    /* optimizer */
    RP_ROWS_ADAMW(rp_train_opts, "1e-3", "1e-4", "20", "cosine",
                  "cosine (warmup then decay to min-lr) or constant (lr every step, no warmup)",
                  "0.1"),
    {"post-validate", RP_OPT_ENUM, E(post_validate), "off", 0, 0, "off|on|always-rollback",
     "step the optimizer before the global gradient norm and loss are known, then check "
     "(clipping, NaN/Inf) and roll back the rare step that fails; always-rollback rolls back "
     "every step (a test of the rollback path); bitwise the results of off"},
    /* data */
    {"data", RP_OPT_STR, O(data), "builtin", 0, 0, NULL,
     "directory with *train*.bin / *val*.bin token shards (llm.c format), or 'builtin' "
     "for the embedded Shakespeare excerpt"},
    {"file-order", RP_OPT_BOOL, O(file_order), "0", 0, 0, NULL,
     "read batches in plain file order like llm.c (batch i = tokens i*B*T..) instead of shuffled"},
    {"pack", RP_OPT_BOOL, O(pack), "0", 0, 0, NULL,
     "pack whole documents (each shard's .docs index from `prepare --doc-sep`, or --eot) "
     "into the rows; attention and targets stay inside each document, position ids restart"},
    {"pack-align", RP_OPT_INT, O(pack_align), "0", 0, 4096, NULL,
     "--pack: pad every document to a multiple of this many tokens (0: 2 x --cp under "
     "--cp-layout doc-zigzag, else 1); give the cp run's value to a single-rank run to "
     "train on the same rows"},
    {"eot", RP_OPT_INT, O(eot), "-1", -1, 65535, NULL,
     "end-of-text token id that ends a document in shards without a .docs index (-1: none)"},
    {"seed", RP_OPT_INT, O(seed), "1337", 0, 2147483647, NULL, "seed for initialisation, data order and sampling"},
    /* run */
    {"out", RP_OPT_STR, O(out), "runs/default", 0, 0, NULL,
     "output directory: metrics.jsonl, checkpoints (created if missing)"},
    {"resume", RP_OPT_STR, O(resume), "", 0, 0, NULL,
     "checkpoint directory to resume from (continues bitwise identically), or 'auto': the "
     "newest complete checkpoint in --out (a fresh start when there is none)"},
    {"gemm", RP_OPT_ENUM, E(gemm), "auto", 0, 0, "auto|blas|split|own",
     "which GEMM runs and how it uses the threads: own (ringpipe's GEMM, its shared operand "
     "packed once by all threads; needs avx2), blas (OpenBLAS threads), split (pool threads "
     "each run single-threaded OpenBLAS sgemm on a slice), auto (own for weights up to 4 MiB "
     "and for the backward of widening weights (IC <= OC) where the ISA ceiling allows "
     "its avx512 kernel, for every weight on AMD's AVX-512 cores, else split: the "
     "measured faster default)"},
    {"weight-cache", RP_OPT_BOOL, O(weight_cache), "0", 0, 0, NULL,
     "when a step multiplies each weight more than once (--microbatches > 1, a pipeline's "
     "micro-batches, --recompute) and the own GEMM or the bf16 GEMM (--precision bf16) "
     "runs, pack each weight once per step and keep the packs for the step's later uses: bitwise the same results; costs workspace "
     "memory of twice the weights (their forward and dinp packs); measured 0.96 of the step "
     "time at --batch 1 --microbatches 4 of the default model, 0.84 with --precision bf16"},
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
    RP_ROWS_COMPUTE(rp_train_opts, "flash"),
    RP_ROWS_RUN(rp_train_opts),
    {"profile", RP_OPT_BOOL, O(profile), "0", 0, 0, NULL,
     "time every kernel of the steps after the first and print at the end where the step's "
     "time goes (GEMM, attention, layernorm, GELU, optimizer, copies, comm, idle) with each "
     "part's fraction of the FMA or stream peak, the 'quiet' time (each call at its fastest "
     "over the steps: what is left when other processes take nothing), the bound (the "
     "GEMMs at the better of their rates alone at start-up and after the steps, the rest at "
     "its quiet time), every kernel's forward and backward apart and every GEMM product's "
     "fraction of the FMA peak in the step beside its own alone; the parts as a figure in "
     "OUT/step_profile.svg"},
    {"tensorboard", RP_OPT_BOOL, O(tensorboard), "1", 0, 0, NULL,
     "write TensorBoard event files of every metric into OUT/tensorboard"},
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
    {"recompute", RP_OPT_ENUM, E(recompute), "none", 0, 0, "none|selective|full",
     "activation recomputation: selective recomputes the GELU output and O(T^2) attention "
     "probabilities in backward, full keeps only each layer's output and recomputes the "
     "layer (gradients are bitwise unchanged)"},
    RP_ROWS_DATA_PARALLEL(rp_train_opts),
    {"cp-impl", RP_OPT_ENUM, E(cp_impl), "ring", 0, 0, "ring|ulysses",
     "context-parallel attention: ring (K/V blocks around the ring) or ulysses (all-to-all "
     "to head shards; needs heads divisible by --cp)"},
    {"cp-layout", RP_OPT_ENUM, E(cp_layout), "zigzag", 0, 0,
     "zigzag|contiguous|doc-zigzag|balanced",
     "how a sequence is split over --cp ranks: zigzag (rank r holds chunks r and 2P-1-r of "
     "2P: balanced causal work) or contiguous (shows the imbalance); with --pack also "
     "doc-zigzag (every document split into 2P chunks, padded by --pack-align) or balanced "
     "(blocks dealt to ranks by their counted attention work, no padding)"},
    {"cp-overlap", RP_OPT_BOOL, O(cp_overlap), "1", 0, 0, NULL,
     "ring attention: post the next K/V transfer before computing the current block"},
    {"schedule", RP_OPT_STR, O(schedule), "1f1b", 0, 0, NULL,
     "pipeline schedule: naive|gpipe|1f1b|interleaved|zb-h1|zb-h2|zb-v|zb-v-half|zb-v-min|"
     "dualpipev, or a schedule CSV file"},
    {"vpp", RP_OPT_INT, O(vpp), "1", 1, 64, NULL,
     "model chunks per pipeline rank (virtual stages; 2+ with --schedule interleaved, 2 with "
     "the V schedules zb-v* and dualpipev)"},
    {"pp-layers", RP_OPT_STR, O(pp_layers), "", 0, 0, NULL,
     "layers per stage, e.g. 3,3,2 (pp x vpp numbers summing to --layers; default: even split)"},
    {"emulate-compute", RP_OPT_FLOATS, O(emulate), "", 0, 1e6, "tF,tB,tW",
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
  if (o->min_lr > o->lr && o->lr_schedule == RP_LR_COSINE)
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
    if (o->cp > 1 && o->cp_impl == RP_CP_ULYSSES && (o->heads / o->tp) % o->cp != 0)
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
  if (!o->pack && o->cp > 1 &&
      (o->cp_layout == RP_CP_SPLIT_DOC_ZIGZAG || o->cp_layout == RP_CP_SPLIT_BALANCED))
    return rp_err(RP_EINVAL, "--cp-layout %s places packed documents; add --pack or use "
                  "zigzag or contiguous",
                  o->cp_layout == RP_CP_SPLIT_BALANCED ? "balanced" : "doc-zigzag");
  if (o->emulate.n) {
    double f = o->emulate.v[0], b = o->emulate.v[1], w = o->emulate.v[2];
    if (f <= 0 || b <= 0 || w >= b)
      return rp_err(RP_EINVAL, "--emulate-compute %g,%g,%g must be tF,tB,tW in ms with tF, "
                    "tB > 0 and 0 <= tW < tB (e.g. 10,20,10)", f, b, w);
    if (o->pp < 2)
      return rp_err(RP_EINVAL, "--emulate-compute needs pipeline parallelism (--pp 2 or more)");
  }
  return RP_OK;
}
