/* The rank grid: MPI start-up and the dp x pp x cp x tp communicators
 * everything else derives from (picotron style: one grid, one source of truth).
 *
 * World rank = (((dp_rank * pp) + pp_rank) * cp + cp_rank) * tp + tp_rank:
 * tensor-parallel peers are adjacent ranks (they talk in every layer, so they
 * share a node first), then context-parallel peers, then pipeline stages, then
 * data-parallel replicas. At tp = 1 it is the dp x pp x cp order. */
#ifndef RP_GRID_H
#define RP_GRID_H

#include <mpi.h>
#include "rp_base.h"

/* MPI_Init_thread(FUNNELED) unless MPI is already up; installs the fatal hook
 * (MPI_Abort on MPI_COMM_WORLD) and the log rank. Safe to call more than once. */
rp_status rp_mpi_init(int *argc, char ***argv);
void rp_mpi_finalize(void);
int rp_mpi_world_rank(void);
int rp_mpi_world_size(void);

typedef struct {
  int world_rank, world_size;
  int dp, pp, cp, tp;                /* group sizes */
  int dp_rank, pp_rank, cp_rank, tp_rank;
  MPI_Comm world;
  MPI_Comm pp_comm;                  /* ranks of my pipeline (same dp, cp, tp) */
  MPI_Comm cp_comm;                  /* ranks of my context ring (same dp, pp, tp) */
  MPI_Comm dp_comm;                  /* my data-parallel replicas (same pp, cp, tp) */
  MPI_Comm dpcp_comm;                /* gradient reduction group (same pp, tp) */
  MPI_Comm tp_comm;                  /* my tensor-parallel group (same dp, pp, cp) */
} rp_grid;

/* pp, cp >= 1; dp = world / (pp * cp). RP_EINVAL (same message on every rank)
 * when the world size is not a multiple of pp * cp. tp = 1. */
rp_status rp_grid_init(rp_grid *g, int pp, int cp);
/* The same with tp >= 1 tensor-parallel ranks: dp = world / (pp * cp * tp). */
rp_status rp_grid_init_tp(rp_grid *g, int pp, int cp, int tp);
void rp_grid_free(rp_grid *g);

/* Every rank agrees on a status: if any rank failed, all return the worst (most
 * negative) code, and the failing rank's message is broadcast so that rank 0 can
 * print it. Used after option parsing and file checks so that nobody hangs. */
rp_status rp_grid_agree(MPI_Comm comm, rp_status local);

#endif
