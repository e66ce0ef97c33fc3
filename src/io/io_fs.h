/* File-system helpers shared by the io formats (internal to src/io).
 *
 * Crash safety: a file is written under a temporary name in its final
 * directory, flushed and fsync'ed, renamed over the final name, and the
 * directory is fsync'ed so that the rename itself is durable. A reader never
 * sees a half-written file under the final name. */
#ifndef RP_IO_FS_H
#define RP_IO_FS_H

#include <stdio.h>
#include <sys/types.h>

#include "ringpipe/rp_base.h"

#define RP_IO_PATH 1024

typedef struct {
  FILE *f;
  int err;                    /* first errno seen while writing */
  char tmp[RP_IO_PATH + 32];
  char path[RP_IO_PATH];
} rp_io_afile;

rp_status rp_io_afile_open(rp_io_afile *a, const char *path);
rp_status rp_io_afile_write(rp_io_afile *a, const void *p, size_t n);
/* flush, fsync, close, rename into place, fsync the directory */
rp_status rp_io_afile_commit(rp_io_afile *a);
void rp_io_afile_abort(rp_io_afile *a);   /* close and remove the temporary */

rp_status rp_io_fsync_dir(const char *dir);
rp_status rp_io_fsync_parent(const char *path);
rp_status rp_io_mkdir_p(const char *dir);
/* Removes dir and everything below it (links are removed, not followed);
 * RP_EIO naming the first path that could not be removed. */
rp_status rp_io_remove_tree(const char *dir);
/* pread exactly n bytes; RP_EFORMAT (truncated) on a short read, RP_EIO on error. */
rp_status rp_io_pread(int fd, void *buf, size_t n, off_t off, const char *path);
/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
rp_status rp_io_read_text(const char *path, char **out, size_t *len);
int rp_io_exists(const char *path);
int rp_io_is_dir(const char *path);

#endif
