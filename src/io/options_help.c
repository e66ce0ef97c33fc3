/* --help text generated from the options table, so it can never drift from
 * what the parser accepts. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ringpipe/rp_options.h"

#define HELP_MAX_LEFT 30  /* wider flag columns put the help on the next line */

static void left_column(const rp_opt *o, char *buf, size_t cap) {
  switch (o->type) {
    case RP_OPT_INT: snprintf(buf, cap, "  --%s INT", o->name); break;
    case RP_OPT_FLOAT: snprintf(buf, cap, "  --%s FLOAT", o->name); break;
    case RP_OPT_STR: snprintf(buf, cap, "  --%s TEXT", o->name); break;
    case RP_OPT_BOOL: snprintf(buf, cap, "  --[no-]%s", o->name); break;
    case RP_OPT_ENUM: snprintf(buf, cap, "  --%s {%s}", o->name, o->choices ? o->choices : ""); break;
    case RP_OPT_FLOATS: snprintf(buf, cap, "  --%s %s", o->name, o->choices ? o->choices : ""); break;
  }
}

static void details(const rp_opt *o, char *buf, size_t cap) {
  const char *d = o->defval ? o->defval : "";
  buf[0] = '\0';
  if (o->type == RP_OPT_BOOL) {
    int on = !strcmp(d, "1") || !strcasecmp(d, "true") || !strcasecmp(d, "on") ||
             !strcasecmp(d, "yes");
    snprintf(buf, cap, " (default: %s)", on ? "on" : "off");
  } else if (o->min <= o->max && o->type == RP_OPT_INT) {
    snprintf(buf, cap, " (default: %s; range %.0f..%.0f)", d, o->min, o->max);
  } else if (o->min <= o->max && o->type == RP_OPT_FLOAT) {
    snprintf(buf, cap, " (default: %s; range %g..%g)", d, o->min, o->max);
  } else if (*d) {
    snprintf(buf, cap, " (default: %s)", d);
  }
}

static void line(FILE *f, const char *left, int width, const char *help, const char *det) {
  int l = (int)strlen(left);
  if (l + 2 > width)
    fprintf(f, "%s\n%*s%s%s\n", left, width, "", help, det);
  else
    fprintf(f, "%-*s%s%s\n", width, left, help, det);
}

void rp_opts_help(FILE *f, const char *usage_line, const char *description, const rp_opt *t,
                  int n) {
  char left[RP_OPT_STRLEN + 64], det[RP_OPT_STRLEN + 64];
  int width = (int)strlen("  --config FILE") + 2;
  for (int i = 0; i < n; i++) {
    left_column(&t[i], left, sizeof left);
    int l = (int)strlen(left) + 2;
    if (l > width && l <= HELP_MAX_LEFT + 2) width = l;
  }
  if (usage_line && *usage_line) fprintf(f, "usage: %s\n", usage_line);
  if (description && *description) fprintf(f, "\n%s\n", description);
  fprintf(f, "\noptions:\n");
  for (int i = 0; i < n; i++) {
    left_column(&t[i], left, sizeof left);
    details(&t[i], det, sizeof det);
    line(f, left, width, t[i].help ? t[i].help : "", det);
  }
  line(f, "  --config FILE", width,
       "read options from FILE (\"key = value\" lines, same keys); flags override it", "");
  line(f, "  -h, --help", width, "print this help", "");
}
