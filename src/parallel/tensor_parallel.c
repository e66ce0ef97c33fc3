/* Tensor parallelism's collectives over MPI (rp_tp.h): all-reduce (sum or
 * max), all-gather and reduce-scatter over the tp group, each a non-blocking
 * call and a watched wait so that a dead peer ends the job with a message. */
#include <stdlib.h>

#include "ringpipe/rp_tp.h"
#include "ringpipe/rp_util.h"
#include "ringpipe/rp_wait.h"

struct rp_tp {
  rp_tp_ops ops;     /* first: the ops' ctx points back here */
  MPI_Comm comm;
  rp_tp_stats st, last;
  MPI_Request ring[2];
};

/* Counts n floats at most INT_MAX per MPI call: the model's buffers are far
 * below, and a larger one is a bug, not an input. */
static int count_of(long n) {
  RP_CHECK(n >= 0 && n <= 0x7fffffffL);
  return (int)n;
}

/* moved: the floats each rank sends (= receives) in the bandwidth-optimal
 * ring form of the collective: 2 (t-1)/t n for an all-reduce of n, (t-1) n
 * for an all-gather or reduce-scatter of n floats per rank. */
static void finish(rp_tp *t, MPI_Request *r, long n, double moved, double t0, const char *what) {
  rp_wait(r, t->comm, -1, "tensor-parallel %s of %ld floats", what, n);
  t->st.calls++;
  t->st.bytes += 4.0 * moved;
  t->st.wait_s += rp_now() - t0;
}

static void tp_all_reduce(const rp_tp_ops *o, float *buf, long n, rp_tp_op op) {
  rp_tp *t = o->ctx;
  double t0 = rp_now();
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, buf, count_of(n), MPI_FLOAT, op == RP_TP_MAX ? MPI_MAX : MPI_SUM,
                 t->comm, &r);
  double size = o->size;
  finish(t, &r, n, 2.0 * (size - 1) / size * (double)n, t0,
         op == RP_TP_MAX ? "all-reduce (max)" : "all-reduce");
}

static void tp_all_gather(const rp_tp_ops *o, float *out, const float *in, long n) {
  rp_tp *t = o->ctx;
  double t0 = rp_now();
  MPI_Request r;
  MPI_Iallgather(in, count_of(n), MPI_FLOAT, out, count_of(n), MPI_FLOAT, t->comm, &r);
  finish(t, &r, n, (double)(o->size - 1) * (double)n, t0, "all-gather");
}

static void tp_reduce_scatter(const rp_tp_ops *o, float *out, const float *in, long n) {
  rp_tp *t = o->ctx;
  double t0 = rp_now();
  MPI_Request r;
  MPI_Ireduce_scatter_block(in, out, count_of(n), MPI_FLOAT, MPI_SUM, t->comm, &r);
  finish(t, &r, (long)o->size * n, (double)(o->size - 1) * (double)n, t0, "reduce-scatter");
}

/* Ring steps. Only the time inside these calls is exposed:
 * between ring_begin and ring_end the caller computes. */
static void tp_ring_begin(const rp_tp_ops *o, const float *send, float *recv, long n, int k) {
  rp_tp *t = o->ctx;
  double t0 = rp_now();
  int P = o->size, me = o->rank, cnt = count_of(n);
  MPI_Irecv(recv, cnt, MPI_FLOAT, (me + P - 1) % P, k, t->comm, &t->ring[1]);
  MPI_Isend(send, cnt, MPI_FLOAT, (me + 1) % P, k, t->comm, &t->ring[0]);
  if (k == 0) t->st.calls++;
  t->st.bytes += 4.0 * (double)n;
  t->st.wait_s += rp_now() - t0;
}

static void tp_ring_progress(const rp_tp_ops *o) {
  rp_tp *t = o->ctx;
  int done = 0;
  double t0 = rp_now();
  MPI_Testall(2, t->ring, &done, MPI_STATUSES_IGNORE);
  t->st.wait_s += rp_now() - t0;
}

static void tp_ring_end(const rp_tp_ops *o) {
  rp_tp *t = o->ctx;
  double t0 = rp_now();
  rp_waitall(2, t->ring, t->comm, -1, "tensor-parallel all-gather ring step");
  t->st.wait_s += rp_now() - t0;
}

rp_status rp_tp_create(rp_tp **out, MPI_Comm tp_comm, int overlap) {
  rp_tp *t = calloc(1, sizeof *t);
  if (!t) return rp_err(RP_ENOMEM, "out of memory");
  t->comm = tp_comm;
  MPI_Comm_size(tp_comm, &t->ops.size);
  MPI_Comm_rank(tp_comm, &t->ops.rank);
  t->ops.all_reduce = tp_all_reduce;
  t->ops.all_gather = tp_all_gather;
  t->ops.reduce_scatter = tp_reduce_scatter;
  if (overlap) {
    t->ops.ring_begin = tp_ring_begin;
    t->ops.ring_progress = tp_ring_progress;
    t->ops.ring_end = tp_ring_end;
  }
  t->ops.ctx = t;
  t->ring[0] = t->ring[1] = MPI_REQUEST_NULL;
  *out = t;
  return RP_OK;
}

void rp_tp_destroy(rp_tp *t) { free(t); }

const rp_tp_ops *rp_tp_ops_of(const rp_tp *t) { return &t->ops; }

void rp_tp_begin_step(rp_tp *t) { t->st = (rp_tp_stats){0}; }

void rp_tp_end_step(rp_tp *t) { t->last = t->st; }

rp_tp_stats rp_tp_last_step(const rp_tp *t) { return t->last; }
