/* `prepare`: a text file -> train.bin + val.bin, as byte tokens (streamed, with
 * their document indexes when a separator is given) or GPT-2 BPE tokens
 * (encoded piece-safe chunk by chunk, then split). */
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


/* The validation share of n units (bytes or tokens): at least one when asked for. */
static size_t val_count(size_t n, double val_fraction) {
  size_t nval = (size_t)llround((double)n * val_fraction);
  if (val_fraction > 0 && nval == 0) nval = 1;
  return RP_MIN(nval, n);
}

static rp_status check_split(const char *text_path, size_t n, size_t ntrain, size_t nval,
                             const char *unit) {
  if (n == 0)
    return rp_err(RP_EINVAL, "text file '%s' is empty; give a file with some text", text_path);
  if (ntrain < 2)
    return rp_err(RP_EINVAL, "text file '%s' has %zu %s: too short to split into train and "
                  "validation data", text_path, n, unit);
  if (ntrain > RP_SHARD_MAX_TOKENS || nval > RP_SHARD_MAX_TOKENS)
    return rp_err(RP_EINVAL, "text file '%s' has %zu %s; one shard holds at most %u tokens: split "
                  "the text into smaller files", text_path, n, unit, RP_SHARD_MAX_TOKENS);
  return RP_OK;
}

static rp_status open_text(const char *text_path, FILE **f, size_t *n) {
  *f = fopen(text_path, "rb");
  if (!*f) return rp_err(RP_EIO, "cannot open text file '%s': %s", text_path, strerror(errno));
  struct stat st;
  if (fstat(fileno(*f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(*f);
    *f = NULL;
    return rp_err(RP_EIO, "'%s' is not a regular file", text_path);
  }
  *n = (size_t)st.st_size;
  return RP_OK;
}

static void shard_paths(const char *out_dir, char *train, char *val) {
  snprintf(train, RP_IO_PATH, "%s/train.bin", out_dir);
  snprintf(val, RP_IO_PATH, "%s/val.bin", out_dir);
}

static rp_status check_fraction(double *val_fraction) {
  if (*val_fraction < 0) *val_fraction = RP_PREPARE_VAL_DEFAULT;
  if (!(*val_fraction < 1.0))
    return rp_err(RP_EINVAL, "validation fraction %g is out of range; use a value in [0, 1) such "
                  "as 0.1", *val_fraction);
  return RP_OK;
}

/* Streams the bytes into the two shards; with a separator (k > 0) also counts
 * each shard's documents and writes their indexes before the shards close, so
 * that a shard never appears without the index its run was asked for. */
static rp_status prepare_bytes(FILE *f, size_t n, const char *text_path, const char *out_dir,
                               size_t ntrain, size_t nval, const char *sep, size_t k) {
  char train_path[RP_IO_PATH], val_path[RP_IO_PATH];
  shard_paths(out_dir, train_path, val_path);
  rp_shard_writer *wt = NULL, *wv = NULL;
  unsigned char *chunk = malloc(PREP_CHUNK);
  uint16_t *tok = malloc(PREP_CHUNK * sizeof *tok);
  rp_status s = chunk && tok ? RP_OK : rp_err(RP_ENOMEM, "out of memory");
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
    if (s == RP_OK && to_train) s = rp_shard_writer_append(wt, tok, to_train);
    if (s == RP_OK && got > to_train) s = rp_shard_writer_append(wv, tok + to_train, got - to_train);
    done += got;
  }
  free(chunk);
  free(tok);
  /* the train/val cut closes the document it falls in */
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
  return s;
}

rp_status rp_prepare(const char *text_path, const char *out_dir, double val_fraction) {
  return rp_prepare_docs(text_path, out_dir, val_fraction, NULL);
}

rp_status rp_prepare_docs(const char *text_path, const char *out_dir, double val_fraction,
                          const char *doc_sep) {
  char sep[PREP_SEP_MAX];
  size_t k = 0;
  if (doc_sep) RP_TRY(parse_sep(doc_sep, sep, &k));
  RP_TRY(check_fraction(&val_fraction));
  FILE *f;
  size_t n;
  RP_TRY(open_text(text_path, &f, &n));
  size_t nval = val_count(n, val_fraction), ntrain = n - nval;
  rp_status s = check_split(text_path, n, ntrain, nval, "bytes");
  if (s == RP_OK) s = rp_io_mkdir_p(out_dir);
  if (s == RP_OK) s = prepare_bytes(f, n, text_path, out_dir, ntrain, nval, sep, k);
  fclose(f);
  if (s == RP_OK)
    rp_info("prepared %zu train and %zu validation byte tokens in %s%s", ntrain, nval, out_dir,
            k ? " with document indexes (train.docs, val.docs)" : "");
  return s;
}

/* ---- GPT-2 BPE */

/* A cut that no pre-token crosses: just before a non-space ASCII byte that
 * follows a newline (the newline ends a white-space piece; a piece starts at
 * the byte). The last such cut in b[0..n), or 0. */
static size_t last_safe_cut(const unsigned char *b, size_t n) {
  for (size_t i = n; i-- > 1;)
    if (b[i - 1] == '\n' && b[i] > ' ' && b[i] < 0x7F) return i;
  return 0;
}

typedef struct {
  uint16_t *v;
  size_t n, cap;
} tokvec;

static rp_status tokvec_push(tokvec *t, const int32_t *ids, size_t n, int V) {
  if (t->n + n > t->cap) {
    size_t cap = t->cap ? t->cap : PREP_CHUNK;
    while (cap < t->n + n) cap *= 2;
    uint16_t *nv = realloc(t->v, cap * sizeof *nv);
    if (!nv) return rp_err(RP_ENOMEM, "out of memory for %zu tokens", t->n + n);
    t->v = nv;
    t->cap = cap;
  }
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= V) return rp_err(RP_EINTERNAL, "token %d outside %d", ids[i], V);
    t->v[t->n++] = (uint16_t)ids[i];
  }
  return RP_OK;
}

/* Encodes the whole file into *out: chunks cut where no piece crosses (a
 * chunk without such a cut grows until the end of the file). */
static rp_status encode_file(FILE *f, size_t n, const char *text_path, const rp_tokenizer *tk,
                             tokvec *out) {
  size_t cap = PREP_CHUNK, have = 0, done = 0;
  unsigned char *buf = malloc(cap);
  int32_t *ids = malloc(cap * sizeof *ids);
  rp_status s = buf && ids ? RP_OK : rp_err(RP_ENOMEM, "out of memory");
  while (s == RP_OK && (done < n || have)) {
    size_t want = RP_MIN(cap - have, n - done);
    if (want && fread(buf + have, 1, want, f) != want) {
      s = rp_err(RP_EIO, "reading '%s' failed near byte %zu (did the file change?)", text_path,
                 done);
      break;
    }
    done += want, have += want;
    size_t cut = done == n ? have : last_safe_cut(buf, have);
    if (!cut) {  /* one piece-safe chunk is longer than the buffer: grow it */
      unsigned char *nb = realloc(buf, 2 * cap);
      int32_t *ni = nb ? realloc(ids, 2 * cap * sizeof *ni) : NULL;
      if (nb) buf = nb;
      if (ni) ids = ni;
      if (!nb || !ni) s = rp_err(RP_ENOMEM, "out of memory: '%s' has a %zu-byte line", text_path, cap);
      cap *= 2;
      continue;
    }
    size_t k;
    s = rp_tokenizer_encode(tk, (const char *)buf, cut, ids, cap, &k);
    if (s == RP_OK) s = tokvec_push(out, ids, k, rp_tokenizer_vocab(tk));
    memmove(buf, buf + cut, have - cut);
    have -= cut;
  }
  free(buf);
  free(ids);
  return s;
}

rp_status rp_prepare_bpe(const char *text_path, const char *out_dir, double val_fraction,
                         const rp_tokenizer *tk) {
  RP_TRY(check_fraction(&val_fraction));
  if (!rp_tokenizer_can_encode(tk))
    return rp_err(RP_EINVAL, "the tokenizer cannot encode text (its table lacks single bytes); "
                  "use GPT-2's gpt2_tokenizer.bin");
  if (rp_tokenizer_vocab(tk) > 65536)
    return rp_err(RP_EINVAL, "the tokenizer has %d tokens; ringpipe writes uint16 shards (at most "
                  "65536 tokens)", rp_tokenizer_vocab(tk));
  FILE *f;
  size_t n;
  RP_TRY(open_text(text_path, &f, &n));
  tokvec t = {0};
  rp_status s = RP_OK;
  int32_t eot = rp_tokenizer_eot(tk);
  if (eot >= 0) s = tokvec_push(&t, &eot, 1, rp_tokenizer_vocab(tk));  /* a document starts */
  if (s == RP_OK && n) s = encode_file(f, n, text_path, tk, &t);
  fclose(f);
  size_t nval = val_count(t.n, val_fraction), ntrain = t.n - nval;
  if (s == RP_OK) s = check_split(text_path, n ? t.n : 0, ntrain, nval, "tokens");
  char train_path[RP_IO_PATH], val_path[RP_IO_PATH];
  shard_paths(out_dir, train_path, val_path);
  if (s == RP_OK) s = rp_io_mkdir_p(out_dir);
  if (s == RP_OK) s = rp_shard_write(train_path, t.v, ntrain);
  if (s == RP_OK) s = rp_shard_write(val_path, t.v + ntrain, nval);
  free(t.v);
  if (s == RP_OK)
    rp_info("prepared %zu train and %zu validation GPT-2 tokens (%zu bytes of text) in %s",
            ntrain, nval, n, out_dir);
  return s;
}
