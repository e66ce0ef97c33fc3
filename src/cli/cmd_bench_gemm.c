/* `ringpipe bench gemm`: the GEMM modes on the model's own matmul shapes,
 * all together (the MFU denominator, rp_gpt_gemm_peak) and shape by shape. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_sgemm.h"
#include "ringpipe/rp_train.h"

/* The per-shape table's modes: OpenBLAS's two, the own GEMM, and auto (the
 * pool's mode unset: what training runs by default). */
enum { SHAPE_OWN = 2, SHAPE_AUTO = 3, SHAPE_MODES = 4 }; /* indices of shape_mode */
static const int shape_mode[SHAPE_MODES] = {RP_GEMM_BLAS_THREADS, RP_GEMM_POOL_SPLIT, RP_GEMM_OWN,
                                            -1};

/* Auto's rate over the mode whose path it takes, lowest and highest over the
 * rows: the same code timed twice, so the table's noise. */
typedef struct {
  double lo, hi;
} same_path_spread;

static void note_same_path(same_path_spread *sp, const double rate[SHAPE_MODES],
                           const char *auto_path) {
  for (int m = 0; m < SHAPE_AUTO; m++) {
    if (strcmp(auto_path, rp_gemm_mode_name((rp_gemm_mode)shape_mode[m])) != 0 || rate[m] <= 0)
      continue;
    const double r = rate[SHAPE_AUTO] / rate[m];
    if (sp->lo == 0 || r < sp->lo) sp->lo = r;
    if (r > sp->hi) sp->hi = r;
  }
}

/* One row: a matmul's pass in every mode (GFLOP/s), the path auto takes and
 * auto's rate over the best mode's and over the FMA peak. */
static void print_shape_row(const char *name, long IC, long OC, const char *pass,
                            const double rate[SHAPE_MODES], int have_own, const char *auto_path,
                            double fma) {
  double best = 0.0;
  printf("  %-9s %6ld x %-6ld %-8s", name, IC, OC, pass);
  for (int m = 0; m < SHAPE_MODES; m++) {
    if (m == SHAPE_OWN && !have_own) {
      printf(" %7s", "-");
      continue;
    }
    printf(" %7.1f", rate[m] / 1e9);
    /* OpenBLAS above the ISA ceiling runs kernels the ceiling forbids: not a
     * mode auto takes there while the own GEMM has a kernel */
    const int allowed = m == SHAPE_OWN || !have_own || !rp_blas_above_ceiling();
    if (m < SHAPE_AUTO && allowed && rate[m] > best) best = rate[m];
  }
  printf("  %-5s %5.3f", auto_path, best > 0 ? rate[SHAPE_AUTO] / best : 0.0);
  if (fma > 0)
    printf("  %5.3f\n", rate[SHAPE_AUTO] / fma);
  else
    printf("  %5s\n", "-"); /* no FMA probe at the scalar level */
}

/* Every matmul of a layer and the LM head, forward and backward apart, in
 * every mode: which GEMM each shape runs fastest on, and whether auto (the
 * default) takes it. */
static void print_shapes(const rp_gpt_config *cfg, int N, rp_pool *pool, int have_own,
                         double fma) {
  const long C = cfg->C;
  const struct {
    const char *name;
    long IC, OC;
  } shapes[] = {{"qkv", C, 3 * C}, {"attn proj", C, C}, {"fc", C, 4 * C},
                {"fc proj", 4 * C, C}, {"lm head", C, cfg->Vp}};
  const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
  same_path_spread sp = {0, 0};
  printf("\nper shape, N = %d rows (GFLOP/s, best of at least 3 repeats after a warm-up; auto: "
         "the path the\ndefault takes, its rate over the best mode's and over the FMA peak):\n", N);
  printf("  %-9s %15s %-8s %7s %7s %7s %7s  %-5s %5s  %5s\n", "matmul", "IC x OC      ", "pass",
         "blas", "split", "own", "auto", "auto", "/best", "/fma");
  for (int s = 0; s < nshapes; s++) {
    double fwd[SHAPE_MODES] = {0}, bwd[SHAPE_MODES] = {0};
    for (int m = 0; m < SHAPE_MODES; m++) {
      if (m == SHAPE_OWN && !have_own) continue;
      rp_pool_set_gemm_mode(pool, shape_mode[m]);
      rp_gemm_shape_rates(shapes[s].IC, shapes[s].OC, N, pool, &fwd[m], &bwd[m]);
    }
    fprintf(stderr, "  bench gemm: %s measured\n", shapes[s].name); /* the LM head takes a while */
    /* auto's paths, with the pool back at auto */
    const char *pf = rp_matmul_path(pool, N, (int)shapes[s].IC, (int)shapes[s].OC, 0);
    const char *pb = rp_matmul_path(pool, N, (int)shapes[s].IC, (int)shapes[s].OC, 1);
    print_shape_row(shapes[s].name, shapes[s].IC, shapes[s].OC, "forward", fwd, have_own, pf,
                    fma);
    print_shape_row(shapes[s].name, shapes[s].IC, shapes[s].OC, "backward", bwd, have_own, pb,
                    fma);
    note_same_path(&sp, fwd, pf);
    note_same_path(&sp, bwd, pb);
  }
  if (have_own && rp_blas_above_ceiling())
    printf("  (/best is over own alone: blas and split run OpenBLAS's %s kernels, above the "
           "ceiling %s)\n", rp_isa_name(rp_blas_core_isa()), rp_isa_name(rp_isa_active()));
  if (sp.hi > 0)
    printf("  noise: auto over the mode whose path it runs (the same code timed twice) "
           "%.3f..%.3f\n", sp.lo, sp.hi);
}

/* One mode's line: its rate and, where there is a probe, its fraction of the
 * FMA peak. */
static void print_mode(const char *label, double rate, double fma) {
  printf("  %-50s %7.1f GFLOP/s", label, rate / 1e9);
  if (fma > 0) printf("  (%.3f of the FMA peak)", rate / fma);
  printf("\n");
}

/* The GEMM modes (two ways of sharing the cores between OpenBLAS and the pool,
 * and ringpipe's own GEMM where the ISA ceiling has a kernel for it) on the
 * model's own shapes, measured back to back in one process. */
int rp_bench_gemm(int argc, char **argv) {
  rp_train_opts o;
  int rc = rp_cli_parse("bench gemm", "ringpipe bench gemm [model options]",
                        "GEMM FLOP/s on the model's GEMM shapes in every GEMM mode.",
                        rp_train_opt_table, rp_train_opt_count, &o, argc, argv);
  if (rc >= 0) return rc;
  rp_gpt_config cfg = {.L = o.layers, .C = o.channels, .NH = o.heads, .T = o.seq,
                       .V = o.vocab, .Vp = rp_pad_vocab(o.vocab)};
  int threads = o.threads > 0 ? o.threads : 2;
  rp_pool *pool;
  rp_status s = rp_pool_create(&pool, threads, o.pin);
  if (s != RP_OK) return rp_cli_fail("bench", s);
  printf("gemm modes, C=%d B=%d T=%d Vp=%d, %d threads (forward+backward of every matmul "
         "shape of a layer and the LM head)\n", cfg.C, o.batch, o.seq, cfg.Vp, threads);
  const int own = rp_sgemm_kernel_best(), nm = own >= 0 ? 3 : 2;
  double rate[3] = {0, 0, 0};
  for (int rep = 0; rep < 2; rep++)
    for (int mode = 0; mode < nm; mode++) {
      rp_gemm_set_mode(pool, (rp_gemm_mode)mode);
      double r = rp_gpt_gemm_peak(&cfg, o.batch, o.seq, 0, pool, NULL, 0, NULL);
      if (r > rate[mode]) rate[mode] = r;
    }
  /* the fp32 FMA ceiling the step profile divides by: zmm or ymm probe x threads */
  const rp_isa lvl = rp_isa_fp32_fma_level();
  const double fma = rp_isa_peak_gflops(lvl) * 1e9 * threads;
  print_mode("blas  (one sgemm, OpenBLAS threads, pool asleep):", rate[0], fma);
  print_mode("split (pool threads, single-threaded sgemm each):", rate[1], fma);
  if (rp_blas_above_ceiling()) /* a line of its own: vs_torch.sh parses the mode lines */
    printf("  note: OpenBLAS's %s kernels run %s, above the ceiling %s: blas and split are not "
           "held to it, and their fractions are of the %s probe\n", rp_blas_core(),
           rp_isa_name(rp_blas_core_isa()), rp_isa_name(rp_isa_active()), rp_isa_name(lvl));
  if (own >= 0) {
    char label[64];
    snprintf(label, sizeof label, "own   (ringpipe's GEMM, %s kernel):",
             rp_sgemm_kernel_name((rp_sgemm_kernel)own));
    print_mode(label, rate[2], fma);
  } else {
    printf("  own   (ringpipe's GEMM): no kernel at the ISA ceiling %s\n",
           rp_isa_name(rp_isa_active()));
  }
  printf("  split / blas = %.3f", rate[1] / rate[0]);
  if (own >= 0) printf(", own / split = %.3f", rate[2] / rate[1]);
  printf("\n");
  if (fma > 0)
    printf("  FMA peak: %.1f GFLOP/s (%s register-only probe x %d threads)\n", fma / 1e9,
           rp_isa_name(lvl), threads);
  print_shapes(&cfg, o.batch * o.seq, pool, own >= 0, fma);
  rp_pool_destroy(pool);
  return 0;
}
