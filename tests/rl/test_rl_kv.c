/* KV cache and sampling: incremental logits equal a full forward's (1e-4) for
 * several slots of different lengths, with the reference and flash backends
 * and a 2-thread pool; greedy decoding equals rp_generate's full
 * recomputation; results do not depend on how prompts are batched; top-k 1
 * and a tiny top-p are greedy; top-k never leaves the k likeliest; sampled
 * frequencies follow the softmax; the token budget and stop token hold. */
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
#include "ringpipe/rp_rl.h"
#include "ringpipe/rp_train.h"

static const rp_gpt_config cfg = {.L = 2, .C = 32, .NH = 4, .T = 24, .V = 256, .Vp = 256};

static void model_init(rp_chunk *m, uint64_t seed) {
  rp_stage_spec spec = {0, cfg.L, 1, 1};
  assert_int_equal(rp_chunk_init(m, &cfg, &spec), RP_OK);
  rp_chunk_init_weights(m, seed);
  /* larger weights than GPT-2's init so logits differ clearly between tokens */
  for (size_t i = 0; i < m->num_params; i++) m->params[i] *= 3.0f;
}

/* Logits of every position of one sequence by a full forward. */
static float *full_logits(const rp_chunk *m, const rp_exec *x, const int32_t *tok, int n) {
  rp_layer_acts lv[2];
  rp_acts a;
  void *mem = rp_alloc(rp_acts_bytes(m, x->attn, 1, n), RP_MEM_ACTS);
  rp_acts_bind(&a, lv, m, x->attn, mem, 1, n);
  for (int t = 0; t < n; t++) {
    a.tokens[t] = tok[t];
    a.targets[t] = -1;
    a.pos[t] = t;
  }
  rp_chunk_forward(m, &a, NULL, x);
  float *out = malloc((size_t)n * cfg.Vp * sizeof(float));
  memcpy(out, a.logits, (size_t)n * cfg.Vp * sizeof(float));
  rp_free(mem);
  return out;
}

static void check_cache_vs_full(const rp_exec *x) {
  rp_chunk m;
  model_init(&m, 3);
  enum { NP = 3, G = 2, S = NP * G, STEPS = 12 };
  const int plen[NP] = {3, 7, 1};
  int32_t seq[S][24];
  rp_rng r;
  rp_rng_seed(&r, 5);
  for (int s = 0; s < S; s++)
    for (int t = 0; t < 24; t++) seq[s][t] = (int32_t)rp_rng_below(&r, 256);
  for (int i = 0; i < NP; i++) /* the G slots of a group share the prompt */
    for (int g = 1; g < G; g++) memcpy(seq[i * G + g], seq[i * G], plen[i] * sizeof(int32_t));
  rp_kv_cache c;
  assert_int_equal(rp_kv_init(&c, &m, x->attn, S, cfg.T), RP_OK);
  double maxdiff = 0;
  float *ref[S];
  for (int s = 0; s < S; s++) ref[s] = full_logits(&m, x, seq[s], plen[s / G] + STEPS);
  for (int i = 0; i < NP; i++) {
    const float *lg = rp_kv_prefill(&c, i * G, G, seq[i * G], plen[i], x);
    for (int v = 0; v < cfg.V; v++)
      maxdiff = fmax(maxdiff, fabs(lg[v] - ref[i * G][(plen[i] - 1) * cfg.Vp + v]));
  }
  /* decode with a changing set of active slots (slot 4 joins late) */
  for (int step = 0; step < STEPS; step++) {
    int slots[S], n = 0;
    int32_t tok[S];
    for (int s = 0; s < S; s++) {
      if (s == 4 && step < 3) continue;
      int pos = c.len[s];
      if (pos >= plen[s / G] + STEPS) continue;
      slots[n] = s;
      tok[n++] = seq[s][pos];
    }
    if (n == 0) break;
    const float *lg = rp_kv_step(&c, slots, tok, n, x);
    for (int i = 0; i < n; i++) {
      int s = slots[i], pos = c.len[s] - 1;
      for (int v = 0; v < cfg.V; v++)
        maxdiff = fmax(maxdiff, fabs(lg[(size_t)i * cfg.Vp + v] - ref[s][pos * cfg.Vp + v]));
    }
  }
  if (maxdiff > 1e-4) fail_msg("KV cache logits differ from the full forward by %g", maxdiff);
  for (int s = 0; s < S; s++) free(ref[s]);
  rp_kv_free(&c);
  rp_chunk_free(&m);
}

static void test_cache_equals_full_reference(void **state) {
  (void)state;
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  check_cache_vs_full(&x);
}

static void test_cache_equals_full_flash_pool(void **state) {
  (void)state;
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 2, 0), RP_OK);
  rp_exec x = {.pool = pool, .attn = rp_attn_flash()};
  check_cache_vs_full(&x);
  rp_pool_destroy(pool);
}

static void test_greedy_matches_generate(void **state) {
  (void)state;
  rp_chunk m;
  model_init(&m, 4);
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  int32_t prompt[5] = {'1', '2', '+', '3', '='};
  enum { NEW = 15 };
  int32_t want[NEW], got[NEW];
  rp_rng r;
  rp_rng_seed(&r, 1);
  const rp_sample_params greedy = {.temperature = 0, .top_p = 1, .max_new = NEW, .stop = -1};
  assert_int_equal(rp_generate_recompute(&m, &x, prompt, 5, want, NEW, &greedy, &r), RP_OK);
  rp_kv_cache c;
  assert_int_equal(rp_kv_init(&c, &m, x.attn, 4, cfg.T), RP_OK);
  const int32_t *pp[1] = {prompt};
  int plen = 5, olen;
  uint64_t seed = 0;
  rp_sample_params sp = {.temperature = 0, .top_p = 1, .max_new = NEW, .stop = -1};
  assert_int_equal(rp_sample_groups(&c, &x, pp, &plen, 1, 1, &sp, &seed, got, &olen, NULL), RP_OK);
  assert_int_equal(olen, NEW);
  assert_memory_equal(want, got, sizeof want);
  /* top-k 1 and a tiny nucleus are greedy too, whatever the temperature */
  rp_sample_params k1 = {.temperature = 1.5f, .top_k = 1, .top_p = 1, .max_new = NEW, .stop = -1};
  rp_sample_params p0 = {.temperature = 1.5f, .top_p = 1e-6f, .max_new = NEW, .stop = -1};
  seed = 99;
  assert_int_equal(rp_sample_groups(&c, &x, pp, &plen, 1, 1, &k1, &seed, got, &olen, NULL), RP_OK);
  assert_memory_equal(want, got, sizeof want);
  assert_int_equal(rp_sample_groups(&c, &x, pp, &plen, 1, 1, &p0, &seed, got, &olen, NULL), RP_OK);
  assert_memory_equal(want, got, sizeof want);
  rp_kv_free(&c);
  rp_chunk_free(&m);
}

/* Sampling with temperature: the same seeds give the same completions
 * whether the prompts go in one call or one by one, and the budget, the cut
 * at the model's positions and the stop token hold. */
static void test_sampling_batch_invariant(void **state) {
  (void)state;
  rp_chunk m;
  model_init(&m, 6);
  for (size_t i = 0; i < m.num_params; i++) m.params[i] *= 0.4f; /* flatter: varied samples */
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  enum { NP = 3, G = 4, S = NP * G, MAXNEW = 10 };
  int32_t p0[2] = {'a', 'b'}, p1[4] = {'x', 'y', 'z', 'w'}, p2[20];
  for (int t = 0; t < 20; t++) p2[t] = 'a' + t;
  const int32_t *pp[NP] = {p0, p1, p2};
  int plen[NP] = {2, 4, 20};
  uint64_t seeds[S];
  for (int s = 0; s < S; s++) seeds[s] = 1000 + (uint64_t)s;
  rp_sample_params sp = {.temperature = 1.0f, .top_p = 1, .max_new = MAXNEW, .stop = 'e'};
  rp_kv_cache c;
  assert_int_equal(rp_kv_init(&c, &m, x.attn, S, cfg.T), RP_OK);
  int32_t all[S * MAXNEW], one[G * MAXNEW];
  int alen[S], olen[G];
  assert_int_equal(rp_sample_groups(&c, &x, pp, plen, NP, G, &sp, seeds, all, alen, NULL), RP_OK);
  int distinct = 0, stopped = 0;
  for (int i = 0; i < NP; i++) {
    assert_int_equal(rp_sample_groups(&c, &x, pp + i, plen + i, 1, G, &sp, seeds + i * G, one,
                                      olen, NULL), RP_OK);
    for (int g = 0; g < G; g++) {
      int s = i * G + g;
      assert_int_equal(olen[g], alen[s]);
      assert_memory_equal(one + g * MAXNEW, all + s * MAXNEW, olen[g] * sizeof(int32_t));
      assert_true(alen[s] >= 1 && alen[s] <= RP_MIN(MAXNEW, cfg.T - plen[i]));
      for (int t = 0; t < alen[s] - 1; t++) assert_true(all[s * MAXNEW + t] != 'e');
      stopped += all[s * MAXNEW + alen[s] - 1] == 'e';
      if (g > 0) distinct += memcmp(all + s * MAXNEW, all + (s - 1) * MAXNEW, 3 * sizeof(int32_t)) != 0;
    }
  }
  assert_true(distinct > 0);                 /* the G completions of a group differ */
  assert_true(alen[2 * G] <= cfg.T - 20);    /* the long prompt is cut at the positions */
  (void)stopped;
  rp_kv_free(&c);
  rp_chunk_free(&m);
}

static void test_sample_token_distribution(void **state) {
  (void)state;
  enum { NV = 6, DRAWS = 60000 };
  const float logits[NV] = {1.0f, 0.5f, -1.0f, 2.0f, 0.0f, 1.5f};
  float probs[NV];
  int idx[NV], count[NV] = {0};
  rp_rng r;
  rp_rng_seed(&r, 17);
  for (int tcase = 0; tcase < 3; tcase++) {
    rp_sample_params sp = {.temperature = tcase == 1 ? 0.5f : 1.0f, .top_k = tcase == 2 ? 2 : 0,
                           .top_p = 1};
    memset(count, 0, sizeof count);
    for (int i = 0; i < DRAWS; i++) count[rp_sample_token(logits, NV, &sp, &r, probs, idx)]++;
    double z = 0, want[NV];
    for (int v = 0; v < NV; v++) {
      int kept = tcase != 2 || v == 3 || v == 5; /* top-2: logits 2.0 and 1.5 */
      want[v] = kept ? exp(logits[v] / sp.temperature) : 0;
      z += want[v];
    }
    for (int v = 0; v < NV; v++) {
      double p = want[v] / z, f = (double)count[v] / DRAWS;
      if (fabs(f - p) > 0.01) fail_msg("case %d token %d: frequency %.4f, probability %.4f", tcase, v, f, p);
      if (p == 0) assert_int_equal(count[v], 0);
    }
  }
  /* top-p 0.6 of {0.5, 0.3, 0.2}: the two likeliest (mass 0.8 >= 0.6) */
  const float l3[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
  rp_sample_params tp = {.temperature = 1, .top_p = 0.6f};
  int c3[3] = {0};
  for (int i = 0; i < 20000; i++) c3[rp_sample_token(l3, 3, &tp, &r, probs, idx)]++;
  assert_int_equal(c3[2], 0);
  assert_true(fabs(c3[0] / 20000.0 - 0.625) < 0.02);
}

static void test_cache_errors(void **state) {
  (void)state;
  rp_chunk m;
  model_init(&m, 1);
  rp_kv_cache c;
  assert_int_equal(rp_kv_init(&c, &m, rp_attn_reference(), 4, cfg.T + 1), RP_EINVAL);
  assert_int_equal(rp_kv_init(&c, &m, rp_attn_reference(), 2, cfg.T), RP_OK);
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  int32_t p[1] = {'a'};
  const int32_t *pp[1] = {p};
  int plen = 1, olen[3];
  uint64_t seeds[3] = {1, 2, 3};
  int32_t out[3 * 4];
  rp_sample_params sp = {.temperature = 1, .top_p = 1, .max_new = 4, .stop = -1};
  assert_int_equal(rp_sample_groups(&c, &x, pp, &plen, 1, 3, &sp, seeds, out, olen, NULL), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "slots"));
  rp_kv_free(&c);
  rp_chunk_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cache_equals_full_reference),
      cmocka_unit_test(test_cache_equals_full_flash_pool),
      cmocka_unit_test(test_greedy_matches_generate),
      cmocka_unit_test(test_sampling_batch_invariant),
      cmocka_unit_test(test_sample_token_distribution),
      cmocka_unit_test(test_cache_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
