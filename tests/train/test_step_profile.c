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
  assert_true(w.opt_footprint == 16000.0); /* p, g, m, v */
  rp_chunk_free(&m);
}

/* The printed profile of w and pk into buf (also shown in the test's log). */
static void print_profile(char *buf, size_t n, const rp_step_work *w, const rp_step_peaks *pk) {
  memset(buf, 0, n);
  FILE *f = fmemopen(buf, n - 1, "w");
  assert_non_null(f);
  rp_step_profile_print(f, w, pk);
  fclose(f);
  printf("%s", buf);
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
  char buf[4096];
  print_profile(buf, sizeof buf, &w, &pk);
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
  print_profile(buf, sizeof buf, &w, &pk);
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
  print_profile(buf, sizeof buf, &w, &pk);
  assert_non_null(strstr(buf, "(4.0 GFLOP/s, 0.040 of the FMA peak: the better of 2.0 at "
                              "start-up and 4.0 after the steps) and every other part"));
  assert_non_null(strstr(buf, want));
  rp_prof_enable(0);
}

/* One timed matmul region that ran the products noted before it. */
static void region(rp_prof_id id, double seconds, long rows, long in, long out, int backward,
                   int dinp, int dw) {
  rp_prof_gemm_note(rows, in, out, backward, dinp, dw);
  rp_prof_add(id, seconds);
}

/* The GEMM products apart: each timed matmul region takes the notes made
 * since the last region (none for other components), rows group by shape and
 * pass in the step's order with their sites' means and fastest calls, and the
 * printed table names them, sets them beside the same product alone and adds
 * up to the GEMM part. */
static void test_gemm_products(void **state) {
  (void)state;
  rp_prof_gemm_note(8, 4, 4, 0, 0, 0); /* not profiling: no note */
  rp_prof_enable(1);
  const double t[2][4] = {{0.3, 0.2, 0.4, 0.1}, {0.1, 0.4, 0.2, 0.3}};
  for (int step = 0; step < 2; step++) {
    rp_prof_step_begin();
    region(RP_PROF_FWD_MATMUL, t[step][0], 1024, 64, 192, 0, 0, 0); /* qkv */
    rp_prof_gemm_note(1024, 64, 64, 0, 0, 0); /* a note a non-matmul region drops */
    rp_prof_add(RP_PROF_FWD_ATTENTION, 0.05);
    region(RP_PROF_FWD_MATMUL, t[step][1], 1024, 64, 192, 0, 0, 0);      /* qkv again */
    region(RP_PROF_BWD_MATMUL, t[step][2], 1024, 64, 256, 1, 1, 1);      /* fc or head */
    region(RP_PROF_BWD_MATMUL, t[step][3], 1024, 64, 256, 1, 0, 1);      /* dweight alone */
    rp_prof_add(RP_PROF_BWD_MATMUL, 0.01); /* a region with no product (a bias) */
    rp_prof_step_end();
  }
  rp_prof_gemm_row rows[4];
  assert_int_equal(rp_prof_gemm_rows(rows, 4), 3);
  assert_int_equal(rows[0].pass, RP_PROF_GEMM_FORWARD);
  assert_true(rows[0].rows == 1024 && rows[0].in == 64 && rows[0].out == 192);
  assert_int_equal(rows[0].sites, 2);
  assert_true(rows[0].flops == 2 * 2.0 * 1024 * 64 * 192);
  assert_float_equal(rows[0].seconds, 0.2 + 0.3, 1e-12); /* the sites' means */
  assert_float_equal(rows[0].quiet, 0.1 + 0.2, 1e-12);   /* their fastest calls */
  assert_int_equal(rows[1].pass, RP_PROF_GEMM_BACKWARD);
  assert_true(rows[1].flops == 2 * 2.0 * 1024 * 64 * 256);
  assert_float_equal(rows[1].seconds, 0.3, 1e-12);
  assert_float_equal(rows[1].quiet, 0.2, 1e-12);
  assert_int_equal(rows[2].pass, RP_PROF_GEMM_DWEIGHT);
  assert_true(rows[2].flops == 2.0 * 1024 * 64 * 256);
  assert_string_equal(rp_prof_gemm_pass_name(rows[2].pass), "dweight");
  assert_int_equal(rp_prof_gemm_rows(rows, 2), 2); /* only what fits */

  /* a small model whose LM head (64 -> 256) has c_fc's shape: both named */
  rp_gpt_config cfg = {.L = 1, .C = 64, .NH = 4, .T = 32, .V = 200, .Vp = rp_pad_vocab(200)};
  assert_true(cfg.Vp == 256);
  rp_chunk m;
  rp_stage_spec spec = {.first_layer = 0, .num_layers = 1, .has_embed = 1, .has_head = 1};
  assert_int_equal(rp_chunk_init(&m, &cfg, &spec), RP_OK);
  rp_step_work w = {0};
  rp_step_work_add_chunk(&w, &m, 32, 32, 0.5 * 32 * 33, 1);
  rp_chunk_free(&m);
  assert_int_equal(w.ngemm_names, 4);
  assert_string_equal(w.gemm_names[2].name, "fc / lm head");
  /* qkv alone at 0.5 of the peak forward; fc's backward alone unmeasured */
  rp_step_peaks pk = {.fma_flops = 1e11, .fma_level = "avx2", .stream_bytes = 1e10,
                      .stream_size = 1 << 20, .ngemm_alone = 2, .gemm_alone_rows = 1024};
  pk.gemm_alone[0] = (rp_gemm_shape_rate){.in = 64, .out = 192, .fwd = 5e10, .bwd = 1e10};
  pk.gemm_alone[1] = (rp_gemm_shape_rate){.in = 64, .out = 256, .fwd = 2e10, .bwd = 0.0};
  char buf[8192];
  print_profile(buf, sizeof buf, &w, &pk);
  assert_non_null(strstr(buf, "  by GEMM product ("));
  /* qkv forward: 50.3 MFLOP in 0.5 s = 0.1 GFLOP/s, 0.001 of 1e11; quiet 0.3 s */
  char want[256];
  snprintf(want, sizeof want, "    %-20s %-22s %-8s %5d %9.2f %9.2f %9.1f %7.3f %7.3f %7.3f",
           "qkv", "1024 x 64 -> 192", "forward", 2, 500.0, 300.0,
           2 * 2.0 * 1024 * 64 * 192 / 0.5 / 1e9, 2 * 2.0 * 1024 * 64 * 192 / 0.5 / 1e11,
           2 * 2.0 * 1024 * 64 * 192 / 0.3 / 1e11, 0.5);
  assert_non_null(strstr(buf, want));
  snprintf(want, sizeof want, "    %-20s %-22s %-8s %5d %9.2f %9.2f %9.1f %7.3f %7.3f %7s\n",
           "fc / lm head", "1024 x 64 -> 256", "backward", 1, 300.0, 200.0,
           2 * 2.0 * 1024 * 64 * 256 / 0.3 / 1e9, 2 * 2.0 * 1024 * 64 * 256 / 0.3 / 1e11,
           2 * 2.0 * 1024 * 64 * 256 / 0.2 / 1e11, "-");
  assert_non_null(strstr(buf, want));
  assert_non_null(strstr(buf, "dweight")); /* no alone figure for a part of a backward */
  /* the products add up to the matmul regions that ran one (not the bias's) */
  snprintf(want, sizeof want, "    %-20s %-22s %-8s %5s %9.2f %9.2f\n", "all products", "", "",
           "", 1000.0, 600.0);
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
  /* no optimizer counted: no rate of its own, every part held to stream_bytes */
  rp_step_work w = {0};
  rp_step_peaks_measure_optimizer(&pk, &w, pool);
  assert_true(pk.stream_opt_bytes == 0 && pk.stream_opt_size == 0);
  assert_true(rp_step_stream_of(&pk, RP_PART_OPTIMIZER) == pk.stream_bytes);
  /* 1M parameters: two buffers of 8 MB, half of p, g, m and v */
  rp_step_work_add_optimizer(&w, 1L << 20);
  rp_step_peaks_measure_optimizer(&pk, &w, pool);
  assert_int_equal(pk.stream_opt_size, 8L << 20);
  assert_true(pk.stream_opt_bytes > 0);
  assert_true(rp_step_stream_of(&pk, RP_PART_OPTIMIZER) == pk.stream_opt_bytes);
  assert_true(rp_step_stream_of(&pk, RP_PART_GELU) == pk.stream_bytes);
  rp_pool_destroy(pool);
}

/* The optimizer's part against its own stream rate, printed and drawn; the
 * other memory parts against the activation-sized one; and a footprint past
 * the cap measured at the cap. */
static void test_optimizer_stream(void **state) {
  (void)state;
  rp_prof_enable(1);
  rp_prof_step_begin();
  rp_prof_add(RP_PROF_OPT_ADAMW, 0.1);
  rp_prof_add(RP_PROF_FWD_GELU, 0.1);
  rp_prof_step_end();
  rp_step_work w = {0};
  w.bytes[RP_PART_OPTIMIZER] = 1e9; /* 10 GB/s */
  w.bytes[RP_PART_GELU] = 1e9;
  rp_step_peaks pk = {.fma_flops = 1e11, .fma_level = "avx2", .stream_bytes = 40e9,
                      .stream_size = 1 << 20, .stream_opt_bytes = 20e9,
                      .stream_opt_size = 64L << 20};
  char buf[4096];
  print_profile(buf, sizeof buf, &w, &pk);
  assert_non_null(strstr(buf, "  the optimizer's stream: 20.0 GB/s (two 64.0 MiB buffers, its "
                              "footprint)\n"));
  const char *opt = strstr(buf, "  optimizer"), *gelu = strstr(buf, "  GELU");
  assert_non_null(opt);
  assert_non_null(gelu);
  assert_non_null(strstr(opt, "0.500 stream")); /* 10 of 20 GB/s */
  assert_true(strstr(gelu, "0.250 stream") < opt); /* 10 of 40, on the GELU's own line */
  pk.stream_opt_size = RP_STEP_OPT_STREAM_MAX;
  print_profile(buf, sizeof buf, &w, &pk);
  assert_non_null(strstr(buf, "(two 256.0 MiB buffers, its footprint capped)"));
  rp_prof_enable(0);
}

/* the figure's bar origin and width (step_profile_svg.c) */
#define BAR_X_TEST 250.0

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
  assert_null(strstr(svg, "GEMM products")); /* none noted: no such section */
  remove(path);
  /* with products noted: a bar each, the slowest the full width, a mark at
   * the time alone where it was measured */
  rp_prof_enable(1);
  rp_prof_step_begin();
  region(RP_PROF_FWD_MATMUL, 0.2, 1024, 64, 192, 0, 0, 0);
  region(RP_PROF_BWD_MATMUL, 0.4, 1024, 64, 192, 1, 1, 1);
  rp_prof_step_end();
  pk.ngemm_alone = 1;
  pk.gemm_alone_rows = 1024;
  pk.gemm_alone[0] = (rp_gemm_shape_rate){.in = 64, .out = 192, .fwd = 0.0, .bwd = 2e9};
  assert_int_equal(rp_step_profile_write_svg(path, "t", &st, &w, &pk), RP_OK);
  f = fopen(path, "r");
  assert_non_null(f);
  n = fread(svg, 1, sizeof svg - 1, f);
  svg[n] = '\0';
  fclose(f);
  rp_prof_enable(0);
  assert_non_null(strstr(svg, ">GEMM products ("));
  assert_float_equal(rect_width_after(svg, ">64-&gt;192 forward", "time"), 210.0, 0.01);
  assert_float_equal(rect_width_after(svg, ">64-&gt;192 backward", "time"), 420.0, 0.01);
  /* the backward's 50.3 MFLOP at 2 GFLOP/s alone: 0.025 s of 0.4 = 26.2 px in */
  const double flop = 2 * 2.0 * 1024 * 64 * 192;
  char mark[96];
  snprintf(mark, sizeof mark, "class='alone' x='%.2f'", BAR_X_TEST + 420.0 * flop / 2e9 / 0.4 - 1.0);
  assert_non_null(strstr(svg, mark));
  assert_int_equal(strstr(strstr(svg, "forward"), "class='alone'") > strstr(svg, "backward"), 1);
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
      cmocka_unit_test(test_gemm_products),
      cmocka_unit_test(test_bound),
      cmocka_unit_test(test_peaks_measured),
      cmocka_unit_test(test_optimizer_stream),
      cmocka_unit_test(test_profile_figure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
