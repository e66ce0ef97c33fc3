/* ringpipe base: status codes, the error message slot, the one fatal path, logging.
 *
 * Library functions return RP_OK (0) or a negative rp_status and leave a message
 * in a thread-local slot (rp_err) that names the bad value and the fix. Only
 * src/cli turns a status into an exit code; nothing in src/ calls exit().
 * rp_fatal() is the one way to die: it prints and calls the installed fatal hook
 * (MPI_Abort when MPI runs, abort() otherwise). */
#ifndef RP_BASE_H
#define RP_BASE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  RP_OK = 0,
  RP_EINVAL = -1,   /* bad user input: option, config, shape; CLI exits with 2 */
  RP_EIO = -2,      /* file missing, unreadable, unwritable */
  RP_EFORMAT = -3,  /* file present but corrupt, truncated or of the wrong kind */
  RP_ENOMEM = -4,   /* allocation failed */
  RP_EMPI = -5,     /* an MPI call failed */
  RP_EINTERNAL = -6 /* a broken invariant: a bug in ringpipe */
} rp_status;

/* Set the calling thread's error message (printf-style) and return `code`, so that
 * `return rp_err(RP_EINVAL, "--heads %d does not divide --channels %d", ...)`. */
rp_status rp_err(rp_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *rp_errmsg(void);      /* last message of this thread ("" if none) */
const char *rp_status_name(rp_status s);
void rp_errclear(void);

/* Propagate a failing status unchanged (the message is already set). */
#define RP_TRY(expr)                                                           \
  do {                                                                         \
    rp_status rp_try_s_ = (expr);                                              \
    if (rp_try_s_ != RP_OK) return rp_try_s_;                                  \
  } while (0)

/* The one fatal path. The hook defaults to abort(); rp_mpi_init installs
 * one that calls MPI_Abort so that no rank is left hanging. */
typedef void (*rp_fatal_hook)(int code);
void rp_set_fatal_hook(rp_fatal_hook hook);
_Noreturn void rp_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A violated invariant inside ringpipe (not bad input): fatal, with location. */
#define RP_CHECK(cond)                                                         \
  do {                                                                         \
    if (!(cond)) rp_fatal("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
  } while (0)

/* Logging: rank-prefixed lines to stderr (info) or stdout (rp_print, rank 0 only
 * output is the caller's choice). Level from RINGPIPE_LOG=debug|info|warn. */
typedef enum { RP_LOG_DEBUG = 0, RP_LOG_INFO = 1, RP_LOG_WARN = 2 } rp_log_level;
void rp_log_set_rank(int rank);
void rp_log(rp_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define rp_debug(...) rp_log(RP_LOG_DEBUG, __VA_ARGS__)
#define rp_info(...) rp_log(RP_LOG_INFO, __VA_ARGS__)
#define rp_warn(...) rp_log(RP_LOG_WARN, __VA_ARGS__)

#define RP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RP_MAX(a, b) ((a) > (b) ? (a) : (b))
#define RP_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

#endif
