/* Data parallelism: bucketed non-blocking gradient reduction and ZeRO-1.
 * See include/ringpipe/rp_dp.h. */
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_dp.h"
#include "ringpipe/rp_util.h"
#include "ringpipe/rp_wait.h"

#define MAX_RANGES 8

typedef struct {
  size_t off, n;          /* in the chunk's flat buffer */
  int *counts, *displs;   /* ZeRO: part k of the range is [displs[k], +counts[k]) from off */
  size_t shard_pos;       /* ZeRO: where the owned part sits in the chunk's shard */
  int alone;              /* never merged with a neighbour (the tied wte) */
} range;

typedef struct {
  int chunk;
  range r[MAX_RANGES];
  int nr;
  int units, reports;     /* ready when reports == units * microbatches */
  MPI_Request req[MAX_RANGES];
  int launched;
} bucket;

typedef struct {
  int nunits;             /* head, layers, embed */
  int *unit_bucket;       /* unit index -> bucket */
  float *m, *v;           /* owned optimizer state */
  float *gshard;          /* ZeRO: reduced gradients of the owned parts */
  size_t owned;           /* floats owned */
  long wte_pos;           /* ZeRO: shard position of the owned wte part, -1 if no wte */
  size_t wte_owned;
} chunk_state;

struct rp_dp {
  rp_dp_cfg cfg;
  uint16_t **copies16; /* per chunk, its parameters' bf16 copies, or NULL (see
                          rp_dp_set_bf16_copies) */
  int rank, size;
  bucket *b;
  int nb;
  chunk_state *cs;
  double t_first_launch, t_done, exposed;
  int launched_any;
};

/* unit index: 0 head, 1 + i layer i, nlayers + 1 embed */
static int unit_index(const rp_chunk *m, int unit) {
  if (unit == RP_UNIT_HEAD) return 0;
  if (unit == RP_UNIT_EMBED) return m->spec.num_layers + 1;
  return 1 + unit;
}

static void tensor_span(const rp_chunk *m, const char *name_prefix, int layer, size_t *lo,
                        size_t *hi) {
  *lo = (size_t)-1, *hi = 0;
  for (int i = 0; i < m->num_tensors; i++) {
    const rp_tensor *t = &m->tensors[i];
    int hit = layer >= 0 ? t->layer == layer : strncmp(t->name, name_prefix, strlen(name_prefix)) == 0;
    if (!hit) continue;
    if (t->offset < *lo) *lo = t->offset;
    if (t->offset + t->numel > *hi) *hi = t->offset + t->numel;
  }
}

/* Adds a range to a bucket, merged with its neighbour when adjacent (one
 * message for consecutive layers) unless `alone` (the tied wte keeps its own
 * range so that first and last stage split it alike). */
static void add_range(bucket *b, size_t off, size_t n, int alone) {
  if (!n) return;
  if (alone) {
    RP_CHECK(b->nr < MAX_RANGES);
    b->r[b->nr++] = (range){.off = off, .n = n, .alone = 1};
    return;
  }
  if (b->nr && !b->r[b->nr - 1].alone && b->r[b->nr - 1].off + b->r[b->nr - 1].n == off) {
    b->r[b->nr - 1].n += n;  /* consecutive layers merge into one message */
    return;
  }
  if (b->nr && !b->r[b->nr - 1].alone && off + n == b->r[b->nr - 1].off) {
    b->r[b->nr - 1].off = off;
    b->r[b->nr - 1].n += n;
    return;
  }
  RP_CHECK(b->nr < MAX_RANGES);
  b->r[b->nr++] = (range){.off = off, .n = n};
}

/* The parameter ranges of one unit. wte is always its own range so that the
 * first and last pipeline stage split it alike under ZeRO. */
static void unit_ranges(const rp_chunk *m, int u, size_t off[3], size_t n[3], int *k) {
  size_t lo, hi;
  *k = 0;
  const rp_tensor *wte = rp_chunk_find(m, "wte.weight");
  if (u == 0) {
    if (!m->spec.has_head) return;
    tensor_span(m, "ln_f.", -1, &lo, &hi);
    off[*k] = lo, n[(*k)++] = hi - lo;
    if (!m->spec.has_embed) off[*k] = wte->offset, n[(*k)++] = wte->numel;
  } else if (u == m->spec.num_layers + 1) {
    if (!m->spec.has_embed) return;
    off[*k] = wte->offset, n[(*k)++] = wte->numel;
    const rp_tensor *wpe = rp_chunk_find(m, "wpe.weight");
    off[*k] = wpe->offset, n[(*k)++] = wpe->numel;
  } else {
    tensor_span(m, "", m->spec.first_layer + u - 1, &lo, &hi);
    off[*k] = lo, n[(*k)++] = hi - lo;
  }
}

static rp_status plan_buckets(rp_dp *d) {
  int cap = 0;
  for (int c = 0; c < d->cfg.nchunks; c++) cap += d->cfg.chunks[c]->spec.num_layers + 2;
  d->b = calloc(cap, sizeof *d->b);
  if (!d->b) return rp_err(RP_ENOMEM, "out of memory");
  for (int c = 0; c < d->cfg.nchunks; c++) {
    const rp_chunk *m = d->cfg.chunks[c];
    chunk_state *cs = &d->cs[c];
    cs->nunits = m->spec.num_layers + 2;
    cs->unit_bucket = malloc(cs->nunits * sizeof(int));
    if (!cs->unit_bucket) return rp_err(RP_ENOMEM, "out of memory");
    bucket *cur = NULL;
    size_t cur_n = 0;
    /* backward order: head, last layer ... first layer, embeddings */
    for (int step = 0; step < cs->nunits; step++) {
      int u = step == 0 ? 0 : step == cs->nunits - 1 ? cs->nunits - 1 : cs->nunits - 1 - step;
      size_t off[3], n[3];
      int k;
      unit_ranges(m, u, off, n, &k);
      cs->unit_bucket[u] = -1;
      if (k == 0) continue; /* e.g. the head unit of a chunk without the head */
      if (!cur || cur_n >= d->cfg.bucket_floats || cur->nr + k > MAX_RANGES) {
        cur = &d->b[d->nb++];
        cur->chunk = c;
        cur_n = 0;
      }
      const rp_tensor *wte = rp_chunk_find(m, "wte.weight");
      for (int j = 0; j < k; j++)
        add_range(cur, off[j], n[j], wte && off[j] == wte->offset), cur_n += n[j];
      cur->units++;
      cs->unit_bucket[u] = (int)(cur - d->b);
    }
  }
  return RP_OK;
}

/* ZeRO: split every range into `size` parts; the rank's part goes into its shard. */
static rp_status plan_shards(rp_dp *d) {
  for (int i = 0; i < d->nb; i++) {
    bucket *b = &d->b[i];
    chunk_state *cs = &d->cs[b->chunk];
    const rp_chunk *m = d->cfg.chunks[b->chunk];
    const rp_tensor *wte = rp_chunk_find(m, "wte.weight");
    for (int j = 0; j < b->nr; j++) {
      range *r = &b->r[j];
      r->counts = malloc(d->size * sizeof(int));
      r->displs = malloc(d->size * sizeof(int));
      if (!r->counts || !r->displs) return rp_err(RP_ENOMEM, "out of memory");
      for (int k = 0; k < d->size; k++) {
        long lo = (long)(r->n * k / d->size), hi = (long)(r->n * (k + 1) / d->size);
        r->displs[k] = (int)lo;
        r->counts[k] = (int)(hi - lo);
      }
      r->shard_pos = cs->owned;
      if (wte && r->off == wte->offset && r->n == wte->numel) {
        cs->wte_pos = (long)cs->owned;
        cs->wte_owned = r->counts[d->rank];
      }
      cs->owned += r->counts[d->rank];
    }
  }
  return RP_OK;
}

rp_status rp_dp_create(rp_dp **out, const rp_dp_cfg *cfg) {
  rp_dp *d = calloc(1, sizeof *d);
  if (!d) return rp_err(RP_ENOMEM, "out of memory");
  d->cfg = *cfg;
  if (d->cfg.bucket_floats == 0) d->cfg.bucket_floats = 1 << 20;
  MPI_Comm_rank(cfg->comm, &d->rank);
  MPI_Comm_size(cfg->comm, &d->size);
  d->cfg.chunks = malloc(cfg->nchunks * sizeof(rp_chunk *));
  d->cs = calloc(cfg->nchunks, sizeof *d->cs);
  if (!d->cfg.chunks || !d->cs) return rp_err(RP_ENOMEM, "out of memory");
  memcpy(d->cfg.chunks, cfg->chunks, cfg->nchunks * sizeof(rp_chunk *));
  for (int c = 0; c < cfg->nchunks; c++) d->cs[c].wte_pos = -1;
  rp_status s = plan_buckets(d);
  if (s == RP_OK && cfg->zero) s = plan_shards(d);
  for (int c = 0; c < cfg->nchunks && s == RP_OK; c++) {
    chunk_state *cs = &d->cs[c];
    if (!cfg->zero) cs->owned = d->cfg.chunks[c]->num_params;
    cs->m = rp_alloc(cs->owned * sizeof(float) + 64, RP_MEM_OPTIM);
    cs->v = rp_alloc(cs->owned * sizeof(float) + 64, RP_MEM_OPTIM);
    if (cfg->zero) cs->gshard = rp_alloc(cs->owned * sizeof(float) + 64, RP_MEM_GRADS);
    if (!cs->m || !cs->v || (cfg->zero && !cs->gshard)) s = rp_err(RP_ENOMEM, "out of memory");
  }
  if (s != RP_OK) {
    rp_dp_destroy(d);
    return s;
  }
  *out = d;
  return RP_OK;
}

void rp_dp_destroy(rp_dp *d) {
  if (!d) return;
  for (int i = 0; d->b && i < d->nb; i++)
    for (int j = 0; j < d->b[i].nr; j++) free(d->b[i].r[j].counts), free(d->b[i].r[j].displs);
  for (int c = 0; d->cs && c < d->cfg.nchunks; c++) {
    free(d->cs[c].unit_bucket);
    rp_free(d->cs[c].m), rp_free(d->cs[c].v), rp_free(d->cs[c].gshard);
  }
  free(d->b), free(d->cs), free(d->cfg.chunks), free(d->copies16);
  free(d);
}

void rp_dp_set_microbatches(rp_dp *d, int microbatches) { d->cfg.microbatches = microbatches; }

void rp_dp_begin_step(rp_dp *d) {
  for (int i = 0; i < d->nb; i++) {
    d->b[i].reports = 0;
    d->b[i].launched = 0;
    for (int j = 0; j < MAX_RANGES; j++) d->b[i].req[j] = MPI_REQUEST_NULL;
  }
  d->launched_any = 0;
  d->exposed = 0;
}

static void launch(rp_dp *d, bucket *b) {
  if (b->launched) return;
  b->launched = 1;
  if (!d->launched_any) d->t_first_launch = rp_now(), d->launched_any = 1;
  if (d->size == 1 && !d->cfg.zero) return;
  const rp_chunk *m = d->cfg.chunks[b->chunk];
  chunk_state *cs = &d->cs[b->chunk];
  for (int j = 0; j < b->nr; j++) {
    range *r = &b->r[j];
    float *g = m->grads + r->off;
    if (d->cfg.zero)
      MPI_Ireduce_scatter(g, cs->gshard + r->shard_pos, r->counts, MPI_FLOAT, MPI_SUM,
                          d->cfg.comm, &b->req[j]);
    else
      MPI_Iallreduce(MPI_IN_PLACE, g, (int)r->n, MPI_FLOAT, MPI_SUM, d->cfg.comm, &b->req[j]);
  }
}

void rp_dp_progress(rp_dp *d) {
  if (!d->launched_any) return;
  for (int i = 0; i < d->nb; i++) {
    if (!d->b[i].launched) continue;
    int done;
    MPI_Testall(d->b[i].nr, d->b[i].req, &done, MPI_STATUSES_IGNORE);
  }
}

void rp_dp_grads_ready(rp_dp *d, const rp_chunk *m, int unit) {
  int c = 0;
  while (c < d->cfg.nchunks && d->cfg.chunks[c] != m) c++;
  if (c == d->cfg.nchunks) return;
  int bi = d->cs[c].unit_bucket[unit_index(m, unit)];
  if (bi < 0) return;
  bucket *b = &d->b[bi];
  b->reports++;
  if (d->cfg.overlap && b->reports == b->units * d->cfg.microbatches) launch(d, b);
  rp_dp_progress(d);
}

/* This rank's reduced part of chunk c's wte gradient and its length. */
static float *wte_grad_part(rp_dp *d, int c, size_t *n) {
  const rp_chunk *m = d->cfg.chunks[c];
  chunk_state *cs = &d->cs[c];
  RP_CHECK(!d->cfg.zero || cs->wte_pos >= 0);
  /* this tensor-parallel rank's rows of wte (all of them at tp = 1) */
  *n = d->cfg.zero ? cs->wte_owned : rp_chunk_find(m, "wte.weight")->numel;
  return d->cfg.zero ? cs->gshard + cs->wte_pos : m->g.wte;
}

/* The V schedules put the first stage (embedding) and the last (head) on one
 * rank, in two chunks: their two parts of the tied wte gradient are summed
 * here (a + b, as the two-rank all-reduce adds them) and both copies get it. */
static void sum_local_wte(rp_dp *d) {
  int first = -1;
  for (int c = 0; c < d->cfg.nchunks; c++) {
    if (!d->cfg.chunks[c]->g.wte) continue;
    if (first < 0) {
      first = c;
      continue;
    }
    size_t n0, n1;
    float *g0 = wte_grad_part(d, first, &n0), *g1 = wte_grad_part(d, c, &n1);
    RP_CHECK(n0 == n1);
    for (size_t i = 0; i < n0; i++) g1[i] = g0[i] = g0[i] + g1[i];
  }
}

rp_status rp_dp_finish(rp_dp *d) {
  double t = rp_now();  /* launching here (no overlap) is exposed time too */
  for (int i = 0; i < d->nb; i++) launch(d, &d->b[i]);
  for (int i = 0; i < d->nb; i++)
    rp_waitall(d->b[i].nr, d->b[i].req, d->cfg.comm, -1, "data-parallel gradient %s of bucket %d",
               d->cfg.zero ? "reduce-scatter" : "all-reduce", i);
  d->t_done = rp_now();
  d->exposed = d->t_done - t;
  /* The tied wte: the first stage holds the embedding's part of its gradient,
   * the last stage the head's; each needs the sum. */
  sum_local_wte(d);
  int tie_size = 0;
  if (d->cfg.tie_comm != MPI_COMM_NULL) MPI_Comm_size(d->cfg.tie_comm, &tie_size);
  for (int c = 0; c < d->cfg.nchunks && tie_size > 1; c++) {
    if (!d->cfg.chunks[c]->g.wte) continue;
    size_t n;
    float *g = wte_grad_part(d, c, &n);
    rp_allreduce_watched(g, (int)n, MPI_FLOAT, MPI_SUM, d->cfg.tie_comm,
                         "tied wte gradient all-reduce");
  }
  return RP_OK;
}

rp_dp_stats rp_dp_last_stats(const rp_dp *d) {
  rp_dp_stats s = {.reduce_s = d->launched_any ? d->t_done - d->t_first_launch : 0,
                   .exposed_s = d->exposed, .buckets = d->nb};
  return s;
}

/* Calls fn on each (tensor, owned piece) intersection of chunk c:
 * flat offset lo, count n, and the position of the piece in owned storage. */
typedef void (*piece_fn)(rp_dp *d, int c, const rp_tensor *t, size_t lo, size_t n, size_t pos,
                         void *ctx);

static void for_owned_pieces(rp_dp *d, int c, piece_fn fn, void *ctx) {
  const rp_chunk *m = d->cfg.chunks[c];
  if (!d->cfg.zero) {
    for (int i = 0; i < m->num_tensors; i++)
      fn(d, c, &m->tensors[i], m->tensors[i].offset, m->tensors[i].numel, m->tensors[i].offset,
         ctx);
    return;
  }
  for (int i = 0; i < d->nb; i++) {
    if (d->b[i].chunk != c) continue;
    for (int j = 0; j < d->b[i].nr; j++) {
      const range *r = &d->b[i].r[j];
      size_t a = r->off + r->displs[d->rank], e = a + r->counts[d->rank];
      for (int k = 0; k < m->num_tensors; k++) {
        const rp_tensor *t = &m->tensors[k];
        size_t lo = a > t->offset ? a : t->offset;
        size_t hi = e < t->offset + t->numel ? e : t->offset + t->numel;
        if (lo < hi) fn(d, c, t, lo, hi - lo, r->shard_pos + (lo - a), ctx);
      }
    }
  }
}

static float *owned_grads(rp_dp *d, int c) {
  return d->cfg.zero ? d->cs[c].gshard : d->cfg.chunks[c]->grads;
}

typedef struct {
  double sum;
  int count_wte;
} sumsq_ctx;

static void sumsq_piece(rp_dp *d, int c, const rp_tensor *t, size_t lo, size_t n, size_t pos,
                        void *ctx) {
  sumsq_ctx *s = ctx;
  if (t->is_wte && !s->count_wte) return;
  if (d->cfg.skip_replicated && t->tp_split == RP_TP_REPLICATED) return;
  s->sum += rp_sumsq(owned_grads(d, c) + pos, (long)n, d->cfg.pool);
}

double rp_dp_local_sumsq(rp_dp *d, int count_wte) {
  sumsq_ctx s = {0, count_wte};
  for (int c = 0; c < d->cfg.nchunks; c++) {
    const rp_chunk *m = d->cfg.chunks[c];
    /* the last stage's copy of a tied wte duplicates the first stage's */
    s.count_wte = count_wte || !(m->spec.has_head && !m->spec.has_embed);
    for_owned_pieces(d, c, sumsq_piece, &s);
  }
  return s.sum;
}

typedef struct {
  const rp_adamw_hparams *h;
  float scale;
  int t;
} adam_ctx;

static void adam_piece(rp_dp *d, int c, const rp_tensor *t, size_t lo, size_t n, size_t pos,
                       void *ctx) {
  adam_ctx *a = ctx;
  /* clipping folded into the update: one pass over the gradients less */
  float *p = d->cfg.chunks[c]->params + lo, *m = d->cs[c].m + pos, *v = d->cs[c].v + pos;
  const float wd = t->decay ? a->h->weight_decay : 0.0f;
  if (d->copies16)
    rp_adamw_update_scaled_bf16(p, d->copies16[c] + lo, owned_grads(d, c) + pos, m, v, (long)n,
                                a->h, wd, a->t, a->scale, d->cfg.pool);
  else
    rp_adamw_update_scaled(p, owned_grads(d, c) + pos, m, v, (long)n, a->h, wd, a->t, a->scale,
                           d->cfg.pool);
}

rp_status rp_dp_set_bf16_copies(rp_dp *d, uint16_t *const *copies16) {
  free(d->copies16);
  d->copies16 = NULL;
  if (!copies16 || d->cfg.zero) return RP_OK; /* ZeRO-1: the all-gather brings most */
  d->copies16 = malloc(sizeof *d->copies16 * (size_t)d->cfg.nchunks);
  if (!d->copies16) return rp_err(RP_ENOMEM, "out of memory for the bf16 copies' table");
  for (int c = 0; c < d->cfg.nchunks; c++) d->copies16[c] = copies16[c];
  return RP_OK;
}

int rp_dp_writes_bf16_copies(const rp_dp *d) { return d->copies16 != NULL; }

int rp_dp_adamw(rp_dp *d, const rp_adamw_hparams *h, float grad_scale, int t) {
  adam_ctx a = {h, grad_scale, t};
  for (int c = 0; c < d->cfg.nchunks; c++) for_owned_pieces(d, c, adam_piece, &a);
  if (!d->cfg.zero) return rp_dp_writes_bf16_copies(d); /* every parameter updated here */
  /* every replica gets every part's updated parameters */
  for (int i = 0; i < d->nb; i++) {
    bucket *b = &d->b[i];
    float *p = d->cfg.chunks[b->chunk]->params;
    for (int j = 0; j < b->nr; j++)
      MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p + b->r[j].off, b->r[j].counts,
                      b->r[j].displs, MPI_FLOAT, d->cfg.comm, &b->req[j]);
  }
  for (int i = 0; i < d->nb; i++)
    rp_waitall(d->b[i].nr, d->b[i].req, d->cfg.comm, -1,
               "ZeRO-1 parameter all-gather of bucket %d", i);
  return 0;
}

float *rp_dp_m(rp_dp *d, int c) { return d->cs[c].m; }
float *rp_dp_v(rp_dp *d, int c) { return d->cs[c].v; }
size_t rp_dp_owned(const rp_dp *d, int c) { return d->cs[c].owned; }

size_t rp_dp_optim_floats(const rp_dp *d) {
  size_t n = 0;
  for (int c = 0; c < d->cfg.nchunks; c++) n += 2 * d->cs[c].owned;
  return n;
}

static void gather_state(rp_dp *d, int c, float *full, const float *owned, int scatter) {
  if (!d->cfg.zero) {
    /* the checkpoint code may pass the optimizer's own arrays as `full` */
    if (owned == full) return;
    if (scatter)
      memcpy((float *)owned, full, d->cfg.chunks[c]->num_params * sizeof(float));
    else
      memcpy(full, owned, d->cfg.chunks[c]->num_params * sizeof(float));
    return;
  }
  for (int i = 0; i < d->nb; i++) {
    if (d->b[i].chunk != c) continue;
    for (int j = 0; j < d->b[i].nr; j++) {
      const range *r = &d->b[i].r[j];
      float *dst = full + r->off;
      if (scatter) {
        memcpy((float *)owned + r->shard_pos, dst + r->displs[d->rank],
               r->counts[d->rank] * sizeof(float));
      } else {
        memcpy(dst + r->displs[d->rank], owned + r->shard_pos, r->counts[d->rank] * sizeof(float));
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, r->counts, r->displs, MPI_FLOAT,
                       d->cfg.comm);
      }
    }
  }
}

void rp_dp_gather_optim(rp_dp *d, int c, float *m_full, float *v_full) {
  gather_state(d, c, m_full, d->cs[c].m, 0);
  gather_state(d, c, v_full, d->cs[c].v, 0);
}

void rp_dp_scatter_optim(rp_dp *d, int c, const float *m_full, const float *v_full) {
  gather_state(d, c, (float *)m_full, d->cs[c].m, 1);
  gather_state(d, c, (float *)v_full, d->cs[c].v, 1);
}
