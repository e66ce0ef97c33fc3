/* `prepare`: a text file -> train.bin + val.bin of byte tokens, streamed. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/io_fs.h"
#include "ringpipe/rp_data.h"

#define PREP_CHUNK (1u << 20)
#define PREP_SEP_MAX 64

/* Document lengths of one output shard, closed after each separator. */
typedef struct {
  uint32_t *lens;
  size_t n, cap;
  uint32_t cur;          /* tokens of the open document */
  char win[PREP_SEP_MAX];  /* the last bytes seen, to spot the separator */
  size_t seen;
} doc_counter;

static rp_status doc_close(doc_counter *d) {
  if (d->cur == 0) return RP_OK;
  if (d->n == d->cap) {
    size_t nc = d->cap ? 2 * d->cap : 1024;
    uint32_t *nl = realloc(d->lens, nc * sizeof *nl);
    if (!nl) return rp_err(RP_ENOMEM, "out of memory for document lengths");
    d->lens = nl;
    d->cap = nc;
  }
  d->lens[d->n++] = d->cur;
  d->cur = 0;
  d->seen = 0;
  return RP_OK;
}

/* One byte of the shard: the separator ends its document (and belongs to it,
 * as an end-of-text token would). */
static rp_status doc_byte(doc_counter *d, unsigned char c, const char *sep, size_t k) {
  d->cur++;
  if (d->seen == k) memmove(d->win, d->win + 1, k - 1), d->seen--;
  d->win[d->seen++] = (char)c;
  if (d->seen == k && memcmp(d->win, sep, k) == 0) return doc_close(d);
  return RP_OK;
}

/* \n, \t and \\ in a separator given on the command line. */
static rp_status parse_sep(const char *in, char *out, size_t *k) {
  size_t n = 0;
  for (const char *p = in; *p; p++) {
    char c = *p;
    if (c == '\\' && p[1]) {
      p++;
      c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
    }
    if (n == PREP_SEP_MAX)
      return rp_err(RP_EINVAL, "--doc-sep '%s' is longer than %d bytes; use a shorter separator",
                    in, PREP_SEP_MAX);
    out[n++] = c;
  }
  if (n == 0) return rp_err(RP_EINVAL, "--doc-sep is empty; give a separator such as '\\n\\n'");
  *k = n;
  return RP_OK;
}

rp_status rp_prepare(const char *text_path, const char *out_dir, double val_fraction) {
  return rp_prepare_docs(text_path, out_dir, val_fraction, NULL);
}

rp_status rp_prepare_docs(const char *text_path, const char *out_dir, double val_fraction,
                          const char *doc_sep) {
  char sep[PREP_SEP_MAX];
  size_t k = 0;
  if (doc_sep) RP_TRY(parse_sep(doc_sep, sep, &k));
  if (val_fraction < 0) val_fraction = RP_PREPARE_VAL_DEFAULT;
  if (!(val_fraction < 1.0))
    return rp_err(RP_EINVAL, "validation fraction %g is out of range; use a value in [0, 1) such "
                  "as 0.1", val_fraction);
  FILE *f = fopen(text_path, "rb");
  if (!f) return rp_err(RP_EIO, "cannot open text file '%s': %s", text_path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return rp_err(RP_EIO, "'%s' is not a regular file", text_path);
  }
  size_t n = (size_t)st.st_size;
  size_t nval = (size_t)llround((double)n * val_fraction);
  if (val_fraction > 0 && nval == 0) nval = 1;
  size_t ntrain = n - RP_MIN(nval, n);
  rp_status s = RP_OK;
  if (n == 0) {
    s = rp_err(RP_EINVAL, "text file '%s' is empty; give a file with some text", text_path);
  } else if (ntrain < 2) {
    s = rp_err(RP_EINVAL, "text file '%s' has %zu bytes: too short to split into train and "
               "validation data", text_path, n);
  } else if (ntrain > RP_SHARD_MAX_TOKENS || nval > RP_SHARD_MAX_TOKENS) {
    s = rp_err(RP_EINVAL, "text file '%s' has %zu bytes; one shard holds at most %u tokens: split "
               "the text into files under 2 GiB", text_path, n, RP_SHARD_MAX_TOKENS);
  }
  if (s == RP_OK) s = rp_io_mkdir_p(out_dir);
  if (s != RP_OK) {
    fclose(f);
    return s;
  }
  char train_path[RP_IO_PATH], val_path[RP_IO_PATH];
  snprintf(train_path, sizeof train_path, "%s/train.bin", out_dir);
  snprintf(val_path, sizeof val_path, "%s/val.bin", out_dir);
  rp_shard_writer *wt = NULL, *wv = NULL;
  unsigned char *chunk = malloc(PREP_CHUNK);
  uint16_t *tok = malloc(PREP_CHUNK * sizeof *tok);
  if (!chunk || !tok) s = rp_err(RP_ENOMEM, "out of memory");
  if (s == RP_OK) s = rp_shard_writer_open(&wt, train_path, ntrain);
  if (s == RP_OK) s = rp_shard_writer_open(&wv, val_path, nval);
  size_t done = 0;
  doc_counter dc[2] = {{0}, {0}};   /* train, val */
  while (s == RP_OK && done < n) {
    size_t want = RP_MIN((size_t)PREP_CHUNK, n - done);
    size_t got = fread(chunk, 1, want, f);
    if (got != want) {
      s = rp_err(RP_EIO, "reading '%s' failed at byte %zu (did the file change?)", text_path,
                 done + got);
      break;
    }
    for (size_t i = 0; i < got; i++) tok[i] = chunk[i];
    size_t to_train = done < ntrain ? RP_MIN(got, ntrain - done) : 0;
    for (size_t i = 0; k && i < got && s == RP_OK; i++)
      s = doc_byte(&dc[i < to_train ? 0 : 1], chunk[i], sep, k);
    if (to_train) s = rp_shard_writer_append(wt, tok, to_train);
    if (s == RP_OK && got > to_train) s = rp_shard_writer_append(wv, tok + to_train, got - to_train);
    done += got;
  }
  fclose(f);
  free(chunk);
  free(tok);
  /* the train/val cut closes the document it falls in; the indexes go first so
   * that a shard never appears without the index its run was asked for */
  if (s == RP_OK && k) s = doc_close(&dc[0]);
  if (s == RP_OK && k) s = doc_close(&dc[1]);
  if (s == RP_OK && k) s = rp_doc_index_write(train_path, dc[0].lens, dc[0].n);
  if (s == RP_OK && k) s = rp_doc_index_write(val_path, dc[1].lens, dc[1].n);
  free(dc[0].lens);
  free(dc[1].lens);
  if (s == RP_OK) {
    rp_shard_writer *a = wt, *b = wv;
    wt = wv = NULL;
    s = rp_shard_writer_close(a);
    rp_status s2 = s == RP_OK ? rp_shard_writer_close(b) : (rp_shard_writer_abort(b), s);
    if (s == RP_OK) s = s2;
  }
  rp_shard_writer_abort(wt);
  rp_shard_writer_abort(wv);
  if (s == RP_OK)
    rp_info("prepared %zu train and %zu validation byte tokens in %s%s", ntrain, nval, out_dir,
            k ? " with document indexes (train.docs, val.docs)" : "");
  return s;
}
