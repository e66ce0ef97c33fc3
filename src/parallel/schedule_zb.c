/* Zero-bubble list schedules: ZB-H2 (one chunk per rank) and ZB-V with its
 * V-Half memory setup (two chunks per rank in a V). V-Min is a repeated
 * building block instead (schedule_vblock.c): this greedy stalls under its
 * memory.
 *
 * The zero-bubble paper (Qi et al. 2024) builds these by hand for equal F, I
 * and W times, and its automatic scheduler by a greedy list schedule under a
 * memory limit. This is that greedy schedule: the ranks are run in unit time
 * steps (a chunk's F, I and W each take one step, messages none) and a free
 * rank takes, in this order,
 *   1. an I whose output gradient has arrived (it is on the critical path and
 *      starts freeing memory): the oldest micro-batch, chunk 0 on a tie;
 *   2. an F whose input has arrived, if fewer than `limit` of its
 *      chunk-activations are held (an activation is held from F until W, as
 *      the buffer planner holds it): the deeper chunk first, so that the V's
 *      return arm starts its backwards early. On the V a chunk-0 forward also
 *      books the slot its chunk-1 forward will take when the micro-batch comes
 *      back up: with every slot held by down-arm activations whose return
 *      cannot be taken, the V would stall for good;
 *   3. the oldest deferred W;
 * else it idles for a step. ZB-V also puts a deferred W before a new chunk-0
 * forward once half its limit is held (`w_first`): otherwise the down arm runs
 * ahead and the W pile up at the end (at p = 6 that doubles its bubble), but
 * when m is not a multiple of p the rule can cost more than it saves, so ZB-V
 * generates both lists and keeps the shorter (rp_gen_zbv);
 * V-Half, whose limit leaves no room to spare, is better without. The order
 * each rank ran things in is its list. The limit is what tells the schedules
 * apart: ZB-H2 2p-1 (its (2p-1) M_B), ZB-V 2p chunks (1F1B's p full
 * activations), V-Half p+2 (half of that plus one micro-batch).
 * If every rank is free and none can take anything before all is done, the
 * limit is too small for the pipeline: RP_EINVAL says so (never a hang). */
#include <stdlib.h>
#include <string.h>

#include "schedule_gen.h"

typedef struct {
  const rp_schedule *s;
  int S, limit, w_first; /* w_first: held count from which W goes before a chunk-0 F; 0 never */
  int *f_end, *i_end;     /* per (stage, mb): step at which F / I ends, -1 not yet */
  int *busy_until, *live; /* per rank */
  int *booked;            /* per rank: chunk-0 forwards whose chunk 1 has not run (V) */
  int *next_f, *next_i;   /* per (rank, chunk): next micro-batch, in order */
  int *wq, *wq_head, *wq_n; /* per rank: FIFO of deferred W keys (chunk * m + mb) */
} zb_state;

static int done_by(const int *end, int k, int t) { return end[k] >= 0 && end[k] <= t; }

/* Is chunk c's next I on rank r ready at step t? */
static int i_ready(const zb_state *Z, int r, int c, int t) {
  const rp_schedule *s = Z->s;
  int mb = Z->next_i[r * s->v + c];
  if (mb >= s->m) return 0;
  int st = rp_schedule_stage(s, r, c);
  if (!done_by(Z->f_end, st * s->m + mb, t)) return 0;
  return st + 1 >= Z->S || done_by(Z->i_end, (st + 1) * s->m + mb, t);
}

static int f_ready(const zb_state *Z, int r, int c, int t) {
  const rp_schedule *s = Z->s;
  int mb = Z->next_f[r * s->v + c];
  if (mb >= s->m) return 0;
  int st = rp_schedule_stage(s, r, c);
  return st == 0 || done_by(Z->f_end, (st - 1) * s->m + mb, t);
}

/* Picks rank r's action at step t by the priorities above; 0 if it idles. */
static int pick(const zb_state *Z, int r, int t, rp_action *a) {
  const rp_schedule *s = Z->s;
  int best = -1;
  for (int c = 0; c < s->v; c++)
    if (i_ready(Z, r, c, t) &&
        (best < 0 || Z->next_i[r * s->v + c] < Z->next_i[r * s->v + best]))
      best = c;
  if (best >= 0) {
    *a = (rp_action){RP_OP_I, best, Z->next_i[r * s->v + best]};
    return 1;
  }
  for (int c = s->v - 1; c >= 0; c--) {
    if (c == 0 && Z->w_first && Z->live[r] >= Z->w_first && Z->wq_n[r] > Z->wq_head[r]) break;
    int fits = s->map != RP_MAP_V ? Z->live[r] < Z->limit
             : c == 1 ? 1 /* its slot was booked by its chunk-0 forward */
                      : Z->live[r] + Z->booked[r] + 2 <= Z->limit;
    if (fits && f_ready(Z, r, c, t)) {
      *a = (rp_action){RP_OP_F, c, Z->next_f[r * s->v + c]};
      return 1;
    }
  }
  if (Z->wq_n[r] > Z->wq_head[r]) {
    int key = Z->wq[r * s->v * s->m + Z->wq_head[r]];
    *a = (rp_action){RP_OP_W, key / s->m, key % s->m};
    return 1;
  }
  return 0;
}

/* Books action a of rank r starting at step t. */
static void take(zb_state *Z, int r, int t, rp_action a) {
  const rp_schedule *s = Z->s;
  int st = rp_schedule_stage(s, r, a.chunk), k = st * s->m + a.mb;
  Z->busy_until[r] = t + 1;
  if (a.op == RP_OP_F) {
    Z->f_end[k] = t + 1;
    Z->next_f[r * s->v + a.chunk]++;
    Z->live[r]++;
    if (s->map == RP_MAP_V) Z->booked[r] += a.chunk == 0 ? 1 : -1;
  } else if (a.op == RP_OP_I) {
    Z->i_end[k] = t + 1;
    Z->next_i[r * s->v + a.chunk]++;
    Z->wq[r * s->v * s->m + Z->wq_n[r]++] = a.chunk * s->m + a.mb;
  } else {
    Z->wq_head[r]++;
    Z->live[r]--;
  }
}

/* Runs the list to the end; *steps: the unit steps it took (its makespan). */
static rp_status run_list(zb_state *Z, rp_schedule *s, int *steps) {
  int left = 3 * s->p * s->v * s->m, t = 0;
  for (; left > 0; t++) {
    int any_busy = 0, took = 0;
    for (int r = 0; r < s->p; r++) {
      rp_action a;
      if (Z->busy_until[r] > t) {
        any_busy = 1;
        continue;
      }
      if (!pick(Z, r, t, &a)) continue;
      take(Z, r, t, a);
      RP_TRY(rp_schedule_push(s, r, a));
      took = 1;
      left--;
    }
    if (!any_busy && !took)
      return rp_err(RP_EINVAL,
                    "%s: a limit of %d chunk-activations per rank is too small for p=%d "
                    "m=%d (every rank waits for memory); use a schedule with a larger limit "
                    "(zb-v-half, zb-v) or zb-v-min (a building block, not this list)", s->name, Z->limit, s->p, s->m);
  }
  /* the last action started at step t-1 and ends at t, unless a rank was
   * still busy past the step that took the last one */
  int end = t;
  for (int r = 0; r < s->p; r++) end = RP_MAX(end, Z->busy_until[r]);
  *steps = end;
  return RP_OK;
}

static rp_status zb_list_steps(rp_schedule *s, int limit, int w_first, int *steps) {
  int p = s->p, v = s->v, m = s->m, S = p * v;
  size_t cells = (size_t)S * m, pv = (size_t)p * v;
  zb_state Z = {.s = s, .S = S, .limit = limit, .w_first = w_first};
  Z.f_end = malloc(cells * sizeof(int));
  Z.i_end = malloc(cells * sizeof(int));
  Z.busy_until = calloc((size_t)p, sizeof(int));
  Z.live = calloc((size_t)p, sizeof(int));
  Z.booked = calloc((size_t)p, sizeof(int));
  Z.next_f = calloc(pv, sizeof(int));
  Z.next_i = calloc(pv, sizeof(int));
  Z.wq = malloc(cells * sizeof(int));
  Z.wq_head = calloc((size_t)p, sizeof(int));
  Z.wq_n = calloc((size_t)p, sizeof(int));
  rp_status st = RP_OK;
  if (!Z.f_end || !Z.i_end || !Z.busy_until || !Z.live || !Z.booked || !Z.next_f || !Z.next_i || !Z.wq ||
      !Z.wq_head || !Z.wq_n)
    st = rp_err(RP_ENOMEM, "out of memory generating %s", s->name);
  if (st == RP_OK) {
    for (size_t k = 0; k < cells; k++) Z.f_end[k] = Z.i_end[k] = -1;
    st = run_list(&Z, s, steps);
  }
  free(Z.f_end), free(Z.i_end), free(Z.busy_until), free(Z.live), free(Z.booked);
  free(Z.next_f), free(Z.next_i), free(Z.wq), free(Z.wq_head), free(Z.wq_n);
  return st;
}

rp_status rp_gen_zb_list(rp_schedule *s, int limit, int w_first) {
  int steps;
  return zb_list_steps(s, limit, w_first, &steps);
}

/* ZB-V's W rule pays when m is a multiple of p (the steady state is then
 * exact: (p-1)tF/2 idle per rank) but not in between: at p = 6, m = 8 the two
 * micro-batches past 6 wait behind the W it put first (31.5 steps against
 * 29.5 without the rule; p = 8, m = 9: 41.5 against 34.5). Generating both
 * lists costs two unit-step runs, so ZB-V keeps the shorter one (the rule's on
 * a tie, which keeps m = kp as before). */
rp_status rp_gen_zbv(rp_schedule *s, int limit) {
  int with_rule, without;
  RP_TRY(zb_list_steps(s, limit, s->p, &with_rule));
  rp_schedule *alt;
  RP_TRY(rp_schedule_new(s->p, s->v, s->m, s->name, &alt));
  alt->map = s->map;
  rp_status st = zb_list_steps(alt, limit, 0, &without);
  if (st == RP_OK && without < with_rule) rp_schedule_swap_lists(s, alt);
  rp_schedule_free(alt);
  return st;
}
