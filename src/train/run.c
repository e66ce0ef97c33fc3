/* The whole training job: step loop with progress lines, validation, metrics
 * JSONL, checkpoints and a closing sample. Only world rank 0 prints and writes. */
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_step_profile.h"
#include "ringpipe/rp_report.h"
#include "ringpipe/rp_sgemm.h"
#include "ringpipe/rp_stop.h"
#include "ringpipe/rp_tb.h"
#include "ringpipe/rp_train.h"
#include "train_internal.h"

static void format_eta(char *buf, size_t n, double seconds) {
  int s = (int)(seconds + 0.5);
  if (s >= 3600)
    snprintf(buf, n, "%dh%02dm", s / 3600, s / 60 % 60);
  else
    snprintf(buf, n, "%dm%02ds", s / 60, s % 60);
}

/* The note says "slower" when the bf16 GEMM measured under this fraction of
 * the fp32 GEMM's rate: below it the difference is more than run-to-run noise
 * (under RINGPIPE_ISA=avx2 the portable widening kernel measured 0.58-0.64x
 * on the default model's shapes, and its step ran at 0.63-0.66x fp32's
 * tokens/s, 2 alternating pairs; the avx2-fma kernel that replaced it
 * 0.86-0.88x, and 0.88-0.90x in the step). */
#define BF16_SLOWER 0.9

/* Whether bf16 can be faster here, from the bf16 GEMM kernel in force and the
 * measured register-only rates of its instruction and the fp32 FMA
 * (rp_isa_peak_gflops). AMX tiles are many times the FMA's rate; vdpbf16ps on
 * Sapphire Rapids only half of it (the GEMM then widens to fp32 FMAs), and a
 * default-model step there under RINGPIPE_ISA=avx512bf16 ran at 0.93x fp32's
 * tokens/s (2 alternating pairs of bench train): the note says to prefer fp32. */
void rp_trainer_print_bf16_benefit(const rp_trainer *t) {
  if (!t->bf16.n) return;
  double f = rp_isa_peak_gflops(RP_ISA_AVX512), b = rp_isa_peak_gflops(RP_ISA_AVX512BF16);
  if (rp_bf16_kernel_active() == RP_BF16_KERNEL_AMX) {
    printf("  bf16 matmuls on AMX tiles: tdpbf16ps %.0f GFLOP/s vs fp32 FMA %.0f GFLOP/s per "
           "thread (measured); layernorm, GELU, softmax and AdamW stay fp32\n",
           rp_isa_peak_gflops(RP_ISA_AMX), f);
    return;
  }
  char amx[160] = "";
  if (rp_isa_cpu() >= RP_ISA_AMX) /* the CPU has AMX, the ceiling excludes it */
    snprintf(amx, sizeof amx, "; AMX is %s: allow it with --isa amx", rp_isa_why_not(RP_ISA_AMX));
  /* what the start-up measurement says, where it ran (--measure-peak) */
  char measured[128] = "";
  int slower = 0;
  const char *slower_note = ": expect this run to be slower than --precision fp32";
  if (t->gemm_peak_bf16 > 0 && t->gemm_peak > 0) {
    snprintf(measured, sizeof measured,
             "; on the model's shapes the bf16 GEMM measured %.2fx the fp32 GEMM's rate",
             t->gemm_peak_bf16 / t->gemm_peak);
    slower = t->gemm_peak_bf16 < BF16_SLOWER * t->gemm_peak;
  }
  if (!rp_isa_allows(RP_ISA_AVX512BF16))
    printf("  note: bf16 has no speed benefit here: no AVX512-BF16 (%s), so the matmuls "
           "widen bf16 to fp32 and run fp32 FMAs%s%s%s\n", rp_isa_why_not(RP_ISA_AVX512BF16),
           measured, slower ? slower_note : ": expect no gain over --precision fp32", amx);
  else if (b < 1.2 * f)
    printf("  note: bf16 has little or no speed benefit here: vdpbf16ps %.0f GFLOP/s vs fp32 "
           "FMA %.0f GFLOP/s per thread (measured); the bf16 GEMM takes the faster of the two "
           "(rp_bf16_kernel), and the rounding passes bf16 adds can leave the step slower than "
           "--precision fp32: prefer fp32 here%s%s%s\n", b, f, slower ? measured : "",
           slower ? slower_note : "", amx);
}

/* Where a bf16 run's attention products run, and why not in bf16 when not. */
static const char *bf16_attention_what(const rp_trainer *t) {
  if (t->o.attention != RP_ATTN_FLASH) return "fp32 (naive attention)";
  if (t->o.bf16_attention == RP_BF16_ATTN_OFF) return "fp32 (--bf16-attention off)";
  if (rp_flash_bf16_active(&t->flash_cfg)) return "bf16 (vdpbf16ps, fp32 softmax)";
  const rp_flash_config could = {.bf16 = 1};
  if (t->o.bf16_attention == RP_BF16_ATTN_AUTO && rp_flash_bf16_active(&could))
    return "fp32 (--bf16-attention auto: vdpbf16ps measured under 1.5x the zmm FMA's "
           "multiply-add rate here, so bf16 products would be slower; on forces them)";
  return rp_isa_allows(RP_ISA_AVX512BF16) ? "fp32 (the flash kernel's ISA is below avx512)"
                                          : "fp32 (no AVX512-BF16 under the ISA ceiling)";
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
           o->cp_impl == RP_CP_ULYSSES ? "ulysses" : "ring",
           t->cp_place == RP_CP_PLACE_ROW ? rp_cp_layout_name(t->cp_layout)
                                          : rp_cp_place_name(t->cp_place),
           t->T_local, o->seq);
  if (t->bf16.n)
    printf("  precision: bf16 matmuls (fp32 accumulation, fp32 master weights and AdamW)%s; "
           "attention products %s\n",
           o->bf16_stochastic ? ", stochastic rounding of the weight copies" : "",
           bf16_attention_what(t));
  if (t->grid.tp > 1)
    printf("  tensor parallel: %d ranks, %d of %d heads, %d of %d MLP features and %d of %d "
           "vocabulary rows per rank\n", t->grid.tp, t->cfg.NH / t->grid.tp, t->cfg.NH,
           4 * t->cfg.C / t->grid.tp, 4 * t->cfg.C, t->cfg.Vp / t->grid.tp, t->cfg.Vp);
  rp_trainer_print_bf16_benefit(t);
  printf("  ranks %d (dp %d x pp %d x cp %d x tp %d), %d threads/rank, gemm mode %s, data %s\n",
         t->grid.world_size, t->grid.dp, t->grid.pp, t->grid.cp, t->grid.tp, rp_pool_size(t->pool),
         rp_gemm_describe(t->pool), t->data_dir);
  const char *wcache = rp_trainer_weight_cache_state(t);
  if (wcache) printf("  weight cache: %s\n", wcache);
  if (o->emulate.n)
    printf("  EMULATED COMPUTE: pipeline actions sleep (tF,tB,tW = %g,%g,%g ms per rank), "
           "communication is real; losses are not meaningful\n", o->emulate.v[0],
           o->emulate.v[1], o->emulate.v[2]);
  if (t->grid.pp > 1)
    printf("  pipeline: schedule %s, %d stages of %s layers\n", t->sched->name,
           t->grid.pp * o->vpp, o->pp_layers[0] ? o->pp_layers : "evenly split");
  if (t->gemm_peak > 0 && t->bf16.n && t->gemm_peak_bf16 >= t->gemm_peak)
    printf("  measured bf16 GEMM peak on the model's shapes: %.1f GFLOP/s (%s kernel; the MFU "
           "denominator)\n", t->gemm_peak / 1e9, rp_bf16_kernel_name(rp_bf16_kernel_active()));
  else if (t->gemm_peak > 0 && t->bf16.n)
    printf("  measured bf16 GEMM peak on the model's shapes: %.1f GFLOP/s (%s kernel), below "
           "the fp32 GEMM's %.1f GFLOP/s on them: that is the MFU denominator\n",
           t->gemm_peak_bf16 / 1e9, rp_bf16_kernel_name(rp_bf16_kernel_active()),
           t->gemm_peak / 1e9);
  else if (t->gemm_peak > 0)
    printf("  measured fp32 GEMM peak on the model's shapes: %.1f GFLOP/s (through the gemm "
           "mode above; OpenBLAS core %s; the MFU denominator)\n", t->gemm_peak / 1e9,
           rp_blas_core());
  if (t->gemm_peak > 0 && t->fma_peak > 0)
    printf("  machine fp32 FMA peak: %.1f GFLOP/s (%d threads x one core's %s register-only "
           "probe; hyperthreads share a core's units); %s reaches %.2f%s of it%s\n",
           t->fma_peak / 1e9, rp_pool_size(t->pool), t->fma_what, t->bf16.n ? "the bf16 GEMM" : "the fp32 GEMM",
           (t->bf16.n ? t->gemm_peak_bf16 : t->gemm_peak) / t->fma_peak, t->bf16.n ? "x" : "",
           !t->bf16.n && rp_gemm_get_mode(t->pool) != RP_GEMM_OWN && rp_blas_above_ceiling()
               ? " (OpenBLAS's kernels run above the probe's level: not a fraction of it)"
               : "");
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
    double f = rp_train_layer_act_floats(t);
    printf("  activations per layer per micro-batch: %.3f MiB measured, %.3f MiB formula "
           "(recompute %s)\n", meas / 1048576.0, 4 * f / 1048576.0, rp_recompute_name(o->recompute));
  }
  rp_tp_print_startup(t);
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
  if (t->grid.pp > 1 || t->grid.tp > 1) {
    if (rp_chunk_init(&whole, &t->cfg, &(rp_stage_spec){0, t->cfg.L, 1, 1}) != RP_OK) return;
    if (rp_load_weights(&whole, ckpt_dir) != RP_OK) {
      rp_chunk_free(&whole);
      return;
    }
    m = &whole;
  }
  /* rank 0 alone: the local attention kernel, never the collective cp one */
  rp_exec x = {.pool = t->pool, .attn = t->local_attn};
  const rp_sample_params sp = {.temperature = 0.8f, .top_k = 40, .top_p = 1.0f, .stop = -1};
  rp_status s = rp_generate(m, &x, prompt, 1, out, n, &sp, &t->sample_rng);
  if (t->grid.pp > 1 || t->grid.tp > 1) rp_chunk_free(&whole);
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

/* A save of the current step: OUT/ckpt or OUT/ckpt-NNNNNN (then the link
 * and pruning); every failure is agreed, so all ranks return the same status. */
static rp_status save_checkpoint(rp_trainer *t, char *dir, size_t cap) {
  int root = t->grid.world_rank == 0;
  rp_ckpt_dir_for(t, t->step, dir, cap);
  RP_TRY(rp_train_agree(t, root ? rp_ckpt_before_save(t) : RP_OK, "before saving", NULL));
  RP_TRY(rp_trainer_save(t, dir));
  return rp_train_agree(t, root ? rp_ckpt_after_save(t, t->step, dir) : RP_OK, "after saving",
                        NULL);
}

static rp_status write_step_metrics(FILE *metrics, int s, const rp_step_stats *st) {
  rp_jw w;
  rp_jw_init(&w);
  rp_jw_obj(&w);
  rp_jw_key(&w, "step"), rp_jw_int(&w, s);
  rp_jw_key(&w, "loss"), rp_jw_num(&w, st->loss, 17);
  rp_jw_key(&w, "lr"), rp_jw_num(&w, st->lr, 6);
  rp_jw_key(&w, "grad_norm"), rp_jw_fixed(&w, st->grad_norm, 6);
  rp_jw_key(&w, "seconds"), rp_jw_fixed(&w, st->seconds, 6);
  rp_jw_key(&w, "tokens_per_s"), rp_jw_fixed(&w, st->tokens_per_s, 1);
  rp_jw_key(&w, "mfu");
  if (st->mfu < 0) rp_jw_null(&w); /* the peak was not measured */
  else rp_jw_fixed(&w, st->mfu, 4);
  rp_jw_obj_end(&w);
  rp_status r = rp_jw_fputs_line(&w, metrics);
  rp_jw_free(&w);
  if (r != RP_OK)
    return rp_err(RP_EIO, "cannot append to metrics.jsonl at step %d (disk full?); free space "
                  "and resume from the last checkpoint", s);
  return RP_OK;
}

/* OUT/report.html at the end of every run; a failure only warns. */
static void write_report(const char *out) {
  char path[RP_OPT_STRLEN + 16];
  snprintf(path, sizeof path, "%s/report.html", out);
  if (rp_report_write(out, path) == RP_OK)
    printf("report: %s (open it in a browser; `ringpipe report %s` rewrites it)\n", path, out);
  else
    rp_warn("no report: %s", rp_errmsg());
}

static void print_step(const rp_trainer *t, const rp_step_stats *st, int first, double t_start) {
  int s = t->step;
  char eta[32], mfu[16];
  double per = (rp_now() - t_start) / (s - first);
  format_eta(eta, sizeof eta, per * (t->o.steps - s));
  printf("step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %7.0f tok/s | MFU %s | ETA %s\n",
         s, t->o.steps, st->loss, st->lr, st->grad_norm, st->tokens_per_s,
         rp_format_mfu(mfu, sizeof mfu, st->mfu), eta);
  fflush(stdout);
}

/* Validation at step s; its status (one rank's read error, say) is folded
 * into the step-boundary agreement. */
static rp_status eval_step(rp_trainer *t, FILE *metrics, double *val) {
  rp_status s = rp_trainer_eval(t, t->o.eval_batches, val);
  if (s != RP_OK || !metrics) return s;
  rp_jw w;
  rp_jw_init(&w);
  rp_jw_obj(&w);
  rp_jw_key(&w, "step"), rp_jw_int(&w, t->step);
  rp_jw_key(&w, "val_loss"), rp_jw_num(&w, *val, 17);
  rp_jw_obj_end(&w);
  s = rp_jw_fputs_line(&w, metrics);
  rp_jw_free(&w);
  if (s != RP_OK) return rp_err(RP_EIO, "cannot append to metrics.jsonl");
  if (!t->o.quiet) printf("step %5d/%d | val loss %.4f\n", t->step, t->o.steps, *val);
  return RP_OK;
}

/* The one line a signal stop prints (world rank 0). */
static void print_stop(const rp_trainer *t, int sig, int first, const char *dir) {
  if (t->step > first)
    printf("stopped by %s at step %d of %d; checkpoint saved to %s; continue with --resume %s "
           "(or --resume auto)\n", rp_stop_signal_name(sig), t->step, t->o.steps, dir, dir);
  else
    printf("stopped by %s before step %d of %d; nothing new to save%s\n",
           rp_stop_signal_name(sig), t->step + 1, t->o.steps,
           t->step > 0 ? " (the checkpoint resumed from holds this step)" : "");
  fflush(stdout);
}

/* The step profile of this rank's steps (rp_step_profile.h): the work of its
 * chunks, the peaks measured now that the steps are done. */
void rp_trainer_print_profile(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  rp_step_work w = {0};
  /* causal pairs of the whole sequence, this rank's share of them */
  double pairs = 0.5 * o->seq * (o->seq + 1.0) / t->grid.cp;
  /* rp_engine_forward_backward's step (no pipeline) */
  w.loss_in_backward = t->grid.pp == 1 && rp_chunk_loss_in_backward(&t->chunks[0]);
  for (int c = 0; c < t->nchunks; c++)
    rp_step_work_add_chunk(&w, &t->chunks[c], o->batch, t->T_local, pairs, o->microbatches);
  long params = 0;
  for (int c = 0; c < t->nchunks; c++) params += (long)t->chunks[c].num_params;
  rp_step_work_add_optimizer(&w, params / (o->zero ? t->grid.dp * t->grid.cp : 1));
  if (t->bf16.n) rp_step_work_add_bf16_copies(&w, params, rp_dp_writes_bf16_copies(t->dp));
  rp_step_peaks pk;
  rp_step_peaks_measure(&pk, 16L * o->batch * t->T_local * t->cfg.C, t->pool);
  rp_step_peaks_measure_optimizer(&pk, &w, t->pool);
  /* the bound's GEMM rate: the better of start-up's and a second measurement
   * now (a slow moment at start-up had left the bound at the quiet step) */
  pk.gemm_start = t->bf16.n && t->gemm_peak_bf16 > 0 ? t->gemm_peak_bf16 : t->gemm_peak;
  if (pk.gemm_start > 0) {
    pk.gemm_after = rp_trainer_gemm_rate_now(t, pk.gemm_alone);
    pk.ngemm_alone = RP_GPT_GEMM_SHAPES;
    pk.gemm_alone_rows = (long)o->batch * t->T_local;
  }
  pk.gemm_flops = RP_MAX(pk.gemm_start, pk.gemm_after);
  rp_step_profile_print(stdout, &w, &pk);
  rp_step_times st;
  if (!rp_step_times_read(&st)) return;
  char path[RP_OPT_STRLEN + 32], title[256], gemm[16];
  snprintf(path, sizeof path, "%s/step_profile.svg", o->out);
  int len = snprintf(title, sizeof title, "step profile: L=%d C=%d NH=%d T=%d B=%d V=%d, %s, "
                     "%d threads, ceiling %s, gemm %s", t->cfg.L, t->cfg.C, t->cfg.NH, o->seq,
                     o->batch, t->cfg.V, t->bf16.n ? "bf16" : "fp32", rp_pool_size(t->pool),
                     rp_isa_name(rp_isa_active()),
                     rp_opts_enum_word(rp_train_opt_table, rp_train_opt_count, "gemm", (int)o->gemm,
                                       gemm, sizeof gemm));
  if (t->grid.world_size > 1 && len > 0 && len < (int)sizeof title) /* the table's rank */
    snprintf(title + len, sizeof title - (size_t)len, "; rank %d of %d (dp %d, pp %d, cp %d, "
             "tp %d)", t->grid.world_rank, t->grid.world_size, t->grid.dp, t->grid.pp,
             t->grid.cp, t->grid.tp);
  /* a figure that cannot be written costs the run nothing but the figure */
  if (rp_step_profile_write_svg(path, title, &st, &w, &pk) == RP_OK)
    printf("step profile figure: %s\n", path);
  else
    printf("step profile figure: not written (%s)\n", rp_errmsg());
}

static void print_summary(rp_trainer *t, int first, int last, double t_start, double last_loss,
                          double val) {
  const rp_train_opts *o = &t->o;
  if (t->grid.dp * t->grid.cp > 1 && last > first) {
    rp_dp_stats ds = rp_dp_last_stats(t->dp);
    printf("data parallel (last step): %d buckets, %s, reduction %.2f ms from first launch, "
           "%.2f ms exposed after backward (overlap %s)\n", ds.buckets,
           o->zero ? "ZeRO-1 reduce-scatter + all-gather" : "all-reduce", ds.reduce_s * 1e3,
           ds.exposed_s * 1e3, o->dp_overlap ? "on" : "off");
  }
  if (last > first) rp_tp_print_summary(t);
  char mem[512];
  rp_mem_report(mem, sizeof mem);
  char vtext[32] = "n/a (no validation ran)";
  if (val >= 0) snprintf(vtext, sizeof vtext, "%.4f", val);
  printf("done: %d steps in %.1f s, final loss %.4f, val loss %s\n", t->step - first,
         rp_now() - t_start, last_loss, vtext);
  if (o->post_validate != RP_POSTVAL_OFF)
    printf("post-validation: %d of %d steps rolled back (clipping or a non-finite value)\n",
           t->rollbacks, t->step - first);
  printf("peak memory (rank 0): %s\n", mem);
  if (t->wcache) {
    rp_sgemm_wcache_stats ws = rp_sgemm_wcache_get_stats(t->wcache);
    printf("weight cache (rank 0): %d weight packs kept (%.2f MiB of the workspace), %ld packs "
           "made, %ld reused (--no-weight-cache packs every time)\n",
           ws.entries, (double)ws.bytes / (1 << 20), ws.packs, ws.hits);
  }
}

/* The run's matmuls go through a GEMM that packs its weights: the own fp32 GEMM,
 * or the bf16 GEMM (ringpipe's own whatever the gemm mode). */
int rp_trainer_packs_weights(const rp_trainer *t) {
  return rp_gemm_get_mode(t->pool) == RP_GEMM_OWN || t->o.precision == RP_PRECISION_BF16;
}

const char *rp_trainer_weight_cache_state(const rp_trainer *t) {
  if (!t->o.weight_cache) return NULL;
  if (t->wcache) return "on (each weight packed once per step)";
  if (!rp_trainer_packs_weights(t))
    return "not used: it keeps the own GEMM's and the bf16 GEMM's packs, and this run has "
           "neither (fp32 with a gemm mode other than own)";
  return "not used: a step multiplies each weight once (--microbatches 1, no --recompute)";
}

rp_status rp_trainer_run(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  int root = t->grid.world_rank == 0, talk = root && !o->quiet;
  FILE *metrics = NULL;
  /* From here a stop signal waits for a step boundary (before, during set-up,
   * it ends the process: nothing has been trained that a save could keep). */
  rp_stop_install();
  RP_TRY(rp_train_agree(t, root ? rp_metrics_open(o->out, t->step, &metrics) : RP_OK,
                        "opening metrics.jsonl", NULL));
  rp_tb_mirror *tb = NULL;
  rp_status tbs = root && o->tensorboard ? rp_tb_mirror_open(&tb, o->out) : RP_OK;
  rp_status agreed = rp_train_agree(t, tbs, "opening the TensorBoard events", NULL);
  if (agreed != RP_OK) {
    if (metrics) fclose(metrics);
    return agreed;
  }
  if (talk) print_banner(t);
  if (t->grid.tp > 1) {
    char fig[RP_OPT_STRLEN + 16];
    snprintf(fig, sizeof fig, "%s/tp_layer.svg", o->out);
    RP_TRY(rp_train_agree(t, root ? rp_tp_write_figure(t, fig) : RP_OK,
                          "writing OUT/tp_layer.svg", NULL));
  }
  double t_start = rp_now(), last_loss = 0, val = -1;
  int first = t->step, stop = 0, mfu_noted = 0;
  rp_mem_reset_peaks();
  int last = o->stop_after > 0 && first + o->stop_after < o->steps ? first + o->stop_after
                                                                   : o->steps;
  char dir[RP_OPT_STRLEN + 16];
  rp_ckpt_dir_for(t, t->step, dir, sizeof dir);
  /* a signal during the banner stops before the first step */
  rp_status s = rp_train_agree(t, RP_OK, "start-up agreement", &stop);
  if (o->profile && last == first + 1) rp_prof_enable(1);  /* one step: profile it */
  while (s == RP_OK && !stop && t->step < last) {
    rp_step_stats st;
    s = rp_trainer_step(t, &st);   /* agreed: the same status on every rank */
    if (s != RP_OK) break;
    last_loss = st.loss;
    /* the first step warms caches and pages in buffers: profile the rest */
    if (o->profile && t->step == first + 1 && last > first + 1) rp_prof_enable(1);
    int at = t->step;
    rp_status local = root ? write_step_metrics(metrics, at, &st) : RP_OK;
    if (talk && (at % o->log_every == 0 || at == o->steps || at == first + 1)) {
      print_step(t, &st, first, t_start);
      if (!mfu_noted && st.mfu > 0)
        mfu_noted = rp_print_mfu_above_note(stdout, st.mfu * t->gemm_peak, t->gemm_peak);
    }
    if (local == RP_OK && ((o->eval_every > 0 && at % o->eval_every == 0) || at == last))
      local = eval_step(t, metrics, &val);
    if (tb) rp_tb_mirror_sync(tb);  /* a failed mirror write warns; the run goes on */
    /* one agreement per step: any rank's error, any rank's stop signal */
    s = rp_train_agree(t, local, "step-boundary agreement", &stop);
    if (s == RP_OK && !stop && o->ckpt_every > 0 && at % o->ckpt_every == 0 && at != last) {
      s = save_checkpoint(t, dir, sizeof dir);
      if (s == RP_OK && talk) printf("step %5d/%d | saved checkpoint %s\n", at, o->steps, dir);
    }
  }
  /* the final save comes before the reports, so that nothing after training
   * can cost the checkpoint */
  if (s == RP_OK && t->step > first) {
    s = save_checkpoint(t, dir, sizeof dir);
    if (s == RP_OK && talk && !stop) printf("saved checkpoint %s (step %d)\n", dir, t->step);
  }
  if (s == RP_OK && stop && root) print_stop(t, stop, first, dir);
  if (s == RP_OK && t->pipe && t->step > first) {
    int reporter = t->grid.dp_rank == 0 && t->grid.cp_rank == 0;
    s = rp_train_agree(t, reporter ? rp_pipeline_report(t, root ? metrics : NULL) : RP_OK,
                       "pipeline report", NULL);
  }
  rp_stop_uninstall();
  if (s == RP_OK && root) {
    print_summary(t, first, last, t_start, last_loss, val);
    if (metrics && t->step > first) rp_train_write_memory_metrics(metrics, t);
    /* after the memory metrics: the profile's own measurements allocate
     * buffers (up to 2 x 256 MiB for the optimizer's stream rate) that are
     * not the run's; before the report, which shows its figure */
    if (o->profile) rp_trainer_print_profile(t);
    write_report(o->out);
    if (tb) {
      rp_tb_mirror_sync(tb);
      printf("TensorBoard: tensorboard --logdir %s/tensorboard (%s)\n", o->out,
             rp_tb_mirror_path(tb));
    }
    if (!stop && last < o->steps)
      printf("stopped at step %d of %d (--stop-after); continue with --resume %s\n", t->step,
             o->steps, dir);
    if (!stop && o->sample_tokens > 0 && !o->quiet) print_sample(t, dir);
  }
  rp_tb_mirror_close(tb);
  if (metrics) fclose(metrics);
  return s;
}
