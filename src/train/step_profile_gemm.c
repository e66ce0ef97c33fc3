/* The step profile's GEMM products apart (rp_step_profile.h): which of a
 * step's matmuls loses against the FMA peak, and whether it loses in the step
 * (cold operands, a neighbour's burst) or alone as well. The same product
 * alone comes from the trainer's measurement after the steps (hot operands,
 * its best repeat); its time in the step from the profiler's call sites
 * (rp_prof_gemm_rows), mean and quiet (each site at its fastest). */
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_step_profile.h"

/* Adds name for in -> out, or joins it to a name already there for the same
 * shape (a small model's LM head can have c_fc's shape). */
static void add_name(rp_step_work *w, long in, long out, const char *name) {
  for (int i = 0; i < w->ngemm_names; i++) {
    rp_step_gemm_name *g = &w->gemm_names[i];
    if (g->in != in || g->out != out) continue;
    if (!strstr(g->name, name)) {
      const size_t used = strlen(g->name);
      snprintf(g->name + used, sizeof g->name - used, " / %s", name);
    }
    return;
  }
  if (w->ngemm_names == RP_STEP_GEMM_NAMES) return;
  rp_step_gemm_name *g = &w->gemm_names[w->ngemm_names++];
  g->in = in;
  g->out = out;
  snprintf(g->name, sizeof g->name, "%s", name);
}

void rp_step_work_name_gemms(rp_step_work *w, const rp_chunk *m) {
  /* a tensor-parallel rank's shards: C/tp features of the heads and the MLP,
   * Vp/tp of the vocabulary-parallel head */
  const long tp = m->tp > 0 ? m->tp : 1, C = m->cfg.C, Ct = C / tp;
  if (m->spec.num_layers > 0) {
    add_name(w, C, 3 * Ct, "qkv");
    add_name(w, Ct, C, "attn proj");
    add_name(w, C, 4 * Ct, "fc");
    add_name(w, 4 * Ct, C, "fc proj");
  }
  if (m->spec.has_head) add_name(w, C, m->cfg.Vp / tp, "lm head");
}

const char *rp_step_gemm_product_name(const rp_step_work *w, long in, long out) {
  for (int i = 0; i < w->ngemm_names; i++)
    if (w->gemm_names[i].in == in && w->gemm_names[i].out == out) return w->gemm_names[i].name;
  return "";
}

double rp_step_gemm_alone_rate(const rp_step_peaks *pk, const rp_prof_gemm_row *r) {
  if (r->rows != pk->gemm_alone_rows) return 0.0;
  for (int i = 0; i < pk->ngemm_alone; i++) {
    const rp_gemm_shape_rate *a = &pk->gemm_alone[i];
    if (a->in != r->in || a->out != r->out) continue;
    if (r->pass == RP_PROF_GEMM_FORWARD) return a->fwd;
    if (r->pass == RP_PROF_GEMM_BACKWARD) return a->bwd;
  }
  return 0.0;
}

static void fraction(char *buf, size_t n, double flops_per_s, double peak) {
  if (peak > 0 && flops_per_s > 0) snprintf(buf, n, "%.3f", flops_per_s / peak);
  else snprintf(buf, n, "-");
}

void rp_step_profile_print_gemms(FILE *f, const rp_step_work *w, const rp_step_peaks *pk) {
  rp_prof_gemm_row rows[RP_STEP_GEMM_ROWS];
  const int n = rp_prof_gemm_rows(rows, RP_STEP_GEMM_ROWS);
  if (n == 0) return;
  fprintf(f, "  by GEMM product (rows x in -> out features; of the FMA peak at the mean and the "
          "quiet time, and alone: the product on hot operands after the steps):\n");
  fprintf(f, "    %-20s %-22s %-8s %5s %9s %9s %9s %7s %7s %7s\n", "product", "shape", "pass",
          "calls", "ms/step", "quiet ms", "GFLOP/s", "of peak", "quiet", "alone");
  double sum = 0, sum_quiet = 0;
  for (int i = 0; i < n; i++) {
    const rp_prof_gemm_row *r = &rows[i];
    char shape[48], mean_f[16], quiet_f[16], alone_f[16];
    snprintf(shape, sizeof shape, "%ld x %ld -> %ld", r->rows, r->in, r->out);
    const double rate = r->seconds > 0 ? r->flops / r->seconds : 0.0;
    fraction(mean_f, sizeof mean_f, rate, pk->fma_flops);
    fraction(quiet_f, sizeof quiet_f, r->quiet > 0 ? r->flops / r->quiet : 0.0, pk->fma_flops);
    fraction(alone_f, sizeof alone_f, rp_step_gemm_alone_rate(pk, r), pk->fma_flops);
    fprintf(f, "    %-20s %-22s %-8s %5d %9.2f %9.2f %9.1f %7s %7s %7s\n",
            rp_step_gemm_product_name(w, r->in, r->out), shape, rp_prof_gemm_pass_name(r->pass), r->sites,
            r->seconds * 1e3, r->quiet * 1e3, rate / 1e9, mean_f, quiet_f, alone_f);
    sum += r->seconds;
    sum_quiet += r->quiet;
  }
  fprintf(f, "    %-20s %-22s %-8s %5s %9.2f %9.2f\n", "all products", "", "", "", sum * 1e3,
          sum_quiet * 1e3);
}
