/* GPT-2 byte-level BPE (and llm.c's uint32 shards): ringpipe's encoding of a committed text (Unicode of
 * many scripts, white-space runs, contractions, digits, emoji, seeded random
 * strings) equals tiktoken's ids (tests/fixtures/gpt2_tokens, made by
 * tools/make_gpt2_token_fixture.py from GPT-2's own vocabulary), id for id, and
 * decodes back to the text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "io/bpe.h"
#include "io_test_util.h"
#include "ringpipe/rp_data.h"

static char fixture[1024];

static char *slurp(const char *name, size_t *n) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", fixture, name);
  long sz = io_file_size(path);
  assert_true(sz >= 0);
  char *buf = malloc((size_t)sz + 1);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
  fclose(f);
  buf[sz] = '\0';
  *n = (size_t)sz;
  return buf;
}

static rp_tokenizer *load_gpt2(void) {
  char path[1100];
  snprintf(path, sizeof path, "%s/gpt2_tokenizer.bin", fixture);
  rp_tokenizer *tk;
  assert_int_equal(rp_tokenizer_load_gpt2(&tk, path), RP_OK);
  assert_int_equal(rp_tokenizer_vocab(tk), 50257);
  assert_int_equal(rp_tokenizer_eot(tk), 50256);
  assert_true(rp_tokenizer_can_encode(tk));
  return tk;
}

static void test_same_ids_as_tiktoken(void **st) {
  (void)st;
  rp_tokenizer *tk = load_gpt2();
  size_t len;
  char *text = slurp("text.txt", &len);
  char path[1100];
  snprintf(path, sizeof path, "%s/expected.bin", fixture);
  uint16_t *want;
  size_t nwant;
  assert_int_equal(rp_shard_read_all(path, &want, &nwant), RP_OK);
  int32_t *ids = malloc(len * sizeof *ids);
  size_t n;
  assert_int_equal(rp_tokenizer_encode(tk, text, len, ids, len, &n), RP_OK);
  size_t first_diff = n < nwant ? n : nwant;
  for (size_t i = 0; i < (n < nwant ? n : nwant); i++)
    if (ids[i] != want[i]) {
      first_diff = i;
      break;
    }
  if (n != nwant || first_diff < n)
    fail_msg("%zu ids (tiktoken: %zu); first difference at id %zu: %d vs %d", n, nwant,
             first_diff, first_diff < n ? ids[first_diff] : -1,
             first_diff < nwant ? want[first_diff] : -1);
  printf("%zu bytes -> %zu ids, all equal to tiktoken's\n", len, n);
  /* and back: the ids' bytes are the text */
  char *back = malloc(len + 1);
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l;
    const char *b = rp_tokenizer_token(tk, ids[i], &l);
    assert_true(at + l <= len);
    memcpy(back + at, b, l);
    at += l;
  }
  assert_int_equal(at, len);
  assert_memory_equal(back, text, len);
  free(back);
  free(ids);
  free(want);
  free(text);
  rp_tokenizer_free(tk);
}

/* Short cases whose ids are known from GPT-2 (tiktoken), incl. an invalid
 * UTF-8 byte, which is encoded as its byte token. */
static void test_small_cases(void **st) {
  (void)st;
  rp_tokenizer *tk = load_gpt2();
  static const struct {
    const char *text;
    int n;
    int32_t ids[8];
  } cases[] = {
      {"Hello world", 2, {15496, 995}},
      {" It's", 2, {632, 338}},
      {"  x", 2, {220, 2124}},
      {"\n\n", 1, {628}},
      {"", 0, {0}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int32_t ids[16];
    size_t n, len = strlen(cases[c].text);
    assert_int_equal(rp_tokenizer_encode(tk, cases[c].text, len, ids, 16, &n), RP_OK);
    assert_int_equal(n, (size_t)cases[c].n);
    for (int i = 0; i < cases[c].n; i++) assert_int_equal(ids[i], cases[c].ids[i]);
  }
  int32_t ids[8];
  size_t n;
  assert_int_equal(rp_tokenizer_encode(tk, "a\xff", 2, ids, 8, &n), RP_OK);
  assert_int_equal(n, 2);
  size_t l;
  const char *b = rp_tokenizer_token(tk, ids[1], &l);
  assert_int_equal(l, 1);
  assert_int_equal((unsigned char)b[0], 0xff);
  assert_int_equal(rp_tokenizer_encode(tk, "Hello world", 11, ids, 1, &n), RP_EINVAL);
  rp_tokenizer_free(tk);
}

/* prepare --tokenizer cuts the text into chunks (1 MiB, grown for a longer
 * line): its shards hold end-of-text and then exactly the one-shot encoding. */
static void test_prepare_chunks(void **st) {
  (void)st;
  rp_tokenizer *tk = load_gpt2();
  size_t one;
  char *unit = slurp("text.txt", &one);
  size_t reps = 360, line = 1200000, n = one * reps + line;
  char *text = malloc(n);
  for (size_t r = 0; r < reps; r++) memcpy(text + r * one, unit, one);
  for (size_t i = 0; i < line; i++) text[one * reps + i] = "ab 1,"[i % 5];
  char *dir = io_tmpdir(), *in = io_path(dir, "in.txt"), *out = io_path(dir, "out");
  io_write_file(in, text, n);
  assert_int_equal(rp_prepare_bpe(in, out, 0.05, tk), RP_OK);
  int32_t *ids = malloc(n * sizeof *ids);
  size_t k;
  assert_int_equal(rp_tokenizer_encode(tk, text, n, ids, n, &k), RP_OK);
  char *tr = io_path(out, "train.bin"), *va = io_path(out, "val.bin");
  uint16_t *a, *b;
  size_t na, nb;
  assert_int_equal(rp_shard_read_all(tr, &a, &na), RP_OK);
  assert_int_equal(rp_shard_read_all(va, &b, &nb), RP_OK);
  assert_int_equal(na + nb, k + 1);
  assert_int_equal(a[0], 50256);
  for (size_t i = 0; i < k; i++) {
    uint16_t got = i + 1 < na ? a[i + 1] : b[i + 1 - na];
    if (got != ids[i]) fail_msg("token %zu: prepare wrote %u, one-shot encoding %d", i, got, ids[i]);
  }
  printf("prepare: %zu bytes -> %zu + %zu tokens, equal to the one-shot encoding\n", n, na, nb);
  free(a);
  free(b);
  free(tr);
  free(va);
  free(ids);
  io_rmtree(dir);
  free(in);
  free(out);
  free(dir);
  free(text);
  free(unit);
  rp_tokenizer_free(tk);
}

/* The scan and the heap merge give the same ids for any piece (the encoder
 * picks one by length); random pieces of a few alphabets, 2..400 bytes. */
static void test_merge_loops_agree(void **st) {
  (void)st;
  rp_tokenizer *tk = load_gpt2();
  int V = rp_tokenizer_vocab(tk);
  uint32_t *off = malloc(((size_t)V + 1) * sizeof *off);
  char *blob = malloc((size_t)V * 128);
  off[0] = 0;
  for (int id = 0; id < V; id++) {
    size_t l;
    const char *b = rp_tokenizer_token(tk, id, &l);
    memcpy(blob + off[id], b, l);
    off[id + 1] = off[id] + (uint32_t)l;
  }
  rp_bpe *bpe;
  assert_int_equal(rp_bpe_build(&bpe, blob, off, V, rp_tokenizer_eot(tk)), RP_OK);
  static const char *const alphabets[] = {"abcdefghijklmnopqrstuvwxyz", "etaoin", "0123456789",
                                          "!?.,-=+*", " \t\n", "ABCabc123"};
  unsigned char piece[400];
  int32_t a[400], b[400];
  uint64_t r = 12345;
  for (int trial = 0; trial < 600; trial++) {
    const char *al = alphabets[trial % 6];
    size_t na = strlen(al), n = 2 + trial % 399;
    for (size_t i = 0; i < n; i++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      piece[i] = (unsigned char)(trial % 7 == 6 ? (r >> 33) & 0xFF : (unsigned)al[(r >> 33) % na]);
    }
    size_t ka = 0, kb = 0;
    assert_int_equal(rp_bpe_merge_linear(bpe, piece, n, a, 400, &ka), RP_OK);
    assert_int_equal(rp_bpe_merge_heap(bpe, piece, n, b, 400, &kb), RP_OK);
    assert_int_equal(ka, kb);
    assert_memory_equal(a, b, ka * sizeof *a);
  }
  rp_bpe_free(bpe);
  free(off);
  free(blob);
  rp_tokenizer_free(tk);
}

/* llm.c's uint32 shard (magic 20240801, version 7) of n ids. */
static void write_u32_shard(const char *path, const uint32_t *ids, size_t n, int version) {
  int32_t hdr[256] = {20240801, version, (int32_t)n};
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fwrite(hdr, 4, 256, f);
  fwrite(ids, 4, n, f);
  fclose(f);
}

static void test_u32_shards(void **st) {
  (void)st;
  uint32_t ids[10000];
  for (size_t i = 0; i < 10000; i++) ids[i] = (uint32_t)(i * 7919 % 50257);
  char *dir = io_tmpdir(), *p = io_path(dir, "train.bin");
  write_u32_shard(p, ids, 10000, 7);
  uint16_t *got;
  size_t n;
  assert_int_equal(rp_shard_read_all(p, &got, &n), RP_OK);
  assert_int_equal(n, 10000);
  for (size_t i = 0; i < n; i++) assert_int_equal(got[i], ids[i]);
  free(got);
  ids[4321] = 70000;  /* does not fit ringpipe's uint16 batches */
  write_u32_shard(p, ids, 10000, 7);
  assert_int_equal(rp_shard_read_all(p, &got, &n), RP_EFORMAT);
  if (!strstr(rp_errmsg(), "token 70000 at position 4321")) fail_msg("%s", rp_errmsg());
  write_u32_shard(p, ids, 10000, 3);
  assert_int_equal(rp_shard_read_all(p, &got, &n), RP_EFORMAT);
  if (!strstr(rp_errmsg(), "version 3")) fail_msg("%s", rp_errmsg());
  write_u32_shard(p, ids, 10000, 7);
  truncate(p, 1024 + 4 * 9999 + 2);
  assert_int_equal(rp_shard_read_all(p, &got, &n), RP_EFORMAT);
  if (!strstr(rp_errmsg(), "truncated")) fail_msg("%s", rp_errmsg());
  io_rmtree(dir);
  free(p);
  free(dir);
}

int main(void) {
  io_fixture_dir(fixture, sizeof fixture, "gpt2_tokens");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_ids_as_tiktoken),
      cmocka_unit_test(test_small_cases),
      cmocka_unit_test(test_prepare_chunks),
      cmocka_unit_test(test_u32_shards),
      cmocka_unit_test(test_merge_loops_agree),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
