/* TensorBoard event files, written by hand (no TensorFlow, no protobuf library).
 *
 * A file is a sequence of TFRecords: uint64 length, uint32 masked CRC32C of the
 * length, the data, uint32 masked CRC32C of the data (masked: ((c >> 15) |
 * (c << 17)) + 0xa282ead8). Each record is a tensorflow.Event protobuf: the
 * first holds file_version "brain.Event:2", the others wall_time, step and a
 * Summary with one scalar Value (tag, simple_value).
 *
 * The run's scalars are mirrored from OUT/metrics.jsonl, the one record of
 * everything a run prints: each line's numbers become scalars at its "step",
 * nested objects and arrays giving tags like "pipeline/bubble_total" or
 * "memory_mib/params" (a line without a step, the pipeline report, takes the
 * last step before it). OUT/tensorboard then always shows what metrics.jsonl
 * holds (after a resume cut it too). */
#ifndef RP_TB_H
#define RP_TB_H

#include <stddef.h>
#include <stdint.h>

#include "rp_base.h"

/* CRC32C (Castagnoli) of n bytes, and its TFRecord masked form. */
uint32_t rp_crc32c(const void *data, size_t n);
uint32_t rp_tb_masked_crc(const void *data, size_t n);

/* Event protobuf bytes into buf (cap >= 64 + strlen(tag)); returns the length,
 * 0 if it does not fit. */
size_t rp_tb_encode_scalar(unsigned char *buf, size_t cap, double wall_time, int64_t step,
                           const char *tag, float value);

typedef struct rp_tb_mirror rp_tb_mirror;
/* Starts OUT/tensorboard/events.out.tfevents.<time>.<host>.<pid>.ringpipe
 * (removing the earlier ringpipe event files there: this one replays the whole
 * metrics file) and mirrors OUT/metrics.jsonl into it. */
rp_status rp_tb_mirror_open(rp_tb_mirror **out, const char *out_dir);
/* Appends the scalars of the lines added to metrics.jsonl since the last call
 * (complete lines only) and flushes. */
rp_status rp_tb_mirror_sync(rp_tb_mirror *m);
void rp_tb_mirror_close(rp_tb_mirror *m);  /* syncs a last time; NULL is fine */
/* The event file's path. */
const char *rp_tb_mirror_path(const rp_tb_mirror *m);

#endif
