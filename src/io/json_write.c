/* The one JSON writer (rp_json.h): a growing buffer that places the commas,
 * escapes strings, writes non-finite numbers as null (JSON has no NaN) and
 * checks that objects and arrays are closed. Metrics lines, checkpoint
 * metadata and reports are built with it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_json.h"

void rp_jw_init(rp_jw *w) { memset(w, 0, sizeof *w); }

void rp_jw_free(rp_jw *w) {
  free(w->buf);
  memset(w, 0, sizeof *w);
}

static void put(rp_jw *w, const char *s, size_t n) {
  if (w->failed) return;
  if (w->len + n + 1 > w->cap) {
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + n + 1) cap *= 2;
    char *grown = realloc(w->buf, cap);
    if (!grown) {
      w->failed = 1;
      return;
    }
    w->buf = grown;
    w->cap = cap;
  }
  memcpy(w->buf + w->len, s, n);
  w->len += n;
  w->buf[w->len] = '\0';
}

static void putf(rp_jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(rp_jw *w, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) put(w, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* The comma before a value or key, unless it is the first in its container. */
static void sep(rp_jw *w) {
  if (w->after_key) {  /* the value of a key: no comma of its own */
    w->after_key = 0;
    return;
  }
  if (w->depth > 0 && w->count[w->depth - 1]++ > 0) put(w, ",", 1);
}

static void open_(rp_jw *w, char c) {
  sep(w);
  put(w, &c, 1);
  if (w->depth == RP_JW_MAX_DEPTH) {
    w->failed = 1;
    return;
  }
  w->count[w->depth++] = 0;
}

static void close_(rp_jw *w, char c) {
  if (w->depth == 0) {
    w->failed = 1;
    return;
  }
  w->depth--;
  put(w, &c, 1);
}

void rp_jw_obj(rp_jw *w) { open_(w, '{'); }
void rp_jw_obj_end(rp_jw *w) { close_(w, '}'); }
void rp_jw_arr(rp_jw *w) { open_(w, '['); }
void rp_jw_arr_end(rp_jw *w) { close_(w, ']'); }

static void put_string(rp_jw *w, const char *s) {
  size_t need = rp_json_escape(NULL, 0, s);
  char *q = malloc(need + 1);
  if (!q) {
    w->failed = 1;
    return;
  }
  rp_json_escape(q, need + 1, s);
  put(w, q, need);
  free(q);
}

void rp_jw_key(rp_jw *w, const char *key) {
  sep(w);
  put_string(w, key);
  put(w, ":", 1);
  w->after_key = 1;
}

void rp_jw_str(rp_jw *w, const char *s) {
  sep(w);
  put_string(w, s);
}

void rp_jw_num(rp_jw *w, double v, int digits) {
  sep(w);
  if (!isfinite(v))
    put(w, "null", 4);
  else
    putf(w, "%.*g", digits, v);
}

void rp_jw_fixed(rp_jw *w, double v, int decimals) {
  sep(w);
  if (!isfinite(v))
    put(w, "null", 4);
  else
    putf(w, "%.*f", decimals, v);
}

void rp_jw_int(rp_jw *w, long long v) {
  sep(w);
  putf(w, "%lld", v);
}

void rp_jw_uint(rp_jw *w, unsigned long long v) {
  sep(w);
  putf(w, "%llu", v);
}

void rp_jw_bool(rp_jw *w, int v) {
  sep(w);
  put(w, v ? "true" : "false", v ? 4 : 5);
}

void rp_jw_null(rp_jw *w) {
  sep(w);
  put(w, "null", 4);
}

void rp_jw_raw(rp_jw *w, const char *json) {
  sep(w);
  put(w, json, strlen(json));
}

void rp_jw_fields(rp_jw *w, const char *body) {
  if (!body[0]) return;
  sep(w);
  put(w, body, strlen(body));
}

const char *rp_jw_text(rp_jw *w, rp_status *st) {
  if (w->failed || w->depth != 0) {
    *st = rp_err(w->failed ? RP_ENOMEM : RP_EINTERNAL,
                 w->failed ? "out of memory building JSON" : "JSON left %d container(s) open",
                 w->depth);
    return NULL;
  }
  *st = RP_OK;
  return w->buf ? w->buf : "";
}

rp_status rp_jw_fputs_line(rp_jw *w, FILE *f) {
  rp_status st;
  const char *text = rp_jw_text(w, &st);
  if (!text) return st;
  if (fputs(text, f) == EOF || fputc('\n', f) == EOF || fflush(f) != 0)
    return rp_err(RP_EIO, "cannot write a JSON line (disk full?)");
  return RP_OK;
}
