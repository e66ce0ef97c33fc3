/* A prefill engine (rank 1..npe): per request it loads the hit prefix (read
 * it from the store through the node's storage link, or receive it layer by
 * layer from the DE that read it, or, Oracle, read it unthrottled), computes
 * the new tokens over it (rp_kv_extend; layer l may run while layer l + 1 is
 * still arriving, through the cache's layer hook), picks the first token and
 * hands the K/V the DE lacks to the DE. */
#include <stdlib.h>
#include <string.h>

#include "serve_internal.h"
#include "engine_internal.h"

typedef struct {
  engine_rank *e;
  const req_msg *q;
  read_job *job;      /* PE-side or Oracle read; NULL when the DE forwards */
  int attached;       /* layers copied into the cache so far */
  int nvalid;
  float *layer_buf;   /* one layer of every hit block, as the DE sends it */
} pe_load;

/* Layer l of the hit prefix into the cache (waiting for it if need be). */
static void pe_wait_layer(void *ctx, int l) {
  pe_load *p = ctx;
  engine_rank *e = p->e;
  if (l < p->attached) return;
  size_t bf = e->block_floats, lf = bf / e->L;
  int nhit = p->q->nhit;
  double t0 = serve_now();
  if (p->job) {
    p->nvalid = reader_wait(&e->rd, p->job, l);
  } else {
    int hdr[3];
    engine_wait_message(p->q->de, TAG_LAYER + l, NULL);
    MPI_Recv(hdr, 3, MPI_INT, p->q->de, TAG_LAYER + l, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    RP_CHECK(hdr[1] == p->q->agent && hdr[2] == p->q->turn); /* the DE keeps request order */
    int nv = hdr[0];
    MPI_Recv(p->layer_buf, (int)(nhit * lf), MPI_FLOAT, p->q->de, TAG_LAYER + l, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    p->nvalid = nv < p->nvalid ? nv : p->nvalid;
    for (int b = 0; b < nhit; b++)
      memcpy(e->staging + b * bf + l * lf, p->layer_buf + b * lf, lf * sizeof(float));
  }
  for (int b = 0; b < nhit; b++)
    rp_kv_attach_layer(&e->cache, 0, b, l, e->staging + b * bf + l * lf);
  p->attached = l + 1;
  double t1 = serve_now();
  if (t1 - t0 > 1e-5) tl_add(&e->tl, "wait-kv", t0, t1);
}

/* The new tokens over the valid prefix; returns the last logits row. */
static const float *pe_compute(engine_rank *e, const req_msg *q, const int32_t *tok, pe_load *p) {
  rp_kv_cache *c = &e->cache;
  if (q->nhit == 0) return rp_kv_prefill(c, 0, 1, tok, q->prompt, &e->x);
  RP_CHECK(rp_kv_attach(c, 0, NULL, q->nhit, q->nhit * RP_KV_BLOCK) == RP_OK);
  if (e->o->layerwise) {
    rp_kv_set_layer_hook(c, pe_wait_layer, p);
  } else {
    for (int l = 0; l < e->L; l++) pe_wait_layer(p, l);
  }
  int from = q->nhit * RP_KV_BLOCK;
  const float *lg = rp_kv_extend(c, 0, tok + from, q->prompt - from, &e->x);
  for (int l = p->attached; l < e->L; l++) pe_wait_layer(p, l); /* drain what is still coming */
  rp_kv_set_layer_hook(c, NULL, NULL);
  if (p->nvalid == q->nhit) return lg;
  /* a block failed its checks: keep the valid prefix, compute the rest */
  rp_warn("request of agent %d turn %d: %d of %d cached blocks valid, recomputing the rest",
          q->agent, q->turn, p->nvalid, q->nhit);
  if (p->nvalid == 0) return rp_kv_prefill(c, 0, 1, tok, q->prompt, &e->x);
  const float *blk[RP_SERVE_MAX_BLOCKS];
  for (int b = 0; b < p->nvalid; b++) blk[b] = e->staging + b * e->block_floats;
  RP_CHECK(rp_kv_attach(c, 0, blk, p->nvalid, p->nvalid * RP_KV_BLOCK) == RP_OK);
  from = p->nvalid * RP_KV_BLOCK;
  return rp_kv_extend(c, 0, tok + from, q->prompt - from, &e->x);
}

/* The K/V the DE does not hold (all of it, unless the DE read the prefix). */
static void pe_handoff(engine_rank *e, req_msg *q, const int32_t *tok) {
  const int *ids;
  int nb = rp_kv_slot_blocks(&e->cache, 0, &ids);
  int from = q->side == RP_READ_DE ? q->nvalid : 0;
  size_t bf = e->block_floats;
  for (int b = from; b < nb; b++)
    memcpy(e->sendbuf + (b - from) * bf, rp_kv_block_data(&e->cache, ids[b]), bf * sizeof(float));
  size_t bytes = (size_t)(nb - from) * bf * sizeof(float);
  double t0 = serve_now();
  engine_net_send(e, q->de, bytes);
  MPI_Send(q, sizeof *q, MPI_BYTE, q->de, TAG_HANDOFF, MPI_COMM_WORLD);
  MPI_Send(tok, q->prompt, MPI_INT32_T, q->de, TAG_HANDOFF_KV, MPI_COMM_WORLD);
  MPI_Send(e->sendbuf, (int)((size_t)(nb - from) * bf), MPI_FLOAT, q->de, TAG_HANDOFF_KV,
           MPI_COMM_WORLD);
  tl_add(&e->tl, "handoff", t0, serve_now());
}

static void pe_request(engine_rank *e, req_msg *q, const int32_t *tok) {
  double t0 = serve_now();
  pe_load p = {.e = e, .q = q, .nvalid = q->nhit, .layer_buf = e->layer_buf};
  read_job job;
  uint64_t keys[RP_SERVE_MAX_BLOCKS];
  if (q->nhit > 0 && q->side != RP_READ_DE) {
    rp_kvs_keys(tok, q->nhit * RP_KV_BLOCK, keys);
    job = (read_job){.keys = keys, .tokens = tok, .nblocks = q->nhit, .staging = e->staging,
                     .layerwise = e->o->layerwise,
                     .link = q->side == RP_READ_PE ? &e->snic : NULL};
    reader_submit(&e->rd, &job);
    p.job = &job;
  }
  const float *lg = pe_compute(e, q, tok, &p);
  if (p.job) {
    reader_wait(&e->rd, &job, e->L - 1);
    tl_add(&e->tl, q->side == RP_READ_PE ? "read" : "read-free", job.t0, job.t1);
  }
  RP_CHECK(lg != NULL);
  q->first_token = engine_greedy(e, lg);
  q->nvalid = p.nvalid;
  double t1 = serve_now();
  tl_add(&e->tl, "prefill", t0, t1);
  done_msg d = {.agent = q->agent, .turn = q->turn, .nvalid = p.nvalid, .t_first = t1};
  MPI_Send(&d, sizeof d, MPI_BYTE, 0, TAG_PREFILLED, MPI_COMM_WORLD);
  pe_handoff(e, q, tok);
}

void engine_pe_loop(engine_rank *e) {
  int32_t *tok = malloc((size_t)e->m->cfg.T * sizeof *tok);
  RP_CHECK(tok != NULL);
  for (;;) {
    MPI_Status st;
    engine_wait_message(0, MPI_ANY_TAG, &st);
    if (st.MPI_TAG == TAG_STOP) {
      MPI_Recv(NULL, 0, MPI_BYTE, 0, TAG_STOP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      break;
    }
    req_msg q;
    MPI_Recv(&q, sizeof q, MPI_BYTE, 0, TAG_REQ, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(tok, q.prompt, MPI_INT32_T, 0, TAG_REQ, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    pe_request(e, &q, tok);
  }
  free(tok);
}
