/* Packed loading: `prepare --doc-sep` writes document indexes that match the
 * shards; the packed loader puts every document whole into one row (a long one
 * in T-token pieces), targets never cross a boundary (the last token of each
 * document and padding are -1), position ids restart per document; the
 * end-of-text fallback; and bad indexes or data are refused with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "io_test_util.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_docs.h"

/* Documents "d<i>:" + i letters + "|" (the separator), i = 0..n-1: their
 * lengths vary from 4 to 40 and each is recognisable by its first bytes. */
static char *write_corpus(const char *dir, int n, size_t *len) {
  char *text = malloc(64 * (size_t)n), *p = text;
  for (int i = 0; i < n; i++) {
    p += sprintf(p, "d%d:", i % 10);
    for (int j = 0; j < (i * 7) % 37; j++) *p++ = (char)('a' + (i + j) % 26);
    *p++ = '|';
  }
  *len = (size_t)(p - text);
  char *path = io_path(dir, "corpus.txt");
  io_write_file(path, text, *len);
  free(text);
  return path;
}

/* Every row: documents tile [0, T); inside each, targets are the next input,
 * the last target is -1 (its token is the separator, so that was predicted
 * from inside); padding (inputs 0) has targets -1; positions restart. */
static void check_rows(const int32_t *in, const int32_t *tg, const rp_docs *d, int B, int T,
                       long *real, long *docs_seen) {
  int32_t *pos = malloc(sizeof *pos * (size_t)B * T);
  rp_docs_positions(d, pos);
  for (int b = 0; b < B; b++) {
    const int32_t *cu = rp_docs_row(d, b);
    for (int i = 0; i < d->ndocs[b]; i++) {
      const int s = cu[i], e = cu[i + 1];
      const int32_t *x = in + (long)b * T, *y = tg + (long)b * T;
      int padding = x[s] == 0;
      for (int t = s; t < e; t++) {
        assert_int_equal(pos[(long)b * T + t], t - s);
        if (padding || t == e - 1) {
          assert_int_equal(y[t], -1);   /* nothing predicts across the boundary */
        } else {
          assert_int_equal(y[t], x[t + 1]);
        }
      }
      if (padding) continue;
      /* a real document: starts at its beginning (unless a piece of a long one) */
      assert_int_equal(x[s], 'd');
      assert_int_equal(x[e - 1], '|');
      *real += e - s;
      (*docs_seen)++;
    }
  }
  free(pos);
}

static void test_prepare_and_pack(void **state) {
  char *dir = io_tmpdir();
  size_t len;
  char *txt = write_corpus(dir, 300, &len);
  char *out = io_path(dir, "data");
  assert_int_equal(rp_prepare_docs(txt, out, 0.2, "|"), RP_OK);
  char *train = io_path(out, "train.bin");
  rp_shard sh;
  assert_int_equal(rp_shard_open(&sh, train), RP_OK);
  uint32_t *lens;
  size_t n;
  assert_int_equal(rp_doc_index_read(&sh, &lens, &n), RP_OK);
  size_t sum = 0;
  for (size_t i = 0; i < n; i++) sum += lens[i];
  assert_int_equal(sum, sh.num_tokens);
  assert_true(n > 200);
  free(lens);
  rp_shard_close(&sh);

  const int B = 3, T = 48;
  rp_loader *l;
  assert_int_equal(rp_loader_open(&l, out, "train", B, T, 1, 0, 0, 1), RP_OK);
  assert_int_equal(rp_loader_set_pack(l, -1, 1), RP_OK);
  assert_true(rp_loader_is_packed(l));
  assert_true(rp_loader_pad_fraction(l) > 0.0);
  uint64_t W = rp_loader_num_windows(l);
  rp_docs d;
  assert_int_equal(rp_docs_init(&d, B, T), RP_OK);
  int32_t in[3 * 48], tg[3 * 48];
  long real = 0, seen = 0;
  for (uint64_t w = 0; w < W; w++) {
    assert_int_equal(rp_loader_next_packed(l, in, tg, &d), RP_OK);
    assert_int_equal(rp_docs_check(&d, B, T), RP_OK);
    check_rows(in, tg, &d, B, T, &real, &seen);
  }
  /* whole documents (none is longer than T here), none lost beyond the tail */
  assert_true(seen >= (long)n - 2 * B);
  int32_t plain[3 * 48];
  assert_int_equal(rp_loader_next(l, plain, plain), RP_EINTERNAL);
  /* aligned packing: every document a multiple of 4 tokens, the padding inside
   * it after its last token; no target crosses a boundary or points past it */
  assert_int_equal(rp_loader_set_pack(l, -1, 4), RP_OK);
  rp_loader_reset(l);
  for (uint64_t w = 0; w < rp_loader_num_windows(l); w++) {
    assert_int_equal(rp_loader_next_packed(l, in, tg, &d), RP_OK);
    for (int b = 0; b < B; b++) {
      const int32_t *cu = rp_docs_row(&d, b);
      for (int i = 0; i < d.ndocs[b]; i++) {
        assert_int_equal((cu[i + 1] - cu[i]) % 4, 0);
        for (int t = cu[i]; t < cu[i + 1]; t++)
          if (tg[b * T + t] >= 0) {
            assert_true(t + 1 < cu[i + 1]);
            assert_int_equal(tg[b * T + t], in[b * T + t + 1]);
          }
      }
    }
  }
  rp_loader_close(l);
  rp_docs_free(&d);
  free(txt), free(out), free(train);
  io_rmtree(dir);
  free(dir);
}

/* No index: --eot splits after each end-of-text token; without it, refused. A
 * document longer than T comes in T-token pieces. */
static void test_eot_and_long_documents(void **state) {
  char *dir = io_tmpdir();
  char *path = io_path(dir, "x_train.bin");
  uint16_t tok[200];
  for (int i = 0; i < 200; i++) tok[i] = (uint16_t)(1 + i % 50);
  tok[9] = 255, tok[99] = 255, tok[199] = 255;   /* docs of 10, 90, 100 tokens */
  assert_int_equal(rp_shard_write(path, tok, 200), RP_OK);
  rp_loader *l;
  assert_int_equal(rp_loader_open(&l, dir, "train", 1, 64, 1, 0, 0, 1), RP_OK);
  assert_int_equal(rp_loader_set_pack(l, -1, 1), RP_EIO);   /* no index, no --eot */
  assert_int_equal(rp_loader_set_pack(l, 255, 1), RP_OK);
  rp_docs d;
  assert_int_equal(rp_docs_init(&d, 1, 64), RP_OK);
  int32_t in[64], tg[64];
  /* 10 tokens, then the 90 comes as 64 + 26 pieces: the first piece does not fit
   * the rest of row 0 (padding), the 26 shares row 2 with padding since the
   * 64-token piece of the 100 does not fit after it */
  static const int want_docs[4][3] = {{10, 54, 0}, {64, 0, 0}, {26, 38, 0}, {64, 0, 0}};
  for (int r = 0; r < 4; r++) {
    assert_int_equal(rp_loader_next_packed(l, in, tg, &d), RP_OK);
    const int32_t *cu = rp_docs_row(&d, 0);
    for (int i = 0; i < d.ndocs[0]; i++) assert_int_equal(cu[i + 1] - cu[i], want_docs[r][i]);
    assert_int_equal(tg[cu[1] - 1], -1);
  }
  rp_loader_close(l);
  rp_docs_free(&d);
  free(path);
  io_rmtree(dir);
  free(dir);
}

/* An index that does not belong to its shard: status RP_EFORMAT naming it. */
static void test_bad_index(void **state) {
  char *dir = io_tmpdir();
  char *path = io_path(dir, "a_train.bin");
  uint16_t tok[100] = {0};
  assert_int_equal(rp_shard_write(path, tok, 100), RP_OK);
  uint32_t lens[2] = {60, 30};   /* sums to 90, the shard holds 100 */
  assert_int_equal(rp_doc_index_write(path, lens, 2), RP_OK);
  rp_shard sh;
  assert_int_equal(rp_shard_open(&sh, path), RP_OK);
  uint32_t *got;
  size_t n;
  assert_int_equal(rp_doc_index_read(&sh, &got, &n), RP_EFORMAT);
  lens[1] = 0;
  assert_int_equal(rp_doc_index_write(path, lens, 2), RP_OK);
  assert_int_equal(rp_doc_index_read(&sh, &got, &n), RP_EFORMAT);
  char *idx = io_path(dir, "a_train.docs");
  io_write_file(idx, "garbage", 7);
  assert_int_equal(rp_doc_index_read(&sh, &got, &n), RP_EFORMAT);
  rp_shard_close(&sh);
  rp_loader *l;
  assert_int_equal(rp_loader_open(&l, dir, "train", 1, 16, 1, 0, 0, 1), RP_OK);
  assert_int_equal(rp_loader_set_pack(l, 7, 1), RP_EFORMAT);  /* a bad index is not skipped */
  rp_loader_close(l);
  assert_int_equal(rp_prepare_docs(path, dir, 0.1, ""), RP_EINVAL);
  free(idx), free(path);
  io_rmtree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prepare_and_pack),
      cmocka_unit_test(test_eot_and_long_documents),
      cmocka_unit_test(test_bad_index),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
