/* ringpipe sim-serve: the DualPath serving simulator at paper scale (no MPI,
 * arithmetic on a trace). One mode, the ablation ladder (Basic, + layer-wise,
 * + dual path, + scheduler = DualPath, Oracle), or a sweep of it over P/D
 * node ratios, agent counts or append lengths, with the throughput bounds
 * of each resource printed beside it. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_serve.h"

/* --mode: the loading modes in rp_serve_mode's order, then the ladder */
typedef enum {
  MODE_BASIC = RP_MODE_BASIC,
  MODE_DUALPATH = RP_MODE_DUALPATH,
  MODE_ORACLE = RP_MODE_ORACLE,
  MODE_ABLATION
} simserve_mode;
typedef enum { SWEEP_NONE, SWEEP_PD, SWEEP_AGENTS, SWEEP_APPEND, SWEEP_ONLINE } simserve_sweep;

typedef struct {
  char trace[RP_OPT_STRLEN], jsonl[RP_OPT_STRLEN], timeline[RP_OPT_STRLEN], svg[RP_OPT_STRLEN];
  int dataset;  /* position in "32k|48k|64k" */
  simserve_mode mode;
  simserve_sweep sweep;
  rp_sched_policy sched;
  int agents, max_turns, seed, p_nodes, d_nodes, gpus, de_batch, layers, layerwise, pe_stage;
  float scale, snic_gbps, cnic_gbps, kv_bytes, prefill_tps, prefill_ctx, tpot, append_scale;
  float pe_limit, de_limit, slo_ttft;
} simserve_opts;

#define O(f) offsetof(simserve_opts, f)
#define E(f) RP_OPT_ENUM_FIELD(simserve_opts, f)
static const rp_opt table[] = {
    {"dataset", RP_OPT_ENUM, E(dataset), "32k", 0, 0, "32k|48k|64k",
     "synthetic trajectories with this Table 2 data set's statistics"},
    {"trace", RP_OPT_STR, O(trace), "", 0, 0, NULL,
     "replay a Mooncake-format JSONL trace (512-token hash blocks) instead"},
    {"agents", RP_OPT_INT, O(agents), "256", 1, 1000000, NULL, "agents (all start at once: offline)"},
    {"scale", RP_OPT_FLOAT, O(scale), "1", 1, 1e6, NULL, "divide the data set's token counts by this"},
    {"append-scale", RP_OPT_FLOAT, O(append_scale), "1", 0.01, 100, NULL,
     "multiply the appended tokens per turn by this (the append-length sweep)"},
    {"max-turns", RP_OPT_INT, O(max_turns), "0", 0, 1000000, NULL, "turns per agent at most (0: no cap)"},
    {"seed", RP_OPT_INT, O(seed), "1", 0, 2147483647, NULL, "trace seed"},
    {"p-nodes", RP_OPT_INT, O(p_nodes), "1", 1, 4096, NULL, "prefill nodes"},
    {"d-nodes", RP_OPT_INT, O(d_nodes), "1", 1, 4096, NULL, "decode nodes"},
    {"gpus", RP_OPT_INT, O(gpus), "8", 1, 1024, NULL, "GPUs (engines) per node"},
    {"snic-gbps", RP_OPT_FLOAT, O(snic_gbps), "400", 0, 1e6, NULL,
     "storage NIC per node, Gbit/s (0: infinitely fast)"},
    {"cnic-gbps", RP_OPT_FLOAT, O(cnic_gbps), "400", 0, 1e6, NULL,
     "compute NIC per GPU, Gbit/s (0: infinitely fast)"},
    {"kv-bytes", RP_OPT_FLOAT, O(kv_bytes), "70272", 0, 1e9, NULL,
     "KV bytes per token (default: an MLA latent of 576 BF16 values x 61 layers)"},
    {"prefill-tps", RP_OPT_FLOAT, O(prefill_tps), "6000", 0, 1e9, NULL,
     "prefill speed per PE GPU, new tokens/s (0: infinitely fast)"},
    {"prefill-ctx", RP_OPT_FLOAT, O(prefill_ctx), "0", 0, 1, NULL,
     "extra prefill seconds per new token per 1K context tokens (attention)"},
    {"tpot", RP_OPT_FLOAT, O(tpot), "0.05", 0, 100, NULL, "decode step time per DE GPU, s"},
    {"de-batch", RP_OPT_INT, O(de_batch), "64", 1, 1000000, NULL, "sequences decoded together per DE GPU"},
    {"layers", RP_OPT_INT, O(layers), "61", 1, 10000, NULL, "layers (layer-wise streaming granularity)"},
    {"pe-stage", RP_OPT_INT, O(pe_stage), "1", 0, 1000000, NULL,
     "without layer-wise streaming: whole prefixes a PE holds in HBM at once (0: no limit)"},
    {"pe-token-limit", RP_OPT_FLOAT, O(pe_limit), "65536", 0, 1e15, NULL,
     "scheduler: skip PEs with more queued new tokens than this"},
    {"de-token-limit", RP_OPT_FLOAT, O(de_limit), "4194304", 0, 1e15, NULL,
     "scheduler: skip DEs holding more context tokens than this"},
    {"mode", RP_OPT_ENUM, E(mode), "ablation", 0, 0, "basic|dualpath|oracle|ablation",
     "one loading mode, or the ablation ladder Basic -> DualPath and Oracle"},
    {"sched", RP_OPT_ENUM, E(sched), "paper", 0, 0, "paper|rr",
     "scheduler for a single mode: the paper's rules or round robin"},
    {"layerwise", RP_OPT_BOOL, O(layerwise), "1", 0, 0, NULL, "layer-wise streaming (single mode)"},
    {"sweep", RP_OPT_ENUM, E(sweep), "none", 0, 0, "none|pd|agents|append|online",
     "repeat the ladder over P/D ratios, agent counts or append lengths; online: the highest "
     "Poisson agent arrival rate each mode serves within the TTFT SLO"},
    {"slo-ttft", RP_OPT_FLOAT, O(slo_ttft), "5", 0, 1e6, NULL,
     "online: the SLO on the p99 time to first token, s"},
    {"jsonl", RP_OPT_STR, O(jsonl), "", 0, 0, NULL, "per-turn records (single mode)"},
    {"svg", RP_OPT_STR, O(svg), "", 0, 0, NULL,
     "ablation: write PREFIX-ladder.svg (JCT per rung) and PREFIX-paths.svg (bytes per path)"},
    {"timeline", RP_OPT_STR, O(timeline), "", 0, 0, NULL, "Chrome trace of the run (single mode)"},
};
#undef O
static const int nopts = sizeof table / sizeof *table;

static rp_sim_config config_of(const simserve_opts *o) {
  return (rp_sim_config){
      .p_nodes = o->p_nodes, .d_nodes = o->d_nodes, .gpus_per_node = o->gpus,
      .snic_gbps = o->snic_gbps, .cnic_gbps = o->cnic_gbps, .kv_bytes_per_token = o->kv_bytes,
      .prefill_tps = o->prefill_tps, .prefill_ctx_s = o->prefill_ctx, .tpot_s = o->tpot,
      .de_batch = o->de_batch, .layers = o->layers, .pe_stage = o->pe_stage, .pe_token_limit = (long)o->pe_limit,
      .de_token_limit = (long)o->de_limit, .short_queue_bytes = -1};
}

static rp_status make_trace(const simserve_opts *o, rp_trace *t) {
  if (o->trace[0]) return rp_trace_mooncake(t, o->trace, 512, o->scale);
  char word[16];
  rp_trace_stats st =
      *rp_trace_table2(rp_opts_enum_word(table, nopts, "dataset", o->dataset, word, sizeof word));
  st.append = (int)lround(st.append * o->append_scale);
  return rp_trace_synth(t, &st, o->agents, o->scale, o->max_turns, (uint64_t)o->seed);
}

/* Throughput bounds in turns per second of each resource, from the trace's
 * mean per-turn work: which one binds tells whether loading dominates. */
static void print_bounds(const simserve_opts *o, const rp_trace *t) {
  double hit = 0, miss = 0, gen = 0;
  long n = 0;
  for (int a = 0; a < t->nagents; a++) {
    long prev = 0;
    for (int k = 0; k < t->agents[a].nturns; k++, n++) {
      const rp_turn *tu = &t->agents[a].turns[k];
      long h = tu->hit >= 0 ? tu->hit : prev / 64 * 64;
      hit += (double)h;
      miss += (double)(tu->prompt - h);
      gen += tu->gen;
      prev = tu->prompt + tu->gen;
    }
  }
  if (!n) return;
  hit /= n, miss /= n, gen /= n;
  double sb = o->snic_gbps * 1e9 / 8, hb = hit * o->kv_bytes;
  double basic_io = o->snic_gbps > 0 ? o->p_nodes * sb / hb : INFINITY;
  double dual_io = o->snic_gbps > 0 ? (o->p_nodes + o->d_nodes) * sb / hb : INFINITY;
  double pe = o->prefill_tps > 0 ? o->p_nodes * o->gpus * o->prefill_tps / miss : INFINITY;
  double de = o->tpot > 0 ? o->d_nodes * o->gpus * o->de_batch / (gen * o->tpot) : INFINITY;
  printf("  per turn: hit %.0f, new %.0f, generated %.0f tokens; bounds (turns/s): storage Basic "
         "%.1f, storage dual %.1f, prefill %.1f, decode %.1f\n", hit, miss, gen, basic_io,
         dual_io, pe, de);
  /* DualPath is loading-free of a bottleneck when the aggregate storage
   * bound is at least the compute bound: (P + D) B_s / H >= min(PE, DE). */
  double compute = fmin(pe, de);
  printf("  no storage bottleneck with dual paths iff (P+D) x %.0f GB/s / %.2f GB >= %.1f turns/s: "
         "%s; Basic would need P >= %.2f nodes\n", sb / 1e9, hb / 1e9, compute,
         dual_io >= compute ? "yes" : "no", compute * hb / sb);
}

static rp_status run_ladder(const simserve_opts *o, const char *tag) {
  rp_trace t;
  RP_TRY(make_trace(o, &t));
  printf("%s: %d agents, %ld turns, %d P + %d D nodes x %d GPUs\n", tag, t.nagents,
         rp_trace_total_turns(&t), o->p_nodes, o->d_nodes, o->gpus);
  print_bounds(o, &t);
  double base = 0;
  rp_serve_summary sums[RP_SERVE_RUNGS];
  const char *labels[RP_SERVE_RUNGS];
  for (int i = 0; i < RP_SERVE_RUNGS; i++) {
    rp_sim_config c = config_of(o);
    c.mode = rp_serve_ladder[i].mode;
    c.layerwise = rp_serve_ladder[i].layerwise;
    c.policy = rp_serve_ladder[i].policy;
    rp_sim_result r;
    rp_status s = rp_sim_run(&c, &t, &r, NULL);
    if (s != RP_OK) {
      rp_trace_free(&t);
      return s;
    }
    if (i == 0) base = r.sum.jct;
    rp_serve_print_summary(stdout, rp_serve_ladder[i].label, &r.sum);
    printf("%-22s   JCT vs basic: %.3fx faster (%+.1f%%)\n", "", base / r.sum.jct,
           100 * (r.sum.jct - base) / base);
    sums[i] = r.sum;
    labels[i] = rp_serve_ladder[i].label;
    r.sum.snic_bytes = r.sum.snic_busy = NULL; /* kept in sums[i] */
    rp_sim_result_free(&r);
  }
  rp_trace_free(&t);
  rp_status s = RP_OK;
  if (o->svg[0]) {
    char path[RP_OPT_STRLEN + 32];
    snprintf(path, sizeof path, "%s-ladder.svg", o->svg);
    s = rp_serve_svg_ladder(path, tag, labels, sums, RP_SERVE_RUNGS);
    snprintf(path, sizeof path, "%s-paths.svg", o->svg);
    if (s == RP_OK) s = rp_serve_svg_paths(path, &sums[0], &sums[3]);
  }
  for (int i = 0; i < RP_SERVE_RUNGS; i++) rp_serve_summary_free(&sums[i]);
  return s;
}

static rp_status run_single(const simserve_opts *o) {
  rp_trace t;
  RP_TRY(make_trace(o, &t));
  rp_sim_config c = config_of(o);
  c.mode = (rp_serve_mode)o->mode;
  c.layerwise = o->layerwise;
  c.policy = o->sched;
  rp_ctrace tl = {0};
  rp_status s = o->timeline[0] ? rp_ctrace_open(&tl, o->timeline) : RP_OK;
  rp_sim_result r = {0};
  if (s == RP_OK) s = rp_sim_run(&c, &t, &r, o->timeline[0] ? &tl : NULL);
  rp_ctrace_close(&tl);
  if (s == RP_OK) {
    print_bounds(o, &t);
    rp_serve_print_summary(stdout, rp_serve_mode_name(c.mode), &r.sum);
    if (o->jsonl[0]) s = rp_serve_write_jsonl(o->jsonl, r.rec, r.nrec);
  }
  rp_sim_result_free(&r);
  rp_trace_free(&t);
  return s;
}

/* p99 TTFT of one mode with agents arriving at `rate` per second. */
static rp_status online_ttft(const simserve_opts *o, rp_trace *t, int rung, double rate,
                             double *p99, double *jct) {
  rp_trace_poisson(t, rate, (uint64_t)o->seed);
  rp_sim_config c = config_of(o);
  c.mode = rp_serve_ladder[rung].mode;
  c.layerwise = rp_serve_ladder[rung].layerwise;
  c.policy = rp_serve_ladder[rung].policy;
  rp_sim_result r;
  RP_TRY(rp_sim_run(&c, t, &r, NULL));
  *p99 = r.sum.ttft_p99;
  *jct = r.sum.jct;
  rp_sim_result_free(&r);
  return RP_OK;
}

/* The highest arrival rate within the SLO, by bisection (p99 TTFT grows with
 * the rate once a resource saturates). */
static rp_status run_online(const simserve_opts *o) {
  rp_trace t;
  RP_TRY(make_trace(o, &t));
  printf("online: %d agents (%ld turns), Poisson arrivals, SLO p99 TTFT <= %g s, %d P + %d D "
         "nodes\n", t.nagents, rp_trace_total_turns(&t), o->slo_ttft, o->p_nodes, o->d_nodes);
  static const int rungs[] = {0, 3, 4}; /* basic, DualPath, oracle */
  double base = 0;
  rp_status s = RP_OK;
  for (int i = 0; s == RP_OK && i < 3; i++) {
    double lo = 0, hi = 64, p99 = 0, jct = 0;
    for (int it = 0; s == RP_OK && it < 24; it++) {
      double mid = 0.5 * (lo + hi);
      s = online_ttft(o, &t, rungs[i], mid, &p99, &jct);
      if (p99 <= o->slo_ttft) lo = mid;
      else hi = mid;
    }
    if (s == RP_OK) s = online_ttft(o, &t, rungs[i], lo, &p99, &jct);
    if (i == 0) base = lo;
    double turns = (double)rp_trace_total_turns(&t) / jct;
    /* at the cap, even all agents at once meet the SLO: the rate is a lower bound */
    const char *ge = lo > 63.99 ? ">= " : "";
    printf("%-22s max rate %s%.4f agents/s (p99 TTFT %.3f s, %.1f turns/s)  vs basic %s%.2fx\n",
           rp_serve_ladder[rungs[i]].label, ge, lo, p99, turns, ge, base > 0 ? lo / base : 0);
  }
  rp_trace_free(&t);
  return s;
}

static rp_status run_sweep(simserve_opts o) {
  char tag[128];
  if (o.sweep == SWEEP_ONLINE) return run_online(&o);
  if (o.sweep == SWEEP_PD) {
    static const int pd[][2] = {{1, 4}, {1, 2}, {1, 1}, {2, 1}, {4, 1}};
    for (size_t i = 0; i < sizeof pd / sizeof *pd; i++) {
      o.p_nodes = pd[i][0], o.d_nodes = pd[i][1];
      snprintf(tag, sizeof tag, "== %dP%dD", o.p_nodes, o.d_nodes);
      RP_TRY(run_ladder(&o, tag));
    }
  } else if (o.sweep == SWEEP_AGENTS) {
    int base = o.agents;
    for (int f = 1; f <= 8; f *= 2) {
      o.agents = base * f / 4 > 0 ? base * f / 4 : 1;
      snprintf(tag, sizeof tag, "== %d agents", o.agents);
      RP_TRY(run_ladder(&o, tag));
    }
  } else {
    static const float scales[] = {0.5f, 1, 2, 4};
    for (size_t i = 0; i < sizeof scales / sizeof *scales; i++) {
      o.append_scale = scales[i];
      snprintf(tag, sizeof tag, "== append x %.1f", scales[i]);
      RP_TRY(run_ladder(&o, tag));
    }
  }
  return RP_OK;
}

int rp_cmd_sim_serve(int argc, char **argv) {
  simserve_opts o;
  int rc = rp_cli_parse("sim-serve", "ringpipe sim-serve [options]",
                        "Simulate multi-turn agentic serving with a persistent KV cache at paper "
                        "scale: Basic, DualPath and Oracle loading (arXiv 2602.21548).",
                        table, nopts, &o, argc, argv);
  if (rc >= 0) return rc;
  rp_status s;
  if (o.sweep != SWEEP_NONE) s = run_sweep(o);
  else if (o.mode == MODE_ABLATION) s = run_ladder(&o, "ablation");
  else s = run_single(&o);
  return s == RP_OK ? 0 : rp_cli_fail("sim-serve", s);
}
