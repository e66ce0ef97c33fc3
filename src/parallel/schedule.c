/* Schedules as data: actions, the schedule container, and the generators.
 *
 * Each generator writes rank r's compute list the way the papers draw it, one
 * row of boxes per device; lowering (schedule_lower.c) adds the communication.
 * Micro-batches are numbered 0..m-1, ranks 0..p-1, local chunks 0..v-1. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "ringpipe/rp_schedule.h"
#include "schedule_gen.h"

static const char *const op_names[RP_OP_COUNT] = {
    "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};

const char *const rp_schedule_names =
    "naive|gpipe|1f1b|interleaved|zb-h1|zb-h2|zb-v|zb-v-half|zb-v-min|dualpipev";

const char *rp_op_name(int op) { return op >= 0 && op < RP_OP_COUNT ? op_names[op] : "?"; }

int rp_op_is_compute(int op) { return op >= RP_OP_F && op <= RP_OP_W; }

int rp_schedule_splits_backward(const rp_schedule *s) {
  for (int r = 0; r < s->p; r++)
    for (int i = 0; i < s->n[r]; i++)
      if (s->acts[r][i].op == RP_OP_I || s->acts[r][i].op == RP_OP_W) return 1;
  return 0;
}

int rp_action_str(rp_action a, char *buf, size_t n) {
  int len = snprintf(buf, n, "%d%s%d", a.chunk, rp_op_name(a.op), a.mb);
  return len < 0 ? 0 : len;
}

/* Reads a non-negative decimal at text[*i], at most 9 digits (no overflow). */
static int read_uint(const char *text, size_t len, size_t *i, int *out) {
  size_t start = *i;
  long v = 0;
  while (*i < len && text[*i] >= '0' && text[*i] <= '9' && *i - start < 9)
    v = v * 10 + (text[(*i)++] - '0');
  if (*i == start || (*i < len && text[*i] >= '0' && text[*i] <= '9')) return 0;
  *out = (int)v;
  return 1;
}

rp_status rp_action_parse(const char *text, size_t len, rp_action *out) {
  size_t i = 0;
  int chunk, mb, op = -1;
  if (!read_uint(text, len, &i, &chunk)) goto bad;
  /* Longest op name first so that "SEND_F" is not read as something shorter. */
  for (int k = RP_OP_COUNT - 1; k >= 0; k--) {
    size_t l = strlen(op_names[k]);
    if (len - i >= l && memcmp(text + i, op_names[k], l) == 0) {
      op = k;
      i += l;
      break;
    }
  }
  if (op < 0 || !read_uint(text, len, &i, &mb) || i != len) goto bad;
  out->op = op;
  out->chunk = chunk;
  out->mb = mb;
  return RP_OK;
bad:
  return rp_err(RP_EFORMAT,
                "'%.*s' is not an action: write <chunk><op><micro-batch> with op one of "
                "F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B (e.g. 0F3, 1SEND_B2)",
                (int)(len > 40 ? 40 : len), text);
}

rp_status rp_schedule_new(int p, int v, int m, const char *name, rp_schedule **out) {
  *out = NULL;
  if (p < 1 || v < 1 || m < 1)
    return rp_err(RP_EINVAL, "schedule needs p >= 1, v >= 1, m >= 1 (got p=%d v=%d m=%d)", p,
                  v, m);
  rp_schedule *s = calloc(1, sizeof *s);
  if (!s) return rp_err(RP_ENOMEM, "out of memory for a schedule of %d ranks", p);
  s->p = p;
  s->v = v;
  s->m = m;
  snprintf(s->name, sizeof s->name, "%s", name ? name : "");
  s->n = calloc((size_t)p, sizeof *s->n);
  s->cap = calloc((size_t)p, sizeof *s->cap);
  s->acts = calloc((size_t)p, sizeof *s->acts);
  if (!s->n || !s->cap || !s->acts) {
    rp_schedule_free(s);
    return rp_err(RP_ENOMEM, "out of memory for a schedule of %d ranks", p);
  }
  *out = s;
  return RP_OK;
}

rp_status rp_schedule_push(rp_schedule *s, int rank, rp_action a) {
  if (rank < 0 || rank >= s->p)
    return rp_err(RP_EINTERNAL, "rank %d outside 0..%d", rank, s->p - 1);
  if (s->n[rank] == s->cap[rank]) {
    int cap = s->cap[rank] ? 2 * s->cap[rank] : 16;
    rp_action *grown = realloc(s->acts[rank], (size_t)cap * sizeof *grown);
    if (!grown) return rp_err(RP_ENOMEM, "out of memory for %d actions", cap);
    s->acts[rank] = grown;
    s->cap[rank] = cap;
  }
  s->acts[rank][s->n[rank]++] = a;
  if (!rp_op_is_compute(a.op)) s->lowered = 1;
  return RP_OK;
}

void rp_schedule_swap_lists(rp_schedule *a, rp_schedule *b) {
  int *n = a->n, *cap = a->cap, lowered = a->lowered;
  rp_action **acts = a->acts;
  a->n = b->n, a->cap = b->cap, a->acts = b->acts, a->lowered = b->lowered;
  b->n = n, b->cap = cap, b->acts = acts, b->lowered = lowered;
}

void rp_schedule_free(rp_schedule *s) {
  if (!s) return;
  if (s->acts)
    for (int r = 0; r < s->p; r++) free(s->acts[r]);
  free(s->acts);
  free(s->n);
  free(s->cap);
  free(s);
}

int rp_stage_of(int map, int p, int rank, int chunk) {
  if (map == RP_MAP_V) return chunk == 0 ? rank : 2 * p - 1 - rank;
  return chunk * p + rank;
}

void rp_stage_owner(int map, int p, int stage, int *rank, int *chunk) {
  if (map == RP_MAP_V) {
    *chunk = stage >= p;
    *rank = stage < p ? stage : 2 * p - 1 - stage;
    return;
  }
  *rank = stage % p;
  *chunk = stage / p;
}

const char *rp_stage_map_name(int map) { return map == RP_MAP_V ? "v" : "loop"; }

int rp_schedule_stage(const rp_schedule *s, int rank, int chunk) {
  return rp_stage_of(s->map, s->p, rank, chunk);
}

void rp_schedule_owner(const rp_schedule *s, int stage, int *rank, int *chunk) {
  rp_stage_owner(s->map, s->p, stage, rank, chunk);
}

/* ---- generators ----
 * Each returns rank r's compute list through push(); `st` carries the first
 * allocation failure so the loops stay readable. */

typedef struct {
  rp_schedule *s;
  int r;
  rp_status st;
} gen;

static void put(gen *g, int op, int chunk, int mb) {
  if (g->st == RP_OK) g->st = rp_schedule_push(g->s, g->r, (rp_action){op, chunk, mb});
}

/* Naive model parallelism: a micro-batch goes through every stage and back
 * before the next one enters, so only one rank works at any time. */
static void gen_naive(gen *g, int p, int m) {
  (void)p;
  for (int i = 0; i < m; i++) {
    put(g, RP_OP_F, 0, i);
    put(g, RP_OP_B, 0, i);
  }
}

/* GPipe (Huang et al. 2019, fig. 2c): all forwards, then all backwards (in
 * micro-batch order, as Megatron and torch do); rank 0 holds all m activations. */
static void gen_gpipe(gen *g, int p, int m) {
  (void)p;
  for (int i = 0; i < m; i++) put(g, RP_OP_F, 0, i);
  for (int i = 0; i < m; i++) put(g, RP_OP_B, 0, i);
}

/* 1F1B / PipeDream-Flush (Narayanan et al. 2021, fig. 4 top): rank r fills the
 * pipe with p-1-r forwards, then alternates F and B so that at most p-r
 * micro-batches are in flight, then drains the remaining backwards. */
static void gen_1f1b(gen *g, int p, int m) {
  int warmup = RP_MIN(p - 1 - g->r, m);
  for (int i = 0; i < warmup; i++) put(g, RP_OP_F, 0, i);
  for (int i = 0; i < m - warmup; i++) {
    put(g, RP_OP_F, 0, warmup + i);
    put(g, RP_OP_B, 0, i);
  }
  for (int i = m - warmup; i < m; i++) put(g, RP_OP_B, 0, i);
}

/* Interleaved 1F1B (Narayanan et al. 2021, fig. 4 bottom; Megatron-LM's
 * forward_backward_pipelining_with_interleaving). Rank r holds chunks
 * c = 0..v-1 (global stage c*p + r). Its k-th forward runs micro-batches in
 * groups of p per chunk: chunk (k / p) % v, micro-batch (k / (p v)) p + k % p;
 * its k-th backward walks the chunks in reverse. Warmup: (v-1) p forwards to
 * reach the last chunk plus 2 (p-1-r) so the first backward's gradient can come
 * back, then one forward and one backward alternate. (Megatron runs every
 * forward first when m == p; the general warmup used here is deadlock-free
 * there too, as the validator and the golden p=4 m=4 show, and has the same
 * (p-1)/(v m) bubble.) */
static void interleaved_step(int k, int p, int v, int forward, int *chunk, int *mb) {
  int c = (k % (p * v)) / p;
  *chunk = forward ? c : v - 1 - c;
  *mb = (k / (p * v)) * p + k % p;
}

static void gen_interleaved(gen *g, int p, int v, int m) {
  int total = m * v, c, mb;
  int warmup = RP_MIN((p - 1 - g->r) * 2 + (v - 1) * p, total);
  for (int k = 0; k < warmup; k++) {
    interleaved_step(k, p, v, 1, &c, &mb);
    put(g, RP_OP_F, c, mb);
  }
  for (int k = 0; k < total - warmup; k++) {
    interleaved_step(k + warmup, p, v, 1, &c, &mb);
    put(g, RP_OP_F, c, mb);
    interleaved_step(k, p, v, 0, &c, &mb);
    put(g, RP_OP_B, c, mb);
  }
  for (int k = total - warmup; k < total; k++) {
    interleaved_step(k, p, v, 0, &c, &mb);
    put(g, RP_OP_B, c, mb);
  }
}

/* ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", fig. 3 top): the
 * 1F1B order with each B split into I (input gradient, on the critical path)
 * and W (weight gradient, free to move). Rank r runs W(j - r) right after I(j):
 * the last rank, which idles longest at the end of 1F1B, defers the most W into
 * that cooldown bubble, rank 0 none. In-flight activations stay those of 1F1B
 * (p - r on rank r); rank r additionally stashes up to r + 1 W inputs. */
static void gen_zbh1(gen *g, int p, int m) {
  int r = g->r, warmup = RP_MIN(p - 1 - r, m);
  for (int i = 0; i < warmup; i++) put(g, RP_OP_F, 0, i);
  for (int j = 0; j < m; j++) {
    if (j < m - warmup) put(g, RP_OP_F, 0, warmup + j);
    put(g, RP_OP_I, 0, j);
    if (j - r >= 0) put(g, RP_OP_W, 0, j - r);
  }
  for (int j = RP_MAX(m - r, 0); j < m; j++) put(g, RP_OP_W, 0, j);
}

typedef enum {
  K_NAIVE, K_GPIPE, K_1F1B, K_INTERLEAVED, K_ZBH1, K_ZBH2, K_ZBV, K_ZBV_HALF, K_ZBV_MIN,
  K_DUALPIPEV, K_NONE
} kind;

static kind kind_of(const char *name) {
  if (!strcmp(name, "naive")) return K_NAIVE;
  if (!strcmp(name, "gpipe")) return K_GPIPE;
  if (!strcmp(name, "1f1b")) return K_1F1B;
  if (!strcmp(name, "interleaved") || !strcmp(name, "interleaved-1f1b")) return K_INTERLEAVED;
  if (!strcmp(name, "zb-h1") || !strcmp(name, "zbh1")) return K_ZBH1;
  if (!strcmp(name, "zb-h2") || !strcmp(name, "zbh2")) return K_ZBH2;
  if (!strcmp(name, "zb-v") || !strcmp(name, "zbv")) return K_ZBV;
  if (!strcmp(name, "zb-v-half")) return K_ZBV_HALF;
  if (!strcmp(name, "zb-v-min")) return K_ZBV_MIN;
  if (!strcmp(name, "dualpipev") || !strcmp(name, "dualpipe-v")) return K_DUALPIPEV;
  return K_NONE;
}

int rp_schedule_generator_splits_backward(const char *name) {
  kind k = kind_of(name);
  return k == K_NONE ? -1 : k >= K_ZBH1 && k <= K_DUALPIPEV;
}

static int is_v_kind(kind k) { return k >= K_ZBV && k <= K_DUALPIPEV; }

int rp_schedule_generator_chunks(const char *name) {
  kind k = kind_of(name);
  return k == K_NONE ? -1 : k == K_INTERLEAVED ? 0 : is_v_kind(k) ? 2 : 1;
}

/* The V schedules: two chunks per rank in a V, on at least two ranks (on one
 * rank the V folds onto itself), and enough micro-batches for the warm-up. */
static rp_status check_v_config(kind k, const char *name, int p, int v, int m) {
  if (v != 2)
    return rp_err(RP_EINVAL, "--vpp %d: %s runs two chunks per rank in a V (stages r and "
                  "2p-1-r); use --vpp 2", v, name);
  if (p < 2)
    return rp_err(RP_EINVAL, "--pp %d: %s needs at least 2 pipeline ranks; use --schedule "
                  "1f1b or a single rank without a pipeline", p, name);
  int need = k == K_DUALPIPEV ? 2 * p : p;
  if (k == K_ZBV_MIN) return RP_OK; /* one micro-batch is its whole block */
  if (m < need)
    return rp_err(RP_EINVAL, "%s needs --microbatches >= %s (got m=%d, p=%d): its warm-up "
                  "fills %s before the first backward; use m >= %d",
                  name, k == K_DUALPIPEV ? "2 x --pp" : "--pp", m, p,
                  k == K_DUALPIPEV ? "both arms of the V" : "the V", need);
  return RP_OK;
}

/* Pending-activation limit per rank (chunk-activations held from F to W) of
 * the zero-bubble list schedules: what makes ZB-H2, ZB-V and V-Half.
 * V-Half: p + 2 chunks, half of 1F1B's 2p plus one micro-batch (the
 * controllable-memory paper's p/2 + 1 for even p). With it the greedy's
 * bubble stays within 4 chunk passes of (p-1)/(2m) for p <= 10 at every m
 * (the paper's ~p/(2m); more beyond, up to 10 at p = 15);
 * at its p + 1 for odd p the greedy's steady state stalls (p = 5: a bubble of
 * 13 chunk passes at m = 5, growing to 47 at m = 40). The building blocks
 * tried with V-Half's memory (schedule_vblock.c's block with 1 to 3 slots of
 * slack per rank on both down arms, in two runs of ranks as the paper's
 * offsets, and at the V's three turns, its warm-up re-laid) gave no rule that
 * beats this greedy at every p (at best 7 idle passes at p = 4 against its 9,
 * 13 at p = 6 against its 13..15, 22 at p = 8 against its 21..23), so V-Half
 * stays the greedy, about 4 passes above the paper's bound 3p-7 for it.
 * V-Min is not a list schedule: under a third of 1F1B's memory the greedy
 * stalls in its steady state (about 50% at p = 4 for every m); the building
 * block of schedule_vblock.c does not. */
static int zb_limit(kind k, int p) {
  switch (k) {
    case K_ZBH2: return 2 * p - 1;           /* the paper's (2p-1) M_B */
    case K_ZBV: return 2 * p;                /* 1F1B's p full activations, in chunks */
    case K_ZBV_HALF: return p + 2;           /* about half of that */
    default: return 0;
  }
}

/* The constraints, checked before anything is built. */
static rp_status check_config(kind k, const char *name, int p, int v, int m) {
  if (p < 1) return rp_err(RP_EINVAL, "--pp %d: the pipeline needs at least 1 rank", p);
  if (m < 1) return rp_err(RP_EINVAL, "--microbatches %d: need at least 1 micro-batch", m);
  if (k == K_INTERLEAVED) {
    if (v < 2)
      return rp_err(RP_EINVAL,
                    "interleaved needs --vpp >= 2 chunks per rank (got %d); with one chunk "
                    "per rank use --schedule 1f1b",
                    v);
    if (m % p != 0)
      return rp_err(RP_EINVAL,
                    "interleaved needs --microbatches to be a multiple of --pp (got m=%d, "
                    "p=%d): micro-batches go through each chunk in groups of p; use m=%d or "
                    "m=%d",
                    m, p, m / p * p > 0 ? m / p * p : p, (m / p + 1) * p);
    return RP_OK;
  }
  if (is_v_kind(k)) return check_v_config(k, name, p, v, m);
  if (v != 1)
    return rp_err(RP_EINVAL,
                  "--vpp %d: %s runs one chunk per rank; use --vpp 1, or --schedule "
                  "interleaved for several chunks",
                  v, name);
  if ((k == K_1F1B || k == K_ZBH1 || k == K_ZBH2) && m < p)
    return rp_err(RP_EINVAL,
                  "%s needs --microbatches >= --pp (got m=%d, p=%d) so that every rank reaches "
                  "its steady state; use m >= %d, or --schedule gpipe (what %s degenerates "
                  "to)",
                  name, m, p, p, name);
  return RP_OK;
}

rp_status rp_schedule_generate(const char *name, int p, int v, int m, rp_schedule **out) {
  *out = NULL;
  kind k = kind_of(name);
  if (k == K_NONE)
    return rp_err(RP_EINVAL, "unknown schedule '%s': use one of %s, or a .csv file", name,
                  rp_schedule_names);
  RP_TRY(check_config(k, name, p, v, m));
  RP_TRY(rp_schedule_check_size(p, v, m));  /* before p x m actions are generated */
  rp_schedule *s;
  RP_TRY(rp_schedule_new(p, v, m, name, &s));
  if (is_v_kind(k)) s->map = RP_MAP_V;
  if (k >= K_ZBH2) {
    rp_status st = k == K_DUALPIPEV ? rp_gen_dualpipev(s)
                 : k == K_ZBV_MIN  ? rp_gen_vmin_block(s)
                 : k == K_ZBV      ? rp_gen_zbv(s, zb_limit(k, p))
                                   : rp_gen_zb_list(s, zb_limit(k, p), 0);
    if (st != RP_OK) {
      rp_schedule_free(s);
      return st;
    }
    *out = s;
    return RP_OK;
  }
  gen g = {s, 0, RP_OK};
  for (g.r = 0; g.r < p && g.st == RP_OK; g.r++) {
    switch (k) {
      case K_NAIVE: gen_naive(&g, p, m); break;
      case K_GPIPE: gen_gpipe(&g, p, m); break;
      case K_1F1B: gen_1f1b(&g, p, m); break;
      case K_INTERLEAVED: gen_interleaved(&g, p, v, m); break;
      case K_ZBH1: gen_zbh1(&g, p, m); break;
      default: break;
    }
  }
  if (g.st != RP_OK) {
    rp_schedule_free(s);
    return g.st;
  }
  *out = s;
  return RP_OK;
}

/* ---- liveness ----
 * Slots are handed out lowest-free-first so that the count of slots equals the
 * peak number live at once. Keys are (chunk, mb) of this rank. */

typedef struct {
  int *owner; /* slot -> key holding it, -1 free */
  int n, cap;
} slot_pool;

static int pool_take(slot_pool *pl, int key) {
  for (int i = 0; i < pl->n; i++)
    if (pl->owner[i] < 0) {
      pl->owner[i] = key;
      return i;
    }
  if (pl->n == pl->cap) {
    int cap = pl->cap ? 2 * pl->cap : 8;
    int *grown = realloc(pl->owner, (size_t)cap * sizeof *grown);
    if (!grown) return -2;
    pl->owner = grown;
    pl->cap = cap;
  }
  pl->owner[pl->n] = key;
  return pl->n++;
}

/* Releases key's slot and returns it, -1 when the key holds none. */
static int pool_give(slot_pool *pl, int key) {
  for (int i = 0; i < pl->n; i++)
    if (pl->owner[i] == key) {
      pl->owner[i] = -1;
      return i;
    }
  return -1;
}

void rp_slot_plan_free(rp_slot_plan *plan) {
  if (!plan) return;
  free(plan->act);
  free(plan->wst);
  free(plan->rbuf);
  free(plan->gbuf);
  free(plan->gin);
  memset(plan, 0, sizeof *plan);
}

/* keys (chunk * m + mb) of this rank that a SEND_B sends: their B or I must
 * keep the input gradient in a send buffer until then */
static unsigned char *sent_back(const rp_schedule *s, int rank) {
  unsigned char *sent = calloc((size_t)s->v * s->m + 1, 1);
  for (int i = 0; sent && i < s->n[rank]; i++) {
    rp_action a = s->acts[rank][i];
    if (a.op == RP_OP_SEND_B) sent[a.chunk * s->m + a.mb] = 1;
  }
  return sent;
}

/* The local chunk holding the stage before (dir -1) or after (+1) this rank's
 * chunk c when it is on this rank too (the V's turn), else -1. */
int rp_schedule_local_neighbour(const rp_schedule *s, int rank, int chunk, int dir) {
  int st = rp_schedule_stage(s, rank, chunk) + dir, r, c;
  if (st < 0 || st >= s->v * s->p) return -1;
  rp_schedule_owner(s, st, &r, &c);
  return r == rank ? c : -1;
}

rp_status rp_schedule_plan_slots(const rp_schedule *s, int rank, rp_slot_plan *out) {
  memset(out, 0, sizeof *out);
  if (rank < 0 || rank >= s->p)
    return rp_err(RP_EINVAL, "rank %d outside the schedule's 0..%d", rank, s->p - 1);
  int n = s->n[rank];
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(int);
  out->n = n;
  out->act = malloc(bytes);
  out->wst = malloc(bytes);
  out->rbuf = malloc(bytes);
  out->gbuf = malloc(bytes);
  out->gin = malloc(bytes);
  unsigned char *sent = sent_back(s, rank);
  slot_pool act = {0}, wst = {0}, rbuf = {0}, gbuf = {0};
  rp_status st = RP_OK;
  if (!out->act || !out->wst || !out->rbuf || !out->gbuf || !out->gin || !sent)
    st = rp_err(RP_ENOMEM, "out of memory");
  for (int i = 0; i < n && st == RP_OK; i++) {
    rp_action a = s->acts[rank][i];
    /* Receive buffers are keyed by direction too: RECV_F and RECV_B of the same
     * (chunk, mb) can be outstanding together. */
    int key = a.chunk * s->m + a.mb, nk = s->v * s->m;
    int t = -1, w = -1, b = -1, g = -1, gi = -1;
    /* the V's turn: an input gradient for this rank's own previous stage is
     * kept in a gradient buffer (key nk + key) until that stage's backward */
    int hands_back = 0, takes_back = -1;
    if (a.op == RP_OP_B || a.op == RP_OP_I) {
      hands_back = rp_schedule_local_neighbour(s, rank, a.chunk, -1) >= 0;
      int next = rp_schedule_local_neighbour(s, rank, a.chunk, +1);
      if (next >= 0) takes_back = nk + next * s->m + a.mb;
    }
    if (takes_back >= 0) gi = pool_give(&gbuf, takes_back);
    switch (a.op) {
      case RP_OP_F:
        t = pool_take(&act, key);
        b = pool_give(&rbuf, key);
        break;
      case RP_OP_B:
        t = pool_give(&act, key);
        b = pool_give(&rbuf, nk + key);
        if (sent[key] || hands_back) g = pool_take(&gbuf, hands_back ? nk + key : key);
        break;
      case RP_OP_I:
        b = pool_give(&rbuf, nk + key);
        w = pool_take(&wst, key);
        if (sent[key] || hands_back) g = pool_take(&gbuf, hands_back ? nk + key : key);
        break;
      case RP_OP_W:
        t = pool_give(&act, key);
        w = pool_give(&wst, key);
        break;
      case RP_OP_RECV_F: b = pool_take(&rbuf, key); break;
      case RP_OP_RECV_B: b = pool_take(&rbuf, nk + key); break;
      case RP_OP_SEND_B: g = pool_give(&gbuf, key); break;
      default: break;
    }
    if (t == -2 || w == -2 || b == -2 || g == -2) st = rp_err(RP_ENOMEM, "out of memory");
    out->act[i] = t;
    out->wst[i] = w;
    out->rbuf[i] = b;
    out->gbuf[i] = g;
    out->gin[i] = gi;
  }
  out->n_act = act.n;
  out->n_wst = wst.n;
  out->n_rbuf = rbuf.n;
  out->n_gbuf = gbuf.n;
  free(act.owner);
  free(wst.owner);
  free(rbuf.owner);
  free(gbuf.owner);
  free(sent);
  if (st != RP_OK) rp_slot_plan_free(out);
  return st;
}

int rp_schedule_max_live(const rp_schedule *s, int rank) {
  int live = 0, peak = 0;
  for (int i = 0; i < s->n[rank]; i++) {
    int op = s->acts[rank][i].op;
    if (op == RP_OP_F) {
      live++;
      peak = RP_MAX(peak, live);
    }
    if (op == RP_OP_B || op == RP_OP_I) live--;
  }
  return peak;
}
