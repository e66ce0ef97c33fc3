/* Helpers for the context-parallel MPI tests, beside test_arrays.h's arrays,
 * pools and worst-difference check: the agreement step that keeps every
 * rank's cmocka verdict the same (a check that failed on one rank only would
 * leave the others waiting in the next collective). */
#ifndef CP_TEST_UTIL_H
#define CP_TEST_UTIL_H

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"
#include "../test_arrays.h"

#define CP_ATOL 1e-5  /* cp vs single rank, fp32, absolute (the tolerance) */

/* The largest value over the ranks of comm (NaN-safe: NaN becomes +inf). */
static inline double cpt_agree_max(double x, MPI_Comm comm) {
  double in = isnan(x) ? INFINITY : x, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_MAX, comm);
  return out;
}

static inline int cpt_agree_min_int(int x, MPI_Comm comm) {
  int out = 0;
  MPI_Allreduce(&x, &out, 1, MPI_INT, MPI_MIN, comm);
  return out;
}

static inline int cpt_agree_max_int(int x, MPI_Comm comm) {
  int out = 0;
  MPI_Allreduce(&x, &out, 1, MPI_INT, MPI_MAX, comm);
  return out;
}

/* MPI up, the world's size and rank, and the agreed verdict of a cmocka group
 * (include after <cmocka.h>): the body of every cp test's main. */
#define CPT_MAIN(tests, P, rank)                                  \
  do {                                                            \
    if (rp_mpi_init(&argc, &argv) != RP_OK) {                     \
      fprintf(stderr, "%s\n", rp_errmsg());                       \
      return 1;                                                   \
    }                                                             \
    P = rp_mpi_world_size();                                      \
    rank = rp_mpi_world_rank();                                   \
    int failed_ = cmocka_run_group_tests(tests, NULL, NULL);      \
    failed_ = cpt_agree_max_int(failed_, MPI_COMM_WORLD);         \
    rp_mpi_finalize();                                            \
    return failed_ ? 1 : 0;                                       \
  } while (0)

#endif
