/* Token shards (llm.c compatibility, validation), the loader (llm.c order,
 * shuffling, ranks, resume), tokenizers and prepare. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "io_test_util.h"
#include "ringpipe/rp_data.h"

static void expect_msg(const char *a, const char *b) {
  const char *m = rp_errmsg();
  if (!strstr(m, a) || (b && !strstr(m, b)))
    fail_msg("message '%s' lacks '%s' / '%s'", m, a, b ? b : "");
}

/* A shard file written by hand exactly as llm.c's Python writer does. */
static void write_llmc_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                             const uint16_t *tok, size_t ntok) {
  int32_t hdr[256] = {0};
  hdr[0] = magic;
  hdr[1] = version;
  hdr[2] = count;
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(hdr, 4, 256, f), 256);
  if (ntok) assert_int_equal(fwrite(tok, 2, ntok, f), ntok);
  fclose(f);
}

static uint16_t tok_at(int shard, size_t i) { return (uint16_t)((shard * 7919u + i * 31u + i / 7) % 60000u); }

static void test_shard_roundtrip(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *p = io_path(dir, "a.bin");
  size_t n = 1000;
  uint16_t *t = malloc(n * 2);
  for (size_t i = 0; i < n; i++) t[i] = tok_at(1, i) ^ (uint16_t)(i << 12);
  t[5] = 65535;
  assert_int_equal(rp_shard_write(p, t, n), RP_OK);
  assert_int_equal(io_file_size(p), 1024 + 2 * (long)n);
  /* the header is llm.c's */
  FILE *f = fopen(p, "rb");
  int32_t hdr[256];
  assert_int_equal(fread(hdr, 4, 256, f), 256);
  fclose(f);
  assert_int_equal(hdr[0], 20240520);
  assert_int_equal(hdr[1], 1);
  assert_int_equal(hdr[2], (int32_t)n);
  for (int i = 3; i < 256; i++) assert_int_equal(hdr[i], 0);
  uint16_t *back;
  size_t nb;
  assert_int_equal(rp_shard_read_all(p, &back, &nb), RP_OK);
  assert_int_equal(nb, n);
  assert_memory_equal(back, t, n * 2);
  free(back);
  rp_shard s;
  assert_int_equal(rp_shard_open(&s, p), RP_OK);
  uint16_t part[10];
  assert_int_equal(rp_shard_read(&s, 990, 10, part), RP_OK);
  assert_memory_equal(part, t + 990, 20);
  assert_int_equal(rp_shard_read(&s, 995, 10, part), RP_EINVAL);
  rp_shard_close(&s);
  /* no temporary file is left behind */
  char *tmpname = malloc(1100);
  snprintf(tmpname, 1100, "%s.tmp-%ld", p, (long)getpid());
  assert_int_equal(io_file_size(tmpname), -1);
  /* streaming writer refuses a wrong count and leaves nothing behind */
  char *q = io_path(dir, "b.bin");
  rp_shard_writer *w;
  assert_int_equal(rp_shard_writer_open(&w, q, 10), RP_OK);
  assert_int_equal(rp_shard_writer_append(w, t, 6), RP_OK);
  assert_int_equal(rp_shard_writer_append(w, t, 6), RP_EINVAL);
  assert_int_equal(rp_shard_writer_close(w), RP_EINVAL);
  assert_int_equal(io_file_size(q), -1);
  free(tmpname);
  free(q);
  free(t);
  io_rmtree(dir);
  free(p);
  free(dir);
}

static void test_shard_llmc_and_corrupt(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *p = io_path(dir, "x.bin");
  uint16_t tok[5] = {1, 2, 3, 65535, 50256};
  uint16_t *back;
  size_t n;
  write_llmc_shard(p, 20240520, 1, 5, tok, 5);
  assert_int_equal(rp_shard_read_all(p, &back, &n), RP_OK);
  assert_int_equal(n, 5);
  assert_memory_equal(back, tok, sizeof tok);
  free(back);
  write_llmc_shard(p, 20240521, 1, 5, tok, 5);
  assert_int_equal(rp_shard_read_all(p, &back, &n), RP_EFORMAT);
  expect_msg("magic number 20240521", "20240520");
  write_llmc_shard(p, 20240326, 3, 5, tok, 5);
  assert_int_equal(rp_shard_read_all(p, &back, &n), RP_EFORMAT);
  expect_msg("model checkpoint", NULL);
  write_llmc_shard(p, 20240520, 2, 5, tok, 5);
  assert_int_equal(rp_shard_read_all(p, &back, &n), RP_EFORMAT);
  expect_msg("version 2", NULL);
  write_llmc_shard(p, 20240520, 1, 10, tok, 5);
  assert_int_equal(rp_shard_read_all(p, &back, &n), RP_EFORMAT);
  expect_msg("truncated", "10 tokens");
  write_llmc_shard(p, 20240520, 1, 4, tok, 5);
  assert_int_equal(rp_shard_read_all(p, &back, &n), RP_EFORMAT);
  expect_msg("2 bytes after the 4 tokens", NULL);
  write_llmc_shard(p, 20240520, 1, -3, tok, 0);
  assert_int_equal(rp_shard_read_all(p, &back, &n), RP_EFORMAT);
  io_write_file(p, "short", 5);
  assert_int_equal(rp_shard_read_all(p, &back, &n), RP_EFORMAT);
  expect_msg("too small", NULL);
  assert_int_equal(rp_shard_read_all("/nonexistent/x.bin", &back, &n), RP_EIO);
  expect_msg("/nonexistent/x.bin", NULL);
  io_rmtree(dir);
  free(p);
  free(dir);
}

/* ---- loader */

enum { NSH = 3 };
static const size_t shard_len[NSH] = {1000, 537, 1201};

static char *make_dataset(void) {
  char *dir = io_tmpdir();
  for (int s = 0; s < NSH; s++) {
    uint16_t *t = malloc(shard_len[s] * 2);
    for (size_t i = 0; i < shard_len[s]; i++) t[i] = tok_at(s, i);
    char name[64];
    snprintf(name, sizeof name, "shard_train_%03d.bin", 2 - s);  /* sorted order = reversed s */
    char *p = io_path(dir, name);
    assert_int_equal(rp_shard_write(p, t, shard_len[s]), RP_OK);
    free(p);
    free(t);
  }
  char *v = io_path(dir, "shard_val_000.bin");
  uint16_t vt[100];
  for (int i = 0; i < 100; i++) vt[i] = (uint16_t)(i + 1);
  assert_int_equal(rp_shard_write(v, vt, 100), RP_OK);
  free(v);
  char *junk = io_path(dir, "README.txt");
  io_write_file(junk, "hello", 5);
  free(junk);
  return dir;
}

/* llm.c's DataLoader (1 process, no shuffle), transcribed: shards in sorted
 * order, (ntok - 1) / BT samples per shard, advance when exhausted, wrap. */
typedef struct {
  int shard;
  size_t sample;
} llmc_ref;

static void llmc_ref_next(llmc_ref *r, int B, int T, int32_t *x, int32_t *y) {
  static const int file_to_s[NSH] = {2, 1, 0};  /* sorted file i holds tokens of s */
  size_t BT = (size_t)B * T;
  size_t nsamples = (shard_len[file_to_s[r->shard]] * 2 - 2) / (BT * 2);
  if (r->sample >= nsamples) {
    r->shard = r->shard == NSH - 1 ? 0 : r->shard + 1;
    r->sample = 0;
  }
  size_t off = r->sample * BT;
  for (size_t i = 0; i < BT; i++) {
    x[i] = tok_at(file_to_s[r->shard], off + i);
    y[i] = tok_at(file_to_s[r->shard], off + i + 1);
  }
  r->sample++;
}

enum { B = 2, T = 8, BT = B * T };

static void test_loader_file_order(void **state) {
  (void)state;
  char *dir = make_dataset();
  rp_loader *l;
  assert_int_equal(rp_loader_open(&l, dir, "train", B, T, 1, 0, 0, 1), RP_OK);
  assert_int_equal(rp_loader_num_files(l), NSH);
  assert_int_equal(rp_loader_num_tokens(l), 1000 + 537 + 1201);
  uint64_t W = (999 / BT) + (536 / BT) + (1200 / BT);
  assert_int_equal(rp_loader_num_windows(l), W);
  int32_t x[BT], y[BT], rx[BT], ry[BT];
  llmc_ref ref = {0, 0};
  for (uint64_t i = 0; i < 3 * W + 5; i++) {
    assert_int_equal(rp_loader_next(l, x, y), RP_OK);
    llmc_ref_next(&ref, B, T, rx, ry);
    assert_memory_equal(x, rx, sizeof x);
    assert_memory_equal(y, ry, sizeof y);
    if (i < 1200 / BT)  /* first file: batch i = tokens [i*BT, (i+1)*BT] */
      for (int k = 0; k < BT; k++) {
        assert_int_equal(x[k], tok_at(2, i * BT + k));
        assert_int_equal(y[k], tok_at(2, i * BT + k + 1));
      }
  }
  assert_int_equal(rp_loader_epoch(l), 3);
  rp_loader_close(l);
  /* a glob pattern and a single file give the same stream */
  char pat[600];
  snprintf(pat, sizeof pat, "%s/shard_train_*.bin", dir);
  assert_int_equal(rp_loader_open(&l, pat, NULL, B, T, 1, 0, 0, 1), RP_OK);
  assert_int_equal(rp_loader_num_windows(l), W);
  rp_loader_close(l);
  snprintf(pat, sizeof pat, "%s/shard_train_000.bin", dir);
  assert_int_equal(rp_loader_open(&l, pat, NULL, B, T, 1, 0, 0, 1), RP_OK);
  assert_int_equal(rp_loader_num_windows(l), 1200 / BT);
  rp_loader_close(l);
  io_rmtree(dir);
  free(dir);
}

static void collect(rp_loader *l, int nb, int32_t *xs, int32_t *ys) {
  for (int i = 0; i < nb; i++) assert_int_equal(rp_loader_next(l, xs + i * BT, ys + i * BT), RP_OK);
}

static void test_loader_shuffle(void **state) {
  (void)state;
  char *dir = make_dataset();
  rp_loader *a, *b, *c, *fo;
  assert_int_equal(rp_loader_open(&a, dir, "train", B, T, 0, 5, 0, 1), RP_OK);
  assert_int_equal(rp_loader_open(&b, dir, "train", B, T, 0, 5, 0, 1), RP_OK);
  assert_int_equal(rp_loader_open(&c, dir, "train", B, T, 0, 6, 0, 1), RP_OK);
  assert_int_equal(rp_loader_open(&fo, dir, "train", B, T, 1, 0, 0, 1), RP_OK);
  int W = (int)rp_loader_num_windows(a);
  size_t sz = (size_t)2 * W * BT * sizeof(int32_t);
  int32_t *xa = malloc(sz), *ya = malloc(sz), *xb = malloc(sz), *yb = malloc(sz);
  int32_t *xc = malloc(sz), *yc = malloc(sz), *xf = malloc(sz), *yf = malloc(sz);
  collect(a, 2 * W, xa, ya);
  collect(b, 2 * W, xb, yb);
  collect(c, 2 * W, xc, yc);
  collect(fo, W, xf, yf);
  assert_memory_equal(xa, xb, sz);  /* same seed, same batches */
  assert_memory_equal(ya, yb, sz);
  assert_memory_not_equal(xa, xc, sz);  /* another seed, another order */
  assert_memory_not_equal(xa, xf, (size_t)W * BT * 4);  /* not file order */
  assert_memory_not_equal(xa, xa + (size_t)W * BT, (size_t)W * BT * 4);  /* new order per epoch */
  /* each epoch is a permutation of the file-order windows */
  for (int e = 0; e < 2; e++) {
    char *used = calloc(W, 1);
    for (int i = 0; i < W; i++) {
      const int32_t *bx = xa + ((size_t)e * W + i) * BT, *by = ya + ((size_t)e * W + i) * BT;
      int found = -1;
      for (int j = 0; j < W && found < 0; j++)
        if (!used[j] && !memcmp(bx, xf + (size_t)j * BT, BT * 4) && !memcmp(by, yf + (size_t)j * BT, BT * 4))
          found = j;
      if (found < 0)
        fail_msg("epoch %d batch %d is not an unused file-order window", e, i);
      else
        used[found] = 1;
    }
    free(used);
  }
  rp_loader_close(a);
  rp_loader_close(b);
  rp_loader_close(c);
  rp_loader_close(fo);
  free(xa); free(ya); free(xb); free(yb); free(xc); free(yc); free(xf); free(yf);
  io_rmtree(dir);
  free(dir);
}

static void test_loader_ranks(void **state) {
  (void)state;
  char *dir = make_dataset();
  enum { R = 3 };
  for (int fo = 0; fo <= 1; fo++) {
    rp_loader *one, *r[R];
    assert_int_equal(rp_loader_open(&one, dir, "train", B, T, fo, 11, 0, 1), RP_OK);
    for (int k = 0; k < R; k++)
      assert_int_equal(rp_loader_open(&r[k], dir, "train", B, T, fo, 11, k, R), RP_OK);
    int W = (int)rp_loader_num_windows(one);
    int32_t x1[BT], y1[BT], x[BT], y[BT];
    /* global batch g goes to rank g % R as that rank's (g / R)-th batch, so the
     * ranks are disjoint and their union is the single-rank stream */
    for (int g = 0; g < 2 * W + 4; g++) {
      assert_int_equal(rp_loader_next(one, x1, y1), RP_OK);
      assert_int_equal(rp_loader_next(r[g % R], x, y), RP_OK);
      assert_memory_equal(x, x1, sizeof x);
      assert_memory_equal(y, y1, sizeof y);
    }
    rp_loader_close(one);
    for (int k = 0; k < R; k++) rp_loader_close(r[k]);
  }
  rp_loader *bad;
  assert_int_equal(rp_loader_open(&bad, dir, "train", B, T, 1, 0, 3, 3), RP_EINVAL);
  io_rmtree(dir);
  free(dir);
}

static void test_loader_resume(void **state) {
  (void)state;
  char *dir = make_dataset();
  for (int fo = 0; fo <= 1; fo++) {
    rp_loader *a, *b;
    assert_int_equal(rp_loader_open(&a, dir, "train", B, T, fo, 99, 0, 1), RP_OK);
    int W = (int)rp_loader_num_windows(a);
    int32_t x[BT], y[BT], xr[BT], yr[BT];
    for (int i = 0; i < W + 37; i++) assert_int_equal(rp_loader_next(a, x, y), RP_OK);
    rp_loader_snapshot st, st2;
    rp_loader_state(a, &st);
    assert_int_equal(st.epoch, 1);
    assert_int_equal(st.next_window, (uint64_t)W + 37);
    char js[512];
    assert_int_equal(rp_loader_snapshot_to_json(&st, js, sizeof js), RP_OK);
    char wrapped[600];
    snprintf(wrapped, sizeof wrapped, "{\"step\":3,\"loader\":%s}", js);
    assert_int_equal(rp_loader_snapshot_from_json(wrapped, "loader", &st2), RP_OK);
    assert_memory_equal(&st, &st2, sizeof st);
    assert_int_equal(rp_loader_open(&b, dir, "train", B, T, fo, 99, 0, 1), RP_OK);
    assert_int_equal(rp_loader_set_state(b, &st2), RP_OK);
    for (int i = 0; i < W + 10; i++) {
      assert_int_equal(rp_loader_next(a, x, y), RP_OK);
      assert_int_equal(rp_loader_next(b, xr, yr), RP_OK);
      assert_memory_equal(x, xr, sizeof x);
      assert_memory_equal(y, yr, sizeof y);
    }
    /* reset = a fresh loader */
    rp_loader *c;
    assert_int_equal(rp_loader_open(&c, dir, "train", B, T, fo, 99, 0, 1), RP_OK);
    rp_loader_reset(b);
    for (int i = 0; i < 5; i++) {
      assert_int_equal(rp_loader_next(b, x, y), RP_OK);
      assert_int_equal(rp_loader_next(c, xr, yr), RP_OK);
      assert_memory_equal(x, xr, sizeof x);
    }
    rp_loader_close(c);
    /* a resume point does not fit another batch shape */
    assert_int_equal(rp_loader_open(&c, dir, "train", B, 2 * T, fo, 99, 0, 1), RP_OK);
    assert_int_equal(rp_loader_set_state(c, &st), RP_EINVAL);
    expect_msg("--batch", "--seq");
    rp_loader_close(c);
    rp_loader_close(a);
    rp_loader_close(b);
  }
  io_rmtree(dir);
  free(dir);
}

static void test_loader_errors(void **state) {
  (void)state;
  char *dir = make_dataset();
  rp_loader *l;
  assert_int_equal(rp_loader_open(&l, "/nonexistent/data", "train", B, T, 1, 0, 0, 1), RP_EIO);
  expect_msg("/nonexistent/data", "does not exist");
  assert_int_equal(rp_loader_open(&l, dir, "test", B, T, 1, 0, 0, 1), RP_EIO);
  expect_msg("*test*.bin", "prepare");
  assert_int_equal(rp_loader_open(&l, dir, "val", 10, 10, 1, 0, 0, 1), RP_EINVAL);
  expect_msg("101 tokens", "lower --batch or --seq");
  assert_int_equal(rp_loader_open(&l, dir, "train", 0, T, 1, 0, 0, 1), RP_EINVAL);
  /* a corrupt shard fails at open, naming it */
  char *bad = io_path(dir, "shard_train_999.bin");
  io_write_file(bad, "garbage that is not a shard", 27);
  assert_int_equal(rp_loader_open(&l, dir, "train", B, T, 1, 0, 0, 1), RP_EFORMAT);
  expect_msg("shard_train_999.bin", NULL);
  unlink(bad);
  free(bad);
  /* tokens beyond the vocabulary */
  assert_int_equal(rp_loader_open(&l, dir, "train", B, T, 1, 0, 0, 1), RP_OK);
  int32_t x[BT], y[BT];
  /* found when the vocabulary is set, before any batch is read */
  assert_int_equal(rp_loader_set_vocab(l, 256), RP_EFORMAT);
  expect_msg("token 15838 at position 0 of", "outside the vocabulary of 256");
  assert_int_equal(rp_loader_set_vocab(l, 60000), RP_OK);
  assert_int_equal(rp_loader_next(l, x, y), RP_OK);
  rp_loader_close(l);
  io_rmtree(dir);
  free(dir);
}

/* ---- tokenizers */

static void test_tokenizer_bytes(void **state) {
  (void)state;
  rp_tokenizer *tk;
  assert_int_equal(rp_tokenizer_bytes(&tk), RP_OK);
  assert_int_equal(rp_tokenizer_vocab(tk), 256);
  assert_int_equal(rp_tokenizer_eot(tk), -1);
  const char text[] = "h\xc3\xa9llo\n\tw\x01\xff!";
  size_t len = sizeof text - 1, n;
  int32_t ids[32];
  assert_int_equal(rp_tokenizer_encode(tk, text, len, ids, 32, &n), RP_OK);
  assert_int_equal(n, len);
  char raw[32];
  for (size_t i = 0; i < n; i++) {
    size_t l;
    const char *b = rp_tokenizer_token(tk, ids[i], &l);
    assert_int_equal(l, 1);
    raw[i] = b[0];
  }
  assert_memory_equal(raw, text, len);  /* lossless round trip */
  char out[64];
  size_t need = rp_tokenizer_decode(tk, ids, n, out, sizeof out);
  assert_string_equal(out, "h\xc3\xa9llo\n\tw\\x01\\xff!");
  assert_int_equal(need, strlen(out));
  /* truncated output stays terminated and reports the full length */
  char small[5];
  assert_int_equal(rp_tokenizer_decode(tk, ids, n, small, sizeof small), need);
  assert_int_equal(strlen(small), 4);
  int32_t odd[2] = {65, 300};
  rp_tokenizer_decode(tk, odd, 2, out, sizeof out);
  assert_string_equal(out, "A<?300>");
  assert_int_equal(rp_tokenizer_encode(tk, text, len, ids, 3, &n), RP_EINVAL);
  rp_tokenizer_free(tk);
  uint16_t u[4];
  rp_byte_encode("\x80z", 2, u);
  assert_int_equal(u[0], 128);
  assert_int_equal(u[1], 'z');
}

static void write_gpt2_tokenizer(const char *path, uint32_t version, const char **toks, int V,
                                 uint32_t eot, int truncate_last) {
  uint32_t hdr[256] = {0};
  hdr[0] = 20240328;
  hdr[1] = version;
  hdr[2] = (uint32_t)V;
  hdr[3] = eot;
  FILE *f = fopen(path, "wb");
  fwrite(hdr, 4, 256, f);
  for (int i = 0; i < V; i++) {
    unsigned char l = (unsigned char)strlen(toks[i]);
    fwrite(&l, 1, 1, f);
    fwrite(toks[i], 1, (i == V - 1 && truncate_last) ? l / 2 : l, f);
  }
  fclose(f);
}

static void test_tokenizer_gpt2(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *p = io_path(dir, "tok.bin");
  const char *toks[] = {"Hel", "lo", " \xe2\x82", "\xac", "\n", "<|endoftext|>"};
  write_gpt2_tokenizer(p, 2, toks, 6, 5, 0);
  rp_tokenizer *tk;
  assert_int_equal(rp_tokenizer_load_gpt2(&tk, p), RP_OK);
  assert_int_equal(rp_tokenizer_vocab(tk), 6);
  assert_int_equal(rp_tokenizer_eot(tk), 5);
  assert_false(rp_tokenizer_can_encode(tk));
  size_t l;
  const char *b = rp_tokenizer_token(tk, 1, &l);
  assert_int_equal(l, 2);
  assert_memory_equal(b, "lo", 2);
  int32_t ids[] = {0, 1, 2, 3, 4, 5, 9};
  char out[128];
  rp_tokenizer_decode(tk, ids, 7, out, sizeof out);
  /* the euro sign split across tokens 2 and 3 decodes whole */
  assert_string_equal(out, "Hello \xe2\x82\xac\n<|endoftext|><?9>");
  rp_tokenizer_decode(tk, ids + 2, 1, out, sizeof out);
  assert_string_equal(out, " \\xe2\\x82");  /* alone it is an invalid fragment */
  size_t n;
  int32_t enc[8];
  assert_int_equal(rp_tokenizer_encode(tk, "Hi", 2, enc, 8, &n), RP_EINVAL);
  expect_msg("BPE", NULL);
  rp_tokenizer_free(tk);
  /* version 1: GPT-2's table, end-of-text is the last token */
  write_gpt2_tokenizer(p, 1, toks, 6, 0, 0);
  assert_int_equal(rp_tokenizer_load_gpt2(&tk, p), RP_OK);
  assert_int_equal(rp_tokenizer_eot(tk), 5);
  rp_tokenizer_free(tk);
  /* corrupt files */
  write_gpt2_tokenizer(p, 2, toks, 6, 5, 1);
  assert_int_equal(rp_tokenizer_load_gpt2(&tk, p), RP_EFORMAT);
  expect_msg("truncated", NULL);
  write_gpt2_tokenizer(p, 3, toks, 6, 5, 0);
  assert_int_equal(rp_tokenizer_load_gpt2(&tk, p), RP_EFORMAT);
  expect_msg("version 3", NULL);
  write_gpt2_tokenizer(p, 2, toks, 6, 17, 0);
  assert_int_equal(rp_tokenizer_load_gpt2(&tk, p), RP_EFORMAT);
  const char *zero[] = {"a", ""};
  write_gpt2_tokenizer(p, 2, zero, 2, 0, 0);
  assert_int_equal(rp_tokenizer_load_gpt2(&tk, p), RP_EFORMAT);
  expect_msg("length 0", NULL);
  uint16_t tokens[3] = {1, 2, 3};
  assert_int_equal(rp_shard_write(p, tokens, 3), RP_OK);
  assert_int_equal(rp_tokenizer_load_gpt2(&tk, p), RP_EFORMAT);
  expect_msg("magic", NULL);
  assert_int_equal(rp_tokenizer_load_gpt2(&tk, "/nonexistent/tok.bin"), RP_EIO);
  io_rmtree(dir);
  free(p);
  free(dir);
}

/* ---- prepare */

static void test_prepare(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *txt = io_path(dir, "input.txt"), *out = io_path(dir, "data/shakes");
  size_t n = 5000;
  char *text = malloc(n);
  for (size_t i = 0; i < n; i++) text[i] = (char)(i % 97 == 0 ? '\n' : 'a' + (i * 7) % 26);
  text[10] = (char)0xe9;
  io_write_file(txt, text, n);
  assert_int_equal(rp_prepare(txt, out, 0.1), RP_OK);
  char *tp = io_path(out, "train.bin"), *vp = io_path(out, "val.bin");
  uint16_t *tr, *va;
  size_t ntr, nva;
  assert_int_equal(rp_shard_read_all(tp, &tr, &ntr), RP_OK);
  assert_int_equal(rp_shard_read_all(vp, &va, &nva), RP_OK);
  assert_int_equal(ntr, 4500);
  assert_int_equal(nva, 500);
  for (size_t i = 0; i < ntr; i++) assert_int_equal(tr[i], (unsigned char)text[i]);
  for (size_t i = 0; i < nva; i++) assert_int_equal(va[i], (unsigned char)text[ntr + i]);
  free(tr);
  free(va);
  /* the loader reads what prepare wrote */
  rp_loader *l;
  assert_int_equal(rp_loader_open(&l, out, "val", 2, 16, 1, 0, 0, 1), RP_OK);
  int32_t x[32], y[32];
  assert_int_equal(rp_loader_next(l, x, y), RP_OK);
  assert_int_equal(x[0], (unsigned char)text[4500]);
  assert_int_equal(y[31], (unsigned char)text[4532]);
  rp_loader_close(l);
  /* negative fraction = the default 0.1; overwriting is fine */
  assert_int_equal(rp_prepare(txt, out, -1), RP_OK);
  assert_int_equal(io_file_size(vp), 1024 + 2 * 500);
  assert_int_equal(rp_prepare(txt, out, 0.5), RP_OK);
  assert_int_equal(io_file_size(vp), 1024 + 2 * 2500);
  /* errors */
  assert_int_equal(rp_prepare("/nonexistent/in.txt", out, 0.1), RP_EIO);
  expect_msg("/nonexistent/in.txt", NULL);
  char *empty = io_path(dir, "empty.txt");
  io_write_file(empty, "", 0);
  assert_int_equal(rp_prepare(empty, out, 0.1), RP_EINVAL);
  expect_msg("empty", NULL);
  char *under_file = io_path(dir, "input.txt/sub");  /* a directory under a file */
  assert_int_equal(rp_prepare(txt, under_file, 0.1), RP_EIO);
  expect_msg("input.txt", NULL);
  assert_int_equal(rp_prepare(txt, out, 1.0), RP_EINVAL);
  expect_msg("[0, 1)", NULL);
  free(empty);
  free(under_file);
  free(tp);
  free(vp);
  free(text);
  io_rmtree(dir);
  free(txt);
  free(out);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shard_roundtrip),  cmocka_unit_test(test_shard_llmc_and_corrupt),
      cmocka_unit_test(test_loader_file_order), cmocka_unit_test(test_loader_shuffle),
      cmocka_unit_test(test_loader_ranks),     cmocka_unit_test(test_loader_resume),
      cmocka_unit_test(test_loader_errors),    cmocka_unit_test(test_tokenizer_bytes),
      cmocka_unit_test(test_tokenizer_gpt2),   cmocka_unit_test(test_prepare),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
