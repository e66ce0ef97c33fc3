/* Token data: llm.c-compatible shards, a streaming batch loader, tokenizers and
 * `prepare` (text -> byte-token shards).
 *
 * Shard format (llm.c, little-endian): int32 header[256] with header[0] =
 * 20240520 (magic), header[1] = 1 (version), header[2] = token count; then that
 * many uint16 tokens. Nothing else follows. Also read: llm.c's uint32 version
 * (magic 20240801, version 7, uint32 tokens), narrowed to uint16 on read (an id
 * above 65535 is RP_EFORMAT naming it). */
#ifndef RP_DATA_H
#define RP_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "rp_base.h"

#define RP_SHARD_MAGIC 20240520
#define RP_SHARD_VERSION 1
#define RP_SHARD_HEADER_INTS 256
#define RP_SHARD_HEADER_BYTES (RP_SHARD_HEADER_INTS * 4)
#define RP_SHARD_MAX_TOKENS 2147483647u  /* the header count is an int32 */

/* ---- shards */

/* Writes a complete shard: PATH.tmp-PID, fsync, rename, fsync the directory. */
rp_status rp_shard_write(const char *path, const uint16_t *tokens, size_t n);

/* Streaming writer for shards larger than memory: the token count is fixed up
 * front (it goes into the header); close checks that exactly n were appended
 * and then fsyncs and renames into place. abort removes the temporary file. */
typedef struct rp_shard_writer rp_shard_writer;
rp_status rp_shard_writer_open(rp_shard_writer **w, const char *path, size_t n);
rp_status rp_shard_writer_append(rp_shard_writer *w, const uint16_t *tokens, size_t n);
rp_status rp_shard_writer_close(rp_shard_writer *w);
void rp_shard_writer_abort(rp_shard_writer *w);

/* An open, validated shard read with pread (thread-safe reads). */
typedef struct {
  int fd;
  size_t num_tokens;
  int token_bytes;   /* 2 or 4 (llm.c's uint32 shards) */
  char path[1024];
} rp_shard;

/* Opens and validates magic, version and that the file size equals the header
 * plus count tokens (RP_EFORMAT naming the file and what is wrong). */
rp_status rp_shard_open(rp_shard *s, const char *path);
/* Reads tokens [first, first + n) into dst. */
rp_status rp_shard_read(const rp_shard *s, size_t first, size_t n, uint16_t *dst);
/* RP_EFORMAT naming the file, position and id of the first token >= V: of the
 * whole shard, or of ids[0..n) read from position `first` (V <= 0: no check). */
rp_status rp_shard_check_vocab(const rp_shard *s, int V);
rp_status rp_shard_check_ids(const rp_shard *s, const uint16_t *ids, size_t n, size_t first,
                             int V);
void rp_shard_close(rp_shard *s);
/* Whole shard into a malloc'd array (*tokens; free() it). */
rp_status rp_shard_read_all(const char *path, uint16_t **tokens, size_t *n);

/* ---- document index: X.docs beside shard X.bin (the shard is unchanged, so
 * llm.c reads it as before): int32 header[8] = {magic, version 1, count n, 0..},
 * then n uint32 document lengths, each >= 1, summing to the shard's tokens. */
#define RP_DOC_INDEX_MAGIC 20261212
#define RP_DOC_INDEX_HEADER_INTS 8
void rp_doc_index_path(char *out, size_t cap, const char *shard_path);
rp_status rp_doc_index_write(const char *shard_path, const uint32_t *lens, size_t n);
/* RP_EIO when there is none; RP_EFORMAT naming the file when it does not match
 * the shard (wrong magic, size, a zero length, a different token sum). *lens
 * is malloc'd. */
rp_status rp_doc_index_read(const rp_shard *s, uint32_t **lens, size_t *n);

/* ---- loader
 *
 * Windows: each shard of n tokens holds floor((n - 1) / (B*T)) windows of B*T
 * tokens, window j being tokens [j*B*T, j*B*T + B*T] (B*T + 1 tokens: inputs
 * and next-token targets); the tail of a shard is skipped, as in llm.c. The
 * single-rank stream is all windows of all shards in file order (file_order)
 * or in a fresh seeded permutation each epoch; it wraps around forever. Global
 * window g of the stream goes to rank g % nranks, so the ranks see disjoint
 * windows whose union is the single-rank stream (with nranks = 1 and
 * file_order this is exactly llm.c's DataLoader). Reads stream from disk: one
 * pread of B*T + 1 tokens per batch. */
typedef struct rp_loader rp_loader;

/* Resume point, a POD for checkpoints. `next_window` counts windows consumed by
 * ALL ranks together, so it is the same on every data-parallel rank and stays
 * meaningful if the number of ranks changes. The other fields are checked on
 * restore so that a checkpoint is not resumed on different data. */
typedef struct {
  uint64_t next_window;   /* global stream position (all ranks, all epochs) */
  uint64_t epoch;         /* next_window / windows per epoch (informational) */
  uint64_t seed;
  uint64_t num_windows;   /* windows per epoch */
  int32_t B, T, file_order, reserved;
} rp_loader_snapshot;

/* data: a directory (uses its files matching *<split>*.bin, sorted), a glob
 * pattern (split unused), or a single .bin file. All shards are opened and
 * validated here, so a bad file fails at startup. */
rp_status rp_loader_open(rp_loader **out, const char *data, const char *split, int B, int T,
                         int file_order, uint64_t seed, int rank, int nranks);
/* inputs[B*T], targets[B*T] (targets = inputs shifted by one token). */
rp_status rp_loader_next(rp_loader *l, int32_t *inputs, int32_t *targets);
void rp_loader_state(const rp_loader *l, rp_loader_snapshot *st);
/* RP_EINVAL if B, T, file_order, seed or the number of windows differ. */
rp_status rp_loader_set_state(rp_loader *l, const rp_loader_snapshot *st);
void rp_loader_reset(rp_loader *l);
void rp_loader_close(rp_loader *l);

/* Packed mode (--pack): the stream is made of documents, from each shard's
 * index (X.docs) or, with eot >= 0 and no index, cut after each end-of-text
 * token. Documents are packed whole into rows of T tokens in file order; one
 * that does not fit the rest of a row starts the next row (the rest is
 * padding), so no document loses its beginning to a row cut; one longer than
 * T is cut into T-token pieces (each its own document). With align > 1 every
 * document (piece) is padded to a multiple of align tokens, the padding part
 * of the document with targets -1 (the per-document zigzag of context
 * parallelism needs lengths divisible by 2P). A window is then B
 * consecutive rows and the rest of the loader (shuffling, ranks, snapshots)
 * works on windows as before. Call before the first batch. */
rp_status rp_loader_set_pack(rp_loader *l, int eot, int align);
struct rp_docs_s;
/* Packed batch: inputs and targets [B*T], docs (B x T) gets each row's
 * documents (padding is a document of its own, tokens 0). A target is the next
 * token of the same document; the last token of each document and all padding
 * have target -1, so nothing is trained to predict across a boundary (with an
 * end-of-text token ending each document, predicting it is trained). */
rp_status rp_loader_next_packed(rp_loader *l, int32_t *inputs, int32_t *targets,
                                struct rp_docs_s *docs);
int rp_loader_is_packed(const rp_loader *l);
/* Padding tokens per real token over the whole packed stream (0 unpacked). */
double rp_loader_pad_fraction(const rp_loader *l);
/* Scans every token of every shard now (one sequential read; shards are small)
 * and returns RP_EFORMAT naming file, position and id of the first token >= V,
 * so bad data fails before step 1; batches read later are checked again.
 * 0 (default) disables the check. */
rp_status rp_loader_set_vocab(rp_loader *l, int V);
size_t rp_loader_num_tokens(const rp_loader *l);      /* all shards */
uint64_t rp_loader_num_windows(const rp_loader *l);   /* per epoch, all ranks */
int rp_loader_num_files(const rp_loader *l);
uint64_t rp_loader_epoch(const rp_loader *l);         /* epoch of this rank's next batch */

/* Snapshot as a JSON object {"next_window":..,"epoch":..,...} and back. */
rp_status rp_loader_snapshot_to_json(const rp_loader_snapshot *st, char *buf, size_t cap);
rp_status rp_loader_snapshot_from_json(const char *json, const char *path,
                                       rp_loader_snapshot *st);

/* ---- tokenizers
 *
 * Byte level: token = byte, V = 256, encodes any text. GPT-2: llm.c's
 * gpt2_tokenizer.bin: uint32 header[256] (magic 20240328, version 1 or 2, vocab
 * size, v2: end-of-text token), then per token a uint8 length and that many
 * bytes. It decodes, and encodes with GPT-2's byte-level BPE: GPT-2's
 * pre-tokenisation pattern, then merges whose ranks are the token ids (true of
 * GPT-2's table: ids 256.. are its merges in order). A table that lacks some
 * single byte decodes only (rp_tokenizer_can_encode 0). */
#define RP_BYTE_VOCAB 256
#define RP_TOKENIZER_MAGIC 20240328

typedef struct rp_tokenizer rp_tokenizer;
rp_status rp_tokenizer_bytes(rp_tokenizer **out);
rp_status rp_tokenizer_load_gpt2(rp_tokenizer **out, const char *path);
void rp_tokenizer_free(rp_tokenizer *tk);
int rp_tokenizer_vocab(const rp_tokenizer *tk);
int rp_tokenizer_eot(const rp_tokenizer *tk);    /* -1 if none */
int rp_tokenizer_can_encode(const rp_tokenizer *tk);
/* Bytes of one token (not NUL terminated); NULL and *len = 0 if out of range. */
const char *rp_tokenizer_token(const rp_tokenizer *tk, int id, size_t *len);
/* *n = tokens written; RP_EINVAL if the table cannot encode, or if cap is too
 * small (cap >= len always suffices). The end-of-text token is never produced
 * from text (its spelling is encoded as ordinary text, as tiktoken's
 * encode_ordinary does). Not thread-safe for one tokenizer (BPE scratch). */
rp_status rp_tokenizer_encode(const rp_tokenizer *tk, const char *text, size_t len,
                              int32_t *out, size_t cap, size_t *n);
/* Printable text: valid UTF-8, '\n' and '\t' are kept, other control bytes and
 * invalid UTF-8 become \xNN, unknown ids <?ID>. Always NUL terminated (truncated
 * to cap); returns the length the full text needs. */
size_t rp_tokenizer_decode(const rp_tokenizer *tk, const int32_t *ids, size_t n, char *buf,
                           size_t cap);
/* Plain helpers for byte tokens (no object). */
void rp_byte_encode(const char *text, size_t len, uint16_t *out);
size_t rp_bytes_printable(const unsigned char *bytes, size_t n, char *buf, size_t cap);

/* ---- prepare: text file -> out_dir/train.bin and out_dir/val.bin as byte
 * tokens, the last val_fraction of the text (in [0, 1); negative means the
 * default 0.1) going to val.bin. Streams the text; creates out_dir. */
#define RP_PREPARE_VAL_DEFAULT 0.1
rp_status rp_prepare(const char *text_path, const char *out_dir, double val_fraction);
/* The same with GPT-2 BPE tokens (rp_tokenizer_encode): an end-of-text token
 * first (where the table has one: a document starts, as llm.c's data scripts
 * do), then the text's ids; the last val_fraction of the tokens go to val.bin.
 * The ids are held in memory (2 bytes per token) before the shards are written. */
rp_status rp_prepare_bpe(const char *text_path, const char *out_dir, double val_fraction,
                         const rp_tokenizer *tk);
/* The same, and with doc_sep (escapes \n, \t, \\; NULL: none) the documents:
 * each ends after a separator (which it keeps, like an end-of-text token; the
 * train/val cut also ends one), their lengths written to train.docs / val.docs
 * beside the unchanged shards. */
rp_status rp_prepare_docs(const char *text_path, const char *out_dir, double val_fraction,
                          const char *doc_sep);

#endif
