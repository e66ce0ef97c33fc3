/* Context-parallel attention benchmark (not a test): run under mpirun, e.g.
 *
 *   mpirun -n 2 --oversubscribe bench/bench_cp --seq 2048
 *   mpirun -n 4 --oversubscribe --mca btl tcp,self bench/bench_cp --seq 4096
 *
 * Table 1, work balance: attention work per rank, max/mean over the ranks, for
 * the zigzag and contiguous layouts of the ring. Counted = the flops of the
 * visible (query, key) pairs the backend ran (forward + backward); time = the
 * rank's time in flash tiles. Target: zigzag <= 1.05, contiguous ~ (2P-1)/P.
 *
 * Table 2, exposed communication: the time the main thread waited on transfers
 * (K/V blocks, dK/dV accumulators; all-to-alls for Ulysses) as a fraction of the
 * time in the attention backend, mean and worst rank, with the ring's overlap on
 * and off. Target: <= 10% with overlap at T/P >= 1024 over shared memory.
 *
 * Times are wall clock on a shared machine: compare the ratios of one run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"
#include "bench_cp_util.h"

typedef struct {
  int T, B, C, NH, threads, iters;
} opts;

typedef struct {
  const char *name;
  int ring;              /* 1 ring, 0 Ulysses */
  rp_cp_layout layout;
  int overlap;
} variant;

/* Per-rank measurements of one variant, in the order gathered to rank 0. */
enum { M_FLOPS, M_COMPUTE, M_FWD_TOTAL, M_FWD_WAIT, M_BWD_TOTAL, M_BWD_WAIT, M_N };

static int parse(opts *o, int argc, char **argv) {
  *o = (opts){.T = 0, .B = 1, .C = 256, .NH = 4, .threads = 2, .iters = 3};
  for (int i = 1; i < argc; i++) {
    int *dst = bcp_shape_opt(argv[i], &o->T, &o->B, &o->C, &o->NH, &o->threads, &o->iters);
    if (!dst || i + 1 >= argc) {
      rp_err(RP_EINVAL, "unknown or incomplete option '%s'; use --seq --batch --channels "
             "--heads --threads --iters N", argv[i]);
      return RP_EINVAL;
    }
    *dst = atoi(argv[++i]);
  }
  int P = rp_mpi_world_size();
  if (o->T == 0) o->T = 1024 * P;
  if (o->B < 1 || o->C < 1 || o->NH < 1 || o->C % o->NH || o->threads < 1 || o->iters < 1)
    return rp_err(RP_EINVAL, "need --batch, --threads, --iters >= 1 and --heads dividing "
                  "--channels (got B=%d C=%d NH=%d threads=%d iters=%d)",
                  o->B, o->C, o->NH, o->threads, o->iters);
  return rp_cp_check(RP_CP_ZIGZAG, o->T, P);
}

/* Runs iters forward+backward passes of one variant; m[M_N] gets this rank's
 * sums. Returns nonzero (on every rank) if the backend could not be made. */
static int measure(const variant *v, const opts *o, rp_pool *pool, double *m) {
  const int P = rp_mpi_world_size(), Tl = o->T / P, B = o->B, C = o->C, NH = o->NH;
  rp_attn_backend *a = NULL;
  rp_status s = v->ring ? rp_cp_ring_create(&a, MPI_COMM_WORLD, v->layout, o->T, v->overlap)
                        : rp_cp_ulysses_create(&a, MPI_COMM_WORLD, v->layout, o->T, NH);
  if (rp_grid_agree(MPI_COMM_WORLD, s) != RP_OK) {
    if (rp_mpi_world_rank() == 0) printf("%-22s skipped: %s\n", v->name, rp_errmsg());
    if (a) rp_cp_destroy(a);
    return 1;
  }
  bcp_passes(a, NULL, B, Tl, C, NH, o->iters, pool);
  rp_cp_stats fw, bw;
  rp_cp_get_stats(a, &fw, &bw);
  m[M_FLOPS] = fw.flops + bw.flops;
  m[M_COMPUTE] = fw.compute_s + bw.compute_s;
  m[M_FWD_TOTAL] = fw.total_s;
  m[M_FWD_WAIT] = fw.wait_s;
  m[M_BWD_TOTAL] = bw.total_s;
  m[M_BWD_WAIT] = bw.wait_s;
  rp_cp_destroy(a);
  return 0;
}

static void max_mean(const double *all, int P, int k, double *mx, double *mean) {
  *mx = 0, *mean = 0;
  for (int r = 0; r < P; r++) {
    double x = all[r * M_N + k];
    *mx = x > *mx ? x : *mx;
    *mean += x / P;
  }
}

/* Exposed fraction wait/total of rank r for direction columns (wait, total). */
static double frac(const double *m, int wait, int total) {
  return m[total] > 0 ? m[wait] / m[total] : 0.0;
}

int main(int argc, char **argv) {
  if (rp_mpi_init(&argc, &argv) != RP_OK) {
    fprintf(stderr, "%s\n", rp_errmsg());
    return 1;
  }
  const int P = rp_mpi_world_size(), rank = rp_mpi_world_rank();
  opts o;
  if (rp_grid_agree(MPI_COMM_WORLD, parse(&o, argc, argv)) != RP_OK) {
    if (rank == 0) fprintf(stderr, "bench_cp: %s\n", rp_errmsg());
    rp_mpi_finalize();
    return 2;
  }
  rp_pool *pool = NULL;
  if (rp_pool_create(&pool, o.threads, 0) != RP_OK) rp_fatal("bench_cp: %s", rp_errmsg());
  const char *btl = getenv("OMPI_MCA_btl");
  if (rank == 0)
    printf("bench_cp: P=%d T=%d (T/P=%d) B=%d C=%d NH=%d HS=%d threads/rank=%d iters=%d "
           "btl=%s\n\n",
           P, o.T, o.T / P, o.B, o.C, o.NH, o.C / o.NH, o.threads, o.iters,
           btl ? btl : "(default)");

  const variant vs[] = {
      {"ring zigzag overlap", 1, RP_CP_ZIGZAG, 1},
      {"ring zigzag no-overlap", 1, RP_CP_ZIGZAG, 0},
      {"ring contig overlap", 1, RP_CP_CONTIGUOUS, 1},
      {"ring contig no-overlap", 1, RP_CP_CONTIGUOUS, 0},
      {"ulysses zigzag", 0, RP_CP_ZIGZAG, 1},
  };
  const int nv = (int)(sizeof vs / sizeof vs[0]);
  double *all = calloc((size_t)nv * P * M_N, sizeof(double));
  int *ok = calloc((size_t)nv, sizeof(int));
  for (int i = 0; i < nv; i++) {
    double m[M_N] = {0};
    ok[i] = measure(&vs[i], &o, pool, m) == 0;
    MPI_Gather(m, M_N, MPI_DOUBLE, all + (size_t)i * P * M_N, M_N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }

  if (rank == 0) {
    printf("Table 1: attention work per rank, max/mean over %d ranks (ring, overlap on)\n", P);
    printf("| layout     | visible pairs max/mean | counted flops max/mean | tile time max/mean | "
           "GFLOP/rank (mean) |\n|---|---|---|---|---|\n");
    for (int i = 0; i < nv; i += 2) {
      if (!vs[i].ring || !ok[i]) continue;
      double pmx = 0, psum = 0;
      for (int r = 0; r < P; r++) {
        double p = rp_cp_visible_pairs(vs[i].layout, o.T, P, r);
        pmx = p > pmx ? p : pmx, psum += p;
      }
      double fmx, fmean, tmx, tmean;
      const double *a = all + (size_t)i * P * M_N;
      max_mean(a, P, M_FLOPS, &fmx, &fmean);
      max_mean(a, P, M_COMPUTE, &tmx, &tmean);
      printf("| %-10s | %22.3f | %22.3f | %18.3f | %17.2f |\n", rp_cp_layout_name(vs[i].layout),
             pmx / (psum / P), fmx / fmean, tmx / tmean, fmean / o.iters / 1e9);
    }
    printf("(ideal (2P-1)/P for contiguous = %.3f)\n\n", (2.0 * P - 1) / P);

    printf("Table 2: exposed communication = main-thread wait / time in attention, mean "
           "(worst rank)\n");
    printf("| variant                | forward         | backward        | fwd+bwd         | "
           "ms per fwd+bwd (worst rank) |\n|---|---|---|---|---|\n");
    for (int i = 0; i < nv; i++) {
      if (!ok[i]) continue;
      const double *a = all + (size_t)i * P * M_N;
      double f[3] = {0}, fw[3] = {0}, tmax = 0;
      for (int r = 0; r < P; r++) {
        const double *m = a + r * M_N;
        double x[3] = {frac(m, M_FWD_WAIT, M_FWD_TOTAL), frac(m, M_BWD_WAIT, M_BWD_TOTAL),
                       (m[M_FWD_WAIT] + m[M_BWD_WAIT]) / (m[M_FWD_TOTAL] + m[M_BWD_TOTAL])};
        for (int k = 0; k < 3; k++) {
          f[k] += x[k] / P;
          fw[k] = x[k] > fw[k] ? x[k] : fw[k];
        }
        double t = m[M_FWD_TOTAL] + m[M_BWD_TOTAL];
        tmax = t > tmax ? t : tmax;
      }
      printf("| %-22s | %5.1f%% (%5.1f%%) | %5.1f%% (%5.1f%%) | %5.1f%% (%5.1f%%) | %27.1f |\n",
             vs[i].name, 100 * f[0], 100 * fw[0], 100 * f[1], 100 * fw[1], 100 * f[2],
             100 * fw[2], 1e3 * tmax / o.iters);
    }
  }
  free(all);
  free(ok);
  rp_pool_destroy(pool);
  rp_mpi_finalize();
  return 0;
}
