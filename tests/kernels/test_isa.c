/* The instruction-set ceiling (rp_isa.h) and every dispatcher that obeys it:
 * level names and their errors, the above-the-CPU error, and, under each level
 * the machine allows, the path each kernel family resolves to (flash attention,
 * bf16 GEMM and conversions) and which peak probes run. Levels above the
 * ceiling in force (the CPU's, or RINGPIPE_ISA's) are reported skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <string.h>

#include "../isa_util.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_pool.h"

static void test_names(void **state) {
  (void)state;
  for (int l = 0; l < RP_ISA_LEVELS; l++) {
    rp_isa got = RP_ISA_LEVELS;
    assert_int_equal(rp_isa_parse(rp_isa_name((rp_isa)l), "--isa", &got), RP_OK);
    assert_int_equal(got, l);
  }
  const char *bad[] = {"AVX2", "avx", "sse4", "", "avx512-bf16"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rp_isa got;
    assert_int_equal(rp_isa_parse(bad[i], "RINGPIPE_ISA", &got), RP_EINVAL);
    char quoted[32];
    snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
    assert_non_null(strstr(rp_errmsg(), quoted));                  /* names the value */
    assert_non_null(strstr(rp_errmsg(), "RINGPIPE_ISA"));          /* and its source */
    assert_non_null(strstr(rp_errmsg(), "scalar|avx2|avx512|avx512bf16|amx")); /* the fix */
  }
  assert_int_equal(rp_isa_set((rp_isa)7), RP_EINVAL);
}

/* What an AVX2-only CPU (Zen 3) says to RINGPIPE_ISA=avx512, and this CPU to a
 * level above its own (when there is one). */
static void test_above_cpu_is_an_error(void **state) {
  (void)state;
  assert_int_equal(rp_isa_check_cpu(RP_ISA_AVX512, RP_ISA_AVX2, "RINGPIPE_ISA"), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "RINGPIPE_ISA=avx512"));
  assert_non_null(strstr(rp_errmsg(), "up to avx2"));
  assert_int_equal(rp_isa_check_cpu(RP_ISA_AVX2, RP_ISA_AVX2, "RINGPIPE_ISA"), RP_OK);
  rp_isa cpu = rp_isa_cpu(), before = rp_isa_active();
  if (cpu + 1 < RP_ISA_LEVELS) {
    assert_int_equal(rp_isa_set((rp_isa)(cpu + 1)), RP_EINVAL);
    assert_int_equal(rp_isa_active(), before); /* unchanged */
    assert_int_equal(rp_isa_request(rp_isa_name((rp_isa)(cpu + 1)), "--isa"), RP_EINVAL);
    assert_non_null(strstr(rp_errmsg(), "--isa="));
  } else {
    printf("isa: skipped the real above-the-CPU request (this CPU runs every level)\n");
  }
}

/* The path each family must take under a ceiling. */
static rp_flash_isa flash_for(rp_isa l) {
  return l >= RP_ISA_AVX512 ? RP_FLASH_ISA_AVX512
         : l == RP_ISA_AVX2 ? RP_FLASH_ISA_AVX2 : RP_FLASH_ISA_SCALAR;
}

static int bf16_kernel_ok(rp_isa l, rp_bf16_kernel k) {
  if (l == RP_ISA_AMX) /* AUTO takes AMX over the FMA when its probe is 1.1x faster */
    return k == RP_BF16_KERNEL_AMX || k == RP_BF16_KERNEL_AVX512_BF16 ||
           k == RP_BF16_KERNEL_AVX512_FMA;
  if (l == RP_ISA_AVX512BF16)   /* AUTO picks by measured peak between the two */
    return k == RP_BF16_KERNEL_AVX512_BF16 || k == RP_BF16_KERNEL_AVX512_FMA;
  return k == (l == RP_ISA_AVX512 ? RP_BF16_KERNEL_AVX512_FMA
               : l == RP_ISA_AVX2 ? RP_BF16_KERNEL_AVX2_FMA : RP_BF16_KERNEL_PORTABLE);
}

static void check_level(rp_isa l) {
  const char *n = rp_isa_name(l);
  assert_int_equal(rp_isa_set(l), RP_OK);
  assert_int_equal(rp_isa_active(), l);
  rp_flash_isa fi = rp_flash_isa_active(NULL);
  rp_bf16_kernel bk = rp_bf16_kernel_active();
  const char *conv = rp_bf16_conversions_name();
  printf("isa=%s: flash %s, bf16 GEMM %s, conversions %s\n", n, rp_flash_isa_name(fi),
         rp_bf16_kernel_name(bk), conv);
  if (fi != flash_for(l) || !bf16_kernel_ok(l, bk) ||
      strcmp(conv, l >= RP_ISA_AVX512 ? "avx512" : "plain C") != 0)
    fail_msg("isa=%s dispatches wrongly: flash %s, bf16 %s, conversions %s", n,
             rp_flash_isa_name(fi), rp_bf16_kernel_name(bk), conv);
  /* nothing above the ceiling may be chosen, configured, or probed */
  for (int f = RP_FLASH_ISA_SCALAR; f <= RP_FLASH_ISA_AVX512; f++)
    assert_int_equal(rp_flash_isa_supported((rp_flash_isa)f), f <= (int)flash_for(l));
  rp_flash_config cfg = {.isa = RP_FLASH_ISA_AVX512};
  assert_int_equal(rp_flash_config_check(&cfg), l >= RP_ISA_AVX512 ? RP_OK : RP_EINVAL);
  cfg.isa = RP_FLASH_ISA_AUTO;
  assert_int_equal(rp_flash_config_check(&cfg), RP_OK);
  assert_int_equal(rp_bf16_kernel_supported(RP_BF16_KERNEL_AVX2_FMA), l >= RP_ISA_AVX2);
  assert_int_equal(rp_bf16_kernel_supported(RP_BF16_KERNEL_AVX512_FMA), l >= RP_ISA_AVX512);
  assert_int_equal(rp_bf16_kernel_supported(RP_BF16_KERNEL_AVX512_BF16), l >= RP_ISA_AVX512BF16);
  assert_int_equal(rp_bf16_kernel_supported(RP_BF16_KERNEL_AMX), l >= RP_ISA_AMX);
  assert_true(rp_isa_peak_gflops(RP_ISA_SCALAR) == 0.0);
  for (int p = RP_ISA_AVX2; p < RP_ISA_LEVELS; p++) {
    double g = rp_isa_peak_gflops((rp_isa)p);
    if (p <= (int)l ? !(g > 0.0) : g != 0.0)
      fail_msg("isa=%s: peak probe of %s gave %.1f GFLOP/s", n, rp_isa_name((rp_isa)p), g);
  }
  char line[512];
  rp_isa_kernel_summary(line, sizeof line);
  assert_non_null(strstr(line, rp_flash_isa_name(fi)));
  assert_non_null(strstr(line, rp_bf16_kernel_name(bk)));
}

/* A kernel chosen by name yields when a later, lower ceiling excludes it. */
static void check_ceiling_wins(rp_isa top) {
  if (top < RP_ISA_AVX512) return;
  assert_int_equal(rp_isa_set(top), RP_OK);
  rp_flash_config cfg = {.isa = RP_FLASH_ISA_AVX512};
  assert_int_equal(rp_flash_config_check(&cfg), RP_OK);
  assert_int_equal(rp_flash_isa_active(&cfg), RP_FLASH_ISA_AVX512);
  assert_int_equal(rp_bf16_set_kernel(RP_BF16_KERNEL_AVX512_FMA), RP_OK);
  assert_int_equal(rp_isa_set(RP_ISA_AVX2), RP_OK);
  assert_int_equal(rp_flash_isa_active(&cfg), RP_FLASH_ISA_AVX2);
  assert_int_equal(rp_bf16_kernel_active(), RP_BF16_KERNEL_AVX2_FMA);
  assert_int_equal(rp_bf16_set_kernel(RP_BF16_KERNEL_AVX512_FMA), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "above the ceiling avx2"));
  assert_int_equal(rp_bf16_set_kernel(RP_BF16_KERNEL_AUTO), RP_OK);
}

static void test_every_level_dispatches(void **state) {
  (void)state;
  const rp_isa top = rp_isa_active();
  for (int l = top + 1; l < RP_ISA_LEVELS; l++) ti_isa_runs("isa", rp_isa_name((rp_isa)l), (rp_isa)l);
  for (int l = 0; l <= (int)top; l++) check_level((rp_isa)l);
  check_ceiling_wins(top);
  assert_int_equal(rp_isa_set(top), RP_OK);
}

/* The percentiles of the sustained probe: nearest rank over the sorted runs. */
static void test_probe_summary(void **state) {
  (void)state;
  double r[10] = {5, 1, 9, 3, 7, 2, 10, 4, 8, 6};
  rp_isa_probe_stats st;
  rp_isa_probe_summarize(r, 10, &st);
  assert_int_equal(st.runs, 10);
  assert_true(st.best == 10 && st.p90 == 9 && st.median == 6 && st.p10 == 2);
  double one = 4.5;
  rp_isa_probe_summarize(&one, 1, &st);
  assert_true(st.runs == 1 && st.best == 4.5 && st.p10 == 4.5 && st.median == 4.5);
  rp_isa_probe_summarize(NULL, 0, &st);
  assert_true(st.runs == 0 && st.best == 0 && st.median == 0);
}

/* Both threads of a pool run the fp32 probe at once; each reports runs in
 * order; a level without a probe and a non-positive time are errors. */
static void test_probe_sustained(void **state) {
  (void)state;
  rp_pool *pool;
  assert_int_equal(rp_pool_create(&pool, 2, 0), RP_OK);
  rp_isa_probe_stats st[2];
  assert_int_equal(rp_isa_probe_sustained(RP_ISA_SCALAR, pool, 0.01, st), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "no SIMD FMA probe at level scalar"));
  const rp_isa lvl = rp_isa_fp32_fma_level();
  if (lvl > RP_ISA_SCALAR) {
    assert_int_equal(rp_isa_probe_sustained(lvl, pool, 0.0, st), RP_EINVAL);
    assert_non_null(strstr(rp_errmsg(), "must be positive"));
    assert_int_equal(rp_isa_probe_sustained(lvl, pool, 0.02, st), RP_OK);
    for (int t = 0; t < 2; t++) {
      assert_true(st[t].runs >= 1);
      assert_true(st[t].best >= st[t].p90 && st[t].p90 >= st[t].median &&
                  st[t].median >= st[t].p10 && st[t].p10 > 0);
    }
  }
  for (int l = lvl + 1; l < RP_ISA_LEVELS; l++)
    if (!rp_isa_allows((rp_isa)l)) {
      assert_int_equal(rp_isa_probe_sustained((rp_isa)l, pool, 0.01, st), RP_EINVAL);
      assert_non_null(strstr(rp_errmsg(), rp_isa_why_not((rp_isa)l)));
      break;
    }
  rp_pool_destroy(pool);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_above_cpu_is_an_error),
      cmocka_unit_test(test_every_level_dispatches),
      cmocka_unit_test(test_probe_summary),
      cmocka_unit_test(test_probe_sustained),
  };
  printf("isa: cpu %s, ceiling %s (from %s)\n", rp_isa_name(rp_isa_cpu()),
         rp_isa_name(rp_isa_active()), rp_isa_source());
  return cmocka_run_group_tests(tests, NULL, NULL);
}
