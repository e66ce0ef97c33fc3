/* Writes one tiny GPT-2 in two formats into DIR: a ringpipe checkpoint (DIR/ck)
 * and an llm.c model file (DIR/model.bin), for check_safetensors.py to compare
 * with an independent reader. */
#include <stdio.h>

#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_model.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: st_tool DIR\n");
    return 2;
  }
  const rp_gpt_config cfg = {.L = 2, .C = 16, .NH = 2, .T = 8, .V = 40, .Vp = 64};
  const rp_stage_spec all = {0, 2, 1, 1};
  rp_chunk m;
  char path[1100];
  if (rp_chunk_init(&m, &cfg, &all) != RP_OK) goto fail;
  rp_chunk_init_weights(&m, 3);
  rp_ckpt_part part = {&m, m.params, m.params};  /* any floats will do for m/v */
  snprintf(path, sizeof path, "%s/ck", argv[1]);
  if (rp_ckpt_save(path, &part, 1, "\"step\":5,\"config\":{\"L\":2,\"C\":16,\"V\":40}") != RP_OK)
    goto fail;
  snprintf(path, sizeof path, "%s/model.bin", argv[1]);
  if (rp_llmc_save(path, &m) != RP_OK) goto fail;
  rp_chunk_free(&m);
  return 0;
fail:
  fprintf(stderr, "st_tool: %s\n", rp_errmsg());
  return 1;
}
