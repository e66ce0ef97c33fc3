/* ringpipe serve: placeholder until the engine lands in this branch. */
#include "cli.h"
int rp_cmd_serve(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return rp_cli_fail("serve", rp_err(RP_EINVAL, "not built yet"));
}
