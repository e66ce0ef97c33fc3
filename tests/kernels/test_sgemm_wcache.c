/* The own GEMM's packed-weight cache (rp_sgemm.h): with a cache attached to
 * the pool, forward and backward are bitwise the calls without one, the
 * second call with a weight reuses its packs (counted), a weight changed
 * without invalidating gives the stale pack's result (so the reuse is real)
 * and after rp_sgemm_wcache_invalidate the fresh one; the same address under
 * another shape is another entry; a pack over the size limit is not kept;
 * a detached cache is not used. Every kernel the ISA ceiling allows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kt_util.h"
#include "ringpipe/rp_sgemm.h"

enum { N = 75, IC = 70, OC = 90, WIDE = 90 /* max(IC, OC): the transposed shape's too */ };

typedef struct {
  float *out, *dinp, *dw;
} results;

static results run(rp_sgemm_kernel k, const float *inp, const float *w, const float *b,
                   const float *dout, int ic, int oc, rp_pool *pool) {
  results r = {ta_floats((long)N * oc), ta_floats((long)N * ic), ta_floats((long)oc * ic)};
  rp_sgemm_forward(k, r.out, inp, w, b, NULL, N, ic, oc, pool);
  rp_sgemm_backward(k, r.dinp, r.dw, NULL, dout, inp, w, N, ic, oc, 1, pool);
  return r;
}

static void same(const results *a, const results *b, int ic, int oc) {
  assert_memory_equal(a->out, b->out, sizeof(float) * (size_t)N * oc);
  assert_memory_equal(a->dinp, b->dinp, sizeof(float) * (size_t)N * ic);
  assert_memory_equal(a->dw, b->dw, sizeof(float) * (size_t)oc * ic);
}

static void drop(results *r) { free(r->out), free(r->dinp), free(r->dw); }

typedef struct {
  float *inp, *w, *b, *dout;
} operands;

static operands make_operands(uint64_t seed) {
  rp_rng rng;
  rp_rng_seed(&rng, seed);
  operands o = {ta_floats((long)N * WIDE), ta_floats((long)OC * IC), ta_floats(WIDE),
                ta_floats((long)N * WIDE)};
  ta_fill(o.inp, (long)N * WIDE, &rng, -1, 1);
  ta_fill(o.w, (long)OC * IC, &rng, -1, 1);
  ta_fill(o.b, WIDE, &rng, -1, 1);
  ta_fill(o.dout, (long)N * WIDE, &rng, -1, 1);
  return o;
}

static void free_operands(operands *o) { free(o->inp), free(o->w), free(o->b), free(o->dout); }

static void test_wcache_reuse_bitwise(void **state) {
  (void)state;
  operands op = make_operands(11);
  const float *inp = op.inp, *b = op.b, *dout = op.dout;
  float *w = op.w;
  rp_pool *pool = ta_pool(2);
  for (int k = 0; k < RP_SGEMM_KERNELS; k++) {
    if (!rp_sgemm_kernel_supported((rp_sgemm_kernel)k)) continue;
    results want = run((rp_sgemm_kernel)k, inp, w, b, dout, IC, OC, pool);
    rp_sgemm_wcache *c;
    assert_int_equal(rp_sgemm_wcache_create(&c, (size_t)1 << 20), RP_OK);
    rp_pool_set_wcache(pool, c);
    for (int pass = 1; pass <= 3; pass++) {
      results got = run((rp_sgemm_kernel)k, inp, w, b, dout, IC, OC, pool);
      same(&want, &got, IC, OC);
      drop(&got);
      rp_sgemm_wcache_stats s = rp_sgemm_wcache_get_stats(c);
      assert_int_equal(s.entries, 2); /* the forward's pack and dinp's */
      assert_int_equal(s.packs, 2);
      assert_int_equal(s.hits, 2 * (pass - 1));
      assert_true(s.bytes >= 2 * sizeof(float) * IC * OC);
    }
    /* the weight changes; until invalidated the GEMM multiplies the old pack */
    float *w_old = ta_floats((long)OC * IC);
    memcpy(w_old, w, sizeof(float) * (size_t)OC * IC);
    for (long i = 0; i < (long)OC * IC; i++) w[i] = -0.5f * w[i];
    results stale = run((rp_sgemm_kernel)k, inp, w, b, dout, IC, OC, pool);
    assert_memory_equal(stale.out, want.out, sizeof(float) * (size_t)N * OC);
    assert_memory_equal(stale.dinp, want.dinp, sizeof(float) * (size_t)N * IC);
    rp_sgemm_wcache_invalidate(c);
    results fresh = run((rp_sgemm_kernel)k, inp, w, b, dout, IC, OC, pool);
    rp_pool_set_wcache(pool, NULL);
    results nocache = run((rp_sgemm_kernel)k, inp, w, b, dout, IC, OC, pool);
    same(&fresh, &nocache, IC, OC);
    assert_int_equal(rp_sgemm_wcache_get_stats(c).packs, 4);
    /* the same address as a 70 x 90 weight: its own entries, right results */
    rp_pool_set_wcache(pool, c);
    results t1 = run((rp_sgemm_kernel)k, inp, w, b, dout, OC, IC, pool);
    rp_pool_set_wcache(pool, NULL);
    results t2 = run((rp_sgemm_kernel)k, inp, w, b, dout, OC, IC, pool);
    same(&t1, &t2, OC, IC);
    assert_int_equal(rp_sgemm_wcache_get_stats(c).entries, 4);
    memcpy(w, w_old, sizeof(float) * (size_t)OC * IC);
    free(w_old);
    drop(&want), drop(&stale), drop(&fresh), drop(&nocache), drop(&t1), drop(&t2);
    rp_sgemm_wcache_free(c);
  }
  rp_pool_destroy(pool);
  free_operands(&op);
}

/* A pack over the cache's limit is made per call, as without a cache. */
static void test_wcache_size_limit(void **state) {
  (void)state;
  int k = rp_sgemm_kernel_best();
  if (k < 0) k = RP_SGEMM_PORTABLE;
  operands op = make_operands(12);
  const float *inp = op.inp, *w = op.w, *b = op.b, *dout = op.dout;
  rp_pool *pool = ta_pool(2);
  results want = run((rp_sgemm_kernel)k, inp, w, b, dout, IC, OC, pool);
  rp_sgemm_wcache *c;
  assert_int_equal(rp_sgemm_wcache_create(&c, 1024), RP_OK);
  rp_pool_set_wcache(pool, c);
  results got = run((rp_sgemm_kernel)k, inp, w, b, dout, IC, OC, pool);
  same(&want, &got, IC, OC);
  rp_sgemm_wcache_stats s = rp_sgemm_wcache_get_stats(c);
  assert_int_equal(s.entries, 0);
  assert_int_equal(s.packs + s.hits, 0);
  rp_pool_set_wcache(pool, NULL);
  rp_sgemm_wcache_free(c);
  drop(&want), drop(&got);
  rp_pool_destroy(pool);
  free_operands(&op);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wcache_reuse_bitwise),
      cmocka_unit_test(test_wcache_size_limit),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rp_sgemm_workspace_release();
  return rc;
}
