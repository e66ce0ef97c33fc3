/* The byte-offset arena of one pipeline rank, planned offline from its action
 * list (rp_schedule.h: rp_schedule_plan_arena). Every buffer is an interval of
 * action indices with a size; offsets are assigned like the offline planners
 * of TFLite and XLA (greedy over a sorted list, each buffer in the tightest gap
 * left by the buffers it is live with), and the smallest of a few candidate
 * layouts is kept. The executor allocates arena_bytes and binds its views at
 * the planned offsets; the simulator and the advisor report the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_schedule.h"

static const char *const class_names[RP_BUF_NCLASS] = {"keep", "drop", "wstash", "recv", "grad"};

const char *rp_buf_class_name(int cls) {
  return cls >= 0 && cls < RP_BUF_NCLASS ? class_names[cls] : "?";
}

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

/* ---- the buffers of a rank: intervals from the action list and its slot plan ---- */

typedef struct {
  rp_buf *buf;
  int *slot;    /* the slot plan's slot of each buffer (for the pooled layout) */
  int n, cap;
} buf_list;

static int open_buf(buf_list *L, int cls, int chunk, int mb, int first, size_t size, int slot) {
  if (L->n == L->cap) {
    int cap = L->cap ? 2 * L->cap : 64;
    rp_buf *b = realloc(L->buf, (size_t)cap * sizeof *b);
    if (b) L->buf = b;
    int *s = realloc(L->slot, (size_t)cap * sizeof *s);
    if (s) L->slot = s;
    if (!b || !s) return -1;
    L->cap = cap;
  }
  L->buf[L->n] = (rp_buf){cls, chunk, mb, first, -1, align64(size), 0};
  L->slot[L->n] = slot;
  return L->n++;
}

static void close_buf(buf_list *L, int b, int last) {
  if (b >= 0 && L->buf[b].last < 0) L->buf[b].last = last;
}

/* Per-key (chunk * m + mb) and per-slot bookkeeping while walking the list. */
typedef struct {
  int *keep, *drop, *wst; /* [key] -> open buffer */
  int *rbuf, *gbuf;       /* [slot] -> open buffer */
} open_maps;

static void close_slot(buf_list *L, int *map, int slot, int i) {
  if (slot >= 0) close_buf(L, map[slot], i);
}

/* One action's effect on the buffers: what it releases first, then what it
 * takes (at the same index, so they are kept apart). */
static int walk_action(buf_list *L, open_maps *o, const rp_schedule *s, const rp_slot_plan *pl,
                       const rp_buf_sizes *sz, int i, rp_action a) {
  int key = a.chunk * s->m + a.mb, c = a.chunk;
  close_slot(L, o->rbuf, pl->rbuf[i], i); /* RECV takes below; F/B/I release here */
  close_slot(L, o->gbuf, pl->gin[i], i);
  switch (a.op) {
    case RP_OP_F:
      o->keep[key] = open_buf(L, RP_BUF_KEEP, c, a.mb, i, sz->keep[c], pl->act[i]);
      o->drop[key] = open_buf(L, RP_BUF_DROP, c, a.mb, i, sz->drop[c], pl->act[i]);
      return o->keep[key] < 0 || o->drop[key] < 0 ? -1 : 0;
    case RP_OP_B:
      close_buf(L, o->keep[key], i);
      close_buf(L, o->drop[key], i);
      break;
    case RP_OP_I:
      close_buf(L, o->drop[key], i);
      if ((o->wst[key] = open_buf(L, RP_BUF_WST, c, a.mb, i, sz->wstash[c], pl->wst[i])) < 0)
        return -1;
      break;
    case RP_OP_W:
      close_buf(L, o->keep[key], i);
      close_buf(L, o->wst[key], i);
      return 0;
    case RP_OP_RECV_F:
    case RP_OP_RECV_B:
      if ((o->rbuf[pl->rbuf[i]] = open_buf(L, RP_BUF_RBUF, c, a.mb, i, sz->msg, pl->rbuf[i])) < 0)
        return -1;
      return 0;
    case RP_OP_SEND_B: close_slot(L, o->gbuf, pl->gbuf[i], i); return 0;
    default: return 0;
  }
  /* B and I: the input gradient they keep for a SEND_B or the V's turn */
  if (pl->gbuf[i] >= 0 &&
      (o->gbuf[pl->gbuf[i]] = open_buf(L, RP_BUF_GBUF, c, a.mb, i, sz->msg, pl->gbuf[i])) < 0)
    return -1;
  return 0;
}

static rp_status collect_buffers(const rp_schedule *s, int rank, const rp_slot_plan *pl,
                                 const rp_buf_sizes *sz, buf_list *L) {
  int vm = s->v * s->m, n = s->n[rank];
  int slots = RP_MAX(pl->n_rbuf, pl->n_gbuf) + 1;
  open_maps o = {malloc(vm * sizeof(int)), malloc(vm * sizeof(int)), malloc(vm * sizeof(int)),
                 malloc(slots * sizeof(int)), malloc(slots * sizeof(int))};
  rp_status st = o.keep && o.drop && o.wst && o.rbuf && o.gbuf ? RP_OK : RP_ENOMEM;
  for (int k = 0; st == RP_OK && k < vm; k++) o.keep[k] = o.drop[k] = o.wst[k] = -1;
  for (int k = 0; st == RP_OK && k < slots; k++) o.rbuf[k] = o.gbuf[k] = -1;
  for (int i = 0; st == RP_OK && i < n; i++)
    if (walk_action(L, &o, s, pl, sz, i, s->acts[rank][i]) < 0) st = RP_ENOMEM;
  for (int b = 0; st == RP_OK && b < L->n; b++)
    if (L->buf[b].last < 0) L->buf[b].last = n - 1; /* never released: live to the end */
  free(o.keep), free(o.drop), free(o.wst), free(o.rbuf), free(o.gbuf);
  return st == RP_OK ? RP_OK : rp_err(RP_ENOMEM, "out of memory planning the arena");
}

/* A DROP that ends where its KEEP ends (a full B) is one buffer with it,
 * right after it: allocated together, they leave no gap between them.
 * folded_into[drop] = its KEEP, -1 for every other buffer. */
static void fold_drops(buf_list *L, int *folded_into) {
  for (int b = 0; b < L->n; b++) folded_into[b] = -1;
  for (int b = 0; b + 1 < L->n; b++) {
    rp_buf *k = &L->buf[b], *d = &L->buf[b + 1];
    if (k->cls != RP_BUF_KEEP || d->cls != RP_BUF_DROP || d->first != k->first ||
        d->last != k->last)
      continue;
    folded_into[b + 1] = b;
  }
}

/* ---- layouts ---- */

static int lifetimes_meet(const rp_buf *a, const rp_buf *b) {
  return a->first <= b->last && b->first <= a->last;
}

typedef struct {
  size_t off, end;
} span;

static int by_off(const void *x, const void *y) {
  const span *a = x, *b = y;
  return a->off < b->off ? -1 : a->off > b->off;
}

/* Places buffers in `order` one by one: among the buffers already placed that
 * are live with it, the tightest gap it fits in (best fit), else above them. */
static size_t place_greedy(const rp_buf *buf, int n, const int *order, span *tmp,
                           size_t *off) {
  size_t top = 0;
  for (int k = 0; k < n; k++) {
    int b = order[k], cnt = 0;
    for (int j = 0; j < k; j++) {
      int q = order[j];
      if (lifetimes_meet(&buf[b], &buf[q])) tmp[cnt++] = (span){off[q], off[q] + buf[q].size};
    }
    qsort(tmp, (size_t)cnt, sizeof *tmp, by_off);
    size_t at = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (int j = 0; j < cnt; j++) {
      if (tmp[j].off >= at && tmp[j].off - at >= buf[b].size && tmp[j].off - at < best_gap) {
        best_gap = tmp[j].off - at;
        best = at;
      }
      if (tmp[j].end > at) at = tmp[j].end;
    }
    off[b] = best != SIZE_MAX ? best : at;
    if (off[b] + buf[b].size > top) top = off[b] + buf[b].size;
  }
  return top;
}

/* What an order compares, copied beside the buffer's index: qsort takes no
 * context in C11, and a file-scope pointer to the buffers would make two
 * planners at once (threads) sort each other's lists. */
typedef struct {
  size_t size;
  int first, idx;
} sort_key;

static int by_size_desc(const void *x, const void *y) {
  const sort_key *a = x, *b = y;
  if (a->size != b->size) return a->size > b->size ? -1 : 1;
  if (a->first != b->first) return a->first - b->first;
  return a->idx - b->idx;
}
static int by_first(const void *x, const void *y) {
  const sort_key *a = x, *b = y;
  if (a->first != b->first) return a->first - b->first;
  if (a->size != b->size) return a->size > b->size ? -1 : 1;
  return a->idx - b->idx;
}

/* The layout before the arena: one pool per class, each as many slots as its
 * own peak count, each slot as large as the class's largest buffer (an
 * activation slot holds KEEP and DROP of one (chunk, mb) from F to W). */
static size_t place_pooled(const buf_list *L, const rp_slot_plan *pl, const rp_buf_sizes *sz,
                           int v, size_t *off) {
  size_t act = 0, wst = 0, msg = align64(sz->msg);
  for (int c = 0; c < v; c++) {
    act = RP_MAX(act, align64(sz->keep[c]) + align64(sz->drop[c]));
    wst = RP_MAX(wst, align64(sz->wstash[c]));
  }
  size_t base[RP_BUF_NCLASS], stride[RP_BUF_NCLASS] = {act, act, wst, msg, msg};
  base[RP_BUF_KEEP] = base[RP_BUF_DROP] = 0;
  base[RP_BUF_WST] = (size_t)pl->n_act * act;
  base[RP_BUF_RBUF] = base[RP_BUF_WST] + (size_t)pl->n_wst * wst;
  base[RP_BUF_GBUF] = base[RP_BUF_RBUF] + (size_t)pl->n_rbuf * msg;
  for (int b = 0; b < L->n; b++) {
    const rp_buf *x = &L->buf[b];
    off[b] = base[x->cls] + (size_t)L->slot[b] * stride[x->cls] +
             (x->cls == RP_BUF_DROP ? align64(sz->keep[x->chunk]) : 0);
  }
  return base[RP_BUF_GBUF] + (size_t)pl->n_gbuf * msg;
}

static size_t live_peak(const rp_buf *buf, int nbuf, int n) {
  size_t peak = 0;
  for (int i = 0; i < n; i++) {
    size_t live = 0;
    for (int b = 0; b < nbuf; b++)
      if (buf[b].first <= i && i <= buf[b].last) live += buf[b].size;
    peak = RP_MAX(peak, live);
  }
  return peak;
}

void rp_arena_plan_free(rp_arena_plan *plan) {
  if (!plan) return;
  free(plan->buf);
  for (int k = 0; k < RP_BUF_NCLASS; k++) free(plan->off[k]);
  memset(plan, 0, sizeof *plan);
}

/* The planned buffers as the executor looks them up: per action and class;
 * the list keeps a folded KEEP as one buffer of both sizes. */
static rp_status index_offsets(rp_arena_plan *out, const buf_list *L, const int *folded_into) {
  for (int k = 0; k < RP_BUF_NCLASS; k++) {
    out->off[k] = malloc((size_t)(out->n > 0 ? out->n : 1) * sizeof(size_t));
    if (!out->off[k]) return rp_err(RP_ENOMEM, "out of memory planning the arena");
    for (int i = 0; i < out->n; i++) out->off[k][i] = SIZE_MAX;
  }
  out->buf = malloc((size_t)(L->n > 0 ? L->n : 1) * sizeof *out->buf);
  int *listed = malloc((size_t)(L->n > 0 ? L->n : 1) * sizeof *listed);
  if (!out->buf || !listed) {
    free(listed);
    return rp_err(RP_ENOMEM, "out of memory planning the arena");
  }
  for (int b = 0; b < L->n; b++) {
    const rp_buf *x = &L->buf[b];
    int into = folded_into[b];
    out->off[x->cls][x->first] = into >= 0 ? L->buf[into].off + L->buf[into].size : x->off;
    if (into >= 0) {
      out->buf[listed[into]].size += x->size;
      continue;
    }
    listed[b] = out->nbuf;
    out->buf[out->nbuf++] = *x;
  }
  free(listed);
  return RP_OK;
}

/* Lays out the unfolded buffers: the smallest candidate wins. */
static rp_status choose_layout(buf_list *L, const int *folded_into, const rp_slot_plan *pl,
                               const rp_buf_sizes *sz, int v, rp_arena_plan *out) {
  int n = L->n;
  int *order = malloc((size_t)(n + 1) * sizeof *order);
  size_t *off = calloc((size_t)(n + 1), sizeof *off);
  size_t *best = malloc((size_t)(n + 1) * sizeof *best);
  span *tmp = malloc((size_t)(n + 1) * sizeof *tmp);
  sort_key *keys = malloc((size_t)(n + 1) * sizeof *keys);
  if (!order || !off || !best || !tmp || !keys) {
    free(order), free(off), free(best), free(tmp), free(keys);
    return rp_err(RP_ENOMEM, "out of memory planning the arena");
  }
  /* the pooled layout places every buffer where its slot was */
  size_t top = place_pooled(L, pl, sz, v, best);
  snprintf(out->method, sizeof out->method, "class slot pools");
  out->pooled_bytes = top;
  /* greedy layouts over the unfolded buffers, a folded DROP grows its KEEP */
  for (int b = 0; b < n; b++)
    if (folded_into[b] >= 0) L->buf[folded_into[b]].size += L->buf[b].size;
  int cnt = 0;
  for (int b = 0; b < n; b++)
    if (folded_into[b] < 0) keys[cnt++] = (sort_key){L->buf[b].size, L->buf[b].first, b};
  int (*orders[2])(const void *, const void *) = {by_size_desc, by_first};
  const char *names[2] = {"best fit by size", "best fit by start"};
  for (int k = 0; k < 2; k++) {
    qsort(keys, (size_t)cnt, sizeof *keys, orders[k]);
    for (int j = 0; j < cnt; j++) order[j] = keys[j].idx;
    size_t t = place_greedy(L->buf, cnt, order, tmp, off);
    if (t < top) {
      top = t;
      memcpy(best, off, (size_t)n * sizeof *off);
      snprintf(out->method, sizeof out->method, "%s", names[k]);
    }
  }
  for (int b = 0; b < n; b++)
    if (folded_into[b] < 0) L->buf[b].off = best[b];
  for (int b = 0; b < n; b++) /* back to KEEP's own size: its DROP follows it */
    if (folded_into[b] >= 0) L->buf[folded_into[b]].size -= L->buf[b].size;
  out->arena_bytes = top;
  free(order), free(off), free(best), free(tmp), free(keys);
  return RP_OK;
}

rp_status rp_schedule_plan_arena(const rp_schedule *s, int rank, const rp_buf_sizes *sz,
                                 rp_arena_plan *out) {
  memset(out, 0, sizeof *out);
  rp_slot_plan pl;
  RP_TRY(rp_schedule_plan_slots(s, rank, &pl));
  buf_list L = {0};
  out->n = s->n[rank];
  rp_status st = collect_buffers(s, rank, &pl, sz, &L);
  int *folded_into = st == RP_OK ? malloc((size_t)(L.n + 1) * sizeof(int)) : NULL;
  if (st == RP_OK && !folded_into) st = rp_err(RP_ENOMEM, "out of memory planning the arena");
  if (st == RP_OK) {
    fold_drops(&L, folded_into);
    st = choose_layout(&L, folded_into, &pl, sz, s->v, out);
  }
  if (st == RP_OK) st = index_offsets(out, &L, folded_into);
  if (st == RP_OK) out->live_peak = live_peak(out->buf, out->nbuf, out->n);
  free(folded_into);
  free(L.buf);
  free(L.slot);
  rp_slot_plan_free(&pl);
  if (st != RP_OK) rp_arena_plan_free(out);
  return st;
}
