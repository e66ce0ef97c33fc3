/* The document index beside a shard: X.docs next to X.bin holds the lengths of
 * the documents the shard's tokens form, in order (rp_data.h). The shard itself
 * stays llm.c's format, untouched; a reader without this file just sees tokens. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>

#include "io/io_fs.h"
#include "ringpipe/rp_data.h"

void rp_doc_index_path(char *out, size_t cap, const char *shard_path) {
  size_t n = strlen(shard_path);
  if (n >= 4 && strcmp(shard_path + n - 4, ".bin") == 0)
    snprintf(out, cap, "%.*s.docs", (int)(n - 4), shard_path);
  else
    snprintf(out, cap, "%s.docs", shard_path);
}

rp_status rp_doc_index_write(const char *shard_path, const uint32_t *lens, size_t n) {
  char path[RP_IO_PATH];
  rp_doc_index_path(path, sizeof path, shard_path);
  int32_t header[RP_DOC_INDEX_HEADER_INTS] = {RP_DOC_INDEX_MAGIC, 1, (int32_t)n};
  if (n > (size_t)INT32_MAX)
    return rp_err(RP_EINVAL, "%zu documents do not fit a document index (at most %d)", n,
                  INT32_MAX);
  rp_io_afile a;
  RP_TRY(rp_io_afile_open(&a, path));
  rp_status s = rp_io_afile_write(&a, header, sizeof header);
  if (s == RP_OK && n) s = rp_io_afile_write(&a, lens, n * sizeof *lens);
  if (s != RP_OK) {
    rp_io_afile_abort(&a);
    return s;
  }
  return rp_io_afile_commit(&a);
}

rp_status rp_doc_index_read(const rp_shard *s, uint32_t **lens, size_t *n) {
  char path[RP_IO_PATH];
  rp_doc_index_path(path, sizeof path, s->path);
  *lens = NULL;
  *n = 0;
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return rp_err(RP_EIO, "no document index %s beside %s: %s; create it with `ringpipe prepare "
                  "--doc-sep SEP`, or give --eot ID to split on an end-of-text token", path,
                  s->path, strerror(errno));
  int32_t h[RP_DOC_INDEX_HEADER_INTS];
  off_t size = lseek(fd, 0, SEEK_END);
  rp_status st = rp_io_pread(fd, h, sizeof h, 0, path);
  if (st == RP_OK && (h[0] != RP_DOC_INDEX_MAGIC || h[1] != 1 || h[2] < 0))
    st = rp_err(RP_EFORMAT, "%s is not a document index (magic %d, version %d, count %d); "
                "re-create it with `ringpipe prepare --doc-sep SEP`", path, h[0], h[1], h[2]);
  if (st == RP_OK && (size_t)size != sizeof h + (size_t)h[2] * sizeof(uint32_t))
    st = rp_err(RP_EFORMAT, "%s is %lld bytes but its header counts %d documents (%zu bytes); "
                "re-create it with `ringpipe prepare --doc-sep SEP`", path, (long long)size,
                h[2], sizeof h + (size_t)h[2] * sizeof(uint32_t));
  uint32_t *v = NULL;
  if (st == RP_OK) {
    v = malloc(sizeof *v * (h[2] > 0 ? (size_t)h[2] : 1));
    if (!v) st = rp_err(RP_ENOMEM, "out of memory for %d document lengths", h[2]);
  }
  if (st == RP_OK && h[2] > 0) st = rp_io_pread(fd, v, (size_t)h[2] * sizeof *v, sizeof h, path);
  close(fd);
  size_t sum = 0;
  for (int32_t i = 0; st == RP_OK && i < h[2]; i++) {
    if (v[i] == 0) {
      st = rp_err(RP_EFORMAT, "%s: document %d has length 0; lengths must be >= 1", path, i);
      break;
    }
    sum += v[i];
  }
  if (st == RP_OK && sum != s->num_tokens)
    st = rp_err(RP_EFORMAT, "document index %s sums to %zu tokens but %s holds %zu; the index "
                "belongs to other data: re-run `ringpipe prepare --doc-sep SEP`", path, sum,
                s->path, s->num_tokens);
  if (st != RP_OK) {
    free(v);
    return st;
  }
  *lens = v;
  *n = (size_t)h[2];
  return RP_OK;
}
