/* Every generator at every (p, m) of a grid, on the real executor: a schedule
 * is either refused by rp_schedule_make with RP_EINVAL and a message (the same
 * on every rank), or it runs -- no hang (the watched waits time out and abort),
 * and the same loss and gradient norm as GPipe computes for that (p, m), to
 * 1e-5 relative (the micro-batches add up in other orders).
 * usage: mpirun -n 4 schedule_grid; prints one line per cell. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_pipeline.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_wait.h"

enum { B = 1, T = 8, L = 8 };

typedef struct {
  double loss, gnorm2; /* loss sum (head's rank) and squared gradient norm, over the pipeline */
} outcome;

/* One step of schedule s on this pipeline rank with tiny real chunks. */
static rp_status run_cell(const rp_schedule *s, MPI_Comm comm, rp_pool *pool, outcome *out) {
  int rank, p = s->p, v = s->v, m = s->m, N = B * T;
  MPI_Comm_rank(comm, &rank);
  rp_gpt_config cfg = {.L = L, .C = 16, .NH = 2, .T = T, .V = 64, .Vp = rp_pad_vocab(64)};
  rp_stage_spec stages[2 * L];
  RP_TRY(rp_assign_stages(L, p * v, "", stages));
  rp_chunk ch[2];
  rp_chunk *list[2];
  memset(ch, 0, sizeof ch);
  rp_status st = RP_OK;
  for (int c = 0; c < v && st == RP_OK; c++) {
    st = rp_chunk_init(&ch[c], &cfg, &stages[rp_schedule_stage(s, rank, c)]);
    if (st == RP_OK) rp_chunk_init_weights(&ch[c], 7);
    list[c] = &ch[c];
  }
  int32_t *tok = malloc((size_t)m * N * sizeof *tok), *tgt = malloc((size_t)m * N * sizeof *tgt);
  int32_t *pos = malloc((size_t)m * N * sizeof *pos);
  for (int i = 0; tok && tgt && pos && i < m * N; i++) {
    tok[i] = (i * 7 + 3) % cfg.V;
    tgt[i] = (i * 11 + 5) % cfg.V;
    pos[i] = i % T;
  }
  rp_exec exec = {.pool = pool, .attn = rp_attn_reference()};
  rp_pipeline *pipe = NULL;
  double local[2] = {0, 0};
  if (st == RP_OK && (!tok || !tgt || !pos)) st = rp_err(RP_ENOMEM, "out of memory");
  if (st == RP_OK) {
    rp_pipeline_cfg pc = {.sched = s, .comm = comm, .chunks = list, .exec = &exec, .B = B, .T = T};
    st = rp_pipeline_create(&pipe, &pc);
  }
  if (st == RP_OK) st = rp_pipeline_run(pipe, tok, tgt, pos, 1.0f / (m * N), &local[0]);
  for (int c = 0; st == RP_OK && c < v; c++)
    local[1] += rp_sumsq(ch[c].grads, (long)ch[c].num_params, pool);
  double sum[2];
  MPI_Allreduce(local, sum, 2, MPI_DOUBLE, MPI_SUM, comm);
  *out = (outcome){sum[0], sum[1]};
  rp_pipeline_destroy(pipe);
  for (int c = 0; c < v; c++) rp_chunk_free(&ch[c]);
  free(tok), free(tgt), free(pos);
  return st;
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-5 * fabs(b) + 1e-12; }

/* The grid for one p; returns the failures. */
static int grid_for(int p, MPI_Comm comm, rp_pool *pool, int me) {
  const int ms[] = {1, p - 1, p, p + 1, 2 * p - 1, 2 * p, 3 * p};
  int fails = 0;
  char names[256];
  snprintf(names, sizeof names, "%s", rp_schedule_names);
  for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
    int m = ms[k];
    if (m < 1 || (k > 0 && m == ms[k - 1])) continue;
    /* GPipe runs at every m: the reference for the rest */
    outcome ref = {NAN, NAN};
    rp_schedule *g = NULL;
    if (rp_schedule_make("gpipe", p, 1, m, &g) != RP_OK || run_cell(g, comm, pool, &ref) != RP_OK) {
      if (me == 0) printf("FAIL gpipe p=%d m=%d: %s\n", p, m, rp_errmsg());
      fails++;
    }
    rp_schedule_free(g);
    char list[256], *save = NULL;
    snprintf(list, sizeof list, "%s", names);
    for (char *name = strtok_r(list, "|", &save); name; name = strtok_r(NULL, "|", &save)) {
      int v = rp_schedule_generator_chunks(name);
      if (v == 0) v = 2;
      rp_schedule *s = NULL;
      rp_errclear();
      rp_status st = rp_schedule_make(name, p, v, m, &s);
      int mine = st, lo, hi;
      MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, comm);
      MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, comm);
      if (st != RP_OK) {
        int ok = lo == hi && st == RP_EINVAL && rp_errmsg()[0];
        if (me == 0)
          printf("%s %s p=%d v=%d m=%d: refused: %s\n", ok ? "ok" : "FAIL", name, p, v, m,
                 rp_errmsg());
        fails += !ok;
        continue;
      }
      outcome o;
      st = run_cell(s, comm, pool, &o);
      int ok = st == RP_OK && close_to(o.loss, ref.loss) && close_to(o.gnorm2, ref.gnorm2);
      if (me == 0)
        printf("%s %s p=%d v=%d m=%d: ran, loss %.9g (gpipe %.9g), |g|^2 %.9g (gpipe %.9g)\n",
               ok ? "ok" : "FAIL", name, p, v, m, o.loss, ref.loss, o.gnorm2, ref.gnorm2);
      fails += !ok;
      rp_schedule_free(s);
    }
  }
  return fails;
}

int main(int argc, char **argv) {
  if (rp_mpi_init(&argc, &argv) != RP_OK) return 1;
  rp_wait_set_timeout(20); /* a hang becomes a named abort, well inside the test's timeout */
  int world, size, fails = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  rp_pool *pool;
  if (rp_pool_create(&pool, 1, 0) != RP_OK) return 1;
  for (int p = 2; p <= size; p++) {
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, world < p ? 0 : MPI_UNDEFINED, world, &comm);
    if (comm != MPI_COMM_NULL) {
      fails += grid_for(p, comm, pool, world);
      MPI_Comm_free(&comm);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  int total;
  MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (world == 0) printf("%d failure(s)\n", total);
  rp_pool_destroy(pool);
  rp_mpi_finalize();
  return total != 0;
}
