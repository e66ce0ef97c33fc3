/* bench_fb_overlap: does running one micro-batch's forward and another's
 * backward at the same time, each on half of the cores, beat running them one
 * after the other on all of them? That is DualPipe(V)'s F&B overlap, measured
 * here on the model alone (no pipeline, no communication) to decide whether the
 * executor should do it on this CPU.
 *
 * One chunk (embeddings, L layers, head) and two activation sets: micro-batch 1
 * is run forward once so that its backward can be timed. Per round, alternating:
 *   sequential  forward(mb 0) then backward(mb 1) on one pool of --threads;
 *   overlapped  forward(mb 0) on a pool of threads/2 in a second thread while
 *               backward(mb 1) runs on another pool of the rest, joined.
 * Both use the pool-split GEMM mode (each pool thread runs single-threaded
 * sgemm on its rows), so the only difference is who runs what when. The
 * backward only accumulates into the gradients and the forward only reads the
 * parameters, so the two never write the same memory. Prints the median of
 * each and their ratio with its min..max over the rounds.
 *
 * usage: bench_fb_overlap [--threads 2] [--rounds 7] [--layers 4] [--channels 384]
 *                         [--heads 6] [--seq 256] [--batch 4] [--attention naive|flash] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_util.h"

typedef struct {
  int threads, rounds, L, C, NH, T, B, flash;
} fb_opts;

static int parse(fb_opts *o, int argc, char **argv) {
  *o = (fb_opts){.threads = 2, .rounds = 7, .L = 4, .C = 384, .NH = 6, .T = 256, .B = 4};
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) return -1;
    const char *k = argv[i], *v = argv[i + 1];
    if (strcmp(k, "--attention") == 0) {
      if (strcmp(v, "flash") && strcmp(v, "naive")) return -1;
      o->flash = strcmp(v, "flash") == 0;
      continue;
    }
    int *dst = strcmp(k, "--threads") == 0    ? &o->threads
               : strcmp(k, "--rounds") == 0   ? &o->rounds
               : strcmp(k, "--layers") == 0   ? &o->L
               : strcmp(k, "--channels") == 0 ? &o->C
               : strcmp(k, "--heads") == 0    ? &o->NH
               : strcmp(k, "--seq") == 0      ? &o->T
               : strcmp(k, "--batch") == 0    ? &o->B
                                              : NULL;
    if (!dst) return -1;
    *dst = atoi(v);
  }
  return o->threads >= 2 && o->rounds >= 1 && o->L >= 1 && o->C % o->NH == 0 ? 0 : -1;
}

/* One micro-batch's activations, bound to the chunk. */
typedef struct {
  rp_acts a;
  rp_layer_acts *lv;
  void *mem;
} micro;

static rp_status micro_init(micro *mb, rp_chunk *m, const rp_attn_backend *attn, int B, int T,
                            uint64_t seed) {
  mb->lv = calloc((size_t)m->spec.num_layers, sizeof *mb->lv);
  mb->mem = rp_alloc(rp_acts_bytes(m, attn, B, T), RP_MEM_ACTS);
  if (!mb->lv || !mb->mem) return RP_ENOMEM;
  rp_acts_bind(&mb->a, mb->lv, m, attn, mb->mem, B, T);
  rp_rng rng;
  rp_rng_seed(&rng, seed);
  for (int i = 0; i < B * T; i++) {
    mb->a.tokens[i] = (int32_t)rp_rng_below(&rng, (uint32_t)m->cfg.V);
    mb->a.targets[i] = (int32_t)rp_rng_below(&rng, (uint32_t)m->cfg.V);
    mb->a.pos[i] = i % T;
  }
  return RP_OK;
}

typedef struct {
  rp_chunk *m;
  micro *mb;
  const rp_exec *x;
} fwd_job;

static void *run_forward(void *p) {
  fwd_job *j = p;
  rp_chunk_forward(j->m, &j->mb->a, NULL, j->x);
  return NULL;
}

static double sequential(rp_chunk *m, micro *f, micro *b, rp_grad_ws *w, const rp_exec *x) {
  double t0 = rp_now();
  rp_chunk_forward(m, &f->a, NULL, x);
  rp_chunk_backward(m, &b->a, w, 1.0f, x);
  return rp_now() - t0;
}

static double overlapped(rp_chunk *m, micro *f, micro *b, rp_grad_ws *w, const rp_exec *xf,
                         const rp_exec *xb) {
  fwd_job j = {m, f, xf};
  pthread_t th;
  double t0 = rp_now();
  if (pthread_create(&th, NULL, run_forward, &j) != 0) rp_fatal("bench_fb_overlap: no thread");
  rp_chunk_backward(m, &b->a, w, 1.0f, xb);
  pthread_join(th, NULL);
  return rp_now() - t0;
}

/* Each part alone: forward or backward on a pool, in seconds. */
static double alone(rp_chunk *m, micro *f, micro *b, rp_grad_ws *w, const rp_exec *x, int fwd) {
  double t0 = rp_now();
  if (fwd) rp_chunk_forward(m, &f->a, NULL, x);
  else rp_chunk_backward(m, &b->a, w, 1.0f, x);
  return rp_now() - t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  fb_opts o;
  if (parse(&o, argc, argv) != 0) {
    fprintf(stderr, "usage: bench_fb_overlap [--threads N>=2] [--rounds 7] [--layers 4] "
                    "[--channels 384] [--heads 6] [--seq 256] [--batch 4] "
                    "[--attention naive|flash]\n");
    return 2;
  }
  rp_gpt_config cfg = {.L = o.L, .C = o.C, .NH = o.NH, .T = o.T, .V = 256, .Vp = 256};
  rp_stage_spec spec = {.first_layer = 0, .num_layers = o.L, .has_embed = 1, .has_head = 1};
  int half = o.threads / 2;
  rp_pool *all, *pf, *pb;
  /* unpinned: the two half pools would otherwise both pin to the first cores */
  if (rp_pool_create(&all, o.threads, 0) != RP_OK || rp_pool_create(&pf, half, 0) != RP_OK ||
      rp_pool_create(&pb, o.threads - half, 0) != RP_OK)
    rp_fatal("bench_fb_overlap: %s", rp_errmsg());
  rp_pool *pools[3] = {all, pf, pb};
  for (int i = 0; i < 3; i++) rp_gemm_set_mode(pools[i], RP_GEMM_POOL_SPLIT);
  const rp_attn_backend *attn = o.flash ? rp_attn_flash() : rp_attn_reference();
  rp_chunk m;
  micro f, b;
  rp_grad_ws w;
  if (rp_chunk_init(&m, &cfg, &spec) != RP_OK || micro_init(&f, &m, attn, o.B, o.T, 1) != RP_OK ||
      micro_init(&b, &m, attn, o.B, o.T, 2) != RP_OK || rp_grad_ws_init(&w, &m, o.B, o.T) != RP_OK)
    rp_fatal("bench_fb_overlap: %s", rp_errmsg());
  rp_chunk_init_weights(&m, 1337);
  rp_exec xa = {.pool = all, .attn = attn}, xf = {.pool = pf, .attn = attn},
          xb = {.pool = pb, .attn = attn};
  rp_chunk_forward(&m, &b.a, NULL, &xa);  /* micro-batch 1's activations for its backward */
  sequential(&m, &f, &b, &w, &xa);        /* warm-up */
  overlapped(&m, &f, &b, &w, &xf, &xb);
  double *ts = malloc(sizeof(double) * 7 * (size_t)o.rounds), *to = ts + o.rounds,
         *r = to + o.rounds, *part[4];
  for (int k = 0; k < 4; k++) part[k] = r + (k + 1) * o.rounds;
  for (int i = 0; i < o.rounds; i++) {
    ts[i] = sequential(&m, &f, &b, &w, &xa);
    to[i] = overlapped(&m, &f, &b, &w, &xf, &xb);
    r[i] = ts[i] / to[i];
    part[0][i] = alone(&m, &f, &b, &w, &xa, 1), part[1][i] = alone(&m, &f, &b, &w, &xa, 0);
    part[2][i] = alone(&m, &f, &b, &w, &xf, 1), part[3][i] = alone(&m, &f, &b, &w, &xb, 0);
  }
  for (int k = 0; k < 4; k++) qsort(part[k], (size_t)o.rounds, sizeof(double), cmp_double);
  qsort(ts, (size_t)o.rounds, sizeof *ts, cmp_double);
  qsort(to, (size_t)o.rounds, sizeof *to, cmp_double);
  qsort(r, (size_t)o.rounds, sizeof *r, cmp_double);
  int mid = o.rounds / 2;
  printf("F(mb 0) + B(mb 1), L=%d C=%d NH=%d T=%d B=%d, %s attention, %d threads, %d rounds\n",
         o.L, o.C, o.NH, o.T, o.B, o.flash ? "flash" : "naive", o.threads, o.rounds);
  printf("  sequential on %d threads:             %8.2f ms (median)\n", o.threads, ts[mid] * 1e3);
  printf("  overlapped on %d + %d threads:         %8.2f ms (median)\n", half, o.threads - half,
         to[mid] * 1e3);
  printf("  sequential / overlapped: %.3f (min %.3f, max %.3f): overlap is %s here\n", r[mid],
         r[0], r[o.rounds - 1], r[mid] > 1.02 ? "faster" : r[mid] < 0.98 ? "slower" : "no better");
  /* with perfect overlap the pair takes as long as its slower half-pool part */
  double fa = part[0][mid], ba = part[1][mid], fh = part[2][mid], bh = part[3][mid];
  printf("  alone: F %.2f / B %.2f ms on %d threads, F %.2f ms on %d, B %.2f ms on %d: perfect "
         "overlap would give %.3f (the halves are equal, B is %.1fx F)\n", fa * 1e3, ba * 1e3,
         o.threads, fh * 1e3, half, bh * 1e3, o.threads - half,
         (fa + ba) / (fh > bh ? fh : bh), ba / fa);
  free(ts);
  rp_grad_ws_free(&w);
  rp_free(f.mem), rp_free(b.mem), free(f.lv), free(b.lv);
  rp_chunk_free(&m);
  for (int i = 0; i < 3; i++) rp_pool_destroy(pools[i]);
  return 0;
}
