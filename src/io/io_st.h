/* safetensors writer (internal to src/io; the reader is public in rp_checkpoint.h). */
#ifndef RP_IO_ST_H
#define RP_IO_ST_H

#include <stddef.h>
#include <stdint.h>

#include "ringpipe/rp_base.h"

/* One F32 tensor to write. The file shape is shape[0..ndim). With transpose,
 * `data` is a row-major [shape[1], shape[0]] matrix (ringpipe's (out, in))
 * written as its transpose [shape[0], shape[1]] (HF Conv1D's (in, out)). */
typedef struct {
  char name[128];
  int ndim;
  int64_t shape[2];
  const float *data;
  int transpose;
} rp_st_wtensor;

/* Writes path atomically; metadata_json is the "__metadata__" object (string
 * values only, per the spec) or NULL. */
rp_status rp_st_write(const char *path, const rp_st_wtensor *t, int n, const char *metadata_json);

#endif
