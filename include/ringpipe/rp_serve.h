/* Multi-turn agentic serving with a persistent K/V cache (after DualPath,
 * arXiv 2602.21548): a block store on disk, rate-limited links, the paper's
 * scheduler, synthetic and Mooncake traces, the metrics, a discrete-event
 * simulator at paper scale and the real engine on MPI ranks.
 *
 * Both the simulator (sim.c) and the real engine (engine.c) call the same
 * scheduler functions (sched.c) on the same engine-state structs, so what the
 * simulator predicts is what the engine does. docs/dualpath.md tells the story. */
#ifndef RP_SERVE_H
#define RP_SERVE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "rp_base.h"
#include "rp_model.h"

/* ------------------------------------------------------------------ store */

/* Full K/V blocks (RP_KV_BLOCK tokens x all layers) as files <dir>/<key>.kvb.
 * The key of block i is a chained hash of tokens [0, 64 (i+1)): the hash of
 * block i-1 mixed with block i's 64 tokens, so equal keys mean equal prefixes
 * (the file also holds the 64 tokens, checked on read, against collisions).
 * A file is a 4096-byte header (magic, key, sizes, the 64 tokens, one checksum
 * per layer) then the floats [L][2][64][C]; it is written to a temporary
 * name and renamed, so a reader sees a whole block or none, and concurrent
 * writers of one block leave one valid file. A corrupt or truncated block is a
 * miss. The index (an open-addressing hash set of the keys present) answers the
 * longest cached prefix of a prompt without touching the disk. */
typedef struct {
  char dir[512];
  int L, C;            /* the model's shape: a block is L * 2 * 64 * C floats */
  size_t layer_bytes;  /* 2 * 64 * C * 4: one layer's part of a block */
  uint64_t *keys;      /* index: open addressing, 0 = empty */
  size_t cap, count;
  int direct;          /* 1: reads use O_DIRECT; 0: page cache dropped after read */
  int direct_tried;
  void *hcache;        /* RP_KVS_HCACHE headers of blocks read layer by layer */
} rp_kv_store;
#define RP_KVS_HCACHE 64

#define RP_KVS_HEADER 4096
#define RP_KVS_MAX_LAYERS 470 /* header: 296 bytes + 8 per layer */

rp_status rp_kvs_open(rp_kv_store *s, const char *dir, int L, int C);
void rp_kvs_close(rp_kv_store *s);
/* Chained keys of the full blocks of tokens[0..n): keys[i] for block i
 * (n / 64 of them, returned). */
int rp_kvs_keys(const int32_t *tokens, int n, uint64_t *keys);
/* Blocks of the longest cached prefix (index lookups only; rescans the
 * directory for keys written by other processes when asked, rescan = 1). */
int rp_kvs_longest_prefix(rp_kv_store *s, const uint64_t *keys, int nkeys, int rescan);
/* Writes one block atomically (no-op if the index already has it). */
rp_status rp_kvs_put(rp_kv_store *s, uint64_t key, const int32_t *tokens64, const float *block);
/* Reads layer `layer` (or every layer: layer = -1) of block `key` into dst
 * (layer_bytes or L * layer_bytes) and checks its tokens and checksum (a
 * block's header is read with its layer 0 and remembered for its other
 * layers):
 * RP_EFORMAT for a corrupt / truncated / mismatched block (a miss, the
 * message says why), RP_EIO when absent. *bytes_read: bytes read from the
 * file. */
rp_status rp_kvs_read(rp_kv_store *s, uint64_t key, const int32_t *tokens64, int layer,
                      float *dst, size_t *bytes_read);
/* Removes a damaged block's file, so that the next writer of it persists it
 * again. */
void rp_kvs_drop(rp_kv_store *s, uint64_t key);
/* The block's file name (for tests that damage one). */
void rp_kvs_path(const rp_kv_store *s, uint64_t key, char *buf, size_t cap);

/* ------------------------------------------------------------------ links */

/* A link of `gbps` gigabits per second shared by every process that opens the
 * same name: a token bucket one burst deep whose state (when the link is next
 * free, bytes moved, busy time) lives in a small shared-memory file
 * (/dev/shm/ringpipe-link-<name>), updated with atomics. Sending n bytes
 * takes n / rate seconds of the link, after what is queued before it; the
 * caller sleeps until its bytes are through. gbps <= 0: unlimited (still
 * counted). */
typedef struct {
  _Alignas(64) volatile uint64_t next_free_ns; /* when the queued bytes are through */
  volatile uint64_t bytes, busy_ns, ops, queued_bytes;
} rp_link_state;

typedef struct {
  rp_link_state *st;
  double bytes_per_s;   /* 0: unlimited */
  char path[256];
  int owner;
} rp_link;

rp_status rp_link_open(rp_link *k, const char *name, double gbps, int create);
void rp_link_close(rp_link *k);
/* Takes n bytes through the link (sleeps until they are through). */
void rp_link_send(rp_link *k, size_t n);
/* The same in two halves, so that the real work (a file read) happens while
 * the bytes are on the link: reserve returns when they will be through, wait
 * sleeps until then. */
uint64_t rp_link_reserve(rp_link *k, size_t n);
void rp_link_wait(uint64_t end_ns);
/* Bytes waiting for or on the link now (the storage read queue). */
void rp_link_enqueue(rp_link *k, size_t n);
void rp_link_dequeue(rp_link *k, size_t n);
double rp_link_busy_s(const rp_link *k);
uint64_t rp_link_bytes(const rp_link *k);
uint64_t rp_now_ns(void);

/* -------------------------------------------------------------- scheduler */

/* What an engine reports (paper §6: queued sequences, tokens, read queue).
 * read_queue is the storage read queue of the engine's node in bytes. */
typedef struct {
  int node;
  int seqs;          /* sequences queued or running */
  long tokens;       /* tokens queued (PE: to prefill; DE: held in its cache) */
  double read_queue; /* bytes queued on the node's storage NIC */
} rp_engine_state;

typedef enum { RP_SCHED_PAPER = 0, RP_SCHED_ROUND_ROBIN = 1 } rp_sched_policy;
typedef enum { RP_READ_PE = 0, RP_READ_DE = 1, RP_READ_NONE = 2 } rp_read_side;

typedef struct {
  rp_sched_policy policy;
  long pe_token_limit;   /* skip PEs with more queued tokens than this */
  long de_token_limit;   /* skip DEs holding more tokens than this */
  double short_queue;    /* a node's read queue is "short" at or below this many bytes
                            (< 0: at or below the engines' mean) */
  int rr_next_pe, rr_next_de;
} rp_sched;

/* The PE for a request of `tokens` prefill tokens: among engines under the
 * token limit (all if none), those on nodes with a short read queue (all if
 * none), the least loaded (fewest queued tokens, then sequences, then lowest
 * index). Round robin takes the next one. Returns an index into pe[]. */
int rp_sched_pick_pe(rp_sched *s, const rp_engine_state *pe, int npe, long tokens);
/* The DE likewise (load: tokens held, then sequences). */
int rp_sched_pick_de(rp_sched *s, const rp_engine_state *de, int nde, long tokens);
/* Which side reads a request's hit blocks: the one whose node has the shorter
 * storage read queue (PE on a tie). dual = 0 (Basic): always the PE. */
rp_read_side rp_sched_read_side(const rp_engine_state *pe, const rp_engine_state *de, int dual);

/* ----------------------------------------------------------------- traces */

/* One turn: its prompt is the previous context plus `append` new tokens; the
 * reply is forced to `gen` tokens. arrive < 0: right after the previous turn
 * (an agent); >= 0: at that time (seconds, a replayed online trace). hit:
 * tokens of the prompt already in the store when the turn starts, for
 * replayed traces (-1: whatever the store holds). */
typedef struct {
  int append, gen;
  double arrive;
  long prompt, hit;    /* for replayed traces; synthetic ones derive them */
  uint64_t *hash_ids;  /* replayed traces: the prompt's blocks (equal ids, equal tokens) */
  int nhash, hash_tokens; /* ids and tokens per id */
} rp_turn;

typedef struct {
  int nturns;
  rp_turn *turns;
  uint64_t seed;     /* the appended tokens' seed */
} rp_agent;

typedef struct {
  int nagents;
  rp_agent *agents;
  long max_context;
} rp_trace;

/* The paper's Table 2 data sets: 32K / 48K / 64K. */
typedef struct {
  const char *name;
  long max_context;
  int turns, append, gen;
} rp_trace_stats;
const rp_trace_stats *rp_trace_table2(const char *name); /* "32k", "48k", "64k"; NULL if unknown */

/* n agents with st's statistics, token counts divided by `scale`, turns drawn
 * around the mean (uniform in [0.5, 1.5] x mean, at most max_turns when > 0),
 * each turn's append and gen drawn likewise; a trajectory stops before its
 * context would pass max_context / scale. */
rp_status rp_trace_synth(rp_trace *t, const rp_trace_stats *st, int n, double scale,
                         int max_turns, uint64_t seed);
/* Mooncake-format JSONL: {"timestamp": ms, "input_length": n,
 * "output_length": m, "hash_ids": [...]} per line; hash_ids are blocks of
 * block_tokens tokens; a request's hit is its longest run of leading ids seen
 * in earlier requests. Each request becomes a one-turn agent arriving at its
 * timestamp. Lengths and block_tokens are divided by scale (>= 1) for small
 * runs. */
rp_status rp_trace_mooncake(rp_trace *t, const char *path, int block_tokens, double scale);
/* Online arrivals: agent a's first turn arrives at the a-th event of a Poisson
 * process of `rate` agents per second (its later turns follow its replies). */
void rp_trace_poisson(rp_trace *t, double rate, uint64_t seed);
void rp_trace_free(rp_trace *t);
long rp_trace_total_turns(const rp_trace *t);

/* ---------------------------------------------------------------- metrics */

typedef struct {
  int agent, turn, pe, de;
  rp_read_side side;
  long prompt, hit, gen;
  double t_arrive, t_first, t_decode, t_done;  /* seconds since the start: arrival, first
                                                 token, decode start, last token */
} rp_turn_record;

typedef struct {
  int nnodes;
  double jct, ttft_mean, ttft_p99, tpot_mean;
  double hit_rate;            /* hit tokens / prompt tokens */
  double snic_max_over_avg;   /* storage NIC bytes: max over nodes / mean */
  double snic_util_mean;      /* busy / JCT, averaged over nodes */
  double *snic_bytes, *snic_busy; /* per node */
  double net_bytes;           /* compute-network bytes (DE->PE forwarding + PD handoff) */
  double path_bytes[3];       /* storage->PE, storage->DE (forwarded to the PE), PE->DE hand-off */
  double net_busy_max;        /* the busiest compute-network input link's busy seconds */
} rp_serve_summary;

/* Summary of records (and per-node storage bytes / busy seconds). */
void rp_serve_summarize(const rp_turn_record *r, long n, int nnodes, const double *snic_bytes,
                        const double *snic_busy, double net_bytes, rp_serve_summary *out);
void rp_serve_summary_free(rp_serve_summary *s);
rp_status rp_serve_write_jsonl(const char *path, const rp_turn_record *r, long n);
void rp_serve_print_summary(FILE *f, const char *label, const rp_serve_summary *s);

/* SVG figures (no plotting library needed): the ladder's JCT bars with
 * their SNIC balance, and the two loading paths of a Basic and a DualPath run
 * with the bytes each path carried. */
rp_status rp_serve_svg_ladder(const char *path, const char *title, const char *const *labels,
                              const rp_serve_summary *sums, int n);
rp_status rp_serve_svg_paths(const char *path, const rp_serve_summary *basic,
                             const rp_serve_summary *dual);

/* A Chrome trace (chrome://tracing, Perfetto): complete events per track. */
typedef struct {
  FILE *f;
  int first;
} rp_ctrace;
rp_status rp_ctrace_open(rp_ctrace *t, const char *path);
void rp_ctrace_event(rp_ctrace *t, const char *name, int pid, int tid, double t0, double t1);
void rp_ctrace_close(rp_ctrace *t);

/* -------------------------------------------------------------- simulator */

typedef enum { RP_MODE_BASIC = 0, RP_MODE_DUALPATH = 1, RP_MODE_ORACLE = 2 } rp_serve_mode;
const char *rp_serve_mode_name(rp_serve_mode m);

typedef struct {
  int p_nodes, d_nodes, gpus_per_node;
  double snic_gbps;          /* one storage NIC per node */
  double cnic_gbps;          /* compute NIC per GPU */
  double kv_bytes_per_token;
  double prefill_tps;        /* miss tokens per second per PE */
  double prefill_ctx_s;      /* extra prefill seconds per (miss token x 1K context tokens): attention */
  double tpot_s;             /* decode step time per DE */
  int de_batch;              /* sequences decoded together per DE */
  int layers;                /* layer-wise streaming granularity */
  int pe_stage;              /* without layer-wise: prefixes a PE can hold in HBM at once
                                (loading or waiting for compute); 0: no limit */
  rp_serve_mode mode;
  int layerwise;             /* 1: a layer's KV arrives while the previous layer computes */
  rp_sched_policy policy;
  long pe_token_limit, de_token_limit;
  double short_queue_bytes;
} rp_sim_config;

/* The ablation ladder (paper §ablation): Basic (PE reads, whole prefix before
 * compute, round robin), + layer-wise streaming, + dual paths, + the paper's
 * scheduler (= DualPath), and Oracle. */
typedef struct {
  const char *label;
  rp_serve_mode mode;
  int layerwise;
  rp_sched_policy policy;
} rp_serve_rung;
enum { RP_SERVE_RUNGS = 5 };
extern const rp_serve_rung rp_serve_ladder[RP_SERVE_RUNGS];

typedef struct {
  rp_turn_record *rec;
  long nrec;
  rp_serve_summary sum;
} rp_sim_result;

/* Runs the trace through the modelled cluster (offline when every turn's
 * arrive < 0: all agents start at 0). */
rp_status rp_sim_run(const rp_sim_config *cfg, const rp_trace *tr, rp_sim_result *out,
                     rp_ctrace *timeline);
void rp_sim_result_free(rp_sim_result *r);

/* ------------------------------------------------------------ real engine */

/* World rank 0 drives (traces, scheduler, metrics), ranks 1..npe are prefill
 * engines, the next nde decode engines; ranks are grouped into nodes of
 * node_size (PEs first, then DEs), each node with one storage link. */
typedef struct {
  int npe, nde, node_size;
  rp_serve_mode mode;
  int layerwise;
  rp_sched_policy policy;
  double storage_gbps;   /* per node storage NIC (token bucket on block reads) */
  double net_gbps;       /* per engine compute-network input, 0: unlimited */
  int de_slots;          /* sequences a DE decodes together */
  int threads;           /* compute threads per rank */
  int attention_flash;
  const char *store;     /* block directory shared by all nodes */
  const char *outputs;   /* "agent turn tokens..." per turn, sorted (rank 0), or NULL */
  const char *jsonl;     /* per-turn records, or NULL */
  const char *timeline;  /* Chrome trace, or NULL */
} rp_engine_opts;

/* Runs the trace on the MPI world (every rank calls it with the same model
 * and trace). The appended tokens of agent a's turn k are drawn from the
 * agent's seed; replies are greedy and forced to the turn's length. Rank 0
 * fills *sum. */
rp_status rp_serve_run(const rp_engine_opts *o, const rp_chunk *m, const rp_trace *t,
                       rp_serve_summary *sum, int *direct_io);
/* The reference: every turn generated by recomputing the whole context for
 * each token (rp_generate_recompute), written like rp_serve_run's outputs. */
rp_status rp_serve_recompute(const rp_chunk *m, const rp_trace *t, int threads,
                             int attention_flash, const char *outputs);
/* "agent turn token token ..." per turn, agents and turns in order; out[i]: the
 * reply of the trace's i-th turn (agent by agent). */
rp_status rp_serve_write_outputs(const char *path, const rp_trace *t, int32_t *const *out);
/* Appended tokens of a turn (deterministic in the agent's seed). */
void rp_serve_append_tokens(const rp_agent *a, int turn, int V, int32_t *out);

#endif
