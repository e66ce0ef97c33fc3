/* llm.c token shards: writing (atomic, streaming) and validated reading. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_fs.h"
#include "ringpipe/rp_data.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token shards are little-endian; ringpipe's raw reads assume a little-endian host"
#endif

/* Magics of other llm.c files, to say what a wrong file actually is. */
#define LLMC_MODEL_MAGIC 20240326
#define LLMC_SHARD_U32_MAGIC 20240801  /* llm.c's uint32 tokens (dev/data, "llama-3") */
#define LLMC_SHARD_U32_VERSION 7
#define U32_BLOCK 4096                  /* uint32 tokens converted per read */

struct rp_shard_writer {
  rp_io_afile f;
  size_t expect, written;
};

rp_status rp_shard_writer_open(rp_shard_writer **out, const char *path, size_t n) {
  *out = NULL;
  if (n > RP_SHARD_MAX_TOKENS)
    return rp_err(RP_EINVAL, "shard '%s' would hold %zu tokens; the llm.c format allows at most "
                  "%u per file: split the data into several shards", path, n, RP_SHARD_MAX_TOKENS);
  rp_shard_writer *w = calloc(1, sizeof *w);
  if (!w) return rp_err(RP_ENOMEM, "out of memory");
  rp_status s = rp_io_afile_open(&w->f, path);
  if (s != RP_OK) {
    free(w);
    return s;
  }
  int32_t hdr[RP_SHARD_HEADER_INTS] = {0};
  hdr[0] = RP_SHARD_MAGIC;
  hdr[1] = RP_SHARD_VERSION;
  hdr[2] = (int32_t)n;
  w->expect = n;
  s = rp_io_afile_write(&w->f, hdr, sizeof hdr);
  if (s != RP_OK) {
    rp_shard_writer_abort(w);
    return s;
  }
  *out = w;
  return RP_OK;
}

rp_status rp_shard_writer_append(rp_shard_writer *w, const uint16_t *tokens, size_t n) {
  if (w->written + n > w->expect)
    return rp_err(RP_EINVAL, "shard '%s': appending %zu tokens exceeds the %zu declared", w->f.path,
                  n, w->expect);
  RP_TRY(rp_io_afile_write(&w->f, tokens, n * sizeof *tokens));
  w->written += n;
  return RP_OK;
}

rp_status rp_shard_writer_close(rp_shard_writer *w) {
  rp_status s;
  if (w->written != w->expect) {
    s = rp_err(RP_EINVAL, "shard '%s': %zu tokens written but %zu declared", w->f.path, w->written,
               w->expect);
    rp_io_afile_abort(&w->f);
  } else {
    s = rp_io_afile_commit(&w->f);
  }
  free(w);
  return s;
}

void rp_shard_writer_abort(rp_shard_writer *w) {
  if (!w) return;
  rp_io_afile_abort(&w->f);
  free(w);
}

rp_status rp_shard_write(const char *path, const uint16_t *tokens, size_t n) {
  rp_shard_writer *w;
  RP_TRY(rp_shard_writer_open(&w, path, n));
  rp_status s = rp_shard_writer_append(w, tokens, n);
  if (s != RP_OK) {
    rp_shard_writer_abort(w);
    return s;
  }
  return rp_shard_writer_close(w);
}

/* Token width of a header: 2 (GPT-2 uint16 shards), 4 (llm.c's uint32 shards), or
 * 0 with the error. */
static rp_status header_width(const int32_t *hdr, const char *path, int *width) {
  *width = 0;
  if (hdr[0] == LLMC_SHARD_U32_MAGIC) {
    if (hdr[1] != LLMC_SHARD_U32_VERSION)
      return rp_err(RP_EFORMAT, "'%s' is an llm.c uint32 shard of version %d; ringpipe reads "
                    "version %d", path, hdr[1], LLMC_SHARD_U32_VERSION);
    *width = 4;
    return RP_OK;
  }
  if (hdr[0] != RP_SHARD_MAGIC) {
    if (hdr[0] == LLMC_MODEL_MAGIC)
      return rp_err(RP_EFORMAT, "'%s' is an llm.c model checkpoint, not a token shard", path);
    return rp_err(RP_EFORMAT, "'%s' is not a token shard: magic number %d, expected %d or %d "
                  "(llm.c .bin format; make shards with `ringpipe prepare`)", path, hdr[0],
                  RP_SHARD_MAGIC, LLMC_SHARD_U32_MAGIC);
  }
  if (hdr[1] != RP_SHARD_VERSION)
    return rp_err(RP_EFORMAT, "'%s' is token shard version %d; ringpipe reads version %d (uint16 "
                  "tokens)", path, hdr[1], RP_SHARD_VERSION);
  *width = 2;
  return RP_OK;
}

static rp_status check_header(const int32_t *hdr, size_t file_bytes, const char *path,
                              int *width) {
  RP_TRY(header_width(hdr, path, width));
  size_t w = (size_t)*width;
  if (hdr[2] < 0)
    return rp_err(RP_EFORMAT, "'%s' declares a negative token count %d; the header is corrupt",
                  path, hdr[2]);
  size_t want = RP_SHARD_HEADER_BYTES + w * (size_t)hdr[2];
  if (file_bytes < want)
    return rp_err(RP_EFORMAT, "'%s' is truncated: the header declares %d tokens (%zu bytes) but "
                  "the file holds %zu tokens; re-create the shard", path, hdr[2], want,
                  (file_bytes - RP_SHARD_HEADER_BYTES) / w);
  if (file_bytes > want)
    return rp_err(RP_EFORMAT, "'%s' has %zu bytes after the %d tokens its header declares; the "
                  "file is corrupt or was appended to", path, file_bytes - want, hdr[2]);
  return RP_OK;
}

rp_status rp_shard_open(rp_shard *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  snprintf(s->path, sizeof s->path, "%s", path);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return rp_err(RP_EIO, "cannot open token shard '%s': %s", path, strerror(errno));
  struct stat st;
  rp_status r;
  int32_t hdr[RP_SHARD_HEADER_INTS];
  int width = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    r = rp_err(RP_EIO, "'%s' is not a regular file", path);
  } else if ((size_t)st.st_size < RP_SHARD_HEADER_BYTES) {
    r = rp_err(RP_EFORMAT, "'%s' is too small to be a token shard: %lld bytes, the header alone "
               "is %d", path, (long long)st.st_size, RP_SHARD_HEADER_BYTES);
  } else if ((r = rp_io_pread(fd, hdr, sizeof hdr, 0, path)) == RP_OK) {
    r = check_header(hdr, (size_t)st.st_size, path, &width);
  }
  if (r != RP_OK) {
    close(fd);
    return r;
  }
  s->fd = fd;
  s->num_tokens = (size_t)hdr[2];
  s->token_bytes = width;
  return RP_OK;
}

/* uint32 tokens, narrowed: ringpipe's batches hold uint16 ids. */
static rp_status read_u32(const rp_shard *s, size_t first, size_t n, uint16_t *dst) {
  uint32_t buf[U32_BLOCK];
  for (size_t at = 0; at < n; at += U32_BLOCK) {
    size_t k = RP_MIN((size_t)U32_BLOCK, n - at);
    RP_TRY(rp_io_pread(s->fd, buf, k * sizeof *buf,
                       (off_t)(RP_SHARD_HEADER_BYTES + 4 * (first + at)), s->path));
    for (size_t i = 0; i < k; i++) {
      if (buf[i] > UINT16_MAX)
        return rp_err(RP_EFORMAT, "token %u at position %zu of uint32 shard '%s' is above 65535; "
                      "ringpipe trains vocabularies of at most 65536 tokens", buf[i],
                      first + at + i, s->path);
      dst[at + i] = (uint16_t)buf[i];
    }
  }
  return RP_OK;
}

rp_status rp_shard_read(const rp_shard *s, size_t first, size_t n, uint16_t *dst) {
  if (first > s->num_tokens || n > s->num_tokens - first)
    return rp_err(RP_EINVAL, "tokens [%zu, %zu) are outside shard '%s' of %zu tokens", first,
                  first + n, s->path, s->num_tokens);
  if (s->token_bytes == 4) return read_u32(s, first, n, dst);
  return rp_io_pread(s->fd, dst, n * sizeof *dst, (off_t)(RP_SHARD_HEADER_BYTES + 2 * first),
                     s->path);
}

rp_status rp_shard_check_ids(const rp_shard *s, const uint16_t *ids, size_t n, size_t first,
                             int V) {
  if (V <= 0) return RP_OK;
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= V)
      return rp_err(RP_EFORMAT, "token %u at position %zu of '%s' is outside the vocabulary of "
                    "%d; the data was made for a larger vocabulary (set --vocab or re-prepare)",
                    ids[i], first + i, s->path, V);
  return RP_OK;
}

rp_status rp_shard_check_vocab(const rp_shard *s, int V) {
  enum { CHUNK = 1 << 16 };
  if (V <= 0 || V > UINT16_MAX) return RP_OK;  /* every uint16 id fits */
  uint16_t *buf = malloc(CHUNK * sizeof *buf);
  if (!buf) return rp_err(RP_ENOMEM, "out of memory checking the tokens of '%s'", s->path);
  rp_status r = RP_OK;
  for (size_t at = 0; at < s->num_tokens && r == RP_OK; at += CHUNK) {
    size_t n = RP_MIN((size_t)CHUNK, s->num_tokens - at);
    r = rp_shard_read(s, at, n, buf);
    if (r == RP_OK) r = rp_shard_check_ids(s, buf, n, at, V);
  }
  free(buf);
  return r;
}

void rp_shard_close(rp_shard *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
}

rp_status rp_shard_read_all(const char *path, uint16_t **tokens, size_t *n) {
  rp_shard s;
  *tokens = NULL;
  *n = 0;
  RP_TRY(rp_shard_open(&s, path));
  uint16_t *buf = malloc(s.num_tokens ? s.num_tokens * sizeof *buf : 1);
  if (!buf) {
    rp_shard_close(&s);
    return rp_err(RP_ENOMEM, "out of memory for %zu tokens of '%s'", s.num_tokens, path);
  }
  rp_status r = rp_shard_read(&s, 0, s.num_tokens, buf);
  if (r == RP_OK) {
    *tokens = buf;
    *n = s.num_tokens;
  } else {
    free(buf);
  }
  rp_shard_close(&s);
  return r;
}
