/* V-Min as a repeated building block (after Qi, Wan, Amar, Lin, "Pipeline
 * Parallelism with Controllable Memory", NeurIPS 2024: a schedule is one
 * micro-batch's passes, the building block, repeated at a fixed interval;
 * the block's lifespans set the peak memory).
 *
 * The model. Time is counted in slots of one chunk pass (tF = tI = tW, so a
 * chunk's F, I and W each take one slot; messages none). On the V, rank r holds
 * stage r (chunk 0) and stage 2p-1-r (chunk 1); one micro-batch is 6 passes per
 * rank: F0 F1 I1 I0 W1 W0. Its critical path walks the V twice:
 *   F0 on ranks 0..p-1, F1 on p-1..0 (the turn at rank p-1 stays local),
 *   I1 on ranks 0..p-1 (the loss is on rank 0), I0 on p-1..0,
 * 4p passes, each needing the one before it; W1 / W0 need only their own I.
 *
 * The block is a modulo schedule with initiation interval 6 (software
 * pipelining's word): micro-batch j runs pass x on rank r at slot
 * 6j + off[r][x]. Every rank then does its 6 passes once per 6 slots, which is
 * zero bubble in the steady state, if and only if the six offsets of a rank
 * are distinct mod 6 (no two micro-batches want one slot). The offsets are
 * chosen by a first fit along the critical path: each pass at the earliest
 * slot after its predecessor whose residue mod 6 is still free on its rank;
 * then W1 and W0 on the two residues left, in the order (W1 first or W0
 * first) that gives the shorter total lifespan.
 *
 * Why this is V-Min. A chunk-activation is held from its F to its W, so rank
 * r holds about lifespan/6 activations of each chunk. The tight V gives
 * chunk 0 on rank r a lifespan of about 4p - 2r slots (F0 at r, I0 at
 * 4p-1-r) and chunk 1 about 2r + 2 (F1 at 2p-1-r, I1 at 2p+r): about 4p in
 * all on every rank, the V balancing the ranks, so each holds about
 * 4p/6 = 2p/3 chunks, a third of 1F1B's 2p. Counted exactly (the simulator's
 * buffer plan), the peak is 2 floor((p+4)/3) chunks for every p from 2 to 16
 * (the paper's V-Min memory, (p+4)/3 micro-batches), and min(2m, that) for
 * m < floor((p+4)/3).
 *
 * The plain block's bubble. Along the tight path the four arms fall on
 * residues r, -1-r, 2p+r and -1-r+4p of rank r; those differ mod 6 unless
 * 2p = 0 mod 6, so for p not a multiple of 3 the path has no gap. Each rank
 * then runs its 6m passes back to back from its first input to its last W,
 * and the step ends with rank 0's last W, 4p-5 slots after the 6m it works.
 * When 3 divides p, F0 and I1 of a rank (and F1 and I0) share a residue and
 * the first fit stretches the path to 4p-3.
 *
 * Using the memory the block leaves idle. The peak, M = 2 floor((p+4)/3), is
 * reached in the steady state, but in the warm-up a rank idles while it holds
 * less: before its first I0 no W0 can free anything, and the block's order has
 * it wait for its next slot. The controllable-memory paper re-lays that
 * warm-up (its repository's schedule builder does, and its bound on the
 * bubble, 6p - 1 - 3M slots, charges 3 slots per chunk of memory); ringpipe
 * does the same with the passes of rank r before its first I0, kept in their
 * order within each kind, written as
 *   up to 2(p-1-r) F0            (the down arm still has to reach the turn)
 *   r+1 times F0 F1              (the turn and the way back to rank r)
 *   I1 W F1-or-F0, repeated      (the first backwards, one forward each)
 * with at most min(r+1, M/2, m) F1 and M minus that F0 in the first two
 * phases, so the re-laid prefix never holds more than M. It pays off only
 * where the block's residues leave room: a little slack on the path, put
 * where the re-laid warm-up can use it, brings the step to the paper's
 * 6p - 1 - 3M exactly:
 *   p = 1 mod 3: no slack, 4p-5 (= 6p-1-3M: no memory to spare);
 *   p = 0 mod 3: F0 on rank p-2 one slot late, 4p-7;
 *   p = 2 mod 3: I1 on rank p-2 two slots late, 4p-9 (the rounding of M
 *                leaves the most room here).
 * (The slack was found by trying every single delay of 1 to 3 slots on the
 * path with the re-laid warm-up at p = 5, 6, 8, 9, 11, 12 under M: these
 * reach the bound and nothing does better; the rule holds for every p tried,
 * 3 to 24.) With m = 1 there is no warm-up to re-lay (4p-5); with m = 2 and
 * p = 2 mod 3 the re-laid warm-up is one micro-batch short (4p-7); p = 2 has
 * no room (3 = 4p-5). In idle/ideal the bubble is (6p-1-3M)/(6m), about
 * 2p/(3m) - 1/(2m): the paper's V-Min bubble (1F1B's is (6p-6)/(6m)). The
 * re-laid warm-up is checked when it is built (it must validate and stay
 * within M; the plain block is kept otherwise, which no (p, m) tried needs).
 *
 * Repeating the block for j = 0..m-1 and keeping each rank's passes in slot
 * order gives every rank's list; the slot times are a feasible timing of those
 * lists (every pass after its inputs), so the plain lists cannot deadlock, and
 * the executor (or the simulator) runs them as early as the data allows.
 * Nothing needs m >= p: the block is one micro-batch. With other costs the
 * order stays valid but was built for equal ones; the simulator shows what it
 * costs. */
#include <stdlib.h>

#include "schedule_gen.h"

enum { P_F0, P_F1, P_I1, P_I0, P_W1, P_W0, P_COUNT };
enum { PERIOD = 6 }; /* slots per micro-batch per rank: the six passes */

static const rp_action pass_action[P_COUNT] = {
    {RP_OP_F, 0, 0}, {RP_OP_F, 1, 0}, {RP_OP_I, 1, 0},
    {RP_OP_I, 0, 0}, {RP_OP_W, 1, 0}, {RP_OP_W, 0, 0}};

typedef struct {
  int *off;            /* off[r * P_COUNT + pass]: slot of the pass in the block */
  unsigned char *used; /* used[r]: bit k set when residue k is taken on rank r */
} vblock;

/* Earliest slot >= t whose residue is free on rank r; takes it. */
static int take_slot(vblock *B, int r, int t) {
  while (B->used[r] & (1u << (t % PERIOD))) t++;
  B->used[r] |= (unsigned char)(1u << (t % PERIOD));
  return t;
}

/* The 4p passes of the critical path, in order, by first fit, with `f0_late`
 * the rank whose F0 waits one slot more and `i1_late` the rank whose I1 waits
 * two more (-1: none; see the slack rule above). */
static void place_path(vblock *B, int p, int f0_late, int i1_late) {
  int t = 0;
  for (int r = 0; r < p; r++) t = (B->off[r * P_COUNT + P_F0] = take_slot(B, r, t + (r == f0_late))) + 1;
  for (int r = p - 1; r >= 0; r--) t = (B->off[r * P_COUNT + P_F1] = take_slot(B, r, t)) + 1;
  for (int r = 0; r < p; r++) t = (B->off[r * P_COUNT + P_I1] = take_slot(B, r, t + 2 * (r == i1_late))) + 1;
  for (int r = p - 1; r >= 0; r--) t = (B->off[r * P_COUNT + P_I0] = take_slot(B, r, t)) + 1;
}

/* First free residue at or after slot t, given the mask (not taken). */
static int first_free(unsigned mask, int t) {
  while (mask & (1u << (t % PERIOD))) t++;
  return t;
}

/* W1 and W0 of rank r on its two free residues: both orders are tried, the
 * one with the shorter total lifespan (F to W of each chunk) wins, W1 first on
 * a tie. */
static void place_w(vblock *B, int r) {
  int *o = B->off + r * P_COUNT;
  unsigned mask = B->used[r];
  int w1a = first_free(mask, o[P_I1] + 1);
  int w0a = first_free(mask | 1u << (w1a % PERIOD), o[P_I0] + 1);
  int w0b = first_free(mask, o[P_I0] + 1);
  int w1b = first_free(mask | 1u << (w0b % PERIOD), o[P_I1] + 1);
  int w1_first = w1a + w0a <= w1b + w0b;
  o[P_W1] = w1_first ? w1a : w1b;
  o[P_W0] = w1_first ? w0a : w0b;
  B->used[r] |= (unsigned char)(1u << (o[P_W1] % PERIOD) | 1u << (o[P_W0] % PERIOD));
}

/* Rank r's block list: micro-batch j's pass x at slot 6j + off, in slot
 * order, into acts (6m entries). The offsets are distinct mod 6, so every slot
 * holds at most one pass. */
static void block_list(const vblock *B, int r, int m, int *slot_pass, rp_action *acts) {
  const int *o = B->off + r * P_COUNT;
  int span = 0, k = 0;
  for (int x = 0; x < P_COUNT; x++) span = RP_MAX(span, o[x]);
  int n = PERIOD * (m - 1) + span + 1;
  for (int t = 0; t < n; t++) slot_pass[t] = -1;
  for (int j = 0; j < m; j++)
    for (int x = 0; x < P_COUNT; x++) slot_pass[PERIOD * j + o[x]] = j * P_COUNT + x;
  for (int t = 0; t < n; t++)
    if (slot_pass[t] >= 0) {
      acts[k] = pass_action[slot_pass[t] % P_COUNT];
      acts[k++].mb = slot_pass[t] / P_COUNT;
    }
}

/* Chunk-activations held at once (F to W) in a list: its buffer-plan peak. */
static int list_peak(const rp_action *a, int n) {
  int live = 0, peak = 0;
  for (int i = 0; i < n; i++) {
    live += a[i].op == RP_OP_F ? 1 : a[i].op == RP_OP_W ? -1 : 0;
    peak = RP_MAX(peak, live);
  }
  return peak;
}

/* The passes of a warm-up prefix by kind (F0, F1, I1, W: nothing else comes
 * before a rank's first I0), each taken in its original order. */
enum { Q_F0, Q_F1, Q_I1, Q_W, Q_COUNT };
typedef struct {
  const rp_action *a;
  int n, at[Q_COUNT];
} prefix_queue;

static int kind_of_pass(rp_action a) {
  return a.op == RP_OP_W ? Q_W : a.op == RP_OP_I ? Q_I1 : a.chunk == 0 ? Q_F0 : Q_F1;
}

/* Appends the next pass of `kind` to out[*w]; 0 when none is left. */
static int take_next(prefix_queue *q, int kind, rp_action *out, int *w) {
  while (q->at[kind] < q->n && kind_of_pass(q->a[q->at[kind]]) != kind) q->at[kind]++;
  if (q->at[kind] >= q->n) return 0;
  out[(*w)++] = q->a[q->at[kind]++];
  return 1;
}

/* Re-lays rank r's warm-up (its passes before its first I0) as the header
 * says, using tmp (6m entries) for the old order. */
static void relay_warmup(rp_action *a, int n, int r, int p, int m, int peak, rp_action *tmp) {
  int k = 0, w = 0, uf = 0, uff = 0;
  while (k < n && !(a[k].op == RP_OP_I && a[k].chunk == 0)) k++;
  for (int i = 0; i < k; i++) tmp[i] = a[i];
  prefix_queue q = {tmp, k, {0}};
  int cff = RP_MIN(RP_MIN(r + 1, peak / 2), m), cf = RP_MIN(peak - cff, m);
  for (int i = 0; i < 2 * (p - 1 - r); i++)
    if (uf < cf && take_next(&q, Q_F0, a, &w)) uf++;
  for (int i = 0; i <= r; i++) {
    if (uf < cf && take_next(&q, Q_F0, a, &w)) uf++;
    if (uff < cff && take_next(&q, Q_F1, a, &w)) uff++;
  }
  while (w < k) {
    take_next(&q, Q_I1, a, &w);
    take_next(&q, Q_W, a, &w);
    if (!take_next(&q, Q_F1, a, &w)) take_next(&q, Q_F0, a, &w);
  }
}

/* Fills s with the repeated block, its warm-ups re-laid when `relay`; *peak
 * gets the block's own peak (before re-laying). */
static rp_status fill_lists(rp_schedule *s, const vblock *B, int relay, int *slot_pass,
                            rp_action *acts, rp_action *tmp, int *peak) {
  int p = s->p, n = P_COUNT * s->m;
  *peak = 0;
  for (int r = 0; r < p; r++) {
    block_list(B, r, s->m, slot_pass, acts);
    *peak = RP_MAX(*peak, list_peak(acts, n));
  }
  for (int r = 0; r < p; r++) {
    s->n[r] = 0;
    block_list(B, r, s->m, slot_pass, acts);
    if (relay) relay_warmup(acts, n, r, p, s->m, *peak, tmp);
    for (int i = 0; i < n; i++) RP_TRY(rp_schedule_push(s, r, acts[i]));
  }
  return RP_OK;
}

/* The re-laid warm-up is checked, not assumed: it must validate and keep the
 * block's peak, else the plain block (valid by construction) is kept. */
static rp_status build(rp_schedule *s, const vblock *B, int *slot_pass, rp_action *acts,
                       rp_action *tmp) {
  int peak, ok = 1;
  RP_TRY(fill_lists(s, B, 1, slot_pass, acts, tmp, &peak));
  for (int r = 0; r < s->p && ok; r++) ok = list_peak(s->acts[r], s->n[r]) <= peak;
  if (ok && rp_schedule_validate(s, NULL) == RP_OK) return RP_OK;
  rp_errclear();
  return fill_lists(s, B, 0, slot_pass, acts, tmp, &peak);
}

rp_status rp_gen_vmin_block(rp_schedule *s) {
  int p = s->p, *slot_pass = NULL;
  size_t n = (size_t)P_COUNT * (size_t)s->m;
  vblock B = {malloc((size_t)p * P_COUNT * sizeof(int)), calloc((size_t)p, 1)};
  rp_action *acts = malloc(n * sizeof *acts), *tmp = malloc(n * sizeof *tmp);
  rp_status st = RP_OK;
  if (!B.off || !B.used || !acts || !tmp) st = rp_err(RP_ENOMEM, "out of memory generating %s", s->name);
  if (st == RP_OK) {
    place_path(&B, p, p % 3 == 0 ? p - 2 : -1, p % 3 == 2 && p >= 5 ? p - 2 : -1);
    int span = 0;
    for (int r = 0; r < p; r++) place_w(&B, r);
    for (int k = 0; k < p * P_COUNT; k++) span = RP_MAX(span, B.off[k]);
    /* a rank's passes lie in slots 0 .. 6(m-1) + span */
    slot_pass = malloc(((size_t)PERIOD * (size_t)(s->m - 1) + (size_t)span + 1) * sizeof(int));
    if (!slot_pass) st = rp_err(RP_ENOMEM, "out of memory generating %s", s->name);
    if (st == RP_OK) st = build(s, &B, slot_pass, acts, tmp);
  }
  free(B.off);
  free(B.used);
  free(slot_pass);
  free(acts);
  free(tmp);
  return st;
}
