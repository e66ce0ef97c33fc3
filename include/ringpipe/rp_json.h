/* A tiny JSON reader (RFC 8259) for checkpoint metadata and safetensors headers.
 *
 * No DOM: functions scan the NUL-terminated text each time, which is plenty for
 * documents of a few hundred keys. Key paths are dot separated ("step",
 * "config.L", "loader.position"); array elements are addressed by number
 * ("shape.0"). Keys that themselves contain dots (safetensors tensor names) are
 * reached with the member iterator instead. */
#ifndef RP_JSON_H
#define RP_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "rp_base.h"

/* RP_OK if `json` is exactly one valid JSON value (surrounding whitespace
 * allowed); otherwise RP_EFORMAT naming the byte offset and what was expected. */
rp_status rp_json_validate(const char *json);
/* Same for a text of known length (need not be NUL terminated). */
rp_status rp_json_validate_n(const char *json, size_t len);

/* Locates the value at `path` ("" is the whole document): *start points at its
 * first character and *len spans it. RP_EINVAL if the path is absent (message
 * names it), RP_EFORMAT if the text is malformed on the way. */
rp_status rp_json_find(const char *json, const char *path, const char **start, size_t *len);

/* Typed getters; RP_EINVAL if absent or of another type (the message names the
 * path and what was found). */
rp_status rp_json_get_number(const char *json, const char *path, double *v);
rp_status rp_json_get_int64(const char *json, const char *path, int64_t *v);   /* exact */
rp_status rp_json_get_u64(const char *json, const char *path, uint64_t *v);    /* exact */
/* An exact integer in [lo, hi]; RP_EINVAL naming the path, the value and the
 * range otherwise (a value outside int64 too: no wrap-around, no truncation). */
rp_status rp_json_get_int_in(const char *json, const char *path, int64_t lo, int64_t hi,
                             int64_t *v);
rp_status rp_json_get_bool(const char *json, const char *path, int *v);
/* Decodes escapes (\n, \uXXXX incl. surrogate pairs -> UTF-8). RP_EINVAL if the
 * string (plus NUL) does not fit in cap. */
rp_status rp_json_get_string(const char *json, const char *path, char *buf, size_t cap);

/* Iterates the members of an object or the elements of an array.
 *   rp_json_iter it; rp_json_iter_begin(&it, value_start);
 *   while ((r = rp_json_iter_next(&it, key, sizeof key, &v, &vlen)) == 1) ...
 * next returns 1 with a member (key decoded for objects, "" for arrays), 0 at
 * the end, or a negative rp_status if the text is malformed or a key is longer
 * than keycap. */
typedef struct {
  const char *p;
  char close;      /* '}' or ']' */
  int count;
} rp_json_iter;
rp_status rp_json_iter_begin(rp_json_iter *it, const char *value);
int rp_json_iter_next(rp_json_iter *it, char *key, size_t keycap, const char **val, size_t *vlen);

/* Writes s as a quoted JSON string into dst (always NUL terminated when
 * cap > 0). Returns the length the full output needs, excluding the NUL. */
size_t rp_json_escape(char *dst, size_t cap, const char *s);

/* Writes JSON text built with printf to f, with every non-finite number printf
 * may have put in it (nan, -nan, inf, -inf, any case, outside strings) written
 * as null: JSON has no such numbers and a writer must never emit them (a NaN
 * loss would make the whole metrics line unreadable). Returns 0, or EOF on a
 * write error. */
int rp_json_fputs(FILE *f, const char *text);

/* ---- the one JSON writer (json_write.c): values are appended in order, the
 * writer places the commas, escapes strings, writes non-finite numbers as
 * null and refuses unbalanced containers. Usage:
 *   rp_jw w; rp_jw_init(&w);
 *   rp_jw_obj(&w); rp_jw_key(&w, "step"); rp_jw_int(&w, 3);
 *   rp_jw_key(&w, "loss"); rp_jw_num(&w, loss, 17); rp_jw_obj_end(&w);
 *   rp_jw_fputs_line(&w, f); rp_jw_free(&w); */
#define RP_JW_MAX_DEPTH 16
typedef struct {
  char *buf;
  size_t len, cap;
  int depth, failed, after_key;
  int count[RP_JW_MAX_DEPTH]; /* elements so far in each open container */
} rp_jw;
void rp_jw_init(rp_jw *w);
void rp_jw_free(rp_jw *w);
void rp_jw_obj(rp_jw *w);
void rp_jw_obj_end(rp_jw *w);
void rp_jw_arr(rp_jw *w);
void rp_jw_arr_end(rp_jw *w);
void rp_jw_key(rp_jw *w, const char *key);         /* inside an object, before a value */
void rp_jw_str(rp_jw *w, const char *s);
void rp_jw_num(rp_jw *w, double v, int digits);    /* %.*g; null when not finite */
void rp_jw_fixed(rp_jw *w, double v, int decimals); /* %.*f; null when not finite */
void rp_jw_int(rp_jw *w, long long v);
void rp_jw_uint(rp_jw *w, unsigned long long v);
void rp_jw_bool(rp_jw *w, int v);
void rp_jw_null(rp_jw *w);
void rp_jw_raw(rp_jw *w, const char *json);        /* a value that is JSON already */
void rp_jw_fields(rp_jw *w, const char *body);     /* "\"a\":1,\"b\":2" into an object */
/* The text (owned by w), or NULL with *st set when it is unbalanced or out of
 * memory. */
const char *rp_jw_text(rp_jw *w, rp_status *st);
/* The text and a newline to f, flushed: one JSON-lines record. */
rp_status rp_jw_fputs_line(rp_jw *w, FILE *f);

#endif
