/* The inference engine (rp_infer.h): the paged K/V cache holds exactly the keys
 * and values of a full forward, block by block; a group shares its prompt's
 * full blocks and copies the partial one; released blocks return to the pool;
 * decode steps and an extend (a new turn on a cached prefix) give the logits
 * of a full forward over the whole context (1e-4); rp_generate through the
 * cache picks the tokens of rp_generate_recompute (greedy, top-k, top-p) and
 * keeps going past the model's T; blocks attached to another cache (whole or
 * layer by layer) continue a turn bit for bit; bad calls fail with a message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_infer.h"

/* T spans several 64-position blocks */
static const rp_gpt_config cfg = {.L = 2, .C = 32, .NH = 4, .T = 200, .V = 256, .Vp = 256};

static void model_init(rp_chunk *m, uint64_t seed) {
  rp_stage_spec spec = {0, cfg.L, 1, 1};
  assert_int_equal(rp_chunk_init(m, &cfg, &spec), RP_OK);
  rp_chunk_init_weights(m, seed);
  /* larger weights than GPT-2's init so logits differ clearly between tokens */
  for (size_t i = 0; i < m->num_params; i++) m->params[i] *= 3.0f;
}

static void random_tokens(int32_t *tok, int n, uint64_t seed) {
  rp_rng r;
  rp_rng_seed(&r, seed);
  for (int i = 0; i < n; i++) tok[i] = (int32_t)rp_rng_below(&r, (uint64_t)cfg.V);
}

/* A full forward of one sequence; its activations stay in *mem for the caller. */
static void full_forward(const rp_chunk *m, const rp_exec *x, const int32_t *tok, int n,
                         rp_acts *a, rp_layer_acts *lv, void **mem) {
  *mem = rp_alloc(rp_acts_bytes(m, x->attn, 1, n), RP_MEM_ACTS);
  rp_acts_bind(a, lv, m, x->attn, *mem, 1, n);
  for (int t = 0; t < n; t++) {
    a->tokens[t] = tok[t];
    a->targets[t] = -1;
    a->pos[t] = t;
  }
  rp_chunk_forward(m, a, NULL, x);
}

static float max_abs_diff(const float *a, const float *b, int n) {
  float d = 0;
  for (int i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
  return d;
}

static void test_blocks_hold_the_forward_kv(void **state) {
  (void)state;
  rp_chunk m;
  model_init(&m, 1);
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  enum { N = 150, G = 3 }; /* 2 full blocks and a partial one */
  int32_t tok[N];
  random_tokens(tok, N, 7);
  rp_kv_cache c;
  assert_int_equal(rp_kv_init(&c, &m, x.attn, 4, cfg.T), RP_OK);
  assert_int_equal(rp_kv_block_bytes(&c), (size_t)cfg.L * 2 * RP_KV_BLOCK * cfg.C * 4);
  assert_non_null(rp_kv_prefill(&c, 0, G, tok, N, &x));
  /* slot 0's three blocks, plus one private partial block per other slot */
  assert_int_equal(rp_kv_blocks_used(&c), 3 + (G - 1));
  rp_acts a;
  rp_layer_acts lv[2];
  void *mem;
  full_forward(&m, &x, tok, N, &a, lv, &mem);
  for (int s = 0; s < G; s++) {
    const int *ids;
    assert_int_equal(rp_kv_slot_blocks(&c, s, &ids), 3);
    for (int t = 0; t < N; t++)
      for (int l = 0; l < cfg.L; l++) {
        const float *blk = rp_kv_block_data(&c, ids[t / RP_KV_BLOCK]);
        const float *k = blk + ((size_t)l * 2 * RP_KV_BLOCK + t % RP_KV_BLOCK) * cfg.C;
        const float *v = k + (size_t)RP_KV_BLOCK * cfg.C;
        const float *qkv = a.layer[l].qkv + (size_t)t * 3 * cfg.C;
        assert_memory_equal(k, qkv + cfg.C, cfg.C * sizeof(float));
        assert_memory_equal(v, qkv + 2 * cfg.C, cfg.C * sizeof(float));
      }
    if (s > 0) {
      const int *ids0;
      rp_kv_slot_blocks(&c, 0, &ids0);
      assert_int_equal(ids[0], ids0[0]); /* full blocks shared */
      assert_int_equal(ids[1], ids0[1]);
      assert_int_not_equal(ids[2], ids0[2]); /* the partial one is the slot's own */
    }
  }
  for (int s = 0; s < G; s++) rp_kv_release(&c, s);
  assert_int_equal(rp_kv_blocks_used(&c), 0);
  rp_free(mem);
  rp_kv_free(&c);
  rp_chunk_free(&m);
}

/* Prefill a prompt, extend it by a second turn, decode a few tokens: every
 * logits row equals the full forward's over the same context. */
static void check_turns_vs_full(const rp_exec *x) {
  rp_chunk m;
  model_init(&m, 2);
  enum { P = 70, E = 90, D = 5, N = P + E + D };
  int32_t tok[N];
  random_tokens(tok, N, 11);
  rp_acts a;
  rp_layer_acts lv[2];
  void *mem;
  full_forward(&m, x, tok, N, &a, lv, &mem);
  rp_kv_cache c;
  assert_int_equal(rp_kv_init(&c, &m, x->attn, 2, cfg.T), RP_OK);
  const float *lg = rp_kv_prefill(&c, 1, 1, tok, P, x);
  assert_non_null(lg);
  assert_true(max_abs_diff(lg, a.logits + (size_t)(P - 1) * cfg.Vp, cfg.V) < 1e-4f);
  lg = rp_kv_extend(&c, 1, tok + P, E, x);
  assert_non_null(lg);
  assert_true(max_abs_diff(lg, a.logits + (size_t)(P + E - 1) * cfg.Vp, cfg.V) < 1e-4f);
  for (int d = 0; d < D; d++) {
    int slot = 1, t = P + E + d;
    lg = rp_kv_step(&c, &slot, &tok[t], 1, x);
    assert_non_null(lg);
    assert_true(max_abs_diff(lg, a.logits + (size_t)t * cfg.Vp, cfg.V) < 1e-4f);
  }
  assert_int_equal(c.len[1], N);
  rp_free(mem);
  rp_kv_free(&c);
  rp_chunk_free(&m);
}

static void test_turns_equal_full_reference(void **state) {
  (void)state;
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  check_turns_vs_full(&x);
}

static void test_turns_equal_full_flash_pool(void **state) {
  (void)state;
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 2, 0), RP_OK);
  rp_exec x = {.pool = pool, .attn = rp_attn_flash()};
  check_turns_vs_full(&x);
  rp_pool_destroy(pool);
}

/* The gap between the two likeliest tokens of the full forward's last row of
 * ctx[0..n): a mismatch at a near-tie is rounding, not a bug. */
static float top2_gap(const rp_chunk *m, const rp_exec *x, const int32_t *ctx, int n) {
  rp_acts a;
  rp_layer_acts lv[2];
  void *mem;
  full_forward(m, x, ctx, n, &a, lv, &mem);
  const float *row = a.logits + (size_t)(n - 1) * cfg.Vp;
  float b1 = -INFINITY, b2 = -INFINITY;
  for (int i = 0; i < cfg.V; i++) {
    if (row[i] > b1) b2 = b1, b1 = row[i];
    else if (row[i] > b2) b2 = row[i];
  }
  rp_free(mem);
  return b1 - b2;
}

static void check_same_tokens(const rp_sample_params *sp, int greedy) {
  rp_chunk m;
  model_init(&m, 3);
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 2, 0), RP_OK);
  rp_exec x = {.pool = pool, .attn = rp_attn_flash()};
  enum { P = 5, NEW = 190 }; /* within T: the recompute path never slides */
  int32_t prompt[P] = {'R', 'O', 'M', 'E', 'O'}, want[NEW], got[NEW];
  rp_rng r1, r2;
  rp_rng_seed(&r1, 42);
  rp_rng_seed(&r2, 42);
  assert_int_equal(rp_generate_recompute(&m, &x, prompt, P, want, NEW, sp, &r1), RP_OK);
  assert_int_equal(rp_generate(&m, &x, prompt, P, got, NEW, sp, &r2), RP_OK);
  int k = 0;
  while (k < NEW && want[k] == got[k]) k++;
  if (k < NEW && greedy) {
    int32_t ctx[P + NEW];
    memcpy(ctx, prompt, sizeof prompt);
    memcpy(ctx + P, want, (size_t)k * sizeof *want);
    float gap = top2_gap(&m, &x, ctx, P + k);
    print_message("tokens differ at %d at a top-2 logit gap of %g\n", k, gap);
    assert_true(gap < 1e-4f);
  } else {
    assert_int_equal(k, NEW);
  }
  rp_pool_destroy(pool);
  rp_chunk_free(&m);
}

static void test_generate_greedy_matches_recompute(void **state) {
  (void)state;
  rp_sample_params sp = {.temperature = 0, .top_p = 1, .stop = -1};
  check_same_tokens(&sp, 1);
}

static void test_generate_topk_matches_recompute(void **state) {
  (void)state;
  rp_sample_params sp = {.temperature = 0.9f, .top_k = 40, .top_p = 1, .stop = -1};
  check_same_tokens(&sp, 0);
  rp_sample_params nucleus = {.temperature = 1.0f, .top_p = 0.9f, .stop = -1};
  check_same_tokens(&nucleus, 0);
}

static void test_generate_past_the_models_positions(void **state) {
  (void)state;
  rp_chunk m;
  model_init(&m, 4);
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  enum { NEW = 2 * 200 + 17 };
  int32_t prompt[3] = {1, 2, 3}, out[NEW];
  rp_rng r;
  rp_rng_seed(&r, 5);
  rp_sample_params sp = {.temperature = 1.0f, .top_k = 10, .top_p = 1, .stop = -1};
  for (int i = 0; i < NEW; i++) out[i] = -1;
  assert_int_equal(rp_generate(&m, &x, prompt, 3, out, NEW, &sp, &r), RP_OK);
  for (int i = 0; i < NEW; i++) assert_true(out[i] >= 0 && out[i] < cfg.V);
  rp_chunk_free(&m);
}

typedef struct {
  rp_kv_cache *c;
  const float *const *src;
  int nblocks, calls, loaded;
} layer_feed;

/* The hook streams layer l of every block in when layer l first asks. */
static void feed_layer(void *vctx, int layer) {
  layer_feed *f = vctx;
  f->calls++;
  if (layer < f->loaded) return;
  size_t n = (size_t)2 * RP_KV_BLOCK * cfg.C;
  for (int b = 0; b < f->nblocks; b++) rp_kv_attach_layer(f->c, 0, b, layer, f->src[b] + layer * n);
  f->loaded = layer + 1;
}

/* Blocks copied out of one cache and attached to another, whole or layer by
 * layer through the hook, continue the turn bit for bit like the original. */
static void test_attach_continues_a_cached_prefix(void **state) {
  (void)state;
  rp_chunk m;
  model_init(&m, 6);
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  enum { P = 150, E = 20, NB = 3 };
  int32_t tok[P + E];
  random_tokens(tok, P + E, 9);
  rp_kv_cache a, b, l;
  assert_int_equal(rp_kv_init(&a, &m, x.attn, 1, cfg.T), RP_OK);
  assert_int_equal(rp_kv_init(&b, &m, x.attn, 2, cfg.T), RP_OK);
  assert_int_equal(rp_kv_init(&l, &m, x.attn, 1, cfg.T), RP_OK);
  assert_non_null(rp_kv_prefill(&a, 0, 1, tok, P, &x));
  const int *ids;
  assert_int_equal(rp_kv_slot_blocks(&a, 0, &ids), NB);
  float *copy[NB];
  for (int i = 0; i < NB; i++) {
    copy[i] = malloc(rp_kv_block_bytes(&a));
    memcpy(copy[i], rp_kv_block_data(&a, ids[i]), rp_kv_block_bytes(&a));
  }
  float *want = malloc(cfg.Vp * sizeof(float));
  memcpy(want, rp_kv_extend(&a, 0, tok + P, E, &x), cfg.Vp * sizeof(float));
  assert_int_equal(rp_kv_attach(&b, 1, (const float *const *)copy, NB, P), RP_OK);
  assert_int_equal(b.len[1], P);
  assert_memory_equal(rp_kv_extend(&b, 1, tok + P, E, &x), want, cfg.V * sizeof(float));
  layer_feed f = {.c = &l, .src = (const float *const *)copy, .nblocks = NB};
  assert_int_equal(rp_kv_attach(&l, 0, NULL, NB, P), RP_OK);
  rp_kv_set_layer_hook(&l, feed_layer, &f);
  assert_memory_equal(rp_kv_extend(&l, 0, tok + P, E, &x), want, cfg.V * sizeof(float));
  assert_int_equal(f.loaded, cfg.L);
  assert_int_equal(f.calls, cfg.L); /* E < 64: one chunk, one call per layer */
  /* positions beyond the blocks, or a block too many, are refused */
  assert_int_equal(rp_kv_attach(&b, 0, NULL, 2, P), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "attach 2 blocks"));
  assert_int_equal(rp_kv_attach(&b, 0, NULL, 4, P), RP_EINVAL);
  for (int i = 0; i < NB; i++) free(copy[i]);
  free(want);
  rp_kv_free(&a);
  rp_kv_free(&b);
  rp_kv_free(&l);
  rp_chunk_free(&m);
}

static void test_bad_calls_fail_with_a_message(void **state) {
  (void)state;
  rp_chunk m;
  model_init(&m, 5);
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  rp_kv_cache c;
  assert_int_equal(rp_kv_init(&c, &m, x.attn, 1, cfg.T + 1), RP_EINVAL);
  assert_int_equal(rp_kv_init(&c, &m, x.attn, 1, 70), RP_OK);
  int32_t tok[71];
  random_tokens(tok, 71, 3);
  assert_null(rp_kv_prefill(&c, 0, 1, tok, 71, &x));
  assert_non_null(strstr(rp_errmsg(), "71 tokens"));
  assert_non_null(rp_kv_prefill(&c, 0, 1, tok, 70, &x));
  int slot = 0;
  assert_null(rp_kv_step(&c, &slot, tok, 1, &x)); /* slot full */
  assert_non_null(strstr(rp_errmsg(), "full"));
  assert_null(rp_kv_extend(&c, 0, tok, 1, &x));
  rp_kv_free(&c);
  rp_chunk_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blocks_hold_the_forward_kv),
      cmocka_unit_test(test_turns_equal_full_reference),
      cmocka_unit_test(test_turns_equal_full_flash_pool),
      cmocka_unit_test(test_generate_greedy_matches_recompute),
      cmocka_unit_test(test_generate_topk_matches_recompute),
      cmocka_unit_test(test_generate_past_the_models_positions),
      cmocka_unit_test(test_attach_continues_a_cached_prefix),
      cmocka_unit_test(test_bad_calls_fail_with_a_message),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
