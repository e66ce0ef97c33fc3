/* The AVX-512 panel packers against the plain-C one, byte for byte: the
 * transposing packer of k-contiguous bf16 sources (the forward's weight,
 * rp_bf16_pack_b16_pairs) and the rounding packers of fp32 sources (row pairs
 * into B panels, rp_bf16_pack_b32_pairs; A panels of the vdpbf16ps kernel,
 * rp_bf16_dp_pack_a), on shapes crossing the 16-row and 16-pair steps, the
 * panel's 64 rows, odd K and the pair padding, starting mid-source (r0, p0 > 0)
 * as the GEMM's blocks do. The GEMM tests see these packers only through
 * products, where a wrong word beside a zero of the other operand is invisible. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "bt_util.h"
#include "gemm_bf16_internal.h"
#include "ringpipe/rp_isa.h"

typedef struct {
  int rows, K, r0, nrows;
  long p0, kp;
} pk_case;

static const pk_case cases[] = {
    {1, 1, 0, 64, 0, 16},       {64, 32, 0, 64, 0, 16},     {64, 384, 0, 64, 0, 192},
    {65, 33, 0, 128, 0, 32},    {200, 517, 64, 128, 3, 259}, {17, 31, 0, 64, 0, 16},
    {130, 257, 128, 64, 100, 48}, {7, 2, 0, 64, 0, 16},     {300, 1536, 192, 128, 256, 512}};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* Two output buffers filled with different bytes, so that a byte neither packer
 * writes shows as a difference. */
static void poisoned_pair(size_t bytes, char **got, char **want) {
  *got = bt_alloc(bytes);
  *want = bt_alloc(bytes);
  memset(*got, 0xA5, bytes);
  memset(*want, 0x5A, bytes);
}

static void assert_same_bytes(const char *what, int ci, const void *got, const void *want,
                              size_t n) {
  const unsigned char *x = got, *y = want;
  for (size_t i = 0; i < n; i++)
    if (x[i] != y[i]) fail_msg("%s case %d differs at byte %zu", what, ci, i);
}

static void test_b16_kcontig_equals_plain(void **state) {
  (void)state;
  if (!rp_isa_allows(RP_ISA_AVX512BF16)) skip();
  rp_rng rng;
  rp_rng_seed(&rng, 5);
  for (int ci = 0; ci < NCASES; ci++) {
    const pk_case *c = &cases[ci];
    const long ld = c->K + (ci % 2); /* odd row strides too */
    uint16_t *w = bt_halves((long)c->rows * ld);
    bt_fill16(w, (long)c->rows * ld, &rng);
    const size_t bytes = (size_t)((c->nrows + 63) / 64 * 64) * (size_t)c->kp * 4;
    char *got, *want;
    poisoned_pair(bytes, &got, &want);
    rp_bf16_src s = {w, ld, 1, c->rows, c->K, NULL};
    rp_bf16_pack_b16_pairs(&s, c->r0, c->nrows, c->p0, c->kp, got);
    rp_bf16_pack_block(RP_BF16_FMT_PAIRS, &s, c->r0, c->nrows, RP_BF16_NR, c->p0, c->kp, want);
    assert_same_bytes("b16 kcontig", ci, got, want, bytes);
    free(w), free(got), free(want);
  }
}

/* fp32 values with the rounding cases in them: ties, NaN, Inf, signed zeros */
static void fill_f32(float *x, long n, rp_rng *r) {
  static const uint32_t special[] = {0x7FC00000u, 0x7F800000u, 0xFF800000u, 0x80000000u,
                                     0x3F808000u, 0x3F818000u, 0x7F7FFFFFu, 0x00000001u};
  for (long i = 0; i < n; i++) {
    uint32_t u;
    if (rp_rng_below(r, 16) == 0) u = special[rp_rng_below(r, 8)];
    else {
      float f = 4.0f * rp_rng_uniform(r) - 2.0f;
      memcpy(&u, &f, 4);
    }
    memcpy(&x[i], &u, 4);
  }
}

/* The bf16 copy that the plain-C packer reads in place of the fp32 source. */
static uint16_t *rounded(const float *x, long n) {
  uint16_t *h = bt_halves(n);
  for (long i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    h[i] = rp_bf16_rne_bits(u);
  }
  return h;
}

static void test_f32_packers_equal_plain(void **state) {
  (void)state;
  if (!rp_isa_allows(RP_ISA_AVX512BF16)) skip();
  rp_rng rng;
  rp_rng_seed(&rng, 6);
  for (int ci = 0; ci < NCASES; ci++) {
    const pk_case *c = &cases[ci];
    for (int kcontig = 0; kcontig <= 1; kcontig++) {
      /* row pairs: source rows are k (K of them), columns the packed rows */
      const long srows = kcontig ? c->rows : c->K, ld = (kcontig ? c->K : c->rows) + (ci % 2);
      float *x = ta_floats(srows * ld);
      fill_f32(x, srows * ld, &rng);
      uint16_t *h = rounded(x, srows * ld);
      const int width = kcontig ? RP_BF16_MR_DP : RP_BF16_NR;
      const size_t bytes = (size_t)((c->nrows + width - 1) / width * width) * (size_t)c->kp * 4;
      char *got, *want;
      poisoned_pair(bytes, &got, &want);
      rp_bf16_src s32 = {NULL, ld, kcontig, c->rows, c->K, x};
      rp_bf16_src s16 = {h, ld, kcontig, c->rows, c->K, NULL};
      if (kcontig) rp_bf16_dp_pack_a(&s32, c->r0, c->nrows, c->p0, c->kp, got);
      else rp_bf16_pack_b32_pairs(&s32, c->r0, c->nrows, c->p0, c->kp, got);
      rp_bf16_pack_block(RP_BF16_FMT_PAIRS, &s16, c->r0, c->nrows, width, c->p0, c->kp, want);
      assert_same_bytes(kcontig ? "f32 A kcontig" : "f32 B row-pair", ci, got, want, bytes);
      free(x), free(h), free(got), free(want);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_b16_kcontig_equals_plain),
      cmocka_unit_test(test_f32_packers_equal_plain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
