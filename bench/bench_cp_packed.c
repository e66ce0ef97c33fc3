/* Context parallelism on packed rows (not a test): run under mpirun, e.g.
 *
 *   mpirun -n 2 --oversubscribe bench/bench_cp_packed --seq 16384
 *   bench/bench_cp_packed --data DIR --seq 4096     (real lengths of prepared shards)
 *
 * The rows are the seeded multimodal-like mix (rp_docs_mix_default: 3% of the
 * documents 4096..8192 tokens, the rest 64..512) or, with --data, the packed
 * documents of DIR's train shards (their .docs indexes).
 *
 * Table 1, balance (counted, for P = 2, 4, 8 whatever the world size): visible
 * (query, key) pairs per rank, max/mean over the ranks, for the whole-row
 * zigzag, the per-document zigzag (each document padded to a multiple of 2P:
 * the padding it costs) and the cost-balanced assignment. Target: balanced
 * <= 1.05 where the whole-row zigzag is far worse.
 *
 * Table 2, measured at P = world size: per layout, ring (overlap) and Ulysses:
 * counted flops max/mean, time in attention (worst rank), exposed communication
 * (main-thread wait / time in attention), and the bytes one rank sends per layer
 * (forward + backward) beside the formula: ring 3 (P-1) B (T/P) 2C 4 bytes
 * (K/V twice, dK/dV once), Ulysses (P-1) B (T/P) (6 + 5 + 3) C/P 4 bytes plus
 * the L rows (see formula_bytes).
 *
 * Table 3, one rank: tokens/s of flash forward+backward with the documents'
 * masks against full causal attention on the same rows.
 *
 * --svg FILE draws a small packed row (T = 16P * 16) under the three layouts.
 * Times are wall clock on a shared machine: compare the ratios of one run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"
#include "bench_cp_util.h"

typedef struct {
  int T, B, C, NH, threads, iters, seed;
  const char *data, *svg;
} opts;

static int parse(opts *o, int argc, char **argv) {
  *o = (opts){.T = 16384, .B = 1, .C = 128, .NH = 8, .threads = 1, .iters = 2, .seed = 1};
  for (int i = 1; i < argc; i++) {
    int *dst = bcp_shape_opt(argv[i], &o->T, &o->B, &o->C, &o->NH, &o->threads, &o->iters);
    if (i + 1 < argc && !strcmp(argv[i], "--data")) {
      o->data = argv[++i];
      continue;
    }
    if (i + 1 < argc && !strcmp(argv[i], "--svg")) {
      o->svg = argv[++i];
      continue;
    }
    if (!strcmp(argv[i], "--seed")) dst = &o->seed;
    if (!dst || i + 1 >= argc)
      return rp_err(RP_EINVAL, "unknown or incomplete option '%s'; use --seq --batch --channels "
                    "--heads --threads --iters --seed N, --data DIR, --svg FILE", argv[i]);
    *dst = atoi(argv[++i]);
  }
  if (o->B < 1 || o->C < 1 || o->NH < 1 || o->C % o->NH || o->threads < 1 || o->iters < 1 ||
      o->T < 16 || o->T % 16 != 0)
    return rp_err(RP_EINVAL, "need --batch, --threads, --iters >= 1, --heads dividing --channels "
                  "and --seq a multiple of 16 (2P for P = 2, 4, 8)");
  return RP_OK;
}

/* The batch's documents: the mix, or the packed documents of --data. */
static rp_status load_docs(rp_docs *d, const opts *o) {
  RP_TRY(rp_docs_init(d, o->B, o->T));
  if (!o->data) {
    rp_docs_mix mix = rp_docs_mix_default();
    return rp_docs_fill_mix(d, &mix, (uint64_t)o->seed);
  }
  rp_loader *l;
  RP_TRY(rp_loader_open(&l, o->data, "train", o->B, o->T, 1, 0, 0, 1));
  rp_status s = rp_loader_set_pack(l, -1, 1);
  int32_t *buf = s == RP_OK ? malloc(sizeof(int32_t) * 2 * (size_t)o->B * o->T) : NULL;
  if (s == RP_OK && !buf) s = RP_ENOMEM;
  if (s == RP_OK) s = rp_loader_next_packed(l, buf, buf + (size_t)o->B * o->T, d);
  free(buf);
  rp_loader_close(l);
  return s;
}

/* The per-document zigzag's rows: every document padded to a multiple of 2P. */
static rp_status padded_docs(rp_docs *out, const rp_docs *d, int P) {
  long Tmax = 0;
  for (int b = 0; b < d->B; b++) {
    const int32_t *cu = rp_docs_row(d, b);
    long n = 0;
    for (int i = 0; i < d->ndocs[b]; i++) n += RP_CEIL_DIV(cu[i + 1] - cu[i], 2 * P) * 2 * P;
    Tmax = n > Tmax ? n : Tmax;
  }
  RP_TRY(rp_docs_init(out, d->B, (int)Tmax));
  int32_t *lens = malloc(sizeof *lens * (size_t)(d->T + 1));
  if (!lens) return RP_ENOMEM;
  rp_status s = RP_OK;
  for (int b = 0; b < d->B && s == RP_OK; b++) {
    const int32_t *cu = rp_docs_row(d, b);
    int n = 0;
    long used = 0;
    for (int i = 0; i < d->ndocs[b]; i++, n++)
      used += lens[n] = RP_CEIL_DIV(cu[i + 1] - cu[i], 2 * P) * 2 * P;
    if (used < Tmax) lens[n++] = (int32_t)(Tmax - used);   /* rows end alike */
    s = rp_docs_set_row(out, b, lens, n);
  }
  free(lens);
  return s;
}

static double work_ratio(const rp_docs *d) {
  double mx = 0, sum = 0;
  for (int r = 0; r < d->cp; r++) {
    double w = rp_cp_docs_work(d, r);
    mx = w > mx ? w : mx;
    sum += w;
  }
  return sum > 0 ? mx / (sum / d->cp) : 0;
}

static const char *lay_name[3] = {"whole-row zigzag", "per-document zigzag", "cost-balanced"};
static const rp_cp_place lay_place[3] = {RP_CP_PLACE_ROW, RP_CP_PLACE_DOC_ZIGZAG,
                                         RP_CP_PLACE_BALANCED};
static const rp_cp_layout lay_base[3] = {RP_CP_ZIGZAG, RP_CP_ZIGZAG, RP_CP_CONTIGUOUS};

/* The rows of layout k placed over P ranks (doc-zigzag: the padded ones). */
static rp_status placed(rp_docs *out, const rp_docs *d, int k, int P) {
  if (lay_place[k] == RP_CP_PLACE_DOC_ZIGZAG) {
    RP_TRY(padded_docs(out, d, P));
  } else {
    RP_TRY(rp_docs_init(out, d->B, d->T));
    for (int b = 0; b < d->B; b++) {
      const int32_t *cu = rp_docs_row(d, b);
      int32_t *lens = malloc(sizeof *lens * (size_t)d->ndocs[b]);
      for (int i = 0; i < d->ndocs[b]; i++) lens[i] = cu[i + 1] - cu[i];
      rp_docs_set_row(out, b, lens, d->ndocs[b]);
      free(lens);
    }
  }
  return rp_cp_docs_place(out, lay_base[k], lay_place[k], P);
}

static void table_balance(const rp_docs *d) {
  printf("Table 1: attention work per rank (visible pairs), max/mean, and padding\n");
  printf("| P | whole-row zigzag | per-document zigzag | padding (doc-zigzag) | cost-balanced |\n"
         "|---|---|---|---|---|\n");
  for (int P = 2; P <= 8; P *= 2) {
    double ratio[3] = {0}, pad = 0;
    for (int k = 0; k < 3; k++) {
      rp_docs p;
      if (placed(&p, d, k, P) != RP_OK) {
        printf("(P=%d %s: %s)\n", P, lay_name[k], rp_errmsg());
        continue;
      }
      ratio[k] = work_ratio(&p);
      if (k == 1) pad = (double)(p.T - d->T) / d->T;
      rp_docs_free(&p);
    }
    printf("| %d | %.3f | %.3f | %.1f%% | %.3f |\n", P, ratio[0], ratio[1], 100 * pad, ratio[2]);
  }
  printf("\n");
}

enum { M_FLOPS, M_TIME, M_WAIT, M_BYTES, M_N };

/* iters forward+backward passes of one backend on a placed batch: m gets this
 * rank's per-pass flops, time, wait and bytes. */
static void measure(rp_attn_backend *a, const rp_docs *d, const opts *o, rp_pool *pool,
                    double *m) {
  bcp_passes(a, d, d->B, d->T / d->cp, o->C, o->NH, o->iters, pool);
  rp_cp_stats fw, bw;
  rp_cp_get_stats(a, &fw, &bw);
  m[M_FLOPS] = (fw.flops + bw.flops) / o->iters;
  m[M_TIME] = (fw.total_s + bw.total_s) / o->iters;
  m[M_WAIT] = (fw.wait_s + bw.wait_s) / o->iters;
  m[M_BYTES] = (fw.bytes_sent + bw.bytes_sent) / o->iters;
}

/* What one rank sends per layer, forward + backward, by the backends' message
 * sizes: the ring passes K/V (2C per row) P-1 times forward and again
 * backward with the dK/dV accumulators; Ulysses' all-to-alls keep (P-1)/P of
 * their segments: 3C/P per row there and back forward, 5C/P + L and 3C/P
 * backward. */
static double formula_bytes(int ring, const rp_docs *d, const opts *o) {
  const double P = d->cp, rows = (double)d->B * d->T / P, C = o->C, NHl = (double)o->NH / P;
  if (ring) return 3 * (P - 1) * rows * 2 * C * 4;
  double fwd = 2 * (P - 1) * rows * 3 * (C / P);
  double bwd = (P - 1) * (rows * 5 * (C / P) + rows * NHl + rows * 3 * (C / P));
  return (fwd + bwd) * 4;
}

static void table_measured(const rp_docs *d, const opts *o, rp_pool *pool) {
  const int P = rp_mpi_world_size(), rank = rp_mpi_world_rank();
  if (rank == 0)
    printf("Table 2: measured at P = %d (B=%d T=%d C=%d NH=%d, %d thread(s)/rank)\n"
           "| layout | impl | flops max/mean | ms per fwd+bwd (worst) | exposed comm "
           "(worst) | MiB sent per layer: measured / formula |\n|---|---|---|---|---|---|\n",
           P, o->B, o->T, o->C, o->NH, o->threads);
  for (int k = 0; k < 3; k++)
    for (int ring = 1; ring >= 0; ring--) {
      rp_docs p;
      rp_status s = placed(&p, d, k, P);
      rp_attn_backend *a = NULL;
      if (s == RP_OK)
        s = ring ? rp_cp_ring_create(&a, MPI_COMM_WORLD, lay_base[k], p.T, 1)
                 : rp_cp_ulysses_create(&a, MPI_COMM_WORLD, lay_base[k], p.T, o->NH);
      double m[M_N] = {0};
      if (rp_grid_agree(MPI_COMM_WORLD, s) != RP_OK) {
        if (rank == 0) printf("| %s | %s | skipped: %s |\n", lay_name[k], ring ? "ring" : "ulysses", rp_errmsg());
      } else {
        measure(a, &p, o, pool, m);
        double *all = calloc((size_t)P * M_N, sizeof(double));
        MPI_Gather(m, M_N, MPI_DOUBLE, all, M_N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
          double fmx = 0, fsum = 0, tmx = 0, exp_mx = 0, bytes = 0;
          for (int r = 0; r < P; r++) {
            const double *x = all + r * M_N;
            fmx = fmax(fmx, x[M_FLOPS]), fsum += x[M_FLOPS], tmx = fmax(tmx, x[M_TIME]);
            exp_mx = fmax(exp_mx, x[M_TIME] > 0 ? x[M_WAIT] / x[M_TIME] : 0);
            bytes = fmax(bytes, x[M_BYTES]);
          }
          printf("| %s | %s | %.3f | %.1f | %.1f%% | %.2f / %.2f |\n", lay_name[k],
                 ring ? "ring" : "ulysses", fmx / (fsum / P), 1e3 * tmx, 100 * exp_mx,
                 bytes / (1 << 20), formula_bytes(ring, &p, o) / (1 << 20));
        }
        free(all);
      }
      rp_attn_destroy(a);
      rp_docs_free(&p);
    }
  if (rank == 0) printf("\n");
}

/* Flash fwd+bwd over the rows with and without the document masks, one rank. */
static void table_masked(const rp_docs *d, const opts *o, rp_pool *pool) {
  const int B = d->B, T = d->T, C = o->C, NH = o->NH;
  long rows = (long)B * T;
  float *qkv = malloc(sizeof(float) * rows * 3 * C), *dout = malloc(sizeof(float) * rows * C);
  float *out = malloc(sizeof(float) * rows * C), *lse = malloc(sizeof(float) * B * NH * T);
  float *dqkv = calloc((size_t)rows * 3 * C, sizeof(float));
  int32_t *kr = malloc(sizeof(int32_t) * 2 * rows);
  if (!qkv || !dout || !out || !lse || !dqkv || !kr) rp_fatal("bench_cp_packed: out of memory");
  bcp_fill(qkv, rows * 3 * C, 3);
  bcp_fill(dout, rows * C, 4);
  rp_docs_self_ranges(d, kr);
  double best[2] = {INFINITY, INFINITY};
  for (int it = 0; it <= o->iters; it++)
    for (int masked = 0; masked < 2; masked++) {
      double t0 = rp_now();
      /* NULL: the automatic flash settings */
      rp_status s = masked ? rp_flash_forward_ranges(out, lse, qkv, B, T, C, NH, kr, NULL, pool)
                           : rp_flash_forward(out, lse, qkv, B, T, C, NH, 1, NULL, pool);
      if (s == RP_OK)
        s = masked
                ? rp_flash_backward_ranges(dqkv, dout, qkv, out, lse, B, T, C, NH, kr, NULL, pool)
                : rp_flash_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, 1, NULL, pool);
      if (s != RP_OK) rp_fatal("bench_cp_packed: %s", rp_errmsg());
      double dt = rp_now() - t0;
      if (it > 0 && dt < best[masked]) best[masked] = dt;   /* it 0 warms up */
    }
  double full_pairs = (double)B * T * (T + 1) / 2;
  printf("Table 3: flash forward+backward on the same %d x %d rows, one rank, %d thread(s)\n"
         "| attention | visible pairs | ms (best of %d) | tokens/s |\n|---|---|---|---|\n"
         "| full causal | %.3g | %.1f | %.0f |\n| document-masked | %.3g (%.1f%%) | %.1f | %.0f |\n"
         "speed-up %.2fx for %.1fx fewer pairs\n\n",
         B, T, rp_pool_size(pool), o->iters, full_pairs, 1e3 * best[0], rows / best[0],
         rp_docs_pairs(d), 100 * rp_docs_pairs(d) / full_pairs, 1e3 * best[1], rows / best[1],
         best[0] / best[1], full_pairs / rp_docs_pairs(d));
  free(qkv), free(dout), free(out), free(lse), free(dqkv), free(kr);
}

/* A small row of the mix (scaled down 16x so that the picture is legible). */
static void draw(const char *path, int P) {
  rp_docs d;
  rp_docs_mix mix = {.short_min = 4, .short_max = 32, .long_min = 256, .long_max = 512,
                     .long_frac = 0.08};
  const int T = 16 * 16 * P / 2;
  rp_docs p[3];
  const rp_docs *pp[3];
  const char *names[3];
  if (rp_docs_init(&d, 1, T) != RP_OK || rp_docs_fill_mix(&d, &mix, 7) != RP_OK)
    rp_fatal("bench_cp_packed: %s", rp_errmsg());
  for (int k = 0; k < 3; k++) {
    if (placed(&p[k], &d, k, P) != RP_OK) rp_fatal("bench_cp_packed: %s", rp_errmsg());
    pp[k] = &p[k];
    names[k] = lay_name[k];
  }
  if (rp_cp_docs_svg(path, pp, names, 3, T / 32) != RP_OK) rp_fatal("%s", rp_errmsg());
  printf("wrote %s (T=%d, P=%d)\n", path, T, P);
  for (int k = 0; k < 3; k++) rp_docs_free(&p[k]);
  rp_docs_free(&d);
}

int main(int argc, char **argv) {
  if (rp_mpi_init(&argc, &argv) != RP_OK) {
    fprintf(stderr, "%s\n", rp_errmsg());
    return 1;
  }
  const int rank = rp_mpi_world_rank();
  opts o;
  rp_docs d = {0};
  rp_status s = parse(&o, argc, argv);
  if (s == RP_OK) s = load_docs(&d, &o);
  if (rp_grid_agree(MPI_COMM_WORLD, s) != RP_OK) {
    if (rank == 0) fprintf(stderr, "bench_cp_packed: %s\n", rp_errmsg());
    rp_mpi_finalize();
    return 2;
  }
  rp_pool *pool = NULL;
  if (rp_pool_create(&pool, o.threads, 0) != RP_OK) rp_fatal("bench_cp_packed: %s", rp_errmsg());
  if (rank == 0) {
    long n = 0;
    for (int b = 0; b < d.B; b++) n += d.ndocs[b];
    printf("bench_cp_packed: %s, %d row(s) of %d tokens, %ld documents, seed %d\n\n",
           o.data ? o.data : "multimodal-like mix (3% 4096..8192, else 64..512)", d.B, d.T, n,
           o.seed);
    table_balance(&d);
    if (o.svg) draw(o.svg, 4);
    table_masked(&d, &o, pool);
  }
  if (rp_mpi_world_size() > 1) table_measured(&d, &o, pool);
  rp_pool_destroy(pool);
  rp_docs_free(&d);
  rp_mpi_finalize();
  return 0;
}
