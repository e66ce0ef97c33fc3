/* MPI start-up, the fatal hook, and the dp x pp x cp x tp communicators. */
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_util.h"

static int we_initialized;

static void mpi_fatal_hook(int code) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Abort(MPI_COMM_WORLD, code);
}

rp_status rp_mpi_init(int *argc, char ***argv) {
  int up = 0;
  MPI_Initialized(&up);
  if (!up) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return rp_err(RP_EMPI, "MPI_Init_thread failed");
    if (provided < MPI_THREAD_FUNNELED)
      return rp_err(RP_EMPI, "MPI does not provide MPI_THREAD_FUNNELED (got level %d)",
                    provided);
    we_initialized = 1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  rp_set_fatal_hook(mpi_fatal_hook);
  /* ranks sharing this node, whatever launched them */
  MPI_Comm node;
  int local = 1;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
  }
  rp_set_local_ranks(local);
  if (rp_mpi_world_size() > 1) rp_log_set_rank(rp_mpi_world_rank());
  return RP_OK;
}

void rp_mpi_finalize(void) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down && we_initialized) MPI_Finalize();
}

int rp_mpi_world_rank(void) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int rp_mpi_world_size(void) {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

rp_status rp_grid_init(rp_grid *g, int pp, int cp) { return rp_grid_init_tp(g, pp, cp, 1); }

rp_status rp_grid_init_tp(rp_grid *g, int pp, int cp, int tp) {
  memset(g, 0, sizeof *g);
  g->world = MPI_COMM_WORLD;
  MPI_Comm_rank(g->world, &g->world_rank);
  MPI_Comm_size(g->world, &g->world_size);
  if (pp < 1 || cp < 1 || tp < 1 || g->world_size % (pp * cp * tp) != 0) {
    if (tp == 1)
      return rp_err(RP_EINVAL,
                    "the world size %d is not a multiple of --pp %d x --cp %d; launch "
                    "mpirun -n with a multiple of %d (dp = world / (pp x cp))",
                    g->world_size, pp, cp, pp * cp);
    return rp_err(RP_EINVAL,
                  "the world size %d is not a multiple of --pp %d x --cp %d x --tp %d; launch "
                  "mpirun -n with a multiple of %d (dp = world / (pp x cp x tp))",
                  g->world_size, pp, cp, tp, pp * cp * tp);
  }
  g->pp = pp;
  g->cp = cp;
  g->tp = tp;
  g->dp = g->world_size / (pp * cp * tp);
  g->tp_rank = g->world_rank % tp;
  int rest = g->world_rank / tp;
  g->cp_rank = rest % cp;
  g->pp_rank = (rest / cp) % pp;
  g->dp_rank = rest / (cp * pp);
  /* Colors pick the group; keys keep the group's ranks in grid order. */
  MPI_Comm_split(g->world, (g->dp_rank * pp + g->pp_rank) * tp + g->tp_rank, g->cp_rank,
                 &g->cp_comm);
  MPI_Comm_split(g->world, (g->dp_rank * cp + g->cp_rank) * tp + g->tp_rank, g->pp_rank,
                 &g->pp_comm);
  MPI_Comm_split(g->world, (g->pp_rank * cp + g->cp_rank) * tp + g->tp_rank, g->dp_rank,
                 &g->dp_comm);
  MPI_Comm_split(g->world, g->pp_rank * tp + g->tp_rank, g->dp_rank * cp + g->cp_rank,
                 &g->dpcp_comm);
  MPI_Comm_split(g->world, rest, g->tp_rank, &g->tp_comm);
  return RP_OK;
}

void rp_grid_free(rp_grid *g) {
  MPI_Comm *c[] = {&g->pp_comm, &g->cp_comm, &g->dp_comm, &g->dpcp_comm, &g->tp_comm};
  for (size_t i = 0; i < sizeof c / sizeof *c; i++)
    if (*c[i] != MPI_COMM_NULL && *c[i] != 0) MPI_Comm_free(c[i]);
}

rp_status rp_grid_agree(MPI_Comm comm, rp_status local) {
  int mine = (int)local, worst = 0, rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MIN, comm);
  if (worst == RP_OK) return RP_OK;
  /* The lowest rank that saw the worst status tells everyone its message. */
  int teller = mine == worst ? rank : 1 << 30, first = 0;
  MPI_Allreduce(&teller, &first, 1, MPI_INT, MPI_MIN, comm);
  char msg[1024];
  strncpy(msg, rp_errmsg(), sizeof msg - 1);
  msg[sizeof msg - 1] = '\0';
  MPI_Bcast(msg, sizeof msg, MPI_CHAR, first, comm);
  rp_err((rp_status)worst, "%s", msg);
  return (rp_status)worst;
}
