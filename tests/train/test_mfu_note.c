/* The note beside an MFU above 100 % (rp_print_mfu_above_note): written only
 * then, with both rates in GFLOP/s, and never for a peak that was not measured.
 * And the FMA-probe line of `bench train` (rp_print_fma_fraction): the two
 * fractions of the probe's rate, nothing without a probe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ringpipe/rp_train.h"

/* What the note writes for these rates ("" when nothing). */
static char *note_of(double rate, double peak) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  rp_print_mfu_above_note(f, rate, peak);
  fclose(f);
  return text;
}

static void test_note_only_above_one(void **state) {
  (void)state;
  const double cases[][3] = { /* MFU (for the message), rate, peak */{0.88, 176e9, 200e9}, {1.0, 200e9, 200e9}, {-1.0, 0, 0},
                             {1.5, 150e9, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *t = note_of(cases[i][1], cases[i][2]);
    if (t[0]) fail_msg("mfu %.2f, peak %.0f: expected no note, got \"%s\"", cases[i][0],
                       cases[i][2], t);
    free(t);
  }
}

static void test_note_says_both_rates(void **state) {
  (void)state;
  char *t = note_of(202.4e9, 101.2e9);
  assert_non_null(strstr(t, "MFU above 100%"));
  assert_non_null(strstr(t, "202.4 GFLOP/s"));
  assert_non_null(strstr(t, "101.2 GFLOP/s"));
  assert_non_null(strstr(t, "start-up"));
  assert_int_equal(t[strlen(t) - 1], '\n');
  free(t);
}

/* What the FMA line writes for these rates ("" when nothing). */
static char *fma_line_of(double mean, double median, double probe) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  const int wrote = rp_print_fma_fraction(f, mean, median, probe, "avx512", 2);
  fclose(f);
  assert_int_equal(wrote, text[0] != '\0');
  return text;
}

static void test_fma_fractions(void **state) {
  (void)state;
  char *t = fma_line_of(177.2e9, 189.0e9, 236.3e9);
  assert_non_null(strstr(t, "avx512 x 2 threads, 236.3 GFLOP/s"));
  assert_non_null(strstr(t, "0.750 (mean rate)"));
  assert_non_null(strstr(t, "0.800 (median step)"));
  assert_int_equal(t[strlen(t) - 1], '\n');
  free(t);
  t = fma_line_of(177.2e9, -1.0, 236.3e9); /* one measured step: no median */
  assert_non_null(strstr(t, "0.750 (mean rate)"));
  assert_null(strstr(t, "median"));
  free(t);
}

static void test_no_fma_line_without_probe(void **state) {
  (void)state;
  const double cases[][2] = {{177e9, 0.0}, {177e9, -1.0}, {0.0, 236e9}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *t = fma_line_of(cases[i][0], cases[i][0], cases[i][1]);
    if (t[0]) fail_msg("rate %.0f, probe %.0f: expected no line, got \"%s\"", cases[i][0],
                       cases[i][1], t);
    free(t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_note_only_above_one),
      cmocka_unit_test(test_note_says_both_rates),
      cmocka_unit_test(test_fma_fractions),
      cmocka_unit_test(test_no_fma_line_without_probe),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
