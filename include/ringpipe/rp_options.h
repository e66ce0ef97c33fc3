/* Options: one table is the single source of truth for command-line flags,
 * config files (same keys), --help text and the options recorded in checkpoints.
 *
 * A table row binds a name to a field of the caller's struct by offsetof:
 *
 *   typedef struct { int layers; float lr; my_attn attn; int fused; } my_opts;
 *   static const rp_opt tab[] = {
 *     {"layers", RP_OPT_INT,    offsetof(my_opts, layers), "6",     1, 96, NULL, "transformer layers"},
 *     {"lr",     RP_OPT_FLOAT,  offsetof(my_opts, lr),     "3e-4",  0, 1,  NULL, "peak learning rate"},
 *     {"attn",   RP_OPT_ENUM, RP_OPT_ENUM_FIELD(my_opts, attn), "flash", 0, 0,  "naive|flash", "attention"},
 *       (attn is an enum { NAIVE, FLASH }: a choice parses straight to its position)
 *     {"fused",  RP_OPT_BOOL,   offsetof(my_opts, fused),  "1",     0, 0,  NULL, "fuse kernels"},
 *   };
 *
 * Flags: --name value, --name=value; BOOL also --name / --no-name (and
 * --name=true|false|1|0|yes|no|on|off). "--" ends the options.
 * Config files: one "key = value" or "key value" per line, '#' starts a comment,
 * values may be double-quoted; '-' and '_' in keys are interchangeable in both
 * flags and files. Precedence: defaults < config files (in the order given) <
 * command-line flags, whatever the order on the command line. */
#ifndef RP_OPTIONS_H
#define RP_OPTIONS_H

#include <stddef.h>
#include <stdio.h>
#include "rp_base.h"

typedef enum {
  RP_OPT_INT,
  RP_OPT_FLOAT,
  RP_OPT_STR,
  RP_OPT_BOOL,
  RP_OPT_ENUM,  /* one word of "a|b|c", stored as its position: an enum value */
  RP_OPT_FLOATS   /* a fixed number of comma-separated numbers, "tF,tB,tW" */
} rp_opt_type;

#define RP_OPT_STRLEN 512
#define RP_OPT_MAXFLOATS 8

/* The offset of an ENUM row's field: offsetof(T, f), and a compile error when
 * the field is not int-sized (a char array left over from string choices). */
#define RP_OPT_ENUM_FIELD(T, f) \
  (offsetof(T, f) + 0 * sizeof(char[sizeof(((T *)0)->f) == sizeof(int) ? 1 : -1]))

/* The field of an RP_OPT_FLOATS row: n == 0 when the option is not given
 * (its default is ""), else exactly as many values as the row names. */
typedef struct {
  int n;
  double v[RP_OPT_MAXFLOATS];
} rp_opt_floats;

typedef struct {
  const char *name;     /* "layers": flag --layers and config key "layers" */
  rp_opt_type type;
  size_t offset;        /* offsetof(struct, field): int for INT/BOOL, float for FLOAT,
                           char[RP_OPT_STRLEN] for STR, an enum (int-sized) for ENUM,
                           rp_opt_floats for FLOATS */
  const char *defval;   /* default as text ("6", "3e-4", "flash", "", "0") */
  double min, max;      /* inclusive range for INT/FLOAT (ignored if min > max) */
  const char *choices;  /* "naive|flash" for ENUM, in the order of the field's enum;
                           element names "tF,tB,tW" for FLOATS (their count is fixed) */
  const char *help;
} rp_opt;

/* Sets every field to its default. RP_EINVAL if a default does not parse
 * (a bug in the table; the message names the row). */
rp_status rp_opts_defaults(const rp_opt *t, int n, void *out);

/* Fills `out` with the defaults, then --config FILE(s), then the flags.
 * --help / -h sets *help_requested = 1 (when help_requested is non-NULL) and
 * returns RP_OK at once with the defaults filled, so that help works even next
 * to a bad option. Unknown option: RP_EINVAL naming it and the closest known
 * name. Bad value: RP_EINVAL naming option, value and the allowed range/choices.
 * Positional arguments are an error unless npos != NULL: then up to *npos of
 * them are returned in pos[] (pointers into argv) and *npos is set to the count
 * (more than the capacity is RP_EINVAL). argv[0] is the first argument, not the
 * program name: pass argc-1, argv+1 (or the arguments after a subcommand). */
rp_status rp_opts_parse(const rp_opt *t, int n, void *out, int argc, char **argv,
                        int *help_requested, char **pos, int *npos);

/* Like rp_opts_parse but without filling the defaults first: applies config
 * files and flags on top of what `out` already holds (e.g. options read back
 * from a checkpoint with rp_opts_from_json). */
rp_status rp_opts_parse_onto(const rp_opt *t, int n, void *out, int argc, char **argv,
                             int *help_requested, char **pos, int *npos);

/* Sets one option from its text form, validated as a flag would be. */
rp_status rp_opts_set(const rp_opt *t, int n, void *out, const char *name, const char *value);

/* Applies a config file (see the format above) on top of `out`. */
rp_status rp_opts_load_config(const rp_opt *t, int n, void *out, const char *path);

/* The word of an ENUM row for enum value `value` ("" when out of range), in buf. */
const char *rp_opt_choice_word(const rp_opt *o, int value, char *buf, size_t cap);
/* The same for the ENUM row `name` of a table ("" when there is no such row). */
const char *rp_opts_enum_word(const rp_opt *t, int n, const char *name, int value, char *buf,
                              size_t cap);

/* Row for `name` ('-'/'_' insensitive), or NULL. */
const rp_opt *rp_opts_find(const rp_opt *t, int n, const char *name);

/* Aligned help: usage line, description, then one line per option with its
 * type, default, range or choices; --config and --help are listed too. */
void rp_opts_help(FILE *f, const char *usage_line, const char *description,
                  const rp_opt *t, int n);

/* {"layers":6,"lr":0.0003,"attn":"flash","fused":true}; floats printed so that
 * they read back bitwise. RP_EINVAL if cap is too small (names the size needed). */
rp_status rp_opts_to_json(const rp_opt *t, int n, const void *opts, char *buf, size_t cap);

/* Sets every option present as a key of the JSON object `json` (others keep
 * their value; unknown keys are ignored). Values are validated like flags. */
rp_status rp_opts_from_json(const rp_opt *t, int n, void *out, const char *json);

#endif
