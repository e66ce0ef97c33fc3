/* Pipeline executor: walks one rank's action list, computing F/B/I/W on the
 * model chunks and moving activations and gradients with non-blocking MPI.
 * See include/ringpipe/rp_pipeline.h for the protocol. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_pipeline.h"
#include "ringpipe/rp_util.h"
#include "ringpipe/rp_wait.h"


struct rp_pipeline {
  rp_pipeline_cfg cfg;
  const rp_docs *docs;   /* packed micro-batches' documents [m], or NULL */
  int rank, p, v, m, N, C, max_layers;
  /* Every buffer below is a view into one arena at the offset the arena plan
   * gives the action that takes it (rp_schedule_plan_arena). */
  char *arena;
  rp_arena_plan ap;
  size_t *keep_b, *drop_b, *wst_b; /* [chunk] bytes, 64-aligned as planned */
  size_t live_bytes, take_bytes, release_bytes; /* bound now / in this action */
  /* activation slots: taken by F, released by B (or W); the slot plan's
   * indices name the views and their SEND_F requests */
  int n_act;
  size_t act_bytes, wst_bytes;
  rp_acts *acts;
  rp_layer_acts **act_lv;
  MPI_Request *act_send;      /* SEND_F of the slot's output, done before release */
  int *act_of;                /* [chunk * m + mb] -> slot, -1 when not live */
  /* W stash slots: taken by I, released by W */
  rp_slot_plan plan;
  rp_wstash *wst;
  rp_layer_douts **wst_lv;
  int *wst_of;
  /* receive buffers (activations and gradients have the same N x C shape) */
  float **rbuf;
  MPI_Request *rreq;
  int *rbuf_of;               /* [dir][chunk][mb] -> receive buffer of a posted RECV */
  /* input gradients waiting for their SEND_B */
  float **gbuf;               /* plan.n_gbuf of them */
  MPI_Request *greq;
  rp_action *gsend;           /* the SEND_B each buffer's request carries */
  int *gbuf_of;               /* [chunk * m + mb] -> gradient buffer */
  rp_grad_ws ws;
  rp_pipeline_stats stats;
  int same_host;              /* every pipeline rank on this host: one clock */
  double t0, cur_wait;
  int live;
};

static double seconds_since(const rp_pipeline *p) { return rp_now() - p->t0; }

/* One activation or gradient message: N x C floats. */
static size_t nc_bytes(const rp_pipeline *p) { return (size_t)p->N * p->C * sizeof(float); }

/* Blocks on the request of transfer `op` of (chunk, mb), charging the time to
 * the current action's wait; a watched wait, so a dead peer is named. */
static void wait_req(rp_pipeline *p, MPI_Request *r, int op, int chunk, int mb) {
  if (*r == MPI_REQUEST_NULL) return;
  double t = rp_now();
  rp_action a = {.op = op, .chunk = chunk, .mb = mb};
  rp_wait(r, p->cfg.comm, rp_schedule_peer(p->cfg.sched, p->rank, a),
          "pipeline %s mb %d chunk %d", rp_op_name(op), mb, chunk);
  p->cur_wait += rp_now() - t;
}

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

/* Per-chunk sizes of the planned buffers, and the views' bookkeeping. */
static rp_status size_buffers(rp_pipeline *p) {
  const rp_pipeline_cfg *c = &p->cfg;
  p->keep_b = calloc(p->v, sizeof *p->keep_b);
  p->drop_b = calloc(p->v, sizeof *p->drop_b);
  p->wst_b = calloc(p->v, sizeof *p->wst_b);
  if (!p->keep_b || !p->drop_b || !p->wst_b) return RP_ENOMEM;
  for (int k = 0; k < p->v; k++) {
    rp_acts_split_bytes(c->chunks[k], c->exec->attn, c->B, c->T, &p->keep_b[k], &p->drop_b[k]);
    p->keep_b[k] = align64(p->keep_b[k]);
    p->drop_b[k] = align64(p->drop_b[k]);
    p->wst_b[k] = align64(rp_wstash_bytes(c->chunks[k], c->B, c->T));
    p->act_bytes = RP_MAX(p->act_bytes, p->keep_b[k] + p->drop_b[k]);
    p->wst_bytes = RP_MAX(p->wst_bytes, p->wst_b[k]);
    p->max_layers = RP_MAX(p->max_layers, c->chunks[k]->spec.num_layers);
  }
  return RP_OK;
}

/* The arena plan from the sizes, and the one block it asks for. */
static rp_status plan_arena(rp_pipeline *p) {
  rp_buf_sizes sz = {p->keep_b, p->drop_b, p->wst_b, nc_bytes(p)};
  RP_TRY(rp_schedule_plan_arena(p->cfg.sched, p->rank, &sz, &p->ap));
  size_t before = rp_mem_current(RP_MEM_ACTS);
  p->arena = rp_alloc(p->ap.arena_bytes ? p->ap.arena_bytes : 64, RP_MEM_ACTS);
  if (!p->arena) return RP_ENOMEM;
  p->stats.arena_alloc_bytes = rp_mem_current(RP_MEM_ACTS) - before;
  return RP_OK;
}

static rp_status alloc_buffers(rp_pipeline *p) {
  const rp_pipeline_cfg *c = &p->cfg;
  if (size_buffers(p) != RP_OK) return RP_ENOMEM;
  RP_TRY(plan_arena(p));
  int nl = p->max_layers ? p->max_layers : 1, vm = p->v * p->m;
  p->acts = calloc(p->n_act, sizeof *p->acts);
  p->act_lv = calloc(p->n_act, sizeof *p->act_lv);
  p->act_send = malloc(p->n_act * sizeof *p->act_send);
  for (int s = 0; s < p->n_act; s++) {
    p->act_lv[s] = calloc(nl, sizeof(rp_layer_acts));
    p->act_send[s] = MPI_REQUEST_NULL;
    if (!p->act_lv[s]) return RP_ENOMEM;
  }
  p->wst = calloc(p->plan.n_wst + 1, sizeof *p->wst);
  p->wst_lv = calloc(p->plan.n_wst + 1, sizeof *p->wst_lv);
  for (int s = 0; s < p->plan.n_wst; s++) {
    p->wst_lv[s] = calloc(nl, sizeof(rp_layer_douts));
    if (!p->wst_lv[s]) return RP_ENOMEM;
  }
  p->rbuf = calloc(p->plan.n_rbuf + 1, sizeof *p->rbuf);
  p->rreq = malloc((p->plan.n_rbuf + 1) * sizeof *p->rreq);
  for (int s = 0; s < p->plan.n_rbuf; s++) p->rreq[s] = MPI_REQUEST_NULL;
  /* as many gradient-send buffers as the plan has live at once: a schedule
   * that delays its SEND_Bs gets more, never an overwritten one */
  p->gbuf = calloc(p->plan.n_gbuf + 1, sizeof *p->gbuf);
  p->greq = malloc((p->plan.n_gbuf + 1) * sizeof *p->greq);
  p->gsend = calloc(p->plan.n_gbuf + 1, sizeof *p->gsend);
  if (!p->gbuf || !p->greq || !p->gsend) return RP_ENOMEM;
  for (int g = 0; g < p->plan.n_gbuf; g++) p->greq[g] = MPI_REQUEST_NULL;
  p->act_of = malloc(vm * sizeof(int));
  p->wst_of = malloc(vm * sizeof(int));
  p->gbuf_of = malloc(vm * sizeof(int));
  p->rbuf_of = malloc(2 * vm * sizeof(int));
  int n = c->sched->n[p->rank];
  p->stats.spans = calloc(n + 1, sizeof(rp_span));
  p->stats.wait = calloc(n + 1, sizeof(double));
  if (!p->acts || !p->act_lv || !p->act_send || !p->wst || !p->wst_lv || !p->rbuf || !p->rreq ||
      !p->act_of || !p->wst_of || !p->gbuf_of || !p->rbuf_of || !p->stats.spans || !p->stats.wait)
    return RP_ENOMEM;
  return rp_grad_ws_init(&p->ws, c->chunks[0], c->B, c->T);
}

/* The view of the buffer of class `cls` that action i takes. Its bytes may
 * still be read by a gradient send posted from a buffer whose life ended
 * (a SEND_B completes later): that send is waited for first. */
static void *take_view(rp_pipeline *p, int cls, int i, size_t bytes) {
  size_t off = p->ap.off[cls][i];
  RP_CHECK(off != SIZE_MAX && off + bytes <= p->ap.arena_bytes);
  char *mem = p->arena + off;
  size_t msg = nc_bytes(p);
  for (int g = 0; g < p->plan.n_gbuf; g++) {
    char *q = (char *)p->gbuf[g];
    if (p->greq[g] != MPI_REQUEST_NULL && q < mem + bytes && mem < q + msg)
      wait_req(p, &p->greq[g], RP_OP_SEND_B, p->gsend[g].chunk, p->gsend[g].mb);
  }
  p->take_bytes += align64(bytes);
  return mem;
}

static void release_bytes(rp_pipeline *p, size_t bytes) { p->release_bytes += align64(bytes); }

rp_status rp_pipeline_create(rp_pipeline **out, const rp_pipeline_cfg *cfg) {
  const rp_schedule *s = cfg->sched;
  int rank, size;
  MPI_Comm_rank(cfg->comm, &rank);
  MPI_Comm_size(cfg->comm, &size);
  if (!s->lowered)
    return rp_err(RP_EINVAL, "the pipeline executor needs a lowered schedule (with SEND/RECV)");
  if (size != s->p)
    return rp_err(RP_EINVAL, "schedule '%s' is for %d pipeline ranks but --pp gives %d", s->name,
                  s->p, size);
  int *tag_ub = NULL, flag = 0;
  MPI_Comm_get_attr(cfg->comm, MPI_TAG_UB, &tag_ub, &flag);
  if (flag && 2L * s->v * s->p * s->m > *tag_ub)
    return rp_err(RP_EINVAL, "%d micro-batches x %d stages need more message tags than this MPI "
                  "allows (%d); use fewer --microbatches", s->m, s->v * s->p, *tag_ub);
  rp_pipeline *p = calloc(1, sizeof *p);
  if (!p) return rp_err(RP_ENOMEM, "out of memory");
  p->cfg = *cfg;
  /* own copy of the chunk list: the caller's array may be temporary */
  rp_chunk **chunks = malloc(s->v * sizeof *chunks);
  if (!chunks) {
    free(p);
    return rp_err(RP_ENOMEM, "out of memory");
  }
  memcpy(chunks, cfg->chunks, s->v * sizeof *chunks);
  p->cfg.chunks = chunks;
  p->rank = rank;
  p->p = s->p;
  p->v = s->v;
  p->m = s->m;
  p->N = cfg->B * cfg->T;
  /* floats per row of the stage boundary: under sequence parallelism a stage
   * holds N/tp rows of C, sent as N rows of C/tp */
  p->C = cfg->chunks[0]->cfg.C / (cfg->chunks[0]->sp ? cfg->chunks[0]->tp : 1);
  rp_status st = rp_schedule_plan_slots(s, rank, &p->plan);
  if (st == RP_OK) p->n_act = p->plan.n_act;
  if (st == RP_OK) st = alloc_buffers(p);
  if (st != RP_OK) {
    rp_pipeline_destroy(p);
    return st == RP_ENOMEM ? rp_err(RP_ENOMEM, "out of memory for pipeline buffers") : st;
  }
  MPI_Comm node;
  int node_size = 0;
  MPI_Comm_split_type(cfg->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  /* Decided together: a rank that thinks it shares the host with everyone
   * would wait in the Bcast below for ranks that do not (a deadlock). */
  int mine = node_size == size;
  MPI_Allreduce(&mine, &p->same_host, 1, MPI_INT, MPI_MIN, cfg->comm);
  p->stats.n = s->n[rank];
  p->stats.act_slot_bytes = p->act_bytes;  /* the largest chunk's, KEEP and DROP */
  p->stats.act_slots = p->n_act;
  p->stats.wstash_bytes = p->plan.n_wst * p->wst_bytes;
  p->stats.wstash_slots = p->plan.n_wst;
  p->stats.recv_bufs = p->plan.n_rbuf;
  p->stats.grad_bufs = p->plan.n_gbuf;
  p->stats.comm_buf_bytes = (size_t)(p->plan.n_rbuf + p->plan.n_gbuf) * nc_bytes(p);
  p->stats.arena_bytes = p->ap.arena_bytes;
  p->stats.arena_live_peak = p->ap.live_peak;
  p->stats.arena_pooled_bytes = p->ap.pooled_bytes;
  p->stats.arena_method = p->ap.method;
  p->stats.chunk_keep = p->keep_b;
  p->stats.chunk_drop = p->drop_b;
  p->stats.chunk_wstash = p->wst_b;
  p->stats.msg_bytes = nc_bytes(p);
  *out = p;
  return RP_OK;
}

void rp_pipeline_destroy(rp_pipeline *p) {
  if (!p) return;
  for (int s = 0; s < p->n_act && p->act_lv; s++) free(p->act_lv[s]);
  for (int s = 0; s < p->plan.n_wst && p->wst_lv; s++) free(p->wst_lv[s]);
  rp_free(p->arena);
  rp_arena_plan_free(&p->ap);
  rp_grad_ws_free(&p->ws);
  rp_slot_plan_free(&p->plan);
  free(p->keep_b), free(p->drop_b), free(p->wst_b);
  free(p->acts), free(p->act_lv), free(p->act_send), free(p->act_of);
  free(p->gbuf), free(p->greq), free(p->gsend), free(p->wst), free(p->wst_lv), free(p->wst_of);
  free(p->rbuf), free(p->rreq), free(p->rbuf_of), free(p->gbuf_of);
  free(p->stats.spans), free(p->stats.wait);
  free(p->cfg.chunks);
  free(p);
}

static void emulate_sleep(double seconds) {
  if (seconds <= 0) return;
  struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0) {
  }
}

typedef struct {
  const int32_t *tokens, *targets, *pos;
  float dscale;
  double loss;
} run_inputs;

/* The receive buffer an action consumes, waited on; NULL when it has none. */
static const float *take_received(rp_pipeline *p, int dir, const rp_action *a) {
  int key = (dir * p->v + a->chunk) * p->m + a->mb, b = p->rbuf_of[key];
  if (b < 0) return NULL;
  wait_req(p, &p->rreq[b], dir ? RP_OP_RECV_B : RP_OP_RECV_F, a->chunk, a->mb);
  p->rbuf_of[key] = -1;
  release_bytes(p, nc_bytes(p));
  return p->rbuf[b];
}

static void do_forward(rp_pipeline *p, int i, const rp_action *a, run_inputs *in) {
  rp_chunk *ch = p->cfg.chunks[a->chunk];
  int slot = p->plan.act[i], N = p->N;
  rp_acts *ac = &p->acts[slot];
  void *keep = take_view(p, RP_BUF_KEEP, i, p->keep_b[a->chunk]);
  void *drop = take_view(p, RP_BUF_DROP, i, p->drop_b[a->chunk]);
  rp_acts_bind_split(ac, p->act_lv[slot], ch, p->cfg.exec->attn, keep, drop, p->cfg.B, p->cfg.T);
  p->act_of[a->chunk * p->m + a->mb] = slot;
  if (++p->live > p->stats.peak_live_acts) p->stats.peak_live_acts = p->live;
  size_t off = (size_t)a->mb * N;
  memcpy(ac->pos, in->pos + off, N * sizeof(int32_t));
  ac->docs = p->docs ? &p->docs[a->mb] : NULL;  /* every stage's attention masks by them */
  if (ch->spec.has_embed) memcpy(ac->tokens, in->tokens + off, N * sizeof(int32_t));
  if (ch->spec.has_head) memcpy(ac->targets, in->targets + off, N * sizeof(int32_t));
  if (!ch->spec.has_embed) {
    /* the V's turn: the previous stage is this rank's other chunk, whose
     * activation slot (live until its backward) holds the output */
    int prev = rp_schedule_local_neighbour(p->cfg.sched, p->rank, a->chunk, -1);
    const float *x = prev >= 0 ? p->acts[p->act_of[prev * p->m + a->mb]].output
                               : take_received(p, 0, a);
    RP_CHECK(x);
    memcpy(ac->input, x, (size_t)N * p->C * sizeof(float));
  }
  if (p->cfg.emulate) {
    emulate_sleep(p->cfg.emulate->tF / p->v);
    return;
  }
  if (ch->spec.has_embed) rp_chunk_embed_forward(ch, ac, p->cfg.exec);
  rp_chunk_layers_forward(ch, ac, p->cfg.exec);
  if (ch->spec.has_head) in->loss += rp_chunk_head_forward(ch, ac, NULL, p->cfg.exec);
}

/* Copies the input gradient aside for its SEND_B (the scratch is reused). */
static void stash_input_grad(rp_pipeline *p, int i, const rp_action *a) {
  int g = p->plan.gbuf[i];
  RP_CHECK(g >= 0);
  wait_req(p, &p->greq[g], RP_OP_SEND_B, p->gsend[g].chunk, p->gsend[g].mb);
  p->gbuf[g] = take_view(p, RP_BUF_GBUF, i, nc_bytes(p));
  memcpy(p->gbuf[g], p->ws.dres, (size_t)p->N * p->C * sizeof(float));
  p->gbuf_of[a->chunk * p->m + a->mb] = g;
}

/* B releases all of a micro-batch's activations, W the part I left (KEEP;
 * I released DROP), each once its SEND_F is done. */
static void release_act(rp_pipeline *p, const rp_action *a) {
  int key = a->chunk * p->m + a->mb, slot = p->act_of[key];
  wait_req(p, &p->act_send[slot], RP_OP_SEND_F, a->chunk, a->mb);
  p->act_of[key] = -1;
  p->live--;
  release_bytes(p, p->keep_b[a->chunk] + (a->op == RP_OP_B ? p->drop_b[a->chunk] : 0));
}

static void do_backward(rp_pipeline *p, int i, const rp_action *a, run_inputs *in) {
  rp_chunk *ch = p->cfg.chunks[a->chunk];
  int key = a->chunk * p->m + a->mb;
  rp_acts *ac = &p->acts[p->act_of[key]];
  const rp_exec *x = p->cfg.exec;
  if (!ch->spec.has_head && a->op != RP_OP_W) {
    /* from the next stage's rank, or (the V's turn) from this rank's own
     * next stage through the gradient buffer the plan gave it */
    int gi = p->plan.gin[i];
    const float *g = gi >= 0 ? p->gbuf[gi] : take_received(p, 1, a);
    RP_CHECK(g);
    if (gi >= 0) release_bytes(p, nc_bytes(p));
    memcpy(p->ws.dres, g, (size_t)p->N * p->C * sizeof(float));
  }
  int first_stage = ch->spec.has_embed;
  if (p->cfg.emulate) {
    double t = a->op == RP_OP_B ? p->cfg.emulate->tB
             : a->op == RP_OP_I ? p->cfg.emulate->tB - p->cfg.emulate->tW : p->cfg.emulate->tW;
    emulate_sleep(t / p->v);
  } else if (a->op == RP_OP_B) {
    if (ch->spec.has_head) rp_chunk_head_backward(ch, ac, &p->ws, in->dscale, x);
    rp_chunk_layers_backward(ch, ac, &p->ws, x);
    if (ch->spec.has_embed) rp_chunk_embed_backward(ch, ac, &p->ws, x);
  } else if (a->op == RP_OP_I) {
    int w = p->plan.wst[i];
    void *mem = take_view(p, RP_BUF_WST, i, p->wst_b[a->chunk]);
    rp_wstash_bind(&p->wst[w], p->wst_lv[w], ch, mem, p->cfg.B, p->cfg.T);
    p->wst_of[key] = w;
    rp_chunk_backward_input(ch, ac, &p->ws, &p->wst[w], in->dscale, x);
  } else { /* W */
    rp_chunk_backward_weight(ch, ac, &p->wst[p->wst_of[key]], x);
  }
  /* what only I needed (DROP) is free after it; W frees the stash */
  if (a->op == RP_OP_I) release_bytes(p, p->drop_b[a->chunk]);
  if (a->op == RP_OP_W) release_bytes(p, p->wst_b[a->chunk]);
  if (a->op != RP_OP_W && !first_stage) stash_input_grad(p, i, a);
  if (a->op != RP_OP_I) release_act(p, a);
}

static void post_recv(rp_pipeline *p, int i, const rp_action *a) {
  int dir = a->op == RP_OP_RECV_B, b = p->plan.rbuf[i];
  int peer = rp_schedule_peer(p->cfg.sched, p->rank, *a);
  int tag = rp_schedule_tag(p->cfg.sched, p->rank, *a);
  p->rbuf[b] = take_view(p, RP_BUF_RBUF, i, nc_bytes(p));
  MPI_Irecv(p->rbuf[b], p->N * p->C, MPI_FLOAT, peer, tag, p->cfg.comm, &p->rreq[b]);
  p->rbuf_of[(dir * p->v + a->chunk) * p->m + a->mb] = b;
}

static void post_send(rp_pipeline *p, const rp_action *a) {
  rp_test_hang_point();
  int peer = rp_schedule_peer(p->cfg.sched, p->rank, *a);
  int tag = rp_schedule_tag(p->cfg.sched, p->rank, *a);
  int key = a->chunk * p->m + a->mb;
  if (a->op == RP_OP_SEND_F) {
    int slot = p->act_of[key];
    RP_CHECK(slot >= 0);
    MPI_Isend(p->acts[slot].output, p->N * p->C, MPI_FLOAT, peer, tag, p->cfg.comm,
              &p->act_send[slot]);
  } else {
    int g = p->gbuf_of[key];
    RP_CHECK(g >= 0);
    MPI_Isend(p->gbuf[g], p->N * p->C, MPI_FLOAT, peer, tag, p->cfg.comm, &p->greq[g]);
    p->gsend[g] = *a;
    p->gbuf_of[key] = -1;
    release_bytes(p, nc_bytes(p));
  }
}

void rp_pipeline_set_docs(rp_pipeline *p, const rp_docs *docs) { p->docs = docs; }

rp_status rp_pipeline_run(rp_pipeline *p, const int32_t *tokens, const int32_t *targets,
                          const int32_t *pos, float dscale, double *loss_sum) {
  run_inputs in = {tokens, targets, pos, dscale, 0.0};
  int vm = p->v * p->m;
  for (int k = 0; k < vm; k++) p->act_of[k] = p->wst_of[k] = p->gbuf_of[k] = -1;
  for (int k = 0; k < 2 * vm; k++) p->rbuf_of[k] = -1;
  p->live = 0;
  p->live_bytes = 0;
  p->stats.peak_live_acts = 0;
  p->stats.measured_live_peak = 0;
  p->stats.total_wait = 0;
  /* One time origin for all ranks: a rank descheduled at the barrier would
   * otherwise shift its whole timeline. CLOCK_MONOTONIC is shared by the
   * processes of one host, so rank 0's reading is everyone's origin there;
   * across hosts each rank keeps its own. */
  MPI_Request bar;
  MPI_Ibarrier(p->cfg.comm, &bar);
  rp_wait(&bar, p->cfg.comm, -1, "pipeline start barrier");
  p->t0 = rp_now();
  if (p->same_host) MPI_Bcast(&p->t0, 1, MPI_DOUBLE, 0, p->cfg.comm);
  const rp_schedule *s = p->cfg.sched;
  for (int i = 0; i < s->n[p->rank]; i++) {
    rp_action a = s->acts[p->rank][i];
    double t = seconds_since(p);
    p->cur_wait = 0;
    p->take_bytes = p->release_bytes = 0;
    switch (a.op) {
      case RP_OP_RECV_F:
      case RP_OP_RECV_B: post_recv(p, i, &a); break;
      case RP_OP_SEND_F:
      case RP_OP_SEND_B: post_send(p, &a); break;
      case RP_OP_F: do_forward(p, i, &a, &in); break;
      default: do_backward(p, i, &a, &in); break;
    }
    /* A compute waits for its input before it starts: the span is the compute,
     * the wait is kept beside it. */
    p->stats.spans[i] = (rp_span){a, t + p->cur_wait, seconds_since(p)};
    p->stats.wait[i] = p->cur_wait;
    p->stats.total_wait += p->cur_wait;
    /* what an action takes is live together with what it releases, as planned */
    p->live_bytes += p->take_bytes;
    p->stats.measured_live_peak = RP_MAX(p->stats.measured_live_peak, p->live_bytes);
    p->live_bytes -= p->release_bytes;
  }
  /* Every send must finish before the buffers are touched by the next step. */
  for (int k = 0; k < p->n_act; k++)
    rp_wait(&p->act_send[k], p->cfg.comm, -1, "pipeline SEND_F of activation slot %d", k);
  for (int g = 0; g < p->plan.n_gbuf; g++)
    wait_req(p, &p->greq[g], RP_OP_SEND_B, p->gsend[g].chunk, p->gsend[g].mb);
  *loss_sum = in.loss;
  return RP_OK;
}

const rp_pipeline_stats *rp_pipeline_last(const rp_pipeline *p) { return &p->stats; }
const rp_pipeline_cfg *rp_pipeline_config(const rp_pipeline *p) { return &p->cfg; }
