/* The whole training job: step loop with progress lines, validation, metrics
 * JSONL, checkpoints and a closing sample. Only world rank 0 prints and writes. */
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_train.h"
#include "train_internal.h"

static void format_eta(char *buf, size_t n, double seconds) {
  int s = (int)(seconds + 0.5);
  if (s >= 3600)
    snprintf(buf, n, "%dh%02dm", s / 3600, s / 60 % 60);
  else
    snprintf(buf, n, "%dm%02ds", s / 60, s % 60);
}

static void print_banner(const rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  printf("ringpipe train: L=%d C=%d NH=%d T=%d V=%d (padded %d), %.2fM parameters\n",
         t->cfg.L, t->cfg.C, t->cfg.NH, t->cfg.T, t->cfg.V, t->cfg.Vp,
         rp_gpt_num_params(&t->cfg) / 1e6);
  printf("  batch %d x %d micro-batches x dp %d = %d sequences/step, %d steps, attention %s\n",
         o->batch, o->microbatches, t->grid.dp, o->batch * o->microbatches * t->grid.dp,
         o->steps, t->exec.attn->name);
  if (t->grid.cp > 1)
    printf("  context parallel: %s attention, %s layout, %d of %d tokens per rank\n",
           o->cp_impl, o->cp_layout, t->T_local, o->seq);
  if (t->bf16.n)
    printf("  precision: bf16 matmuls (fp32 accumulation, fp32 master weights and AdamW)%s\n",
           o->bf16_stochastic ? ", stochastic rounding of the weight copies" : "");
  printf("  ranks %d (dp %d x pp %d x cp %d), %d threads/rank, gemm mode %s, data %s\n",
         t->grid.world_size, t->grid.dp, t->grid.pp, t->grid.cp, rp_pool_size(t->pool),
         rp_gemm_get_mode() == RP_GEMM_POOL_SPLIT ? "split" : "blas", t->data_dir);
  if (o->emulate[0])
    printf("  EMULATED COMPUTE: pipeline actions sleep (tF,tB,tW = %s ms per rank), "
           "communication is real; losses are not meaningful\n", o->emulate);
  if (t->grid.pp > 1)
    printf("  pipeline: schedule %s, %d stages of %s layers\n", t->sched->name,
           t->grid.pp * o->vpp, o->pp_layers[0] ? o->pp_layers : "evenly split");
  if (t->gemm_peak > 0)
    printf("  measured sgemm peak on the model's shapes: %.1f GFLOP/s (OpenBLAS %s kernels; "
           "the MFU denominator)\n", t->gemm_peak / 1e9, rp_blas_core());
  if (rp_blas_advice()) printf("  note: %s\n", rp_blas_advice());
  {
    char isa[512];
    rp_isa_kernel_summary(isa, sizeof isa);
    printf("  instruction sets: %s\n", isa);
  }
  {
    /* One layer's activations per micro-batch, measured from the layout against
     * the formula: 16 N C + 4 N floats + the attention's saved state S (none);
     * minus the GELU output 4 N C and S when S >= N C (selective); only the layer
     * output N C (full; one shared layer of scratch per chunk is extra). */
    const rp_chunk *m = &t->chunks[0];
    rp_chunk no_layers = *m;
    no_layers.spec.num_layers = 0;
    int B = o->batch, T = t->T_local, nl = m->spec.num_layers;
    double meas = nl ? (double)(rp_acts_bytes(m, t->exec.attn, B, T) -
                                rp_acts_bytes(&no_layers, t->exec.attn, B, T)) / nl : 0;
    double N = (double)B * T, C = t->cfg.C;
    double S = (double)t->exec.attn->saved_floats(t->exec.attn, B, T, t->cfg.C, t->cfg.NH);
    double f = m->recompute == RP_RECOMPUTE_FULL ? N * C
             : m->recompute == RP_RECOMPUTE_SELECTIVE ? 12 * N * C + 4 * N + (S >= N * C ? 0 : S)
                                                      : 16 * N * C + 4 * N + S;
    printf("  activations per layer per micro-batch: %.3f MiB measured, %.3f MiB formula "
           "(recompute %s)\n", meas / 1048576.0, 4 * f / 1048576.0, o->recompute);
  }
  {
    /* AdamW keeps m and v in fp32: 8 bytes per parameter of this rank's chunks,
     * divided over the replicas under ZeRO-1 */
    size_t mine = 0;
    for (int c = 0; c < t->nchunks; c++) mine += t->chunks[c].num_params;
    int rep = t->grid.dp * t->grid.cp;
    printf("  optimizer state on rank 0: %.2f MiB (formula 8 B x %zu params%s = %.2f MiB)\n",
           rp_dp_optim_floats(t->dp) * 4.0 / 1048576.0, mine,
           o->zero && rep > 1 ? " / replicas" : "",
           8.0 * mine / (o->zero ? rep : 1) / 1048576.0);
  }
  fflush(stdout);
}

/* Samples from the whole model: the rank's own chunk, or (pipelined) the
 * checkpoint just written, which holds every stage. */
static void print_sample(rp_trainer *t, const char *ckpt_dir) {
  int n = t->o.sample_tokens;
  int32_t prompt[1] = {'\n'};
  static int32_t out[100000];
  if (n > (int)(sizeof out / sizeof *out)) n = sizeof out / sizeof *out;
  rp_chunk whole;
  const rp_chunk *m = &t->chunks[0];
  if (t->grid.pp > 1) {
    if (rp_chunk_init(&whole, &t->cfg, &(rp_stage_spec){0, t->cfg.L, 1, 1}) != RP_OK) return;
    if (rp_load_weights(&whole, ckpt_dir) != RP_OK) {
      rp_chunk_free(&whole);
      return;
    }
    m = &whole;
  }
  /* rank 0 alone: the local attention kernel, never the collective cp one */
  rp_exec x = {.pool = t->pool, .attn = t->local_attn};
  rp_status s = rp_generate(m, &x, prompt, 1, out, n, 0.8f, 40, &t->sample_rng);
  if (t->grid.pp > 1) rp_chunk_free(&whole);
  if (s != RP_OK) return;
  printf("sample (temperature 0.8, top-k 40):\n----\n");
  for (int i = 0; i < n; i++) {
    int c = out[i];
    if (t->cfg.V == 256 && (c == '\n' || (c >= 32 && c < 127)))
      putchar(c);
    else if (t->cfg.V == 256)
      printf("\\x%02x", c);
    else
      printf("<%d>", c);
  }
  printf("\n----\n");
}

rp_status rp_trainer_run(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  int root = t->grid.world_rank == 0, talk = root && !o->quiet;
  FILE *metrics = NULL;
  if (root) {
    char path[RP_OPT_STRLEN + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", o->out);
    metrics = fopen(path, t->step > 0 ? "a" : "w");
    if (!metrics) return rp_err(RP_EIO, "cannot write %s; pass a writable --out", path);
  }
  if (talk) print_banner(t);
  double t_start = rp_now(), last_loss = 0, val = -1;
  int first = t->step;
  rp_mem_reset_peaks();
  int last = o->stop_after > 0 && first + o->stop_after < o->steps ? first + o->stop_after
                                                                   : o->steps;
  while (t->step < last) {
    rp_step_stats st;
    RP_TRY(rp_trainer_step(t, &st));
    last_loss = st.loss;
    int s = t->step;
    if (root) {
      fprintf(metrics,
              "{\"step\":%d,\"loss\":%.17g,\"lr\":%.6g,\"grad_norm\":%.6f,\"seconds\":%.6f,"
              "\"tokens_per_s\":%.1f,\"mfu\":%.4f}\n",
              s, st.loss, st.lr, st.grad_norm, st.seconds, st.tokens_per_s, st.mfu);
      fflush(metrics);
    }
    if (talk && (s % o->log_every == 0 || s == o->steps || s == first + 1)) {
      char eta[32];
      double per = (rp_now() - t_start) / (s - first);
      format_eta(eta, sizeof eta, per * (o->steps - s));
      printf("step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %7.0f tok/s | MFU %5.1f%% | "
             "ETA %s\n",
             s, o->steps, st.loss, st.lr, st.grad_norm, st.tokens_per_s, 100 * st.mfu, eta);
      fflush(stdout);
    }
    if ((o->eval_every > 0 && s % o->eval_every == 0) || s == last) {
      RP_TRY(rp_trainer_eval(t, o->eval_batches, &val));
      if (root) {
        fprintf(metrics, "{\"step\":%d,\"val_loss\":%.17g}\n", s, val);
        fflush(metrics);
      }
      if (talk) printf("step %5d/%d | val loss %.4f\n", s, o->steps, val);
    }
    if (o->ckpt_every > 0 && s % o->ckpt_every == 0 && s != last) {
      char dir[RP_OPT_STRLEN + 16];
      snprintf(dir, sizeof dir, "%s/ckpt", o->out);
      RP_TRY(rp_trainer_save(t, dir));
      if (talk) printf("step %5d/%d | saved checkpoint %s\n", s, o->steps, dir);
    }
  }
  if (root && t->grid.dp * t->grid.cp > 1 && last > first) {
    rp_dp_stats ds = rp_dp_last_stats(t->dp);
    printf("data parallel (last step): %d buckets, %s, reduction %.2f ms from first launch, "
           "%.2f ms exposed after backward (overlap %s)\n", ds.buckets,
           o->zero ? "ZeRO-1 reduce-scatter + all-gather" : "all-reduce", ds.reduce_s * 1e3,
           ds.exposed_s * 1e3, o->dp_overlap ? "on" : "off");
  }
  if (t->pipe && last > first && t->grid.dp_rank == 0 && t->grid.cp_rank == 0)
    RP_TRY(rp_pipeline_report(t, root ? metrics : NULL));
  if (last > first) {
    char dir[RP_OPT_STRLEN + 16];
    snprintf(dir, sizeof dir, "%s/ckpt", o->out);
    RP_TRY(rp_trainer_save(t, dir));
    if (talk) printf("saved checkpoint %s (step %d)\n", dir, t->step);
  }
  if (root) {
    char mem[512];
    rp_mem_report(mem, sizeof mem);
    double secs = rp_now() - t_start;
    printf("done: %d steps in %.1f s, final loss %.4f, val loss %.4f\n", t->step - first, secs,
           last_loss, val);
    printf("peak memory (rank 0): %s\n", mem);
    if (last < o->steps)
      printf("stopped at step %d of %d (--stop-after); continue with --resume %s/ckpt\n",
             t->step, o->steps, o->out);
    if (o->sample_tokens > 0 && !o->quiet) {
      char dir[RP_OPT_STRLEN + 16];
      snprintf(dir, sizeof dir, "%s/ckpt", o->out);
      print_sample(t, dir);
    }
    fclose(metrics);
  }
  return RP_OK;
}
