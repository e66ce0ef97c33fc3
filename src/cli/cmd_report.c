/* ringpipe report RUN_DIR: the run's HTML report. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_report.h"

typedef struct {
  char run[RP_OPT_STRLEN], out[RP_OPT_STRLEN];
} report_opts;

static const rp_opt report_table[] = {
    {"run", RP_OPT_STR, offsetof(report_opts, run), "", 0, 0, NULL,
     "run directory (the --out of train, sft, grpo or ppo); also the first argument"},
    {"out", RP_OPT_STR, offsetof(report_opts, out), "", 0, 0, NULL,
     "HTML file to write (default RUN_DIR/report.html)"},
};

int rp_cmd_report(int argc, char **argv) {
  report_opts o;
  /* `ringpipe report DIR [--out FILE]`: the directory may come first, bare */
  const char *bare = argc > 0 && argv[0][0] != '-' ? argv[0] : NULL;
  int rc = rp_cli_parse("report", "ringpipe report RUN_DIR [--out FILE]",
                        "Write a self-contained HTML report of a run: loss and validation "
                        "curves, tokens/s and MFU, memory by category against the formulas, the "
                        "pipeline timeline measured and simulated, RL reward and accuracy.",
                        report_table, 2, &o, argc - (bare != NULL), argv + (bare != NULL));
  if (rc < 0 && bare) snprintf(o.run, sizeof o.run, "%s", bare);
  if (rc >= 0) return rc;
  if (!o.run[0])
    return rp_cli_fail("report", rp_err(RP_EINVAL, "give the run directory: ringpipe report DIR"));
  if (rp_mpi_world_rank() != 0) return 0;
  char out[RP_OPT_STRLEN + 16];
  if (o.out[0])
    snprintf(out, sizeof out, "%s", o.out);
  else
    snprintf(out, sizeof out, "%s/report.html", o.run);
  rp_status s = rp_report_write(o.run, out);
  if (s != RP_OK) return rp_cli_fail("report", s);
  printf("wrote %s\n", out);
  return 0;
}
