/* Validator and cost-model simulator of schedules (no MPI).
 *
 * Both run the same engine: every rank executes its list in order; a compute
 * waits for its inputs (the previous stage's output, its own F before B/I, its
 * own I before W); a SEND never waits; a RECV waits for the peer's SEND in the
 * validator (blocking receives, the strictest reading of the list) and is only
 * posted in the simulator (the executor's MPI_Irecv: the compute that needs the
 * data waits instead). If no rank can move before all are done, the lists
 * deadlock. Because each receive matches exactly one send, the outcome does not
 * depend on the order in which ranks are stepped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "ringpipe/rp_schedule.h"

enum { DIR_F = 0, DIR_B = 1 };

static int key_of(const rp_schedule *s, int dir, int recv_stage, int mb) {
  return (dir * s->v * s->p + recv_stage) * s->m + mb;
}

/* ---- structural checks ---- */

typedef struct {
  int cnt[RP_OP_COUNT];
  int pos[RP_OP_COUNT]; /* first index, -1 if absent */
} occ;

static rp_status at(rp_sched_pos *where, int r, int i, rp_status st) {
  if (where) *where = (rp_sched_pos){r, i};
  return st;
}

/* Which comm actions (chunk, mb) of rank r must have, by the stage mapping. */
static void comm_needs(const rp_schedule *s, int r, int c, int need[RP_OP_COUNT]) {
  int st = rp_schedule_stage(s, r, c), S = s->v * s->p;
  memset(need, 0, RP_OP_COUNT * sizeof *need);
  if (!s->lowered) return;
  int pr = -1, nr = -1, ch;
  if (st > 0) rp_schedule_owner(s, st - 1, &pr, &ch);
  if (st + 1 < S) rp_schedule_owner(s, st + 1, &nr, &ch);
  int prev_remote = st > 0 && pr != r;
  int next_remote = st + 1 < S && nr != r;
  need[RP_OP_RECV_F] = need[RP_OP_SEND_B] = prev_remote;
  need[RP_OP_SEND_F] = need[RP_OP_RECV_B] = next_remote;
}

static rp_status check_unit(const rp_schedule *s, int r, int c, int mb, const occ *o,
                            rp_sched_pos *where) {
  char who[64];
  snprintf(who, sizeof who, "rank %d: chunk %d micro-batch %d", r, c, mb);
  const int *n = o->cnt, *p = o->pos;
  if (n[RP_OP_F] != 1)
    return at(where, r, n[RP_OP_F] ? p[RP_OP_F] : -1,
              rp_err(RP_EINVAL, "%s has %d F actions; it needs exactly one", who, n[RP_OP_F]));
  int full = n[RP_OP_B] == 1 && n[RP_OP_I] == 0 && n[RP_OP_W] == 0;
  int split = n[RP_OP_B] == 0 && n[RP_OP_I] == 1 && n[RP_OP_W] == 1;
  if (!full && !split) {
    int i = p[RP_OP_B] >= 0 ? p[RP_OP_B] : p[RP_OP_I] >= 0 ? p[RP_OP_I] : p[RP_OP_W];
    return at(where, r, i,
              rp_err(RP_EINVAL,
                     "%s has %d B, %d I, %d W; it needs one B, or one I and one W", who,
                     n[RP_OP_B], n[RP_OP_I], n[RP_OP_W]));
  }
  int bwd = full ? p[RP_OP_B] : p[RP_OP_I];
  if (bwd < p[RP_OP_F])
    return at(where, r, bwd,
              rp_err(RP_EINVAL, "%s: its %s (action %d) comes before its F (action %d)", who,
                     full ? "B" : "I", bwd, p[RP_OP_F]));
  if (split && p[RP_OP_W] < p[RP_OP_I])
    return at(where, r, p[RP_OP_W],
              rp_err(RP_EINVAL, "%s: its W (action %d) comes before its I (action %d)", who,
                     p[RP_OP_W], p[RP_OP_I]));
  int need[RP_OP_COUNT];
  comm_needs(s, r, c, need);
  for (int op = RP_OP_SEND_F; op <= RP_OP_RECV_B; op++)
    if (n[op] != need[op])
      return at(where, r, n[op] ? p[op] : -1,
                rp_err(RP_EINVAL, "%s has %d %s; the stage mapping needs %d %s", who, n[op],
                       rp_op_name(op), need[op],
                       need[op] ? "(its peer is on another rank)"
                                : s->lowered ? "(no cross-rank transfer here)"
                                             : "(a compute-only list)"));
  /* A RECV before the compute that reads it, a SEND after the one that makes it. */
  if (need[RP_OP_RECV_F] && p[RP_OP_RECV_F] > p[RP_OP_F])
    return at(where, r, p[RP_OP_RECV_F],
              rp_err(RP_EINVAL, "%s: RECV_F (action %d) comes after the F that reads it", who,
                     p[RP_OP_RECV_F]));
  if (need[RP_OP_SEND_F] && p[RP_OP_SEND_F] < p[RP_OP_F])
    return at(where, r, p[RP_OP_SEND_F],
              rp_err(RP_EINVAL, "%s: SEND_F (action %d) comes before the F that makes it", who,
                     p[RP_OP_SEND_F]));
  if (need[RP_OP_RECV_B] && p[RP_OP_RECV_B] > bwd)
    return at(where, r, p[RP_OP_RECV_B],
              rp_err(RP_EINVAL, "%s: RECV_B (action %d) comes after the backward that reads it",
                     who, p[RP_OP_RECV_B]));
  if (need[RP_OP_SEND_B] && p[RP_OP_SEND_B] < bwd)
    return at(where, r, p[RP_OP_SEND_B],
              rp_err(RP_EINVAL, "%s: SEND_B (action %d) comes before the backward that makes it",
                     who, p[RP_OP_SEND_B]));
  return RP_OK;
}

static rp_status check_structure(const rp_schedule *s, rp_sched_pos *where) {
  int units = s->v * s->m;
  occ *o = malloc((size_t)units * sizeof *o);
  if (!o) return rp_err(RP_ENOMEM, "out of memory validating a schedule");
  rp_status st = RP_OK;
  for (int r = 0; r < s->p && st == RP_OK; r++) {
    for (int u = 0; u < units; u++) {
      memset(o[u].cnt, 0, sizeof o[u].cnt);
      for (int k = 0; k < RP_OP_COUNT; k++) o[u].pos[k] = -1;
    }
    for (int i = 0; i < s->n[r] && st == RP_OK; i++) {
      rp_action a = s->acts[r][i];
      char txt[32];
      rp_action_str(a, txt, sizeof txt);
      if (a.op < 0 || a.op >= RP_OP_COUNT)
        st = at(where, r, i, rp_err(RP_EINVAL, "rank %d action %d: op %d is not an op", r, i, a.op));
      else if (a.chunk < 0 || a.chunk >= s->v)
        st = at(where, r, i,
                rp_err(RP_EINVAL, "rank %d action %d (%s): chunk %d outside 0..%d", r, i, txt,
                       a.chunk, s->v - 1));
      else if (a.mb < 0 || a.mb >= s->m)
        st = at(where, r, i,
                rp_err(RP_EINVAL, "rank %d action %d (%s): micro-batch %d outside 0..%d", r, i,
                       txt, a.mb, s->m - 1));
      else {
        occ *u = &o[a.chunk * s->m + a.mb];
        if (u->cnt[a.op]++ == 0) u->pos[a.op] = i;
      }
    }
    for (int u = 0; u < units && st == RP_OK; u++)
      st = check_unit(s, r, u / s->m, u % s->m, &o[u], where);
  }
  free(o);
  return st;
}

/* ---- the engine ---- */

typedef struct {
  const rp_schedule *s;
  int blocking;      /* RECV waits for the SEND (validator) */
  double dur[4];     /* F, B, I, W of one chunk */
  double comm;
  int S;
  double *fdone, *bdone, *idone; /* per (stage, mb): end time, -1 not yet */
  double *sent;                  /* per message key: SEND time, -1 not yet */
  int *pc;
  double *clock;
  rp_sim *sim; /* spans go here when non-NULL */
} engine;

/* Whether (chunk, mb) of `rank` runs a B or an I, for messages. */
static int backward_op(const rp_schedule *s, int rank, int chunk, int mb) {
  for (int i = 0; i < s->n[rank]; i++) {
    rp_action a = s->acts[rank][i];
    if ((a.op == RP_OP_B || a.op == RP_OP_I) && a.chunk == chunk && a.mb == mb) return a.op;
  }
  return RP_OP_B;
}

/* Time at which compute `a` of rank r has its inputs, or -1 if it cannot start.
 * `what` names the missing input. */
static double input_time(engine *E, int r, rp_action a, char *what, size_t n) {
  const rp_schedule *s = E->s;
  int st = rp_schedule_stage(s, r, a.chunk), m = s->m;
  double t = 0;
  int src = -1, dir = DIR_F;
  if (a.op == RP_OP_W) {
    t = E->idone[st * m + a.mb];
    if (t < 0) snprintf(what, n, "its own %dI%d", a.chunk, a.mb);
    return t;
  }
  if (a.op == RP_OP_F) {
    if (st > 0) src = st - 1;
  } else {
    t = E->fdone[st * m + a.mb];
    if (t < 0) {
      snprintf(what, n, "its own %dF%d", a.chunk, a.mb);
      return -1;
    }
    if (st + 1 < E->S) src = st + 1, dir = DIR_B;
  }
  if (src < 0) return t;
  double *done = dir == DIR_F ? E->fdone : E->bdone;
  double got;
  int src_rank, src_chunk;
  rp_schedule_owner(s, src, &src_rank, &src_chunk);
  if (src_rank == r) {
    got = done[src * m + a.mb];
  } else if (s->lowered) {
    got = E->sent[key_of(s, dir, st, a.mb)];
    if (got >= 0) got += E->comm;
  } else {
    got = done[src * m + a.mb];
    if (got >= 0) got += E->comm;
  }
  if (got < 0) {
    snprintf(what, n, "rank %d's %d%s%d", src_rank, src_chunk,
             dir == DIR_F ? "F" : rp_op_name(backward_op(s, src_rank, src_chunk, a.mb)), a.mb);
    return -1;
  }
  return got > t ? got : t;
}

/* Runs rank r's next action if it can; returns 1 if it did. */
static int step(engine *E, int r, char *what, size_t n) {
  const rp_schedule *s = E->s;
  int i = E->pc[r];
  rp_action a = s->acts[r][i];
  int st = rp_schedule_stage(s, r, a.chunk), m = s->m;
  double t0 = E->clock[r], t1 = t0;
  if (rp_op_is_compute(a.op)) {
    double tin = input_time(E, r, a, what, n);
    if (tin < 0) return 0;
    if (tin > t0) t0 = tin;
    t1 = t0 + E->dur[a.op];
    if (a.op == RP_OP_F) E->fdone[st * m + a.mb] = t1;
    if (a.op == RP_OP_B || a.op == RP_OP_I) E->bdone[st * m + a.mb] = t1;
    if (a.op == RP_OP_I) E->idone[st * m + a.mb] = t1;
  } else if (a.op == RP_OP_SEND_F || a.op == RP_OP_SEND_B) {
    E->sent[rp_schedule_tag(s, r, a)] = t0;
  } else if (E->blocking && E->sent[rp_schedule_tag(s, r, a)] < 0) {
    char peer[32];
    rp_action pa = {a.op == RP_OP_RECV_F ? RP_OP_SEND_F : RP_OP_SEND_B, 0, a.mb};
    int q = rp_schedule_peer(s, r, a);
    int pst = a.op == RP_OP_RECV_F ? st - 1 : st + 1;
    int owner;
    rp_schedule_owner(s, pst, &owner, &pa.chunk);
    rp_action_str(pa, peer, sizeof peer);
    snprintf(what, n, "rank %d's %s", q, peer);
    return 0;
  }
  E->clock[r] = t1;
  if (E->sim) E->sim->spans[r][i] = (rp_span){a, t0, t1};
  E->pc[r]++;
  return 1;
}

static rp_status engine_run(engine *E, rp_sched_pos *where) {
  const rp_schedule *s = E->s;
  size_t cells = (size_t)E->S * s->m;
  rp_status st = RP_OK;
  E->fdone = malloc(cells * sizeof(double));
  E->bdone = malloc(cells * sizeof(double));
  E->idone = malloc(cells * sizeof(double));
  E->sent = malloc(2 * cells * sizeof(double));
  E->pc = calloc((size_t)s->p, sizeof(int));
  E->clock = calloc((size_t)s->p, sizeof(double));
  if (!E->fdone || !E->bdone || !E->idone || !E->sent || !E->pc || !E->clock)
    st = rp_err(RP_ENOMEM, "out of memory simulating a schedule");
  if (st == RP_OK) {
    for (size_t k = 0; k < cells; k++) E->fdone[k] = E->bdone[k] = E->idone[k] = -1;
    for (size_t k = 0; k < 2 * cells; k++) E->sent[k] = -1;
    char what[96];
    for (int moved = 1; moved;) {
      moved = 0;
      for (int r = 0; r < s->p; r++)
        while (E->pc[r] < s->n[r] && step(E, r, what, sizeof what)) moved = 1;
    }
    char msg[900];
    size_t len = 0;
    int stuck = 0;
    for (int r = 0; r < s->p; r++) {
      if (E->pc[r] >= s->n[r]) continue;
      char txt[32];
      rp_action_str(s->acts[r][E->pc[r]], txt, sizeof txt);
      step(E, r, what, sizeof what); /* fails again; fills `what` */
      if (!stuck && where) *where = (rp_sched_pos){r, E->pc[r]};
      if (stuck++ < 4 && len < sizeof msg)
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%s rank %d waits at action %d (%s) for %s",
                                stuck > 1 ? ";" : "", r, E->pc[r], txt, what);
    }
    if (stuck)
      st = rp_err(RP_EINVAL, "deadlock (%s):%s",
                  !s->lowered ? "each compute waits for the one that makes its input"
                  : E->blocking ? "a RECV waits for its peer's SEND, sends never wait"
                                : "a compute waits for its input",
                  msg);
  }
  free(E->fdone);
  free(E->bdone);
  free(E->idone);
  free(E->sent);
  free(E->pc);
  free(E->clock);
  return st;
}

rp_status rp_schedule_check_size(int p, int v, int m) {
  if (p < 1 || v < 1 || m < 1)
    return rp_err(RP_EINVAL, "a schedule needs p >= 1 ranks, v >= 1 chunks and m >= 1 "
                  "micro-batches (got p=%d v=%d m=%d)", p, v, m);
  long long cells = (long long)p * v * m;  /* each <= INT_MAX: no overflow in 64 bits */
  if (cells > RP_SCHEDULE_MAX_CELLS)
    return rp_err(RP_EINVAL, "a schedule of p=%d ranks x v=%d chunks x m=%d micro-batches has "
                  "%lld cells; at most %d are supported: use fewer micro-batches, chunks or "
                  "ranks", p, v, m, cells, RP_SCHEDULE_MAX_CELLS);
  return RP_OK;
}

rp_status rp_schedule_validate(const rp_schedule *s, rp_sched_pos *where) {
  if (where) *where = (rp_sched_pos){-1, -1};
  RP_TRY(rp_schedule_check_size(s->p, s->v, s->m));  /* the tables below are per cell */
  if (s->map == RP_MAP_V && (s->v != 2 || s->p < 2))
    return rp_err(RP_EINVAL, "a V stage map needs 2 chunks per rank on at least 2 ranks (got "
                  "v=%d, p=%d)", s->v, s->p);
  RP_TRY(check_structure(s, where));
  engine E = {.s = s, .blocking = 1, .dur = {1, 1, 1, 1}, .S = s->v * s->p};
  return engine_run(&E, where);
}

/* ---- simulator ---- */

void rp_sim_free(rp_sim *sim) {
  if (!sim) return;
  if (sim->spans)
    for (int r = 0; r < sim->p; r++) free(sim->spans[r]);
  free(sim->spans);
  free(sim->n);
  free(sim->busy);
  free(sim->idle);
  free(sim->peak_act);
  free(sim->peak_wst);
  free(sim);
}

rp_status rp_sim_new(const rp_schedule *s, rp_sim **out) {
  rp_sim *sim = calloc(1, sizeof *sim);
  *out = NULL;
  if (!sim) return rp_err(RP_ENOMEM, "out of memory for a timeline");
  int p = sim->p = s->p, ok = 1;
  sim->n = calloc((size_t)p, sizeof *sim->n);
  sim->spans = calloc((size_t)p, sizeof *sim->spans);
  sim->busy = calloc((size_t)p, sizeof *sim->busy);
  sim->idle = calloc((size_t)p, sizeof *sim->idle);
  sim->peak_act = calloc((size_t)p, sizeof *sim->peak_act);
  sim->peak_wst = calloc((size_t)p, sizeof *sim->peak_wst);
  ok = sim->n && sim->spans && sim->busy && sim->idle && sim->peak_act && sim->peak_wst;
  for (int r = 0; ok && r < p; r++) {
    sim->n[r] = s->n[r];
    sim->spans[r] = calloc((size_t)(s->n[r] > 0 ? s->n[r] : 1), sizeof(rp_span));
    ok = sim->spans[r] != NULL;
    for (int i = 0; ok && i < s->n[r]; i++) sim->spans[r][i].a = s->acts[r][i];
  }
  if (!ok) {
    rp_sim_free(sim);
    return rp_err(RP_ENOMEM, "out of memory for a timeline");
  }
  *out = sim;
  return RP_OK;
}

static int peak_wst(const rp_schedule *s, int r) {
  int live = 0, peak = 0;
  for (int i = 0; i < s->n[r]; i++) {
    if (s->acts[r][i].op == RP_OP_I) {
      live++;
      peak = RP_MAX(peak, live);
    }
    if (s->acts[r][i].op == RP_OP_W) live--;
  }
  return peak;
}

void rp_sim_summarize(rp_sim *sim, const rp_schedule *s) {
  double t_first = INFINITY, t_last = -INFINITY, busy = 0, idle = 0;
  for (int r = 0; r < sim->p; r++)
    for (int i = 0; i < sim->n[r]; i++) {
      const rp_span *sp = &sim->spans[r][i];
      if (!rp_op_is_compute(sp->a.op)) continue;
      if (sp->t0 < t_first) t_first = sp->t0;
      if (sp->t1 > t_last) t_last = sp->t1;
    }
  sim->makespan = t_last > t_first ? t_last - t_first : 0;
  sim->period = 0;
  for (int r = 0; r < sim->p; r++) {
    double r0 = INFINITY, r1 = -INFINITY;
    sim->busy[r] = 0;
    for (int i = 0; i < sim->n[r]; i++)
      if (rp_op_is_compute(sim->spans[r][i].a.op)) {
        sim->busy[r] += sim->spans[r][i].t1 - sim->spans[r][i].t0;
        r0 = RP_MIN(r0, sim->spans[r][i].t0);
        r1 = RP_MAX(r1, sim->spans[r][i].t1);
      }
    if (r1 > r0) sim->period = RP_MAX(sim->period, r1 - r0);
    sim->idle[r] = sim->makespan - sim->busy[r];
    busy += sim->busy[r];
    idle += sim->idle[r];
    if (s && r < s->p) {
      sim->peak_act[r] = rp_schedule_max_live(s, r);
      sim->peak_wst[r] = peak_wst(s, r);
    }
  }
  sim->bubble_total = sim->makespan > 0 ? idle / (sim->p * sim->makespan) : 0;
  sim->bubble_ideal = busy > 0 ? idle / busy : 0;
  sim->bubble_steady = busy > 0 ? (sim->p * sim->period - busy) / busy : 0;
}

static int uses_split(const rp_schedule *s) {
  for (int r = 0; r < s->p; r++)
    for (int i = 0; i < s->n[r]; i++)
      if (s->acts[r][i].op == RP_OP_I || s->acts[r][i].op == RP_OP_W) return 1;
  return 0;
}

rp_status rp_schedule_simulate(const rp_schedule *s, const rp_costs *c, rp_sim **out) {
  *out = NULL;
  if (!(c->tF > 0) || !(c->tB > 0) || !(c->tW >= 0) || !(c->comm >= 0))
    return rp_err(RP_EINVAL,
                  "--costs %g,%g,%g,%g: need tF > 0, tB > 0, tW >= 0, comm >= 0", c->tF, c->tB,
                  c->tW, c->comm);
  if (uses_split(s) && !(c->tW < c->tB))
    return rp_err(RP_EINVAL,
                  "--costs: tW (%g) must be smaller than tB (%g): a split backward runs I = tB - "
                  "tW, then W = tW",
                  c->tW, c->tB);
  RP_TRY(rp_schedule_validate(s, NULL));
  rp_sim *sim;
  RP_TRY(rp_sim_new(s, &sim));
  double v = s->v;
  engine E = {.s = s, .blocking = 0, .comm = c->comm, .S = s->v * s->p, .sim = sim};
  E.dur[RP_OP_F] = c->tF / v;
  E.dur[RP_OP_B] = c->tB / v;
  E.dur[RP_OP_I] = (c->tB - c->tW) / v;
  E.dur[RP_OP_W] = c->tW / v;
  rp_status st = engine_run(&E, NULL);
  if (st != RP_OK) {
    rp_sim_free(sim);
    return st;
  }
  rp_sim_summarize(sim, s);
  *out = sim;
  return RP_OK;
}

/* ---- closed forms (idle / ideal; uniform stages, comm = 0) ----
 *
 * Every rank does the same work, ideal = m (tF + tB) (the whole batch on one
 * rank's share of the model), so idle / ideal = (makespan - ideal) / ideal.
 *
 * naive: one micro-batch at a time crosses p stages and back: makespan
 *   m p (tF + tB), idle/ideal = p - 1.
 * gpipe: the last forward leaves rank p-1 at (m + p - 1) tF, the backwards run
 *   back-to-back and the last one reaches rank 0 (p - 1) tB later:
 *   makespan (m + p - 1)(tF + tB), idle/ideal = (p - 1)/m.
 * 1f1b: rank p-1 starts at (p - 1) tF and never waits for m (tF + tB); the last
 *   gradient then walks back through p - 1 ranks: same makespan as GPipe,
 *   (p - 1)/m, with p - r activations in flight on rank r instead of m.
 * interleaved: each chunk action is t/v; the fill and drain cross p - 1 ranks at
 *   chunk granularity: bubble (p - 1)(tF + tB)/v, idle/ideal = (p - 1)/(v m)
 *   (Narayanan et al. 2021, section 2.2).
 * zb-h1: rank p-1 starts at (p - 1) tF and never waits; it runs W(j - (p-1))
 *   after I(j), so after its last I it still has p W left: that I ends at
 *   (p - 1) tF + m (tF + tI + tW) - p tW. The last input gradient then crosses
 *   p - 1 ranks at tI each (they are free: their own deferred W take tW <= tI
 *   between two arrivals), and rank 0, which defers nothing, ends with one W:
 *   makespan = m (tF + tI + tW) + (p - 1)(tF + tI - tW), so
 *   idle/ideal = (p - 1)(tF + tI - tW) / (m (tF + tI + tW)) -- the paper's
 *   (p-1)(TF+TB-TW) bubble, a third of 1F1B's when tF = tI = tW. */
/* zb-h2 (the list schedule with 2p-1 activations): the last rank starts
 *   (p-1) tF late and then never idles while tF + tI >= 2 tW (a W fills each
 *   gap an I leaves), so one step takes m (tF+tI+tW) + (p-1) tF; when
 *   tF + tI > 2 tW + tF, i.e. tI > 2 tW, the gaps between the returning input
 *   gradients, (p-1)(tF+tI-2tW) in all, are larger and set it instead:
 *   idle/ideal = (p-1) max(tF, tF+tI-2tW) / (m (tF+tI+tW)). Its ranks start
 *   and end (p-1) tF apart in a parallelogram, so with steps overlapped
 *   (rp_sim.period) only the paper's (p-1)(tF+tI-2tW) is left: zero at equal
 *   costs. (Checked against the simulator at 7 cost ratios, p = 2..8: exact
 *   for m >= 2p-1, where rank 0's warm-up of 2p-1 forwards fits, and for
 *   every m >= p at equal costs.)
 * zb-v and dualpipev at tF = tI = tW: the V's last rank starts (p-1) tF/2 late
 *   (a chunk forward is tF/2), and neither schedule idles after that, so
 *   idle/ideal = (p-1) tF / (2 m (tF+tB)), half of ZB-H2's one-step bubble at
 *   1F1B's memory. Rank 0 holds the first and the last stage, starts first and
 *   ends last: overlapping steps gains nothing. With other costs the orders
 *   (built for equal costs) leave more; the simulator has it.
 * zb-v-min (the building block of schedule_vblock.c) at tF = tI = tW: with
 *   M = 2 floor((p+4)/3) chunks, every rank's 6m chunk passes (tF/2 each) end
 *   6p-1-3M passes after the 6m it works (the controllable-memory paper's
 *   bound: 4p-5, 4p-7, 4p-9 for p = 1, 0, 2 mod 3), so idle/ideal =
 *   (6p-1-3M)/(6m), about 2p/(3m), the paper's V-Min; exact for p >= 3 and
 *   m >= 3 (and m = 2 unless p = 2 mod 3), checked for p = 2..24, m = 1..48.
 *   The exceptions, also exact: m = 1 and p = 2 give 4p-5, m = 2 with
 *   p = 2 mod 3 gives 4p-7 (schedule_vblock.c says why).
 * zb-v-half (the greedy list under p+2 chunk-activations) has no exact form:
 *   its makespan stays within 4 chunk passes of m(tF+tB) + (p-1)(tF+tB)/2 for
 *   p <= 10, so idle/ideal = (p-1)/(2m) to within 4/(6m) there (the paper's
 *   V-Half ~p/(2m); checked for m = p..64). Beyond, the greedy drifts above
 *   it (up to 6 passes at p = 12..14, 10 at p = 15); the "~" in its text says
 *   it is an approximation. */
/* tF = tI = tW, the papers' assumption (up to rounding) */
static int equal_costs(const rp_costs *c) {
  double tI = c->tB - c->tW;
  return fabs(c->tF - tI) < 1e-9 * c->tF && fabs(tI - c->tW) < 1e-9 * c->tF;
}

static int is_name(const char *name, const char *a, const char *b) {
  return !strcmp(name, a) || (b && !strcmp(name, b));
}

double rp_schedule_steady_formula(const char *name, int p, int v, int m, const rp_costs *c,
                                  const char **text) {
  if (!is_name(name, "zb-h2", "zbh2")) return rp_schedule_bubble_formula(name, p, v, m, c, text);
  double tI = c->tB - c->tW, g = c->tF + tI - 2 * c->tW;
  int equal = equal_costs(c);
  if (text)
    *text = m >= 2 * p - 1 || equal
                ? "(p-1)(tF+tI-2tW)/(m(tF+tI+tW))"
                : "(p-1)(tF+tI-2tW)/(m(tF+tI+tW)), exact only for m >= 2p-1 or tF = tI = tW";
  return (p - 1) * (g > 0 ? g : 0) / (m * (c->tF + c->tB));
}

/* V-Min's idle passes per rank at equal costs (see above), with its text. */
static int vmin_bubble_passes(int p, int m, const char **text) {
  if (p == 2 || m == 1) {
    *text = p == 2 ? "(4p-5)/(6m) (p = 2)" : "(4p-5)/(6m) (m = 1)";
    return 4 * p - 5;
  }
  if (m == 2 && p % 3 == 2) {
    *text = "(4p-7)/(6m) (m = 2, p = 2 mod 3)";
    return 4 * p - 7;
  }
  *text = "(6p-1-3M)/(6m), M = 2 floor((p+4)/3)";
  return 6 * p - 1 - 3 * (2 * ((p + 4) / 3));
}

double rp_schedule_bubble_formula(const char *name, int p, int v, int m, const rp_costs *c,
                                  const char **text) {
  const char *t = "";
  double x = NAN;
  double tI = c->tB - c->tW;
  if (!strcmp(name, "naive")) {
    t = "p-1";
    x = p - 1;
  } else if (!strcmp(name, "gpipe") || !strcmp(name, "1f1b")) {
    t = "(p-1)/m";
    x = (double)(p - 1) / m;
  } else if (!strcmp(name, "interleaved") || !strcmp(name, "interleaved-1f1b")) {
    t = "(p-1)/(v m)";
    x = (double)(p - 1) / ((double)v * m);
  } else if (is_name(name, "zb-h2", "zbh2")) {
    int equal = equal_costs(c);
    t = m >= 2 * p - 1 || equal
            ? "(p-1)max(tF,tF+tI-2tW)/(m(tF+tI+tW))"
            : "(p-1)max(tF,tF+tI-2tW)/(m(tF+tI+tW)), exact only for m >= 2p-1 or tF = tI = tW";
    x = (p - 1) * RP_MAX(c->tF, c->tF + tI - 2 * c->tW) / (m * (c->tF + c->tB));
  } else if (is_name(name, "zb-v", "zbv")) {
    /* the list's steady state is exact when m is a multiple of p; in between
     * the last m mod p micro-batches leave more (a lower bound there) */
    int equal = equal_costs(c);
    t = !equal       ? "(p-1)tF/(2m(tF+tB)), exact only for tF = tI = tW and p | m"
        : m % p != 0 ? "(p-1)tF/(2m(tF+tB)), a lower bound: exact only for p | m"
                     : "(p-1)tF/(2m(tF+tB))";
    x = (p - 1) * c->tF / (2.0 * m * (c->tF + c->tB));
  } else if (is_name(name, "dualpipev", "dualpipe-v")) {
    int equal = equal_costs(c);
    t = equal ? "(p-1)tF/(2m(tF+tB))" : "(p-1)tF/(2m(tF+tB)), exact only for tF = tI = tW";
    x = (p - 1) * c->tF / (2.0 * m * (c->tF + c->tB));
  } else if (is_name(name, "zb-v-min", NULL)) {
    x = vmin_bubble_passes(p, m, &t) / (6.0 * m);
    if (!equal_costs(c)) t = "(6p-1-3M)/(6m), M its memory; exact only for tF = tI = tW";
  } else if (is_name(name, "zb-v-half", NULL)) {
    t = equal_costs(c) ? "~(p-1)/(2m), +-4/(6m) for p <= 10" : "~(p-1)/(2m), for tF = tI = tW only";
    x = (p - 1) / (2.0 * m);
  } else if (!strcmp(name, "zb-h1") || !strcmp(name, "zbh1")) {
    t = c->tW <= tI ? "(p-1)(tF+tI-tW)/(m(tF+tI+tW))"
                    : "(p-1)(tF+tI-tW)/(m(tF+tI+tW)), exact only for tW <= tI";
    x = (p - 1) * (c->tF + tI - c->tW) / (m * (c->tF + tI + c->tW));
  }
  if (text) *text = t;
  return x;
}

/* Peak activation slots (chunk-activations held from F to B, or to W under a
 * split backward: rp_schedule_plan_slots' n_act) over the ranks, as a closed
 * form; -1 with *text "" when there is none. V-Half's greedy reaches its limit
 * p+2 on some rank for every p and m >= p (checked p = 2..16, m = p..64);
 * V-Min's block holds 2 floor((p+4)/3) (schedule_vblock.c says why). */
int rp_schedule_memory_formula(const char *name, int p, int v, int m, const char **text) {
  const char *t = "";
  int x = -1;
  if (is_name(name, "naive", NULL)) t = "1", x = 1;
  else if (is_name(name, "gpipe", NULL)) t = "m", x = m;
  else if (is_name(name, "1f1b", NULL)) t = "p (rank r: p-r)", x = RP_MIN(p, m);
  else if (is_name(name, "zb-h1", "zbh1")) t = "p (held until W)", x = RP_MIN(p, m);
  else if (is_name(name, "zb-h2", "zbh2")) t = "2p-1", x = RP_MIN(2 * p - 1, m);
  else if (is_name(name, "zb-v", "zbv")) t = "2p chunks (= p full, 1F1B's)", x = RP_MIN(2 * p, 2 * m);
  else if (is_name(name, "zb-v-half", NULL)) t = "p+2 chunks (its limit, reached)", x = p + 2;
  else if (is_name(name, "zb-v-min", NULL))
    t = "2 min(floor((p+4)/3), m) chunks (the paper's V-Min)", x = RP_MIN(2 * ((p + 4) / 3), 2 * m);
  else if (is_name(name, "dualpipev", "dualpipe-v")) t = "2p+1 chunks (DualPipe's PP+1)", x = 2 * p + 1;
  (void)v;
  if (text) *text = t;
  return x;
}
