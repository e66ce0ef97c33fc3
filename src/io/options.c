/* Options table: defaults, validated assignment, flags, config files, JSON.
 * Help text lives in options_help.c. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ringpipe/rp_json.h"
#include "ringpipe/rp_options.h"

/* '-' and '_' are the same character in option names. */
static int name_char(char ch) { return ch == '_' ? '-' : ch; }

static int name_eq_n(const char *name, const char *s, size_t n) {
  size_t i = 0;
  for (; i < n && name[i]; i++)
    if (name_char(name[i]) != name_char(s[i])) return 0;
  return i == n && name[i] == '\0';
}

static const rp_opt *find_n(const rp_opt *t, int n, const char *s, size_t len) {
  for (int i = 0; i < n; i++)
    if (name_eq_n(t[i].name, s, len)) return &t[i];
  return NULL;
}

const rp_opt *rp_opts_find(const rp_opt *t, int n, const char *name) {
  return find_n(t, n, name, strlen(name));
}

/* Levenshtein distance, for "did you mean". */
static int edit_distance(const char *a, size_t la, const char *b) {
  size_t lb = strlen(b);
  if (la > 63 || lb > 63) return 99;
  int prev[64], cur[64];
  for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int sub = prev[j - 1] + (name_char(a[i - 1]) != name_char(b[j - 1]));
      int del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = RP_MIN(sub, RP_MIN(del, ins));
    }
    memcpy(prev, cur, sizeof(int) * (lb + 1));
  }
  return prev[lb];
}

static const char *closest_name(const rp_opt *t, int n, const char *s, size_t len) {
  const char *best = "help";
  int bd = edit_distance(s, len, best);
  int dc = edit_distance(s, len, "config");
  if (dc < bd) {
    best = "config";
    bd = dc;
  }
  for (int i = 0; i < n; i++) {
    int d = edit_distance(s, len, t[i].name);
    /* a prefix ("--lay" for "--layers") is the likeliest intent */
    if (len > 0 && strncmp(t[i].name, s, len) == 0) d = 0;
    if (d < bd) {
      bd = d;
      best = t[i].name;
    }
  }
  return best;
}

static int parse_bool(const char *v, int *out) {
  static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(v, yes[i])) {
      *out = 1;
      return 0;
    }
    if (!strcasecmp(v, no[i])) {
      *out = 0;
      return 0;
    }
  }
  return -1;
}

static int has_range(const rp_opt *o) { return o->min <= o->max; }

/* Position of v among "a|b|c" (the enum value it parses to), or -1. */
static int choice_index(const char *choices, const char *v) {
  size_t lv = strlen(v);
  int i = 0;
  for (const char *c = choices; c && *c; i++) {
    const char *bar = strchr(c, '|');
    size_t l = bar ? (size_t)(bar - c) : strlen(c);
    if (l == lv && !strncmp(c, v, l)) return i;
    if (!bar) break;
    c = bar + 1;
  }
  return -1;
}

const char *rp_opt_choice_word(const rp_opt *o, int value, char *buf, size_t cap) {
  const char *c = o->choices ? o->choices : "";
  for (int i = 0; i < value && c; i++) {
    c = strchr(c, '|');
    if (c) c++;
  }
  size_t l = c ? strcspn(c, "|") : 0;
  if (!c || cap == 0) l = 0;
  if (l >= cap) l = cap - 1;
  if (cap) {
    memcpy(buf, c ? c : "", l);
    buf[l] = '\0';
  }
  return buf;
}

const char *rp_opts_enum_word(const rp_opt *t, int n, const char *name, int value, char *buf,
                              size_t cap) {
  const rp_opt *o = rp_opts_find(t, n, name);
  if (o && o->type == RP_OPT_ENUM) return rp_opt_choice_word(o, value, buf, cap);
  if (cap) buf[0] = '\0';
  return buf;
}

/* "tF,tB,tW" names three elements; the count is fixed by the row. */
static int list_len(const rp_opt *o) {
  int n = 1;
  for (const char *c = o->choices ? o->choices : ""; *c; c++) n += *c == ',';
  return n;
}

static rp_status set_floats(const rp_opt *o, rp_opt_floats *f, const char *v, const char *who) {
  int want = list_len(o);
  rp_opt_floats got = {0};
  if (!*v) {  /* empty: not given */
    *f = got;
    return RP_OK;
  }
  if (want > RP_OPT_MAXFLOATS)
    return rp_err(RP_EINTERNAL, "option '%s' names %d values; at most %d fit", o->name, want,
                  RP_OPT_MAXFLOATS);
  const char *c = v;
  while (got.n < want) {
    char *end;
    double x = strtod(c, &end);
    if (end == c || !isfinite(x) || (has_range(o) && (x < o->min || x > o->max))) break;
    got.v[got.n++] = x;
    if (*end == '\0' || got.n == want) { c = end; break; }
    if (*end != ',') break;
    c = end + 1;
  }
  if (got.n != want || *c)
    return has_range(o)
               ? rp_err(RP_EINVAL, "%s '%s' must be %d comma-separated numbers %s in %g..%g", who,
                        v, want, o->choices, o->min, o->max)
               : rp_err(RP_EINVAL, "%s '%s' must be %d comma-separated numbers %s", who, v, want,
                        o->choices);
  *f = got;
  return RP_OK;
}

/* `who` names the source in messages: "--layers" or "cfg.txt:3: layers". */
static rp_status set_value(const rp_opt *o, void *out, const char *v, const char *who) {
  char *field = (char *)out + o->offset;
  char *end;
  switch (o->type) {
    case RP_OPT_INT: {
      errno = 0;
      long long x = strtoll(v, &end, 10);
      if (!*v || *end || errno == ERANGE || x < -2147483647LL || x > 2147483647LL) {
        if (has_range(o))
          return rp_err(RP_EINVAL, "%s '%s' is not an integer; use an integer in %.0f..%.0f", who,
                        v, o->min, o->max);
        return rp_err(RP_EINVAL, "%s '%s' is not an integer", who, v);
      }
      if (has_range(o) && (x < o->min || x > o->max))
        return rp_err(RP_EINVAL, "%s %lld is out of range; use an integer in %.0f..%.0f", who, x,
                      o->min, o->max);
      *(int *)field = (int)x;
      return RP_OK;
    }
    case RP_OPT_FLOAT: {
      errno = 0;
      double x = strtod(v, &end);
      if (!*v || *end || !isfinite(x)) {
        if (has_range(o))
          return rp_err(RP_EINVAL, "%s '%s' is not a number; use a number in %g..%g", who, v,
                        o->min, o->max);
        return rp_err(RP_EINVAL, "%s '%s' is not a number", who, v);
      }
      if (has_range(o) && (x < o->min || x > o->max))
        return rp_err(RP_EINVAL, "%s %s is out of range; use a number in %g..%g", who, v, o->min,
                      o->max);
      *(float *)field = (float)x;
      return RP_OK;
    }
    case RP_OPT_BOOL: {
      int b;
      if (parse_bool(v, &b))
        return rp_err(RP_EINVAL, "%s '%s' is not a boolean; use true/false, 1/0, yes/no or on/off",
                      who, v);
      *(int *)field = b;
      return RP_OK;
    }
    case RP_OPT_ENUM: {
      int i = choice_index(o->choices, v);
      if (i < 0)
        return rp_err(RP_EINVAL, "%s '%s' is not one of %s", who, v,
                      o->choices ? o->choices : "(no choices)");
      *(int *)field = i;
      return RP_OK;
    }
    case RP_OPT_FLOATS:
      return set_floats(o, (rp_opt_floats *)field, v, who);
    case RP_OPT_STR:
      if (strlen(v) >= RP_OPT_STRLEN)
        return rp_err(RP_EINVAL, "%s value has %zu characters; at most %d are allowed", who,
                      strlen(v), RP_OPT_STRLEN - 1);
      memcpy(field, v, strlen(v) + 1);
      return RP_OK;
  }
  return rp_err(RP_EINTERNAL, "option '%s' has an unknown type %d", o->name, (int)o->type);
}

rp_status rp_opts_set(const rp_opt *t, int n, void *out, const char *name, const char *value) {
  const rp_opt *o = rp_opts_find(t, n, name);
  char who[96];
  if (!o)
    return rp_err(RP_EINVAL, "unknown option '%s'; did you mean '%s'?", name,
                  closest_name(t, n, name, strlen(name)));
  snprintf(who, sizeof who, "--%s", o->name);
  return set_value(o, out, value, who);
}

rp_status rp_opts_defaults(const rp_opt *t, int n, void *out) {
  for (int i = 0; i < n; i++) {
    char who[96];
    snprintf(who, sizeof who, "default of --%s", t[i].name);
    rp_status s = set_value(&t[i], out, t[i].defval ? t[i].defval : "", who);
    if (s != RP_OK) return s;
  }
  return RP_OK;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

/* One config line (comment already removed, trimmed, non-empty). */
static rp_status config_line(const rp_opt *t, int n, void *out, char *line, const char *path,
                             int lineno) {
  char *k = line;
  if (k[0] == '-' && k[1] == '-') k += 2;
  size_t kl = strcspn(k, " \t=");
  char *v = k + kl;
  int had_value = *v != '\0';
  if (*v) {
    *v++ = '\0';
    v = trim(v);
    if (*v == '=') v = trim(v + 1);
  }
  size_t vl = strlen(v);
  if (v[0] == '"') {  /* a quoted value: the quotes go, and they must close at its end */
    if (vl < 2 || v[vl - 1] != '"' || memchr(v + 1, '"', vl - 2))
      return rp_err(RP_EINVAL, "%s:%d: the value of '%.*s' (%s) has an unterminated quote or "
                    "text after the closing quote; write %.*s = \"VALUE\"", path, lineno,
                    (int)kl, k, v, (int)kl, k);
    v[vl - 1] = '\0';
    v++;
  }
  if (name_eq_n("config", k, kl))
    return rp_err(RP_EINVAL, "%s:%d: 'config' inside a config file is not supported; pass "
                  "several --config flags instead", path, lineno);
  const rp_opt *o = find_n(t, n, k, kl);
  if (!o)
    return rp_err(RP_EINVAL, "%s:%d: unknown key '%s'; did you mean '%s'?", path, lineno, k,
                  closest_name(t, n, k, kl));
  char who[600];
  snprintf(who, sizeof who, "%s:%d: %s", path, lineno, o->name);
  if (!had_value && o->type == RP_OPT_BOOL) v = "1";
  if (!had_value && o->type != RP_OPT_BOOL && o->type != RP_OPT_STR)
    return rp_err(RP_EINVAL, "%s has no value; write '%s = VALUE'", who, o->name);
  return set_value(o, out, v, who);
}

/* Applies every line of f; `path` names the source in messages. */
static rp_status load_config_stream(const rp_opt *t, int n, void *out, FILE *f,
                                    const char *path) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t got;
  int lineno = 0;
  rp_status s = RP_OK;
  while (s == RP_OK && (got = getline(&line, &cap, f)) >= 0) {
    lineno++;
    if ((size_t)got != strlen(line)) {
      s = rp_err(RP_EINVAL, "%s:%d: the line holds a NUL byte; a config file is text", path,
                 lineno);
      break;
    }
    int inq = 0;
    for (char *p = line; *p; p++) {  /* '#' outside quotes starts a comment */
      if (*p == '"') inq = !inq;
      if (*p == '#' && !inq) {
        *p = '\0';
        break;
      }
    }
    char *l = trim(line);
    if (*l) s = config_line(t, n, out, l, path, lineno);
  }
  if (s == RP_OK && ferror(f)) s = rp_err(RP_EIO, "error reading config file '%s'", path);
  free(line);
  return s;
}

rp_status rp_opts_load_config(const rp_opt *t, int n, void *out, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return rp_err(RP_EIO, "cannot open config file '%s': %s", path, strerror(errno));
  rp_status s = load_config_stream(t, n, out, f, path);
  fclose(f);
  return s;
}

static int is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

static int looks_numeric(const char *a) {
  return a[0] == '-' && (isdigit((unsigned char)a[1]) || a[1] == '.');
}

static rp_status parse_impl(const rp_opt *t, int n, void *out, int argc, char **argv,
                            int *help_requested, char **pos, int *npos, int defaults) {
  int cap = npos ? *npos : 0, np = 0;
  if (help_requested) *help_requested = 0;
  if (npos) *npos = 0;
  if (defaults) RP_TRY(rp_opts_defaults(t, n, out));
  for (int i = 0; i < argc && strcmp(argv[i], "--"); i++)
    if (is_help(argv[i]) && help_requested) {
      *help_requested = 1;
      return RP_OK;
    }
  /* Pass 1 applies config files and checks names, pass 2 applies flags, so
   * that flags win over files wherever they appear. */
  for (int pass = 1; pass <= 2; pass++) {
    int only_pos = 0;
    np = 0;
    for (int i = 0; i < argc; i++) {
      const char *a = argv[i];
      if (only_pos || a[0] != '-' || a[1] == '\0' || looks_numeric(a)) {
        if (!pos) return rp_err(RP_EINVAL, "unexpected argument '%s' (options start with --)", a);
        if (np >= cap)
          return rp_err(RP_EINVAL, "too many arguments: '%s' is argument %d; at most %d allowed",
                        a, np + 1, cap);
        if (pass == 2) pos[np] = argv[i];
        np++;
        continue;
      }
      if (!strcmp(a, "--")) {
        only_pos = 1;
        continue;
      }
      if (a[1] != '-')
        return rp_err(RP_EINVAL, "unknown option '%s'; long options start with -- (see --help)", a);
      const char *name = a + 2, *eq = strchr(name, '=');
      size_t nl = eq ? (size_t)(eq - name) : strlen(name);
      const char *val = eq ? eq + 1 : NULL;
      if (name_eq_n("config", name, nl) || name_eq_n("help", name, nl)) {
        if (name_eq_n("help", name, nl)) continue;  /* help_requested == NULL: ignore */
        if (!val) {
          if (i + 1 >= argc) return rp_err(RP_EINVAL, "--config needs a file name");
          val = argv[++i];
        }
        if (pass == 1) RP_TRY(rp_opts_load_config(t, n, out, val));
        continue;
      }
      const rp_opt *o = find_n(t, n, name, nl);
      int negated = 0;
      if (!o && nl > 3 && !strncmp(name, "no-", 3)) {
        o = find_n(t, n, name + 3, nl - 3);
        if (o && o->type != RP_OPT_BOOL)
          return rp_err(RP_EINVAL, "--%.*s: --%s is not an on/off option; give it a value",
                        (int)nl, name, o->name);
        negated = o != NULL;
      }
      if (!o)
        return rp_err(RP_EINVAL, "unknown option --%.*s; did you mean --%s? (see --help)",
                      (int)nl, name, closest_name(t, n, name, nl));
      char who[96];
      snprintf(who, sizeof who, "--%s", o->name);
      if (o->type == RP_OPT_BOOL && (!val || negated)) {
        if (negated && val)
          return rp_err(RP_EINVAL, "--no-%s takes no value (got '%s')", o->name, val);
        val = negated ? "0" : "1";
      } else if (!val) {
        if (i + 1 >= argc)
          return rp_err(RP_EINVAL, "--%s needs a value (see --help)", o->name);
        val = argv[++i];
      }
      if (pass == 2) RP_TRY(set_value(o, out, val, who));
    }
  }
  if (npos) *npos = np;
  return RP_OK;
}

rp_status rp_opts_parse(const rp_opt *t, int n, void *out, int argc, char **argv,
                        int *help_requested, char **pos, int *npos) {
  return parse_impl(t, n, out, argc, argv, help_requested, pos, npos, 1);
}

rp_status rp_opts_parse_onto(const rp_opt *t, int n, void *out, int argc, char **argv,
                             int *help_requested, char **pos, int *npos) {
  return parse_impl(t, n, out, argc, argv, help_requested, pos, npos, 0);
}

/* "10,20,10": each value in the shortest text that reads back bitwise. */
static const char *floats_text(const rp_opt_floats *f, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < f->n && len < cap; i++) {
    char num[40];
    for (int prec = 6; prec <= 17; prec++) {
      snprintf(num, sizeof num, "%.*g", prec, f->v[i]);
      if (strtod(num, NULL) == f->v[i]) break;
    }
    int w = snprintf(buf + len, cap - len, "%s%s", i ? "," : "", num);
    len += (size_t)(w > 0 ? w : 0);
  }
  return buf;
}

rp_status rp_opts_to_json(const rp_opt *t, int n, const void *opts, char *buf, size_t cap) {
  size_t len = 0;
#define EMIT(...)                                                          \
  do {                                                                     \
    int w_ = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, __VA_ARGS__); \
    len += (size_t)(w_ > 0 ? w_ : 0);                                      \
  } while (0)
  EMIT("{");
  for (int i = 0; i < n; i++) {
    const rp_opt *o = &t[i];
    const char *field = (const char *)opts + o->offset;
    char key[160];
    rp_json_escape(key, sizeof key, o->name);
    EMIT("%s%s:", i ? "," : "", key);
    switch (o->type) {
      case RP_OPT_INT: EMIT("%d", *(const int *)field); break;
      case RP_OPT_BOOL: EMIT("%s", *(const int *)field ? "true" : "false"); break;
      case RP_OPT_FLOAT: {
        float x = *(const float *)field;
        if (isfinite(x)) {
          /* shortest text that reads back bitwise (9 digits always do) */
          char num[32];
          for (int prec = 6; prec <= 9; prec++) {
            snprintf(num, sizeof num, "%.*g", prec, (double)x);
            if (strtof(num, NULL) == x) break;
          }
          EMIT("%s", num);
        } else {
          EMIT("null");
        }
        break;
      }
      case RP_OPT_STR:
      case RP_OPT_ENUM:
      case RP_OPT_FLOATS: {
        char text[RP_OPT_STRLEN];
        const char *str = field;
        if (o->type == RP_OPT_ENUM)
          str = rp_opt_choice_word(o, *(const int *)field, text, sizeof text);
        else if (o->type == RP_OPT_FLOATS)
          str = floats_text((const rp_opt_floats *)field, text, sizeof text);
        size_t need = rp_json_escape(NULL, 0, str);
        if (len + need < cap) rp_json_escape(buf + len, cap - len, str);
        len += need;
        break;
      }
    }
  }
  EMIT("}");
#undef EMIT
  if (len >= cap)
    return rp_err(RP_EINVAL, "options JSON needs %zu bytes; the buffer holds %zu", len + 1, cap);
  return RP_OK;
}

rp_status rp_opts_from_json(const rp_opt *t, int n, void *out, const char *json) {
  rp_json_iter it;
  char key[256];
  const char *v;
  size_t vl;
  int r;
  if (rp_json_iter_begin(&it, json) != RP_OK || it.close != '}')
    return rp_err(RP_EFORMAT, "options JSON is not an object");
  while ((r = rp_json_iter_next(&it, key, sizeof key, &v, &vl)) == 1) {
    const rp_opt *o = rp_opts_find(t, n, key);
    if (!o) continue;
    char who[300], text[RP_OPT_STRLEN + 8];
    snprintf(who, sizeof who, "saved option %s", o->name);
    if (*v == '"') {
      /* wrap the member so the path lookup can decode the string */
      char *tmp = malloc(vl + 8);
      if (!tmp) return rp_err(RP_ENOMEM, "out of memory");
      snprintf(tmp, vl + 8, "{\"v\":%.*s}", (int)vl, v);
      rp_status s = rp_json_get_string(tmp, "v", text, sizeof text);
      free(tmp);
      if (s != RP_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rp_errmsg());
        return rp_err(s, "%s: %s", who, msg);
      }
    } else if (vl < sizeof text) {
      memcpy(text, v, vl);
      text[vl] = '\0';
    } else {
      return rp_err(RP_EFORMAT, "%s: value too long", who);
    }
    RP_TRY(set_value(o, out, text, who));
  }
  return r < 0 ? (rp_status)r : RP_OK;
}
