/* bench_step: where the time of one training step goes, by component.
 *
 * Runs the single-rank step (zero grads, forward, backward, grad norm, AdamW) on
 * random tokens for GPT L=6 C=384 NH=6 T=256 B=4 V=256 by default, with the
 * model's component profile on (rp_prof.h), and prints per component the
 * wall-clock milliseconds per step and the share of the step. MFU is model
 * FLOP/s (rp_gpt_flops_per_token) over the sgemm FLOP/s of the model's own GEMM
 * shapes measured in the same process (rp_gpt_gemm_peak), as the trainer
 * reports it. The per-component times come from profiled steps; the step time
 * and MFU from separate unprofiled steps, so the profile's clock reads cost
 * nothing there. On a shared machine other processes stretch some calls, so the
 * profile also keeps each call's minimum over the profiled steps (and the peak
 * each GEMM call's minimum): their ratio estimates MFU on a quiet machine.
 *
 * usage: bench_step [--threads 2] [--attention naive|flash] [--gemm auto|blas|split|own|ab]
 *                   [--steps 10] [--warmup 2] [--layers 6] [--channels 384]
 *                   [--heads 6] [--seq 256] [--batch 4] [--vocab 256] [--pin 1]
 *                   [--flash-bq 0] [--flash-bk 0]   (flash block rows; 0: its default) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_sgemm.h"
#include "ringpipe/rp_step_profile.h"
#include "ringpipe/rp_train.h"
#include "ringpipe/rp_util.h"

typedef struct {
  int threads, steps, warmup, L, C, NH, T, B, V, pin, fbq, fbk;
  const char *attention, *gemm;
} bench_opts;

static int parse(bench_opts *o, int argc, char **argv) {
  *o = (bench_opts){.threads = 2, .steps = 10, .warmup = 2, .L = 6, .C = 384, .NH = 6,
                    .T = 256, .B = 4, .V = 256, .pin = 1, .attention = "naive",
                    .gemm = "auto"};
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) return -1;
    const char *k = argv[i], *v = argv[i + 1];
    if (strcmp(k, "--attention") == 0) o->attention = v;
    else if (strcmp(k, "--gemm") == 0) o->gemm = v;
    else {
      int *dst = strcmp(k, "--threads") == 0    ? &o->threads
                 : strcmp(k, "--steps") == 0    ? &o->steps
                 : strcmp(k, "--warmup") == 0   ? &o->warmup
                 : strcmp(k, "--layers") == 0   ? &o->L
                 : strcmp(k, "--channels") == 0 ? &o->C
                 : strcmp(k, "--heads") == 0    ? &o->NH
                 : strcmp(k, "--seq") == 0      ? &o->T
                 : strcmp(k, "--batch") == 0    ? &o->B
                 : strcmp(k, "--vocab") == 0    ? &o->V
                 : strcmp(k, "--pin") == 0      ? &o->pin
                 : strcmp(k, "--flash-bq") == 0 ? &o->fbq
                 : strcmp(k, "--flash-bk") == 0 ? &o->fbk
                                                : NULL;
      if (!dst) return -1;
      *dst = atoi(v);
    }
  }
  return o->threads >= 1 && o->steps >= 1 && o->warmup >= 0 ? 0 : -1;
}

typedef struct {
  rp_chunk m;
  rp_acts a;
  rp_layer_acts *lv;
  void *acts_mem;
  rp_grad_ws w;
  float *adam_m, *adam_v;
  rp_exec x;
  int t;
} bench_model;

/* One single-rank training step with one micro-batch, in the trainer's order:
 * zero grads, forward, backward, gradient norm, AdamW per tensor. */
static void train_step(bench_model *b, rp_pool *pool) {
  rp_chunk *m = &b->m;
  int N = b->a.B * b->a.T;
  rp_prof_step_begin();
  RP_PROF(RP_PROF_OPT_ZERO_GRADS, rp_zero(m->grads, (long)m->num_params, pool));
  rp_chunk_forward(m, &b->a, NULL, &b->x);
  rp_chunk_backward(m, &b->a, &b->w, 1.0f / (float)N, &b->x);
  double ss;
  RP_PROF(RP_PROF_OPT_GRAD_NORM, ss = rp_sumsq(m->grads, (long)m->num_params, pool));
  (void)ss;
  rp_adamw_hparams h = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f};
  b->t++;
  double t0 = rp_prof_enabled ? rp_prof_clock() : 0;
  for (int i = 0; i < m->num_tensors; i++) {
    const rp_tensor *ts = &m->tensors[i];
    rp_adamw_update(m->params + ts->offset, m->grads + ts->offset, b->adam_m + ts->offset,
                    b->adam_v + ts->offset, (long)ts->numel, &h, ts->decay ? 0.1f : 0.0f, b->t,
                    pool);
  }
  if (rp_prof_enabled) rp_prof_add(RP_PROF_OPT_ADAMW, rp_prof_clock() - t0);
  rp_prof_step_end();
}

/* sgemm FLOP/s on the shapes rp_gpt_gemm_peak uses, from the minimum time of
 * each call over `reps` repetitions: the quiet-machine counterpart of the
 * site minima of the step profile. */
static double quiet_gemm_peak(const rp_gpt_config *cfg, int N, int reps, rp_pool *pool) {
  long C = cfg->C;
  const long shapes[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, cfg->Vp}};
  long maxio = 4 * C > cfg->Vp ? 4 * C : cfg->Vp, maxw = 0;
  for (int s = 0; s < 5; s++)
    if (shapes[s][0] * shapes[s][1] > maxw) maxw = shapes[s][0] * shapes[s][1];
  /* weights sized by the largest IC x OC (the LM head's C x Vp), not maxio^2,
   * which at the GPT-2 vocabulary would be 10 GB each */
  float *inp = rp_alloc(N * maxio * sizeof(float), RP_MEM_WORKSPACE);
  float *out = rp_alloc(N * maxio * sizeof(float), RP_MEM_WORKSPACE);
  float *w = rp_alloc(maxw * sizeof(float), RP_MEM_WORKSPACE);
  float *dw = rp_alloc(maxw * sizeof(float), RP_MEM_WORKSPACE);
  float *dinp = rp_alloc(N * maxio * sizeof(float), RP_MEM_WORKSPACE);
  if (!inp || !out || !w || !dw || !dinp) return 0;
  for (long i = 0; i < N * maxio; i++) inp[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  for (long i = 0; i < maxw; i++) w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
  double tmin[5][2], flops = 0;
  for (int s = 0; s < 5; s++) tmin[s][0] = tmin[s][1] = 1e30;
  for (int r = 0; r < reps; r++)
    for (int s = 0; s < 5; s++) {
      int IC = (int)shapes[s][0], OC = (int)shapes[s][1];
      double t0 = rp_now();
      rp_matmul_forward(out, inp, w, NULL, N, IC, OC, pool);
      double t1 = rp_now();
      rp_matmul_backward(dinp, dw, NULL, out, inp, w, N, IC, OC, pool);
      double t2 = rp_now();
      if (t1 - t0 < tmin[s][0]) tmin[s][0] = t1 - t0;
      if (t2 - t1 < tmin[s][1]) tmin[s][1] = t2 - t1;
    }
  double t = 0;
  for (int s = 0; s < 5; s++) {
    t += tmin[s][0] + tmin[s][1];
    flops += 6.0 * N * shapes[s][0] * shapes[s][1];
  }
  rp_free(inp);
  rp_free(out);
  rp_free(w);
  rp_free(dw);
  rp_free(dinp);
  return flops / t;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* --gemm ab: the GEMM modes (blas, split, and own and auto where the ISA ceiling
 * has a kernel for own) in one process, rotating every step (and every peak
 * measurement), so that load from other processes falls on all alike. Reports
 * per mode the best peak, the median and best step, each mode's median step
 * over split's (the OpenBLAS default before own), and MFU against the best
 * mode's peak (the honest denominator: the best GEMM rate these threads reach).
 * auto is the pool's mode left unset, as --gemm auto runs. */
static void ab_modes(bench_model *b, rp_pool *pool, const rp_gpt_config *cfg, int N,
                     int steps) {
  /* -1: the pool's mode unset, i.e. what --gemm auto runs */
  const int modes[4] = {RP_GEMM_BLAS_THREADS, RP_GEMM_POOL_SPLIT, RP_GEMM_OWN, -1};
  const char *names[4] = {"blas", "split", "own", "auto"};
  const int nm = rp_sgemm_kernel_best() >= 0 ? 4 : 2;
  double peak[4] = {0, 0, 0, 0};
  for (int r = 0; r < 6; r++)
    for (int k = 0; k < nm; k++) {
      int md = (k + r) % nm;
      rp_pool_set_gemm_mode(pool, modes[md]);
      double p = quiet_gemm_peak(cfg, N, 2, pool);
      if (p > peak[md]) peak[md] = p;
    }
  double *dt[4];
  for (int k = 0; k < 4; k++) dt[k] = malloc(sizeof(double) * (size_t)steps);
  if (!dt[0] || !dt[1] || !dt[2] || !dt[3]) return;
  for (int k = 0; k < nm; k++) { /* warm each mode once */
    rp_pool_set_gemm_mode(pool, modes[k]);
    train_step(b, pool);
  }
  for (int i = 0; i < steps; i++)
    for (int k = 0; k < nm; k++) {
      int md = (k + i) % nm;
      rp_pool_set_gemm_mode(pool, modes[md]);
      double t0 = rp_now();
      train_step(b, pool);
      dt[md][i] = rp_now() - t0;
    }
  double best_peak = 0, med[4] = {0, 0, 0, 0};
  for (int k = 0; k < nm; k++) best_peak = peak[k] > best_peak ? peak[k] : best_peak;
  double flops = rp_gpt_flops_per_token(cfg, b->a.T) * N;
  printf("A/B of the GEMM modes, rotating, %d steps each%s:\n", steps,
         nm == 4 ? "" : " (no own GEMM kernel at this ISA ceiling)");
  printf("%-6s %12s %12s %12s %14s %14s %14s\n", "mode", "peak GF/s", "median ms", "best ms",
         "MFU(median)", "MFU(best)", "median/split");
  for (int k = 0; k < nm; k++) {
    qsort(dt[k], (size_t)steps, sizeof(double), cmp_double);
    med[k] = dt[k][steps / 2];
  }
  for (int k = 0; k < nm; k++)
    printf("%-6s %12.1f %12.1f %12.1f %14.3f %14.3f %14.3f\n", names[k], peak[k] / 1e9,
           med[k] * 1e3, dt[k][0] * 1e3, flops / med[k] / best_peak, flops / dt[k][0] / best_peak,
           med[k] / med[1]);
  printf("(MFU against the best mode's peak, %.1f GFLOP/s)\n", best_peak / 1e9);
  for (int k = 0; k < 4; k++) free(dt[k]);
}

int main(int argc, char **argv) {
  bench_opts o;
  if (parse(&o, argc, argv) != 0) {
    fprintf(stderr, "usage: bench_step [--threads N] [--attention naive|flash] "
                    "[--gemm auto|blas|split|own|ab] [--steps N] [--warmup N] [--layers L] "
                    "[--channels C] [--heads NH] [--seq T] [--batch B] [--vocab V] [--pin 0|1] "
                    "[--flash-bq N] [--flash-bk N]\n");
    return 2;
  }
  rp_gpt_config cfg = {.L = o.L, .C = o.C, .NH = o.NH, .T = o.T, .V = o.V,
                       .Vp = rp_pad_vocab(o.V)};
  rp_pool *pool;
  if (rp_pool_create(&pool, o.threads, o.pin) != RP_OK) goto fail;
  int ab = strcmp(o.gemm, "ab") == 0;
  rp_flash_config fc = {.bq = o.fbq, .bk = o.fbk};
  rp_attn_backend flash_attn;
  if (rp_attn_flash_with(&flash_attn, &fc) != RP_OK) goto fail;
  if (strcmp(o.gemm, "blas") == 0) rp_gemm_set_mode(pool, RP_GEMM_BLAS_THREADS);
  if (strcmp(o.gemm, "split") == 0) rp_gemm_set_mode(pool, RP_GEMM_POOL_SPLIT);
  if (strcmp(o.gemm, "own") == 0) rp_gemm_set_mode(pool, RP_GEMM_OWN);
  bench_model b = {.x = {.pool = pool,
                         .attn = strcmp(o.attention, "flash") == 0 ? &flash_attn
                                                                   : rp_attn_reference()}};
  rp_stage_spec spec = {.first_layer = 0, .num_layers = o.L, .has_embed = 1, .has_head = 1};
  if (rp_chunk_init(&b.m, &cfg, &spec) != RP_OK) goto fail;
  rp_chunk_init_weights(&b.m, 1337);
  b.lv = calloc((size_t)o.L, sizeof *b.lv);
  b.acts_mem = rp_alloc(rp_acts_bytes(&b.m, b.x.attn, o.B, o.T), RP_MEM_ACTS);
  b.adam_m = rp_alloc(b.m.num_params * sizeof(float), RP_MEM_OPTIM);
  b.adam_v = rp_alloc(b.m.num_params * sizeof(float), RP_MEM_OPTIM);
  if (!b.lv || !b.acts_mem || !b.adam_m || !b.adam_v) goto fail;
  rp_acts_bind(&b.a, b.lv, &b.m, b.x.attn, b.acts_mem, o.B, o.T);
  if (rp_grad_ws_init(&b.w, &b.m, o.B, o.T) != RP_OK) goto fail;
  rp_rng rng;
  rp_rng_seed(&rng, 7);
  int N = o.B * o.T;
  for (int i = 0; i < N; i++) {
    b.a.tokens[i] = (int32_t)rp_rng_below(&rng, (uint32_t)o.V);
    b.a.targets[i] = (int32_t)rp_rng_below(&rng, (uint32_t)o.V);
    b.a.pos[i] = i % o.T;
  }

  if (ab) {
    for (int i = 0; i < o.warmup; i++) train_step(&b, pool);
    ab_modes(&b, pool, &cfg, N, o.steps);
    goto done;
  }
  double peak = rp_gpt_gemm_peak(&cfg, o.B, o.T, 0, pool, NULL, 0, NULL);
  double qpeak = quiet_gemm_peak(&cfg, N, 10, pool);
  const char *ct = getenv("OPENBLAS_CORETYPE");
  printf("bench_step: L=%d C=%d NH=%d T=%d B=%d V=%d, %d threads, attention %s, gemm %s, "
         "OPENBLAS_CORETYPE=%s\n", o.L, o.C, o.NH, o.T, o.B, o.V, o.threads, b.x.attn->name,
         rp_gemm_get_mode(pool) == RP_GEMM_POOL_SPLIT ? "split" : "blas", ct ? ct : "(unset)");
  printf("sgemm peak on the model's shapes: %.1f GFLOP/s (rp_gpt_gemm_peak), "
         "%.1f GFLOP/s (per-call minima)\n", peak / 1e9, qpeak / 1e9);

  for (int i = 0; i < o.warmup; i++) train_step(&b, pool);
  /* profiled steps: per component, the mean over steps and the sum of per-call
   * minima (rp_prof_step_begin), which discounts preemption by other processes */
  rp_prof_enable(1);
  double prof_t0 = rp_now();
  for (int i = 0; i < o.steps; i++) train_step(&b, pool);
  double prof_wall = (rp_now() - prof_t0) / o.steps;
  double comp[RP_PROF_COUNT], cmin[RP_PROF_COUNT], sum = 0, sum_min = 0;
  for (int c = 0; c < RP_PROF_COUNT; c++) {
    comp[c] = rp_prof_seconds((rp_prof_id)c) / o.steps;
    cmin[c] = rp_prof_min_seconds((rp_prof_id)c);
    sum += comp[c];
    sum_min += cmin[c];
  }
  rp_step_work work = {0};
  rp_step_work_add_chunk(&work, &b.m, o.B, o.T, 0.5 * o.T * (o.T + 1.0), 1);
  rp_step_work_add_optimizer(&work, (long)b.m.num_params);
  rp_step_peaks pk;
  rp_step_peaks_measure(&pk, 16L * N * o.C, pool);
  rp_step_profile_print(stdout, &work, &pk);
  rp_prof_enable(0);
  /* unprofiled steps: step time and MFU */
  double *dt = malloc(sizeof(double) * (size_t)o.steps);
  if (!dt) goto fail;
  double total = 0;
  for (int i = 0; i < o.steps; i++) {
    double t0 = rp_now();
    train_step(&b, pool);
    dt[i] = rp_now() - t0;
    total += dt[i];
  }
  qsort(dt, (size_t)o.steps, sizeof *dt, cmp_double);
  double flops = rp_gpt_flops_per_token(&cfg, o.T) * N;

  printf("%-28s %9s %7s %12s %7s\n", "component", "mean ms", "share", "call-min ms",
         "share");
  for (int c = 0; c < RP_PROF_COUNT; c++)
    if (comp[c] > 0)
      printf("%-28s %9.2f %6.1f%% %12.2f %6.1f%%\n", rp_prof_name((rp_prof_id)c),
             comp[c] * 1e3, 100.0 * comp[c] / prof_wall, cmin[c] * 1e3,
             100.0 * cmin[c] / sum_min);
  printf("%-28s %9.2f %6.1f%%\n", "(untimed remainder)", (prof_wall - sum) * 1e3,
         100.0 * (prof_wall - sum) / prof_wall);
  printf("%-28s %9.2f %7s %12.2f\n", "profiled step", prof_wall * 1e3, "", sum_min * 1e3);
  double mean = total / o.steps, med = dt[o.steps / 2];
  printf("unprofiled step: mean %.1f ms, median %.1f ms, min %.1f ms\n", mean * 1e3, med * 1e3,
         dt[0] * 1e3);
  printf("tokens/s %.0f (mean)  MFU %.3f (mean)  %.3f (median step)  %.3f (best step)\n",
         N / mean, flops / mean / peak, flops / med / peak, flops / dt[0] / peak);
  printf("quiet-machine estimate (call minima over call minima): step %.1f ms, MFU %.3f\n",
         sum_min * 1e3, flops / sum_min / qpeak);
  free(dt);
done:
  rp_grad_ws_free(&b.w);
  rp_free(b.acts_mem);
  rp_free(b.adam_m);
  rp_free(b.adam_v);
  free(b.lv);
  rp_chunk_free(&b.m);
  rp_pool_destroy(pool);
  return 0;
fail:
  fprintf(stderr, "bench_step: %s\n", rp_errmsg());
  return 1;
}
