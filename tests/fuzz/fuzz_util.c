/* memfd and text copies for the fuzz targets. */
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int rp_fuzz_file_open(rp_fuzz_file *f, const uint8_t *data, size_t size) {
  f->fd = memfd_create("rp-fuzz", MFD_CLOEXEC);
  if (f->fd < 0) return -1;
  for (size_t done = 0; done < size;) {
    ssize_t w = write(f->fd, data + done, size - done);
    if (w <= 0) {
      close(f->fd);
      return -1;
    }
    done += (size_t)w;
  }
  snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
  return 0;
}

void rp_fuzz_file_close(rp_fuzz_file *f) { close(f->fd); }

char *rp_fuzz_text(const uint8_t *data, size_t size) {
  char *t = malloc(size + 1);
  if (!t) return NULL;
  memcpy(t, data, size);
  t[size] = '\0';
  return t;
}
