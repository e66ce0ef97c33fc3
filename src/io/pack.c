/* Packed loading (--pack): documents from each shard's index (or end-of-text
 * tokens) packed whole into rows of T tokens; see rp_loader_set_pack. */
#include <stdlib.h>
#include <string.h>

#include "io/loader_internal.h"
#include "ringpipe/rp_docs.h"

void rp_loader_pack_free(rp_loader *l) {
  free(l->pieces);
  free(l->row_first);
  l->pieces = NULL;
  l->row_first = NULL;
  l->npieces = l->nrows = 0;
  l->packed = 0;
}

/* Document lengths of shard i cut after each eot token (the last document may
 * lack one), by one sequential read. */
static rp_status lengths_from_eot(const rp_shard *sh, int eot, uint32_t **lens, size_t *n) {
  enum { CHUNK = 1 << 16 };
  uint16_t *buf = malloc(sizeof *buf * CHUNK);
  size_t cap = 1024, cnt = 0;
  uint32_t *v = malloc(sizeof *v * cap);
  if (!buf || !v) {
    free(buf), free(v);
    return rp_err(RP_ENOMEM, "out of memory scanning %s for end-of-text tokens", sh->path);
  }
  rp_status s = RP_OK;
  uint32_t cur = 0;
  for (size_t at = 0; at < sh->num_tokens && s == RP_OK; at += CHUNK) {
    size_t m = RP_MIN((size_t)CHUNK, sh->num_tokens - at);
    s = rp_shard_read(sh, at, m, buf);
    for (size_t i = 0; i < m && s == RP_OK; i++) {
      cur++;
      if (buf[i] != eot && at + i + 1 < sh->num_tokens) continue;
      if (cnt == cap) {
        uint32_t *nv = realloc(v, sizeof *v * (cap *= 2));
        if (!nv) s = rp_err(RP_ENOMEM, "out of memory for the documents of %s", sh->path);
        else v = nv;
      }
      if (s == RP_OK) v[cnt++] = cur, cur = 0;
    }
  }
  free(buf);
  if (s != RP_OK) {
    free(v);
    return s;
  }
  *lens = v;
  *n = cnt;
  return RP_OK;
}

static rp_status add_piece(rp_loader *l, uint64_t *cap, int shard, uint64_t first, uint32_t len) {
  if (l->npieces == *cap) {
    uint64_t nc = *cap ? 2 * *cap : 1024;
    rp_pack_piece *np = realloc(l->pieces, sizeof *np * nc);
    if (!np) return rp_err(RP_ENOMEM, "out of memory for the packed documents");
    l->pieces = np;
    *cap = nc;
  }
  l->pieces[l->npieces++] = (rp_pack_piece){.shard = shard, .len = len, .first = first};
  return RP_OK;
}

/* Documents of every shard as pieces of at most T tokens. */
static rp_status collect_pieces(rp_loader *l, int eot) {
  uint64_t cap = 0;
  for (int i = 0; i < l->nfiles; i++) {
    uint32_t *lens = NULL;
    size_t n = 0;
    rp_status s = rp_doc_index_read(&l->shards[i], &lens, &n);
    if (s == RP_EIO && eot >= 0) s = lengths_from_eot(&l->shards[i], eot, &lens, &n);
    if (s != RP_OK) return s;
    uint64_t at = 0;
    for (size_t d = 0; d < n && s == RP_OK; d++) {
      for (uint32_t left = lens[d]; left > 0 && s == RP_OK;) {
        uint32_t len = RP_MIN(left, (uint32_t)l->T);
        s = add_piece(l, &cap, i, at, len);
        at += len;
        left -= len;
      }
    }
    free(lens);
    if (s != RP_OK) return s;
  }
  return RP_OK;
}

/* Tokens a piece takes in its row: its length padded to a multiple of align. */
static uint64_t span_of(const rp_loader *l, const rp_pack_piece *pc) {
  uint64_t a = (uint64_t)l->align;
  return RP_MIN((uint64_t)l->T, (pc->len + a - 1) / a * a);
}

/* Greedy rows: a piece that does not fit the rest of the row starts the next. */
static rp_status make_rows(rp_loader *l) {
  l->row_first = malloc(sizeof *l->row_first * (l->npieces + 1));
  if (!l->row_first) return rp_err(RP_ENOMEM, "out of memory for the packed rows");
  uint64_t room = 0;
  l->nrows = 0;
  for (uint64_t p = 0; p < l->npieces; p++) {
    uint64_t span = span_of(l, &l->pieces[p]);
    if (span > room) {
      if (l->nrows) l->pad_tokens += room;
      l->row_first[l->nrows++] = p;
      room = (uint64_t)l->T;
    }
    room -= span;
    l->real_tokens += l->pieces[p].len;
    l->pad_tokens += span - l->pieces[p].len;
  }
  l->pad_tokens += room;
  l->row_first[l->nrows] = l->npieces;
  return RP_OK;
}

rp_status rp_loader_set_pack(rp_loader *l, int eot, int align) {
  rp_loader_pack_free(l);
  if (align < 1 || align > l->T)
    return rp_err(RP_EINVAL, "--pack-align %d must be in 1..--seq %d", align, l->T);
  l->align = align;
  rp_status s = collect_pieces(l, eot);
  if (s == RP_OK) s = make_rows(l);
  if (s == RP_OK && l->nrows / (uint64_t)l->B == 0)
    s = rp_err(RP_EINVAL, "the packed documents fill %llu rows of %d tokens, fewer than one "
               "batch of --batch %d rows; lower --batch or --seq, or prepare more text",
               (unsigned long long)l->nrows, l->T, l->B);
  if (s != RP_OK) {
    rp_loader_pack_free(l);
    return s;
  }
  l->packed = 1;
  l->W = l->nrows / (uint64_t)l->B;
  return RP_OK;
}

int rp_loader_is_packed(const rp_loader *l) { return l->packed; }

double rp_loader_pad_fraction(const rp_loader *l) {
  return l->packed && l->real_tokens ? (double)l->pad_tokens / (double)l->real_tokens : 0.0;
}

/* Row r of the packed stream into in/tg (T each) and its lengths (returns the
 * number of documents, padding included). */
static rp_status fill_row(rp_loader *l, uint64_t r, int32_t *in, int32_t *tg, int32_t *lens,
                          int *nd) {
  int t = 0, n = 0;
  for (uint64_t p = l->row_first[r]; p < l->row_first[r + 1]; p++) {
    const rp_pack_piece *pc = &l->pieces[p];
    const rp_shard *sh = &l->shards[pc->shard];
    RP_TRY(rp_shard_read(sh, pc->first, pc->len, l->buf));
    RP_TRY(rp_shard_check_ids(sh, l->buf, pc->len, pc->first, l->V));
    for (uint32_t i = 0; i < pc->len; i++, t++) {
      in[t] = l->buf[i];
      tg[t] = i + 1 < pc->len ? l->buf[i + 1] : -1;  /* nothing predicts the next document */
    }
    const int span = (int)span_of(l, pc);
    for (uint32_t i = pc->len; i < (uint32_t)span; i++, t++) in[t] = 0, tg[t] = -1;
    lens[n++] = span;   /* alignment padding belongs to its document: after it, unseen */
  }
  if (t < l->T) {  /* padding: a document of its own that nothing learns from */
    lens[n++] = l->T - t;
    for (; t < l->T; t++) in[t] = 0, tg[t] = -1;
  }
  *nd = n;
  return RP_OK;
}

rp_status rp_loader_next_packed(rp_loader *l, int32_t *inputs, int32_t *targets, rp_docs *docs) {
  if (!l->packed) return rp_err(RP_EINTERNAL, "rp_loader_next_packed on an unpacked loader");
  if (docs->B != l->B || docs->T != l->T)
    return rp_err(RP_EINTERNAL, "document layout %d x %d for a %d x %d loader", docs->B, docs->T,
                  l->B, l->T);
  int32_t *lens = malloc(sizeof *lens * (size_t)l->T);
  if (!lens) return rp_err(RP_ENOMEM, "out of memory for a packed row");
  uint64_t w = rp_loader_take_window(l);
  rp_status s = RP_OK;
  for (int b = 0; b < l->B && s == RP_OK; b++) {
    int nd = 0;
    s = fill_row(l, w * (uint64_t)l->B + (uint64_t)b, inputs + (size_t)b * l->T,
                 targets + (size_t)b * l->T, lens, &nd);
    if (s == RP_OK) s = rp_docs_set_row(docs, b, lens, nd);
  }
  free(lens);
  return s;
}
