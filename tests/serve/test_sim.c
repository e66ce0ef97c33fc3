/* The serving simulator's checks: with infinitely fast links every loading
 * mode finishes every turn exactly when Oracle does; with the storage link as
 * the only cost, Basic's JCT is the closed-form bound (hit bytes / storage
 * bandwidth of the one PE node) and DualPath's lies between the two-node bound
 * and Basic's; replayed arrivals are honoured. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "ringpipe/rp_serve.h"

static rp_sim_config base_config(void) {
  return (rp_sim_config){.p_nodes = 1, .d_nodes = 2, .gpus_per_node = 2, .snic_gbps = 400,
                         .cnic_gbps = 400, .kv_bytes_per_token = 70272, .prefill_tps = 6000,
                         .tpot_s = 0.05, .de_batch = 4, .layers = 61, .pe_token_limit = 65536,
                         .de_token_limit = 1 << 22, .short_queue_bytes = -1};
}

static void test_infinite_links_equal_oracle(void **state) {
  (void)state;
  rp_trace t;
  assert_int_equal(rp_trace_synth(&t, rp_trace_table2("32k"), 12, 4, 20, 3), RP_OK);
  rp_sim_config c = base_config();
  c.snic_gbps = c.cnic_gbps = 0; /* infinitely fast */
  c.mode = RP_MODE_ORACLE;
  rp_sim_result oracle, r;
  assert_int_equal(rp_sim_run(&c, &t, &oracle, NULL), RP_OK);
  for (int mode = RP_MODE_BASIC; mode <= RP_MODE_DUALPATH; mode++)
    for (int lw = 0; lw < 2; lw++) {
      c.mode = (rp_serve_mode)mode;
      c.layerwise = lw;
      assert_int_equal(rp_sim_run(&c, &t, &r, NULL), RP_OK);
      assert_int_equal(r.nrec, oracle.nrec);
      for (long i = 0; i < r.nrec; i++) {
        assert_true(r.rec[i].t_done == oracle.rec[i].t_done);
        assert_true(r.rec[i].t_first == oracle.rec[i].t_first);
      }
      assert_true(r.sum.jct == oracle.sum.jct);
      rp_sim_result_free(&r);
    }
  /* and with a finite storage link Basic is slower: the check can fail */
  c.snic_gbps = 1;
  c.mode = RP_MODE_BASIC;
  assert_int_equal(rp_sim_run(&c, &t, &r, NULL), RP_OK);
  assert_true(r.sum.jct > oracle.sum.jct * 1.01);
  rp_sim_result_free(&r);
  rp_sim_result_free(&oracle);
  rp_trace_free(&t);
}

static void test_storage_bound_matches_closed_form(void **state) {
  (void)state;
  rp_trace t;
  assert_int_equal(rp_trace_synth(&t, rp_trace_table2("48k"), 16, 8, 30, 5), RP_OK);
  rp_sim_config c = base_config();
  c.cnic_gbps = 0;
  c.prefill_tps = 0;
  c.tpot_s = 0;
  c.snic_gbps = 8; /* 1 GB/s */
  c.mode = RP_MODE_BASIC;
  rp_sim_result r;
  assert_int_equal(rp_sim_run(&c, &t, &r, NULL), RP_OK);
  double hit = 0;
  for (long i = 0; i < r.nrec; i++) hit += (double)r.rec[i].hit;
  double bound = hit * c.kv_bytes_per_token / 1e9;
  print_message("storage-only: JCT %.6f s, bound %.6f s\n", r.sum.jct, bound);
  assert_true(fabs(r.sum.jct - bound) <= 1e-9 * bound);
  assert_true(fabs(r.sum.snic_bytes[0] - hit * c.kv_bytes_per_token) < 1);
  double basic = r.sum.jct;
  rp_sim_result_free(&r);
  /* dual paths: three nodes' storage NICs at best, never worse than Basic */
  c.mode = RP_MODE_DUALPATH;
  assert_int_equal(rp_sim_run(&c, &t, &r, NULL), RP_OK);
  print_message("dual path: JCT %.6f s, 3-node bound %.6f s\n", r.sum.jct, bound / 3);
  assert_true(r.sum.jct >= bound / 3 * (1 - 1e-9) && r.sum.jct < basic * 0.5);
  rp_sim_result_free(&r);
  rp_trace_free(&t);
}

static void test_replayed_arrivals_are_honoured(void **state) {
  (void)state;
  rp_turn turns[3] = {{.append = 1000, .gen = 10, .arrive = 0, .prompt = 1000, .hit = 0},
                      {.append = 1500, .gen = 10, .arrive = 2.5, .prompt = 1500, .hit = 1024},
                      {.append = 700, .gen = 3, .arrive = 1.0, .prompt = 700, .hit = 512}};
  rp_agent ag[3] = {{1, &turns[0], 1}, {1, &turns[1], 2}, {1, &turns[2], 3}};
  rp_trace t = {.nagents = 3, .agents = ag, .max_context = 2000};
  rp_sim_config c = base_config();
  c.mode = RP_MODE_DUALPATH;
  c.layerwise = 1;
  rp_sim_result r;
  assert_int_equal(rp_sim_run(&c, &t, &r, NULL), RP_OK);
  for (int i = 0; i < 3; i++) {
    assert_true(r.rec[i].t_arrive == turns[i].arrive);
    assert_true(r.rec[i].t_first > r.rec[i].t_arrive && r.rec[i].t_done >= r.rec[i].t_first);
    assert_int_equal(r.rec[i].hit, turns[i].hit);
  }
  assert_true(fabs(r.sum.hit_rate - 1536.0 / 3200.0) < 1e-12);
  rp_sim_result_free(&r);
  c.de_batch = 0;
  assert_int_equal(rp_sim_run(&c, &t, &r, NULL), RP_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_infinite_links_equal_oracle),
      cmocka_unit_test(test_storage_bound_matches_closed_form),
      cmocka_unit_test(test_replayed_arrivals_are_honoured),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
