/* ringpipe: one binary, one subcommand per job. MPI is initialised whether the
 * binary runs alone or under mpirun. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"

typedef struct {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *help;
} subcommand;

static const subcommand commands[] = {
    {"train", rp_cmd_train, "train a GPT model (single rank or under mpirun)"},
    {"eval", rp_cmd_eval, "validation loss of a checkpoint on a data set"},
    {"sample", rp_cmd_sample, "generate text from a checkpoint"},
    {"prepare", rp_cmd_prepare, "turn a UTF-8 text file into train/val token shards"},
    {"report", rp_cmd_report, "a self-contained HTML report of a run directory"},
    {"sft", rp_cmd_sft, "supervised fine-tuning on a verifiable-reward task (loss on answers)"},
    {"grpo", rp_cmd_grpo, "RL with verifiable rewards: GRPO (group-relative advantages)"},
    {"ppo", rp_cmd_ppo, "RL with verifiable rewards: PPO (value head, GAE) for comparison"},
    {"sim", rp_cmd_sim, "simulate pipeline schedules: timeline, bubble, memory"},
    {"serve", rp_cmd_serve, "multi-turn agentic serving on MPI ranks: Basic | DualPath | Oracle"},
    {"sim-serve", rp_cmd_sim_serve, "simulate agentic serving with a persistent KV cache at scale"},
    {"bench", rp_cmd_bench, "benchmarks: gemm | attention | train | fma"},
};
static const int ncommands = sizeof commands / sizeof commands[0];

int rp_cli_exit_code(rp_status s) {
  return (s == RP_EINVAL || s == RP_EIO || s == RP_EFORMAT) ? 2 : 1;
}

int rp_cli_fail(const char *cmd, rp_status s) {
  if (rp_mpi_world_rank() == 0) {
    fprintf(stderr, "ringpipe %s: error: %s\n", cmd, rp_errmsg()[0] ? rp_errmsg() : rp_status_name(s));
    fflush(stderr);
  }
  return rp_cli_exit_code(s);
}

/* --isa is taken by main() for every subcommand, before its own options. */
static void print_isa_help(FILE *f) {
  fprintf(f, "\noptions of every command:\n"
             "  --isa LEVEL  ceiling for the SIMD kernels, scalar|avx2|avx512|avx512bf16|amx (also\n"
             "               %s=LEVEL); default: this CPU's best, %s; above it is an error\n",
          RP_ISA_ENV, rp_isa_name(rp_isa_cpu()));
}

int rp_cli_parse(const char *cmd, const char *usage, const char *desc, const rp_opt *t, int n,
                 void *opts, int argc, char **argv) {
  int help = 0;
  rp_status s = rp_opts_parse(t, n, opts, argc, argv, &help, NULL, NULL);
  if (help) {
    if (rp_mpi_world_rank() == 0) {
      rp_opts_help(stdout, usage, desc, t, n);
      print_isa_help(stdout);
    }
    return 0;
  }
  if (s != RP_OK) {
    int code = rp_cli_fail(cmd, s);
    if (rp_mpi_world_rank() == 0)
      fprintf(stderr, "run 'ringpipe %s --help' for the options\n", cmd);
    return code;
  }
  return -1;
}

static void usage(FILE *f) {
  fprintf(f, "usage: ringpipe <command> [options]   (ringpipe <command> --help for details)\n\n");
  fprintf(f, "ringpipe trains small GPT models on CPUs with pipeline, context and data\n"
             "parallelism over MPI. Commands:\n");
  for (int i = 0; i < ncommands; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\nexample: ringpipe train --steps 200        (built-in Shakespeare excerpt)\n"
             "         mpirun -n 2 ringpipe train --steps 50\n");
  print_isa_help(f);
}

/* Takes "--isa LEVEL" / "--isa=LEVEL" out of argv (any position after the
 * command; the last one counts) into *level; RP_EINVAL when it has no value. */
static rp_status take_isa_flag(int *argc, char **argv, const char **level) {
  int out = 2;
  for (int i = 2; i < *argc; i++) {
    if (strcmp(argv[i], "--isa") == 0) {
      if (i + 1 >= *argc)
        return rp_err(RP_EINVAL, "--isa needs a value: scalar|avx2|avx512|avx512bf16|amx");
      *level = argv[++i];
    } else if (strncmp(argv[i], "--isa=", 6) == 0) {
      *level = argv[i] + 6;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  argv[out] = NULL;
  return RP_OK;
}

/* A subcommand's --help needs no working BLAS. */
static int asks_help(int argc, char **argv) {
  for (int i = 2; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
  return 0;
}

/* The instruction-set ceiling from --isa or RINGPIPE_ISA, and OpenBLAS's core
 * against the CPU (rp_blas_check_cpu), agreed by every rank (a rank on another
 * CPU may reject what the others accept): bad values end the run at start-up
 * with one message and status 2 rather than later in a kernel. */
static rp_status apply_isa(int *argc, char **argv) {
  const char *level = NULL;
  rp_status s = take_isa_flag(argc, argv, &level);
  if (s == RP_OK) s = level ? rp_isa_request(level, "--isa") : rp_isa_init();
  if (s == RP_OK && !asks_help(*argc, argv)) s = rp_blas_check_cpu();
  return rp_grid_agree(MPI_COMM_WORLD, s);
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("ringpipe 0.1.0\n");
    return 0;
  }
  const subcommand *cmd = NULL;
  for (int i = 0; i < ncommands; i++)
    if (strcmp(argv[1], commands[i].name) == 0) cmd = &commands[i];
  if (!cmd) {
    fprintf(stderr, "ringpipe: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
  }
  if (rp_mpi_init(&argc, &argv) != RP_OK) {
    fprintf(stderr, "ringpipe: %s\n", rp_errmsg());
    return 1;
  }
  rp_status is = apply_isa(&argc, argv);
  if (is != RP_OK) {
    int code = rp_cli_fail(cmd->name, is);
    rp_mpi_finalize();
    return code;
  }
  int rc = cmd->fn(argc - 2, argv + 2);
  rp_mpi_finalize();
  return rc;
}
