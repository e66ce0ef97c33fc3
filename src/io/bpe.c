/* GPT-2 byte-level BPE over llm.c's token table: the id of a token is its merge
 * rank, so encoding a piece repeatedly merges the adjacent pair whose joined
 * bytes form the token of lowest id (tiktoken's formulation), leftmost first on
 * ties. Lookups go through an open-addressing hash of the token bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/bpe.h"

#define NONE INT32_MAX

typedef struct {
  int32_t rank;
  size_t pos;
} heap_item;

struct rp_bpe {
  const char *blob;
  const uint32_t *off;
  int32_t *slots;   /* token ids, -1 empty */
  uint64_t mask;
  int32_t byte_id[256];
  /* scratch for one piece: part starts (or prev links), pair ranks, next links, heap */
  size_t *start, *next;
  int32_t *rank;
  heap_item *heap;
  size_t cap_start, cap_rank, cap_next, cap_heap;
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
  free(b->next);
  free(b->rank);
  free(b->heap);
  free(b);
}

static rp_status grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return RP_OK;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *np = realloc(*p, c * elem);
  if (!np) return rp_err(RP_ENOMEM, "out of memory encoding a piece of %zu bytes", need);
  *p = np;
  *cap = c;
  return RP_OK;
}

/* Scratch for a piece of n bytes: part starts and pair ranks (n + 1 each), and
 * for the heap merge the next links and the heap (n each). */
static rp_status ensure_scratch(rp_bpe *b, size_t n, int heap) {
  RP_TRY(grow((void **)&b->start, &b->cap_start, n + 1, sizeof *b->start));
  RP_TRY(grow((void **)&b->rank, &b->cap_rank, n + 1, sizeof *b->rank));
  if (!heap) return RP_OK;
  RP_TRY(grow((void **)&b->next, &b->cap_next, n + 1, sizeof *b->next));
  return grow((void **)&b->heap, &b->cap_heap, 2 * n + 2, sizeof *b->heap);
}

/* Rank of parts k and k+1 joined (parts [start[k], start[k+2])), NONE past the end. */
static int32_t pair_rank(const rp_bpe *b, const unsigned char *p, size_t nparts, size_t k) {
  if (k + 1 >= nparts) return NONE;
  return lookup(b, p + b->start[k], b->start[k + 2] - b->start[k]);
}

static rp_status put_id(int32_t id, int32_t *out, size_t cap, size_t *n_out) {
  if (*n_out >= cap) return rp_err(RP_EINVAL, "the output holds only %zu tokens", cap);
  out[(*n_out)++] = id;
  return RP_OK;
}

/* Short pieces: a scan for the lowest-ranked pair per merge, O(n^2). */
rp_status rp_bpe_merge_linear(rp_bpe *b, const unsigned char *p, size_t n, int32_t *out,
                              size_t cap, size_t *n_out) {
  RP_TRY(ensure_scratch(b, n, 0));
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
  for (size_t k = 0; k < parts; k++)
    RP_TRY(put_id(lookup(b, p + b->start[k], b->start[k + 1] - b->start[k]), out, cap, n_out));
  return RP_OK;
}

/* ---- long pieces: the same merges in O(n log n). Parts are a linked list
 * named by their first byte (i: bytes [i, next[i])); a min-heap holds (rank,
 * position) of every pair, stale entries skipped when popped, so each merge is
 * the lowest rank, leftmost on ties, exactly as in the scan. */

static int heap_less(const heap_item *a, const heap_item *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(heap_item *h, size_t *n, heap_item x) {
  size_t i = (*n)++;
  while (i && heap_less(&x, &h[(i - 1) / 2])) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
  h[i] = x;
}

static heap_item heap_pop(heap_item *h, size_t *n) {
  heap_item top = h[0], x = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
    if (!heap_less(&h[c], &x)) break;
    h[i] = h[c], i = c;
  }
  if (*n) h[i] = x;
  return top;
}

/* Rank of part i joined with its successor (rank[] caches it per part). */
static int32_t linked_rank(const rp_bpe *b, const unsigned char *p, size_t n, size_t i) {
  size_t j = b->next[i];
  return j >= n ? NONE : lookup(b, p + i, b->next[j] - i);
}

rp_status rp_bpe_merge_heap(rp_bpe *b, const unsigned char *p, size_t n, int32_t *out,
                            size_t cap, size_t *n_out) {
  RP_TRY(ensure_scratch(b, n, 1));
  size_t *next = b->next, *prev = b->start, nh = 0;  /* start[] serves as prev links here */
  heap_item *h = b->heap;
  for (size_t i = 0; i < n; i++) next[i] = i + 1, prev[i] = i ? i - 1 : SIZE_MAX;
  next[n] = n;
  for (size_t i = 0; i < n; i++) {
    b->rank[i] = linked_rank(b, p, n, i);
    if (b->rank[i] != NONE) heap_push(h, &nh, (heap_item){b->rank[i], i});
  }
  while (nh) {
    heap_item top = heap_pop(h, &nh);
    size_t i = top.pos;
    if (b->rank[i] != top.rank) continue;  /* stale: part i changed or was merged away */
    size_t j = next[i];
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    b->rank[j] = NONE;  /* j is gone */
    b->rank[i] = linked_rank(b, p, n, i);
    if (b->rank[i] != NONE) heap_push(h, &nh, (heap_item){b->rank[i], i});
    if (prev[i] != SIZE_MAX) {
      size_t q = prev[i];
      b->rank[q] = linked_rank(b, p, n, q);
      if (b->rank[q] != NONE) heap_push(h, &nh, (heap_item){b->rank[q], q});
    }
    if (nh > 2 * n) {  /* too many stale entries: rebuild from the live ranks */
      nh = 0;
      for (size_t k = 0; k < n; k = next[k])
        if (b->rank[k] != NONE) heap_push(h, &nh, (heap_item){b->rank[k], k});
    }
  }
  for (size_t i = 0; i < n; i = next[i])
    RP_TRY(put_id(lookup(b, p + i, next[i] - i), out, cap, n_out));
  return RP_OK;
}

/* Ids of one piece p[0..n) appended at out[*n_out]. */
static rp_status encode_piece(rp_bpe *b, const unsigned char *p, size_t n, int32_t *out,
                              size_t cap, size_t *n_out) {
  int32_t whole = n > 1 ? lookup(b, p, n) : b->byte_id[p[0]];
  if (whole != NONE) return put_id(whole, out, cap, n_out);  /* most words are one token */
  return n <= RP_BPE_HEAP_MIN ? rp_bpe_merge_linear(b, p, n, out, cap, n_out)
                              : rp_bpe_merge_heap(b, p, n, out, cap, n_out);
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
