/* Fuzz targets for the binary file formats: token shards and safetensors. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_targets.h"
#include "fuzz_util.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_data.h"

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
