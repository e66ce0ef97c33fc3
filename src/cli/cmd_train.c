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
                        "384-wide model on the built-in Shakespeare excerpt.",
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
  /* A failure inside the step loop may be on one rank only: the others would
   * wait in a collective forever, so take the fatal path (MPI_Abort). */
  if (s != RP_OK && t.grid.world_size > 1) rp_fatal("train: %s", rp_errmsg());
  rc = s == RP_OK ? 0 : rp_cli_fail("train", s);
  rp_trainer_free(&t);
  return rc;
}
