/* ringpipe train */
#include <stdio.h>

#include "cli.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_train.h"

int rp_cmd_train(int argc, char **argv) {
  rp_train_opts o;
  int rc = rp_cli_parse("train",
                        "ringpipe train [--config FILE] [options]   "
                        "(mpirun -n P ringpipe train ... for dp/pp/cp)",
                        "Train a GPT-2 style model. With no options it trains a 6-layer, "
                        "384-wide model on the built-in Shakespeare excerpt. SIGTERM, SIGINT "
                        "or SIGUSR1 (under mpirun: SIGUSR1 to mpirun) finish the step, save "
                        "and exit. Exit status: 0 done or stopped by a signal, 2 bad input "
                        "(options, files, output paths), 3 a rank aborted the job (e.g. "
                        "--comm-timeout), 4 training diverged (non-finite loss or gradient "
                        "norm; the last checkpoint is kept).",
                        rp_train_opt_table, rp_train_opt_count, &o, argc, argv);
  if (rc >= 0) return rc;
  rp_trainer t;
  rp_status s = rp_trainer_init(&t, &o);
  if (s != RP_OK) {
    rc = rp_cli_fail("train", s);
    rp_trainer_free(&t);
    return rc;
  }
  s = rp_trainer_run(&t);
  /* Every failure the step loop returns was agreed by all ranks (one rank's
   * alone becomes everyone's at the next agreement), so one message is printed
   * and every rank exits alike; what cannot be agreed takes rp_fatal inside. */
  rc = s == RP_OK ? 0 : rp_cli_fail("train", s);
  if (s != RP_OK && t.diverged) rc = RP_EXIT_DIVERGED;
  rp_trainer_free(&t);
  return rc;
}
