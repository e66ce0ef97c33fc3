/* Serving building blocks: the KV store (a prefix hit returns exactly the
 * blocks written, a corrupt or truncated block is a miss, concurrent writers
 * leave one valid file), links (bytes and busy time, the rate is a floor on
 * time), the scheduler's rules on hand-made engine states, and traces
 * (Table 2 statistics scaled, Mooncake JSONL with prefix hits). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "ringpipe/rp_infer.h"
#include "ringpipe/rp_serve.h"
#include "ringpipe/rp_util.h"

enum { L = 3, C = 16 };

static char dir[256];

static void fresh_dir(const char *name) {
  snprintf(dir, sizeof dir, "%s/serve_%s_%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           name, (long)getpid());
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static size_t block_floats(void) { return (size_t)L * 2 * RP_KV_BLOCK * C; }

static void fill_block(float *b, int seed) {
  for (size_t i = 0; i < block_floats(); i++) b[i] = (float)seed + (float)i * 1e-3f;
}

static void test_store_prefix_hit_returns_the_blocks(void **state) {
  (void)state;
  fresh_dir("hit");
  rp_kv_store s;
  assert_int_equal(rp_kvs_open(&s, dir, L, C), RP_OK);
  enum { N = 4 * RP_KV_BLOCK + 10 };
  int32_t tok[N];
  for (int i = 0; i < N; i++) tok[i] = i * 7 % 251;
  uint64_t keys[8];
  assert_int_equal(rp_kvs_keys(tok, N, keys), 4);
  float *b = malloc(block_floats() * sizeof(float)), *r = malloc(block_floats() * sizeof(float));
  for (int i = 0; i < 3; i++) { /* the first three blocks are cached */
    fill_block(b, i);
    assert_int_equal(rp_kvs_put(&s, keys[i], tok + i * RP_KV_BLOCK, b), RP_OK);
  }
  assert_int_equal(rp_kvs_longest_prefix(&s, keys, 4, 0), 3);
  /* another process's view: a fresh index from the directory */
  rp_kv_store s2;
  assert_int_equal(rp_kvs_open(&s2, dir, L, C), RP_OK);
  assert_int_equal(rp_kvs_longest_prefix(&s2, keys, 4, 0), 3);
  for (int i = 0; i < 3; i++) {
    size_t got;
    fill_block(b, i);
    assert_int_equal(rp_kvs_read(&s2, keys[i], tok + i * RP_KV_BLOCK, -1, r, &got), RP_OK);
    assert_memory_equal(r, b, block_floats() * sizeof(float));
    assert_int_equal(got, RP_KVS_HEADER + block_floats() * sizeof(float));
    /* one layer alone */
    assert_int_equal(rp_kvs_read(&s2, keys[i], tok + i * RP_KV_BLOCK, 2, r, &got), RP_OK);
    assert_memory_equal(r, b + 2 * s.layer_bytes / sizeof(float), s.layer_bytes);
  }
  /* a prompt that differs in block 1 shares only block 0 */
  tok[RP_KV_BLOCK + 5] ^= 1;
  uint64_t other[8];
  rp_kvs_keys(tok, N, other);
  assert_true(other[0] == keys[0] && other[1] != keys[1] && other[2] != keys[2]);
  assert_int_equal(rp_kvs_longest_prefix(&s2, other, 4, 0), 1);
  /* the tokens are checked too: a block read for other tokens is refused */
  size_t got;
  assert_int_equal(rp_kvs_read(&s2, keys[1], tok + RP_KV_BLOCK, -1, r, &got), RP_EFORMAT);
  assert_non_null(strstr(rp_errmsg(), "tokens differ"));
  free(b);
  free(r);
  rp_kvs_close(&s);
  rp_kvs_close(&s2);
  remove_dir();
}

static void damage(const char *path, long offset, int truncate_it) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  if (truncate_it) {
    assert_int_equal(ftruncate(fileno(f), offset), 0);
  } else {
    fseek(f, offset, SEEK_SET);
    int c = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(c ^ 0x40, f);
  }
  fclose(f);
}

static void test_store_corrupt_or_truncated_block_is_a_miss(void **state) {
  (void)state;
  fresh_dir("corrupt");
  rp_kv_store s;
  assert_int_equal(rp_kvs_open(&s, dir, L, C), RP_OK);
  int32_t tok[2 * RP_KV_BLOCK];
  for (int i = 0; i < 2 * RP_KV_BLOCK; i++) tok[i] = i;
  uint64_t keys[2];
  rp_kvs_keys(tok, 2 * RP_KV_BLOCK, keys);
  float *b = malloc(block_floats() * sizeof(float));
  fill_block(b, 1);
  for (int i = 0; i < 2; i++) assert_int_equal(rp_kvs_put(&s, keys[i], tok + i * 64, b), RP_OK);
  char path[600];
  size_t got;
  /* one flipped bit in layer 1 of block 0 */
  rp_kvs_path(&s, keys[0], path, sizeof path);
  damage(path, RP_KVS_HEADER + (long)s.layer_bytes + 100, 0);
  assert_int_equal(rp_kvs_read(&s, keys[0], tok, -1, b, &got), RP_EFORMAT);
  assert_non_null(strstr(rp_errmsg(), "layer 1 fails its checksum"));
  assert_int_equal(rp_kvs_read(&s, keys[0], tok, 1, b, &got), RP_EFORMAT);
  assert_int_equal(rp_kvs_read(&s, keys[0], tok, 0, b, &got), RP_OK); /* layer 0 is intact */
  /* block 1 cut short */
  rp_kvs_path(&s, keys[1], path, sizeof path);
  damage(path, RP_KVS_HEADER + 10, 1);
  assert_int_equal(rp_kvs_read(&s, keys[1], tok + 64, -1, b, &got), RP_EFORMAT);
  assert_non_null(strstr(rp_errmsg(), "truncated"));
  damage(path, 100, 1);
  assert_int_equal(rp_kvs_read(&s, keys[1], tok + 64, -1, b, &got), RP_EFORMAT);
  unlink(path);
  assert_int_equal(rp_kvs_read(&s, keys[1], tok + 64, -1, b, &got), RP_EIO);
  free(b);
  rp_kvs_close(&s);
  remove_dir();
}

/* Four processes write the same block (each with its own index) at once:
 * one file remains, it reads back whole, and no temporary is left. */
static void test_store_concurrent_writers_leave_one_valid_file(void **state) {
  (void)state;
  fresh_dir("concurrent");
  rp_kv_store s;
  assert_int_equal(rp_kvs_open(&s, dir, L, C), RP_OK);
  int32_t tok[RP_KV_BLOCK];
  for (int i = 0; i < RP_KV_BLOCK; i++) tok[i] = 3 * i;
  uint64_t key;
  rp_kvs_keys(tok, RP_KV_BLOCK, &key);
  float *b = malloc(block_floats() * sizeof(float));
  fill_block(b, 5);
  pid_t kids[4];
  for (int k = 0; k < 4; k++) {
    kids[k] = fork();
    assert_true(kids[k] >= 0);
    if (kids[k] == 0) {
      rp_kv_store mine;
      int ok = rp_kvs_open(&mine, dir, L, C) == RP_OK;
      for (int rep = 0; ok && rep < 20; rep++) {
        mine.count = 0; /* forget it: write again */
        memset(mine.keys, 0, mine.cap * sizeof *mine.keys);
        ok = rp_kvs_put(&mine, key, tok, b) == RP_OK;
      }
      _exit(ok ? 0 : 1);
    }
  }
  for (int k = 0; k < 4; k++) {
    int st;
    assert_int_equal(waitpid(kids[k], &st, 0), kids[k]);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  char cmd[400];
  snprintf(cmd, sizeof cmd, "test \"$(ls '%s' | wc -l)\" = 1", dir);
  assert_int_equal(system(cmd), 0);
  float *r = malloc(block_floats() * sizeof(float));
  size_t got;
  assert_int_equal(rp_kvs_read(&s, key, tok, -1, r, &got), RP_OK);
  assert_memory_equal(r, b, block_floats() * sizeof(float));
  free(b);
  free(r);
  rp_kvs_close(&s);
  remove_dir();
}

static void test_link_accounts_and_limits(void **state) {
  (void)state;
  char name[64];
  snprintf(name, sizeof name, "test-%ld", (long)getpid());
  rp_link k, k2;
  assert_int_equal(rp_link_open(&k, name, 0.8, 1), RP_OK); /* 100 MB/s */
  assert_int_equal(rp_link_open(&k2, name, 0.8, 0), RP_OK); /* the same link, another handle */
  uint64_t t0 = rp_now_ns();
  rp_link_send(&k, 1000000);   /* 10 ms */
  rp_link_send(&k2, 2000000);  /* 20 ms after it */
  double took = (double)(rp_now_ns() - t0) * 1e-9;
  assert_int_equal(rp_link_bytes(&k), 3000000);
  assert_true(fabs(rp_link_busy_s(&k2) - 0.03) < 1e-6);
  assert_true(took >= 0.03 - 1e-4); /* never faster than the rate */
  rp_link_enqueue(&k, 500);
  assert_int_equal(k2.st->queued_bytes, 500);
  rp_link_dequeue(&k2, 500);
  assert_int_equal(k.st->queued_bytes, 0);
  char path[256];
  snprintf(path, sizeof path, "%s", k.path);
  rp_link_close(&k2);
  assert_int_equal(access(path, F_OK), 0); /* another handle does not remove it */
  rp_link_close(&k);
  assert_int_not_equal(access(path, F_OK), 0); /* its creator does */
}

/* ---- scheduler on hand-made states */

static void test_sched_skips_engines_over_the_token_limit(void **state) {
  (void)state;
  rp_sched s = {.policy = RP_SCHED_PAPER, .pe_token_limit = 1000, .de_token_limit = 5000,
                .short_queue = 1e6};
  rp_engine_state pe[3] = {{.node = 0, .seqs = 1, .tokens = 900},
                           {.node = 1, .seqs = 3, .tokens = 950},
                           {.node = 2, .seqs = 0, .tokens = 990}};
  /* a 50-token request fits only under engine 0's and 1's limit: 0 is less loaded */
  assert_int_equal(rp_sched_pick_pe(&s, pe, 3, 50), 0);
  /* 200 tokens fit nowhere: the limit is skipped, least loaded wins */
  assert_int_equal(rp_sched_pick_pe(&s, pe, 3, 200), 0);
  /* engine 0 over the limit (995 + 10 > 1000): the least loaded of the rest */
  pe[0].tokens = 995;
  assert_int_equal(rp_sched_pick_pe(&s, pe, 3, 10), 1);
}

static void test_sched_prefers_nodes_with_a_short_read_queue(void **state) {
  (void)state;
  rp_sched s = {.policy = RP_SCHED_PAPER, .pe_token_limit = 100000, .de_token_limit = 100000,
                .short_queue = 1e6};
  /* engine 0 is the least loaded but its node's read queue is long */
  rp_engine_state pe[3] = {{.node = 0, .seqs = 0, .tokens = 0, .read_queue = 5e6},
                           {.node = 1, .seqs = 2, .tokens = 300, .read_queue = 2e5},
                           {.node = 1, .seqs = 1, .tokens = 300, .read_queue = 2e5}};
  assert_int_equal(rp_sched_pick_pe(&s, pe, 3, 10), 2); /* tokens tie: fewer seqs */
  /* every queue long: the filter is skipped, the least loaded wins */
  pe[1].read_queue = pe[2].read_queue = 3e6;
  assert_int_equal(rp_sched_pick_pe(&s, pe, 3, 10), 0);
  rp_engine_state de[2] = {{.node = 2, .seqs = 4, .tokens = 100, .read_queue = 0},
                           {.node = 3, .seqs = 1, .tokens = 50, .read_queue = 9e6}};
  assert_int_equal(rp_sched_pick_de(&s, de, 2, 10), 0);
}

static void test_sched_round_robin_and_read_side(void **state) {
  (void)state;
  rp_sched s = {.policy = RP_SCHED_ROUND_ROBIN};
  rp_engine_state e[3] = {{0}};
  int got[5];
  for (int i = 0; i < 5; i++) got[i] = rp_sched_pick_pe(&s, e, 3, 1);
  assert_true(got[0] == 0 && got[1] == 1 && got[2] == 2 && got[3] == 0 && got[4] == 1);
  rp_engine_state pe = {.read_queue = 10}, de = {.read_queue = 5};
  assert_int_equal(rp_sched_read_side(&pe, &de, 1), RP_READ_DE);
  assert_int_equal(rp_sched_read_side(&pe, &de, 0), RP_READ_PE); /* Basic: always the PE */
  de.read_queue = 10;
  assert_int_equal(rp_sched_read_side(&pe, &de, 1), RP_READ_PE); /* a tie goes to the PE */
  de.read_queue = 11;
  assert_int_equal(rp_sched_read_side(&pe, &de, 1), RP_READ_PE);
}

/* ---- traces */

static void test_trace_synth_has_table2_statistics(void **state) {
  (void)state;
  const rp_trace_stats *st = rp_trace_table2("64k");
  assert_non_null(st);
  assert_int_equal(st->turns, 157);
  assert_null(rp_trace_table2("1k"));
  rp_trace t;
  /* at scale 1 the 32K set: mean append and gen within 5% of 608 / 148 */
  assert_int_equal(rp_trace_synth(&t, rp_trace_table2("32k"), 200, 1, 0, 1), RP_OK);
  double app = 0, gen = 0;
  long n = 0;
  for (int a = 0; a < t.nagents; a++) {
    long ctx = 0;
    for (int k = 0; k < t.agents[a].nturns; k++) {
      const rp_turn *tu = &t.agents[a].turns[k];
      assert_int_equal(tu->prompt, ctx + tu->append); /* previous context + appended */
      ctx = tu->prompt + tu->gen;
      app += tu->append;
      gen += tu->gen;
      n++;
    }
    assert_true(ctx <= 32768);
  }
  assert_true(fabs(app / n - 608) < 0.05 * 608 && fabs(gen / n - 148) < 0.05 * 148);
  rp_trace_free(&t);
  /* scale 32: tokens / 32, turns capped */
  assert_int_equal(rp_trace_synth(&t, rp_trace_table2("32k"), 4, 32, 5, 2), RP_OK);
  assert_int_equal(t.max_context, 1024);
  for (int a = 0; a < 4; a++) assert_true(t.agents[a].nturns >= 1 && t.agents[a].nturns <= 5);
  rp_trace_free(&t);
  /* Poisson arrivals: increasing, mean gap 1 / rate (within 10% over 2000) */
  assert_int_equal(rp_trace_synth(&t, rp_trace_table2("32k"), 2000, 64, 1, 3), RP_OK);
  rp_trace_poisson(&t, 4.0, 9);
  for (int a = 1; a < t.nagents; a++)
    assert_true(t.agents[a].turns[0].arrive >= t.agents[a - 1].turns[0].arrive);
  double gap = t.agents[t.nagents - 1].turns[0].arrive / (t.nagents - 1);
  assert_true(fabs(gap - 0.25) < 0.025);
  rp_trace_free(&t);
  assert_int_equal(rp_trace_synth(&t, st, 1, 65536, 0, 1), RP_EINVAL);
}

static void test_trace_mooncake_reads_hits(void **state) {
  (void)state;
  fresh_dir("mooncake");
  char path[300], cmd[600];
  snprintf(path, sizeof path, "%s.jsonl", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"timestamp\": 0, \"input_length\": 1500, \"output_length\": 20, \"hash_ids\": [1, 2, 3]}\n"
        "\n"
        "{\"timestamp\": 250, \"input_length\": 1800, \"output_length\": 5, \"hash_ids\": [1, 2, 4, 5]}\n"
        "{\"timestamp\": 500, \"input_length\": 300, \"output_length\": 7, \"hash_ids\": [9]}\n",
        f);
  fclose(f);
  rp_trace t;
  assert_int_equal(rp_trace_mooncake(&t, path, 512, 1), RP_OK);
  assert_int_equal(t.nagents, 3);
  assert_int_equal(t.agents[0].turns[0].hit, 0);
  assert_int_equal(t.agents[1].turns[0].hit, 1024);
  assert_true(fabs(t.agents[1].turns[0].arrive - 0.25) < 1e-12);
  assert_int_equal(t.agents[1].turns[0].gen, 5);
  assert_int_equal(t.agents[2].turns[0].hit, 0);
  assert_int_equal(t.agents[1].turns[0].nhash, 4);
  assert_true(t.agents[1].turns[0].hash_ids[3] == 5);
  rp_trace_free(&t);
  /* scaled by 8: lengths and blocks / 8 */
  assert_int_equal(rp_trace_mooncake(&t, path, 512, 8), RP_OK);
  assert_int_equal(t.agents[1].turns[0].prompt, 225);
  assert_int_equal(t.agents[1].turns[0].hit, 128);
  assert_int_equal(t.agents[1].turns[0].gen, 1); /* 5 / 8 rounds up to one token */
  rp_trace_free(&t);
  f = fopen(path, "w");
  fputs("{\"timestamp\": 0, \"input_length\": 10}\n", f);
  fclose(f);
  assert_int_equal(rp_trace_mooncake(&t, path, 512, 1), RP_EFORMAT);
  assert_non_null(strstr(rp_errmsg(), ":1: not a Mooncake request"));
  snprintf(cmd, sizeof cmd, "rm -f '%s'", path);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_prefix_hit_returns_the_blocks),
      cmocka_unit_test(test_store_corrupt_or_truncated_block_is_a_miss),
      cmocka_unit_test(test_store_concurrent_writers_leave_one_valid_file),
      cmocka_unit_test(test_link_accounts_and_limits),
      cmocka_unit_test(test_sched_skips_engines_over_the_token_limit),
      cmocka_unit_test(test_sched_prefers_nodes_with_a_short_read_queue),
      cmocka_unit_test(test_sched_round_robin_and_read_side),
      cmocka_unit_test(test_trace_synth_has_table2_statistics),
      cmocka_unit_test(test_trace_mooncake_reads_hits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
