/* Shared by the context-parallel benchmarks (bench_cp.c, bench_cp_packed.c):
 * random inputs and the timed forward+backward passes of one backend. */
#ifndef BENCH_CP_UTIL_H
#define BENCH_CP_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_util.h"

static inline void bcp_fill(float *x, long n, uint64_t seed) {
  rp_rng r;
  rp_rng_seed(&r, seed);
  for (long i = 0; i < n; i++) x[i] = 2.0f * rp_rng_uniform(&r) - 1.0f;
}

/* The shape option named by arg (--seq --batch --channels --heads --threads
 * --iters), or NULL. */
static inline int *bcp_shape_opt(const char *arg, int *T, int *B, int *C, int *NH, int *threads,
                                 int *iters) {
  static const char *names[6] = {"--seq", "--batch", "--channels", "--heads", "--threads",
                                 "--iters"};
  int *dst[6] = {T, B, C, NH, threads, iters};
  for (int i = 0; i < 6; i++)
    if (!strcmp(arg, names[i])) return dst[i];
  return NULL;
}

/* iters forward+backward passes of a on random B x Tl rows (docs: the packed
 * batch, or NULL), after one warm-up pass; the backend's statistics cover the
 * timed passes only. Fatal on failure (a benchmark, every rank alike). */
static inline void bcp_passes(rp_attn_backend *a, const rp_docs *docs, int B, int Tl, int C,
                              int NH, int iters, rp_pool *pool) {
  long rows = (long)B * Tl;
  float *qkv = malloc(sizeof(float) * rows * 3 * C), *dout = malloc(sizeof(float) * rows * C);
  float *out = malloc(sizeof(float) * rows * C), *lse = malloc(sizeof(float) * B * NH * Tl);
  float *dqkv = calloc((size_t)rows * 3 * C, sizeof(float));
  if (!qkv || !dout || !out || !lse || !dqkv) rp_fatal("cp benchmark: out of memory");
  bcp_fill(qkv, rows * 3 * C, 1 + rp_mpi_world_rank());
  bcp_fill(dout, rows * C, 100 + rp_mpi_world_rank());
  rp_attn_batch ab;
  if (rp_attn_prepare(a, &ab, B, Tl, C, NH, docs) != RP_OK)
    rp_fatal("cp benchmark: %s", rp_errmsg());
  for (int it = -1; it < iters; it++) {   /* iteration -1 warms up */
    if (it == 0) rp_cp_reset_stats(a);
    MPI_Barrier(MPI_COMM_WORLD);
    if (a->forward(a, &ab, out, lse, qkv, pool) != RP_OK ||
        a->backward(a, &ab, dqkv, dout, qkv, out, lse, pool) != RP_OK)
      rp_fatal("cp benchmark: %s", rp_errmsg());
  }
  free(qkv), free(dout), free(out), free(lse), free(dqkv);
}

#endif
