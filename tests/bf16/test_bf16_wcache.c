/* The bf16 GEMM's weight packs in the packed-weight cache (rp_sgemm.h): under
 * every bf16 kernel, with a cache attached to the pool, the forward (fp32 input
 * rounded inside) and the backward (fp32 output gradient) are bitwise the calls
 * without one; the second call with a weight reuses its two packs (counted); a
 * weight changed without invalidating gives the stale pack's result (so the
 * reuse is real) and after rp_sgemm_wcache_invalidate the fresh one; a pack over
 * the size limit is not kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "bt_util.h"
#include "ringpipe/rp_sgemm.h"

enum { N = 75, IC = 70, OC = 131 }; /* odd K for dinp, more than one 64-column panel */

typedef struct {
  float *out, *dinp, *dw;
} results;

typedef struct {
  float *inp, *b, *dout;
  uint16_t *inp16, *w;
} operands;

static results run(const operands *o, rp_pool *pool) {
  results r = {bt_alloc(sizeof(float) * N * OC), bt_alloc(sizeof(float) * N * IC),
               bt_alloc(sizeof(float) * OC * IC)};
  memset(r.dw, 0, sizeof(float) * OC * IC);
  rp_matmul_bf16_forward_f32in(r.out, o->inp, o->w, o->b, N, IC, OC, pool);
  rp_matmul_bf16_backward_f32dout(r.dinp, r.dw, o->dout, o->inp16, o->w, N, IC, OC, 1, pool);
  return r;
}

static void same(const results *a, const results *b) {
  assert_memory_equal(a->out, b->out, sizeof(float) * N * OC);
  assert_memory_equal(a->dinp, b->dinp, sizeof(float) * N * IC);
  assert_memory_equal(a->dw, b->dw, sizeof(float) * OC * IC);
}

static void drop(results *r) { free(r->out), free(r->dinp), free(r->dw); }

static operands make_operands(uint64_t seed) {
  rp_rng rng;
  rp_rng_seed(&rng, seed);
  operands o = {bt_alloc(sizeof(float) * N * IC), bt_alloc(sizeof(float) * OC),
                bt_alloc(sizeof(float) * N * OC), bt_alloc(2 * N * IC), bt_alloc(2 * OC * IC)};
  ta_fill(o.inp, (long)N * IC, &rng, -1, 1);
  ta_fill(o.b, OC, &rng, -1, 1);
  ta_fill(o.dout, (long)N * OC, &rng, -1, 1);
  bt_fill16(o.w, (long)OC * IC, &rng);
  rp_bf16_from_f32_array(o.inp16, o.inp, (long)N * IC, NULL);
  return o;
}

static void free_operands(operands *o) {
  free(o->inp), free(o->b), free(o->dout), free(o->inp16), free(o->w);
}

static void test_reuse_bitwise(void **state) {
  (void)state;
  operands op = make_operands(41);
  rp_pool *pool = ta_pool(2);
  const char *kn;
  for (int k = 0; (kn = bt_kernel_set(k)) != NULL; k++) {
    results want = run(&op, pool);
    rp_sgemm_wcache *c;
    assert_int_equal(rp_sgemm_wcache_create(&c, (size_t)1 << 20), RP_OK);
    rp_pool_set_wcache(pool, c);
    for (int pass = 1; pass <= 3; pass++) {
      results got = run(&op, pool);
      same(&want, &got);
      drop(&got);
      rp_sgemm_wcache_stats s = rp_sgemm_wcache_get_stats(c);
      assert_int_equal(s.entries, 2); /* the forward's pack and dinp's */
      assert_int_equal(s.packs, 2);
      assert_int_equal(s.hits, 2 * (pass - 1));
    }
    /* the weight changes; until invalidated the GEMM multiplies the old pack */
    uint16_t *w_old = bt_alloc(2 * OC * IC);
    memcpy(w_old, op.w, 2 * OC * IC);
    for (long i = 0; i < (long)OC * IC; i++) op.w[i] ^= 0x8000; /* negated */
    results stale = run(&op, pool);
    assert_memory_equal(stale.out, want.out, sizeof(float) * N * OC);
    assert_memory_equal(stale.dinp, want.dinp, sizeof(float) * N * IC);
    rp_sgemm_wcache_invalidate(c);
    results fresh = run(&op, pool);
    rp_pool_set_wcache(pool, NULL);
    results nocache = run(&op, pool);
    same(&fresh, &nocache);
    assert_true(memcmp(fresh.out, want.out, sizeof(float) * N * OC) != 0);
    assert_int_equal(rp_sgemm_wcache_get_stats(c).packs, 4);
    memcpy(op.w, w_old, 2 * OC * IC);
    free(w_old);
    drop(&stale), drop(&fresh), drop(&nocache);
    rp_sgemm_wcache_free(c);
    /* a pack over the cache's limit is made per call, as without a cache */
    assert_int_equal(rp_sgemm_wcache_create(&c, 1024), RP_OK);
    rp_pool_set_wcache(pool, c);
    results small = run(&op, pool);
    rp_pool_set_wcache(pool, NULL);
    same(&small, &want);
    assert_int_equal(rp_sgemm_wcache_get_stats(c).entries, 0);
    rp_sgemm_wcache_free(c);
    drop(&small), drop(&want);
    fprintf(stderr, "ok: %s\n", kn);
  }
  bt_kernel_reset();
  rp_pool_destroy(pool);
  free_operands(&op);
}

int main(void) {
  bt_report_skipped("bf16_wcache");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reuse_bitwise),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rp_bf16_workspace_release();
  return rc;
}
