/* ringpipe sample: generate text from a checkpoint. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_train.h"

typedef struct {
  char checkpoint[RP_OPT_STRLEN], prompt[RP_OPT_STRLEN], tokenizer[RP_OPT_STRLEN];
  rp_attn_kind attention;
  int tokens, top_k, seed, threads, kv_cache;
  float temperature, top_p;
} sample_opts;

#define O(f) offsetof(sample_opts, f)
#define E(f) RP_OPT_ENUM_FIELD(sample_opts, f)
static const rp_opt sample_table[] = {
    {"checkpoint", RP_OPT_STR, O(checkpoint), "", 0, 0, NULL,
     "checkpoint directory (e.g. runs/default/ckpt) or an llm.c model .bin"},
    {"prompt", RP_OPT_STR, O(prompt), "\n", 0, 0, NULL, "text to continue"},
    {"tokens", RP_OPT_INT, O(tokens), "200", 1, 1000000, NULL, "tokens to generate"},
    {"temperature", RP_OPT_FLOAT, O(temperature), "0.8", 0, 100, NULL,
     "sampling temperature (0: greedy)"},
    {"top-k", RP_OPT_INT, O(top_k), "40", 0, 16777216, NULL, "sample among the k likeliest (0: all)"},
    {"top-p", RP_OPT_FLOAT, O(top_p), "1", 0, 1, NULL,
     "sample among the likeliest tokens holding this much probability (1: all)"},
    {"kv-cache", RP_OPT_BOOL, O(kv_cache), "1", 0, 0, NULL,
     "decode through the K/V cache, O(context) per token (--kv-cache=0: recompute the whole "
     "context for every token, the reference)"},
    {"seed", RP_OPT_INT, O(seed), "1337", 0, 2147483647, NULL, "sampling seed"},
    {"tokenizer", RP_OPT_STR, O(tokenizer), "", 0, 0, NULL,
     "llm.c gpt2_tokenizer.bin for decoding a GPT-2 vocabulary (default: bytes)"},
    {"attention", RP_OPT_ENUM, E(attention), "naive", 0, 0, "naive|flash", "attention kernel"},
    {"threads", RP_OPT_INT, O(threads), "0", 0, 1024, NULL, "compute threads (0: all cores)"},
};
#undef O
#undef E

int rp_cmd_sample(int argc, char **argv) {
  sample_opts o;
  int rc = rp_cli_parse("sample", "ringpipe sample --checkpoint DIR [--prompt TEXT] [options]",
                        "Generate text from a trained model.", sample_table,
                        sizeof sample_table / sizeof *sample_table, &o, argc, argv);
  if (rc >= 0) return rc;
  if (rp_mpi_world_rank() != 0) return 0;
  if (!o.checkpoint[0])
    return rp_cli_fail("sample", rp_err(RP_EINVAL, "--checkpoint DIR is required"));
  rp_chunk m;
  rp_status s = rp_cli_load_model(o.checkpoint, &m);
  if (s != RP_OK) return rp_cli_fail("sample", s);
  rp_tokenizer *tk = NULL;
  s = o.tokenizer[0] ? rp_tokenizer_load_gpt2(&tk, o.tokenizer) : rp_tokenizer_bytes(&tk);
  if (s == RP_OK && rp_tokenizer_vocab(tk) < m.cfg.V && !o.tokenizer[0])
    s = rp_err(RP_EINVAL, "the model's vocabulary is %d tokens, not bytes; pass --tokenizer "
               "gpt2_tokenizer.bin", m.cfg.V);
  size_t plen = strlen(o.prompt);
  int32_t *ids = malloc((plen + 1) * sizeof *ids), *out = malloc(o.tokens * sizeof *out);
  size_t n_prompt = 0;
  if (s == RP_OK && !rp_tokenizer_can_encode(tk)) {
    /* llm.c's tokenizer file has no merges: start from end-of-text instead. */
    fprintf(stderr, "note: the GPT-2 tokenizer file cannot encode text; sampling starts from "
            "the end-of-text token and --prompt is not used\n");
    ids[0] = rp_tokenizer_eot(tk) >= 0 ? rp_tokenizer_eot(tk) : 0;
    n_prompt = 1;
    o.prompt[0] = '\0';
  } else if (s == RP_OK) {
    s = rp_tokenizer_encode(tk, o.prompt, plen, ids, plen + 1, &n_prompt);
  }
  rp_pool *pool = NULL;
  double seconds = 0;
  if (s == RP_OK) s = rp_pool_create(&pool, o.threads > 0 ? o.threads : 2, 1);
  if (s == RP_OK) {
    rp_exec x = {.pool = pool,
                 .attn = rp_attn_of_kind(o.attention)};
    rp_rng rng;
    rp_rng_seed(&rng, (uint64_t)o.seed);
    const rp_sample_params sp = {.temperature = o.temperature, .top_k = o.top_k,
                                 .top_p = o.top_p, .max_new = o.tokens, .stop = -1};
    double t0 = rp_now();
    s = (o.kv_cache ? rp_generate : rp_generate_recompute)(&m, &x, ids, (int)n_prompt, out,
                                                           o.tokens, &sp, &rng);
    seconds = rp_now() - t0;
  }
  if (s == RP_OK) {
    size_t cap = (size_t)o.tokens * 64 + 1;
    char *text = malloc(cap);
    rp_tokenizer_decode(tk, out, o.tokens, text, cap);
    printf("%s%s\n", o.prompt, text);
    free(text);
    fprintf(stderr, "sampled %d tokens in %.2f s: %.1f tokens/s (%s)\n", o.tokens, seconds,
            o.tokens / seconds, o.kv_cache ? "KV cache" : "full recompute per token");
  }
  free(ids);
  free(out);
  if (pool) rp_pool_destroy(pool);
  if (tk) rp_tokenizer_free(tk);
  rp_chunk_free(&m);
  return s == RP_OK ? 0 : rp_cli_fail("sample", s);
}
