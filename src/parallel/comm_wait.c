/* Watched MPI waits (see rp_wait.h): MPI_Test polling against a deadline. */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ringpipe/rp_base.h"
#include "ringpipe/rp_util.h"
#include "ringpipe/rp_wait.h"

static double timeout_s;
static int current_step;

void rp_wait_set_timeout(double seconds) { timeout_s = seconds > 0 ? seconds : 0; }
double rp_wait_timeout(void) { return timeout_s; }
void rp_wait_set_step(int step) { current_step = step; }

/* "rank 3" for a peer, "ranks 0,1,2,3" for a collective (world ranks). */
static void describe_peer(char *buf, size_t cap, MPI_Comm comm, int peer) {
  MPI_Group g, world;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int n = 0;
  MPI_Group_size(g, &n);
  if (peer >= 0) {
    int w = -1;
    MPI_Group_translate_ranks(g, 1, &peer, world, &w);
    snprintf(buf, cap, "rank %d", w);
  } else {
    size_t o = (size_t)snprintf(buf, cap, "the group of ranks ");
    for (int i = 0; i < n && i < 16 && o < cap; i++) {
      int w = -1;
      MPI_Group_translate_ranks(g, 1, &i, world, &w);
      o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? "," : "", w);
    }
    if (n > 16 && o < cap) snprintf(buf + o, cap - o, ",...");
  }
  MPI_Group_free(&g);
  MPI_Group_free(&world);
}

static _Noreturn void timed_out(MPI_Comm comm, int peer, double waited, const char *what,
                                va_list ap) {
  char action[256], who[160];
  vsnprintf(action, sizeof action, what, ap);
  describe_peer(who, sizeof who, comm, peer);
  rp_fatal("no progress for %.1f s (--comm-timeout %g) waiting on %s with %s at step %d: "
           "%s hung or dead; aborting the job (raise --comm-timeout if a step legitimately "
           "takes longer)",
           waited, timeout_s, action, who, current_step,
           peer >= 0 ? "that rank is" : "one of them is");
}

static void wait_some(int n, MPI_Request *r, MPI_Comm comm, int peer, const char *what,
                      va_list ap) {
  if (timeout_s <= 0) {
    MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
    return;
  }
  double t0 = rp_now();
  int done = 0;
  for (;;) {
    MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    double waited = rp_now() - t0;
    if (waited > timeout_s) timed_out(comm, peer, waited, what, ap);
    sched_yield(); /* the core may be shared with the peer we wait for */
  }
}

void rp_wait(MPI_Request *r, MPI_Comm comm, int peer, const char *what, ...) {
  if (*r == MPI_REQUEST_NULL) return;
  va_list ap;
  va_start(ap, what);
  wait_some(1, r, comm, peer, what, ap);
  va_end(ap);
}

void rp_waitall(int n, MPI_Request *r, MPI_Comm comm, int peer, const char *what, ...) {
  if (n <= 0) return;
  va_list ap;
  va_start(ap, what);
  wait_some(n, r, comm, peer, what, ap);
  va_end(ap);
}

void rp_allreduce_watched(void *buf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                          const char *what) {
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, op, comm, &r);
  rp_wait(&r, comm, -1, "%s", what);
}

void rp_test_hang_point(void) {
  static int rank = -2, at = -1;
  if (rank == -2) {
    const char *e = getenv("RINGPIPE_TEST_HANG");
    rank = -1;
    if (e && sscanf(e, "%d:%d", &rank, &at) != 2) rank = -1;
  }
  if (rank < 0 || current_step != at) return;
  int me = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (me != rank) return;
  fprintf(stderr, "ringpipe: RINGPIPE_TEST_HANG: rank %d hangs at step %d\n", rank, at);
  fflush(stderr);
  for (;;) pause();
}
