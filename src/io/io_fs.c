/* Atomic writes, directory fsync, mkdir -p, exact preads. See io_fs.h. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_fs.h"

rp_status rp_io_afile_open(rp_io_afile *a, const char *path) {
  memset(a, 0, sizeof *a);
  if (strlen(path) >= sizeof a->path)
    return rp_err(RP_EINVAL, "path '%.64s...' is longer than %d characters", path, RP_IO_PATH - 1);
  snprintf(a->path, sizeof a->path, "%s", path);
  snprintf(a->tmp, sizeof a->tmp, "%s.tmp-%ld", path, (long)getpid());
  a->f = fopen(a->tmp, "wb");
  if (!a->f)
    return rp_err(RP_EIO, "cannot create '%s': %s (check that the directory exists and is "
                  "writable)", a->tmp, strerror(errno));
  setvbuf(a->f, NULL, _IOFBF, 1 << 20);
  return RP_OK;
}

rp_status rp_io_afile_write(rp_io_afile *a, const void *p, size_t n) {
  if (a->err) return RP_EIO;
  if (n && fwrite(p, 1, n, a->f) != n) {
    a->err = errno ? errno : EIO;
    return rp_err(RP_EIO, "writing '%s' failed: %s", a->path, strerror(a->err));
  }
  return RP_OK;
}

rp_status rp_io_afile_commit(rp_io_afile *a) {
  int e = a->err;
  if (!e && fflush(a->f) != 0) e = errno;
  if (!e && fsync(fileno(a->f)) != 0) e = errno;
  if (fclose(a->f) != 0 && !e) e = errno;
  a->f = NULL;
  if (!e && rename(a->tmp, a->path) != 0) e = errno;
  if (e) {
    unlink(a->tmp);
    return rp_err(RP_EIO, "writing '%s' failed: %s", a->path, strerror(e));
  }
  return rp_io_fsync_parent(a->path);
}

void rp_io_afile_abort(rp_io_afile *a) {
  if (a->f) fclose(a->f);
  a->f = NULL;
  if (a->tmp[0]) unlink(a->tmp);
}

rp_status rp_io_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return rp_err(RP_EIO, "cannot open directory '%s': %s", dir, strerror(errno));
  /* Some file systems refuse fsync on directories (EINVAL): nothing to do then. */
  int r = fsync(fd);
  int e = errno;
  close(fd);
  if (r != 0 && e != EINVAL && e != EROFS)
    return rp_err(RP_EIO, "fsync of directory '%s' failed: %s", dir, strerror(e));
  return RP_OK;
}

rp_status rp_io_fsync_parent(const char *path) {
  char buf[RP_IO_PATH];
  snprintf(buf, sizeof buf, "%s", path);
  return rp_io_fsync_dir(dirname(buf));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path) == 0 ? 0 : -1;
}

rp_status rp_io_remove_tree(const char *dir) {
  /* depth first, without following links: children before their directory */
  if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    return rp_err(RP_EIO, "cannot remove '%s': %s", dir, strerror(errno));
  return RP_OK;
}

rp_status rp_io_mkdir_p(const char *dir) {
  char buf[RP_IO_PATH];
  if (strlen(dir) >= sizeof buf)
    return rp_err(RP_EINVAL, "directory name longer than %d characters", RP_IO_PATH - 1);
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return rp_err(RP_EIO, "cannot create directory '%s': %s", buf, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  if (!rp_io_is_dir(dir))
    return rp_err(RP_EIO, "'%s' exists and is not a directory; choose another path", dir);
  return RP_OK;
}

rp_status rp_io_pread(int fd, void *buf, size_t n, off_t off, const char *path) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return rp_err(RP_EIO, "reading '%s' at byte %lld failed: %s", path, (long long)off,
                    strerror(errno));
    }
    if (r == 0)
      return rp_err(RP_EFORMAT, "'%s' is truncated: needed %zu more bytes at byte %lld", path,
                    n, (long long)off);
    p += r;
    n -= (size_t)r;
    off += r;
  }
  return RP_OK;
}

rp_status rp_io_read_text(const char *path, char **out, size_t *len) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return rp_err(RP_EIO, "cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || st.st_size < 0 || st.st_size > (1 << 30)) {
    fclose(f);
    return rp_err(RP_EFORMAT, "'%s' is not a regular file of at most 1 GiB", path);
  }
  size_t n = (size_t)st.st_size;
  char *buf = malloc(n + 1);
  if (!buf) {
    fclose(f);
    return rp_err(RP_ENOMEM, "out of memory reading '%s' (%zu bytes)", path, n);
  }
  size_t got = fread(buf, 1, n, f);
  fclose(f);
  if (got != n) {
    free(buf);
    return rp_err(RP_EIO, "reading '%s' failed after %zu of %zu bytes", path, got, n);
  }
  buf[n] = '\0';
  *out = buf;
  if (len) *len = n;
  return RP_OK;
}

int rp_io_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int rp_io_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
