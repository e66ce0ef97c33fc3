/* Fuzz targets: one per parser of untrusted input. Each feeds `data` through the
 * same entry points the program uses (file parsers get it as a memfd path, so
 * fstat, pread and the size checks run too) and returns 1 if the parser
 * accepted the input, 0 if it refused it with a status. A crash, hang, leak or
 * sanitizer report is a bug; a refusal is not.
 *
 * They are linked two ways: into a libFuzzer binary per target (meson
 * -Dfuzz=true with clang; fuzz_main.c) and into fuzz_replay (fuzz_replay.c), a
 * plain C driver the default suite runs over the committed corpus. */
#ifndef RP_FUZZ_TARGETS_H
#define RP_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

typedef int (*rp_fuzz_fn)(const uint8_t *data, size_t size);

int rp_fuzz_shard(const uint8_t *data, size_t size);        /* token shard (llm.c .bin) */
int rp_fuzz_safetensors(const uint8_t *data, size_t size);  /* safetensors header + data */
int rp_fuzz_json(const uint8_t *data, size_t size);         /* JSON / checkpoint meta.json */
int rp_fuzz_config(const uint8_t *data, size_t size);       /* --config file (and flags) */
int rp_fuzz_schedule(const uint8_t *data, size_t size);     /* schedule CSV */
int rp_fuzz_bpe(const uint8_t *data, size_t size);          /* text -> GPT-2 BPE and back */
int rp_fuzz_hf_config(const uint8_t *data, size_t size);    /* Hugging Face config.json */
int rp_fuzz_doc_index(const uint8_t *data, size_t size);    /* X.docs beside a 64-token shard */

typedef struct {
  const char *name;
  rp_fuzz_fn fn;
} rp_fuzz_target;
extern const rp_fuzz_target rp_fuzz_targets[];
extern const int rp_fuzz_ntargets;

#endif
