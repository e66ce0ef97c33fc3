/* OUT/metrics.jsonl for a run: a fresh file at step 0; on resume from step k
 * the earlier run's lines up to step k are kept and the rest (steps a crashed
 * or stopped run wrote after its checkpoint) dropped, so the file holds every
 * step once. The rewrite goes through a temporary renamed over the file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_fs.h"
#include "ringpipe/rp_json.h"
#include "train_internal.h"

/* Copies the lines of `from` before the first one whose "step" is past `step`
 * into a new file at `path` (atomically). */
static rp_status rewrite_up_to(const char *path, const char *text, int step) {
  rp_io_afile f;
  RP_TRY(rp_io_afile_open(&f, path));
  rp_status s = RP_OK;
  for (const char *line = text; *line && s == RP_OK;) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
    char *one = malloc(len + 1);
    if (!one) {
      s = rp_err(RP_ENOMEM, "out of memory");
      break;
    }
    memcpy(one, line, len);
    one[len] = '\0';
    int64_t at = 0;
    int past = rp_json_get_int64(one, "step", &at) == RP_OK && at > step;
    free(one);
    if (past) break;
    s = rp_io_afile_write(&f, line, len);
    line += len;
  }
  if (s != RP_OK) {
    rp_io_afile_abort(&f);
    return s;
  }
  return rp_io_afile_commit(&f);
}

rp_status rp_metrics_open(const char *out, int step, FILE **f) {
  char path[RP_OPT_STRLEN + 32];
  snprintf(path, sizeof path, "%s/metrics.jsonl", out);
  *f = NULL;
  if (step > 0 && rp_io_exists(path)) {
    char *text = NULL;
    RP_TRY(rp_io_read_text(path, &text, NULL));
    rp_status s = rewrite_up_to(path, text, step);
    free(text);
    RP_TRY(s);
  }
  *f = fopen(path, step > 0 ? "a" : "w");
  if (!*f) return rp_err(RP_EIO, "cannot write %s: %s; pass a writable --out", path, strerror(errno));
  return RP_OK;
}
