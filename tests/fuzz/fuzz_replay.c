/* Replays a corpus through a fuzz target with the normal compiler (no
 * libFuzzer), so every input a fuzzer ever found stays fixed:
 *
 *   fuzz_replay TARGET DIR
 *
 * runs each file of DIR through TARGET (see fuzz_targets.h). A crash fails the
 * test by itself; besides, files named ok-* must be accepted and bad-* must be
 * refused (with a status, not a crash), so a parser that starts accepting a
 * known-bad input, or refusing a good one, fails too. Other names (inputs the
 * fuzzer found) only have to come back. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_targets.h"

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, len = 0;
  unsigned char *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
    len += got;
    if (len == cap) {
      unsigned char *grown = realloc(buf, cap *= 2);
      if (!grown) free(buf);
      buf = grown;
    }
  }
  fclose(f);
  *n = len;
  return buf;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static rp_fuzz_fn find_target(const char *name) {
  for (int i = 0; i < rp_fuzz_ntargets; i++)
    if (!strcmp(rp_fuzz_targets[i].name, name)) return rp_fuzz_targets[i].fn;
  return NULL;
}

/* Sorted regular-file names of dir (NULL on error). */
static char **list_dir(const char *dir, int *n) {
  DIR *d = opendir(dir);
  if (!d) return NULL;
  char **v = NULL;
  int cap = 0;
  *n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (*n == cap) {
      char **grown = realloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
      if (!grown) break;
      v = grown;
    }
    v[(*n)++] = strdup(e->d_name);
  }
  closedir(d);
  if (v) qsort(v, (size_t)*n, sizeof *v, cmp_str);
  return v;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fuzz_replay TARGET CORPUS_DIR\n");
    return 2;
  }
  rp_fuzz_fn fn = find_target(argv[1]);
  if (!fn) {
    fprintf(stderr, "fuzz_replay: unknown target '%s'\n", argv[1]);
    return 2;
  }
  int n = 0, fails = 0, accepted = 0;
  char **names = list_dir(argv[2], &n);
  if (!names || n == 0) {
    fprintf(stderr, "fuzz_replay: no corpus files in '%s'\n", argv[2]);
    return 2;
  }
  for (int i = 0; i < n; i++) {
    char path[4096];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", argv[2], names[i]);
    unsigned char *data = read_file(path, &len);
    if (!data) {
      fprintf(stderr, "FAIL: cannot read %s\n", path);
      fails++;
      continue;
    }
    int ok = fn(data, len);
    accepted += ok;
    int want = !strncmp(names[i], "ok-", 3) ? 1 : !strncmp(names[i], "bad-", 4) ? 0 : -1;
    if (want >= 0 && ok != want) {
      fprintf(stderr, "FAIL: %s was %s; its name says it must be %s\n", names[i],
              ok ? "accepted" : "refused", want ? "accepted" : "refused");
      fails++;
    }
    free(data);
    free(names[i]);
  }
  free(names);
  printf("%s: %d inputs replayed, %d accepted, %d refused, %d failure(s)\n", argv[1], n, accepted,
         n - accepted, fails);
  return fails ? 1 : 0;
}
