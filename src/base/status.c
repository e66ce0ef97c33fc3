/* Status messages, the fatal path and logging. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_base.h"

static _Thread_local char err_buf[1024];
static rp_fatal_hook fatal_hook;
static int log_rank = -1;
static int log_level = -1;

rp_status rp_err(rp_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_buf, sizeof err_buf, fmt, ap);
  va_end(ap);
  return code;
}

const char *rp_errmsg(void) { return err_buf; }
void rp_errclear(void) { err_buf[0] = '\0'; }

const char *rp_status_name(rp_status s) {
  switch (s) {
    case RP_OK: return "ok";
    case RP_EINVAL: return "invalid argument";
    case RP_EIO: return "i/o error";
    case RP_EFORMAT: return "bad file format";
    case RP_ENOMEM: return "out of memory";
    case RP_EMPI: return "MPI error";
    case RP_EINTERNAL: return "internal error";
  }
  return "unknown status";
}

void rp_set_fatal_hook(rp_fatal_hook hook) { fatal_hook = hook; }

_Noreturn void rp_fatal(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (log_rank >= 0)
    fprintf(stderr, "ringpipe: fatal [rank %d]: %s\n", log_rank, msg);
  else
    fprintf(stderr, "ringpipe: fatal: %s\n", msg);
  fflush(stderr);
  fflush(stdout);
  if (fatal_hook) fatal_hook(3);
  abort();
}

void rp_log_set_rank(int rank) { log_rank = rank; }

static int current_level(void) {
  if (log_level < 0) {
    const char *e = getenv("RINGPIPE_LOG");
    log_level = RP_LOG_INFO;
    if (e && strcmp(e, "debug") == 0) log_level = RP_LOG_DEBUG;
    if (e && strcmp(e, "warn") == 0) log_level = RP_LOG_WARN;
  }
  return log_level;
}

void rp_log(rp_log_level level, const char *fmt, ...) {
  if ((int)level < current_level()) return;
  static const char *tag[] = {"debug", "info", "warning"};
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (log_rank >= 0)
    fprintf(stderr, "[rank %d] %s: %s\n", log_rank, tag[level], msg);
  else
    fprintf(stderr, "%s: %s\n", tag[level], msg);
}
