/* Helpers for the io tests: a fresh temporary directory per test, small files. */
#ifndef IO_TEST_UTIL_H
#define IO_TEST_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdtemp under $TMPDIR (or /tmp); the caller frees with io_rmtree. */
static inline char *io_tmpdir(void) {
  const char *base = getenv("TMPDIR");
  char *p = malloc(512);
  snprintf(p, 512, "%s/rp_io_test_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(p)) {
    perror("mkdtemp");
    abort();
  }
  return p;
}

static inline void io_rmtree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      size_t l = strlen(path) + strlen(e->d_name) + 2;
      char *sub = malloc(l);
      snprintf(sub, l, "%s/%s", path, e->d_name);
      io_rmtree(sub);
      free(sub);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

static inline void io_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n) abort();
  fclose(f);
}

static inline char *io_path(const char *dir, const char *name) {
  char *p = malloc(1024);
  snprintf(p, 1024, "%s/%s", dir, name);
  return p;
}

static inline long io_file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* tests/fixtures/NAME under the source tree (RINGPIPE_SOURCE_ROOT, set by meson). */
static inline void io_fixture_dir(char *out, size_t cap, const char *name) {
  const char *root = getenv("RINGPIPE_SOURCE_ROOT");
  snprintf(out, cap, "%s/tests/fixtures/%s", root ? root : ".", name);
}

#endif
