/* Checkpoints: a directory with
 *   model.safetensors  fp32 weights with Hugging Face GPT-2 names and shapes
 *                      ("wte.weight" [V, C] without the padded rows, "wpe.weight"
 *                      [T, C], "h.{l}.attn.c_attn.weight" [C, 3C] (Conv1D is
 *                      (in, out): the transpose of ringpipe's (out, in)), ...);
 *   optim.safetensors  AdamW state "m.<name>" / "v.<name>" in ringpipe's own
 *                      layout (padded rows included), round-trips bitwise;
 *   meta.json          {"format":"ringpipe-checkpoint","version":1, <caller's
 *                      fields: step, config, options, loader, rng ...>},
 *                      written LAST: its presence marks the checkpoint complete.
 *
 * Every file is written to a temporary name, fsync'ed and renamed, and the
 * directory is fsync'ed. Every save writes a sibling temporary directory
 * DIR.tmp-PID and renames it into place (over an existing checkpoint with
 * renameat2 RENAME_EXCHANGE where the file system has it), so a crash leaves
 * either the old or the new checkpoint, and a failed first save leaves no DIR.
 *
 * safetensors (https://github.com/huggingface/safetensors): u64 little-endian
 * header length N, N bytes of JSON {"__metadata__":{..}, "name":{"dtype":"F32",
 * "shape":[..],"data_offsets":[begin,end]},..} padded with spaces to a multiple
 * of 8, then the tensor bytes, contiguous, in header order. */
#ifndef RP_CHECKPOINT_H
#define RP_CHECKPOINT_H

#include "rp_base.h"
#include "rp_json.h"
#include "rp_model.h"

#define RP_CKPT_FORMAT "ringpipe-checkpoint"
#define RP_CKPT_VERSION 1

/* One chunk to save; m/v (the chunk's num_params floats each, same layout as
 * params) may be NULL: no optimizer state for that part. A tensor held by
 * several parts (wte tied across first and last stage) is written once. */
typedef struct {
  const rp_chunk *chunk;
  const float *m, *v;
} rp_ckpt_part;

/* meta_json: the caller's fields, either as an object "{...}" or as bare
 * members "\"step\":10,\"config\":{...}"; it must be valid JSON once wrapped.
 * The directory (and parents) are created. */
rp_status rp_ckpt_save(const char *dir, const rp_ckpt_part *parts, int nparts,
                       const char *meta_json);

/* Removes a checkpoint directory: its checkpoint files and temporaries
 * (*.tmp-PID), then the directory itself (a warning when other files keep it). */
void rp_ckpt_remove(const char *dir);

/* Fills every tensor of every chunk (and m/v when non-NULL) by name; a tensor
 * in several parts is loaded into each. Shapes must match the chunk's config
 * (RP_EINVAL naming the tensor, both shapes and the fix). Missing, truncated
 * or corrupt files give RP_EIO/RP_EFORMAT, never a crash. Padded wte rows
 * (V..Vp-1) are zeroed. Names may also carry a "transformer." prefix (as in
 * files saved from GPT2LMHeadModel); extra tensors in the file are ignored. */
typedef struct {
  rp_chunk *chunk;
  float *m, *v;
} rp_ckpt_load_part;
rp_status rp_ckpt_load(const char *dir, const rp_ckpt_load_part *parts, int nparts);
/* The weights alone from DIR/model.safetensors (no meta.json needed; F32, F16
 * or BF16 tensors): what loading a Hugging Face folder shares with the above. */
rp_status rp_ckpt_load_weights(const char *dir, const rp_ckpt_load_part *parts, int nparts);

/* ---- Hugging Face GPT-2 folders (hf_gpt2.c). rp_ckpt_save writes config.json
 * (GPT2Config: n_layer, n_embd, n_head, n_positions, vocab_size, gelu_new,
 * tied embeddings, no dropout) beside model.safetensors, so the checkpoint
 * directory is also a folder GPT2LMHeadModel.from_pretrained reads as it is. */
rp_status rp_hf_config_write(const char *dir, const rp_gpt_config *c);
/* A directory with config.json and no meta.json: a Hugging Face folder. */
int rp_hf_is_folder(const char *dir);
/* Its config (Vp = rp_pad_vocab(V)); RP_EINVAL naming the reason for what
 * ringpipe cannot compute exactly: another model_type, an untied head, another
 * activation, LayerNorm eps or MLP width, a missing model.safetensors. */
rp_status rp_hf_read_config(const char *dir, rp_gpt_config *c);
/* Its weights into a chunk of that config: names with or without
 * "transformer.", lm_head.weight absent or equal to wte (else RP_EINVAL). */
rp_status rp_hf_load(const char *dir, rp_chunk *m);

/* meta.json as a malloc'd NUL-terminated string (free() it). RP_EIO if the
 * directory is missing or the checkpoint is incomplete (no meta.json),
 * RP_EFORMAT if it is not valid JSON or not a ringpipe checkpoint. */
rp_status rp_ckpt_read_meta(const char *dir, char **json_out);

/* The model config ("config": L, C, NH, T, V, Vp) of a meta.json text, checked
 * with rp_gpt_config_validate like the model options of the command line:
 * RP_EFORMAT naming `where` (the checkpoint directory) if a key is missing,
 * not an int, or the config is not a valid model. */
rp_status rp_ckpt_read_config(const char *meta, const char *where, rp_gpt_config *c);
/* A counter of a meta.json text ("step", "opt_steps") in 0..INT32_MAX; RP_EFORMAT
 * naming `where`, the key and the value otherwise (a negative or huge step
 * would wrap or truncate the run's metrics). */
rp_status rp_ckpt_read_counter(const char *meta, const char *where, const char *key, int *out);

/* ---- safetensors building blocks (used by the checkpoint; public for tools
 * and tests). A file's parsed header: */
typedef struct {
  char name[128];
  char dtype[8];
  int ndim;
  int64_t shape[4];
  uint64_t begin, end;   /* byte offsets in the data section */
} rp_st_entry;

typedef struct {
  int fd;
  char path[1024];
  uint64_t header_len;   /* N */
  uint64_t data_len;     /* file size - 8 - N */
  int n;
  rp_st_entry *entries;
  char *metadata_json;   /* the "__metadata__" object text, or NULL */
} rp_st_file;

/* Opens and validates: header length sane, header valid JSON, every entry has
 * a known dtype, a shape whose size matches its byte range, and lies inside the
 * data section (truncated files are RP_EFORMAT). */
rp_status rp_st_open(rp_st_file *f, const char *path);
const rp_st_entry *rp_st_find(const rp_st_file *f, const char *name);
/* Reads `bytes` bytes of entry e starting at byte `at` of the tensor. */
rp_status rp_st_read(const rp_st_file *f, const rp_st_entry *e, uint64_t at, void *dst,
                     size_t bytes);
void rp_st_close(rp_st_file *f);
/* n elements of a float tensor starting at element `first`, converted to
 * float32 (F32 as is, F16 and BF16 widened exactly); RP_EFORMAT naming the
 * tensor for any other dtype. rp_st_is_float: the dtypes it converts. */
rp_status rp_st_read_f32(const rp_st_file *f, const rp_st_entry *e, uint64_t first, float *dst,
                         size_t n);
int rp_st_is_float(const char *dtype);

/* ---- llm.c model files: int32 header[256] (magic 20240326, version 3 = fp32,
 * maxT, V, L, NH, C, Vp), then all parameters in llm.c's order: wte [Vp, C],
 * wpe [maxT, C], then each kind for ALL layers: ln1w [L, C], ln1b, qkvw
 * [L, 3C, C], qkvb [L, 3C], attprojw [L, C, C], attprojb, ln2w, ln2b, fcw
 * [L, 4C, C], fcb [L, 4C], fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C], lnfb. */
#define RP_LLMC_MAGIC 20240326
#define RP_LLMC_VERSION_FP32 3
rp_status rp_llmc_read_config(const char *path, rp_gpt_config *cfg);
/* Loads the chunk's tensors (its layer range, embeddings/head if it has them);
 * the file's config must equal the chunk's (RP_EINVAL naming the difference). */
rp_status rp_llmc_load(const char *path, rp_chunk *chunk);
/* Weights of a chunk from an llm.c model file or a checkpoint directory. */
rp_status rp_load_weights(rp_chunk *m, const char *path);
/* full_model: a chunk with all layers, embeddings and head. */
rp_status rp_llmc_save(const char *path, const rp_chunk *full_model);

#endif
