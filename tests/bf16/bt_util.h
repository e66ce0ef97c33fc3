/* Helpers for the bf16 tests, beside test_arrays.h's arrays and pools: bf16
 * buffers and random bf16 fills, and running a block of code under each bf16
 * kernel this CPU supports. */
#ifndef BT_UTIL_H
#define BT_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"
#include "../isa_util.h"
#include "../test_arrays.h"

static inline void *bt_alloc(size_t bytes) {
  void *p = calloc(bytes ? bytes : 1, 1);
  if (!p) abort();
  return p;
}
#define bt_halves(n) ((uint16_t *)bt_alloc(sizeof(uint16_t) * (size_t)(n)))

/* bf16 values uniform-ish in (-1, 1), a few exact zeros. */
static inline void bt_fill16(uint16_t *x, long n, rp_rng *r) {
  for (long i = 0; i < n; i++)
    x[i] = rp_rng_below(r, 50) == 0 ? 0 : rp_bf16_from_f32(2.0f * rp_rng_uniform(r) - 1.0f);
}

/* Index of the first differing float (bitwise), or -1. */
static inline long bt_first_diff(const float *a, const float *b, long n) {
  for (long i = 0; i < n; i++)
    if (memcmp(a + i, b + i, sizeof(float)) != 0) return i;
  return -1;
}

/* The kernels a test runs under: forced portable, then each supported kernel by
 * name. bt_kernel_set(i) selects the i-th and returns its name (NULL past the
 * end); bt_kernel_reset() goes back to auto, not forced. */
#define BT_NKERNELS 5
static inline const char *bt_kernel_set(int i) {
  static const rp_bf16_kernel ks[BT_NKERNELS] = {
      RP_BF16_KERNEL_PORTABLE, RP_BF16_KERNEL_AVX2_FMA, RP_BF16_KERNEL_AVX512_FMA,
      RP_BF16_KERNEL_AVX512_BF16, RP_BF16_KERNEL_AMX};
  rp_bf16_force_portable(0);
  rp_bf16_set_kernel(RP_BF16_KERNEL_AUTO);
  if (i == 0) {
    rp_bf16_force_portable(1);
    return "forced-portable";
  }
  for (int k = 0, seen = 0; k < BT_NKERNELS; k++) {
    if (!rp_bf16_kernel_supported(ks[k])) continue;
    if (++seen == i) {
      if (rp_bf16_set_kernel(ks[k]) != RP_OK) abort();
      return rp_bf16_kernel_name(ks[k]);
    }
  }
  return NULL;
}
/* Prints a "skipped" line for each bf16 kernel and conversion path that cannot
 * run here (the CPU lacks it or the RINGPIPE_ISA ceiling is below it). */
static inline void bt_report_skipped(const char *test) {
  ti_isa_runs(test, "kernel avx2-fma", RP_ISA_AVX2);
  ti_isa_runs(test, "kernel avx512-fma", RP_ISA_AVX512);
  ti_isa_runs(test, "kernel avx512-bf16", RP_ISA_AVX512BF16);
  ti_isa_runs(test, "kernel amx-bf16", RP_ISA_AMX);
  ti_isa_runs(test, "avx512 conversions", RP_ISA_AVX512);
}

/* The kernel in force sums in the AMX order (rp_matmul_bf16_*_ref_of). */
static inline int bt_kernel_is_amx(void) { return rp_bf16_kernel_active() == RP_BF16_KERNEL_AMX; }

static inline void bt_kernel_reset(void) {
  rp_bf16_force_portable(0);
  rp_bf16_set_kernel(RP_BF16_KERNEL_AUTO);
}

#endif
