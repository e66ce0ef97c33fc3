/* Context-parallel layouts and configuration errors (run under mpirun with 2 and
 * 4 ranks): zigzag and contiguous shards cover every position exactly once,
 * in the documented places; position ids; shard / unshard / gather round trips;
 * the work balance of the layouts; and bad configurations (T not divisible by
 * 2P or P, heads not divisible by P for Ulysses, an unknown layout) fail with
 * RP_EINVAL and a message naming the values on every rank, without hanging. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "cp_test_util.h"
#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_grid.h"

static int g_P, g_rank;

static void test_pieces(void **state) {
  for (int P = 1; P <= 5; P++) {
    const int T = 2 * P * 3;
    for (rp_cp_layout lay = RP_CP_ZIGZAG; lay <= RP_CP_CONTIGUOUS; lay++) {
      int *owner = calloc((size_t)T, sizeof(int));
      for (int r = 0; r < P; r++) {
        rp_cp_pieces pc;
        assert_int_equal(rp_cp_pieces_of(&pc, lay, T, P, r), RP_OK);
        int32_t pos[2 * 3 * 5 * 2];
        assert_int_equal(rp_cp_positions(pos, 2, lay, T, P, r), RP_OK);
        for (int t = 0; t < T / P; t++) {
          long g = rp_cp_global_pos(&pc, t);
          assert_true(g >= 0 && g < T);
          owner[g]++;
          assert_int_equal(pos[t], g);
          assert_int_equal(pos[T / P + t], g);   /* same ids for every batch row */
        }
        if (lay == RP_CP_ZIGZAG) {
          /* chunks r and 2P-1-r of 2P, in that order */
          assert_int_equal(rp_cp_global_pos(&pc, 0), r * 3);
          assert_int_equal(rp_cp_global_pos(&pc, 3), (2 * P - 1 - r) * 3);
        } else {
          assert_int_equal(rp_cp_global_pos(&pc, 0), r * (T / P));
        }
      }
      for (int g = 0; g < T; g++) assert_int_equal(owner[g], 1);
      free(owner);
    }
  }
}

static void test_round_trip(void **state) {
  const int B = 3, T = 2 * g_P * 5;
  int32_t *full = calloc((size_t)B * T, sizeof(int32_t)), *back = calloc((size_t)B * T, sizeof(int32_t));
  int32_t *local = calloc((size_t)B * T / g_P, sizeof(int32_t));
  for (int i = 0; i < B * T; i++) full[i] = 1000 + i;
  for (rp_cp_layout lay = RP_CP_ZIGZAG; lay <= RP_CP_CONTIGUOUS; lay++) {
    assert_int_equal(rp_cp_shard_tokens(local, full, B, lay, T, g_P, g_rank), RP_OK);
    rp_cp_pieces pc;
    assert_int_equal(rp_cp_pieces_of(&pc, lay, T, g_P, g_rank), RP_OK);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T / g_P; t++)
        assert_int_equal(local[b * (T / g_P) + t], full[b * T + rp_cp_global_pos(&pc, t)]);
    memset(back, 0, sizeof(int32_t) * (size_t)B * T);
    assert_int_equal(rp_cp_gather_rows(back, local, sizeof(int32_t), B, lay, T, MPI_COMM_WORLD), RP_OK);
    assert_memory_equal(back, full, sizeof(int32_t) * (size_t)B * T);
    /* unshard writes only this rank's rows */
    memset(back, 0, sizeof(int32_t) * (size_t)B * T);
    assert_int_equal(rp_cp_unshard_rows(back, local, sizeof(int32_t), B, lay, T, g_P, g_rank), RP_OK);
    int written = 0;
    for (int i = 0; i < B * T; i++) written += back[i] != 0;
    assert_int_equal(written, B * T / g_P);
  }
  free(full), free(back), free(local);
}

/* Zigzag: every rank the same causal work; contiguous: the last rank does about
 * (2P-1)/P of the mean. */
static void test_balance(void **state) {
  for (int P = 2; P <= 8; P *= 2) {
    const int T = 2 * P * 256;
    double zmax = 0, zsum = 0, cmax = 0, csum = 0;
    for (int r = 0; r < P; r++) {
      double z = rp_cp_visible_pairs(RP_CP_ZIGZAG, T, P, r), c = rp_cp_visible_pairs(RP_CP_CONTIGUOUS, T, P, r);
      zmax = z > zmax ? z : zmax, zsum += z;
      cmax = c > cmax ? c : cmax, csum += c;
    }
    double total = (double)T * (T + 1) / 2;
    assert_true(fabs(zsum - total) < 0.5 && fabs(csum - total) < 0.5);
    assert_true(fabs(zmax / (zsum / P) - 1.0) < 1e-12);
    assert_true(fabs(cmax / (csum / P) - (2.0 * P - 1) / P) < 0.01);
  }
}

/* A failing create: RP_EINVAL on every rank, the message names the values. */
static void expect_einval(rp_status s, rp_attn_backend *a, const char *needle) {
  int ok = s == RP_EINVAL && a == NULL && strstr(rp_errmsg(), needle) != NULL;
  if (!ok) fprintf(stderr, "rank %d: status %d, message '%s' (wanted '%s')\n", g_rank, s, rp_errmsg(), needle);
  assert_true(cpt_agree_min_int(ok, MPI_COMM_WORLD));
}

#define CHECK_EINVAL(call, needle)         \
  do {                                     \
    rp_status s_ = (call);                 \
    expect_einval(s_, a, needle);          \
  } while (0)

static void test_bad_configs(void **state) {
  rp_attn_backend *a = (rp_attn_backend *)1;
  char want[64];
  const int Tz = 2 * g_P * 3 + g_P;   /* divisible by P, not by 2P */
  snprintf(want, sizeof want, "--seq %d is not divisible by 2 x --cp = %d", Tz, 2 * g_P);
  CHECK_EINVAL(rp_cp_ring_create(&a, MPI_COMM_WORLD, RP_CP_ZIGZAG, Tz, 1), want);
  a = (rp_attn_backend *)1;
  CHECK_EINVAL(rp_cp_ulysses_create(&a, MPI_COMM_WORLD, RP_CP_ZIGZAG, Tz, g_P), want);
  /* ... but fine for the contiguous layout */
  assert_int_equal(rp_cp_check(RP_CP_CONTIGUOUS, Tz, g_P), RP_OK);
  const int Tc = g_P * 3 + 1;
  snprintf(want, sizeof want, "--seq %d is not divisible by --cp %d", Tc, g_P);
  a = (rp_attn_backend *)1;
  CHECK_EINVAL(rp_cp_ring_create(&a, MPI_COMM_WORLD, RP_CP_CONTIGUOUS, Tc, 0), want);
  snprintf(want, sizeof want, "--heads %d is not divisible by --cp %d", g_P + 1, g_P);
  a = (rp_attn_backend *)1;
  CHECK_EINVAL(rp_cp_ulysses_create(&a, MPI_COMM_WORLD, RP_CP_ZIGZAG, 2 * g_P, g_P + 1), want);
  a = (rp_attn_backend *)1;
  CHECK_EINVAL(rp_cp_ring_create(&a, MPI_COMM_WORLD, (rp_cp_layout)7, 2 * g_P, 1), "layout 7");
  rp_cp_layout lay;
  assert_int_equal(rp_cp_layout_parse("zigzag", &lay), RP_OK);
  assert_int_equal(lay, RP_CP_ZIGZAG);
  assert_int_equal(rp_cp_layout_parse("contiguous", &lay), RP_OK);
  assert_int_equal(lay, RP_CP_CONTIGUOUS);
  assert_int_equal(rp_cp_layout_parse("zig", &lay), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "zigzag or contiguous"));
  /* statistics of something that is not a cp backend */
  const rp_attn_backend *ref = rp_attn_reference();
  assert_int_equal(rp_cp_get_stats(ref, NULL, NULL), RP_EINVAL);
  /* and the communicator still works: nobody is stuck in a collective */
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  assert_int_equal(sum, g_P);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pieces),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_balance),
      cmocka_unit_test(test_bad_configs),
  };
  CPT_MAIN(tests, g_P, g_rank);
}
