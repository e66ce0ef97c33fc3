/* Lowering: compute-only action lists -> lists with SEND/RECV, plus the
 * peer/tag rules that an executor and the validator share.
 *
 * Stage mapping: rank r's chunk c is global stage rp_schedule_stage (c*p + r,
 * or the V's r and 2p-1-r) of S = v*p.
 * F of stage s reads stage s-1's activation and feeds stage s+1; B/I of stage s
 * reads stage s+1's input gradient and feeds stage s-1. A message is named by
 * (direction, receiving stage, micro-batch), which is also its MPI tag. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "ringpipe/rp_schedule.h"

enum { DIR_F = 0, DIR_B = 1 };

static int msg_key(const rp_schedule *s, int dir, int recv_stage, int mb) {
  return (dir * s->v * s->p + recv_stage) * s->m + mb;
}

static int rank_of(const rp_schedule *s, int stage) {
  int r, c;
  rp_schedule_owner(s, stage, &r, &c);
  return r;
}

static int chunk_of(const rp_schedule *s, int stage) {
  int r, c;
  rp_schedule_owner(s, stage, &r, &c);
  return c;
}

int rp_schedule_peer(const rp_schedule *s, int rank, rp_action a) {
  int st = rp_schedule_stage(s, rank, a.chunk), S = s->v * s->p;
  switch (a.op) {
    case RP_OP_SEND_F: return st + 1 < S ? rank_of(s, st + 1) : -1;
    case RP_OP_RECV_F: return st > 0 ? rank_of(s, st - 1) : -1;
    case RP_OP_SEND_B: return st > 0 ? rank_of(s, st - 1) : -1;
    case RP_OP_RECV_B: return st + 1 < S ? rank_of(s, st + 1) : -1;
    default: return -1;
  }
}

int rp_schedule_tag(const rp_schedule *s, int rank, rp_action a) {
  int st = rp_schedule_stage(s, rank, a.chunk);
  switch (a.op) {
    case RP_OP_SEND_F: return msg_key(s, DIR_F, st + 1, a.mb);
    case RP_OP_RECV_F: return msg_key(s, DIR_F, st, a.mb);
    case RP_OP_SEND_B: return msg_key(s, DIR_B, st - 1, a.mb);
    case RP_OP_RECV_B: return msg_key(s, DIR_B, st, a.mb);
    default: return -1;
  }
}

/* One rank's inbox: messages sent to it, in send order, with their round. */
typedef struct {
  int *key, *round, *op, *chunk, *mb;
  int head, n, cap;
} inbox;

static int inbox_push(inbox *q, int key, int round, rp_action recv) {
  if (q->n == q->cap) {
    int cap = q->cap ? 2 * q->cap : 16;
    int **fields[5] = {&q->key, &q->round, &q->op, &q->chunk, &q->mb};
    for (int f = 0; f < 5; f++) {
      int *grown = realloc(*fields[f], (size_t)cap * sizeof(int));
      if (!grown) return 0;
      *fields[f] = grown;
    }
    q->cap = cap;
  }
  q->key[q->n] = key;
  q->round[q->n] = round;
  q->op[q->n] = recv.op;
  q->chunk[q->n] = recv.chunk;
  q->mb[q->n] = recv.mb;
  q->n++;
  return 1;
}

typedef struct {
  const rp_schedule *in;
  rp_schedule *out;
  int S;
  unsigned char *fdone, *bdone, *idone; /* per (stage, mb): F, B-or-I, I done */
  unsigned char *posted;                /* per message key: RECV emitted */
  inbox *box;                           /* per rank */
} lower_state;

/* Is compute `a` of rank r ready in this round? If not, *what names the input it
 * waits for (for the deadlock message). */
static int ready(lower_state *L, int r, rp_action a, char *what, size_t n) {
  const rp_schedule *s = L->in;
  int st = rp_schedule_stage(s, r, a.chunk), m = s->m;
  int src = -1, dir = DIR_F;
  if (a.op == RP_OP_F && st > 0) src = st - 1;
  if (a.op == RP_OP_B || a.op == RP_OP_I) {
    if (!L->fdone[st * m + a.mb]) {
      snprintf(what, n, "its own %dF%d", a.chunk, a.mb);
      return 0;
    }
    if (st + 1 < L->S) src = st + 1, dir = DIR_B;
  }
  if (a.op == RP_OP_W && !L->idone[st * m + a.mb]) {
    snprintf(what, n, "its own %dI%d", a.chunk, a.mb);
    return 0;
  }
  if (src < 0) return 1;
  int src_rank = rank_of(s, src), src_chunk = chunk_of(s, src);
  const char *src_op = dir == DIR_F ? "F" : "B";
  for (int i = 0; dir == DIR_B && i < s->n[src_rank]; i++) {
    rp_action b = s->acts[src_rank][i];
    if (b.op == RP_OP_I && b.chunk == src_chunk && b.mb == a.mb) src_op = "I";
  }
  if (src_rank == r) {
    int ok = dir == DIR_F ? L->fdone[src * m + a.mb] : L->bdone[src * m + a.mb];
    if (!ok) snprintf(what, n, "its own %d%s%d", src_chunk, src_op, a.mb);
    return ok;
  }
  if (L->posted[msg_key(s, dir, st, a.mb)]) return 1;
  snprintf(what, n, "rank %d's %d%s%d", src_rank, src_chunk, src_op, a.mb);
  return 0;
}

/* Emits compute `a` of rank r and the SENDs for its cross-rank outputs. */
static rp_status emit(lower_state *L, int r, rp_action a, int round) {
  const rp_schedule *s = L->in;
  int st = rp_schedule_stage(s, r, a.chunk), m = s->m;
  RP_TRY(rp_schedule_push(L->out, r, a));
  int dst = -1, dir = DIR_F;
  if (a.op == RP_OP_F) {
    L->fdone[st * m + a.mb] = 1;
    if (st + 1 < L->S) dst = st + 1;
  } else if (a.op == RP_OP_B || a.op == RP_OP_I) {
    L->bdone[st * m + a.mb] = 1;
    if (a.op == RP_OP_I) L->idone[st * m + a.mb] = 1;
    if (st > 0) dst = st - 1, dir = DIR_B;
  }
  if (dst < 0 || rank_of(s, dst) == r) return RP_OK;
  RP_TRY(rp_schedule_push(L->out, r,
                          (rp_action){dir == DIR_F ? RP_OP_SEND_F : RP_OP_SEND_B, a.chunk, a.mb}));
  rp_action recv = {dir == DIR_F ? RP_OP_RECV_F : RP_OP_RECV_B, chunk_of(s, dst), a.mb};
  if (!inbox_push(&L->box[rank_of(s, dst)], msg_key(s, dir, dst, a.mb), round, recv))
    return rp_err(RP_ENOMEM, "out of memory while lowering");
  return RP_OK;
}

static rp_status deadlock_error(lower_state *L, const int *pc, rp_sched_pos *where) {
  const rp_schedule *s = L->in;
  char msg[900];
  size_t len = (size_t)snprintf(msg, sizeof msg, "%s schedule deadlocks:",
                                s->name[0] ? s->name : "the");
  int shown = 0;
  for (int r = 0; r < s->p && len < sizeof msg; r++) {
    if (pc[r] >= s->n[r]) continue;
    char act[32], what[64];
    rp_action a = s->acts[r][pc[r]];
    rp_action_str(a, act, sizeof act);
    ready(L, r, a, what, sizeof what);
    if (!shown && where) *where = (rp_sched_pos){r, pc[r]};
    if (shown++ < 4)
      len += (size_t)snprintf(msg + len, sizeof msg - len, "%s rank %d waits at action %d (%s) for %s",
                              shown > 1 ? ";" : "", r, pc[r], act, what);
  }
  return rp_err(RP_EINVAL, "%s; reorder the compute lists so that every input is produced "
                "before it is needed", msg);
}

rp_status rp_schedule_lower(const rp_schedule *in, rp_schedule **out, rp_sched_pos *where) {
  *out = NULL;
  if (in->lowered)
    return rp_err(RP_EINVAL, "schedule %s already has SEND/RECV; lower compute-only lists",
                  in->name);
  RP_TRY(rp_schedule_check_size(in->p, in->v, in->m));  /* its tables are per cell */
  /* Lowering trusts the dependencies to the deadlock check below but indexes
   * by chunk and micro-batch, so those must be in range. */
  for (int r = 0; r < in->p; r++)
    for (int i = 0; i < in->n[r]; i++) {
      rp_action a = in->acts[r][i];
      if (!rp_op_is_compute(a.op) || a.chunk < 0 || a.chunk >= in->v || a.mb < 0 ||
          a.mb >= in->m) {
        char txt[48];
        rp_action_str(a, txt, sizeof txt);
        if (where) *where = (rp_sched_pos){r, i};
        return rp_err(RP_EINVAL,
                      "rank %d action %d (%s) is not a compute with chunk < %d and micro-batch "
                      "< %d; run rp_schedule_validate for details",
                      r, i, txt, in->v, in->m);
      }
    }
  lower_state L = {in, NULL, in->v * in->p, NULL, NULL, NULL, NULL, NULL};
  size_t cells = (size_t)L.S * in->m;
  int *pc = calloc((size_t)in->p, sizeof *pc);
  L.fdone = calloc(cells, 1);
  L.bdone = calloc(cells, 1);
  L.idone = calloc(cells, 1);
  L.posted = calloc(2 * cells, 1);
  L.box = calloc((size_t)in->p, sizeof *L.box);
  rp_status st = RP_OK;
  if (!pc || !L.fdone || !L.bdone || !L.idone || !L.posted || !L.box)
    st = rp_err(RP_ENOMEM, "out of memory while lowering");
  if (st == RP_OK) st = rp_schedule_new(in->p, in->v, in->m, in->name, &L.out);
  if (st == RP_OK) L.out->map = in->map;

  /* Lockstep rounds: in round t each rank first posts the RECVs of messages sent
   * in rounds < t, then runs its next compute if that compute's inputs exist. */
  for (int round = 0; st == RP_OK; round++) {
    int left = 0, moved = 0;
    for (int r = 0; r < in->p && st == RP_OK; r++) {
      inbox *q = &L.box[r];
      while (q->head < q->n && q->round[q->head] < round && st == RP_OK) {
        int h = q->head++;
        L.posted[q->key[h]] = 1;
        moved = 1;
        st = rp_schedule_push(L.out, r, (rp_action){q->op[h], q->chunk[h], q->mb[h]});
      }
      if (st != RP_OK || pc[r] >= in->n[r]) continue;
      char what[64];
      rp_action a = in->acts[r][pc[r]];
      if (ready(&L, r, a, what, sizeof what)) {
        st = emit(&L, r, a, round);
        pc[r]++;
        moved = 1;
      }
    }
    for (int r = 0; r < in->p; r++) left += in->n[r] - pc[r] + (L.box[r].n - L.box[r].head);
    if (st != RP_OK || left == 0) break;
    if (!moved) st = deadlock_error(&L, pc, where);
  }

  if (st == RP_OK) {
    *out = L.out;
    L.out = NULL;
  }
  rp_schedule_free(L.out);
  for (int r = 0; L.box && r < in->p; r++) {
    free(L.box[r].key);
    free(L.box[r].round);
    free(L.box[r].op);
    free(L.box[r].chunk);
    free(L.box[r].mb);
  }
  free(L.box);
  free(L.fdone);
  free(L.bdone);
  free(L.idone);
  free(L.posted);
  free(pc);
  return st;
}
