/* Fuzz targets for the binary file formats: token shards and safetensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_targets.h"
#include "fuzz_util.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_docs.h"

/* Opening validates the header against the file size; then the vocabulary
 * scan, a read, and a loader over the file (one window of B=1 x T=2). */
int rp_fuzz_shard(const uint8_t *data, size_t size) {
  rp_fuzz_file mf;
  if (rp_fuzz_file_open(&mf, data, size)) return 0;
  int ok = 0;
  rp_shard s;
  if (rp_shard_open(&s, mf.path) == RP_OK) {
    uint16_t first[16];
    size_t n = s.num_tokens < 16 ? s.num_tokens : 16;
    ok = rp_shard_check_vocab(&s, 256) == RP_OK && rp_shard_read(&s, 0, n, first) == RP_OK;
    rp_shard_close(&s);
  }
  rp_loader *l = NULL;
  if (rp_loader_open(&l, mf.path, NULL, 1, 2, 0, 7, 0, 1) == RP_OK) {
    int32_t x[2], y[2];
    if (rp_loader_set_vocab(l, 50257) == RP_OK)
      for (int i = 0; i < 3; i++) rp_loader_next(l, x, y);
    rp_loader_close(l);
  }
  rp_fuzz_file_close(&mf);
  return ok;
}

/* The input is the document index (X.docs) beside a fixed 64-token shard in
 * a fresh directory (the index is found by its name, so no memfd): read it
 * against the shard, then pack it into rows of 16 and take a few batches. */
int rp_fuzz_doc_index(const uint8_t *data, size_t size) {
  char dir[] = "/tmp/rp_fuzz_docs_XXXXXX", bin[64], idx[64];
  if (!mkdtemp(dir)) return 0;
  snprintf(bin, sizeof bin, "%s/a_train.bin", dir);
  snprintf(idx, sizeof idx, "%s/a_train.docs", dir);
  uint16_t tok[64];
  for (int i = 0; i < 64; i++) tok[i] = (uint16_t)(i % 7);
  int ok = 0;
  FILE *f = rp_shard_write(bin, tok, 64) == RP_OK ? fopen(idx, "wb") : NULL;
  if (f && fwrite(data, 1, size, f) == size && fclose(f) == 0) {
    f = NULL;
    rp_shard s;
    if (rp_shard_open(&s, bin) == RP_OK) {
      uint32_t *lens = NULL;
      size_t n = 0;
      ok = rp_doc_index_read(&s, &lens, &n) == RP_OK;
      free(lens);
      rp_shard_close(&s);
    }
    rp_loader *l = NULL;
    if (rp_loader_open(&l, dir, "train", 1, 16, 0, 7, 0, 1) == RP_OK) {
      rp_docs d;
      int32_t x[16], y[16];
      if (rp_docs_init(&d, 1, 16) == RP_OK) {
        if (rp_loader_set_pack(l, -1, 2) == RP_OK)
          for (int i = 0; i < 3; i++) rp_loader_next_packed(l, x, y, &d);
        rp_docs_free(&d);
      }
      rp_loader_close(l);
    }
  }
  if (f) fclose(f);
  remove(idx);
  remove(bin);
  rmdir(dir);
  return ok;
}

/* Opening parses and checks the header; then every tensor is found by name
 * and its first bytes are read. */
int rp_fuzz_safetensors(const uint8_t *data, size_t size) {
  rp_fuzz_file mf;
  if (rp_fuzz_file_open(&mf, data, size)) return 0;
  rp_st_file f;
  int opened = rp_st_open(&f, mf.path) == RP_OK, ok = opened;
  for (int i = 0; ok && i < f.n; i++) {
    const rp_st_entry *e = rp_st_find(&f, f.entries[i].name);
    unsigned char buf[64];
    uint64_t len = e ? e->end - e->begin : 0;
    if (!e || rp_st_read(&f, e, 0, buf, len < sizeof buf ? (size_t)len : sizeof buf) != RP_OK)
      ok = 0;
  }
  if (opened) rp_st_close(&f);
  rp_fuzz_file_close(&mf);
  return ok;
}
