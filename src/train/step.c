/* One optimizer step: micro-batches forward and backward (a local loop, or the
 * pipeline schedule when pp > 1), gradient sync over pipeline neighbours and
 * data-parallel replicas, global-norm clipping, AdamW. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_stop.h"
#include "ringpipe/rp_tp.h"
#include "ringpipe/rp_train.h"
#include "ringpipe/rp_wait.h"
#include "train_internal.h"

/* Micro-batch mb of the step from the loader; every context-parallel rank
 * reads the same sequences and keeps its own rows. */
rp_status rp_trainer_load_batch(rp_trainer *t, rp_loader *l, int mb) {
  size_t full = (size_t)t->o.batch * t->o.seq, local = (size_t)t->o.batch * t->T_local;
  int32_t *tok = t->full_tokens + mb * full, *tgt = t->full_targets + mb * full;
  if (t->o.pack) {
    /* positions restart per document; under cp every rank places the rows alike
     * and keeps its own (a document the layout cannot place: status 2) */
    rp_docs *d = &t->docs[mb];
    RP_TRY(rp_loader_next_packed(l, tok, tgt, d));
    if (t->grid.cp == 1) {
      rp_docs_positions(d, t->batch_pos + mb * local);
      memcpy(t->batch_tokens + mb * local, tok, local * sizeof(int32_t));
      memcpy(t->batch_targets + mb * local, tgt, local * sizeof(int32_t));
      return RP_OK;
    }
    RP_TRY(rp_cp_docs_place(d, t->cp_layout, t->cp_place, t->grid.cp));
    rp_cp_docs_positions(t->batch_pos + mb * local, d, t->grid.cp_rank);
    rp_cp_docs_shard(t->batch_tokens + mb * local, tok, sizeof(int32_t), d, t->grid.cp_rank);
    rp_cp_docs_shard(t->batch_targets + mb * local, tgt, sizeof(int32_t), d, t->grid.cp_rank);
    return RP_OK;
  } else {
    RP_TRY(rp_loader_next(l, tok, tgt));
  }
  rp_cp_layout layout = t->cp_layout;
  RP_TRY(rp_cp_shard_tokens(t->batch_tokens + mb * local, tok, t->o.batch, layout, t->o.seq,
                            t->grid.cp, t->grid.cp_rank));
  return rp_cp_shard_tokens(t->batch_targets + mb * local, tgt, t->o.batch, layout, t->o.seq,
                            t->grid.cp, t->grid.cp_rank);
}

static void load_microbatch(rp_trainer *t, int mb) {
  size_t N = (size_t)t->o.batch * t->T_local;
  memcpy(t->acts.tokens, t->batch_tokens + mb * N, N * sizeof(int32_t));
  memcpy(t->acts.targets, t->batch_targets + mb * N, N * sizeof(int32_t));
  memcpy(t->acts.pos, t->batch_pos + mb * N, N * sizeof(int32_t));
  t->acts.docs = t->o.pack ? &t->docs[mb] : NULL;
  t->acts.attn.backend = NULL;   /* a new batch: the backend prepares (checks) it again */
}

/* Global gradient norm squared: every parameter once (the tied wte's second
 * copy is skipped), summed over pipeline stages and, under ZeRO-1, over the
 * replicas' shards. */
double rp_grad_sumsq(rp_trainer *t) {
  double s;
  RP_PROF(RP_PROF_OPT_GRAD_NORM, s = rp_dp_local_sumsq(t->dp, 0));
  if (t->o.zero && t->grid.dp * t->grid.cp > 1)
    RP_PROF(RP_PROF_COMM,
            rp_allreduce_watched(&s, 1, MPI_DOUBLE, MPI_SUM, t->grid.dpcp_comm,
                                 "all-reduce of the gradient norm over the replicas"));
  if (t->grid.pp > 1)
    RP_PROF(RP_PROF_COMM,
            rp_allreduce_watched(&s, 1, MPI_DOUBLE, MPI_SUM, t->grid.pp_comm,
                                 "all-reduce of the gradient norm over the pipeline"));
  if (t->grid.tp > 1)  /* the shards, and the replicated tensors once (tp rank 0) */
    RP_PROF(RP_PROF_COMM,
            rp_allreduce_watched(&s, 1, MPI_DOUBLE, MPI_SUM, t->grid.tp_comm,
                                 "all-reduce of the gradient norm over the tensor-parallel group"));
  return s;
}

void rp_optimizer_step(rp_trainer *t, float lr, float grad_scale) {
  rp_adamw_hparams h = {.lr = lr, .beta1 = t->o.beta1, .beta2 = t->o.beta2, .eps = t->o.eps,
                        .weight_decay = t->o.weight_decay};
  t->bf16_copies_fresh = rp_dp_adamw(t->dp, &h, grad_scale, t->step + 1);
}

static float current_lr(const rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  if (o->lr_schedule == RP_LR_CONSTANT) return o->lr;
  return rp_lr_cosine(t->step, o->warmup, o->steps, o->lr, o->min_lr);
}

/* Forward and backward over the step's micro-batches; returns the loss sum
 * (on every rank). */
static rp_status run_microbatches(rp_trainer *t, float dscale, double *loss_sum) {
  *loss_sum = 0;
  if (t->grid.pp > 1) {
    rp_pipeline_set_docs(t->pipe, t->o.pack ? t->docs : NULL);
    RP_TRY(rp_pipeline_run(t->pipe, t->batch_tokens, t->batch_targets, t->batch_pos, dscale,
                           loss_sum));
    return RP_OK; /* its sum over the pipeline: global_loss */
  }
  for (int mb = 0; mb < t->o.microbatches; mb++) {
    load_microbatch(t, mb);
    *loss_sum += rp_engine_forward_backward(t, &t->acts, NULL, dscale);
  }
  return RP_OK;
}

/* The step's loss summed over the pipeline and the replicas. */
static void global_loss(rp_trainer *t, double *loss_sum) {
  if (t->grid.pp > 1)
    RP_PROF(RP_PROF_COMM,
            rp_allreduce_watched(loss_sum, 1, MPI_DOUBLE, MPI_SUM, t->grid.pp_comm,
                                 "all-reduce of the loss over the pipeline"));
  if (t->grid.dp * t->grid.cp > 1)
    RP_PROF(RP_PROF_COMM,
            rp_allreduce_watched(loss_sum, 1, MPI_DOUBLE, MPI_SUM, t->grid.dpcp_comm,
                                 "all-reduce of the loss over the replicas"));
}

rp_status rp_train_agree(rp_trainer *t, rp_status local, const char *what, int *stop) {
  int v[2] = {-(int)local, stop ? rp_stop_requested() : 0};  /* statuses are <= 0 */
  rp_allreduce_watched(v, 2, MPI_INT, MPI_MAX, t->grid.world, what);
  if (stop) *stop = v[1];
  return v[0] ? rp_grid_agree(t->grid.world, local) : RP_OK;
}

rp_status rp_trainer_step(rp_trainer *t, rp_step_stats *st) {
  double t0 = rp_now();
  const rp_train_opts *o = &t->o;
  int m = o->microbatches, N = o->batch * t->T_local;
  rp_wait_set_step(t->step + 1);
  if (rp_prof_enabled) rp_prof_step_begin();
  if (t->tp) rp_tp_begin_step(t->tp);  /* the summary reports the last step's */
  rp_status loaded = RP_OK;
  for (int mb = 0; mb < m && loaded == RP_OK; mb++)
    RP_PROF(RP_PROF_DATA, loaded = rp_trainer_load_batch(t, t->train, mb));
  /* a shard that fails to read on one rank stops every rank with its message */
  rp_status agreed;
  RP_PROF(RP_PROF_COMM, agreed = rp_train_agree(t, loaded, "agreement on the step's data", NULL));
  RP_TRY(agreed);
  /* The loss is the mean over every valid target of the global batch, whatever
   * the layout, so each micro-batch's gradient is scaled by 1 / global count. */
  long valid = 0;
  for (long i = 0; i < (long)m * N; i++) valid += t->batch_targets[i] >= 0;
  if (t->grid.dp * t->grid.cp > 1)
    RP_PROF(RP_PROF_COMM,
            rp_allreduce_watched(&valid, 1, MPI_LONG, MPI_SUM, t->grid.dpcp_comm,
                                 "all-reduce of the target count over the replicas"));
  float dscale = valid > 0 ? 1.0f / (float)valid : 0.0f;

  double loss_sum = 0;
  rp_engine_begin_step(t, m);
  if (t->grid.pp == 1) rp_test_hang_point();
  RP_TRY(run_microbatches(t, dscale, &loss_sum));
  float lr = current_lr(t);
  /* --post-validate: the update goes first, the global checks after it */
  int speculated = o->post_validate != RP_POSTVAL_OFF;
  if (speculated) {
    rp_engine_weights_may_change(t);
    RP_TRY(rp_dp_finish(t->dp));
    RP_TRY(rp_post_validation_speculate(t, lr));
  }
  double sumsq;
  if (speculated) sumsq = rp_grad_sumsq(t);
  else RP_TRY(rp_engine_reduce(t, &sumsq));
  global_loss(t, &loss_sum);
  double norm = sqrt(sumsq);
  int finite = isfinite(loss_sum) && isfinite(norm);
  float scale = finite ? rp_engine_clip_scale(t, norm) : 1.0f;
  if (speculated) rp_post_validation_check(t, lr, finite, scale);
  /* Both are global sums, the same on every rank, so every rank stops here
   * together, before the update (or with it rolled back): the weights and
   * AdamW state stay finite. */
  if (!finite) {
    t->diverged = 1;
    return rp_err(RP_EINVAL, "step %d: the loss is %g and the gradient norm %g: training "
                  "diverged; nothing was saved and the last checkpoint is left as it was; "
                  "resume from it with a lower --lr (or --grad-clip)",
                  t->step + 1, loss_sum / (valid ? valid : 1), norm);
  }
  if (speculated) rp_engine_finish_update(t);
  else rp_engine_apply(t, lr, scale);
  if (t->tp) rp_tp_end_step(t->tp);

  double dt = rp_now() - t0;
  if (rp_prof_enabled) rp_prof_step_end();
  double tokens = (double)m * o->batch * o->seq * t->grid.dp;
  st->loss = valid ? loss_sum / valid : 0.0;
  st->grad_norm = norm;
  st->lr = lr;
  st->seconds = dt;
  st->valid_tokens = (int)valid;
  st->tokens_per_s = tokens / dt;
  double flops = rp_gpt_flops_per_token(&t->cfg, o->seq) * tokens / t->grid.world_size;
  /* One denominator for the whole run, measured once at start-up, so that the
   * steps of a run compare; a step above 1.0 says the peak was measured while
   * the machine was busier, and is reported as it is. */
  st->mfu = t->gemm_peak > 0 ? flops / dt / t->gemm_peak : -1.0;
  return RP_OK;
}

/* A step cannot run the model faster than its GEMMs alone run: an MFU above 1
 * says the start-up peak read low (a neighbour on a shared VM took the cores'
 * FMA units while it was measured), and a bare "101.1%" reads like a bug. */
int rp_print_mfu_above_note(FILE *f, double model_flops_per_s, double gemm_peak) {
  if (gemm_peak <= 0 || !(model_flops_per_s > gemm_peak)) return 0;
  fprintf(f, "  note: MFU above 100%%: the model's FLOPs ran at %.1f GFLOP/s, faster than the GEMM "
         "peak measured once at start-up (%.1f GFLOP/s), which a busier machine held down then; "
         "every step's MFU keeps that one denominator so that the steps compare "
         "(`ringpipe bench gemm` measures the peak again)\n",
         model_flops_per_s / 1e9, gemm_peak / 1e9);
  return 1;
}

/* The model's FLOP/s against the machine's own multiply-add ceiling, the
 * fp32 FMA probe (its register-only rate times the threads): the measure
 * that does not move with how fast the GEMM peak read at start-up. At the
 * mean rate and at the median step's, which a slow stretch on a shared
 * machine moves less. */
int rp_print_fma_fraction(FILE *f, double mean_flops_per_s, double median_flops_per_s,
                          double probe_flops_per_s, const char *probe_level, int threads) {
  if (!(probe_flops_per_s > 0) || !(mean_flops_per_s > 0)) return 0;
  fprintf(f, "  model FLOP/s over the FMA probe (%s x %d threads, %.1f GFLOP/s): %.3f (mean rate)",
          probe_level, threads, probe_flops_per_s / 1e9, mean_flops_per_s / probe_flops_per_s);
  if (median_flops_per_s > 0)
    fprintf(f, ", %.3f (median step)", median_flops_per_s / probe_flops_per_s);
  fputc('\n', f);
  return 1;
}

/* The same fraction over the probe run on every thread at once (the sum of
 * their medians, `bench fma`'s figure): where one busy core turbos higher
 * than two (the Emerald Rapids VM: 0.83 of one thread's best times two), the
 * start-up peak is more than the threads can reach together, and this line
 * says how far the step is from what they do reach. */
int rp_print_fma_fraction_together(FILE *f, double mean_flops_per_s, double median_flops_per_s,
                                   double together_flops_per_s, double probe_flops_per_s,
                                   double seconds) {
  if (!(together_flops_per_s > 0) || !(probe_flops_per_s > 0) || !(mean_flops_per_s > 0))
    return 0;
  fprintf(f,
          "  model FLOP/s over the probe on all threads at once (%.0f s after the steps, the sum "
          "of their medians, %.1f GFLOP/s, %.3f of the probe above): %.3f (mean rate)",
          seconds, together_flops_per_s / 1e9, together_flops_per_s / probe_flops_per_s,
          mean_flops_per_s / together_flops_per_s);
  if (median_flops_per_s > 0)
    fprintf(f, ", %.3f (median step)", median_flops_per_s / together_flops_per_s);
  fputc('\n', f);
  return 1;
}

/* "12.3%", or "n/a" when the peak was not measured (--measure-peak=0). */
const char *rp_format_mfu(char *buf, size_t cap, double mfu) {
  if (mfu < 0) snprintf(buf, cap, "  n/a");
  else snprintf(buf, cap, "%4.1f%%", 100 * mfu);
  return buf;
}
