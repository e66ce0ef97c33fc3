/* Packed documents through the whole model: a document's logits do not depend
 * on the other documents of its row (changing their tokens changes nothing)
 * and equal running it alone as its own row with positions from 0 (1e-5), with
 * the flash and the reference backends; the loss of a packed row is the sum of
 * its documents' losses. A leak through attention, position ids or targets
 * fails one of these. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_util.h"

static const rp_gpt_config cfg = {.L = 2, .C = 32, .NH = 4, .T = 64, .V = 50, .Vp = 64};
enum { T = 40 };
static const int32_t lens[] = {7, 1, 19, 13};   /* a packed row of T tokens */

typedef struct {
  rp_chunk m;
  rp_acts a;
  rp_layer_acts lv[2];
  void *mem;
} run;

static void run_init(run *r, const rp_attn_backend *attn, int Tr) {
  rp_stage_spec spec = {0, cfg.L, 1, 1};
  assert_int_equal(rp_chunk_init(&r->m, &cfg, &spec), RP_OK);
  rp_chunk_init_weights(&r->m, 3);
  r->mem = rp_alloc(rp_acts_bytes(&r->m, attn, 1, Tr), RP_MEM_ACTS);
  rp_acts_bind(&r->a, r->lv, &r->m, attn, r->mem, 1, Tr);
}

static void run_free(run *r) {
  rp_free(r->mem);
  rp_chunk_free(&r->m);
}

/* The packed row: tokens from seed, targets the next token inside each
 * document and -1 at its end, positions restarting. */
static void fill_packed(run *r, rp_docs *d, uint64_t seed) {
  rp_rng rng;
  rp_rng_seed(&rng, seed);
  for (int t = 0; t < T; t++) r->a.tokens[t] = (int32_t)rp_rng_below(&rng, cfg.V);
  rp_docs_positions(d, r->a.pos);
  const int32_t *cu = rp_docs_row(d, 0);
  for (int i = 0; i < d->ndocs[0]; i++)
    for (int t = cu[i]; t < cu[i + 1]; t++)
      r->a.targets[t] = t + 1 < cu[i + 1] ? r->a.tokens[t + 1] : -1;
  r->a.docs = d;
}

static double max_diff(const float *a, const float *b, long n) {
  double w = 0;
  for (long i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - (double)b[i]));
  return w;
}

static void check_backend(const rp_attn_backend *attn) {
  rp_exec x = {.pool = NULL, .attn = attn};
  rp_docs d;
  assert_int_equal(rp_docs_init(&d, 1, T), RP_OK);
  assert_int_equal(rp_docs_set_row(&d, 0, lens, 4), RP_OK);
  run a, b;
  run_init(&a, attn, T);
  run_init(&b, attn, T);
  fill_packed(&a, &d, 1);
  fill_packed(&b, &d, 1);
  /* b: other tokens in documents 0, 1 and 3; document 2 ([8, 27)) unchanged */
  for (int t = 0; t < 8; t++) b.a.tokens[t] = (a.a.tokens[t] + 5) % cfg.V;
  for (int t = 27; t < T; t++) b.a.tokens[t] = (a.a.tokens[t] + 11) % cfg.V;
  for (int t = 0; t < T; t++)   /* targets follow the tokens inside each document */
    b.a.targets[t] = a.a.targets[t] < 0 ? -1 : b.a.tokens[t + 1];
  int va = 0, vb = 0;
  double la = rp_chunk_forward(&a.m, &a.a, &va, &x);
  rp_chunk_forward(&b.m, &b.a, &vb, &x);
  assert_int_equal(va, T - 4);   /* one -1 target per document */
  const long C = cfg.Vp;
  double leak = max_diff(a.a.logits + 8 * C, b.a.logits + 8 * C, 19 * C);
  if (leak > 1e-6) fprintf(stderr, "%s: document 2's logits moved by %g\n", attn->name, leak);
  assert_true(leak <= 1e-6);

  /* each document alone (its own row, positions from 0) gives the same logits
   * and its losses add up to the packed row's */
  const int32_t *cu = rp_docs_row(&d, 0);
  double sum = 0;
  for (int i = 0; i < 4; i++) {
    int L = lens[i];
    run s;
    run_init(&s, attn, L);
    for (int t = 0; t < L; t++) {
      s.a.tokens[t] = a.a.tokens[cu[i] + t];
      s.a.targets[t] = a.a.targets[cu[i] + t];
      s.a.pos[t] = t;
    }
    int v = 0;
    sum += rp_chunk_forward(&s.m, &s.a, &v, &x);
    double dl = max_diff(s.a.logits, a.a.logits + (long)cu[i] * C, (long)L * C);
    if (dl > 1e-5) fprintf(stderr, "%s: document %d alone differs by %g\n", attn->name, i, dl);
    assert_true(dl <= 1e-5);
    run_free(&s);
  }
  assert_true(fabs(sum - la) <= 1e-5 * fabs(la));
  run_free(&a);
  run_free(&b);
  rp_docs_free(&d);
}

static void test_no_leak_flash(void **state) { check_backend(rp_attn_flash()); }
static void test_no_leak_reference(void **state) { check_backend(rp_attn_reference()); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_leak_flash),
      cmocka_unit_test(test_no_leak_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
