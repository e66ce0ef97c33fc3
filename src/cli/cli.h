/* Subcommands of the ringpipe binary and their shared helpers. */
#ifndef RP_CLI_H
#define RP_CLI_H

#include "ringpipe/rp_base.h"
#include "ringpipe/rp_options.h"

int rp_cmd_train(int argc, char **argv);
int rp_cmd_sample(int argc, char **argv);
int rp_cmd_eval(int argc, char **argv);
int rp_cmd_prepare(int argc, char **argv);
int rp_cmd_report(int argc, char **argv);
int rp_cmd_bench(int argc, char **argv);
/* ringpipe bench gemm (cmd_bench_gemm.c), argv past "gemm" */
int rp_bench_gemm(int argc, char **argv);
/* ringpipe bench fma (cmd_bench_fma.c), argv past "fma" */
int rp_bench_fma(int argc, char **argv);
int rp_cmd_sim(int argc, char **argv);
int rp_cmd_sft(int argc, char **argv);
int rp_cmd_grpo(int argc, char **argv);
int rp_cmd_ppo(int argc, char **argv);
int rp_cmd_serve(int argc, char **argv);
int rp_cmd_sim_serve(int argc, char **argv);

/* ringpipe sim --advise (cmd_sim_advise.c): the options it reads; sizes < 0
 * are unknown (taken from --from, or defaults). Returns the exit status. */
#include "ringpipe/rp_schedule.h"
typedef struct {
  rp_costs costs;
  int pp, microbatches, batch, max_m, top, layers;
  double memory_limit, act_mib, act_keep_mib, wstash_mib, msg_mib;
  const char *from, *memory_like;
} rp_sim_advise_args;
int rp_sim_advise(const rp_sim_advise_args *o);
/* The last "pipeline" line of a run's metrics.jsonl (malloc'ed); RP_EIO /
 * RP_EFORMAT naming the file (cmd_sim_advise.c). */
rp_status rp_sim_last_pipeline_line(const char *path, char **line);
/* ringpipe sim's bytes per rank (cmd_sim_arena.c): the arena plan from
 * per-chunk sizes, those of a run's metrics (`from`: what its executor
 * planned, exactly) or one micro-batch's MiB for a rank's whole share
 * (act_mib < 0: none given, nothing printed; keep_mib < 0: all of it kept to W;
 * wstash_mib < 0: half of act_mib). */
typedef struct {
  const char *from;
  double act_mib, keep_mib, wstash_mib, msg_mib;
} rp_sim_sizes;
rp_status rp_sim_print_arena(const rp_schedule *s, const rp_sim_sizes *z);
/* The largest rank's arena in MiB; -1 without sizes or when they do not fit
 * the schedule (a --from run of another --pp or --vpp). */
double rp_sim_arena_peak_mib(const rp_schedule *s, const rp_sim_sizes *z);

/* Exit status for a failed status: 2 for bad input (options, files), 1 otherwise. */
int rp_cli_exit_code(rp_status s);
/* Prints "ringpipe <cmd>: error: <message>" once (world rank 0) and returns the
 * exit code. Every rank must call it with the same status. */
int rp_cli_fail(const char *cmd, rp_status s);
/* Parses options for a subcommand; prints help (rank 0) and returns 0 via *done,
 * or an exit code for bad options. Returns -1 when the caller should go on. */
int rp_cli_parse(const char *cmd, const char *usage, const char *desc, const rp_opt *t, int n,
                 void *opts, int argc, char **argv);

/* The whole model (all layers, embeddings, head) from a checkpoint directory or
 * an llm.c model file, shaped by the file's own config. On failure *m is left
 * zeroed (rp_chunk_free on it is a no-op). */
#include "ringpipe/rp_model.h"
rp_status rp_cli_load_model(const char *path, rp_chunk *m);

#endif
