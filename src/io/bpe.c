/* GPT-2 byte-level BPE over llm.c's token table: the id of a token is its merge
 * rank, so encoding a piece repeatedly merges the adjacent pair whose joined
 * bytes form the token of lowest id (tiktoken's formulation), leftmost first on
 * ties. Lookups go through an open-addressing hash of the token bytes. */
#include <stdlib.h>
#include <string.h>

#include "io/bpe.h"

#define NONE INT32_MAX

struct rp_bpe {
  const char *blob;
  const uint32_t *off;
  int32_t *slots;   /* token ids, -1 empty */
  uint64_t mask;
  int32_t byte_id[256];
  /* scratch for one piece: part starts and pair ranks */
  size_t *start;
  int32_t *rank;
  size_t scratch;
};

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;  /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* The id of the token with these bytes, or NONE. */
static int32_t lookup(const rp_bpe *b, const unsigned char *p, size_t n) {
  for (uint64_t h = hash_bytes(p, n) & b->mask;; h = (h + 1) & b->mask) {
    int32_t id = b->slots[h];
    if (id < 0) return NONE;
    size_t len = b->off[id + 1] - b->off[id];
    if (len == n && !memcmp(b->blob + b->off[id], p, n)) return id;
  }
}

rp_status rp_bpe_build(rp_bpe **out, const char *blob, const uint32_t *off, int V, int skip_id) {
  *out = NULL;
  rp_bpe *b = calloc(1, sizeof *b);
  uint64_t cap = 1024;
  while (cap < 2 * (uint64_t)V) cap *= 2;
  if (b) b->slots = malloc(cap * sizeof *b->slots);
  if (!b || !b->slots) {
    rp_bpe_free(b);
    return rp_err(RP_ENOMEM, "out of memory for the BPE table of %d tokens", V);
  }
  memset(b->slots, 0xFF, cap * sizeof *b->slots);
  b->blob = blob;
  b->off = off;
  b->mask = cap - 1;
  for (int32_t id = 0; id < V; id++) {
    if (id == skip_id) continue;
    const unsigned char *p = (const unsigned char *)blob + off[id];
    size_t n = off[id + 1] - off[id];
    if (lookup(b, p, n) != NONE) continue;  /* a duplicate: the lower id (rank) wins */
    uint64_t h = hash_bytes(p, n) & b->mask;
    while (b->slots[h] >= 0) h = (h + 1) & b->mask;
    b->slots[h] = id;
  }
  for (int c = 0; c < 256; c++) {
    unsigned char ch = (unsigned char)c;
    b->byte_id[c] = lookup(b, &ch, 1);
    if (b->byte_id[c] == NONE) {
      rp_bpe_free(b);
      return rp_err(RP_EINVAL, "the token table has no token for byte 0x%02x, so it cannot encode "
                    "every text (GPT-2's byte-level tables hold all 256 bytes)", c);
    }
  }
  *out = b;
  return RP_OK;
}

void rp_bpe_free(rp_bpe *b) {
  if (!b) return;
  free(b->slots);
  free(b->start);
  free(b->rank);
  free(b);
}

static rp_status ensure_scratch(rp_bpe *b, size_t n) {
  if (n + 1 <= b->scratch) return RP_OK;
  size_t cap = b->scratch ? b->scratch : 64;
  while (cap < n + 1) cap *= 2;
  size_t *st = realloc(b->start, cap * sizeof *st);
  if (st) b->start = st;
  int32_t *rk = st ? realloc(b->rank, cap * sizeof *rk) : NULL;
  if (rk) b->rank = rk;
  if (!st || !rk) return rp_err(RP_ENOMEM, "out of memory encoding a piece of %zu bytes", n);
  b->scratch = cap;
  return RP_OK;
}

/* Rank of parts k and k+1 joined (parts [start[k], start[k+2])), NONE past the end. */
static int32_t pair_rank(const rp_bpe *b, const unsigned char *p, size_t nparts, size_t k) {
  if (k + 1 >= nparts) return NONE;
  return lookup(b, p + b->start[k], b->start[k + 2] - b->start[k]);
}

/* Ids of one piece p[0..n) appended at out[*n_out]. */
static rp_status encode_piece(rp_bpe *b, const unsigned char *p, size_t n, int32_t *out,
                              size_t cap, size_t *n_out) {
  int32_t whole = n > 1 ? lookup(b, p, n) : b->byte_id[p[0]];
  if (whole != NONE) {  /* most words are one token */
    if (*n_out >= cap) return rp_err(RP_EINVAL, "the output holds only %zu tokens", cap);
    out[(*n_out)++] = whole;
    return RP_OK;
  }
  RP_TRY(ensure_scratch(b, n));
  size_t parts = n;
  for (size_t i = 0; i <= n; i++) b->start[i] = i;
  for (size_t k = 0; k < parts; k++) b->rank[k] = pair_rank(b, p, parts, k);
  for (;;) {
    size_t best = 0;
    for (size_t k = 1; k + 1 < parts; k++)
      if (b->rank[k] < b->rank[best]) best = k;
    if (parts < 2 || b->rank[best] == NONE) break;
    /* merge parts best and best+1: drop the boundary between them */
    memmove(b->start + best + 1, b->start + best + 2, (parts - best - 1) * sizeof *b->start);
    memmove(b->rank + best + 1, b->rank + best + 2, (parts - best - 2) * sizeof *b->rank);
    parts--;
    b->rank[best] = pair_rank(b, p, parts, best);
    if (best) b->rank[best - 1] = pair_rank(b, p, parts, best - 1);
  }
  if (*n_out + parts > cap) return rp_err(RP_EINVAL, "the output holds only %zu tokens", cap);
  for (size_t k = 0; k < parts; k++)
    out[(*n_out)++] = lookup(b, p + b->start[k], b->start[k + 1] - b->start[k]);
  return RP_OK;
}

rp_status rp_bpe_encode(rp_bpe *b, const unsigned char *text, size_t len, int32_t *out,
                        size_t cap, size_t *n) {
  *n = 0;
  for (size_t i = 0; i < len;) {
    size_t end = rp_gpt2_piece_end(text, len, i);
    RP_TRY(encode_piece(b, text + i, end - i, out, cap, n));
    i = end;
  }
  return RP_OK;
}
