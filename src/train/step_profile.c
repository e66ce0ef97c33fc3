/* The step profile (rp_step_profile.h): the profiler's components folded into
 * the parts of a step, with the work each part does and its fraction of peak. */
#include "ringpipe/rp_step_profile.h"

#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_util.h"

static const char *const part_names[RP_PART_COUNT] = {
    [RP_PART_GEMM] = "GEMM (matmuls, dbias)",
    [RP_PART_ATTENTION] = "attention",
    [RP_PART_LAYERNORM] = "layernorm",
    [RP_PART_GELU] = "GELU (+ c_fc dbias)",
    [RP_PART_XENT] = "cross-entropy",
    [RP_PART_EMBED] = "embeddings",
    [RP_PART_OPTIMIZER] = "optimizer (zero, norm, AdamW)",
    [RP_PART_COPIES] = "copies (gradient scratch)",
    [RP_PART_DATA] = "data loading",
    [RP_PART_COMM] = "comm waits",
    [RP_PART_IDLE] = "idle / untimed",
};

static rp_step_part part_of(rp_prof_id id) {
  switch (id) {
    case RP_PROF_FWD_MATMUL: case RP_PROF_BWD_MATMUL: return RP_PART_GEMM;
    case RP_PROF_FWD_ATTENTION: case RP_PROF_BWD_ATTENTION: return RP_PART_ATTENTION;
    case RP_PROF_FWD_LAYERNORM: case RP_PROF_BWD_LAYERNORM: return RP_PART_LAYERNORM;
    case RP_PROF_FWD_GELU: case RP_PROF_BWD_GELU: return RP_PART_GELU;
    case RP_PROF_FWD_XENT: case RP_PROF_BWD_XENT: return RP_PART_XENT;
    case RP_PROF_FWD_EMBED: case RP_PROF_BWD_EMBED: return RP_PART_EMBED;
    case RP_PROF_OPT_ZERO_GRADS: case RP_PROF_OPT_GRAD_NORM: case RP_PROF_OPT_ADAMW:
    case RP_PROF_OPT_BF16_COPY:
      return RP_PART_OPTIMIZER;
    case RP_PROF_DATA: return RP_PART_DATA;
    case RP_PROF_COMM: return RP_PART_COMM;
    default: return RP_PART_COPIES;   /* residual adds, scratch zero/copy */
  }
}

/* Per micro-batch of N rows, fp32 (4 bytes): GEMM FLOPs 2*N*in*out forward and
 * twice that backward; attention as the flash kernels execute it (forward 4*HS,
 * backward 10*HS per visible pair and head, the recomputed scores included;
 * c_fc's bias gradient is taken in the GELU backward's pass and timed there);
 * memory passes as the bytes they must read and write at least: LayerNorm
 * forward x -> y (8 NC), backward dy, x -> dx accumulated (16 NC); GELU on 4C
 * columns forward 32 NC, backward 48 NC; cross-entropy forward reads the
 * logits (unless w->loss_in_backward), backward reads them and writes
 * dlogits; embeddings forward reads a
 * wte and a wpe row and writes the sum (12 NC), backward read-modify-writes
 * both (20 NC). */
void rp_step_work_add_chunk(rp_step_work *w, const rp_chunk *m, int B, int T, double pairs,
                            int microbatches) {
  const double N = (double)B * T * microbatches, C = m->cfg.C, Vp = m->cfg.Vp;
  const double L = m->spec.num_layers;
  w->flops[RP_PART_GEMM] += L * 3.0 * 2.0 * N * C * (3 * C + C + 4 * C + 4 * C);
  w->flops[RP_PART_ATTENTION] += L * 14.0 * C * pairs * B * microbatches;
  w->bytes[RP_PART_LAYERNORM] += L * 2 * 24.0 * N * C;
  w->bytes[RP_PART_GELU] += L * 80.0 * N * C;
  if (m->spec.has_head) {
    w->flops[RP_PART_GEMM] += 3.0 * 2.0 * N * C * Vp;
    w->bytes[RP_PART_LAYERNORM] += 24.0 * N * C;
    w->bytes[RP_PART_XENT] += (w->loss_in_backward ? 8.0 : 12.0) * N * Vp;
  }
  if (m->spec.has_embed) w->bytes[RP_PART_EMBED] += 32.0 * N * C;
  rp_step_work_name_gemms(w, m);
}

/* zero grads writes P floats, the norm reads P, AdamW reads p, g, m, v and
 * writes p, m, v */
void rp_step_work_add_optimizer(rp_step_work *w, long params) {
  w->bytes[RP_PART_OPTIMIZER] += 4.0 * 9.0 * (double)params;
  w->opt_footprint += 4.0 * 4.0 * (double)params;
}

/* a separate refresh reads the fp32 weights and writes their bf16 copies; the
 * copies AdamW writes in its own pass add only the writes */
void rp_step_work_add_bf16_copies(rp_step_work *w, long params, int in_update) {
  w->bytes[RP_PART_OPTIMIZER] += (in_update ? 2.0 : 6.0) * (double)params;
  w->bf16_copies = 1;
}

double rp_step_fma_peak(rp_pool *pool, const char **level) {
  /* fp32 GEMMs run on zmm or ymm FMAs; avx512bf16's probe is the bf16 dot */
  rp_isa lvl = rp_isa_fp32_fma_level();
  double g = rp_isa_peak_gflops(lvl);
  *level = g > 0 ? rp_isa_name(lvl) : "scalar (no SIMD probe)";
  return g * 1e9 * rp_pool_size(pool);
}

void rp_step_peaks_measure(rp_step_peaks *pk, long stream_size, rp_pool *pool) {
  pk->fma_flops = rp_step_fma_peak(pool, &pk->fma_level);
  pk->stream_size = stream_size;
  pk->stream_bytes = rp_stream_bandwidth(stream_size, pool);
  /* the trainer's measurements, where it made them */
  pk->gemm_flops = pk->gemm_start = pk->gemm_after = 0.0;
  pk->ngemm_alone = 0;
  pk->gemm_alone_rows = 0;
  pk->stream_opt_bytes = 0.0;
  pk->stream_opt_size = 0;
}

void rp_step_peaks_measure_optimizer(rp_step_peaks *pk, const rp_step_work *w, rp_pool *pool) {
  const double half = 0.5 * w->opt_footprint;
  if (!(half > 0)) return;
  pk->stream_opt_size = (long)RP_MIN(half, (double)RP_STEP_OPT_STREAM_MAX);
  pk->stream_opt_bytes = rp_stream_bandwidth(pk->stream_opt_size, pool);
}

double rp_step_stream_of(const rp_step_peaks *pk, rp_step_part p) {
  return p == RP_PART_OPTIMIZER && pk->stream_opt_bytes > 0 ? pk->stream_opt_bytes
                                                             : pk->stream_bytes;
}

static void print_row(FILE *f, const char *name, double s, double quiet, double wall,
                      double flops, double bytes, const rp_step_peaks *pk, double stream) {
  char work[32] = "", rate[32] = "", frac[32] = "", q[16] = "-";
  if (quiet >= 0) snprintf(q, sizeof q, "%.2f", quiet * 1e3);
  if (flops > 0 && s > 0) {
    snprintf(work, sizeof work, "%.3g GFLOP", flops / 1e9);
    snprintf(rate, sizeof rate, "%.1f GFLOP/s", flops / s / 1e9);
    if (pk->fma_flops > 0) snprintf(frac, sizeof frac, "%.3f FMA", flops / s / pk->fma_flops);
  } else if (bytes > 0 && s > 0) {
    snprintf(work, sizeof work, "%.3g MB", bytes / 1e6);
    snprintf(rate, sizeof rate, "%.1f GB/s", bytes / s / 1e9);
    if (stream > 0) snprintf(frac, sizeof frac, "%.3f stream", bytes / s / stream);
  }
  fprintf(f, "  %-30s %9.2f %9s %6.1f%% %12s %14s %12s\n", name, s * 1e3, q,
          wall > 0 ? 100.0 * s / wall : 0.0, work, rate, frac);
}

/* The profiler's own components (forward and backward apart), mean and quiet,
 * for the ones that took any time. */
static void print_components(FILE *f, long steps) {
  fprintf(f, "  by kernel: %-26s %9s %9s %8s\n", "", "ms/step", "quiet ms", "calls");
  for (int c = 0; c < RP_PROF_COUNT; c++) {
    const rp_prof_id id = (rp_prof_id)c;
    if (rp_prof_calls(id) == 0) continue;
    fprintf(f, "    %-35s %9.2f %9.2f %8.1f\n", rp_prof_name(id),
            rp_prof_seconds(id) / (double)steps * 1e3, rp_prof_min_seconds(id) * 1e3,
            (double)rp_prof_calls(id) / (double)steps);
  }
}

const char *rp_step_part_name(rp_step_part p, const rp_step_work *w) {
  if (p == RP_PART_OPTIMIZER && w && w->bf16_copies) return "optimizer (AdamW, bf16 copies)";
  return p >= 0 && p < RP_PART_COUNT ? part_names[p] : "?";
}

int rp_step_part_shown(rp_step_part p, const rp_step_times *st, const rp_step_work *w) {
  return p == RP_PART_IDLE || st->part[p] > 0 || w->flops[p] > 0 || w->bytes[p] > 0;
}

/* What the hypervisor took over the steps: on a shared VM one reason, not the
 * only one (a neighbour's use of the caches and memory shows in no count), why
 * the mean step sits above the quiet one. Said where /proc/stat has it. */
static void print_steal(FILE *f, const rp_step_times *st) {
  char what[48];
  snprintf(what, sizeof what, "the %ld steps", st->steps);
  rp_print_steal(f, what, st->steal, st->wall * (double)st->steps);
}

int rp_step_times_read(rp_step_times *st) {
  memset(st, 0, sizeof *st);
  st->steps = rp_prof_steps();
  if (st->steps < 1) return 0;
  double timed = 0;
  for (int c = 0; c < RP_PROF_COUNT; c++) {
    double s = rp_prof_seconds((rp_prof_id)c) / (double)st->steps;
    double q = rp_prof_min_seconds((rp_prof_id)c);
    st->part[part_of((rp_prof_id)c)] += s;
    st->quiet[part_of((rp_prof_id)c)] += q;
    timed += s;
    st->timed_quiet += q;
  }
  st->wall = rp_prof_wall_seconds() / (double)st->steps;
  st->steal = rp_prof_steal_seconds();
  st->part[RP_PART_IDLE] = st->wall > timed ? st->wall - timed : 0.0;
  st->quiet[RP_PART_IDLE] = -1.0; /* no call sites: the idle time has no minimum */
  return 1;
}

double rp_step_bound_seconds(const rp_step_times *st, const rp_step_work *w,
                             double gemm_flops) {
  const double gemm_flop = w->flops[RP_PART_GEMM];
  if (!(gemm_flops > 0) || !(gemm_flop > 0) || !(st->quiet[RP_PART_GEMM] > 0)) return -1.0;
  double s = RP_MIN(gemm_flop / gemm_flops, st->quiet[RP_PART_GEMM]);
  for (int p = 0; p < RP_PART_COUNT; p++)
    if (p != RP_PART_GEMM && st->quiet[p] > 0) s += st->quiet[p];
  return s;
}

/* What the step would take were its GEMMs as fast as alone with hot operands
 * and the rest of it as fast as its quickest steps: the FMA fraction no
 * tuning outside the GEMM kernel can pass, beside the one the step reached.
 * Where the GEMMs were measured both at start-up and after the steps, the
 * line names both: a shared machine's slow moment in one of them shows. */
static void print_bound(FILE *f, const rp_step_times *st, const rp_step_work *w,
                        const rp_step_peaks *pk, double total_flops) {
  const double s = rp_step_bound_seconds(st, w, pk->gemm_flops);
  if (s <= 0 || !(pk->fma_flops > 0)) return;
  fprintf(f, "  bound: the GEMMs at the rate they reach alone on hot operands (%.1f GFLOP/s, "
          "%.3f of the FMA peak", pk->gemm_flops / 1e9, pk->gemm_flops / pk->fma_flops);
  if (pk->gemm_start > 0 && pk->gemm_after > 0)
    fprintf(f, ": the better of %.1f at start-up and %.1f after the steps",
            pk->gemm_start / 1e9, pk->gemm_after / 1e9);
  fprintf(f, ") and every other part at its quiet time: %.2f ms a step, %.3f of the FMA peak\n",
          s * 1e3, total_flops / s / pk->fma_flops);
}

void rp_step_profile_print(FILE *f, const rp_step_work *w, const rp_step_peaks *pk) {
  rp_step_times st;
  if (!rp_step_times_read(&st)) {
    fprintf(f, "step profile: no profiled step\n");
    return;
  }
  const long steps = st.steps;
  const double wall = st.wall, timed_quiet = st.timed_quiet;
  fprintf(f, "step profile (this rank, mean of %ld steps): FMA peak %.1f GFLOP/s (%s probe x "
          "threads), stream %.1f GB/s (two %.1f MiB buffers)\n", steps, pk->fma_flops / 1e9,
          pk->fma_level, pk->stream_bytes / 1e9, (double)pk->stream_size / 1048576.0);
  if (pk->stream_opt_bytes > 0)
    fprintf(f, "  the optimizer's stream: %.1f GB/s (two %.1f MiB buffers, its footprint%s)\n",
            pk->stream_opt_bytes / 1e9, (double)pk->stream_opt_size / 1048576.0,
            pk->stream_opt_size == RP_STEP_OPT_STREAM_MAX ? " capped" : "");
  fprintf(f, "  %-30s %9s %9s %7s %12s %14s %12s\n", "part", "ms/step", "quiet ms", "share",
          "work/step", "achieved", "of peak");
  double total_flops = 0;
  for (int p = 0; p < RP_PART_COUNT; p++) {
    total_flops += w->flops[p];
    if (rp_step_part_shown((rp_step_part)p, &st, w))
      print_row(f, rp_step_part_name((rp_step_part)p, w), st.part[p], st.quiet[p], wall,
                w->flops[p], w->bytes[p], pk, rp_step_stream_of(pk, (rp_step_part)p));
  }
  print_row(f, "step (wall)", wall, timed_quiet, wall, total_flops, 0.0, pk, 0.0);
  /* the quiet column: each timed call's fastest run over the steps (the same
   * call of every step), so what other processes took from a call is not in it */
  if (timed_quiet > 0 && wall >= timed_quiet && pk->fma_flops > 0)
    fprintf(f, "  quiet: each timed call at its fastest over the %ld steps, %.2f ms of "
            "them a step, %.3f of the FMA peak; the mean step is %.1f%% above\n",
            steps, timed_quiet * 1e3, total_flops / timed_quiet / pk->fma_flops,
            100.0 * (wall / timed_quiet - 1.0));
  print_steal(f, &st);
  print_bound(f, &st, w, pk, total_flops);
  print_components(f, steps);
  rp_step_profile_print_gemms(f, w, pk);
}
