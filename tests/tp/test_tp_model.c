/* Tensor-parallel model pieces against the unsharded model (run under mpirun
 * with 2 and 4 ranks, every rank one tp rank): a chunk with the embeddings, two
 * layers and the tied LM head, sharded over the world, computes the same loss
 * and, tensor by tensor, the slices of the same gradients as the whole chunk
 * on the same batch (within 1e-6 of each tensor's largest value):
 *   - column-parallel c_attn / c_fc and row-parallel c_proj (bias once), with
 *     the f / g all-reduces, and attention on this rank's heads;
 *   - the vocabulary-parallel embedding (wte rows, wpe replicated);
 *   - the vocabulary-parallel cross-entropy, with masked (-1) targets;
 * plus: the sharded initial weights are slices of the whole model's; the
 * I + W split and full recomputation give bitwise the sharded B; a whole chunk
 * sharded and put back is unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "../cp/cp_test_util.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_tp.h"

static int g_tp, g_rank;
static rp_pool *g_pool;
static rp_tp *g_tpc, *g_tpc_blocking;  /* with and without the overlapped ring */

#define TOL 1e-6

static const rp_gpt_config cfg = {.L = 2, .C = 32, .NH = 4, .T = 16, .V = 100, .Vp = 128};
static const rp_stage_spec whole_spec = {.first_layer = 0, .num_layers = 2, .has_embed = 1,
                                         .has_head = 1};
enum { B = 2, T = 16 };

/* One model's state for one batch. */
typedef struct {
  rp_chunk m;
  rp_acts a;
  rp_layer_acts lv[2];
  void *mem;
  rp_grad_ws ws;
  rp_exec x;
} model;

/* flags: SP sequence parallelism, RC full recomputation, NO_OVERLAP the
 * blocking all-gather instead of the ring */
enum { SP = 1, RC = 2, NO_OVERLAP = 4 };

static void model_init_with(model *d, int tp, int rank, int flags) {
  assert_int_equal(rp_chunk_init_tp(&d->m, &cfg, &whole_spec, tp, rank), RP_OK);
  rp_chunk_init_weights(&d->m, 7);
  if (flags & SP) assert_int_equal(rp_chunk_set_sp(&d->m, 1, B, T), RP_OK);
  if (flags & RC)
    assert_int_equal(rp_chunk_set_recompute(&d->m, RP_RECOMPUTE_FULL, rp_attn_reference(), B, T),
                     RP_OK);
  d->x = (rp_exec){.pool = g_pool, .attn = rp_attn_reference(),
                   .tp = tp == 1              ? NULL
                         : flags & NO_OVERLAP ? rp_tp_ops_of(g_tpc_blocking)
                                              : rp_tp_ops_of(g_tpc)};
  d->mem = rp_alloc(rp_acts_bytes(&d->m, d->x.attn, B, T), RP_MEM_ACTS);
  assert_non_null(d->mem);
  rp_acts_bind(&d->a, d->lv, &d->m, d->x.attn, d->mem, B, T);
  assert_int_equal(rp_grad_ws_init(&d->ws, &d->m, B, T), RP_OK);
  rp_rng r;
  rp_rng_seed(&r, 99);  /* the same batch on every rank */
  for (int i = 0; i < B * T; i++) {
    d->a.tokens[i] = (int32_t)(rp_rng_uniform(&r) * cfg.V) % cfg.V;
    d->a.targets[i] = i % 5 == 3 ? -1 : (int32_t)(rp_rng_uniform(&r) * cfg.V) % cfg.V;
    d->a.pos[i] = i % T;
  }
}

static void model_init(model *d, int tp, int rank) { model_init_with(d, tp, rank, 0); }

static void model_free(model *d) {
  rp_grad_ws_free(&d->ws);
  rp_free(d->mem);
  rp_chunk_free(&d->m);
}

/* Largest |local - slice of whole| over tensor i, relative to the tensor's
 * largest value. */
static double tensor_rel_diff(const rp_chunk *local, const float *lbuf, const rp_chunk *whole,
                              const float *wbuf, int i) {
  float *slice = ta_floats((long)local->num_params);
  rp_chunk_shard_from(local, slice, whole, wbuf);
  const rp_tensor *t = &local->tensors[i];
  double worst = 0, big = 1e-30;
  for (size_t j = 0; j < t->numel; j++) {
    double a = lbuf[t->offset + j], b = slice[t->offset + j];
    if (fabs(a - b) > worst) worst = fabs(a - b);
    if (fabs(b) > big) big = fabs(b);
  }
  free(slice);
  return worst / big;
}

/* Every replicated tensor's gradient is bitwise the same on every tp rank
 * (else the replicas of LayerNorms and biases would drift apart). */
static int replicated_grads_agree(const rp_chunk *m) {
  int same = 1;
  for (int i = 0; i < m->num_tensors; i++) {
    const rp_tensor *t = &m->tensors[i];
    if (t->tp_split != RP_TP_REPLICATED) continue;
    float *lo = ta_floats((long)t->numel), *hi = ta_floats((long)t->numel);
    MPI_Allreduce(m->grads + t->offset, lo, (int)t->numel, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(m->grads + t->offset, hi, (int)t->numel, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    if (memcmp(lo, hi, t->numel * sizeof(float)) != 0) {
      fprintf(stderr, "gradient of the replicated %s differs between tp ranks\n", t->name);
      same = 0;
    }
    free(lo), free(hi);
  }
  return same;
}

static double loss_of(model *d) { return rp_chunk_forward(&d->m, &d->a, NULL, &d->x); }

static void test_init_is_a_slice(void **state) {
  model w, s;
  model_init(&w, 1, 0);
  model_init(&s, g_tp, g_rank);
  assert_true(s.m.num_params < w.m.num_params);
  for (int i = 0; i < s.m.num_tensors; i++)
    assert_true(tensor_rel_diff(&s.m, s.m.params, &w.m, w.m.params, i) == 0.0);
  /* unshard every rank's slice: the whole model again */
  float *back = ta_floats((long)w.m.num_params);
  for (int r = 0; r < g_tp; r++) {
    rp_chunk view = s.m;
    view.tp_rank = r;
    float *mine = ta_floats((long)s.m.num_params);
    rp_chunk_shard_from(&view, mine, &w.m, w.m.params);
    rp_chunk_unshard_into(&view, mine, &w.m, back);
    free(mine);
  }
  assert_memory_equal(back, w.m.params, w.m.num_params * sizeof(float));
  free(back);
  model_free(&w);
  model_free(&s);
}

static void check_equal_unsharded(int flags) {
  model w, s;
  model_init(&w, 1, 0);
  model_init_with(&s, g_tp, g_rank, flags);
  const float dscale = 1.0f / 20;
  double lw = loss_of(&w), ls = loss_of(&s);
  double rel = fabs(lw - ls) / fabs(lw);
  if (rel > TOL) fprintf(stderr, "loss %.9g sharded vs %.9g whole\n", ls, lw);
  assert_true(cpt_agree_max(rel, MPI_COMM_WORLD) <= TOL);
  rp_chunk_backward(&w.m, &w.a, &w.ws, dscale, &w.x);
  rp_chunk_backward(&s.m, &s.a, &s.ws, dscale, &s.x);
  double worst = 0;
  for (int i = 0; i < s.m.num_tensors; i++) {
    double d = tensor_rel_diff(&s.m, s.m.grads, &w.m, w.m.grads, i);
    if (d > TOL) fprintf(stderr, "rank %d: gradient of %s differs by %.3g\n", g_rank,
                         s.m.tensors[i].name, d);
    if (d > worst) worst = d;
  }
  assert_true(cpt_agree_max(worst, MPI_COMM_WORLD) <= TOL);
  assert_true(replicated_grads_agree(&s.m));
  model_free(&w);
  model_free(&s);
}

static void test_forward_backward_equal_unsharded(void **state) { check_equal_unsharded(0); }

/* Sequence parallelism: the same loss and gradients from N/tp-row shards, and
 * the embedding output is this rank's block of the whole one's rows. */
static void test_sp_equal_unsharded(void **state) {
  check_equal_unsharded(SP);  /* the overlapped ring all-gather */
  check_equal_unsharded(SP | NO_OVERLAP);
  /* (the ring multiplies a block at a time: bitwise the one GEMM only when
   * the BLAS picks the same kernel for both shapes, so only the tolerance) */
  check_equal_unsharded(SP | RC);
  model w, s;
  model_init(&w, 1, 0);
  model_init_with(&s, g_tp, g_rank, SP);
  rp_chunk_embed_forward(&w.m, &w.a, &w.x);
  rp_chunk_embed_forward(&s.m, &s.a, &s.x);
  long rows = B * T / g_tp;
  assert_memory_equal(s.a.input, w.a.input + g_rank * rows * cfg.C, rows * cfg.C * sizeof(float));
  model_free(&w);
  model_free(&s);
}

/* Sharded backward B vs I + W and vs full recomputation: bitwise. */
static void test_split_and_recompute_bitwise(void **state) {
  model b, iw, rc;
  model_init(&b, g_tp, g_rank);
  model_init(&iw, g_tp, g_rank);
  model_init(&rc, g_tp, g_rank);
  const float dscale = 0.05f;
  loss_of(&b);
  rp_chunk_backward(&b.m, &b.a, &b.ws, dscale, &b.x);
  loss_of(&iw);
  rp_wstash st;
  rp_layer_douts dl[2];
  void *smem = rp_alloc(rp_wstash_bytes(&iw.m, B, T), RP_MEM_ACTS);
  rp_wstash_bind(&st, dl, &iw.m, smem, B, T);
  rp_chunk_backward_input(&iw.m, &iw.a, &iw.ws, &st, dscale, &iw.x);
  rp_chunk_backward_weight(&iw.m, &iw.a, &st, &iw.x);
  int32_t tok[B * T], tgt[B * T], pos[B * T];
  memcpy(tok, rc.a.tokens, sizeof tok), memcpy(tgt, rc.a.targets, sizeof tgt);
  memcpy(pos, rc.a.pos, sizeof pos);
  assert_int_equal(rp_chunk_set_recompute(&rc.m, RP_RECOMPUTE_FULL, rc.x.attn, B, T), RP_OK);
  rp_free(rc.mem);
  rc.mem = rp_alloc(rp_acts_bytes(&rc.m, rc.x.attn, B, T), RP_MEM_ACTS);
  rp_acts_bind(&rc.a, rc.lv, &rc.m, rc.x.attn, rc.mem, B, T);
  memcpy(rc.a.tokens, tok, sizeof tok), memcpy(rc.a.targets, tgt, sizeof tgt);
  memcpy(rc.a.pos, pos, sizeof pos);
  loss_of(&rc);
  rp_chunk_backward(&rc.m, &rc.a, &rc.ws, dscale, &rc.x);
  int same = memcmp(b.m.grads, iw.m.grads, b.m.num_params * sizeof(float)) == 0 &&
             memcmp(b.m.grads, rc.m.grads, b.m.num_params * sizeof(float)) == 0;
  assert_true(cpt_agree_max(same ? 0 : 1, MPI_COMM_WORLD) == 0);
  rp_free(smem);
  model_free(&b);
  model_free(&iw);
  model_free(&rc);
}

/* The layouts that cannot be sharded: one message naming the value and the fix. */
static void test_bad_shapes(void **state) {
  rp_chunk m;
  rp_gpt_config c = cfg;
  c.NH = 2;
  assert_int_equal(rp_chunk_init_tp(&m, &c, &whole_spec, 4, 0), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "--tp 4 does not divide --heads 2"));
  c = cfg;
  c.C = 48, c.NH = 12, c.Vp = 256;  /* 3 divides the heads, not the vocabulary rows */
  assert_int_equal(rp_gpt_config_check_tp(&c, 3), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "padded vocabulary 256"));
}

int main(int argc, char **argv) {
  if (rp_mpi_init(&argc, &argv) != RP_OK) {
    fprintf(stderr, "%s\n", rp_errmsg());
    return 1;
  }
  g_tp = rp_mpi_world_size();
  g_rank = rp_mpi_world_rank();
  g_pool = ta_pool(1);
  if (rp_tp_create(&g_tpc, MPI_COMM_WORLD, 1) != RP_OK) return 1;
  if (rp_tp_create(&g_tpc_blocking, MPI_COMM_WORLD, 0) != RP_OK) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_init_is_a_slice),
      cmocka_unit_test(test_forward_backward_equal_unsharded),
      cmocka_unit_test(test_split_and_recompute_bitwise),
      cmocka_unit_test(test_sp_equal_unsharded),
      cmocka_unit_test(test_bad_shapes),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  failed = cpt_agree_max_int(failed, MPI_COMM_WORLD);
  rp_tp_destroy(g_tpc);
  rp_tp_destroy(g_tpc_blocking);
  rp_pool_destroy(g_pool);
  rp_mpi_finalize();
  return failed ? 1 : 0;
}
