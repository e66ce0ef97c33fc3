/* DualPipeV (DeepSeek, the DualPipe repository's "cut-in-half" DualPipe): two
 * chunks per rank in a V (chunk 0 is stage r, chunk 1 stage 2p-1-r) and m >= 2p
 * micro-batches. Rank r runs eight phases (F0 is a chunk-0 forward, B1 a chunk-1
 * full backward, I/W a backward split for zero bubble, "F0B1" one chunk's
 * forward paired with the other's backward, which DualPipe overlaps):
 *   1. 2(p-r-1) x F0                 fill the down arm
 *   2. (r+1)    x F0 F1              reach the turn of the V
 *   3. (p-r-1)  x I1 W F1            first backwards, W right behind
 *   4. m-2p+r+1 x F0B1 F1B0          the steady state: every step pairs
 *   5. (p-r-1)  x B1 F1B0            the forwards run out
 *   6. (r+1)    x B1 B0              the second half of them split (I, W later)
 *   7. (p-r-1)  x W I0               deferred W fill the drain
 *   8. (r+1)    x W                  the rest
 * Each chunk's forwards and backwards go in micro-batch order and W in the
 * order their I ran. A pair is written F then B: this list is the sequential
 * reading of the overlapped step (what runs when F and B are not overlapped). */
#include <stdlib.h>

#include "schedule_gen.h"

typedef struct {
  rp_schedule *s;
  int r;
  int next_f[2], next_b[2];
  int *wq, wq_head, wq_n; /* deferred W: chunk * m + mb */
  rp_status st;
} dpv;

static void put(dpv *d, int op, int chunk, int mb) {
  if (d->st == RP_OK) d->st = rp_schedule_push(d->s, d->r, (rp_action){op, chunk, mb});
}

static void fwd(dpv *d, int c) { put(d, RP_OP_F, c, d->next_f[c]++); }

/* A chunk-c backward, split into I (its W queued) when zb. */
static void bwd(dpv *d, int c, int zb) {
  int mb = d->next_b[c]++;
  put(d, zb ? RP_OP_I : RP_OP_B, c, mb);
  if (zb) d->wq[d->wq_n++] = c * d->s->m + mb;
}

static void weight(dpv *d) {
  int key = d->wq[d->wq_head++];
  put(d, RP_OP_W, key / d->s->m, key % d->s->m);
}

static void gen_rank(dpv *d) {
  int p = d->s->p, m = d->s->m, r = d->r;
  for (int i = 0; i < 2 * (p - r - 1); i++) fwd(d, 0);
  for (int i = 0; i < r + 1; i++) fwd(d, 0), fwd(d, 1);
  for (int i = 0; i < p - r - 1; i++) bwd(d, 1, 1), weight(d), fwd(d, 1);
  for (int i = 0; i < m - 2 * p + r + 1; i++) fwd(d, 0), bwd(d, 1, 0), fwd(d, 1), bwd(d, 0, 0);
  for (int i = 0; i < p - r - 1; i++) bwd(d, 1, 0), fwd(d, 1), bwd(d, 0, 0);
  /* phase 6: from its middle on, the backwards split; an odd rank starts
   * splitting one backward earlier than an even one, as in DualPipeV */
  int n6 = r + 1, zb = 0;
  for (int i = 0; i < n6; i++) {
    if (i == n6 / 2 && r % 2 == 1) zb = 1;
    bwd(d, 1, zb);
    if (i == n6 / 2 && r % 2 == 0) zb = 1;
    bwd(d, 0, zb);
  }
  for (int i = 0; i < p - r - 1; i++) weight(d), bwd(d, 0, 1);
  while (d->wq_head < d->wq_n) weight(d);
}

rp_status rp_gen_dualpipev(rp_schedule *s) {
  dpv d = {.s = s, .st = RP_OK};
  d.wq = malloc((size_t)2 * s->m * sizeof(int));
  if (!d.wq) return rp_err(RP_ENOMEM, "out of memory generating %s", s->name);
  for (d.r = 0; d.r < s->p && d.st == RP_OK; d.r++) {
    d.next_f[0] = d.next_f[1] = d.next_b[0] = d.next_b[1] = 0;
    d.wq_head = d.wq_n = 0;
    gen_rank(&d);
  }
  free(d.wq);
  return d.st;
}
