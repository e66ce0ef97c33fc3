/* Options table: flags, '=' form, booleans, config files with override,
 * error messages, help text, JSON round trip; and the tiny JSON reader. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "io_test_util.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_options.h"

typedef enum { ATTN_NAIVE, ATTN_FLASH } tattn;

typedef struct {
  int layers;
  float lr;
  tattn attn;
  rp_opt_floats costs;
  int fused;
  char out[RP_OPT_STRLEN];
  int batch_size;
} topts;

static const rp_opt tab[] = {
    {"layers", RP_OPT_INT, offsetof(topts, layers), "6", 1, 96, NULL, "transformer layers"},
    {"lr", RP_OPT_FLOAT, offsetof(topts, lr), "3e-4", 0, 1, NULL, "peak learning rate"},
    {"attn", RP_OPT_ENUM, RP_OPT_ENUM_FIELD(topts, attn), "flash", 0, 0, "naive|flash", "attention kernel"},
    {"costs", RP_OPT_FLOATS, offsetof(topts, costs), "", 0, 1000, "tF,tB,tW", "action costs"},
    {"fused", RP_OPT_BOOL, offsetof(topts, fused), "0", 0, 0, NULL, "fuse the kernels"},
    {"out", RP_OPT_STR, offsetof(topts, out), "", 0, 0, NULL, "output directory"},
    {"batch_size", RP_OPT_INT, offsetof(topts, batch_size), "4", 1, 0, NULL, "sequences per step"},
};
enum { NT = sizeof tab / sizeof tab[0] };

static rp_status parse(topts *o, char **argv, int argc) {
  return rp_opts_parse(tab, NT, o, argc, argv, NULL, NULL, NULL);
}

static void test_defaults(void **state) {
  (void)state;
  topts o;
  memset(&o, 0x55, sizeof o);
  assert_int_equal(rp_opts_defaults(tab, NT, &o), RP_OK);
  assert_int_equal(o.layers, 6);
  assert_true(o.lr == 3e-4f);
  assert_int_equal(o.attn, ATTN_FLASH);
  assert_int_equal(o.costs.n, 0);
  assert_int_equal(o.fused, 0);
  assert_string_equal(o.out, "");
  assert_int_equal(o.batch_size, 4);
}

static void test_flags(void **state) {
  (void)state;
  topts o;
  {
    char *a[] = {"--layers", "12", "--lr=1e-3", "--attn", "naive", "--fused", "--out", "/tmp/x y"};
    assert_int_equal(parse(&o, a, 8), RP_OK);
    assert_int_equal(o.layers, 12);
    assert_true(o.lr == 1e-3f);
    assert_int_equal(o.attn, ATTN_NAIVE);
    assert_int_equal(o.fused, 1);
    assert_string_equal(o.out, "/tmp/x y");
    assert_int_equal(o.batch_size, 4);
  }
  {
    /* '-' and '_' are interchangeable */
    char *a[] = {"--batch-size", "8", "--fused", "--no-fused"};
    assert_int_equal(parse(&o, a, 4), RP_OK);
    assert_int_equal(o.batch_size, 8);
    assert_int_equal(o.fused, 0);
    char *b[] = {"--batch_size=16", "--fused=yes"};
    assert_int_equal(parse(&o, b, 2), RP_OK);
    assert_int_equal(o.batch_size, 16);
    assert_int_equal(o.fused, 1);
    char *c[] = {"--fused=off"};
    assert_int_equal(parse(&o, c, 1), RP_OK);
    assert_int_equal(o.fused, 0);
  }
  /* the last occurrence wins */
  char *d[] = {"--layers", "2", "--layers", "3"};
  assert_int_equal(parse(&o, d, 4), RP_OK);
  assert_int_equal(o.layers, 3);
  /* parse_onto keeps earlier values */
  o.layers = 42;
  char *e[] = {"--lr", "0.5"};
  assert_int_equal(rp_opts_parse_onto(tab, NT, &o, 2, e, NULL, NULL, NULL), RP_OK);
  assert_int_equal(o.layers, 42);
  assert_true(o.lr == 0.5f);
}

static void expect_error(char **argv, int argc, rp_status code, const char *must1,
                         const char *must2) {
  topts o;
  rp_status s = parse(&o, argv, argc);
  assert_int_equal(s, code);
  const char *m = rp_errmsg();
  if (!strstr(m, must1) || (must2 && !strstr(m, must2)))
    fail_msg("message '%s' lacks '%s' / '%s'", m, must1, must2 ? must2 : "");
}

static void test_errors(void **state) {
  (void)state;
  expect_error((char *[]){"--layer", "4"}, 2, RP_EINVAL, "--layer", "did you mean --layers");
  expect_error((char *[]){"--atn=naive"}, 1, RP_EINVAL, "--atn", "--attn");
  expect_error((char *[]){"--layers", "0"}, 2, RP_EINVAL, "--layers 0", "1..96");
  expect_error((char *[]){"--layers", "97"}, 2, RP_EINVAL, "97", "1..96");
  expect_error((char *[]){"--layers", "3.5"}, 2, RP_EINVAL, "'3.5'", "not an integer");
  expect_error((char *[]){"--lr", "abc"}, 2, RP_EINVAL, "'abc'", "not a number");
  expect_error((char *[]){"--lr", "2"}, 2, RP_EINVAL, "--lr 2", "0..1");
  expect_error((char *[]){"--lr", "nan"}, 2, RP_EINVAL, "--lr", "not a number");
  expect_error((char *[]){"--attn", "slow"}, 2, RP_EINVAL, "'slow'", "naive|flash");
  expect_error((char *[]){"--costs", "1,2"}, 2, RP_EINVAL, "'1,2'", "3 comma-separated");
  expect_error((char *[]){"--costs", "1,2,3,4"}, 2, RP_EINVAL, "'1,2,3,4'", "tF,tB,tW");
  expect_error((char *[]){"--costs", "1,x,3"}, 2, RP_EINVAL, "'1,x,3'", "0..1000");
  expect_error((char *[]){"--costs", "1,2,3000"}, 2, RP_EINVAL, "'1,2,3000'", "0..1000");
  expect_error((char *[]){"--fused=maybe"}, 1, RP_EINVAL, "maybe", "true/false");
  expect_error((char *[]){"--layers"}, 1, RP_EINVAL, "--layers needs a value", NULL);
  expect_error((char *[]){"--no-layers"}, 1, RP_EINVAL, "not an on/off option", NULL);
  expect_error((char *[]){"stray"}, 1, RP_EINVAL, "unexpected argument 'stray'", NULL);
  expect_error((char *[]){"-x"}, 1, RP_EINVAL, "'-x'", NULL);
  expect_error((char *[]){"--config", "/nonexistent/rp.cfg"}, 2, RP_EIO, "/nonexistent/rp.cfg", NULL);
  char longv[RP_OPT_STRLEN + 10];
  memset(longv, 'a', sizeof longv - 1);
  longv[sizeof longv - 1] = '\0';
  expect_error((char *[]){"--out", longv}, 2, RP_EINVAL, "--out", "at most");
}

static void test_positional(void **state) {
  (void)state;
  topts o;
  char *pos[2];
  int np = 2;
  char *a[] = {"gemm", "--layers", "2", "-", "--", "--lr"};
  assert_int_equal(rp_opts_parse(tab, NT, &o, 6, a, NULL, pos, &np), RP_EINVAL);  /* 3 > cap 2 */
  np = 3;
  char *pos3[3];
  assert_int_equal(rp_opts_parse(tab, NT, &o, 6, a, NULL, pos3, &np), RP_OK);
  assert_int_equal(np, 3);
  assert_string_equal(pos3[0], "gemm");
  assert_string_equal(pos3[1], "-");
  assert_string_equal(pos3[2], "--lr");
  assert_int_equal(o.layers, 2);
  np = 2;
  assert_int_equal(rp_opts_parse(tab, NT, &o, 0, NULL, NULL, pos, &np), RP_OK);
  assert_int_equal(np, 0);
}

static void test_config_file(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *cfg = io_path(dir, "run.cfg"), *bad = io_path(dir, "bad.cfg");
  const char *text =
      "# a training run\n"
      "layers = 3\n"
      "lr 0.01   # inline comment\n"
      "  attn = \"naive\"\n"
      "\n"
      "fused\n"
      "out = \"runs/a b#1\"\n"
      "batch-size=2\n";
  io_write_file(cfg, text, strlen(text));
  topts o;
  char flag[600];
  snprintf(flag, sizeof flag, "--config=%s", cfg);
  /* the flag given BEFORE --config still wins over the file */
  char *a[] = {"--layers", "5", flag};
  assert_int_equal(parse(&o, a, 3), RP_OK);
  assert_int_equal(o.layers, 5);
  assert_true(o.lr == 0.01f);
  assert_int_equal(o.attn, ATTN_NAIVE);
  assert_int_equal(o.fused, 1);
  assert_string_equal(o.out, "runs/a b#1");
  assert_int_equal(o.batch_size, 2);
  char *b[] = {"--config", cfg, "--no-fused"};
  assert_int_equal(parse(&o, b, 3), RP_OK);
  assert_int_equal(o.layers, 3);
  assert_int_equal(o.fused, 0);

  const char *badtext = "layers = 4\nheads = 2\n";
  io_write_file(bad, badtext, strlen(badtext));
  char *c[] = {"--config", bad};
  assert_int_equal(parse(&o, c, 2), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "bad.cfg:2"));
  assert_non_null(strstr(rp_errmsg(), "'heads'"));
  badtext = "layers = 400\n";
  io_write_file(bad, badtext, strlen(badtext));
  assert_int_equal(parse(&o, c, 2), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "bad.cfg:1"));
  assert_non_null(strstr(rp_errmsg(), "1..96"));
  io_rmtree(dir);
  free(cfg);
  free(bad);
  free(dir);
}

static void test_help(void **state) {
  (void)state;
  topts o;
  int help = 0;
  char *a[] = {"--bogus", "--help"};
  assert_int_equal(rp_opts_parse(tab, NT, &o, 2, a, &help, NULL, NULL), RP_OK);
  assert_int_equal(help, 1);
  char *b[] = {"--layers", "2"};
  assert_int_equal(rp_opts_parse(tab, NT, &o, 2, b, &help, NULL, NULL), RP_OK);
  assert_int_equal(help, 0);

  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  rp_opts_help(f, "ringpipe train [options]", "Trains a GPT.", tab, NT);
  fclose(f);
  for (int i = 0; i < NT; i++) {
    char want[64];
    snprintf(want, sizeof want, "%s%s", tab[i].type == RP_OPT_BOOL ? "--[no-]" : "--", tab[i].name);
    if (!strstr(text, want)) fail_msg("help lacks %s:\n%s", want, text);
    if (!strstr(text, tab[i].help)) fail_msg("help lacks '%s'", tab[i].help);
  }
  const char *musts[] = {"usage: ringpipe train", "Trains a GPT.", "default: 6", "1..96",
                         "{naive|flash}", "default: flash", "default: off", "--config FILE",
                         "--help", "0..1"};
  for (size_t i = 0; i < sizeof musts / sizeof *musts; i++)
    if (!strstr(text, musts[i])) fail_msg("help lacks '%s':\n%s", musts[i], text);
  /* aligned: every help column starts at the same offset */
  int col = -1;
  for (char *line = strstr(text, "\n  --"); line; line = strstr(line + 1, "\n  --")) {
    char *h = strstr(line, "transformer layers");
    if (h && h < strchr(line + 1, '\n')) col = (int)(h - line);
    char *h2 = strstr(line, "peak learning rate");
    if (h2 && h2 < strchr(line + 1, '\n')) assert_int_equal((int)(h2 - line), col);
  }
  assert_true(col > 0);
  free(text);
}

static void test_json_roundtrip(void **state) {
  (void)state;
  topts o, p;
  char *a[] = {"--lr", "0.000123456789", "--out", "a \"quoted\"\\path\n", "--fused",
               "--attn", "naive", "--costs", "0.1,20,7.25"};
  assert_int_equal(parse(&o, a, 9), RP_OK);
  char buf[2048];
  assert_int_equal(rp_opts_to_json(tab, NT, &o, buf, sizeof buf), RP_OK);
  assert_int_equal(rp_json_validate(buf), RP_OK);
  double layers;
  assert_int_equal(rp_json_get_number(buf, "layers", &layers), RP_OK);
  assert_true(layers == 6);
  assert_int_equal(rp_opts_defaults(tab, NT, &p), RP_OK);
  assert_int_equal(rp_opts_from_json(tab, NT, &p, buf), RP_OK);
  assert_memory_equal(&o.lr, &p.lr, sizeof(float));  /* bitwise */
  assert_string_equal(o.out, p.out);
  assert_int_equal(p.fused, 1);
  assert_int_equal(p.attn, ATTN_NAIVE);  /* a choice is saved as its word */
  assert_non_null(strstr(buf, "\"attn\":\"naive\""));
  assert_int_equal(p.costs.n, 3);
  assert_memory_equal(p.costs.v, o.costs.v, 3 * sizeof(double));
  assert_int_equal(rp_opts_to_json(tab, NT, &o, buf, 20), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "bytes"));
}

/* Non-finite numbers printf writes become null; strings are left alone. */
static void test_json_fputs_nonfinite(void **state) {
  (void)state;
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  assert_non_null(f);
  assert_int_equal(rp_json_fputs(f, "{\"loss\":nan,\"a\":[-nan, inf,-INF,1e5],\"s\":\"nan, inf"
                                    "\\\" :nan\",\"b\":-infinity,\"c\":nano}"), 0);
  fclose(f);
  assert_string_equal(out, "{\"loss\":null,\"a\":[null, null,null,1e5],\"s\":\"nan, inf"
                           "\\\" :nan\",\"b\":null,\"c\":nano}");
  free(out);
}

/* The JSON writer: commas, nesting, escapes, null for non-finite numbers, and
 * what it writes reads back with the project's own reader. */
static void test_json_writer(void **state) {
  (void)state;
  rp_jw w;
  rp_jw_init(&w);
  rp_jw_obj(&w);
  rp_jw_key(&w, "step");
  rp_jw_int(&w, 7);
  rp_jw_key(&w, "loss");
  rp_jw_num(&w, 2.5, 17);
  rp_jw_key(&w, "bad");
  rp_jw_num(&w, NAN, 17);
  rp_jw_key(&w, "name \"q\"");
  rp_jw_str(&w, "a\nb");
  rp_jw_key(&w, "xs");
  rp_jw_arr(&w);
  rp_jw_fixed(&w, 1.25, 2);
  rp_jw_num(&w, INFINITY, 6);
  rp_jw_arr(&w);
  rp_jw_int(&w, 1);
  rp_jw_arr_end(&w);
  rp_jw_arr_end(&w);
  rp_jw_key(&w, "inner");
  rp_jw_obj(&w);
  rp_jw_fields(&w, "\"a\":1,\"b\":true");
  rp_jw_key(&w, "c");
  rp_jw_bool(&w, 0);
  rp_jw_obj_end(&w);
  rp_jw_obj_end(&w);
  rp_status st;
  const char *t = rp_jw_text(&w, &st);
  assert_int_equal(st, RP_OK);
  assert_string_equal(t, "{\"step\":7,\"loss\":2.5,\"bad\":null,\"name \\\"q\\\"\":\"a\\nb\","
                         "\"xs\":[1.25,null,[1]],\"inner\":{\"a\":1,\"b\":true,\"c\":false}}");
  assert_int_equal(rp_json_validate(t), RP_OK);
  int64_t v;
  assert_int_equal(rp_json_get_int64(t, "inner.a", &v), RP_OK);
  assert_int_equal(v, 1);
  rp_jw_free(&w);
  /* an unclosed container is refused, not written */
  rp_jw_init(&w);
  rp_jw_obj(&w);
  assert_null(rp_jw_text(&w, &st));
  assert_int_equal(st, RP_EINTERNAL);
  rp_jw_free(&w);
}

static void test_json_reader(void **state) {
  (void)state;
  const char *doc =
      " {\"step\": 120, \"config\": {\"L\": 4, \"name\": \"t\\u00e9st \\\"q\\\"\\n\", "
      "\"dims\": [3, -2.5e1, {\"x\": true}, 0.5]}, \"big\": 18446744073709551615, \"neg\": -7, "
      "\"ok\": false, \"nothing\": null} ";
  assert_int_equal(rp_json_validate(doc), RP_OK);
  double v;
  int64_t i64;
  uint64_t u64;
  int b;
  char s[64];
  assert_int_equal(rp_json_get_number(doc, "step", &v), RP_OK);
  assert_true(v == 120);
  assert_int_equal(rp_json_get_int64(doc, "config.L", &i64), RP_OK);
  assert_int_equal(i64, 4);
  assert_int_equal(rp_json_get_number(doc, "config.dims.1", &v), RP_OK);
  assert_true(v == -25);
  assert_int_equal(rp_json_get_bool(doc, "config.dims.2.x", &b), RP_OK);
  assert_int_equal(b, 1);
  assert_int_equal(rp_json_get_bool(doc, "ok", &b), RP_OK);
  assert_int_equal(b, 0);
  assert_int_equal(rp_json_get_u64(doc, "big", &u64), RP_OK);
  assert_true(u64 == UINT64_MAX);
  assert_int_equal(rp_json_get_u64(doc, "neg", &u64), RP_EINVAL);
  assert_int_equal(rp_json_get_int64(doc, "config.dims.1", &i64), RP_OK);  /* integral */
  assert_int_equal(i64, -25);
  assert_int_equal(rp_json_get_int64(doc, "config.dims.3", &i64), RP_EINVAL);
  assert_int_equal(rp_json_get_number(doc, "config.dims.4", &v), RP_EINVAL);
  assert_int_equal(rp_json_get_string(doc, "config.name", s, sizeof s), RP_OK);
  assert_string_equal(s, "t\xc3\xa9st \"q\"\n");
  assert_int_equal(rp_json_get_string(doc, "config.name", s, 4), RP_EINVAL);
  assert_int_equal(rp_json_get_number(doc, "config.missing", &v), RP_EINVAL);
  assert_non_null(strstr(rp_errmsg(), "config.missing"));
  assert_int_equal(rp_json_get_number(doc, "config.name", &v), RP_EINVAL);
  const char *bad[] = {"",          "{",          "{\"a\":}",  "{\"a\" 1}",     "[1,]",
                       "{\"a\":01}", "[1.]",       "\"\x01\"",  "{\"a\":1} x",  "tru",
                       "[\"\\q\"]",  "{'a':1}",    "[1 2]",     "{\"a\":1,}",    "-",
                       "[1e]",       "\"\\u12\""};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
    if (rp_json_validate(bad[k]) != RP_EFORMAT) fail_msg("accepted invalid JSON: %s", bad[k]);
  assert_int_equal(rp_json_validate("{\"a\":1,}"), RP_EFORMAT);
  assert_non_null(strstr(rp_errmsg(), "byte 7"));
  const char *good[] = {"0", "-0.5e+3", "[]", "{}", "\"\\ud83d\\ude00\"", "[null,true,false]",
                        " \t\n{\"a\":[{\"b\":[]}]}\r\n"};
  for (size_t k = 0; k < sizeof good / sizeof *good; k++)
    if (rp_json_validate(good[k]) != RP_OK) fail_msg("rejected valid JSON: %s", good[k]);
  /* iteration over an object whose keys contain dots */
  const char *st = "{\"h.0.w\": [1,2], \"wte.weight\": {}}";
  rp_json_iter it;
  char key[32];
  const char *val;
  size_t vl;
  assert_int_equal(rp_json_iter_begin(&it, st), RP_OK);
  assert_int_equal(rp_json_iter_next(&it, key, sizeof key, &val, &vl), 1);
  assert_string_equal(key, "h.0.w");
  assert_int_equal((int)vl, 5);
  assert_int_equal(rp_json_iter_next(&it, key, sizeof key, &val, &vl), 1);
  assert_string_equal(key, "wte.weight");
  assert_int_equal(rp_json_iter_next(&it, key, sizeof key, &val, &vl), 0);
  char esc[64];
  size_t need = rp_json_escape(esc, sizeof esc, "a\"b\\c\n\x01");
  assert_string_equal(esc, "\"a\\\"b\\\\c\\n\\u0001\"");
  assert_int_equal((int)need, (int)strlen(esc));
  assert_int_equal(rp_json_validate(esc), RP_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),   cmocka_unit_test(test_flags),
      cmocka_unit_test(test_errors),     cmocka_unit_test(test_positional),
      cmocka_unit_test(test_config_file), cmocka_unit_test(test_help),
      cmocka_unit_test(test_json_roundtrip), cmocka_unit_test(test_json_reader),
      cmocka_unit_test(test_json_fputs_nonfinite), cmocka_unit_test(test_json_writer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
