/* The real serving engine (rp_serve.h): sets up a rank (role, model cache,
 * store, links, reader thread), runs its loop (engine_driver.c,
 * engine_pe.c, engine_de.c), then gathers the compute-network bytes and the
 * timeline. Also the recompute reference. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_internal.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_pool.h"

int layout_node_of_rank(const serve_layout *y, int rank) {
  if (rank < 1) return -1;
  if (rank <= y->npe) return (rank - 1) / y->node_size;
  return y->pe_nodes + (rank - 1 - y->npe) / y->node_size;
}

int engine_greedy(engine_rank *e, const float *logits) {
  const rp_sample_params sp = {.temperature = 0, .top_p = 1, .stop = -1};
  rp_rng r;
  rp_rng_seed(&r, 0);
  return rp_sample_token(logits, e->m->cfg.V, &sp, &r, e->probs, e->idx);
}

void engine_net_send(engine_rank *e, int dest, size_t bytes) {
  rp_link_send(&e->net_in[dest], bytes); /* unlimited links only count */
  e->net_bytes += (double)bytes;
}

void engine_wait_message(int src, int tag, MPI_Status *st) {
  MPI_Status tmp;
  for (int flag = 0;;) {
    MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, st ? st : &tmp);
    if (flag) return;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

static rp_status check_setup(const rp_engine_opts *o, const rp_chunk *m, const rp_trace *t) {
  int world = rp_mpi_world_size();
  if (o->npe < 1 || o->nde < 1 || o->node_size < 1 || world != 1 + o->npe + o->nde)
    return rp_err(RP_EINVAL, "--pe %d --de %d needs %d MPI ranks (one driver, then the engines); "
                  "this run has %d: use mpirun -n %d", o->npe, o->nde, 1 + o->npe + o->nde, world,
                  1 + o->npe + o->nde);
  if (t->max_context > m->cfg.T)
    return rp_err(RP_EINVAL, "the trace's contexts reach %ld tokens but the model holds %d "
                  "positions: raise --scale or use a model with a longer context", t->max_context,
                  m->cfg.T);
  if ((m->cfg.T + RP_KV_BLOCK - 1) / RP_KV_BLOCK > RP_SERVE_MAX_BLOCKS)
    return rp_err(RP_EINVAL, "a model of %d positions: serving handles up to %d", m->cfg.T,
                  RP_SERVE_MAX_BLOCKS * RP_KV_BLOCK);
  if (o->de_slots < 1 || o->de_slots > 1024)
    return rp_err(RP_EINVAL, "--de-slots %d: need 1..1024", o->de_slots);
  return RP_OK;
}

/* Links: the driver creates them under a name of its own, the others map them. */
static rp_status open_links(engine_rank *e) {
  if (e->rank == 0) snprintf(e->link_prefix, sizeof e->link_prefix, "rp%ld", (long)getpid());
  MPI_Bcast(e->link_prefix, sizeof e->link_prefix, MPI_CHAR, 0, MPI_COMM_WORLD);
  int nr = 1 + e->y.npe + e->y.nde;
  char name[128];
  rp_status s = RP_OK;
  if (e->rank == 0) { /* the owner handles: closing them at the end removes the files */
    e->nowned = e->y.nnodes + nr;
    e->owned = calloc((size_t)e->nowned, sizeof *e->owned);
    if (!e->owned) s = rp_err(RP_ENOMEM, "out of memory");
    for (int k = 0; s == RP_OK && k < e->nowned; k++) {
      if (k < e->y.nnodes) snprintf(name, sizeof name, "%s-snic-%d", e->link_prefix, k);
      else snprintf(name, sizeof name, "%s-net-%d", e->link_prefix, k - e->y.nnodes);
      s = rp_link_open(&e->owned[k], name, 0, 1);
    }
  }
  int ok = s == RP_OK;
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!ok) return s != RP_OK ? s : rp_err(RP_EIO, "the driver could not create the link states");
  e->net_in = calloc((size_t)nr, sizeof *e->net_in);
  if (!e->net_in) return rp_err(RP_ENOMEM, "out of memory");
  for (int r = 0; r < nr; r++) {
    snprintf(name, sizeof name, "%s-net-%d", e->link_prefix, r);
    RP_TRY(rp_link_open(&e->net_in[r], name, e->o->net_gbps, 0));
  }
  if (e->node >= 0) {
    snprintf(name, sizeof name, "%s-snic-%d", e->link_prefix, e->node);
    RP_TRY(rp_link_open(&e->snic, name, e->o->storage_gbps, 0));
  }
  return RP_OK;
}

static rp_status alloc_rank(engine_rank *e) {
  const rp_gpt_config *g = &e->m->cfg;
  e->L = g->L;
  e->block_floats = (size_t)g->L * 2 * RP_KV_BLOCK * g->C;
  RP_TRY(rp_pool_create(&e->pool, e->o->threads > 0 ? e->o->threads : 1, 0));
  e->x = (rp_exec){.pool = e->pool,
                   .attn = e->o->attention_flash ? rp_attn_flash() : rp_attn_reference()};
  RP_TRY(rp_kvs_open(&e->store, e->o->store, g->L, g->C));
  e->probs = malloc((size_t)g->V * sizeof(float));
  e->idx = malloc((size_t)g->V * sizeof(int));
  if (!e->probs || !e->idx) return rp_err(RP_ENOMEM, "out of memory");
  if (e->rank == 0) return RP_OK;
  size_t nb = (size_t)(g->T + RP_KV_BLOCK - 1) / RP_KV_BLOCK;
  e->staging = malloc(nb * e->block_floats * sizeof(float));
  e->sendbuf = malloc(nb * e->block_floats * sizeof(float));
  e->layer_buf = malloc(nb * e->block_floats / g->L * sizeof(float));
  if (!e->staging || !e->sendbuf || !e->layer_buf) return rp_err(RP_ENOMEM, "out of memory");
  RP_TRY(rp_kv_init(&e->cache, e->m, e->x.attn, e->rank <= e->y.npe ? 1 : e->o->de_slots, g->T));
  return reader_start(&e->rd, &e->store, g->L);
}

static void free_rank(engine_rank *e) {
  reader_stop(&e->rd);
  if (e->cache.m) rp_kv_free(&e->cache);
  rp_kvs_close(&e->store);
  if (e->pool) rp_pool_destroy(e->pool);
  int nr = 1 + e->y.npe + e->y.nde;
  for (int r = 0; e->net_in && r < nr; r++)
    if (e->net_in[r].st) rp_link_close(&e->net_in[r]);
  if (e->snic.st) rp_link_close(&e->snic);
  for (int k = 0; k < e->nowned; k++)
    if (e->owned[k].st) rp_link_close(&e->owned[k]);
  void *p[] = {e->net_in, e->owned, e->staging, e->sendbuf, e->layer_buf, e->probs, e->idx, e->tl.ev};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

/* Every rank's events to the driver's Chrome trace: a track per rank. */
static rp_status gather_timeline(engine_rank *e, double t0) {
  int nr = 1 + e->y.npe + e->y.nde, n = e->tl.n;
  int *counts = e->rank == 0 ? calloc((size_t)nr, sizeof *counts) : NULL;
  MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (e->rank != 0) {
    MPI_Send(e->tl.ev, n * (int)sizeof(tl_event), MPI_BYTE, 0, TAG_EVENTS, MPI_COMM_WORLD);
    return RP_OK;
  }
  rp_ctrace ct;
  rp_status s = rp_ctrace_open(&ct, e->o->timeline);
  for (int r = 1; r < nr; r++) {
    tl_event *ev = malloc((size_t)(counts[r] ? counts[r] : 1) * sizeof *ev);
    MPI_Recv(ev, counts[r] * (int)sizeof(tl_event), MPI_BYTE, r, TAG_EVENTS, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    for (int i = 0; s == RP_OK && i < counts[r]; i++)
      rp_ctrace_event(&ct, ev[i].name, r, strcmp(ev[i].name, "decode") == 0, ev[i].t0 - t0,
                      ev[i].t1 - t0);
    free(ev);
  }
  if (s == RP_OK) rp_ctrace_close(&ct);
  free(counts);
  return s;
}

rp_status rp_serve_run(const rp_engine_opts *o, const rp_chunk *m, const rp_trace *t,
                       rp_serve_summary *sum, int *direct_io) {
  RP_TRY(check_setup(o, m, t));
  engine_rank e = {.o = o, .m = m, .t = t, .rank = rp_mpi_world_rank()};
  e.y = (serve_layout){.npe = o->npe, .nde = o->nde, .node_size = o->node_size};
  e.y.pe_nodes = (o->npe + o->node_size - 1) / o->node_size;
  e.y.nnodes = e.y.pe_nodes + (o->nde + o->node_size - 1) / o->node_size;
  e.node = layout_node_of_rank(&e.y, e.rank);
  rp_status s = open_links(&e);
  if (s == RP_OK) s = alloc_rank(&e);
  /* every rank agrees before any role starts, so no rank waits on a dead peer */
  int ok = s == RP_OK, all;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    free_rank(&e);
    return s != RP_OK ? s : rp_err(RP_EINVAL, "another rank failed to set up: %s", "see its log");
  }
  double t0 = serve_now();
  MPI_Bcast(&t0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (e.rank == 0) s = engine_driver(&e, sum);
  else if (e.rank <= o->npe) engine_pe_loop(&e);
  else engine_de_loop(&e);
  double net = 0;
  MPI_Reduce(&e.net_bytes, &net, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  int direct = e.store.direct, anydirect = 0;
  MPI_Reduce(&direct, &anydirect, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  if (e.rank == 0) {
    if (s == RP_OK) sum->net_bytes = net;
    if (direct_io) *direct_io = anydirect;
  }
  if (o->timeline) {
    rp_status ts = gather_timeline(&e, t0);
    if (s == RP_OK) s = ts;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free_rank(&e);
  int code = s, worst;
  MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return s != RP_OK ? s : worst != RP_OK ? rp_err((rp_status)worst, "the driver failed") : RP_OK;
}

rp_status rp_serve_recompute(const rp_chunk *m, const rp_trace *t, int threads,
                             int attention_flash, const char *outputs) {
  if (t->max_context > m->cfg.T)
    return rp_err(RP_EINVAL, "the trace's contexts reach %ld tokens but the model holds %d "
                  "positions", t->max_context, m->cfg.T);
  rp_pool *pool;
  RP_TRY(rp_pool_create(&pool, threads > 0 ? threads : 1, 0));
  rp_exec x = {.pool = pool, .attn = attention_flash ? rp_attn_flash() : rp_attn_reference()};
  long n = rp_trace_total_turns(t), i = 0;
  int32_t **out = calloc((size_t)(n ? n : 1), sizeof *out);
  int32_t *ctx = malloc(((size_t)t->max_context + 1) * sizeof *ctx);
  rp_status s = out && ctx ? RP_OK : rp_err(RP_ENOMEM, "out of memory");
  const rp_sample_params sp = {.temperature = 0, .top_p = 1, .max_new = 1 << 20, .stop = -1};
  for (int a = 0; s == RP_OK && a < t->nagents; a++) {
    int len = 0;
    for (int k = 0; s == RP_OK && k < t->agents[a].nturns; k++, i++) {
      const rp_turn *tu = &t->agents[a].turns[k];
      rp_serve_append_tokens(&t->agents[a], k, m->cfg.V, ctx + len);
      len += tu->append;
      out[i] = malloc(((size_t)tu->gen + 1) * sizeof **out);
      if (!out[i]) { s = rp_err(RP_ENOMEM, "out of memory"); break; }
      rp_rng r;
      rp_rng_seed(&r, 0);
      s = rp_generate_recompute(m, &x, ctx, len, out[i], tu->gen, &sp, &r);
      memcpy(ctx + len, out[i], (size_t)tu->gen * sizeof *ctx);
      len += tu->gen;
    }
  }
  if (s == RP_OK) s = rp_serve_write_outputs(outputs, t, out);
  for (long j = 0; out && j < n; j++) free(out[j]);
  free(out);
  free(ctx);
  rp_pool_destroy(pool);
  return s;
}
