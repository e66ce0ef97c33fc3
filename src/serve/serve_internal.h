/* Internals of the real serving engine (engine*.c, reader.c). */
#ifndef RP_SERVE_INTERNAL_H
#define RP_SERVE_INTERNAL_H

#include <pthread.h>
#include <mpi.h>

#include "ringpipe/rp_infer.h"
#include "ringpipe/rp_serve.h"

/* ---- the storage reader: one thread per rank reading hit blocks through the
 * node's storage link, layer by layer (layer-wise) or block by block, into a
 * staging buffer laid out like cache blocks; the compute thread waits for a
 * layer (or everything) while it runs. */
typedef struct read_job {
  const uint64_t *keys;
  const int32_t *tokens;     /* the prefix, nblocks * 64 tokens */
  int nblocks, layerwise;
  float *staging;            /* nblocks * block floats */
  rp_link *link;             /* NULL: unlimited (Oracle) */
  /* progress, under the reader's lock */
  int layers_done;           /* layers of every block through (L when finished) */
  int nvalid;                /* leading blocks that passed every check so far */
  int done;
  double t0, t1;             /* read start and end (rp_now_ns seconds) */
  size_t bytes;
  struct read_job *next;
} read_job;

typedef struct {
  rp_kv_store *store;
  int L;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  read_job *head, *tail;
  int stop, started;
} reader;

rp_status reader_start(reader *r, rp_kv_store *store, int L);
void reader_stop(reader *r);
void reader_submit(reader *r, read_job *j);
/* Waits until layer `layer` (or all: layer = L - 1) of j is through; returns nvalid. */
int reader_wait(reader *r, read_job *j, int layer);
int reader_poll_layers(reader *r, read_job *j, int *nvalid);

/* ---- messages */
enum {
  TAG_REQ = 1,      /* driver -> PE: req_msg + prompt tokens */
  TAG_FWD = 2,      /* driver -> DE: req_msg + prefix tokens (DE reads, forwards to PE) */
  TAG_PREFILLED = 3,/* PE -> driver: done_msg */
  TAG_HANDOFF = 4,  /* PE -> DE: req_msg, tokens, then TAG_HANDOFF_KV blocks */
  TAG_HANDOFF_KV = 5,
  TAG_DONE = 6,     /* DE -> driver: done_msg + generated tokens */
  TAG_STOP = 7,
  TAG_STATS = 8,
  TAG_EVENTS = 9,
  TAG_LAYER = 100   /* DE -> PE: layer l of the forwarded prefix is TAG_LAYER + l */
};

typedef struct {
  int agent, turn, pe, de;   /* pe, de: world ranks */
  int side;                  /* rp_read_side */
  int nhit;                  /* hit blocks the driver found in the index */
  int nvalid;                /* blocks that proved valid (PE -> DE hand-off) */
  int prompt, gen, first_token;
  double t_arrive;
} req_msg;

typedef struct {
  int agent, turn, nvalid;
  double t_first, t_decode, t_done;
} done_msg;

/* a rank's timeline events, sent to the driver at the end */
typedef struct {
  char name[12];
  double t0, t1;
} tl_event;

typedef struct {
  tl_event *ev;
  int n, cap;
} tl_log;

void tl_add(tl_log *l, const char *name, double t0, double t1);
double serve_now(void); /* seconds on the clock every rank of the host shares */

/* layout of the ranks */
typedef struct {
  int npe, nde, node_size, pe_nodes, nnodes;
} serve_layout;
int layout_node_of_rank(const serve_layout *y, int rank); /* -1 for the driver */
static inline int layout_pe_rank(int i) { return 1 + i; }
static inline int layout_de_rank(const serve_layout *y, int j) { return 1 + y->npe + j; }

#endif
