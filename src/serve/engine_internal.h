/* One rank of the real serving engine (engine.c sets it up). */
#ifndef RP_ENGINE_INTERNAL_H
#define RP_ENGINE_INTERNAL_H

#include "serve_internal.h"

#define RP_SERVE_MAX_BLOCKS 4096 /* blocks of one context at most (262144 tokens) */

typedef struct {
  const rp_engine_opts *o;
  const rp_chunk *m;
  const rp_trace *t;
  serve_layout y;
  int rank, node, L;
  rp_exec x;
  rp_pool *pool;
  rp_kv_store store;
  rp_kv_cache cache;
  reader rd;
  rp_link snic;              /* this node's storage link */
  rp_link *net_in;           /* every rank's compute-network input link */
  rp_link *owned;            /* the driver: the link states it created */
  int nowned;
  char link_prefix[64];
  size_t block_floats;
  float *staging, *sendbuf, *layer_buf;
  float *probs;
  int *idx;
  double net_bytes;          /* compute-network bytes this rank sent */
  tl_log tl;
} engine_rank;

void engine_pe_loop(engine_rank *e);
void engine_de_loop(engine_rank *e);
rp_status engine_driver(engine_rank *e, rp_serve_summary *sum);
int engine_greedy(engine_rank *e, const float *logits);
/* Takes bytes through the destination's compute-network input link (and
 * counts them) before an MPI send to it. */
void engine_net_send(engine_rank *e, int dest, size_t bytes);
/* Waits for a message without spinning a core (ranks outnumber cores):
 * MPI_Iprobe, then a 100 us sleep. */
void engine_wait_message(int src, int tag, MPI_Status *st);

#endif
