/* A decode engine: decodes its sequences together one step at a time,
 * persists every full block of a finished turn to the store, and, for
 * DualPath, reads a request's hit prefix from the store through its own
 * node's storage link (on its reader thread, while it decodes) and forwards
 * it to the PE layer by layer over MPI; it keeps those blocks, so the PE
 * hands back only the new ones. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_internal.h"

typedef struct fwd {
  req_msg q;
  int32_t *tok;          /* the hit prefix's tokens */
  uint64_t keys[RP_SERVE_MAX_BLOCKS];
  float *staging;        /* the blocks read (kept for the hand-off) */
  read_job job;
  int sent;              /* layers sent */
  MPI_Request *reqs;     /* 2 per layer */
  float **packs;         /* per layer: that layer of every block, contiguous */
  int *nv_sent;          /* per layer: {valid blocks, agent, turn} sent with it */
  int in_use;
  struct fwd *next;
} fwd;

typedef struct {
  int busy;
  req_msg q;
  int32_t *ctx;          /* prompt + generated tokens */
  int ngen;
  double t_first, t_decode;
} de_slot;

typedef struct {
  engine_rank *e;
  fwd *fwds;
  de_slot *slots;
  int nactive, stop;
} de_state;

/* ---- forwarding */

static void fwd_start(de_state *d, int src) {
  engine_rank *e = d->e;
  fwd *f = calloc(1, sizeof *f);
  RP_CHECK(f != NULL);
  MPI_Recv(&f->q, sizeof f->q, MPI_BYTE, src, TAG_FWD, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  int n = f->q.nhit * RP_KV_BLOCK;
  f->tok = malloc((size_t)n * sizeof *f->tok);
  f->staging = malloc((size_t)f->q.nhit * e->block_floats * sizeof(float));
  f->reqs = malloc((size_t)2 * e->L * sizeof *f->reqs);
  f->packs = calloc((size_t)e->L, sizeof *f->packs);
  f->nv_sent = calloc((size_t)e->L * 3, sizeof *f->nv_sent);
  RP_CHECK(f->tok && f->staging && f->reqs && f->packs && f->nv_sent);
  MPI_Recv(f->tok, n, MPI_INT32_T, src, TAG_FWD, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  rp_kvs_keys(f->tok, n, f->keys);
  f->job = (read_job){.keys = f->keys, .tokens = f->tok, .nblocks = f->q.nhit,
                      .staging = f->staging, .layerwise = e->o->layerwise, .link = &e->snic};
  reader_submit(&e->rd, &f->job);
  /* in arrival order: a PE takes a DE's layers in the order of its requests */
  fwd **tail = &d->fwds;
  while (*tail) tail = &(*tail)->next;
  *tail = f;
}

/* Sends the layers the reader has finished (non-blocking). */
static void fwd_progress(de_state *d, fwd *f) {
  engine_rank *e = d->e;
  int nv, ready = reader_poll_layers(&e->rd, &f->job, &nv);
  size_t bf = e->block_floats, lf = bf / e->L;
  for (; f->sent < ready; f->sent++) {
    int l = f->sent, nhit = f->q.nhit;
    float *p = f->packs[l] = malloc((size_t)nhit * lf * sizeof(float));
    RP_CHECK(p != NULL);
    for (int b = 0; b < nhit; b++) memcpy(p + b * lf, f->staging + b * bf + l * lf, lf * sizeof(float));
    int *hdr = &f->nv_sent[3 * l];
    hdr[0] = nv, hdr[1] = f->q.agent, hdr[2] = f->q.turn;
    engine_net_send(e, f->q.pe, (size_t)nhit * lf * sizeof(float));
    MPI_Isend(hdr, 3, MPI_INT, f->q.pe, TAG_LAYER + l, MPI_COMM_WORLD, &f->reqs[2 * l]);
    MPI_Isend(p, (int)(nhit * lf), MPI_FLOAT, f->q.pe, TAG_LAYER + l, MPI_COMM_WORLD,
              &f->reqs[2 * l + 1]);
    if (l + 1 == e->L) tl_add(&e->tl, "read+fwd", f->job.t0, serve_now());
  }
}

static fwd *fwd_find(de_state *d, int agent, int turn) {
  for (fwd *f = d->fwds; f; f = f->next)
    if (f->q.agent == agent && f->q.turn == turn) return f;
  return NULL;
}

static void fwd_free(de_state *d, fwd *f) {
  MPI_Waitall(2 * d->e->L, f->reqs, MPI_STATUSES_IGNORE);
  fwd **pp = &d->fwds;
  while (*pp != f) pp = &(*pp)->next;
  *pp = f->next;
  for (int l = 0; l < d->e->L; l++) free(f->packs[l]);
  free(f->packs);
  free(f->nv_sent);
  free(f->reqs);
  free(f->staging);
  free(f->tok);
  free(f);
}

/* ---- decoding */

static int free_slot(const de_state *d) {
  for (int s = 0; s < d->e->o->de_slots; s++)
    if (!d->slots[s].busy) return s;
  return -1;
}

static void finish(de_state *d, int s);

static void take_handoff(de_state *d, int src, int s) {
  engine_rank *e = d->e;
  de_slot *sl = &d->slots[s];
  MPI_Recv(&sl->q, sizeof sl->q, MPI_BYTE, src, TAG_HANDOFF, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  req_msg *q = &sl->q;
  MPI_Recv(sl->ctx, q->prompt, MPI_INT32_T, src, TAG_HANDOFF_KV, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  int nb = (q->prompt + RP_KV_BLOCK - 1) / RP_KV_BLOCK;
  fwd *f = q->side == RP_READ_DE ? fwd_find(d, q->agent, q->turn) : NULL;
  int from = f ? q->nvalid : 0;
  MPI_Recv(e->sendbuf, (int)((size_t)(nb - from) * e->block_floats), MPI_FLOAT, src,
           TAG_HANDOFF_KV, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  const float *blk[RP_SERVE_MAX_BLOCKS];
  for (int b = 0; b < nb; b++)
    blk[b] = b < from ? f->staging + b * e->block_floats : e->sendbuf + (b - from) * e->block_floats;
  RP_CHECK(rp_kv_attach(&e->cache, s, blk, nb, q->prompt) == RP_OK);
  if (f) fwd_free(d, f);
  sl->busy = 1;
  sl->ngen = 1;
  sl->ctx[q->prompt] = q->first_token;
  sl->t_decode = serve_now();
  d->nactive++;
  if (q->gen <= 1) finish(d, s);
}

/* Persists the turn's full blocks, reports the reply, frees the slot. */
static void finish(de_state *d, int s) {
  engine_rank *e = d->e;
  de_slot *sl = &d->slots[s];
  const int *ids;
  int len = e->cache.len[s], full = len / RP_KV_BLOCK;
  rp_kv_slot_blocks(&e->cache, s, &ids);
  uint64_t keys[RP_SERVE_MAX_BLOCKS];
  rp_kvs_keys(sl->ctx, full * RP_KV_BLOCK, keys);
  double t0 = serve_now();
  for (int b = 0; b < full; b++) {
    rp_status st = rp_kvs_put(&e->store, keys[b], sl->ctx + b * RP_KV_BLOCK,
                              rp_kv_block_data(&e->cache, ids[b]));
    if (st != RP_OK) rp_warn("KV block not persisted (a later turn recomputes it): %s", rp_errmsg());
  }
  double t1 = serve_now();
  tl_add(&e->tl, "persist", t0, t1);
  tl_add(&e->tl, "decode", sl->t_decode, t0);
  done_msg m = {.agent = sl->q.agent, .turn = sl->q.turn, .t_decode = sl->t_decode, .t_done = t0};
  MPI_Send(&m, sizeof m, MPI_BYTE, 0, TAG_DONE, MPI_COMM_WORLD);
  MPI_Send(sl->ctx + sl->q.prompt, sl->q.gen, MPI_INT32_T, 0, TAG_DONE, MPI_COMM_WORLD);
  rp_kv_release(&e->cache, s);
  sl->busy = 0;
  d->nactive--;
}

static void decode_step(de_state *d) {
  engine_rank *e = d->e;
  int slots[1024] = {0}, n = 0;
  int32_t tok[1024] = {0};
  for (int s = 0; s < e->o->de_slots; s++)
    if (d->slots[s].busy) {
      slots[n] = s;
      tok[n++] = d->slots[s].ctx[d->slots[s].q.prompt + d->slots[s].ngen - 1];
    }
  const float *lg = rp_kv_step(&e->cache, slots, tok, n, &e->x);
  RP_CHECK(lg != NULL);
  for (int i = 0; i < n; i++) {
    de_slot *sl = &d->slots[slots[i]];
    sl->ctx[sl->q.prompt + sl->ngen++] = engine_greedy(e, lg + (size_t)i * e->m->cfg.Vp);
    if (sl->ngen == sl->q.gen) finish(d, slots[i]);
  }
}

/* Takes what has arrived: forward orders, hand-offs (while a slot is free),
 * the stop. */
static int poll_messages(de_state *d) {
  int got = 0, flag;
  MPI_Status st;
  for (;;) {
    MPI_Iprobe(0, TAG_FWD, MPI_COMM_WORLD, &flag, &st);
    if (!flag) break;
    fwd_start(d, 0);
    got = 1;
  }
  int s;
  while ((s = free_slot(d)) >= 0) {
    MPI_Iprobe(MPI_ANY_SOURCE, TAG_HANDOFF, MPI_COMM_WORLD, &flag, &st);
    if (!flag) break;
    take_handoff(d, st.MPI_SOURCE, s);
    got = 1;
  }
  MPI_Iprobe(0, TAG_STOP, MPI_COMM_WORLD, &flag, &st);
  if (flag) {
    MPI_Recv(NULL, 0, MPI_BYTE, 0, TAG_STOP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    d->stop = 1;
  }
  return got;
}

void engine_de_loop(engine_rank *e) {
  de_state d = {.e = e};
  d.slots = calloc((size_t)e->o->de_slots, sizeof *d.slots);
  RP_CHECK(d.slots != NULL);
  for (int s = 0; s < e->o->de_slots; s++) {
    d.slots[s].ctx = malloc((size_t)(e->m->cfg.T + 1) * sizeof(int32_t));
    RP_CHECK(d.slots[s].ctx != NULL);
  }
  while (!d.stop) {
    int got = poll_messages(&d);
    /* a forward to a PE waits until the earlier ones to that PE sent every layer */
    int blocked[1024], nb = 0;
    for (fwd *f = d.fwds; f; f = f->next) {
      int skip = 0;
      for (int i = 0; i < nb; i++) skip |= blocked[i] == f->q.pe;
      if (!skip) fwd_progress(&d, f);
      if (f->sent < e->L && nb < 1024) blocked[nb++] = f->q.pe;
    }
    if (d.nactive) decode_step(&d);
    else if (!got) usleep(d.fwds ? 100 : 500); /* idle: nothing to decode */
  }
  while (d.fwds) fwd_free(&d, d.fwds);
  for (int s = 0; s < e->o->de_slots; s++) free(d.slots[s].ctx);
  free(d.slots);
}
