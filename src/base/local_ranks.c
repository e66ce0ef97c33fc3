/* How many ranks of this job share this node: threads per rank and thread
 * pinning depend on it. One answer for every launcher: the MPI library's own
 * count (MPI-3 MPI_Comm_split_type with MPI_COMM_TYPE_SHARED, set by the grid
 * at start-up) when MPI is running, else what the launcher exported: Open
 * MPI's OMPI_COMM_WORLD_LOCAL_SIZE, or Slurm's SLURM_NTASKS_PER_NODE (set with
 * --ntasks-per-node) and SLURM_TASKS_PER_NODE ("2(x3),1": this node's count
 * is the entry SLURM_NODEID falls in). */
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_util.h"

static int g_local_ranks; /* 0: not told */

void rp_set_local_ranks(int n) { g_local_ranks = n > 0 ? n : 0; }

static int positive(const char *s) {
  int n = s ? atoi(s) : 0;
  return n > 0 ? n : 0;
}

/* "2(x3),1" and node id 3 -> 1: entries are counts, "(xK)" repeats K times. */
static int slurm_tasks_on_node(const char *spec, int node) {
  const char *p = spec;
  while (p && *p) {
    char *end;
    long count = strtol(p, &end, 10), reps = 1;
    if (end == p || count <= 0) return 0;
    if (strncmp(end, "(x", 2) == 0) {
      reps = strtol(end + 2, &end, 10);
      if (reps <= 0 || *end != ')') return 0;
      end++;
    }
    if (node < reps) return (int)count;
    node -= (int)reps;
    p = *end == ',' ? end + 1 : NULL;
  }
  return 0;
}

int rp_local_ranks_from_env(void) {
  int n = positive(getenv("OMPI_COMM_WORLD_LOCAL_SIZE"));
  if (!n) n = positive(getenv("SLURM_NTASKS_PER_NODE"));
  const char *spec = getenv("SLURM_TASKS_PER_NODE");
  if (!n && spec) n = slurm_tasks_on_node(spec, positive(getenv("SLURM_NODEID")));
  return n ? n : 1;
}

int rp_local_ranks(void) { return g_local_ranks ? g_local_ranks : rp_local_ranks_from_env(); }
