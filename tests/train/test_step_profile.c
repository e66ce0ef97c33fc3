/* The step profile: the work model counts the FLOPs and bytes the docs say,
 * the profiler keeps evaluation calls between steps out of the step totals and
 * closes steps into a wall time, and the printed table names every part with
 * a fraction of peak. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_step_profile.h"

static void test_work_model(void **state) {
  rp_gpt_config cfg = {.L = 2, .C = 64, .NH = 4, .T = 32, .V = 100, .Vp = rp_pad_vocab(100)};
  rp_chunk m;
  rp_stage_spec spec = {.first_layer = 0, .num_layers = 2, .has_embed = 1, .has_head = 1};
  assert_int_equal(rp_chunk_init(&m, &cfg, &spec), RP_OK);
  rp_step_work w = {0};
  const int B = 3, T = 32, mb = 2;
  const double N = (double)B * T * mb, pairs = 0.5 * T * (T + 1.0);
  rp_step_work_add_chunk(&w, &m, B, T, pairs, mb);
  /* 6 FLOPs per matmul weight per token: 12 C^2 per layer plus the C x Vp head */
  assert_true(w.flops[RP_PART_GEMM] == 6.0 * N * (2 * 12.0 * 64 * 64 + 64.0 * cfg.Vp));
  assert_true(w.flops[RP_PART_ATTENTION] == 2 * 14.0 * 64 * pairs * B * mb);
  assert_true(w.bytes[RP_PART_LAYERNORM] == (2 * 2 + 1) * 24.0 * N * 64);
  assert_true(w.bytes[RP_PART_GELU] == 2 * 80.0 * N * 64);
  assert_true(w.bytes[RP_PART_XENT] == 12.0 * N * cfg.Vp);
  assert_true(w.flops[RP_PART_LAYERNORM] == 0 && w.bytes[RP_PART_GEMM] == 0);
  /* the loss taken in the backward: no forward pass over the logits */
  rp_step_work w2 = {.loss_in_backward = 1};
  rp_step_work_add_chunk(&w2, &m, B, T, pairs, mb);
  assert_true(w2.bytes[RP_PART_XENT] == 8.0 * N * cfg.Vp);
  rp_step_work_add_optimizer(&w, 1000);
  assert_true(w.bytes[RP_PART_OPTIMIZER] == 36000.0);
  rp_chunk_free(&m);
}

static void test_steps_and_between(void **state) {
  rp_prof_enable(1);
  rp_prof_step_begin();
  RP_PROF(RP_PROF_FWD_GELU, (void)0);
  rp_prof_add(RP_PROF_FWD_MATMUL, 0.25);
  rp_prof_step_end();
  rp_prof_add(RP_PROF_FWD_MATMUL, 10.0);   /* between steps: an evaluation forward */
  rp_prof_step_begin();
  rp_prof_add(RP_PROF_FWD_MATMUL, 0.5);
  rp_prof_step_end();
  assert_int_equal(rp_prof_steps(), 2);
  assert_true(rp_prof_seconds(RP_PROF_FWD_MATMUL) == 0.75);
  assert_int_equal(rp_prof_calls(RP_PROF_FWD_GELU), 1);
  assert_true(rp_prof_wall_seconds() >= 0.0 && rp_prof_wall_seconds() < 1.0);

  rp_step_work w = {0};
  w.flops[RP_PART_GEMM] = 1e9;
  w.bytes[RP_PART_GELU] = 1e6;
  rp_step_peaks pk = {.fma_flops = 1e11, .fma_level = "avx2", .stream_bytes = 1e10,
                      .stream_size = 1 << 20};
  char buf[4096] = {0};
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  assert_non_null(f);
  rp_step_profile_print(f, &w, &pk);
  fclose(f);
  printf("%s", buf);
  assert_non_null(strstr(buf, "mean of 2 steps"));
  assert_non_null(strstr(buf, "GEMM"));
  assert_non_null(strstr(buf, "idle / untimed"));
  /* 1e9 FLOP in 0.375 s per step = 2.67 GFLOP/s = 0.027 of 1e11 */
  assert_non_null(strstr(buf, "0.027 FMA"));
  /* the quiet column (each call site at its fastest; the two steps' sites
   * differ here, so 0.5 + 0.25 s) and the kernels apart */
  assert_non_null(strstr(buf, "quiet ms"));
  assert_true(rp_prof_min_seconds(RP_PROF_FWD_MATMUL) == 0.75);
  assert_non_null(strstr(buf, "fwd matmul (sgemm)                     375.00    750.00"));
  rp_prof_enable(0);
}

/* The measured peaks are positive on any machine this runs on (the stream rate
 * always; the FMA probe unless the ceiling is scalar). */
static void test_peaks_measured(void **state) {
  rp_pool *pool = NULL;
  assert_int_equal(rp_pool_create(&pool, 2, 0), RP_OK);
  rp_step_peaks pk;
  rp_step_peaks_measure(&pk, 1 << 20, pool);
  assert_true(pk.stream_bytes > 0);
  assert_true(pk.fma_flops > 0 || strstr(pk.fma_level, "scalar") != NULL);
  rp_pool_destroy(pool);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_work_model),
      cmocka_unit_test(test_steps_and_between),
      cmocka_unit_test(test_peaks_measured),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
