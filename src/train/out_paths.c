/* Output paths are checked right after option parsing, before anything is
 * created, so that a run whose --out or --trace cannot be written fails at
 * once (status 2) instead of after training, and leaves nothing behind. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_internal.h"

/* The nearest existing ancestor of `path` (path itself when it exists) into
 * buf; RP_EINVAL when something on the way is not a directory. */
static rp_status existing_ancestor(const char *path, char *buf, size_t cap, const char *flag,
                                   const char *shown) {
  snprintf(buf, cap, "%s", path);
  for (size_t l = strlen(buf); l > 1 && buf[l - 1] == '/'; l--) buf[l - 1] = '\0';
  struct stat st;
  while (stat(buf, &st) != 0) {
    if (errno == ENOTDIR)
      return rp_err(RP_EINVAL, "%s '%s' lies under a file that is not a directory; pass a "
                    "path in a writable directory", flag, shown);
    char *slash = strrchr(buf, '/');
    if (!slash) {
      snprintf(buf, cap, ".");
      break;
    }
    if (slash == buf) slash[1] = '\0'; else *slash = '\0';
  }
  if (stat(buf, &st) == 0 && !S_ISDIR(st.st_mode) && strcmp(buf, path) != 0)
    return rp_err(RP_EINVAL, "%s '%s' lies under '%s', which is a file, not a directory; "
                  "pass a path in a writable directory", flag, shown, buf);
  return RP_OK;
}

/* dir can be created (or exists) and written; messages name `shown`. */
static rp_status check_dir(const char *dir, const char *flag, const char *shown) {
  char anc[RP_OPT_STRLEN];
  RP_TRY(existing_ancestor(dir, anc, sizeof anc, flag, shown));
  struct stat st;
  if (stat(anc, &st) != 0 || !S_ISDIR(st.st_mode))
    return rp_err(RP_EINVAL, "%s '%s': '%s' exists and is not a directory; pass a path in a "
                  "writable directory", flag, shown, anc);
  if (access(anc, W_OK | X_OK) != 0)
    return rp_err(RP_EINVAL, "%s '%s': '%s' is not writable (%s); pass a path in a writable "
                  "directory", flag, shown, anc, strerror(errno));
  return RP_OK;
}

rp_status rp_check_out_dir(const char *dir, const char *flag) { return check_dir(dir, flag, dir); }

rp_status rp_check_out_file(const char *path, const char *flag) {
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return rp_err(RP_EINVAL, "%s '%s' is a directory; pass a file name", flag, path);
    if (access(path, W_OK) != 0)
      return rp_err(RP_EINVAL, "%s '%s' is not writable (%s); pass a writable file", flag,
                    path, strerror(errno));
    return RP_OK;
  }
  char parent[RP_OPT_STRLEN];
  snprintf(parent, sizeof parent, "%s", path);
  char *slash = strrchr(parent, '/');
  if (!slash) return check_dir(".", flag, path);
  if (slash == parent) slash[1] = '\0'; else *slash = '\0';
  return check_dir(parent, flag, path);
}
