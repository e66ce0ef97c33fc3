/* What tensor parallelism costs, printed by train (world rank 0):
 * - at start-up, activation bytes per layer per micro-batch measured from the
 *   activation layout for none / tp / tp+sp / tp+sp+selective / full, next to
 *   the forms of Korthikanti et al. ("Reducing Activation Recomputation in
 *   Large Transformer Models", 2022) re-derived for ringpipe's buffers, and the
 *   TP communication per layer per micro-batch next to its formula;
 * - after the run, the last step's measured TP bytes and time in collectives
 *   next to the formula for the step.
 * docs/tensor_parallel.md derives every constant. s = positions per sequence on
 * this rank, b = batch, h = channels, a = heads, t = tp; S = the attention's
 * saved floats of one whole (unsharded) layer: a s^2 b for the O(T^2)
 * reference, a s b (the log-sum-exp) for flash. */
#include <stdio.h>

#include "ringpipe/rp_tp.h"
#include "train_internal.h"

/* Bytes per layer of the activation layout of m with tp, sp and recompute set
 * as asked: the chunk's layout with and without its layers. */
static double layout_layer_bytes(const rp_trainer *t, int tp, int sp, rp_recompute rc) {
  rp_chunk m = t->chunks[0];  /* a view: rp_acts_bytes reads shapes and modes only */
  m.tp = tp, m.sp = sp, m.recompute = rc;
  rp_chunk none = m;
  none.spec.num_layers = 0;
  int B = t->o.batch, T = t->T_local, nl = m.spec.num_layers;
  return nl ? (double)(rp_acts_bytes(&m, t->exec.attn, B, T) -
                       rp_acts_bytes(&none, t->exec.attn, B, T)) / nl
            : 0;
}

static double saved_floats(const rp_trainer *t, int tp) {
  return (double)t->exec.attn->saved_floats(t->exec.attn, t->o.batch, t->T_local,
                                            t->cfg.C / tp, t->cfg.NH / tp);
}

static void print_memory_table(const rp_trainer *t) {
  const double MiB = 1048576.0;
  double s = t->T_local, b = t->o.batch, h = t->cfg.C, a = t->cfg.NH, tp = t->grid.tp;
  double sbh = s * b * h, sb = s * b, S1 = saved_floats(t, 1), St = saved_floats(t, t->grid.tp);
  int drops = St >= sbh / tp;  /* selective drops the attention's state when it is O(s^2) */
  struct {
    const char *name, *ours, *theirs;
    double measured, ours_b, theirs_b;
  } row[5] = {
      {"none", "4(16sbh+4sb)+4S", "sbh(34+5as/h)", layout_layer_bytes(t, 1, 0, RP_RECOMPUTE_NONE),
       4 * (16 * sbh + 4 * sb) + 4 * S1, sbh * (34 + 5 * a * s / h)},
      {"tp", "4(4sbh+4sb+12sbh/t)+4S/t", "sbh(10+24/t+5as/(ht))",
       layout_layer_bytes(t, t->grid.tp, 0, RP_RECOMPUTE_NONE),
       4 * (4 * sbh + 4 * sb + 12 * sbh / tp) + 4 * St, sbh * (10 + 24 / tp + 5 * a * s / (h * tp))},
      {"tp+sp", "4(16sbh+4sb)/t+4S/t", "(sbh/t)(34+5as/h)",
       layout_layer_bytes(t, t->grid.tp, 1, RP_RECOMPUTE_NONE),
       4 * (16 * sbh + 4 * sb) / tp + 4 * St, sbh / tp * (34 + 5 * a * s / h)},
      {"tp+sp+selective", drops ? "4(12sbh+4sb)/t" : "4(12sbh+4sb)/t+4S/t", "34sbh/t",
       layout_layer_bytes(t, t->grid.tp, 1, RP_RECOMPUTE_SELECTIVE),
       4 * (12 * sbh + 4 * sb) / tp + (drops ? 0 : 4 * St), 34 * sbh / tp},
      {"full (tp+sp)", "4sbh/t", "2sbh", layout_layer_bytes(t, t->grid.tp, 1, RP_RECOMPUTE_FULL),
       4 * sbh / tp, 2 * sbh},
  };
  printf("  activations per layer per micro-batch, s=%g b=%g h=%g a=%g t=%g, attention %s (S = "
         "%g floats): measured from the layout | ringpipe's form (fp32, no dropout) | the "
         "article's (fp16, dropout masks):\n", s, b, h, a, tp, t->exec.attn->name, S1);
  for (int i = 0; i < 5; i++)
    printf("    %-16s %9.4f MiB | %9.4f MiB %-26s | %9.4f MiB %s\n", row[i].name,
           row[i].measured / MiB, row[i].ours_b / MiB, row[i].ours, row[i].theirs_b / MiB,
           row[i].theirs);
}

/* Bytes each rank sends per micro-batch (ring forms): per layer, and the
 * embedding + head's, for this run's mode. */
static void comm_formula(const rp_trainer *t, double *layer, double *ends) {
  double N = (double)t->o.batch * t->T_local, C = t->cfg.C, tp = t->grid.tp;
  double ar = 2 * (tp - 1) / tp * 4, ag = (tp - 1) / tp * 4;  /* bytes per float of the whole */
  int refwd = t->o.recompute == RP_RECOMPUTE_FULL;  /* backward reruns the forward */
  const rp_chunk *m = &t->chunks[0];
  if (!t->o.sp) {
    /* forward: g after attn and mlp c_proj; backward: f before c_attn and c_fc */
    *layer = (2 * (1 + refwd) + 2) * ar * N * C;
    *ends = (m->spec.has_embed ? ar * N * C : 0) +
            (m->spec.has_head ? ar * (3 * N) + ar * N * C : 0);
  } else {
    /* forward: 2 all-gathers + 2 reduce-scatters; backward: the gradient
     * gathered twice, the LayerNorm outputs gathered again, 2 reduce-scatters,
     * and the 4C LayerNorm gradients all-reduced */
    *layer = (4 * (1 + refwd) + 6) * ag * N * C + ar * 4 * C;
    *ends = (m->spec.has_embed ? 2 * ag * N * C : 0) +
            (m->spec.has_head ? 3 * ag * N * C + ar * 3 * N + ar * 2 * C : 0);
  }
}

void rp_tp_print_startup(const rp_trainer *t) {
  if (t->grid.tp < 2) return;
  print_memory_table(t);
  double layer, ends;
  comm_formula(t, &layer, &ends);
  printf("  tensor-parallel communication per layer per micro-batch: %.4f MiB sent per rank "
         "(%s; formula %s x (t-1)/t x 4 B x sbh), embedding + head %.4f MiB\n",
         layer / 1048576.0, t->o.sp ? "all-gathers and reduce-scatters" : "all-reduces",
         t->o.sp ? (t->o.recompute == RP_RECOMPUTE_FULL ? "14" : "10")
                 : (t->o.recompute == RP_RECOMPUTE_FULL ? "2 x 6" : "2 x 4"),
         ends / 1048576.0);
}

void rp_tp_print_summary(const rp_trainer *t) {
  if (t->grid.tp < 2 || !t->tp) return;
  rp_tp_stats st = rp_tp_last_step(t->tp);
  double layer, ends;
  comm_formula(t, &layer, &ends);
  double layers = 0;
  for (int c = 0; c < t->nchunks; c++) layers += t->chunks[c].spec.num_layers;
  double want = t->o.microbatches * (layers * layer + ends);
  printf("tensor parallel (last step, rank 0): %ld collectives, %.3f MiB sent (formula %.3f "
         "MiB), %.2f ms exposed in them (%s)\n", st.calls, st.bytes / 1048576.0,
         want / 1048576.0, st.wait_s * 1e3,
         t->o.sp && t->o.tp_overlap ? "overlap on: the ring transfers that run during the "
                                      "GEMMs are hidden"
                                    : "overlap off: every collective blocks");
}
