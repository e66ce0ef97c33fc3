/* Watched MPI waits: every place that waits on another rank goes through these,
 * so that a hung or dead peer ends the job with a message instead of a hang.
 *
 * With a timeout set (--comm-timeout SECONDS), a wait polls MPI_Test until the
 * request completes or the deadline passes; past it, rp_fatal names the action
 * (e.g. "RECV_F mb 3 chunk 0"), the peer's world rank and the training step,
 * and MPI_Abort ends every rank (exit status 3). Timeout 0 waits forever
 * (plain MPI_Wait). Only the thread that makes MPI calls may use them. */
#ifndef RP_WAIT_H
#define RP_WAIT_H

#include <mpi.h>

/* Seconds a single wait may last; 0: no limit. */
void rp_wait_set_timeout(double seconds);
double rp_wait_timeout(void);
/* The step named in a timeout message (the step being computed). */
void rp_wait_set_step(int step);

/* Waits for *r (MPI_REQUEST_NULL returns at once). peer: the rank of comm the
 * request talks to, or -1 for a collective over comm. what: printf-style
 * description, formatted only when the wait times out. */
void rp_wait(MPI_Request *r, MPI_Comm comm, int peer, const char *what, ...)
    __attribute__((format(printf, 4, 5)));
void rp_waitall(int n, MPI_Request *r, MPI_Comm comm, int peer, const char *what, ...)
    __attribute__((format(printf, 5, 6)));

/* In-place all-reduce through a watched wait (MPI_Iallreduce). */
void rp_allreduce_watched(void *buf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                          const char *what);

/* Test hook for the watchdog: with RINGPIPE_TEST_HANG=RANK:STEP in the
 * environment, world rank RANK sleeps forever when it passes this point in
 * STEP (the pipeline: before its first send; otherwise before the step's
 * forward pass). */
void rp_test_hang_point(void);

#endif
