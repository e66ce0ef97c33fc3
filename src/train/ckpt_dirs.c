/* The trainer's checkpoints inside --out: which directory a save goes to
 * (OUT/ckpt, or OUT/ckpt-NNNNNN with --keep-ckpts), the OUT/ckpt symlink to the
 * newest, pruning, --resume auto, and reclaiming the temporaries of processes
 * that died while saving. World rank 0 alone touches the file system here. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_fs.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_json.h"
#include "train_internal.h"

#define LATEST "ckpt"
#define STEP_PREFIX "ckpt-"

void rp_ckpt_dir_for(const rp_trainer *t, int step, char *buf, size_t cap) {
  if (t->o.keep_ckpts > 0)
    snprintf(buf, cap, "%s/" STEP_PREFIX "%06d", t->o.out, step);
  else
    snprintf(buf, cap, "%s/" LATEST, t->o.out);
}

static int is_symlink(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* The step of a name "ckpt-NNNNNN" (digits only after the dash), else -1. */
static long step_of_name(const char *name) {
  size_t n = strlen(STEP_PREFIX);
  if (strncmp(name, STEP_PREFIX, n) != 0 || !name[n]) return -1;
  for (const char *p = name + n; *p; p++)
    if (*p < '0' || *p > '9') return -1;
  return strtol(name + n, NULL, 10);
}

/* The step in dir/meta.json when dir holds a complete checkpoint, else -1. */
static long complete_step(const char *dir) {
  char *meta = NULL;
  int64_t step = -1;
  if (rp_ckpt_read_meta(dir, &meta) != RP_OK) return -1;
  if (rp_json_get_int64(meta, "step", &step) != RP_OK) step = -1;
  free(meta);
  return (long)step;
}

rp_status rp_ckpt_before_save(const rp_trainer *t) {
  char latest[RP_OPT_STRLEN + 16];
  snprintf(latest, sizeof latest, "%s/" LATEST, t->o.out);
  /* a save into OUT/ckpt must not write through an earlier run's symlink into
   * a step-numbered checkpoint: the link goes, the directories stay */
  if (t->o.keep_ckpts == 0 && is_symlink(latest) && unlink(latest) != 0)
    return rp_err(RP_EIO, "cannot remove the symlink '%s': %s", latest, strerror(errno));
  return RP_OK;
}

/* OUT/ckpt (a real directory from a run without --keep-ckpts) becomes a
 * step-numbered checkpoint, or goes when it is incomplete or its name is taken. */
static rp_status move_latest_aside(const char *out, const char *latest) {
  long step = complete_step(latest);
  char to[RP_OPT_STRLEN + 32];
  snprintf(to, sizeof to, "%s/" STEP_PREFIX "%06ld", out, step);
  if (step >= 0 && !rp_io_exists(to)) {
    if (rename(latest, to) != 0)
      return rp_err(RP_EIO, "cannot rename '%s' to '%s': %s", latest, to, strerror(errno));
    return RP_OK;
  }
  rp_ckpt_remove(latest);
  return rp_io_exists(latest) ? rp_err(RP_EIO, "cannot replace '%s' by a symlink: it holds "
                                       "other files; move it away", latest)
                              : RP_OK;
}

/* OUT/ckpt -> ckpt-NNNNNN, replaced atomically (a new link renamed over it). */
static rp_status point_latest_at(const char *out, const char *dir) {
  char latest[RP_OPT_STRLEN + 16], tmp[RP_OPT_STRLEN + 48];
  snprintf(latest, sizeof latest, "%s/" LATEST, out);
  snprintf(tmp, sizeof tmp, "%s/" LATEST ".link-%ld", out, (long)getpid());
  if (rp_io_is_dir(latest) && !is_symlink(latest)) RP_TRY(move_latest_aside(out, latest));
  const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
  unlink(tmp);
  if (symlink(base, tmp) != 0 || rename(tmp, latest) != 0) {
    int e = errno;
    unlink(tmp);
    return rp_err(RP_EIO, "cannot point '%s' at '%s': %s", latest, base, strerror(e));
  }
  return rp_io_fsync_parent(latest);
}

/* Step-numbered checkpoints after `step` (an abandoned continuation: OUT
 * holds one line of history) and all but the newest `keep` go. */
static void prune(const char *out, long step, int keep) {
  DIR *d = opendir(out);
  if (!d) return;
  long *steps = NULL;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long s = step_of_name(e->d_name);
    if (s < 0) continue;
    if (n == cap) {
      long *ns = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *ns);
      if (!ns) break;
      steps = ns;
    }
    steps[n++] = s;
  }
  closedir(d);
  for (int i = 0; i < n; i++) {
    int newer = 0; /* kept checkpoints newer than steps[i], up to `step` */
    for (int j = 0; j < n; j++) newer += steps[j] > steps[i] && steps[j] <= step;
    if (steps[i] > step || (keep > 0 && newer >= keep)) {
      char path[RP_OPT_STRLEN + 32];
      snprintf(path, sizeof path, "%s/" STEP_PREFIX "%06ld", out, steps[i]);
      rp_ckpt_remove(path);
    }
  }
  free(steps);
}

rp_status rp_ckpt_after_save(const rp_trainer *t, int step, const char *dir) {
  if (t->o.keep_ckpts > 0) RP_TRY(point_latest_at(t->o.out, dir));
  prune(t->o.out, step, t->o.keep_ckpts);
  return RP_OK;
}

rp_status rp_resume_auto(const char *out, char *resolved, size_t cap, char *note, size_t ncap) {
  resolved[0] = '\0';
  long best = -1;
  DIR *d = opendir(out);
  snprintf(note, ncap, "--resume auto: no complete checkpoint in %s; starting fresh", out);
  if (!d) return RP_OK;
  struct dirent *e;
  while ((e = readdir(d))) {
    int latest = strcmp(e->d_name, LATEST) == 0;
    if (!latest && step_of_name(e->d_name) < 0) continue;
    char path[RP_OPT_STRLEN + 300];
    snprintf(path, sizeof path, "%s/%s", out, e->d_name);
    long s = complete_step(path);
    /* the newest step wins; on a tie the stable name OUT/ckpt */
    if (s > best || (s == best && s >= 0 && latest)) {
      best = s;
      snprintf(resolved, cap, "%s", path);
    }
  }
  closedir(d);
  if (best >= 0)
    snprintf(note, ncap, "--resume auto: resuming from %s (step %ld, the newest complete "
             "checkpoint in %s)", resolved, best, out);
  return RP_OK;
}

/* ---- temporaries of processes that died while writing */

/* NAME.tmp-PID, NAME.old-PID or NAME.link-PID whose process is gone: returns
 * the kind ('t', 'o', 'l'), else 0. A live PID (or one we may not signal) is
 * left alone: its owner may still be writing. */
static int stale_kind(const char *name) {
  static const char *const tags[] = {".tmp-", ".old-", ".link-"};
  for (int k = 0; k < 3; k++) {
    const char *p = strstr(name, tags[k]);
    if (!p) continue;
    char *end;
    long pid = strtol(p + strlen(tags[k]), &end, 10);
    if (*end || pid <= 0 || end == p + strlen(tags[k])) continue;
    if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) return 0;
    return "tol"[k];
  }
  return 0;
}

static int reclaim_in(const char *dir, char *list, size_t lcap) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int kind = stale_kind(e->d_name);
    if (!kind) continue;
    char path[RP_OPT_STRLEN + 300], base[RP_OPT_STRLEN + 300];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (kind == 'o') { /* the only complete copy when the swap died halfway */
      snprintf(base, sizeof base, "%s", path);
      *strstr(base + strlen(dir), ".old-") = '\0';
      if (!rp_io_exists(base) && rename(path, base) == 0) continue;
    }
    if (rp_io_is_dir(path) && !is_symlink(path))
      rp_ckpt_remove(path);
    else
      unlink(path);
    if (rp_io_exists(path) || is_symlink(path)) continue;
    size_t used = strlen(list);
    snprintf(list + used, lcap - used, "%s%s", used ? ", " : "", e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

int rp_reclaim_stale(const char *out, char *list, size_t lcap) {
  list[0] = '\0';
  int n = reclaim_in(out, list, lcap);
  char sub[RP_OPT_STRLEN + 300];
  snprintf(sub, sizeof sub, "%s/data", out);
  n += reclaim_in(sub, list, lcap);
  /* inside the checkpoints: files of an interrupted write into the directory */
  DIR *d = opendir(out);
  if (!d) return n;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, LATEST) != 0 && step_of_name(e->d_name) < 0) continue;
    snprintf(sub, sizeof sub, "%s/%s", out, e->d_name);
    if (!is_symlink(sub)) n += reclaim_in(sub, list, lcap);
  }
  closedir(d);
  return n;
}
