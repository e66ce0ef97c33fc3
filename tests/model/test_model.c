/* Model: whole-model gradient check, chunk split invariance (a pipeline stage is a
 * slice of the whole model, bitwise), I+W split equals full backward bitwise,
 * seed-stable initialisation. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_util.h"

static const rp_gpt_config tiny = {.L = 2, .C = 16, .NH = 2, .T = 8, .V = 40, .Vp = 64};
enum { B = 2, T = 8, N = B * T };

typedef struct {
  rp_chunk m;
  rp_acts a;
  rp_layer_acts lv[4];
  void *mem;
  rp_grad_ws w;
} model_run;

static void run_init(model_run *r, const rp_gpt_config *cfg, rp_stage_spec spec,
                     const rp_attn_backend *attn) {
  assert_int_equal(rp_chunk_init(&r->m, cfg, &spec), RP_OK);
  rp_chunk_init_weights(&r->m, 7);
  r->mem = rp_alloc(rp_acts_bytes(&r->m, attn, B, T), RP_MEM_ACTS);
  rp_acts_bind(&r->a, r->lv, &r->m, attn, r->mem, B, T);
  assert_int_equal(rp_grad_ws_init(&r->w, &r->m, B, T), RP_OK);
}

static void run_free(model_run *r) {
  rp_grad_ws_free(&r->w);
  rp_free(r->mem);
  rp_chunk_free(&r->m);
}

static void fill_batch(rp_acts *a, int masked) {
  rp_rng rng;
  rp_rng_seed(&rng, 99);
  for (int i = 0; i < N; i++) {
    a->tokens[i] = (int32_t)rp_rng_below(&rng, tiny.V);
    a->targets[i] = (masked && i % 5 == 0) ? -1 : (int32_t)rp_rng_below(&rng, tiny.V);
    a->pos[i] = i % T;
  }
}

static double loss_of(model_run *r, const rp_exec *x) {
  int valid = 0;
  double s = rp_chunk_forward(&r->m, &r->a, &valid, x);
  return s / valid;
}

/* Directional derivative along a random direction inside each tensor against
 * <grad, direction>: checks every tensor's gradient, including the tied wte. */
static void test_whole_model_gradient(void **state) {
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  model_run r;
  run_init(&r, &tiny, (rp_stage_spec){0, tiny.L, 1, 1}, x.attn);
  fill_batch(&r.a, 1);
  int valid = 0;
  rp_chunk_forward(&r.m, &r.a, &valid, &x);
  rp_chunk_zero_grads(&r.m);
  rp_chunk_backward(&r.m, &r.a, &r.w, 1.0f / valid, &x);
  float *grads = malloc(r.m.num_params * sizeof(float));
  memcpy(grads, r.m.grads, r.m.num_params * sizeof(float));
  rp_rng rng;
  rp_rng_seed(&rng, 5);
  int checked = 0;
  for (int ti = 0; ti < r.m.num_tensors; ti++) {
    const rp_tensor *t = &r.m.tensors[ti];
    size_t n = t->is_wte ? (size_t)tiny.V * tiny.C : t->numel;
    float *dir = malloc(n * sizeof(float));
    double dot = 0, norm = 0;
    for (size_t j = 0; j < n; j++) {
      dir[j] = rp_rng_normal(&rng);
      norm += (double)dir[j] * dir[j];
    }
    norm = sqrt(norm);
    for (size_t j = 0; j < n; j++) dot += grads[t->offset + j] * (dir[j] / norm);
    float *p = r.m.params + t->offset;
    const double eps = 1e-2;
    float *saved = malloc(n * sizeof(float));
    memcpy(saved, p, n * sizeof(float));
    for (size_t j = 0; j < n; j++) p[j] = (float)(saved[j] + eps * dir[j] / norm);
    double lp = loss_of(&r, &x);
    for (size_t j = 0; j < n; j++) p[j] = (float)(saved[j] - eps * dir[j] / norm);
    double lm = loss_of(&r, &x);
    memcpy(p, saved, n * sizeof(float));
    double fd = (lp - lm) / (2 * eps);
    /* fp32 forward: the difference quotient carries ~1e-6/eps of rounding noise */
    double tol = 2e-2 * fabs(dot) + 2e-4;
    if (fabs(fd - dot) > tol)
      fail_msg("tensor %s: finite difference %.6g vs analytic %.6g", t->name, fd, dot);
    checked++;
    free(dir);
    free(saved);
  }
  assert_int_equal(checked, 2 + 12 * tiny.L + 2);
  free(grads);
  run_free(&r);
}

/* Two chunks (embed + layer 0 | layer 1 + head) reproduce the whole model. */
static void test_split_chunks_match_whole(void **state) {
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  model_run whole, s0, s1;
  run_init(&whole, &tiny, (rp_stage_spec){0, 2, 1, 0 + 1}, x.attn);
  run_init(&s0, &tiny, (rp_stage_spec){0, 1, 1, 0}, x.attn);
  run_init(&s1, &tiny, (rp_stage_spec){1, 1, 0, 1}, x.attn);
  /* seed-stable init: every tensor of a stage equals the whole model's */
  for (int c = 0; c < 2; c++) {
    rp_chunk *m = c ? &s1.m : &s0.m;
    for (int i = 0; i < m->num_tensors; i++) {
      const rp_tensor *t = &m->tensors[i], *tw = rp_chunk_find(&whole.m, t->name);
      assert_non_null(tw);
      assert_memory_equal(m->params + t->offset, whole.m.params + tw->offset, t->numel * 4);
    }
  }
  fill_batch(&whole.a, 1);
  int valid = 0;
  double lw = rp_chunk_forward(&whole.m, &whole.a, &valid, &x);
  rp_chunk_zero_grads(&whole.m);
  rp_chunk_backward(&whole.m, &whole.a, &whole.w, 1.0f / valid, &x);

  memcpy(s0.a.tokens, whole.a.tokens, N * 4);
  memcpy(s0.a.pos, whole.a.pos, N * 4);
  memcpy(s1.a.targets, whole.a.targets, N * 4);
  rp_chunk_forward(&s0.m, &s0.a, NULL, &x);
  memcpy(s1.a.input, s0.a.output, (size_t)N * tiny.C * 4);  /* the "send" */
  double ls = rp_chunk_forward(&s1.m, &s1.a, NULL, &x);
  assert_memory_equal(&lw, &ls, sizeof lw);
  rp_chunk_zero_grads(&s0.m);
  rp_chunk_zero_grads(&s1.m);
  rp_chunk_backward(&s1.m, &s1.a, &s1.w, 1.0f / valid, &x);
  memcpy(s0.w.dres, s1.w.dres, (size_t)N * tiny.C * 4);      /* the gradient "send" */
  rp_chunk_backward(&s0.m, &s0.a, &s0.w, 1.0f / valid, &x);
  for (int c = 0; c < 2; c++) {
    rp_chunk *m = c ? &s1.m : &s0.m;
    for (int i = 0; i < m->num_tensors; i++) {
      const rp_tensor *t = &m->tensors[i], *tw = rp_chunk_find(&whole.m, t->name);
      if (t->is_wte) continue;  /* a sum of two stages' parts: checked below */
      assert_memory_equal(m->grads + t->offset, whole.m.grads + tw->offset, t->numel * 4);
    }
  }
  for (size_t j = 0; j < (size_t)tiny.Vp * tiny.C; j++) {
    float sum = s0.m.g.wte[j] + s1.m.g.wte[j], ref = whole.m.g.wte[j];
    assert_true(fabsf(sum - ref) <= 1e-6f * fabsf(ref) + 1e-9f);
  }
  run_free(&whole);
  run_free(&s0);
  run_free(&s1);
}

/* Forward and full backward of r's batch; the gradients (malloc'ed). */
static float *full_backward_grads(model_run *r, const rp_exec *x) {
  int valid = 0;
  rp_chunk_forward(&r->m, &r->a, &valid, x);
  rp_chunk_zero_grads(&r->m);
  rp_chunk_backward(&r->m, &r->a, &r->w, 1.0f / valid, x);
  float *g = malloc(r->m.num_params * 4);
  memcpy(g, r->m.grads, r->m.num_params * 4);
  return g;
}

/* Forward again and I into a fresh W stash (dv: its layer views); returns
 * the stash's memory (rp_free it after W). */
static void *forward_then_input(model_run *r, rp_wstash *s, rp_layer_douts *dv,
                                const rp_exec *x) {
  int valid = 0;
  void *smem = rp_alloc(rp_wstash_bytes(&r->m, B, T), RP_MEM_ACTS);
  rp_wstash_bind(s, dv, &r->m, smem, B, T);
  rp_chunk_forward(&r->m, &r->a, &valid, x);
  rp_chunk_zero_grads(&r->m);
  rp_chunk_backward_input(&r->m, &r->a, &r->w, s, 1.0f / valid, x);
  return smem;
}

/* Zero-bubble split: I then W gives bitwise the gradients of the full backward. */
static void test_input_weight_split_bitwise(void **state) {
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 2, 0), RP_OK);
  rp_exec x = {.pool = pool, .attn = rp_attn_reference()};
  model_run r;
  run_init(&r, &tiny, (rp_stage_spec){0, tiny.L, 1, 1}, x.attn);
  fill_batch(&r.a, 1);
  float *full = full_backward_grads(&r, &x), *din_full = malloc((size_t)N * tiny.C * 4);

  /* the input gradient of a middle stage: rerun without embed to expose dres */
  rp_layer_douts dv[4];
  rp_wstash s;
  void *smem = forward_then_input(&r, &s, dv, &x);
  memcpy(din_full, r.w.dres, (size_t)N * tiny.C * 4);
  for (size_t i = 0; i < r.m.num_params; i++) assert_true(r.m.grads[i] == 0.0f);
  rp_chunk_backward_weight(&r.m, &r.a, &s, &x);
  assert_memory_equal(r.m.grads, full, r.m.num_params * 4);
  free(full);
  free(din_full);
  rp_free(smem);
  run_free(&r);
  rp_pool_destroy(pool);
}

/* The training step's forward without the loss (rp_chunk_forward_logits), the
 * backward writing the losses: bitwise the loss sum and gradients of
 * rp_chunk_forward + rp_chunk_backward, masked targets included (2 threads). */
static void test_loss_in_backward_bitwise(void **state) {
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 2, 0), RP_OK);
  rp_exec x = {.pool = pool, .attn = rp_attn_reference()};
  model_run r;
  run_init(&r, &tiny, (rp_stage_spec){0, tiny.L, 1, 1}, x.attn);
  assert_true(rp_chunk_loss_in_backward(&r.m));
  fill_batch(&r.a, 1);
  int valid = 0, valid2 = 0;
  const double loss = rp_chunk_forward(&r.m, &r.a, &valid, &x);
  float *full = full_backward_grads(&r, &x);
  /* stale losses must not survive: the backward writes them */
  for (int i = 0; i < N; i++) r.a.losses[i] = NAN;
  rp_chunk_zero_grads(&r.m);
  rp_chunk_forward_logits(&r.m, &r.a, &x);
  rp_chunk_backward(&r.m, &r.a, &r.w, 1.0f / valid, &x);
  const double loss2 = rp_chunk_loss_sum(&r.a, &valid2);
  assert_int_equal(valid2, valid);
  assert_memory_equal(&loss2, &loss, sizeof loss);
  assert_memory_equal(r.m.grads, full, r.m.num_params * 4);
  free(full);
  run_free(&r);
  rp_pool_destroy(pool);
}

/* Recomputation gives bitwise the gradients of keeping everything, and keeps
 * less: none > selective > full activation bytes (naive attention, whose saved
 * probabilities selective mode drops). */
static void test_recompute_bitwise(void **state) {
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  float *ref = NULL;
  size_t bytes[3];
  for (int mode = RP_RECOMPUTE_NONE; mode <= RP_RECOMPUTE_FULL; mode++) {
    model_run r;
    assert_int_equal(rp_chunk_init(&r.m, &tiny, &(rp_stage_spec){0, tiny.L, 1, 1}), RP_OK);
    rp_chunk_init_weights(&r.m, 7);
    assert_int_equal(rp_chunk_set_recompute(&r.m, (rp_recompute)mode, x.attn, B, T), RP_OK);
    bytes[mode] = rp_acts_bytes(&r.m, x.attn, B, T);
    r.mem = rp_alloc(bytes[mode], RP_MEM_ACTS);
    rp_acts_bind(&r.a, r.lv, &r.m, x.attn, r.mem, B, T);
    assert_int_equal(rp_grad_ws_init(&r.w, &r.m, B, T), RP_OK);
    fill_batch(&r.a, 1);
    int valid = 0;
    double loss = rp_chunk_forward(&r.m, &r.a, &valid, &x);
    rp_chunk_zero_grads(&r.m);
    rp_chunk_backward(&r.m, &r.a, &r.w, 1.0f / valid, &x);
    assert_true(isfinite(loss));
    if (!ref) {
      ref = malloc(r.m.num_params * 4);
      memcpy(ref, r.m.grads, r.m.num_params * 4);
    } else {
      assert_memory_equal(r.m.grads, ref, r.m.num_params * 4);
    }
    run_free(&r);
  }
  assert_true(bytes[RP_RECOMPUTE_NONE] > bytes[RP_RECOMPUTE_SELECTIVE]);
  assert_true(bytes[RP_RECOMPUTE_SELECTIVE] > bytes[RP_RECOMPUTE_FULL]);
  free(ref);
}

/* W reads only the KEEP part of the activations (rp_acts_split_bytes), also
 * under recomputation: with everything I alone reads (DROP) and the recompute
 * scratch overwritten with NaN between I and W, I then W still gives bitwise
 * the gradients of the full backward, for every recompute mode. */
static void test_weights_read_only_keep(void **state) {
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  for (int mode = RP_RECOMPUTE_NONE; mode <= RP_RECOMPUTE_FULL; mode++) {
    model_run r;
    assert_int_equal(rp_chunk_init(&r.m, &tiny, &(rp_stage_spec){0, tiny.L, 1, 1}), RP_OK);
    rp_chunk_init_weights(&r.m, 7);
    assert_int_equal(rp_chunk_set_recompute(&r.m, (rp_recompute)mode, x.attn, B, T), RP_OK);
    size_t keep, drop;
    rp_acts_split_bytes(&r.m, x.attn, B, T, &keep, &drop);
    assert_int_equal(keep + drop, rp_acts_bytes(&r.m, x.attn, B, T));
    float *kmem = rp_alloc(keep, RP_MEM_ACTS), *dmem = rp_alloc(drop, RP_MEM_ACTS);
    r.mem = NULL;
    rp_acts_bind_split(&r.a, r.lv, &r.m, x.attn, kmem, dmem, B, T);
    assert_int_equal(rp_grad_ws_init(&r.w, &r.m, B, T), RP_OK);
    fill_batch(&r.a, 1);
    float *full = full_backward_grads(&r, &x);
    rp_layer_douts dv[4];
    rp_wstash st;
    void *smem = forward_then_input(&r, &st, dv, &x);
    for (size_t i = 0; i < drop / 4; i++) dmem[i] = NAN;  /* freed at I */
    for (size_t i = 0; i < r.m.rc_bytes / 4; i++) ((float *)r.m.rc_scratch)[i] = NAN;
    rp_chunk_backward_weight(&r.m, &r.a, &st, &x);
    if (memcmp(r.m.grads, full, r.m.num_params * 4) != 0)
      fail_msg("recompute %s: I + W with DROP freed differs from B",
               rp_recompute_name((rp_recompute)mode));
    free(full);
    rp_free(smem);
    rp_free(kmem);
    rp_free(dmem);
    run_free(&r);
  }
}

static void test_bad_config_messages(void **state) {
  rp_chunk m;
  rp_gpt_config c = tiny;
  c.NH = 3;
  assert_int_equal(rp_chunk_init(&m, &c, &(rp_stage_spec){0, 1, 1, 1}), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "--heads 3 does not divide --channels 16"));
  assert_int_equal(rp_chunk_init(&m, &tiny, &(rp_stage_spec){1, 2, 0, 1}), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "outside the model's 2 layers"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_whole_model_gradient),
      cmocka_unit_test(test_split_chunks_match_whole),
      cmocka_unit_test(test_input_weight_split_bitwise),
      cmocka_unit_test(test_loss_in_backward_bitwise),
      cmocka_unit_test(test_recompute_bitwise),
      cmocka_unit_test(test_weights_read_only_keep),
      cmocka_unit_test(test_bad_config_messages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
