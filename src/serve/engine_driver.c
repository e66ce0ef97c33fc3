/* The driver (world rank 0) of the real engine: plays the agents (offline:
 * all start at once; a turn starts when the agent's previous reply is
 * back), finds each prompt's cached prefix in the store's index, asks the
 * shared scheduler for the PE, the DE and the read side, and records every
 * turn's times. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

typedef struct {
  engine_rank *e;
  rp_sched sched;
  rp_engine_state *pe, *de;
  double *node_read;        /* bytes of reads outstanding per node */
  int32_t **ctx;            /* per agent: its context so far */
  int *ctx_len, *turn;
  long *first;              /* record index of each agent's first turn */
  rp_turn_record *rec;
  int32_t **out;            /* per record: the reply */
  double t0;
  int *waiting;             /* agents whose next turn arrives at a set time */
  int nwaiting;
} driver;

void rp_serve_append_tokens(const rp_agent *a, int turn, int V, int32_t *out) {
  const rp_turn *tu = &a->turns[turn];
  rp_rng r;
  int i = 0;
  /* a replayed request's hash blocks: the same id gives the same tokens, so
   * requests sharing a prefix of ids share a prefix of tokens (and blocks) */
  for (int b = 0; b < tu->nhash && i < tu->append; b++) {
    rp_rng_seed(&r, tu->hash_ids[b] * 0xbf58476d1ce4e5b9ULL + 0x632be59bd9b4e019ULL);
    for (int j = 0; j < tu->hash_tokens && i < tu->append; j++, i++)
      out[i] = (int32_t)rp_rng_below(&r, (uint32_t)V);
  }
  rp_rng_seed(&r, a->seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(turn + 1)));
  for (; i < tu->append; i++) out[i] = (int32_t)rp_rng_below(&r, (uint32_t)V);
}

static int node_of_side(const driver *d, const rp_turn_record *r) {
  if (r->side == RP_READ_PE) return d->pe[r->pe].node;
  if (r->side == RP_READ_DE) return d->de[r->de].node;
  return -1;
}

static void dispatch(driver *d, int a) {
  engine_rank *e = d->e;
  const rp_agent *ag = &e->t->agents[a];
  int k = d->turn[a];
  rp_turn_record *r = &d->rec[d->first[a] + k];
  rp_serve_append_tokens(ag, k, e->m->cfg.V, d->ctx[a] + d->ctx_len[a]);
  int len = d->ctx_len[a] += ag->turns[k].append;
  RP_CHECK(len == ag->turns[k].prompt);
  /* the cached prefix, leaving at least one token to compute */
  uint64_t keys[RP_SERVE_MAX_BLOCKS];
  int nkeys = rp_kvs_keys(d->ctx[a], len - 1, keys);
  int nhit = rp_kvs_longest_prefix(&e->store, keys, nkeys, 1);
  for (int i = 0; i < e->y.npe; i++) d->pe[i].read_queue = d->node_read[d->pe[i].node];
  for (int i = 0; i < e->y.nde; i++) d->de[i].read_queue = d->node_read[d->de[i].node];
  long miss = len - (long)nhit * RP_KV_BLOCK;
  double arrive = ag->turns[k].arrive;
  *r = (rp_turn_record){.agent = a, .turn = k, .prompt = len, .hit = (long)nhit * RP_KV_BLOCK,
                        .gen = ag->turns[k].gen,
                        .t_arrive = arrive >= 0 ? arrive : serve_now() - d->t0};
  r->pe = rp_sched_pick_pe(&d->sched, d->pe, e->y.npe, miss);
  r->de = rp_sched_pick_de(&d->sched, d->de, e->y.nde, len + r->gen);
  r->side = e->o->mode == RP_MODE_ORACLE ? RP_READ_NONE
            : nhit == 0                  ? RP_READ_PE
                                         : rp_sched_read_side(&d->pe[r->pe], &d->de[r->de],
                                                              e->o->mode == RP_MODE_DUALPATH);
  req_msg q = {.agent = a, .turn = k, .pe = layout_pe_rank(r->pe),
               .de = layout_de_rank(&e->y, r->de), .side = r->side, .nhit = nhit,
               .nvalid = nhit, .prompt = len, .gen = (int)r->gen};
  MPI_Send(&q, sizeof q, MPI_BYTE, q.pe, TAG_REQ, MPI_COMM_WORLD);
  MPI_Send(d->ctx[a], len, MPI_INT32_T, q.pe, TAG_REQ, MPI_COMM_WORLD);
  if (r->side == RP_READ_DE) {
    MPI_Send(&q, sizeof q, MPI_BYTE, q.de, TAG_FWD, MPI_COMM_WORLD);
    MPI_Send(d->ctx[a], nhit * RP_KV_BLOCK, MPI_INT32_T, q.de, TAG_FWD, MPI_COMM_WORLD);
  }
  d->pe[r->pe].seqs++;
  d->pe[r->pe].tokens += miss;
  d->de[r->de].seqs++;
  d->de[r->de].tokens += len + r->gen;
  if (node_of_side(d, r) >= 0) d->node_read[node_of_side(d, r)] += (double)nhit * e->block_floats * 4;
}

static void start_or_wait(driver *d, int a) {
  if (d->e->t->agents[a].turns[d->turn[a]].arrive < 0) dispatch(d, a);
  else d->waiting[d->nwaiting++] = a;
}

static void on_prefilled(driver *d, int src) {
  done_msg m;
  MPI_Recv(&m, sizeof m, MPI_BYTE, src, TAG_PREFILLED, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  rp_turn_record *r = &d->rec[d->first[m.agent] + m.turn];
  r->t_first = m.t_first - d->t0;
  double bytes = (double)(r->hit / RP_KV_BLOCK) * d->e->block_floats * 4;
  r->hit = (long)m.nvalid * RP_KV_BLOCK; /* blocks that failed a check were recomputed */
  d->pe[r->pe].seqs--;
  d->pe[r->pe].tokens -= r->prompt - (long)r->hit;
  if (node_of_side(d, r) >= 0) d->node_read[node_of_side(d, r)] -= bytes;
}

/* A reply is back: the agent's context grows by it; its next turn starts. */
static int on_done(driver *d, int src) {
  done_msg m;
  MPI_Recv(&m, sizeof m, MPI_BYTE, src, TAG_DONE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  long ri = d->first[m.agent] + m.turn;
  rp_turn_record *r = &d->rec[ri];
  MPI_Recv(d->out[ri], (int)r->gen, MPI_INT32_T, src, TAG_DONE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  r->t_decode = m.t_decode - d->t0;
  r->t_done = m.t_done - d->t0;
  d->de[r->de].seqs--;
  d->de[r->de].tokens -= r->prompt + r->gen;
  memcpy(d->ctx[m.agent] + d->ctx_len[m.agent], d->out[ri], (size_t)r->gen * sizeof(int32_t));
  d->ctx_len[m.agent] += (int)r->gen;
  if (++d->turn[m.agent] < d->e->t->agents[m.agent].nturns) start_or_wait(d, m.agent);
  return 1;
}

/* Turns of replayed traces start at their time (seconds from the start). */
static void start_due(driver *d) {
  double now = serve_now() - d->t0;
  for (int i = 0; i < d->nwaiting;) {
    int a = d->waiting[i];
    if (d->e->t->agents[a].turns[d->turn[a]].arrive <= now) {
      d->waiting[i] = d->waiting[--d->nwaiting];
      dispatch(d, a);
    } else {
      i++;
    }
  }
}

static rp_status write_outputs(const char *path, const rp_trace *t, const long *first,
                               int32_t *const *out) {
  FILE *f = fopen(path, "w");
  if (!f) return rp_err(RP_EIO, "cannot write %s", path);
  for (int a = 0; a < t->nagents; a++)
    for (int k = 0; k < t->agents[a].nturns; k++) {
      fprintf(f, "%d %d", a, k);
      for (int i = 0; i < t->agents[a].turns[k].gen; i++) fprintf(f, " %d", out[first[a] + k][i]);
      fputc('\n', f);
    }
  return fclose(f) == 0 ? RP_OK : rp_err(RP_EIO, "cannot write %s", path);
}

rp_status rp_serve_write_outputs(const char *path, const rp_trace *t, int32_t *const *out) {
  long *first = malloc(((size_t)t->nagents + 1) * sizeof *first);
  if (!first) return rp_err(RP_ENOMEM, "out of memory");
  long n = 0;
  for (int a = 0; a < t->nagents; a++) first[a] = n, n += t->agents[a].nturns;
  rp_status s = write_outputs(path, t, first, out);
  free(first);
  return s;
}

static int driver_alloc(driver *d, engine_rank *e, long n) {
  const rp_trace *t = e->t;
  d->pe = calloc((size_t)e->y.npe, sizeof *d->pe);
  d->de = calloc((size_t)e->y.nde, sizeof *d->de);
  d->node_read = calloc((size_t)e->y.nnodes, sizeof *d->node_read);
  d->ctx = calloc((size_t)t->nagents, sizeof *d->ctx);
  d->ctx_len = calloc((size_t)t->nagents, sizeof *d->ctx_len);
  d->turn = calloc((size_t)t->nagents, sizeof *d->turn);
  d->first = calloc((size_t)t->nagents + 1, sizeof *d->first);
  d->rec = calloc((size_t)n, sizeof *d->rec);
  d->out = calloc((size_t)n, sizeof *d->out);
  d->waiting = calloc((size_t)t->nagents, sizeof *d->waiting);
  if (!d->waiting || !d->pe || !d->de || !d->node_read || !d->ctx || !d->ctx_len || !d->turn || !d->first ||
      !d->rec || !d->out)
    return 0;
  long i = 0;
  for (int a = 0; a < t->nagents; a++) {
    d->first[a] = i;
    if (!(d->ctx[a] = malloc(((size_t)t->max_context + 1) * sizeof(int32_t)))) return 0;
    for (int k = 0; k < t->agents[a].nturns; k++, i++)
      if (!(d->out[i] = malloc(((size_t)t->agents[a].turns[k].gen + 1) * sizeof(int32_t)))) return 0;
  }
  d->first[t->nagents] = i;
  for (int j = 0; j < e->y.npe; j++) d->pe[j].node = layout_node_of_rank(&e->y, layout_pe_rank(j));
  for (int j = 0; j < e->y.nde; j++)
    d->de[j].node = layout_node_of_rank(&e->y, layout_de_rank(&e->y, j));
  return 1;
}

static void driver_free(driver *d, long n) {
  for (int a = 0; d->ctx && a < d->e->t->nagents; a++) free(d->ctx[a]);
  for (long i = 0; d->out && i < n; i++) free(d->out[i]);
  void *p[] = {d->pe, d->de, d->node_read, d->ctx, d->ctx_len, d->turn, d->first, d->rec, d->out,
               d->waiting};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

static void summarize(driver *d, long n, rp_serve_summary *sum) {
  engine_rank *e = d->e;
  int nn = e->y.nnodes;
  double *bytes = calloc((size_t)nn, sizeof(double)), *busy = calloc((size_t)nn, sizeof(double));
  RP_CHECK(bytes && busy);
  for (int k = 0; k < nn; k++) {
    rp_link lk;
    char name[96];
    snprintf(name, sizeof name, "%s-snic-%d", e->link_prefix, k);
    if (rp_link_open(&lk, name, 0, 0) == RP_OK) {
      bytes[k] = (double)rp_link_bytes(&lk);
      busy[k] = rp_link_busy_s(&lk);
      rp_link_close(&lk);
    }
  }
  rp_serve_summarize(d->rec, n, nn, bytes, busy, 0, sum);
  for (int r = 0; r < 1 + e->y.npe + e->y.nde; r++) {
    double b = rp_link_busy_s(&e->net_in[r]);
    if (b > sum->net_busy_max) sum->net_busy_max = b;
  }
  free(bytes);
  free(busy);
}

rp_status engine_driver(engine_rank *e, rp_serve_summary *sum) {
  driver d = {.e = e};
  long n = rp_trace_total_turns(e->t);
  d.sched = (rp_sched){.policy = e->o->policy, .pe_token_limit = 1L << 40,
                       .de_token_limit = (long)e->o->de_slots * e->m->cfg.T, .short_queue = -1};
  rp_status s = driver_alloc(&d, e, n) ? RP_OK : rp_err(RP_ENOMEM, "out of memory in the driver");
  d.t0 = serve_now();
  for (int a = 0; s == RP_OK && a < e->t->nagents; a++)
    if (e->t->agents[a].nturns > 0) start_or_wait(&d, a);
  for (long left = s == RP_OK ? n : 0; left > 0;) {
    MPI_Status st;
    int flag = 0;
    while (!flag) { /* a message, or a replayed turn's time */
      start_due(&d);
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
      if (!flag) nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    if (st.MPI_TAG == TAG_PREFILLED) on_prefilled(&d, st.MPI_SOURCE);
    else if (st.MPI_TAG == TAG_DONE) left -= on_done(&d, st.MPI_SOURCE);
    else RP_CHECK(!"unexpected message at the driver");
  }
  for (int r = 1; r < 1 + e->y.npe + e->y.nde; r++)
    MPI_Send(NULL, 0, MPI_BYTE, r, TAG_STOP, MPI_COMM_WORLD);
  if (s == RP_OK) {
    summarize(&d, n, sum);
    if (e->o->outputs) s = write_outputs(e->o->outputs, e->t, d.first, d.out);
    if (s == RP_OK && e->o->jsonl) s = rp_serve_write_jsonl(e->o->jsonl, d.rec, n);
  }
  driver_free(&d, n);
  return s;
}
