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
 * The bubble. Along the tight path the four arms fall on residues r, -1-r,
 * 2p+r and -1-r+4p of rank r; those differ mod 6 unless 2p = 0 mod 6, so for
 * p not a multiple of 3 the path has no gap. Each rank then runs its 6m passes
 * back to back from its first input to its last W, and the step ends with rank
 * 0's last W, 4p-5 slots after the 6m it works: idle/ideal = (4p-5)/(6m) for
 * every m >= 1 (about 2p/(3m), the paper's V-Min bubble; 1F1B's is
 * (6p-6)/(6m)). When 3 divides p, F0 and I1 of a rank (and F1 and I0) share a
 * residue; the first fit pushes I1 back and the path grows to 4p-3. One slot
 * of slack on the down arm at rank p-2 (F0 there one slot late) re-phases the
 * rest of the path so the first fit fits it again: back to 4p-5 for p >= 6
 * (found by trying every single-slot delay on the path; none does better, and
 * the memory stays the same). At p = 3 that slack would give 5 slots for
 * m >= 3 but 6 and 7 at m = 2 and 1; the tight path's uniform 4p-5 = 7 is kept
 * there so that one closed form holds for every (p, m).
 *
 * Repeating the block for j = 0..m-1 and keeping each rank's passes in slot
 * order gives every rank's list; the slot times are a feasible timing of those
 * lists (every pass after its inputs), so the lists cannot deadlock, and the
 * executor (or the simulator) runs them as early as the data allows. Nothing
 * needs m >= p: the block is one micro-batch. With other costs the order stays
 * valid but was built for equal ones; the simulator shows what it costs. */
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

/* The 4p passes of the critical path, in order, by first fit; `late` is the
 * rank whose F0 gets one slot of slack (-1: none). */
static void place_path(vblock *B, int p, int late) {
  int t = 0;
  for (int r = 0; r < p; r++) t = (B->off[r * P_COUNT + P_F0] = take_slot(B, r, t + (r == late))) + 1;
  for (int r = p - 1; r >= 0; r--) t = (B->off[r * P_COUNT + P_F1] = take_slot(B, r, t)) + 1;
  for (int r = 0; r < p; r++) t = (B->off[r * P_COUNT + P_I1] = take_slot(B, r, t)) + 1;
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

/* Rank r's list: micro-batch j's pass x at slot 6j + off, in slot order. The
 * offsets are distinct mod 6, so every slot holds at most one pass. */
static rp_status emit_rank(rp_schedule *s, const vblock *B, int r, int *slot_pass) {
  const int *o = B->off + r * P_COUNT;
  int span = 0;
  for (int x = 0; x < P_COUNT; x++) span = RP_MAX(span, o[x]);
  int n = PERIOD * (s->m - 1) + span + 1;
  for (int t = 0; t < n; t++) slot_pass[t] = -1;
  for (int j = 0; j < s->m; j++)
    for (int x = 0; x < P_COUNT; x++) slot_pass[PERIOD * j + o[x]] = j * P_COUNT + x;
  for (int t = 0; t < n; t++) {
    if (slot_pass[t] < 0) continue;
    rp_action a = pass_action[slot_pass[t] % P_COUNT];
    a.mb = slot_pass[t] / P_COUNT;
    RP_TRY(rp_schedule_push(s, r, a));
  }
  return RP_OK;
}

rp_status rp_gen_vmin_block(rp_schedule *s) {
  int p = s->p, *slot_pass = NULL;
  vblock B = {malloc((size_t)p * P_COUNT * sizeof(int)), calloc((size_t)p, 1)};
  rp_status st = RP_OK;
  if (!B.off || !B.used) st = rp_err(RP_ENOMEM, "out of memory generating %s", s->name);
  if (st == RP_OK) {
    place_path(&B, p, p % 3 == 0 && p >= 6 ? p - 2 : -1);
    int span = 0;
    for (int r = 0; r < p; r++) place_w(&B, r);
    for (int k = 0; k < p * P_COUNT; k++) span = RP_MAX(span, B.off[k]);
    /* a rank's passes lie in slots 0 .. 6(m-1) + span */
    slot_pass = malloc(((size_t)PERIOD * (size_t)(s->m - 1) + (size_t)span + 1) * sizeof(int));
    if (!slot_pass) st = rp_err(RP_ENOMEM, "out of memory generating %s", s->name);
    for (int r = 0; r < p && st == RP_OK; r++) st = emit_rank(s, &B, r, slot_pass);
  }
  free(B.off);
  free(B.used);
  free(slot_pass);
  return st;
}
