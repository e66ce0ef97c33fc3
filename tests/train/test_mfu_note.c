/* The note beside an MFU above 100 % (rp_print_mfu_above_note): written only
 * then, with both rates in GFLOP/s, and never for a peak that was not measured.
 * And the FMA-probe lines of `bench train` (rp_print_fma_fraction, and
 * rp_print_fma_fraction_together over the probe on all threads at once): the
 * two fractions of the probe's rate, nothing without a probe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ringpipe/rp_train.h"

/* A stream into memory, and what was written to it once closed: the text
 * ("" when nothing), checked against the printer's return (wrote or not). */
typedef struct {
  char *text;
  size_t len;
  FILE *f;
} capture;

static FILE *capture_open(capture *c) {
  c->text = NULL, c->len = 0;
  c->f = open_memstream(&c->text, &c->len);
  assert_non_null(c->f);
  return c->f;
}

static char *capture_close(capture *c, int wrote) {
  fclose(c->f);
  assert_int_equal(wrote, c->text[0] != '\0');
  return c->text;
}

/* Fails unless t contains every string of the NULL-ended list and ends its line. */
static void assert_says(const char *t, ...) {
  va_list ap;
  va_start(ap, t);
  for (const char *want; (want = va_arg(ap, const char *)) != NULL;)
    if (!strstr(t, want)) fail_msg("expected \"%s\" in \"%s\"", want, t);
  va_end(ap);
  assert_int_equal(t[strlen(t) - 1], '\n');
}

/* What the note writes for these rates ("" when nothing). */
static char *note_of(double rate, double peak) {
  capture c;
  return capture_close(&c, rp_print_mfu_above_note(capture_open(&c), rate, peak));
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
  assert_says(t, "MFU above 100%", "202.4 GFLOP/s", "101.2 GFLOP/s", "start-up", NULL);
  free(t);
}

/* What the FMA line writes for these rates ("" when nothing). */
static char *fma_line_of(double mean, double median, double probe) {
  capture c;
  return capture_close(
      &c, rp_print_fma_fraction(capture_open(&c), mean, median, probe, "avx512", 2));
}

static void test_fma_fractions(void **state) {
  (void)state;
  char *t = fma_line_of(177.2e9, 189.0e9, 236.3e9);
  assert_says(t, "avx512 x 2 threads, 236.3 GFLOP/s", "0.750 (mean rate)", "0.800 (median step)",
              NULL);
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

/* What the all-threads FMA line writes ("" when nothing). */
static char *together_line_of(double mean, double median, double together, double probe) {
  capture c;
  return capture_close(&c, rp_print_fma_fraction_together(capture_open(&c), mean, median,
                                                          together, probe, 1.0));
}

/* The same rates over the probe on all threads at once, with that rate's
 * share of the start-up probe; no line without either rate */
static void test_fma_fractions_together(void **state) {
  (void)state;
  char *t = together_line_of(177.2e9, 189.0e9, 200.0e9, 250.0e9);
  assert_says(t, "all threads at once (1 s after the steps", "200.0 GFLOP/s, 0.800 of the probe above",
              "0.886 (mean rate)", "0.945 (median step)", NULL);
  free(t);
  t = together_line_of(177.2e9, -1.0, 200.0e9, 250.0e9);
  assert_non_null(strstr(t, "0.886 (mean rate)"));
  assert_null(strstr(t, "median step"));
  free(t);
  const double cases[][3] = {{177e9, 0.0, 250e9}, {177e9, 200e9, 0.0}, {0.0, 200e9, 250e9}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    t = together_line_of(cases[i][0], cases[i][0], cases[i][1], cases[i][2]);
    if (t[0]) fail_msg("case %zu: expected no line, got \"%s\"", i, t);
    free(t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fma_fractions_together),
      cmocka_unit_test(test_note_only_above_one),
      cmocka_unit_test(test_note_says_both_rates),
      cmocka_unit_test(test_fma_fractions),
      cmocka_unit_test(test_no_fma_line_without_probe),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
