/* ringpipe serve: multi-turn agentic serving on MPI ranks (one driver, --pe
 * prefill engines, --de decode engines in nodes of --node-size), loading the
 * cached K/V Basic, DualPath or Oracle style (arXiv 2602.21548). --mode
 * compare runs the three in turn on one trace, --mode ablation the ladder;
 * each run starts from an empty block store. --mode recompute (one rank)
 * writes the reference replies of a whole-context recompute. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mpi.h>
#include <errno.h>
#include <sys/stat.h>

#include "cli.h"
#include "io/io_fs.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_serve.h"
#include "ringpipe/rp_train.h"

/* --mode: the three loading modes first, in rp_serve_mode's order */
typedef enum {
  MODE_BASIC = RP_MODE_BASIC,
  MODE_DUALPATH = RP_MODE_DUALPATH,
  MODE_ORACLE = RP_MODE_ORACLE,
  MODE_COMPARE,
  MODE_ABLATION,
  MODE_RECOMPUTE
} serve_mode_choice;

typedef struct {
  char checkpoint[RP_OPT_STRLEN], store[RP_OPT_STRLEN], outputs[RP_OPT_STRLEN];
  char trace[RP_OPT_STRLEN], jsonl[RP_OPT_STRLEN], timeline[RP_OPT_STRLEN];
  int dataset;  /* position in "32k|48k|64k" */
  serve_mode_choice mode;
  rp_sched_policy sched;
  rp_attn_kind attention;
  int pe, de, node_size, layers, channels, heads, ctx, vocab, init_seed, agents, max_turns;
  int seed, layerwise, de_slots, threads;
  float weight_scale, scale, storage_gbps, net_gbps;
} serve_opts;

#define O(f) offsetof(serve_opts, f)
#define E(f) RP_OPT_ENUM_FIELD(serve_opts, f)
static const rp_opt table[] = {
    {"pe", RP_OPT_INT, O(pe), "2", 1, 1024, NULL, "prefill engines (ranks 1..pe)"},
    {"de", RP_OPT_INT, O(de), "2", 1, 1024, NULL, "decode engines (the ranks after them)"},
    {"node-size", RP_OPT_INT, O(node_size), "1", 1, 1024, NULL,
     "engines per node (PEs first, then DEs); one storage link per node"},
    {"mode", RP_OPT_ENUM, E(mode), "compare", 0, 0,
     "basic|dualpath|oracle|compare|ablation|recompute",
     "loading mode; compare: basic, dualpath, oracle in turn; ablation: the ladder; recompute: "
     "the reference replies (one rank)"},
    {"layerwise", RP_OPT_BOOL, O(layerwise), "1", 0, 0, NULL,
     "layer-wise streaming: layer l's K/V arrives while layer l-1 computes"},
    {"sched", RP_OPT_ENUM, E(sched), "paper", 0, 0, "paper|rr", "scheduler: the paper's rules or round robin"},
    {"storage-gbps", RP_OPT_FLOAT, O(storage_gbps), "0.5", 0, 1e6, NULL,
     "storage NIC per node, Gbit/s (token bucket on block reads; 0: unlimited)"},
    {"net-gbps", RP_OPT_FLOAT, O(net_gbps), "0", 0, 1e6, NULL,
     "compute-network input per engine, Gbit/s (0: unlimited, counted)"},
    {"de-slots", RP_OPT_INT, O(de_slots), "8", 1, 1024, NULL, "sequences a DE decodes together"},
    {"store", RP_OPT_STR, O(store), "", 0, 0, NULL,
     "block store directory (default: a fresh one under $TMPDIR, removed at the end)"},
    {"dataset", RP_OPT_ENUM, E(dataset), "32k", 0, 0, "32k|48k|64k", "Table 2 statistics"},
    {"trace", RP_OPT_STR, O(trace), "", 0, 0, NULL,
     "replay a Mooncake-format JSONL trace (timestamps honoured; lengths and its 512-token "
     "hash blocks divided by --scale) instead of synthetic agents"},
    {"scale", RP_OPT_FLOAT, O(scale), "32", 1, 1e6, NULL, "divide the data set's token counts by this"},
    {"agents", RP_OPT_INT, O(agents), "4", 1, 100000, NULL, "agents, all starting at once"},
    {"max-turns", RP_OPT_INT, O(max_turns), "6", 0, 1000000, NULL, "turns per agent at most (0: no cap)"},
    {"seed", RP_OPT_INT, O(seed), "1", 0, 2147483647, NULL, "trace seed"},
    {"checkpoint", RP_OPT_STR, O(checkpoint), "", 0, 0, NULL,
     "model checkpoint (default: a random model of the shape below)"},
    {"layers", RP_OPT_INT, O(layers), "2", 1, 96, NULL, "random model: layers"},
    {"channels", RP_OPT_INT, O(channels), "64", 8, 8192, NULL, "random model: channels"},
    {"heads", RP_OPT_INT, O(heads), "4", 1, 128, NULL, "random model: heads"},
    {"ctx", RP_OPT_INT, O(ctx), "1024", 64, 1 << 20, NULL, "random model: positions"},
    {"vocab", RP_OPT_INT, O(vocab), "256", 2, 1 << 20, NULL, "random model: vocabulary"},
    {"init-seed", RP_OPT_INT, O(init_seed), "1", 0, 2147483647, NULL, "random model: weight seed"},
    {"weight-scale", RP_OPT_FLOAT, O(weight_scale), "1", 0, 100, NULL,
     "random model: multiply the initial weights (larger: fewer near-tied logits)"},
    {"threads", RP_OPT_INT, O(threads), "1", 1, 1024, NULL, "compute threads per rank"},
    {"attention", RP_OPT_ENUM, E(attention), "naive", 0, 0, "naive|flash", "prefill attention"},
    {"outputs", RP_OPT_STR, O(outputs), "", 0, 0, NULL,
     "write every turn's reply to PREFIX.<run>.txt"},
    {"jsonl", RP_OPT_STR, O(jsonl), "", 0, 0, NULL, "per-turn records to PREFIX.<run>.jsonl"},
    {"timeline", RP_OPT_STR, O(timeline), "", 0, 0, NULL, "Chrome trace to PREFIX.<run>.json"},
};
#undef O
static const int nopts = sizeof table / sizeof *table;

static rp_status load_model(const serve_opts *o, rp_chunk *m) {
  if (o->checkpoint[0]) return rp_cli_load_model(o->checkpoint, m);
  if (o->channels % o->heads)
    return rp_err(RP_EINVAL, "--heads %d does not divide --channels %d", o->heads, o->channels);
  rp_gpt_config cfg = {.L = o->layers, .C = o->channels, .NH = o->heads, .T = o->ctx,
                       .V = o->vocab, .Vp = rp_pad_vocab(o->vocab)};
  RP_TRY(rp_chunk_init(m, &cfg, &(rp_stage_spec){0, cfg.L, 1, 1}));
  rp_chunk_init_weights(m, (uint64_t)o->init_seed);
  for (size_t i = 0; i < m->num_params; i++) m->params[i] *= o->weight_scale;
  return RP_OK;
}

/* PREFIX.<label>.<ext> into buf, or NULL when PREFIX is empty. */
static const char *named(char *buf, size_t cap, const char *prefix, const char *label,
                         const char *ext) {
  if (!prefix[0]) return NULL;
  snprintf(buf, cap, "%s.%s.%s", prefix, label[0] == '+' ? label + 1 : label, ext);
  return buf;
}

static rp_status one_run(const serve_opts *o, const rp_chunk *m, const rp_trace *t,
                         const char *root, const rp_serve_rung *rg, const char *label) {
  char store[RP_OPT_STRLEN + 64], out[RP_OPT_STRLEN + 64], js[RP_OPT_STRLEN + 64],
      tl[RP_OPT_STRLEN + 64];
  snprintf(store, sizeof store, "%s/%s", root, label[0] == '+' ? label + 1 : label);
  rp_engine_opts eo = {.npe = o->pe, .nde = o->de, .node_size = o->node_size, .mode = rg->mode,
                       .layerwise = rg->layerwise, .policy = rg->policy,
                       .storage_gbps = o->storage_gbps, .net_gbps = o->net_gbps,
                       .de_slots = o->de_slots, .threads = o->threads,
                       .attention_flash = o->attention == RP_ATTN_FLASH, .store = store,
                       .outputs = named(out, sizeof out, o->outputs, label, "txt"),
                       .jsonl = named(js, sizeof js, o->jsonl, label, "jsonl"),
                       .timeline = named(tl, sizeof tl, o->timeline, label, "json")};
  rp_serve_summary sum = {0};
  int direct = 0;
  rp_status s = rp_serve_run(&eo, m, t, &sum, &direct);
  if (s == RP_OK && rp_mpi_world_rank() == 0) {
    rp_serve_print_summary(stdout, label, &sum);
    printf("%-22s   storage bytes per node:", "");
    for (int k = 0; k < sum.nnodes; k++) printf(" %.1f MB", sum.snic_bytes[k] / 1e6);
    printf("; compute network %.1f MB (busiest input link busy %.3f s); reads %s\n",
           sum.net_bytes / 1e6, sum.net_busy_max,
           direct ? "O_DIRECT" : "buffered, page cache dropped after each (O_DIRECT refused)");
    fflush(stdout);
  }
  rp_serve_summary_free(&sum);
  return s;
}

/* A fresh store root on rank 0, the same path on every rank. */
static rp_status make_root(const serve_opts *o, char *root, size_t cap, int *owned) {
  *owned = !o->store[0];
  int ok = 1;
  if (rp_mpi_world_rank() == 0) {
    if (o->store[0]) {
      snprintf(root, cap, "%s", o->store);
      ok = mkdir(root, 0755) == 0 || errno == EEXIST;
    } else {
      snprintf(root, cap, "%s/ringpipe-serve-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
      ok = mkdtemp(root) != NULL;
    }
  }
  MPI_Bcast(root, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok ? RP_OK : rp_err(RP_EIO, "cannot create the store directory %s (--store)", root);
}

static rp_status run_modes(const serve_opts *o, const rp_chunk *m, const rp_trace *t) {
  char root[RP_OPT_STRLEN + 32];
  int owned;
  RP_TRY(make_root(o, root, sizeof root, &owned));
  rp_serve_rung runs[RP_SERVE_RUNGS];
  int n = 0;
  rp_sched_policy pol = o->sched;
  if (o->mode == MODE_ABLATION) {
    for (; n < RP_SERVE_RUNGS; n++) runs[n] = rp_serve_ladder[n];
  } else {
    static const char *names[] = {"basic", "dualpath", "oracle"};
    for (int i = 0; i < 3; i++)
      if (o->mode == MODE_COMPARE || (int)o->mode == i)
        runs[n++] = (rp_serve_rung){names[i], (rp_serve_mode)i, o->layerwise, pol};
  }
  rp_status s = RP_OK;
  for (int i = 0; s == RP_OK && i < n; i++) s = one_run(o, m, t, root, &runs[i], runs[i].label);
  if (owned && rp_mpi_world_rank() == 0) {
    if (rp_io_remove_tree(root) != RP_OK) fprintf(stderr, "note: %s\n", rp_errmsg());
  }
  return s;
}

int rp_cmd_serve(int argc, char **argv) {
  serve_opts o;
  int rc = rp_cli_parse("serve", "mpirun -n <1+pe+de> ringpipe serve [options]",
                        "Multi-turn agentic serving with a persistent KV cache on MPI ranks: "
                        "Basic, DualPath and Oracle loading (arXiv 2602.21548).",
                        table, nopts, &o, argc, argv);
  if (rc >= 0) return rc;
  rp_chunk m;
  rp_trace t;
  char word[16];
  const rp_trace_stats *stats =
      rp_trace_table2(rp_opts_enum_word(table, nopts, "dataset", o.dataset, word, sizeof word));
  rp_status s = load_model(&o, &m);
  if (s == RP_OK) {
    s = o.trace[0] ? rp_trace_mooncake(&t, o.trace, 512, o.scale)
                   : rp_trace_synth(&t, stats, o.agents, o.scale, o.max_turns, (uint64_t)o.seed);
    if (s == RP_OK) {
      if (o.mode == MODE_RECOMPUTE) {
        s = rp_mpi_world_size() != 1 ? rp_err(RP_EINVAL, "--mode recompute runs on one rank")
            : !o.outputs[0]          ? rp_err(RP_EINVAL, "--mode recompute needs --outputs PREFIX")
                                     : RP_OK;
        char out[RP_OPT_STRLEN + 64];
        if (s == RP_OK)
          s = rp_serve_recompute(&m, &t, o.threads, o.attention == RP_ATTN_FLASH,
                                 named(out, sizeof out, o.outputs, "recompute", "txt"));
      } else {
        s = run_modes(&o, &m, &t);
      }
      rp_trace_free(&t);
    }
    rp_chunk_free(&m);
  }
  return s == RP_OK ? 0 : rp_cli_fail("serve", s);
}
