/* The scheduler (rp_serve.h), after DualPath §6: pure functions of the
 * engines' reported states, shared by the simulator and the real engine.
 *
 * Engine choice: engines over the token limit are skipped (unless all are),
 * then engines on nodes whose storage read queue is short are preferred
 * (unless none is), then the least loaded wins. Keeping reads off nodes with
 * long queues is what evens out the storage NICs; the token limit keeps one
 * engine from collecting a backlog. Read side: whichever of the pair's nodes
 * has the shorter storage read queue reads the hit blocks. */
#include "ringpipe/rp_serve.h"

/* a before b as a target: fewer tokens, then fewer sequences, then lower index */
static int less_loaded(const rp_engine_state *a, const rp_engine_state *b) {
  if (a->tokens != b->tokens) return a->tokens < b->tokens;
  return a->seqs < b->seqs;
}

/* Engine i passes filter f (0: under the token limit, 1: short read queue). */
static int passes(const rp_engine_state *e, long limit, long tokens, double short_q, int f) {
  return f == 0 ? e->tokens + tokens <= limit : e->read_queue <= short_q;
}

static int pick(const rp_engine_state *e, int n, long limit, long tokens, double short_q) {
  /* keep[i]: still a candidate after the filters applied so far */
  unsigned char keep[1024];
  if (n > (int)sizeof keep) n = (int)sizeof keep;
  if (short_q < 0) { /* "short": at or below the mean read queue */
    short_q = 0;
    for (int i = 0; i < n; i++) short_q += e[i].read_queue / n;
  }
  for (int i = 0; i < n; i++) keep[i] = 1;
  for (int f = 0; f < 2; f++) {
    int any = 0;
    for (int i = 0; i < n; i++) any |= keep[i] && passes(&e[i], limit, tokens, short_q, f);
    if (!any) continue; /* a filter that leaves nobody is skipped */
    for (int i = 0; i < n; i++) keep[i] = keep[i] && passes(&e[i], limit, tokens, short_q, f);
  }
  int best = -1;
  for (int i = 0; i < n; i++)
    if (keep[i] && (best < 0 || less_loaded(&e[i], &e[best]))) best = i;
  return best;
}

int rp_sched_pick_pe(rp_sched *s, const rp_engine_state *pe, int npe, long tokens) {
  if (npe < 1) return -1;
  if (s->policy == RP_SCHED_ROUND_ROBIN) return s->rr_next_pe++ % npe;
  return pick(pe, npe, s->pe_token_limit, tokens, s->short_queue);
}

int rp_sched_pick_de(rp_sched *s, const rp_engine_state *de, int nde, long tokens) {
  if (nde < 1) return -1;
  if (s->policy == RP_SCHED_ROUND_ROBIN) return s->rr_next_de++ % nde;
  return pick(de, nde, s->de_token_limit, tokens, s->short_queue);
}

rp_read_side rp_sched_read_side(const rp_engine_state *pe, const rp_engine_state *de, int dual) {
  if (!dual) return RP_READ_PE;
  return de->read_queue < pe->read_queue ? RP_READ_DE : RP_READ_PE;
}
