/* The serving simulator (rp_serve.h): a discrete-event model of PE and DE
 * nodes at paper scale, driven by the real scheduler (sched.c).
 *
 * Every resource is a first-come first-served server whose next free time is
 * known: a node's storage NIC, each engine's compute-NIC input, each PE (one
 * prefill at a time) and each DE's decode slots. When a turn arrives the
 * scheduler picks its PE, DE and read side from the engines' states at that
 * instant; its read, forwarding, prefill, hand-off and decode are then booked
 * on those servers in order, which fixes its first-token and completion
 * times. Events only update the states the scheduler sees (a PE's queue
 * drains when its prefill ends, a DE's when its decode ends) and start the
 * agent's next turn when one ends. A FIFO server's queued bytes at time t are
 * (free_at - t) x rate exactly, which is the read queue a node reports.
 *
 * Layer-wise streaming: a prefill may start once the first of the model's
 * layers has arrived and ends no earlier than one layer's compute after the
 * last layer arrived; without it the prefill waits for the whole prefix, and
 * the whole prefix must sit in the PE's HBM from the start of its load to the
 * end of its prefill: a PE holds pe_stage of them at once, so a load waits
 * for the prefill pe_stage requests earlier on that PE to end. Layer-wise,
 * only a layer at a time is staged and loads never wait for HBM. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_infer.h"
#include "ringpipe/rp_serve.h"

typedef struct {
  double t;
  long seq;
  int type; /* 0: prefill done, 1: turn done, 2: arrival */
  long req;
} sim_event;

typedef struct {
  sim_event *ev;
  long n, cap, seq;
} event_heap;

static int ev_before(const sim_event *a, const sim_event *b) {
  return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int heap_push(event_heap *h, double t, int type, long req) {
  if (h->n == h->cap) {
    long cap = h->cap ? 2 * h->cap : 1024;
    sim_event *g = realloc(h->ev, (size_t)cap * sizeof *g);
    if (!g) return 0;
    h->ev = g;
    h->cap = cap;
  }
  long i = h->n++;
  h->ev[i] = (sim_event){t, h->seq++, type, req};
  while (i > 0 && ev_before(&h->ev[i], &h->ev[(i - 1) / 2])) {
    sim_event tmp = h->ev[i];
    h->ev[i] = h->ev[(i - 1) / 2];
    h->ev[(i - 1) / 2] = tmp;
    i = (i - 1) / 2;
  }
  return 1;
}

static sim_event heap_pop(event_heap *h) {
  sim_event top = h->ev[0];
  h->ev[0] = h->ev[--h->n];
  for (long i = 0;;) {
    long l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && ev_before(&h->ev[l], &h->ev[m])) m = l;
    if (r < h->n && ev_before(&h->ev[r], &h->ev[m])) m = r;
    if (m == i) break;
    sim_event tmp = h->ev[i];
    h->ev[i] = h->ev[m];
    h->ev[m] = tmp;
    i = m;
  }
  return top;
}

typedef struct {
  const rp_sim_config *cfg;
  const rp_trace *tr;
  int npe, nde, nnodes;
  double snic_rate, cnic_rate;       /* bytes/s; 0: infinite */
  double *snic_free, *snic_bytes, *snic_busy;
  double *pe_free, *pe_in_free, *de_in_free, *de_slot_free;
  double *pe_stage_free;             /* per PE, pe_stage entries: when each HBM stage frees */
  rp_engine_state *pe, *de;
  rp_sched sched;
  event_heap heap;
  rp_turn_record *rec;
  long nrec;
  long *agent_first;                 /* record index of each agent's turn 0 */
  long *miss;                        /* per record: tokens the PE computes */
  double net_bytes, path_bytes[3];
  rp_ctrace *tl;
} sim_state;

static double xfer(double bytes, double rate) { return rate > 0 ? bytes / rate : 0; }
static int pe_node(const sim_state *s, int i) { return i / s->cfg->gpus_per_node; }
static int de_node(const sim_state *s, int i) {
  return s->cfg->p_nodes + i / s->cfg->gpus_per_node;
}

static void refresh_read_queues(sim_state *s, double now) {
  for (int i = 0; i < s->npe; i++)
    s->pe[i].read_queue = fmax(0, s->snic_free[pe_node(s, i)] - now) * s->snic_rate;
  for (int i = 0; i < s->nde; i++)
    s->de[i].read_queue = fmax(0, s->snic_free[de_node(s, i)] - now) * s->snic_rate;
}

/* Books the hit prefix's read (and forwarding) for record r: when its first
 * layer and its last layer are at the PE. */
/* Without layer-wise loading, the earliest HBM stage of the PE (index in *k). */
static double stage_ready(sim_state *s, int pe, int *k) {
  const rp_sim_config *c = s->cfg;
  *k = -1;
  if (c->layerwise || c->pe_stage <= 0) return 0;
  double *st = s->pe_stage_free + (size_t)pe * c->pe_stage;
  *k = 0;
  for (int j = 1; j < c->pe_stage; j++)
    if (st[j] < st[*k]) *k = j;
  return st[*k];
}

static void book_load(sim_state *s, rp_turn_record *r, double now, double *first, double *last) {
  const rp_sim_config *c = s->cfg;
  double bytes = (double)r->hit * c->kv_bytes_per_token, L = c->layers;
  if (r->side == RP_READ_NONE || r->hit == 0) {
    *first = *last = now;
    return;
  }
  int k;
  now = fmax(now, stage_ready(s, r->pe, &k)); /* room in the PE's HBM for the prefix */
  int node = r->side == RP_READ_PE ? pe_node(s, r->pe) : de_node(s, r->de);
  double rs = fmax(now, s->snic_free[node]), re = rs + xfer(bytes, s->snic_rate);
  s->snic_free[node] = re;
  s->snic_bytes[node] += bytes;
  s->snic_busy[node] += re - rs;
  s->path_bytes[r->side == RP_READ_PE ? 0 : 1] += bytes;
  rp_ctrace_event(s->tl, "read", node, 0, rs, re);
  if (r->side == RP_READ_PE) {
    *first = c->layerwise ? rs + (re - rs) / L : re;
    *last = re;
    return;
  }
  /* storage -> DE -> PE over the PE's compute NIC */
  double fwd = xfer(bytes, s->cnic_rate);
  double fs = c->layerwise ? fmax(rs + (re - rs) / L, s->pe_in_free[r->pe]) : fmax(re, s->pe_in_free[r->pe]);
  double fe = c->layerwise ? fmax(fs + fwd, re + fwd / L) : fs + fwd;
  s->pe_in_free[r->pe] = fe;
  s->net_bytes += bytes;
  rp_ctrace_event(s->tl, "forward", s->nnodes + r->pe, 1, fs, fe);
  *first = c->layerwise ? fs + fwd / L : fe;
  *last = fe;
}

static double prefill_seconds(const rp_sim_config *c, long miss, long ctx) {
  double t = c->prefill_tps > 0 ? (double)miss / c->prefill_tps : 0;
  return t + c->prefill_ctx_s * (double)miss * (double)ctx / 1000.0;
}

/* A turn arrives: schedule it and book every stage. */
static int start_turn(sim_state *s, long ri, double now) {
  const rp_sim_config *c = s->cfg;
  rp_turn_record *r = &s->rec[ri];
  long miss = s->miss[ri];
  refresh_read_queues(s, now);
  r->t_arrive = now;
  r->pe = rp_sched_pick_pe(&s->sched, s->pe, s->npe, miss);
  r->de = rp_sched_pick_de(&s->sched, s->de, s->nde, r->prompt + r->gen);
  r->side = c->mode == RP_MODE_ORACLE ? RP_READ_NONE
                                       : rp_sched_read_side(&s->pe[r->pe], &s->de[r->de],
                                                            c->mode == RP_MODE_DUALPATH);
  s->pe[r->pe].seqs++;
  s->pe[r->pe].tokens += miss;
  s->de[r->de].seqs++;
  s->de[r->de].tokens += r->prompt + r->gen;
  double first, last;
  book_load(s, r, now, &first, &last);
  double comp = prefill_seconds(c, miss, r->prompt), L = c->layers;
  double cs = fmax(fmax(now, s->pe_free[r->pe]), c->layerwise ? first : last);
  double ce = fmax(cs + comp, last + comp / L);
  s->pe_free[r->pe] = ce;
  int stage;
  stage_ready(s, r->pe, &stage);
  if (stage >= 0 && r->hit > 0 && r->side != RP_READ_NONE)
    s->pe_stage_free[(size_t)r->pe * c->pe_stage + stage] = ce; /* the stage frees with the prefill */
  r->t_first = ce;
  rp_ctrace_event(s->tl, "prefill", s->nnodes + r->pe, 0, cs, ce);
  /* hand-off to the DE: the whole context, or only the new tokens when the
   * DE read the prefix itself (as the real engine does; Oracle sends all) */
  long sent = r->side == RP_READ_DE ? miss : r->prompt;
  double hb = (double)sent * c->kv_bytes_per_token;
  double hs = fmax(ce, s->de_in_free[r->de]), he = hs + xfer(hb, s->cnic_rate);
  s->de_in_free[r->de] = he;
  s->net_bytes += hb;
  s->path_bytes[2] += hb;
  /* decode in the DE's earliest free slot */
  double *slots = s->de_slot_free + (size_t)r->de * c->de_batch;
  int k = 0;
  for (int j = 1; j < c->de_batch; j++)
    if (slots[j] < slots[k]) k = j;
  double ds = fmax(he, slots[k]), de = ds + (double)(r->gen > 1 ? r->gen - 1 : 0) * c->tpot_s;
  slots[k] = de;
  r->t_decode = ds;
  r->t_done = de;
  rp_ctrace_event(s->tl, "decode", s->nnodes + s->npe + r->de, k, ds, de);
  return heap_push(&s->heap, ce, 0, ri) && heap_push(&s->heap, de, 1, ri);
}

/* Records in agent order; hits of synthetic turns are the previous
 * context's full blocks (what decode persisted). */
static int build_records(sim_state *s) {
  const rp_trace *tr = s->tr;
  long n = rp_trace_total_turns(tr);
  s->rec = calloc((size_t)(n ? n : 1), sizeof *s->rec);
  s->miss = calloc((size_t)(n ? n : 1), sizeof *s->miss);
  s->agent_first = calloc((size_t)tr->nagents + 1, sizeof *s->agent_first);
  if (!s->rec || !s->miss || !s->agent_first) return 0;
  long i = 0;
  for (int a = 0; a < tr->nagents; a++) {
    s->agent_first[a] = i;
    long prev = 0;
    for (int k = 0; k < tr->agents[a].nturns; k++, i++) {
      const rp_turn *tu = &tr->agents[a].turns[k];
      rp_turn_record *r = &s->rec[i];
      r->agent = a;
      r->turn = k;
      r->prompt = tu->prompt;
      r->gen = tu->gen;
      r->hit = tu->hit >= 0 ? tu->hit : prev / RP_KV_BLOCK * RP_KV_BLOCK;
      s->miss[i] = r->prompt - r->hit;
      prev = tu->prompt + tu->gen;
    }
  }
  s->agent_first[tr->nagents] = i;
  s->nrec = n;
  return 1;
}

static rp_status check_config(const rp_sim_config *c) {
  if (c->p_nodes < 1 || c->d_nodes < 1 || c->gpus_per_node < 1 || c->de_batch < 1 ||
      c->layers < 1 || c->kv_bytes_per_token < 0 || c->tpot_s < 0 || c->prefill_ctx_s < 0)
    return rp_err(RP_EINVAL, "simulator: need >= 1 PE node, DE node, GPU per node, decode "
                  "slot and layer, and non-negative sizes and times");
  return RP_OK;
}

static int alloc_state(sim_state *s) {
  const rp_sim_config *c = s->cfg;
  double **d[] = {&s->snic_free, &s->snic_bytes, &s->snic_busy};
  for (size_t i = 0; i < 3; i++) *d[i] = calloc((size_t)s->nnodes, sizeof(double));
  s->pe_free = calloc((size_t)s->npe, sizeof(double));
  s->pe_in_free = calloc((size_t)s->npe, sizeof(double));
  s->pe_stage_free = calloc((size_t)s->npe * (c->pe_stage > 0 ? c->pe_stage : 1), sizeof(double));
  s->de_in_free = calloc((size_t)s->nde, sizeof(double));
  s->de_slot_free = calloc((size_t)s->nde * c->de_batch, sizeof(double));
  s->pe = calloc((size_t)s->npe, sizeof *s->pe);
  s->de = calloc((size_t)s->nde, sizeof *s->de);
  if (!s->snic_free || !s->snic_bytes || !s->snic_busy || !s->pe_free || !s->pe_in_free || !s->pe_stage_free ||
      !s->de_in_free || !s->de_slot_free || !s->pe || !s->de)
    return 0;
  for (int i = 0; i < s->npe; i++) s->pe[i].node = pe_node(s, i);
  for (int i = 0; i < s->nde; i++) s->de[i].node = de_node(s, i);
  return 1;
}

static void free_state(sim_state *s) {
  void *p[] = {s->snic_free, s->snic_bytes, s->snic_busy, s->pe_free, s->pe_in_free, s->pe_stage_free,
               s->de_in_free, s->de_slot_free, s->pe, s->de, s->heap.ev, s->agent_first, s->miss};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

/* First turns (and replayed arrivals) into the heap. */
static int seed_arrivals(sim_state *s) {
  for (int a = 0; a < s->tr->nagents; a++) {
    if (s->tr->agents[a].nturns == 0) continue;
    double t = s->tr->agents[a].turns[0].arrive;
    if (!heap_push(&s->heap, t < 0 ? 0 : t, 2, s->agent_first[a])) return 0;
  }
  return 1;
}

static int run_events(sim_state *s) {
  while (s->heap.n) {
    sim_event e = heap_pop(&s->heap);
    rp_turn_record *r = &s->rec[e.req];
    if (e.type == 2) {
      if (!start_turn(s, e.req, e.t)) return 0;
    } else if (e.type == 0) {
      s->pe[r->pe].seqs--;
      s->pe[r->pe].tokens -= s->miss[e.req];
    } else {
      s->de[r->de].seqs--;
      s->de[r->de].tokens -= r->prompt + r->gen;
      long next = e.req + 1;
      if (next < s->agent_first[r->agent + 1]) {
        double arrive = s->tr->agents[r->agent].turns[r->turn + 1].arrive;
        if (!heap_push(&s->heap, arrive < 0 ? e.t : fmax(arrive, e.t), 2, next)) return 0;
      }
    }
  }
  return 1;
}

rp_status rp_sim_run(const rp_sim_config *cfg, const rp_trace *tr, rp_sim_result *out,
                     rp_ctrace *timeline) {
  memset(out, 0, sizeof *out);
  RP_TRY(check_config(cfg));
  sim_state s = {.cfg = cfg, .tr = tr, .tl = timeline};
  s.npe = cfg->p_nodes * cfg->gpus_per_node;
  s.nde = cfg->d_nodes * cfg->gpus_per_node;
  s.nnodes = cfg->p_nodes + cfg->d_nodes;
  s.snic_rate = cfg->snic_gbps > 0 ? cfg->snic_gbps * 1e9 / 8 : 0;
  s.cnic_rate = cfg->cnic_gbps > 0 ? cfg->cnic_gbps * 1e9 / 8 : 0;
  s.sched = (rp_sched){.policy = cfg->policy, .pe_token_limit = cfg->pe_token_limit,
                       .de_token_limit = cfg->de_token_limit,
                       .short_queue = cfg->short_queue_bytes};
  int ok = alloc_state(&s) && build_records(&s) && seed_arrivals(&s) && run_events(&s);
  if (ok) {
    out->rec = s.rec;
    out->nrec = s.nrec;
    rp_serve_summarize(s.rec, s.nrec, s.nnodes, s.snic_bytes, s.snic_busy, s.net_bytes, &out->sum);
    memcpy(out->sum.path_bytes, s.path_bytes, sizeof s.path_bytes);
  } else {
    free(s.rec);
  }
  free_state(&s);
  return ok ? RP_OK : rp_err(RP_ENOMEM, "out of memory in the simulator");
}

void rp_sim_result_free(rp_sim_result *r) {
  free(r->rec);
  rp_serve_summary_free(&r->sum);
  memset(r, 0, sizeof *r);
}
