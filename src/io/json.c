/* Tiny JSON reader: a strict recursive-descent validator plus path lookup and a
 * member iterator over NUL-terminated text. See rp_json.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ringpipe/rp_json.h"

#define JSON_MAX_DEPTH 128

typedef struct {
  const char *base;
  const char *err_at;
  const char *err_what;
} jctx;

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

static int fail(jctx *c, const char *at, const char *what) {
  if (!c->err_at) {
    c->err_at = at;
    c->err_what = what;
  }
  return -1;
}

static int hexval(char h) {
  if (h >= '0' && h <= '9') return h - '0';
  if (h >= 'a' && h <= 'f') return h - 'a' + 10;
  if (h >= 'A' && h <= 'F') return h - 'A' + 10;
  return -1;
}

/* *pp at the opening quote; leaves *pp after the closing quote. */
static int scan_string(jctx *c, const char **pp) {
  const char *p = *pp + 1;
  for (;;) {
    unsigned char ch = (unsigned char)*p;
    if (ch == '\0') return fail(c, p, "unterminated string");
    if (ch == '"') break;
    if (ch < 0x20) return fail(c, p, "raw control character in string (escape it)");
    if (ch == '\\') {
      p++;
      if (*p == 'u') {
        for (int k = 1; k <= 4; k++)
          if (hexval(p[k]) < 0) return fail(c, p, "bad \\u escape (need 4 hex digits)");
        p += 5;
        continue;
      }
      if (!*p || !strchr("\"\\/bfnrt", *p)) return fail(c, p, "bad escape in string");
    }
    p++;
  }
  *pp = p + 1;
  return 0;
}

static int scan_digits(const char **pp) {
  const char *p = *pp;
  while (*p >= '0' && *p <= '9') p++;
  int n = (int)(p - *pp);
  *pp = p;
  return n;
}

static int scan_number(jctx *c, const char **pp) {
  const char *p = *pp;
  if (*p == '-') p++;
  if (*p == '0') {
    p++;
  } else if (*p >= '1' && *p <= '9') {
    scan_digits(&p);
  } else {
    return fail(c, p, "digit expected in number");
  }
  if (*p == '.') {
    p++;
    if (!scan_digits(&p)) return fail(c, p, "digit expected after decimal point");
  }
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!scan_digits(&p)) return fail(c, p, "digit expected in exponent");
  }
  *pp = p;
  return 0;
}

static int scan_value(jctx *c, const char **pp, int depth);

static int scan_container(jctx *c, const char **pp, int depth) {
  char close = **pp == '{' ? '}' : ']';
  int is_obj = close == '}';
  if (depth > JSON_MAX_DEPTH) return fail(c, *pp, "nesting too deep");
  const char *p = skip_ws(*pp + 1);
  if (*p == close) {
    *pp = p + 1;
    return 0;
  }
  for (;;) {
    if (is_obj) {
      if (*p != '"') return fail(c, p, "object key (a string) expected");
      if (scan_string(c, &p)) return -1;
      p = skip_ws(p);
      if (*p != ':') return fail(c, p, "':' expected after object key");
      p++;
    }
    if (scan_value(c, &p, depth + 1)) return -1;
    p = skip_ws(p);
    if (*p == ',') {
      p = skip_ws(p + 1);
      continue;
    }
    if (*p == close) break;
    return fail(c, p, is_obj ? "',' or '}' expected" : "',' or ']' expected");
  }
  *pp = p + 1;
  return 0;
}

/* Skips leading whitespace, then one value; *pp ends right after it. */
static int scan_value(jctx *c, const char **pp, int depth) {
  const char *p = skip_ws(*pp);
  int r;
  switch (*p) {
    case '{':
    case '[': r = scan_container(c, &p, depth); break;
    case '"': r = scan_string(c, &p); break;
    case 't': r = strncmp(p, "true", 4) ? fail(c, p, "bad literal") : (p += 4, 0); break;
    case 'f': r = strncmp(p, "false", 5) ? fail(c, p, "bad literal") : (p += 5, 0); break;
    case 'n': r = strncmp(p, "null", 4) ? fail(c, p, "bad literal") : (p += 4, 0); break;
    case '\0': return fail(c, p, "unexpected end of text, value expected");
    default:
      if (*p == '-' || (*p >= '0' && *p <= '9')) {
        r = scan_number(c, &p);
      } else {
        r = fail(c, p, "value expected");
      }
  }
  *pp = p;
  return r;
}

static rp_status json_error(jctx *c) {
  size_t off = (size_t)(c->err_at - c->base);
  return rp_err(RP_EFORMAT, "invalid JSON at byte %zu: %s", off, c->err_what);
}

rp_status rp_json_validate(const char *json) {
  jctx c = {.base = json};
  const char *p = json;
  if (scan_value(&c, &p, 0)) return json_error(&c);
  p = skip_ws(p);
  if (*p) {
    fail(&c, p, "trailing characters after the JSON value");
    return json_error(&c);
  }
  return RP_OK;
}

rp_status rp_json_validate_n(const char *json, size_t len) {
  if (memchr(json, '\0', len))
    return rp_err(RP_EFORMAT, "invalid JSON at byte %zu: NUL byte",
                  (size_t)((const char *)memchr(json, '\0', len) - json));
  char *tmp = malloc(len + 1);
  if (!tmp) return rp_err(RP_ENOMEM, "out of memory validating %zu bytes of JSON", len);
  memcpy(tmp, json, len);
  tmp[len] = '\0';
  rp_status s = rp_json_validate(tmp);
  free(tmp);
  return s;
}

static void put_utf8(char **o, char *end, unsigned cp) {
  unsigned char b[4];
  int n;
  if (cp < 0x80) {
    b[0] = (unsigned char)cp;
    n = 1;
  } else if (cp < 0x800) {
    b[0] = (unsigned char)(0xC0 | (cp >> 6));
    b[1] = (unsigned char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    b[0] = (unsigned char)(0xE0 | (cp >> 12));
    b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[2] = (unsigned char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    b[0] = (unsigned char)(0xF0 | (cp >> 18));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  for (int i = 0; i < n; i++) {
    if (*o < end) **o = (char)b[i];
    (*o)++;
  }
}

static unsigned hex4(const char *p) {
  return (unsigned)(hexval(p[0]) << 12 | hexval(p[1]) << 8 | hexval(p[2]) << 4 | hexval(p[3]));
}

/* Decodes the (already validated) string starting at the quote `q` into buf.
 * Returns the decoded length (which may exceed cap-1: then buf is truncated). */
static size_t decode_string(const char *q, char *buf, size_t cap) {
  char *o = buf, *end = cap ? buf + cap - 1 : buf;
  const char *p = q + 1;
  while (*p != '"') {
    if (*p != '\\') {
      if (o < end) *o = *p;
      o++;
      p++;
      continue;
    }
    p++;
    char e = *p++;
    unsigned cp;
    switch (e) {
      case 'b': cp = '\b'; break;
      case 'f': cp = '\f'; break;
      case 'n': cp = '\n'; break;
      case 'r': cp = '\r'; break;
      case 't': cp = '\t'; break;
      case 'u':
        cp = hex4(p);
        p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
          unsigned lo = hex4(p + 2);
          if (lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p += 6;
          }
        }
        break;
      default: cp = (unsigned char)e; break;  /* \" \\ \/ */
    }
    put_utf8(&o, end, cp);
  }
  size_t n = (size_t)(o - buf);
  if (cap) *(o < end ? o : end) = '\0';
  return n;
}

rp_status rp_json_iter_begin(rp_json_iter *it, const char *value) {
  const char *p = skip_ws(value);
  if (*p != '{' && *p != '[')
    return rp_err(RP_EINVAL, "JSON value is not an object or array");
  it->close = *p == '{' ? '}' : ']';
  it->p = p + 1;
  it->count = 0;
  return RP_OK;
}

int rp_json_iter_next(rp_json_iter *it, char *key, size_t keycap, const char **val,
                      size_t *vlen) {
  jctx c = {.base = it->p};
  const char *p = skip_ws(it->p);
  if (*p == it->close) {
    it->p = p;
    return 0;
  }
  if (it->count > 0) {
    if (*p != ',') return rp_err(RP_EFORMAT, "invalid JSON: ',' or '%c' expected", it->close);
    p = skip_ws(p + 1);
  }
  if (key && keycap) key[0] = '\0';
  if (it->close == '}') {
    if (*p != '"') return rp_err(RP_EFORMAT, "invalid JSON: object key expected");
    const char *q = p;
    if (scan_string(&c, &p)) return json_error(&c);
    if (key && keycap) {
      size_t n = decode_string(q, key, keycap);
      if (n >= keycap)
        return rp_err(RP_EFORMAT, "JSON key of %zu bytes is longer than the %zu allowed", n,
                      keycap - 1);
    }
    p = skip_ws(p);
    if (*p != ':') return rp_err(RP_EFORMAT, "invalid JSON: ':' expected after a key");
    p++;
  }
  p = skip_ws(p);
  const char *start = p;
  if (scan_value(&c, &p, 0)) return json_error(&c);
  *val = start;
  *vlen = (size_t)(p - start);
  it->p = p;
  it->count++;
  return 1;
}

rp_status rp_json_find(const char *json, const char *path, const char **start, size_t *len) {
  const char *cur = skip_ws(json);
  const char *seg = path;
  char want[256], key[256];
  while (*seg) {
    const char *dot = strchr(seg, '.');
    size_t sl = dot ? (size_t)(dot - seg) : strlen(seg);
    if (sl >= sizeof want) return rp_err(RP_EINVAL, "JSON path segment too long in '%s'", path);
    memcpy(want, seg, sl);
    want[sl] = '\0';
    rp_json_iter it;
    if (rp_json_iter_begin(&it, cur) != RP_OK)
      return rp_err(RP_EINVAL, "JSON path '%s': '%s' is not inside an object or array", path,
                    want);
    long index = -1;
    if (it.close == ']') {
      char *e;
      index = strtol(want, &e, 10);
      if (*e || index < 0) return rp_err(RP_EINVAL, "JSON path '%s': '%s' is not an array index", path, want);
    }
    const char *v;
    size_t vl;
    int r, found = 0;
    while ((r = rp_json_iter_next(&it, key, sizeof key, &v, &vl)) == 1) {
      if ((index >= 0 && it.count - 1 == index) || (index < 0 && strcmp(key, want) == 0)) {
        found = 1;
        break;
      }
    }
    if (r < 0) return (rp_status)r;
    if (!found) return rp_err(RP_EINVAL, "JSON has no key '%s'", path);
    cur = v;
    *len = vl;
    seg = dot ? dot + 1 : seg + sl;
  }
  if (!*path) {
    jctx c = {.base = json};
    const char *p = cur;
    if (scan_value(&c, &p, 0)) return json_error(&c);
    *len = (size_t)(p - cur);
  }
  *start = cur;
  return RP_OK;
}

static int is_number_start(char ch) { return ch == '-' || (ch >= '0' && ch <= '9'); }

rp_status rp_json_get_number(const char *json, const char *path, double *v) {
  const char *s;
  size_t n;
  RP_TRY(rp_json_find(json, path, &s, &n));
  if (!is_number_start(*s))
    return rp_err(RP_EINVAL, "JSON key '%s' is %.*s, not a number", path, (int)RP_MIN(n, 40), s);
  *v = strtod(s, NULL);
  return RP_OK;
}

/* Integer text (no fraction/exponent) or an integral double up to 2^53. */
static rp_status get_integer(const char *json, const char *path, int is_signed, int64_t *sv,
                             uint64_t *uv) {
  const char *s;
  size_t n;
  RP_TRY(rp_json_find(json, path, &s, &n));
  if (!is_number_start(*s))
    return rp_err(RP_EINVAL, "JSON key '%s' is %.*s, not an integer", path, (int)RP_MIN(n, 40), s);
  size_t k = (*s == '-');
  while (k < n && s[k] >= '0' && s[k] <= '9') k++;
  errno = 0;
  if (k == n) {
    if (is_signed) {
      *sv = strtoll(s, NULL, 10);
    } else {
      if (*s == '-') return rp_err(RP_EINVAL, "JSON key '%s' is negative (%.*s)", path, (int)n, s);
      *uv = strtoull(s, NULL, 10);
    }
    if (errno == ERANGE) return rp_err(RP_EINVAL, "JSON key '%s' = %.*s overflows 64 bits", path, (int)n, s);
    return RP_OK;
  }
  double d = strtod(s, NULL);
  if (d != floor(d) || fabs(d) > 9007199254740992.0 || (!is_signed && d < 0))
    return rp_err(RP_EINVAL, "JSON key '%s' = %.*s is not an exact %s integer", path, (int)n, s,
                  is_signed ? "signed" : "unsigned");
  if (is_signed)
    *sv = (int64_t)d;
  else
    *uv = (uint64_t)d;
  return RP_OK;
}

rp_status rp_json_get_int64(const char *json, const char *path, int64_t *v) {
  return get_integer(json, path, 1, v, NULL);
}

rp_status rp_json_get_u64(const char *json, const char *path, uint64_t *v) {
  return get_integer(json, path, 0, NULL, v);
}

rp_status rp_json_get_int_in(const char *json, const char *path, int64_t lo, int64_t hi,
                             int64_t *v) {
  int64_t x = 0;
  RP_TRY(get_integer(json, path, 1, &x, NULL));
  if (x < lo || x > hi)
    return rp_err(RP_EINVAL, "JSON key '%s' = %lld is out of range %lld..%lld", path,
                  (long long)x, (long long)lo, (long long)hi);
  *v = x;
  return RP_OK;
}

rp_status rp_json_get_bool(const char *json, const char *path, int *v) {
  const char *s;
  size_t n;
  RP_TRY(rp_json_find(json, path, &s, &n));
  if (n == 4 && !strncmp(s, "true", 4)) {
    *v = 1;
  } else if (n == 5 && !strncmp(s, "false", 5)) {
    *v = 0;
  } else {
    return rp_err(RP_EINVAL, "JSON key '%s' is %.*s, not true/false", path, (int)RP_MIN(n, 40), s);
  }
  return RP_OK;
}

rp_status rp_json_get_string(const char *json, const char *path, char *buf, size_t cap) {
  const char *s;
  size_t n;
  RP_TRY(rp_json_find(json, path, &s, &n));
  if (*s != '"')
    return rp_err(RP_EINVAL, "JSON key '%s' is %.*s, not a string", path, (int)RP_MIN(n, 40), s);
  size_t need = decode_string(s, buf, cap);
  if (need >= cap)
    return rp_err(RP_EINVAL, "JSON string '%s' has %zu bytes; the buffer holds %zu", path, need,
                  cap ? cap - 1 : 0);
  return RP_OK;
}

size_t rp_json_escape(char *dst, size_t cap, const char *s) {
  size_t n = 0;
#define PUT(ch)                          \
  do {                                   \
    if (n + 1 < cap) dst[n] = (char)(ch); \
    n++;                                 \
  } while (0)
  PUT('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char ch = *p;
    const char *esc = NULL;
    switch (ch) {
      case '"': esc = "\\\""; break;
      case '\\': esc = "\\\\"; break;
      case '\n': esc = "\\n"; break;
      case '\r': esc = "\\r"; break;
      case '\t': esc = "\\t"; break;
      case '\b': esc = "\\b"; break;
      case '\f': esc = "\\f"; break;
      default: break;
    }
    if (esc) {
      for (; *esc; esc++) PUT(*esc);
    } else if (ch < 0x20) {
      char u[8];
      snprintf(u, sizeof u, "\\u%04x", ch);
      for (int i = 0; u[i]; i++) PUT(u[i]);
    } else {
      PUT(ch);
    }
  }
  PUT('"');
#undef PUT
  if (cap) dst[n < cap ? n : cap - 1] = '\0';
  return n;
}

/* Length of a non-finite number printf wrote at p ([-+]nan, [-+]inf, [-+]infinity
 * in any case, not followed by a name character), or 0. */
static size_t nonfinite_len(const char *p) {
  size_t n = (*p == '-' || *p == '+');
  if (!strncasecmp(p + n, "nan", 3))
    n += 3;
  else if (!strncasecmp(p + n, "infinity", 8))
    n += 8;
  else if (!strncasecmp(p + n, "inf", 3))
    n += 3;
  else
    return 0;
  char c = p[n];
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'
             ? 0
             : n;
}

int rp_json_fputs(FILE *f, const char *text) {
  int in_str = 0;
  char prev = ',';  /* last non-space character outside strings: a value may start */
  for (const char *p = text; *p; p++) {
    size_t n;
    if (!in_str && strchr(",:[", prev) && (n = nonfinite_len(p)) > 0) {
      if (fputs("null", f) == EOF) return EOF;
      p += n - 1;
      prev = 'l';
      continue;
    }
    if (fputc(*p, f) == EOF) return EOF;
    if (in_str && *p == '\\' && p[1]) {
      if (fputc(*++p, f) == EOF) return EOF;
      continue;
    }
    if (*p == '"') in_str = !in_str;
    if (!in_str && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') prev = *p;
  }
  return 0;
}
