/* Loading a whole model for the inference-side subcommands (sample, eval). */
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_train.h"

rp_status rp_cli_load_model(const char *path, rp_chunk *m) {
  memset(m, 0, sizeof *m);  /* the caller may free it whatever happens */
  rp_train_opts o;
  RP_TRY(rp_opts_defaults(rp_train_opt_table, rp_train_opt_count, &o));
  int changed, T;
  o.seq = 1;
  RP_TRY(rp_init_config_into_opts(path, &o, &changed, &T));
  rp_gpt_config cfg = {.L = o.layers, .C = o.channels, .NH = o.heads, .T = T, .V = o.vocab,
                       .Vp = rp_pad_vocab(o.vocab)};
  RP_TRY(rp_chunk_init(m, &cfg, &(rp_stage_spec){0, cfg.L, 1, 1}));
  rp_status s = rp_load_weights(m, path);
  if (s != RP_OK) rp_chunk_free(m);
  return s;
}
