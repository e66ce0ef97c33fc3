/* Stand-alone `ringpipe sft|grpo|ppo` for the rl tests and tools/rl_demo.sh
 * while (or where) the real binary's dispatch table lacks them: the same
 * rp_cmd_* from src/cli/cmd_rl.c, with the two CLI helpers it needs. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_grid.h"

int rp_cmd_sft(int argc, char **argv);
int rp_cmd_grpo(int argc, char **argv);
int rp_cmd_ppo(int argc, char **argv);

int rp_cli_fail(const char *cmd, rp_status s) {
  if (rp_mpi_world_rank() == 0)
    fprintf(stderr, "ringpipe %s: error: %s\n", cmd,
            rp_errmsg()[0] ? rp_errmsg() : rp_status_name(s));
  return (s == RP_EINVAL || s == RP_EIO || s == RP_EFORMAT) ? 2 : 1;
}

int rp_cli_parse(const char *cmd, const char *usage, const char *desc, const rp_opt *t, int n,
                 void *opts, int argc, char **argv) {
  int help = 0;
  rp_status s = rp_opts_parse(t, n, opts, argc, argv, &help, NULL, NULL);
  if (help) {
    if (rp_mpi_world_rank() == 0) rp_opts_help(stdout, usage, desc, t, n);
    return 0;
  }
  return s == RP_OK ? -1 : rp_cli_fail(cmd, s);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s sft|grpo|ppo [options]\n", argv[0]);
    return 2;
  }
  int (*fn)(int, char **) = strcmp(argv[1], "sft") == 0    ? rp_cmd_sft
                            : strcmp(argv[1], "grpo") == 0 ? rp_cmd_grpo
                            : strcmp(argv[1], "ppo") == 0  ? rp_cmd_ppo
                                                           : NULL;
  if (!fn) {
    fprintf(stderr, "unknown command '%s'; use sft, grpo or ppo\n", argv[1]);
    return 2;
  }
  if (rp_mpi_init(&argc, &argv) != RP_OK) {
    fprintf(stderr, "%s\n", rp_errmsg());
    return 1;
  }
  int rc = fn(argc - 2, argv + 2);
  rp_mpi_finalize();
  return rc;
}
