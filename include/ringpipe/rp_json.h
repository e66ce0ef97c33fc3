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

#endif
