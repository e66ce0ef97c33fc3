/* Helpers for the flash attention tests, beside test_arrays.h's arrays, pools
 * and worst-difference check: the tests' flash configuration and its sweeps. */
#ifndef FT_UTIL_H
#define FT_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_pool.h"
#include "ringpipe/rp_util.h"
#include "../isa_util.h"
#include "../test_arrays.h"

#define FT_ATOL 1e-5  /* flash vs reference, fp32, absolute (DESIGN.md section 5) */

/* The test's flash settings: the config every call of a test file passes (the
 * library keeps none of its own). */
static rp_flash_config ft_cfg;
static inline void ft_configure(rp_flash_isa isa, rp_flash_split split, int bq, int bk) {
  rp_flash_config cfg = {.bq = bq, .bk = bk, .isa = isa, .split = split};
  if (rp_flash_config_check(&cfg) != RP_OK) {
    fprintf(stderr, "rp_flash_config_check: %s\n", rp_errmsg());
    abort();
  }
  ft_cfg = cfg;
}

/* Every flash ISA, lowest first, and the rp_isa level each needs. */
static const rp_flash_isa ft_isas[3] = {RP_FLASH_ISA_SCALAR, RP_FLASH_ISA_AVX2,
                                        RP_FLASH_ISA_AVX512};
static inline rp_isa ft_isa_level(rp_flash_isa isa) {
  return isa == RP_FLASH_ISA_AVX512 ? RP_ISA_AVX512
         : isa == RP_FLASH_ISA_AVX2 ? RP_ISA_AVX2 : RP_ISA_SCALAR;
}
/* Prints a "skipped" line for each flash ISA that cannot run here, with why. */
static inline void ft_report_skipped(const char *test) {
  for (int i = 0; i < 3; i++) {
    char path[32];
    snprintf(path, sizeof path, "flash isa=%s", rp_flash_isa_name(ft_isas[i]));
    ti_isa_runs(test, path, ft_isa_level(ft_isas[i]));
  }
}

static inline void ft_reset_config(void) { ft_configure(RP_FLASH_ISA_AUTO, RP_FLASH_SPLIT_AUTO, 0, 0); }

/* The 1- and 2-thread pools a test group shares (p[1], p[2]). */
static inline int ft_pools_up(rp_pool **p) {
  p[1] = ta_pool(1);
  p[2] = ta_pool(2);
  return 0;
}
static inline int ft_pools_down(rp_pool **p) {
  rp_pool_destroy(p[1]);
  rp_pool_destroy(p[2]);
  ft_reset_config();
  return 0;
}

#endif
