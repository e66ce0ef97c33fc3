/* Memory of a training run for metrics.jsonl: rank 0's peaks by category and
 * what docs/memory.md's formulas give, for the report and TensorBoard. */
#include <math.h>
#include <stdio.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_train.h"
#include "train_internal.h"

/* One layer's activation floats per micro-batch by the formula (docs/memory.md):
 * 16 N C + 4 N + the attention's saved state S (recompute none); minus the GELU
 * output 4 N C and S when S >= N C (selective); only the layer output N C (full).
 * Under tensor parallelism q, k, v, the attention output and the MLP's two
 * hidden tensors are this rank's 1/tp: 4 N C + 12 N C / tp + 4 N + S; sequence
 * parallelism shards the residual stream's rows (N / tp) too. */
double rp_train_layer_act_floats(const rp_trainer *t) {
  const rp_chunk *m = &t->chunks[0];
  int B = t->o.batch, T = t->T_local;
  double N = (double)B * T, C = t->cfg.C, tp = t->grid.tp, Ct = C / tp;
  double Nr = m->sp ? N / tp : N;
  double S = (double)t->exec.attn->saved_floats(t->exec.attn, B, T, t->cfg.C / t->grid.tp,
                                                t->cfg.NH / t->grid.tp);
  double full = 4 * Nr * C + 12 * N * Ct + 4 * Nr;
  return m->recompute == RP_RECOMPUTE_FULL ? Nr * C
       : m->recompute == RP_RECOMPUTE_SELECTIVE ? full - 4 * N * Ct + (S >= N * Ct ? 0 : S)
                                                : full + S;
}

/* The shared scratch that recomputation writes into (src/model/acts.c): a whole
 * layer but its output for full, 15 N C + 4 N + S; for selective only what it
 * drops, the GELU output 4 N C and S when S >= N C. */
static double recompute_scratch_floats(rp_recompute mode, double N, double C, double S) {
  if (mode == RP_RECOMPUTE_FULL) return 15 * N * C + 4 * N + S;
  if (mode == RP_RECOMPUTE_SELECTIVE) return 4 * N * C + (S >= N * C ? S : 0);
  return 0;
}

/* What docs/memory.md's formulas give for rank 0 (MiB): params 4P (+2P bf16
 * copies), grads 4P (+4 ceil(P/r) ZeRO-1 shard), AdamW 8P (8 ceil(P/r) under
 * ZeRO-1) over r = dp x cp replicas, P the model's parameters (pp = 1);
 * activations (whole sequences on the rank: cp = 1) layers x the per-layer formula
 * + the recompute scratch + embedding output, head and batch ids. */
static void write_memory_formulas(rp_jw *w, const rp_trainer *t) {
  double P = 0, rep = (double)t->grid.dp * t->grid.cp, mib = 1048576.0, shard;
  for (int c = 0; c < t->nchunks; c++) P += (double)t->chunks[c].num_params;
  shard = ceil(P / rep);
  rp_jw_key(w, "memory_formula_mib"), rp_jw_obj(w);
  rp_jw_key(w, "params"), rp_jw_fixed(w, (4 * P + (t->bf16.n ? 2 * P : 0)) / mib, 3);
  rp_jw_key(w, "grads"), rp_jw_fixed(w, (4 * P + (t->o.zero ? 4 * shard : 0)) / mib, 3);
  rp_jw_key(w, "optimizer"), rp_jw_fixed(w, 8 * (t->o.zero ? shard : P) / mib, 3);
  if (t->grid.cp == 1) {
    const rp_chunk *m = &t->chunks[0];
    double N = (double)t->o.batch * t->T_local, C = t->cfg.C;
    double S = (double)t->exec.attn->saved_floats(t->exec.attn, t->o.batch, t->T_local, t->cfg.C,
                                                  t->cfg.NH);
    double floats = m->spec.num_layers * rp_train_layer_act_floats(t) + N * C /* embedding output */
                  + N * C + 2 * N + N * t->cfg.Vp + N /* lnf, its stats, logits, losses */
                  + 3 * N /* tokens, targets, positions */
                  + recompute_scratch_floats(m->recompute, N, C, S);
    rp_jw_key(w, "activations"), rp_jw_fixed(w, 4 * floats / mib, 3);
  }
  rp_jw_obj_end(w);
}

/* The run's peak memory by category (rank 0) as one metrics line at the last
 * step: the report and TensorBoard show it beside the per-step numbers. */
void rp_train_write_memory_metrics(FILE *metrics, const rp_trainer *t) {
  rp_jw w;
  rp_jw_init(&w);
  rp_jw_obj(&w);
  rp_jw_key(&w, "step"), rp_jw_int(&w, t->step);
  rp_jw_key(&w, "memory_mib"), rp_jw_obj(&w);
  for (int c = 0; c < RP_MEM_NCAT; c++)
    rp_jw_key(&w, rp_mem_cat_name((rp_mem_cat)c)), rp_jw_fixed(&w, rp_mem_peak((rp_mem_cat)c) / 1048576.0, 3);
  rp_jw_key(&w, "total"), rp_jw_fixed(&w, rp_mem_peak_total() / 1048576.0, 3);
  rp_jw_key(&w, "rss"), rp_jw_fixed(&w, rp_mem_process_peak_rss() / 1048576.0, 3);
  rp_jw_obj_end(&w);
  /* at pp > 1 rank 0's peaks also hold the other stages' parameters, gathered to
   * write the checkpoint (chunk copies with parameter and gradient buffers): the
   * formulas below would not describe them */
  if (t->grid.pp == 1) write_memory_formulas(&w, t);
  rp_jw_obj_end(&w);
  if (rp_jw_fputs_line(&w, metrics) != RP_OK) rp_warn("cannot append memory peaks to metrics.jsonl");
  rp_jw_free(&w);
}
