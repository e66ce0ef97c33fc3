/* Test helpers for code with one path per instruction-set level (rp_isa.h):
 * run checks under every level the machine allows and say, never silently,
 * which levels were skipped and why. Include after <cmocka.h>. */
#ifndef TI_ISA_UTIL_H
#define TI_ISA_UTIL_H

#include <stdio.h>

#include "ringpipe/rp_isa.h"

/* 1 when `level` may run; else prints "<test>: skipped <path> (<why>)" and
 * returns 0. */
static inline int ti_isa_runs(const char *test, const char *path, rp_isa level) {
  if (rp_isa_allows(level)) return 1;
  printf("%s: skipped %s (%s)\n", test, path, rp_isa_why_not(level));
  fflush(stdout);
  return 0;
}

/* Runs a cmocka group once per level from scalar to `top` with the ceiling set
 * to that level, the group named "<suite> isa=<level>" so that a failure names
 * its level. Levels above the ceiling in force (the CPU's or RINGPIPE_ISA's) are
 * reported skipped. Levels above `top` run the same code as `top` for this
 * suite and are reported as such. The ceiling is restored afterwards. Returns
 * the number of failed tests. */
static inline int ti_run_group_per_isa(const char *suite, const struct CMUnitTest *tests,
                                       size_t n, CMFixtureFunction setup,
                                       CMFixtureFunction teardown, rp_isa top) {
  const rp_isa ceiling = rp_isa_active();
  char why[RP_ISA_LEVELS][96]; /* before the loop moves the ceiling */
  for (int l = 0; l < RP_ISA_LEVELS; l++)
    snprintf(why[l], sizeof why[l], "%s", rp_isa_why_not((rp_isa)l));
  int fails = 0;
  for (int l = RP_ISA_SCALAR; l < RP_ISA_LEVELS; l++) {
    const char *lname = rp_isa_name((rp_isa)l);
    if (l > (int)top) {
      printf("%s: skipped isa=%s (the same code as isa=%s here)\n", suite, lname,
             rp_isa_name(top));
      continue;
    }
    if (why[l][0]) {
      printf("%s: skipped isa=%s (%s)\n", suite, lname, why[l]);
      continue;
    }
    if (rp_isa_set((rp_isa)l) != RP_OK) {
      fprintf(stderr, "%s: rp_isa_set(%s): %s\n", suite, lname, rp_errmsg());
      return fails + 1;
    }
    char name[96];
    snprintf(name, sizeof name, "%s isa=%s", suite, lname);
    printf("%s: running under isa=%s\n", suite, lname);
    fflush(stdout);
    fails += _cmocka_run_group_tests(name, tests, n, setup, teardown);
  }
  if (rp_isa_set(ceiling) != RP_OK) fails++;
  return fails;
}

#endif
