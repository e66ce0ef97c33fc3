/* Hugging Face GPT-2 folders: a tiny model written by transformers itself
 * (tests/fixtures/hf_gpt2, made by tools/make_hf_fixture.py) gives the logits
 * transformers computed, within 1e-5, in F32, F16 and BF16, with and without
 * the "transformer." prefix and lm_head; what ringpipe cannot compute exactly
 * is refused with the reason; checkpoints carry a config.json that reads back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hf_util.h"
#include "io_test_util.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_train.h"

#define TOL 1e-5

static char fixture[1024];

static void fixture_path(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", fixture, name);
}

static void expect_msg(const char *a) {
  if (!strstr(rp_errmsg(), a)) fail_msg("message '%s' lacks '%s'", rp_errmsg(), a);
}

/* Reads a whole tensor of expected.safetensors (F32 or I32: 4 bytes each). */
static void *read_expected(const char *name, size_t *n) {
  char path[1100];
  fixture_path(path, sizeof path, "expected.safetensors");
  rp_st_file f;
  assert_int_equal(rp_st_open(&f, path), RP_OK);
  const rp_st_entry *e = rp_st_find(&f, name);
  assert_non_null(e);
  *n = (size_t)(e->end - e->begin) / 4;
  void *buf = malloc(e->end - e->begin);
  assert_int_equal(rp_st_read(&f, e, 0, buf, e->end - e->begin), RP_OK);
  rp_st_close(&f);
  return buf;
}

/* Forward of the fixture prompt through the model in `dir`; max |difference| to
 * transformers' logits relative to max(1, |ref|). */
static double logits_error(const char *variant) {
  char dir[1100], key[64];
  fixture_path(dir, sizeof dir, variant);
  rp_gpt_config cfg;
  assert_int_equal(rp_hf_read_config(dir, &cfg), RP_OK);
  assert_int_equal(cfg.L, 2);
  assert_int_equal(cfg.C, 16);
  assert_int_equal(cfg.V, 100);
  assert_int_equal(cfg.Vp, rp_pad_vocab(100));
  size_t nids, nlog;
  int32_t *ids = read_expected("ids", &nids);
  snprintf(key, sizeof key, "logits.%s", variant);
  float *ref = read_expected(key, &nlog);
  assert_int_equal(nlog, nids * (size_t)cfg.V);
  float *got = hf_prompt_logits(dir, ids, (int)nids, &cfg);
  assert_non_null(got);
  double worst = 0;
  for (size_t i = 0; i < nlog; i++) {
    double r = ref[i], e = fabs(got[i] - r) / (fabs(r) > 1 ? fabs(r) : 1);
    if (e > worst) worst = e;
  }
  free(got);
  free(ids);
  free(ref);
  return worst;
}

static void test_logits_f32(void **st) {
  (void)st;
  double e = logits_error("f32");
  printf("f32 (transformer. prefix, no lm_head): max rel error %.3g\n", e);
  assert_true(e <= TOL);
}

static void test_logits_f16(void **st) {
  (void)st;
  double e = logits_error("f16");
  printf("f16 (no prefix, tied lm_head present): max rel error %.3g\n", e);
  assert_true(e <= TOL);
}

static void test_logits_bf16(void **st) {
  (void)st;
  double e = logits_error("bf16");
  printf("bf16 (transformer. prefix): max rel error %.3g\n", e);
  assert_true(e <= TOL);
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* A copy of a fixture folder in a fresh temporary directory. */
static char *copy_variant(const char *variant) {
  char *tmp = io_tmpdir();
  const char *files[] = {"config.json", "model.safetensors"};
  for (int i = 0; i < 2; i++) {
    char src[1200], dst[1200];
    snprintf(src, sizeof src, "%s/%s/%s", fixture, variant, files[i]);
    snprintf(dst, sizeof dst, "%s/%s", tmp, files[i]);
    long n = io_file_size(src);
    char *buf = read_text(src);
    io_write_file(dst, buf, (size_t)n);
    free(buf);
  }
  return tmp;
}

/* Rewrites config.json with `from` replaced by `to` once. */
static void edit_config(const char *dir, const char *from, const char *to) {
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *text = read_text(path);
  char *at = strstr(text, from);
  assert_non_null(at);
  size_t n = strlen(text) + strlen(to) + 1;
  char *out = malloc(n);
  snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  io_write_file(path, out, strlen(out));
  free(out);
  free(text);
}

static void expect_config_refused(const char *from, const char *to, const char *why) {
  char *dir = copy_variant("f32");
  edit_config(dir, from, to);
  rp_gpt_config cfg;
  assert_int_equal(rp_hf_read_config(dir, &cfg), RP_EINVAL);
  expect_msg(why);
  io_rmtree(dir);
  free(dir);
}

static void test_refusals(void **st) {
  (void)st;
  expect_config_refused("\"model_type\": \"gpt2\"", "\"model_type\": \"llama\"", "\"llama\" model");
  expect_config_refused("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false",
                        "untied LM head");
  expect_config_refused("\"gelu_new\"", "\"relu\"", "activation_function \"relu\"");
  expect_config_refused("\"n_inner\": null", "\"n_inner\": 10", "n_inner 10");
  expect_config_refused("\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": 1e-06",
                        "layer_norm_epsilon");
  /* no weights file */
  char *dir = copy_variant("f32"), path[1100];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  unlink(path);
  rp_gpt_config cfg;
  assert_int_equal(rp_hf_read_config(dir, &cfg), RP_EINVAL);
  expect_msg("no model.safetensors");
  io_rmtree(dir);
  free(dir);
}

/* An lm_head.weight that differs from wte is an untied head. */
static void test_untied_head_refused(void **st) {
  (void)st;
  char *dir = copy_variant("f16"), path[1100];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  rp_st_file f;
  assert_int_equal(rp_st_open(&f, path), RP_OK);
  const rp_st_entry *e = rp_st_find(&f, "lm_head.weight");
  assert_non_null(e);
  long at = (long)(8 + f.header_len + e->begin + 10);
  rp_st_close(&f);
  FILE *fp = fopen(path, "r+b");
  assert_non_null(fp);
  fseek(fp, at, SEEK_SET);
  fputc(0x55, fp);  /* one bit pattern changed in one element */
  fclose(fp);
  rp_gpt_config cfg;
  assert_int_equal(rp_hf_read_config(dir, &cfg), RP_OK);
  rp_chunk m;
  assert_int_equal(rp_chunk_init(&m, &cfg, &(rp_stage_spec){0, cfg.L, 1, 1}), RP_OK);
  assert_int_equal(rp_load_weights(&m, dir), RP_EINVAL);
  expect_msg("untied");
  rp_chunk_free(&m);
  io_rmtree(dir);
  free(dir);
}

/* The model shape of --init-from comes from config.json (no meta.json, no Vp). */
static void test_init_config(void **st) {
  (void)st;
  char dir[1100];
  fixture_path(dir, sizeof dir, "bf16");
  rp_train_opts o;
  assert_int_equal(rp_opts_defaults(rp_train_opt_table, rp_train_opt_count, &o), RP_OK);
  o.seq = 16;
  int changed, T;
  assert_int_equal(rp_init_config_into_opts(dir, &o, &changed, &T), RP_OK);
  assert_int_equal(o.layers, 2);
  assert_int_equal(o.channels, 16);
  assert_int_equal(o.heads, 2);
  assert_int_equal(o.vocab, 100);
  assert_int_equal(T, 32);
}

/* A checkpoint directory holds a config.json that reads back as its config. */
static void test_checkpoint_config_json(void **st) {
  (void)st;
  rp_gpt_config cfg = {.L = 3, .C = 32, .NH = 4, .T = 16, .V = 77, .Vp = 128};
  rp_chunk m;
  assert_int_equal(rp_chunk_init(&m, &cfg, &(rp_stage_spec){0, cfg.L, 1, 1}), RP_OK);
  rp_chunk_init_weights(&m, 5);
  char *tmp = io_tmpdir(), *ck = io_path(tmp, "ck"), *conf = io_path(ck, "config.json");
  rp_ckpt_part part = {.chunk = &m};
  assert_int_equal(rp_ckpt_save(ck, &part, 1, "\"step\":1"), RP_OK);
  assert_true(io_file_size(conf) > 0);
  char *meta = io_path(ck, "meta.json");
  unlink(meta);  /* without meta.json it is a Hugging Face folder */
  free(meta);
  rp_gpt_config back;
  assert_int_equal(rp_hf_read_config(ck, &back), RP_OK);
  assert_int_equal(back.L, 3);
  assert_int_equal(back.C, 32);
  assert_int_equal(back.NH, 4);
  assert_int_equal(back.T, 16);
  assert_int_equal(back.V, 77);
  rp_chunk m2;
  assert_int_equal(rp_chunk_init(&m2, &back, &(rp_stage_spec){0, cfg.L, 1, 1}), RP_OK);
  assert_int_equal(rp_load_weights(&m2, ck), RP_OK);
  assert_memory_equal(m.params, m2.params, m.num_params * sizeof(float));
  rp_chunk_free(&m);
  rp_chunk_free(&m2);
  io_rmtree(tmp);
  free(conf);
  free(ck);
  free(tmp);
}

int main(void) {
  io_fixture_dir(fixture, sizeof fixture, "hf_gpt2");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_logits_f32),          cmocka_unit_test(test_logits_f16),
      cmocka_unit_test(test_logits_bf16),         cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_untied_head_refused), cmocka_unit_test(test_init_config),
      cmocka_unit_test(test_checkpoint_config_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
