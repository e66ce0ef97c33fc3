/* The step profile: the work model counts the FLOPs and bytes the docs say,
 * the profiler keeps evaluation calls between steps out of the step totals and
 * closes steps into a wall time, and the printed table names every part with
 * a fraction of peak. */
#include <setjmp.h>
#include <unistd.h>
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
  assert_null(strstr(buf, "bound:")); /* no GEMM rate measured: no bound */
  /* with one: the GEMMs at 4 GFLOP/s (0.25 s, faster than their quiet 0.75 s)
   * and the GELU at its quiet time; 1e9 FLOP in that over 1e11 */
  pk.gemm_flops = 4e9;
  memset(buf, 0, sizeof buf);
  f = fmemopen(buf, sizeof buf - 1, "w");
  assert_non_null(f);
  rp_step_profile_print(f, &w, &pk);
  fclose(f);
  rp_step_times st;
  assert_int_equal(rp_step_times_read(&st), 1);
  const double q = 0.25 + st.quiet[RP_PART_GELU];
  assert_true(rp_step_bound_seconds(&st, &w, 4e9) == q);
  char want[128];
  snprintf(want, sizeof want, "%.2f ms a step, %.3f of the FMA peak", q * 1e3, 1e9 / q / 1e11);
  assert_non_null(strstr(buf, "bound: the GEMMs at the rate they reach alone"));
  assert_non_null(strstr(buf, want));
  assert_null(strstr(buf, "at start-up")); /* one rate given: no pair named */
  /* measured at start-up and after the steps: the line names both (the
   * trainer passes the better as gemm_flops) */
  pk.gemm_start = 2e9, pk.gemm_after = 4e9;
  memset(buf, 0, sizeof buf);
  f = fmemopen(buf, sizeof buf - 1, "w");
  assert_non_null(f);
  rp_step_profile_print(f, &w, &pk);
  fclose(f);
  assert_non_null(strstr(buf, "(4.0 GFLOP/s, 0.040 of the FMA peak: the better of 2.0 at "
                              "start-up and 4.0 after the steps) and every other part"));
  assert_non_null(strstr(buf, want));
  rp_prof_enable(0);
}

/* The bound: the GEMMs at the given rate unless their quiet time is
 * shorter, every other part at its quiet time, the idle time out of it. */
static void test_bound(void **state) {
  rp_step_times st = {0};
  rp_step_work w = {0};
  st.quiet[RP_PART_GEMM] = 0.5;
  st.quiet[RP_PART_ATTENTION] = 0.1;
  st.quiet[RP_PART_OPTIMIZER] = 0.05;
  st.quiet[RP_PART_IDLE] = -1.0;
  st.part[RP_PART_IDLE] = 3.0;
  w.flops[RP_PART_GEMM] = 1e9;
  assert_true(rp_step_bound_seconds(&st, &w, 4e9) == 0.25 + 0.1 + 0.05);
  assert_true(rp_step_bound_seconds(&st, &w, 1e9) == 0.5 + 0.1 + 0.05); /* quiet is faster */
  assert_true(rp_step_bound_seconds(&st, &w, 0.0) < 0);                  /* no rate */
  w.flops[RP_PART_GEMM] = 0.0;
  assert_true(rp_step_bound_seconds(&st, &w, 4e9) < 0); /* no GEMM work */
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

/* The width of the first rect of class cls after the label `name` in svg. */
static double rect_width_after(const char *svg, const char *name, const char *cls) {
  const char *at = strstr(svg, name);
  if (!at) return -1.0;
  char key[64];
  snprintf(key, sizeof key, "class='%s'", cls);
  at = strstr(at, key);
  if (!at) return -1.0;
  at = strstr(at, "width='");
  return at ? atof(at + 7) : -1.0;
}

/* The figure: each part's bar is its share of the step on a 420-pixel scale,
 * dark up to its work's time at its peak (never past the bar), grey where no
 * work is counted; written whole or not at all. */
static void test_profile_figure(void **state) {
  (void)state;
  rp_step_times st = {.steps = 3, .wall = 0.4, .timed_quiet = 0.35};
  st.part[RP_PART_GEMM] = 0.3;
  st.part[RP_PART_GELU] = 0.02;
  st.part[RP_PART_COPIES] = 0.01;
  st.part[RP_PART_IDLE] = 0.07;
  st.quiet[RP_PART_IDLE] = -1.0;
  rp_step_work w = {0};
  w.flops[RP_PART_GEMM] = 20e9;  /* 0.2 s at 1e11 FLOP/s */
  w.bytes[RP_PART_GELU] = 1e9;   /* 0.1 s at 1e10 B/s: more than its 0.02 s */
  rp_step_peaks pk = {.fma_flops = 1e11, .fma_level = "avx2", .stream_bytes = 1e10,
                      .stream_size = 1 << 20};
  char dir[] = "/tmp/rp_step_svg_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128], tmp[160];
  snprintf(path, sizeof path, "%s/step_profile.svg", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()); /* rp_io_afile's */
  assert_int_equal(rp_step_profile_write_svg(path, "a <title> & more", &st, &w, &pk), RP_OK);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char svg[1 << 16];
  size_t n = fread(svg, 1, sizeof svg - 1, f);
  svg[n] = '\0';
  fclose(f);
  assert_int_equal(access(tmp, F_OK), -1);
  assert_non_null(strstr(svg, "a &lt;title&gt; &amp; more"));
  assert_non_null(strstr(svg, "</svg>"));
  /* GEMM: 0.3 of 0.4 s = 315 px, at peak 0.2 s = 210 px, 0.667 of the FMA peak */
  assert_float_equal(rect_width_after(svg, ">GEMM", "time"), 315.0, 0.01);
  assert_float_equal(rect_width_after(svg, ">GEMM", "peak"), 210.0, 0.01);
  assert_non_null(strstr(svg, "300.00 ms, 75.0 %: 0.667 of the FMA peak"));
  /* GELU: 21 px, its 0.1 s at the stream rate capped at the bar */
  assert_float_equal(rect_width_after(svg, ">GELU", "time"), 21.0, 0.01);
  assert_float_equal(rect_width_after(svg, ">GELU", "peak"), 21.0, 0.01);
  /* copies: no work counted, no dark part; idle and the step's own bar */
  assert_float_equal(rect_width_after(svg, ">copies", "peak"), 0.0, 0.01);
  assert_non_null(strstr(svg, ">idle / untimed<"));
  assert_float_equal(rect_width_after(svg, ">step (wall)", "time"), 420.0, 0.01);
  /* parts at peak: 0.2 + 0.1 s */
  assert_non_null(strstr(svg, "400.00 ms, its parts at peak 300.00 ms: 0.500 of the FMA peak"));
  remove(path);
  /* an unwritable place: an error, and no file of either name */
  char bad[192];
  snprintf(bad, sizeof bad, "%s/no/such/dir/step_profile.svg", dir);
  assert_int_equal(rp_step_profile_write_svg(bad, "t", &st, &w, &pk), RP_EIO);
  assert_int_equal(access(bad, F_OK), -1);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_work_model),
      cmocka_unit_test(test_steps_and_between),
      cmocka_unit_test(test_bound),
      cmocka_unit_test(test_peaks_measured),
      cmocka_unit_test(test_profile_figure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
