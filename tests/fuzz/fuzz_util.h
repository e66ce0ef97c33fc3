/* Helpers shared by the fuzz targets (tests/fuzz only). */
#ifndef RP_FUZZ_UTIL_H
#define RP_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The bytes as an anonymous in-memory file that the path-taking parsers open
 * like any other: path is "/proc/self/fd/N". */
typedef struct {
  int fd;
  char path[32];
} rp_fuzz_file;
/* 0, or -1 if no memfd could be made (the target then skips the input). */
int rp_fuzz_file_open(rp_fuzz_file *f, const uint8_t *data, size_t size);
void rp_fuzz_file_close(rp_fuzz_file *f);
/* A NUL-terminated malloc'd copy (NULL when out of memory). */
char *rp_fuzz_text(const uint8_t *data, size_t size);

#endif
