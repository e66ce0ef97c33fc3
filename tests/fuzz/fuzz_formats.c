/* Fuzz targets for the ecosystem formats: text through GPT-2's pre-tokeniser
 * and BPE (the committed GPT-2 table), and Hugging Face config.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_targets.h"
#include "fuzz_util.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_data.h"

/* The GPT-2 table of tests/fixtures, loaded once (NULL if it is not there). */
static rp_tokenizer *gpt2_table(void) {
  static rp_tokenizer *tk;
  static int tried;
  if (tried) return tk;
  tried = 1;
  const char *root = getenv("RINGPIPE_SOURCE_ROOT");
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/fixtures/gpt2_tokens/gpt2_tokenizer.bin",
           root ? root : ".");
  if (rp_tokenizer_load_gpt2(&tk, path) != RP_OK) tk = NULL;
  return tk;
}

/* Any bytes encode (invalid UTF-8 included), and the ids spell the input back
 * exactly; a difference is a bug and aborts. */
int rp_fuzz_bpe(const uint8_t *data, size_t size) {
  rp_tokenizer *tk = gpt2_table();
  if (!tk) return 0;
  int32_t *ids = malloc((size ? size : 1) * sizeof *ids);
  size_t n = 0, at = 0;
  if (!ids) return 0;
  if (rp_tokenizer_encode(tk, (const char *)data, size, ids, size, &n) != RP_OK) abort();
  for (size_t i = 0; i < n; i++) {
    size_t l;
    const char *b = rp_tokenizer_token(tk, ids[i], &l);
    if (!b || ids[i] == rp_tokenizer_eot(tk) || at + l > size || memcmp(b, data + at, l)) abort();
    at += l;
  }
  if (at != size) abort();
  free(ids);
  return 1;
}

/* config.json of a Hugging Face folder (beside an empty model.safetensors, so
 * that only the config decides). Accepted: a GPT-2 ringpipe computes exactly. */
int rp_fuzz_hf_config(const uint8_t *data, size_t size) {
  const char *base = getenv("TMPDIR");
  char dir[512], conf[600], model[600];
  snprintf(dir, sizeof dir, "%s/rp_fuzz_hf_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(dir)) return 0;
  snprintf(conf, sizeof conf, "%s/config.json", dir);
  snprintf(model, sizeof model, "%s/model.safetensors", dir);
  FILE *f = fopen(conf, "wb"), *m = fopen(model, "wb");
  int ok = 0;
  if (f && m && fwrite(data, 1, size, f) == size) {
    fclose(f), fclose(m);
    f = m = NULL;
    rp_gpt_config c;
    ok = rp_hf_is_folder(dir) && rp_hf_read_config(dir, &c) == RP_OK;
  }
  if (f) fclose(f);
  if (m) fclose(m);
  unlink(conf);
  unlink(model);
  rmdir(dir);
  return ok;
}
