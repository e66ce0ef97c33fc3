/* hf_logits DIR ID...: prints the logits of the prompt through the model in DIR
 * as JSON ({"V":..,"logits":[[..],..]}), for check_hf_transformers.py. */
#include <stdio.h>
#include <stdlib.h>

#include "hf_util.h"
#include "ringpipe/rp_json.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: hf_logits DIR ID...\n");
    return 2;
  }
  int T = argc - 2;
  int32_t *ids = malloc((size_t)T * sizeof *ids);
  for (int t = 0; t < T; t++) ids[t] = atoi(argv[2 + t]);
  rp_gpt_config cfg;
  float *lg = hf_prompt_logits(argv[1], ids, T, &cfg);
  if (!lg) {
    fprintf(stderr, "hf_logits: %s\n", rp_errmsg());
    return 2;
  }
  rp_jw w;
  rp_jw_init(&w);
  rp_jw_obj(&w);
  rp_jw_key(&w, "V"), rp_jw_int(&w, cfg.V);
  rp_jw_key(&w, "logits"), rp_jw_arr(&w);
  for (int t = 0; t < T; t++) {
    rp_jw_arr(&w);
    for (int v = 0; v < cfg.V; v++) rp_jw_num(&w, lg[(size_t)t * cfg.V + v], 9);
    rp_jw_arr_end(&w);
  }
  rp_jw_arr_end(&w);
  rp_jw_obj_end(&w);
  rp_status s = rp_jw_fputs_line(&w, stdout);
  rp_jw_free(&w);
  free(lg);
  free(ids);
  return s == RP_OK ? 0 : 2;
}
